//! The topology model: [`Topology`] with its CPUs, caches and NUMA nodes, what
//! questions it answers, and the error of reading it. Filled by `read`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::FileError;

/// Where the CPU directories live, relative to the sysfs root.
pub(super) const CPU_DIR: &str = "devices/system/cpu";
/// Where the NUMA node directories live, relative to the sysfs root.
pub(super) const NODE_DIR: &str = "devices/system/node";

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file could not be read or does not parse.
    #[error(transparent)]
    File(#[from] FileError),
    /// Neither the online list nor any `cpuN` directory exists: not a sysfs tree.
    #[error("no CPUs found under {path}: not a sysfs tree (expected {CPU_DIR}/online or cpuN directories)")]
    NoCpus { path: PathBuf },
}

/// The machine's CPUs as sysfs describes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// CPUs the kernel runs tasks on now.
    pub online: CpuSet,
    /// CPUs that could ever be brought online (sized at boot).
    pub possible: CpuSet,
    /// CPUs physically present.
    pub present: CpuSet,
    /// Possible CPUs that are not online.
    pub offline: CpuSet,
    /// CPUs isolated from the scheduler at boot (`isolcpus=`).
    pub isolated: CpuSet,
    /// One entry per online CPU, ascending by id.
    pub cpus: Vec<Cpu>,
    /// NUMA nodes, ascending by id.
    pub nodes: Vec<Node>,
    /// What could not be read and what was assumed instead.
    pub warnings: Vec<String>,
    /// Where the core types came from (`devices/cpu_core/cpus`, or the file whose
    /// values fall into two clear capacity classes); `None`: one kind of core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_types_from: Option<String>,
    /// `amd_x3d_mode` of the `amd_x3d_vcache` device (`cache` or `frequency`), where
    /// the driver is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x3d_mode: Option<String>,
}

/// One online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    pub cpu: u32,
    /// `physical_package_id`: the socket.
    pub package: u32,
    /// `die_id` within the package (0 where the kernel does not report dies).
    pub die: u32,
    /// `cluster_id`: CPUs sharing an L2 or a cluster interconnect; `None` where the
    /// kernel reports none (missing file, -1, or x86's invalid id 65535).
    pub cluster: Option<u32>,
    /// `core_id`, unique within a package (and die), not across them.
    pub core: u32,
    /// NUMA node.
    pub node: u32,
    /// CPUs sharing this core (SMT threads), itself included.
    pub siblings: CpuSet,
    /// CPUs in the same cluster, itself included; the core's CPUs where the kernel
    /// reports no clusters.
    pub cluster_cpus: CpuSet,
    /// CPUs in the same die, itself included.
    pub die_cpus: CpuSet,
    /// CPUs in the same package, itself included.
    pub package_cpus: CpuSet,
    /// Caches, ordered by level then type (L1d, L1i, L2, L3...). Empty when the
    /// kernel exposes no cache information.
    pub caches: Vec<Cache>,
    /// Performance or efficiency core on hybrid parts; `None` on uniform parts.
    pub core_type: Option<CoreType>,
    /// `cpu_capacity` (1024 = the fastest CPU) where the kernel reports it.
    pub capacity: Option<u32>,
    /// `cpufreq/cpuinfo_max_freq` in kHz where cpufreq is present.
    pub max_freq_khz: Option<u64>,
    /// `cpufreq/amd_pstate_prefcore_ranking`: higher is preferred by the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefcore_ranking: Option<u32>,
    /// `acpi_cppc/highest_perf`, else `cpufreq/amd_pstate_highest_perf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_perf: Option<u32>,
}

/// One cache as seen from one CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u8,
    /// sysfs `type`.
    #[serde(rename = "type")]
    pub kind: CacheKind,
    /// Size in bytes, where reported.
    pub size_bytes: Option<u64>,
    /// The cache's `id`, unique among caches of the same level and type.
    pub id: Option<u32>,
    /// CPUs sharing this cache, the observing CPU included.
    pub shared: CpuSet,
}

/// What a cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    Data,
    Instruction,
    Unified,
}

/// Core type of a hybrid part, from the `cpu_core` and `cpu_atom` PMU CPU lists or
/// from clear capacity classes (see [`classes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreType {
    /// Listed in `devices/cpu_core/cpus` (Intel P-core).
    Performance,
    /// Listed in `devices/cpu_atom/cpus` (Intel E-core).
    Efficiency,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: u32,
    /// Online CPUs of this node (may be empty: memory-only nodes).
    pub cpus: CpuSet,
    /// SLIT distance to each node by id (10 = local).
    pub distances: BTreeMap<u32, u32>,
}

impl fmt::Display for CacheKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CacheKind::Data => "d",
            CacheKind::Instruction => "i",
            CacheKind::Unified => "",
        })
    }
}

impl fmt::Display for CoreType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CoreType::Performance => "P",
            CoreType::Efficiency => "E",
        })
    }
}

impl Cache {
    /// `L1d`, `L1i`, `L2`, `L3`.
    pub fn name(&self) -> String {
        format!("L{}{}", self.level, self.kind)
    }
}

impl Topology {
    /// Online CPUs that are not isolated: the CPUs pinnerd may offer.
    pub fn usable(&self) -> CpuSet {
        self.online.difference(&self.isolated)
    }

    /// The entry of an online CPU.
    pub fn cpu(&self, cpu: u32) -> Option<&Cpu> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.cpu)
            .ok()
            .map(|i| &self.cpus[i])
    }

    /// SMT siblings of an online CPU, itself included.
    pub fn siblings(&self, cpu: u32) -> Option<&CpuSet> {
        self.cpu(cpu).map(|c| &c.siblings)
    }

    /// The last-level cache of an online CPU, if cache information is present.
    pub fn llc_cache(&self, cpu: u32) -> Option<&Cache> {
        self.cpu(cpu).and_then(Cpu::llc)
    }

    /// CPUs sharing the last-level cache with an online CPU, itself included; `None`
    /// when the kernel exposes no cache information.
    pub fn llc(&self, cpu: u32) -> Option<&CpuSet> {
        self.llc_cache(cpu).map(|c| &c.shared)
    }

    pub fn package_of(&self, cpu: u32) -> Option<u32> {
        self.cpu(cpu).map(|c| c.package)
    }

    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.cpu(cpu).map(|c| c.node)
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// SLIT distance from node `a` to node `b`.
    pub fn node_distance(&self, a: u32, b: u32) -> Option<u32> {
        self.node(a)?.distances.get(&b).copied()
    }

    /// Package ids, ascending.
    pub fn packages(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self.cpus.iter().map(|c| c.package).collect();
        set.into_iter().collect()
    }

    /// Online CPUs of a package.
    pub fn package_cpus(&self, package: u32) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.package == package)
            .map(|c| c.cpu)
            .collect()
    }

    /// The distinct SMT sibling sets (one per physical core), ordered by first CPU.
    pub fn cores(&self) -> Vec<CpuSet> {
        distinct(self.cpus.iter().map(|c| c.siblings.clone()))
    }

    /// The distinct last-level-cache sharing sets, ordered by first CPU; CPUs without
    /// cache information are left out.
    pub fn llc_groups(&self) -> Vec<CpuSet> {
        distinct(
            self.cpus
                .iter()
                .filter_map(|c| c.llc().map(|l| l.shared.clone())),
        )
    }

    /// Whether the kernel reports hybrid core types (P- and E-cores).
    pub fn is_hybrid(&self) -> bool {
        self.cpus.iter().any(|c| c.core_type.is_some())
    }

    /// Whether any core runs more than one hardware thread.
    pub fn has_smt(&self) -> bool {
        self.cpus.iter().any(|c| c.siblings.len() > 1)
    }
}

impl Cpu {
    /// The last-level cache: the highest level holding data (unified or data cache),
    /// ties broken by the widest sharing set.
    pub fn llc(&self) -> Option<&Cache> {
        self.caches
            .iter()
            .filter(|c| c.kind != CacheKind::Instruction)
            .max_by_key(|c| (c.level, c.shared.len()))
    }

    /// The cache of a given level holding data (unified or data).
    pub fn data_cache(&self, level: u8) -> Option<&Cache> {
        self.caches
            .iter()
            .find(|c| c.level == level && c.kind != CacheKind::Instruction)
    }
}

/// Sets in order of first appearance, duplicates removed, ordered by first CPU.
fn distinct(sets: impl Iterator<Item = CpuSet>) -> Vec<CpuSet> {
    let mut out: Vec<CpuSet> = Vec::new();
    for set in sets {
        if !out.contains(&set) {
            out.push(set);
        }
    }
    out.sort_by_key(|s| s.first());
    out
}
