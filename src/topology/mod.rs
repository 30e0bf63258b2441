//! CPU topology discovered from sysfs: which CPUs exist and are online, and for each
//! online CPU its package, die, cluster, core, SMT siblings, caches (with the CPUs that
//! share each one), NUMA node, core type (hybrid parts, or clear capacity classes),
//! preferred-core ranking and maximum frequency; plus NUMA node distances and the AMD
//! X3D mode (`kinds`).
//!
//! ```text
//! SysRoot ─► devices/system/cpu/{online,possible,present,offline,isolated}
//!          ─► devices/system/cpu/cpuN/{topology,cache/indexM,cpufreq,cpu_capacity}
//!          ─► devices/system/node/{online,nodeN/cpulist,nodeN/distance}
//!          ─► devices/cpu_core/cpus, devices/cpu_atom/cpus
//!          ─► cpuN/{acpi_cppc/highest_perf,cpufreq/amd_pstate_*}
//!          ─► bus/platform/drivers/amd_x3d_vcache/*/amd_x3d_mode    ─► Topology
//! ```
//!
//! Rules: a missing file degrades to what is known and adds a warning (containers, old
//! kernels and VMs hide parts of sysfs); a file that exists but does not parse is an
//! error naming the file, line and column. Offline CPUs are listed as offline and never
//! appear in [`Topology::cpus`] or [`Topology::usable`].
//!
//! Must not touch: measuring, placement decisions, the real `/sys` path (see `sysroot`).

mod kinds;
mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use kinds::{classes, LlcGroup};
pub(crate) use parse::parse_list;
use parse::{parse_error, parse_numbers, parse_one, parse_size};

use crate::cpuset::CpuSet;
use crate::sysroot::{self, SysRoot};

/// Where the CPU directories live, relative to the sysfs root.
const CPU_DIR: &str = "devices/system/cpu";
/// Where the NUMA node directories live, relative to the sysfs root.
const NODE_DIR: &str = "devices/system/node";

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file's content does not parse.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
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
    /// Reads the topology from the sysfs root of `root`.
    pub fn discover(root: &SysRoot) -> Result<Topology, TopologyError> {
        Reader::new(root).read()
    }

    /// Reads the topology of a fixture or captured tree; the same as [`discover`],
    /// named for call sites that read a tree other than the running machine's.
    ///
    /// [`discover`]: Topology::discover
    pub fn from_sysroot(root: &SysRoot) -> Result<Topology, TopologyError> {
        Topology::discover(root)
    }

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

/// Collects the per-CPU degradations so that one missing file across 256 CPUs makes
/// one warning line, not 256.
#[derive(Default)]
struct Degraded {
    /// (what is missing, what was assumed) → CPUs affected.
    by_cause: BTreeMap<(String, String), CpuSet>,
}

impl Degraded {
    fn add(&mut self, cpu: u32, missing: &str, assumed: &str) {
        self.by_cause
            .entry((missing.to_string(), assumed.to_string()))
            .or_default()
            .insert(cpu);
    }

    fn into_warnings(self) -> impl Iterator<Item = String> {
        self.by_cause
            .into_iter()
            .map(|((missing, assumed), cpus)| format!("CPUs {cpus}: {missing}; {assumed}"))
    }
}

/// CPU id → NUMA node id.
type CpuNodes = BTreeMap<u32, u32>;

struct Reader<'a> {
    root: &'a SysRoot,
    warnings: Vec<String>,
    degraded: Degraded,
    /// (CPU, field) pairs whose value was assumed, not read: [`reconcile`] replaces
    /// them with what other CPUs say about this one.
    guessed: BTreeSet<(u32, String)>,
}

impl<'a> Reader<'a> {
    fn new(root: &'a SysRoot) -> Self {
        Reader {
            root,
            warnings: Vec::new(),
            degraded: Degraded::default(),
            guessed: BTreeSet::new(),
        }
    }

    fn cpu_path(&self, rel: &str) -> PathBuf {
        self.root.sys_path(Path::new(CPU_DIR).join(rel))
    }

    fn read(mut self) -> Result<Topology, TopologyError> {
        let online = match self.list(&self.cpu_path("online"))? {
            Some(set) => set,
            None => self.online_from_dirs()?,
        };
        if online.is_empty() {
            return Err(TopologyError::NoCpus {
                path: self.cpu_path(""),
            });
        }
        let offline_file = self.list(&self.cpu_path("offline"))?;
        let possible = match self.list(&self.cpu_path("possible"))? {
            Some(set) => set,
            None => {
                let assumed = online.union(offline_file.as_ref().unwrap_or(&CpuSet::new()));
                self.warnings.push(format!(
                    "{CPU_DIR}/possible missing; assumed online and offline CPUs ({assumed})"
                ));
                assumed
            }
        };
        let present = match self.list(&self.cpu_path("present"))? {
            Some(set) => set,
            None => {
                self.warnings.push(format!(
                    "{CPU_DIR}/present missing; assumed the possible CPUs ({possible})"
                ));
                possible.clone()
            }
        };
        // The kernel's `offline` is possible minus online; computing it keeps the
        // invariant even where the file is missing or disagrees with a racing hotplug.
        let offline = possible.difference(&online);
        let isolated = match self.list(&self.cpu_path("isolated"))? {
            Some(set) => set,
            None => {
                self.warnings.push(format!(
                    "{CPU_DIR}/isolated missing; assumed no isolated CPUs"
                ));
                CpuSet::new()
            }
        };

        let core_type = self.core_types()?;
        let mut core_types_from =
            (!core_type.is_empty()).then(|| "devices/cpu_core/cpus".to_string());
        let (nodes, cpu_node) = self.nodes(&online)?;

        let mut nodes = nodes;
        let mut cpus = Vec::with_capacity(online.len());
        for cpu in &online {
            let node = match cpu_node.get(&cpu) {
                Some(&node) => node,
                None => match nodes.first_mut() {
                    Some(first) => {
                        self.degraded.add(
                            cpu,
                            "in no node's cpulist",
                            &format!("assumed node {}", first.id),
                        );
                        first.cpus.insert(cpu);
                        first.id
                    }
                    None => 0,
                },
            };
            let mut entry = self.cpu(cpu, node)?;
            entry.core_type = core_type.get(&cpu).copied();
            (entry.prefcore_ranking, entry.highest_perf) = self.perf(cpu)?;
            cpus.push(entry);
        }
        if core_types_from.is_none() {
            if let Some((from, kinds)) = self.capacity_kinds(&cpus)? {
                for c in cpus.iter_mut() {
                    c.core_type = kinds.get(&c.cpu).copied();
                }
                core_types_from = Some(from);
            }
        }
        let x3d_mode = self.x3d_mode()?;
        reconcile(&mut cpus, &self.guessed);
        let nodes = if nodes.is_empty() {
            vec![Node {
                id: 0,
                cpus: online.clone(),
                distances: BTreeMap::from([(0, 10)]),
            }]
        } else {
            nodes
        };

        let mut warnings = self.warnings;
        warnings.extend(self.degraded.into_warnings());
        Ok(Topology {
            online,
            possible,
            present,
            offline,
            isolated,
            cpus,
            nodes,
            warnings,
            core_types_from,
            x3d_mode,
        })
    }

    /// Without `cpu/online`: every `cpuN` directory whose `online` file is absent
    /// (CPU 0 often cannot be offlined and has none) or reads 1.
    fn online_from_dirs(&mut self) -> Result<CpuSet, TopologyError> {
        let dir = self.cpu_path("");
        let names = sysroot::list_dir(&dir)
            .map_err(|source| TopologyError::Read {
                path: dir.clone(),
                source,
            })?
            .unwrap_or_default();
        let mut online = CpuSet::new();
        for name in names {
            let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let flag: Option<u32> = self.num(&self.cpu_path(&format!("cpu{cpu}/online")))?;
            if flag != Some(0) {
                online.insert(cpu);
            }
        }
        if !online.is_empty() {
            self.warnings.push(format!(
                "{CPU_DIR}/online missing; online CPUs taken from the cpuN directories ({online})"
            ));
        }
        Ok(online)
    }

    fn core_types(&mut self) -> Result<BTreeMap<u32, CoreType>, TopologyError> {
        let mut types = BTreeMap::new();
        for (pmu, kind) in [
            ("devices/cpu_core/cpus", CoreType::Performance),
            ("devices/cpu_atom/cpus", CoreType::Efficiency),
        ] {
            if let Some(set) = self.list(&self.root.sys_path(pmu))? {
                for cpu in &set {
                    types.insert(cpu, kind);
                }
            }
        }
        Ok(types)
    }

    /// NUMA nodes and the node of each CPU; empty when the kernel has no NUMA support.
    fn nodes(&mut self, online: &CpuSet) -> Result<(Vec<Node>, CpuNodes), TopologyError> {
        let base = self.root.sys_path(NODE_DIR);
        let ids = match self.list(&base.join("online"))? {
            Some(ids) => ids,
            None => {
                let listed = sysroot::list_dir(&base)
                    .map_err(|source| TopologyError::Read {
                        path: base.clone(),
                        source,
                    })?
                    .unwrap_or_default();
                let ids: CpuSet = listed
                    .iter()
                    .filter_map(|n| n.strip_prefix("node")?.parse().ok())
                    .collect();
                if ids.is_empty() {
                    self.warnings.push(format!(
                        "{NODE_DIR} missing (kernel without NUMA?); assumed one node 0 holding every CPU"
                    ));
                    return Ok((Vec::new(), BTreeMap::new()));
                }
                self.warnings.push(format!(
                    "{NODE_DIR}/online missing; nodes taken from the nodeN directories ({ids})"
                ));
                ids
            }
        };
        let order: Vec<u32> = ids.iter().collect();
        let mut nodes = Vec::new();
        let mut cpu_node = BTreeMap::new();
        for &id in &order {
            let dir = base.join(format!("node{id}"));
            let cpus = match self.list(&dir.join("cpulist"))? {
                Some(set) => set.intersection(online),
                None => {
                    self.warnings.push(format!(
                        "{NODE_DIR}/node{id}/cpulist missing; node {id} assumed to hold no CPUs"
                    ));
                    CpuSet::new()
                }
            };
            for cpu in &cpus {
                cpu_node.entry(cpu).or_insert(id);
            }
            let path = dir.join("distance");
            let mut distances = BTreeMap::new();
            match self.text(&path)? {
                Some(text) => {
                    let values = parse_numbers::<u32>(&path, &text)?;
                    if values.len() != order.len() {
                        self.warnings.push(format!(
                            "{NODE_DIR}/node{id}/distance lists {} distances for {} nodes; distances of node {id} ignored",
                            values.len(),
                            order.len()
                        ));
                    } else {
                        distances = order.iter().copied().zip(values).collect();
                    }
                }
                None => self.warnings.push(format!(
                    "{NODE_DIR}/node{id}/distance missing; distances of node {id} unknown"
                )),
            }
            nodes.push(Node {
                id,
                cpus,
                distances,
            });
        }
        Ok((nodes, cpu_node))
    }

    fn cpu(&mut self, cpu: u32, node: u32) -> Result<Cpu, TopologyError> {
        let dir = format!("cpu{cpu}");
        let topo_dir = self.cpu_path(&format!("{dir}/topology"));
        let topo = |f: &str| topo_dir.join(f);
        let alone: CpuSet = [cpu].into_iter().collect();

        let package = self.id_or(
            cpu,
            &topo("physical_package_id"),
            0,
            "package 0 unless a CPU of its package says otherwise",
        )?;
        let die = self.id_or(
            cpu,
            &topo("die_id"),
            0,
            "die 0 unless a CPU of its die says otherwise",
        )?;
        let core = self.id_or(cpu, &topo("core_id"), cpu, "a core id equal to the CPU id")?;
        let cluster = match self.text(&topo("cluster_id"))? {
            None => None,
            Some(text) => match parse_one::<i64>(&topo("cluster_id"), &text)? {
                // x86 prints its invalid id (0xffff) where no L2 cluster is known.
                id if id < 0 || id == 0xffff => None,
                id => u32::try_from(id).ok(),
            },
        };

        let siblings = self.set_or(
            cpu,
            &[topo("core_cpus_list"), topo("thread_siblings_list")],
            &alone,
            "SMT siblings taken from the CPUs listing it, else one thread per core",
        )?;
        let package_cpus = self.set_or(
            cpu,
            &[topo("package_cpus_list"), topo("core_siblings_list")],
            &siblings,
            "package CPUs taken from the CPUs listing it, else the core's CPUs",
        )?;
        // Kernels before 5.2 have neither die file; the die_id warning covers both.
        let die_cpus = if topo("die_id").exists() {
            self.set_or(
                cpu,
                &[topo("die_cpus_list")],
                &package_cpus,
                "die CPUs taken from the CPUs listing it, else the whole package",
            )?
        } else {
            self.set_at(&[topo("die_cpus_list")])?
                .unwrap_or_else(|| package_cpus.clone())
        };
        // Clusters are an optional level (kernels before 5.16 and most x86 parts have
        // none to report): no cluster list simply means the core is its own cluster.
        let cluster_cpus = match self.set_at(&[topo("cluster_cpus_list")])? {
            Some(set) => set,
            None => {
                // Not a warning, but follows the siblings once they are reconciled.
                self.guessed.insert((cpu, "cluster_cpus_list".to_string()));
                siblings.clone()
            }
        };

        let caches = self.caches(cpu)?;
        let capacity = self.num(&self.cpu_path(&format!("{dir}/cpu_capacity")))?;
        let max_freq_khz = self.num(&self.cpu_path(&format!("{dir}/cpufreq/cpuinfo_max_freq")))?;

        Ok(Cpu {
            cpu,
            package,
            die,
            cluster,
            core,
            node,
            siblings,
            cluster_cpus,
            die_cpus,
            package_cpus,
            caches,
            core_type: None,
            capacity,
            max_freq_khz,
            prefcore_ranking: None,
            highest_perf: None,
        })
    }

    fn caches(&mut self, cpu: u32) -> Result<Vec<Cache>, TopologyError> {
        let dir = self.cpu_path(&format!("cpu{cpu}/cache"));
        let names = sysroot::list_dir(&dir).map_err(|source| TopologyError::Read {
            path: dir.clone(),
            source,
        })?;
        let mut indices: Vec<u32> = names
            .unwrap_or_default()
            .iter()
            .filter_map(|n| n.strip_prefix("index")?.parse().ok())
            .collect();
        indices.sort_unstable();
        if indices.is_empty() {
            self.degraded.add(
                cpu,
                "no cache information (cpuN/cache missing or empty)",
                "caches and LLC unknown",
            );
            return Ok(Vec::new());
        }
        let mut caches = Vec::new();
        for index in indices {
            let idx = dir.join(format!("index{index}"));
            let level: Option<u8> = self.num(&idx.join("level"))?;
            let kind_path = idx.join("type");
            let kind = match self.text(&kind_path)? {
                Some(text) => Some(match text.trim() {
                    "Data" => CacheKind::Data,
                    "Instruction" => CacheKind::Instruction,
                    "Unified" => CacheKind::Unified,
                    other => {
                        return Err(parse_error(
                            &kind_path,
                            &text,
                            other,
                            "expected Data, Instruction or Unified",
                        ))
                    }
                }),
                None => None,
            };
            let (Some(level), Some(kind)) = (level, kind) else {
                self.degraded
                    .add(cpu, "a cache without level or type", "that cache ignored");
                continue;
            };
            let shared = match self.set_at(&[idx.join("shared_cpu_list")])? {
                Some(set) => set,
                None => {
                    let map = idx.join("shared_cpu_map");
                    match self.text(&map)? {
                        Some(text) => CpuSet::parse_hex_mask(&text)
                            .map_err(|e| parse_error(&map, &text, &e.token, e.reason))?,
                        None => {
                            self.degraded.add(
                                cpu,
                                "a cache without shared_cpu_list",
                                "sharing taken from the CPUs listing it, else private",
                            );
                            self.guessed.insert((cpu, cache_key(level, kind)));
                            [cpu].into_iter().collect()
                        }
                    }
                }
            };
            let size_path = idx.join("size");
            let size_bytes = match self.text(&size_path)? {
                Some(text) => Some(parse_size(&size_path, &text)?),
                None => None,
            };
            let id = self.num(&idx.join("id"))?;
            caches.push(Cache {
                level,
                kind,
                size_bytes,
                id,
                shared,
            });
        }
        caches.sort_by_key(|c| (c.level, c.kind));
        Ok(caches)
    }

    /// A non-negative id, or `default` with a warning when missing or negative (the
    /// kernel prints -1 for ids an architecture does not define).
    fn id_or(
        &mut self,
        cpu: u32,
        path: &Path,
        default: u32,
        assumed: &str,
    ) -> Result<u32, TopologyError> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        match self.text(path)? {
            Some(text) => match parse_one::<i64>(path, &text)? {
                id if id >= 0 => u32::try_from(id).map_err(|_| {
                    parse_error(path, &text, text.trim(), "id does not fit in 32 bits")
                }),
                _ => {
                    self.degraded.add(
                        cpu,
                        &format!("topology/{name} is -1"),
                        &format!("assumed {assumed}"),
                    );
                    self.guessed.insert((cpu, name));
                    Ok(default)
                }
            },
            None => {
                self.degraded.add(
                    cpu,
                    &format!("topology/{name} missing"),
                    &format!("assumed {assumed}"),
                );
                self.guessed.insert((cpu, name));
                Ok(default)
            }
        }
    }

    /// The first of `paths` that exists, or `default` with a warning.
    fn set_or(
        &mut self,
        cpu: u32,
        paths: &[PathBuf],
        default: &CpuSet,
        assumed: &str,
    ) -> Result<CpuSet, TopologyError> {
        match self.set_at(paths)? {
            Some(set) => Ok(set),
            None => {
                let name = paths[0]
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.degraded
                    .add(cpu, &format!("topology/{name} missing"), assumed);
                self.guessed.insert((cpu, name));
                Ok(default.clone())
            }
        }
    }

    fn set_at(&mut self, paths: &[PathBuf]) -> Result<Option<CpuSet>, TopologyError> {
        for path in paths {
            if let Some(set) = self.list(path)? {
                return Ok(Some(set));
            }
        }
        Ok(None)
    }

    fn text(&self, path: &Path) -> Result<Option<String>, TopologyError> {
        sysroot::read_optional(path).map_err(|source| TopologyError::Read {
            path: path.to_path_buf(),
            source,
        })
    }

    fn list(&self, path: &Path) -> Result<Option<CpuSet>, TopologyError> {
        match self.text(path)? {
            Some(text) => parse_list(path, &text).map(Some),
            None => Ok(None),
        }
    }

    fn num<T: FromStr>(&self, path: &Path) -> Result<Option<T>, TopologyError> {
        match self.text(path)? {
            Some(text) => parse_one(path, &text).map(Some),
            None => Ok(None),
        }
    }
}

fn cache_key(level: u8, kind: CacheKind) -> String {
    format!("cache L{level}{kind}")
}

/// Replaces assumed values with what the other CPUs say: if CPU 0's sibling list is
/// missing but CPU 4 lists `0,4`, CPU 0's siblings are `0,4` too. Keeps the relations
/// symmetric, which placement relies on, when a single file is missing.
fn reconcile(cpus: &mut [Cpu], guessed: &BTreeSet<(u32, String)>) {
    if guessed.is_empty() {
        return;
    }
    let is_guess = |cpu: u32, field: &str| guessed.contains(&(cpu, field.to_string()));
    type SetField = fn(&mut Cpu) -> &mut CpuSet;
    let set_fields: [(&str, SetField); 3] = [
        ("core_cpus_list", |c| &mut c.siblings),
        ("package_cpus_list", |c| &mut c.package_cpus),
        ("die_cpus_list", |c| &mut c.die_cpus),
    ];
    for (field, get) in set_fields {
        for i in 0..cpus.len() {
            let cpu = cpus[i].cpu;
            if !is_guess(cpu, field) {
                continue;
            }
            let known = cpus.iter_mut().find_map(|d| {
                let set = get(d).clone();
                (d.cpu != cpu && !is_guess(d.cpu, field) && set.contains(cpu)).then_some(set)
            });
            if let Some(set) = known {
                *get(&mut cpus[i]) = set;
            }
        }
    }
    for c in cpus.iter_mut() {
        if is_guess(c.cpu, "cluster_cpus_list") {
            c.cluster_cpus = c.siblings.clone();
        }
    }
    type IdField = (fn(&Cpu) -> u32, fn(&mut Cpu, u32), fn(&Cpu) -> &CpuSet);
    let id_fields: [(&str, IdField); 2] = [
        (
            "physical_package_id",
            (|c| c.package, |c, v| c.package = v, |c| &c.package_cpus),
        ),
        ("die_id", (|c| c.die, |c, v| c.die = v, |c| &c.die_cpus)),
    ];
    for (field, (get, put, group)) in id_fields {
        for i in 0..cpus.len() {
            let cpu = cpus[i].cpu;
            if !is_guess(cpu, field) {
                continue;
            }
            let known = cpus
                .iter()
                .find(|d| d.cpu != cpu && !is_guess(d.cpu, field) && group(d).contains(cpu))
                .map(get);
            if let Some(id) = known {
                put(&mut cpus[i], id);
            }
        }
    }
    for i in 0..cpus.len() {
        let cpu = cpus[i].cpu;
        for k in 0..cpus[i].caches.len() {
            let (level, kind) = (cpus[i].caches[k].level, cpus[i].caches[k].kind);
            let key = cache_key(level, kind);
            if !is_guess(cpu, &key) {
                continue;
            }
            let known = cpus.iter().find_map(|d| {
                if d.cpu == cpu || is_guess(d.cpu, &key) {
                    return None;
                }
                d.caches
                    .iter()
                    .find(|c| c.level == level && c.kind == kind && c.shared.contains(cpu))
                    .map(|c| c.shared.clone())
            });
            if let Some(shared) = known {
                cpus[i].caches[k].shared = shared;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_at(result: Result<impl fmt::Debug, TopologyError>) -> (usize, usize, String) {
        match result.unwrap_err() {
            TopologyError::Parse {
                line,
                column,
                message,
                ..
            } => (line, column, message),
            other => panic!("not a parse error: {other}"),
        }
    }

    #[test]
    fn sizes() {
        let p = Path::new("size");
        assert_eq!(parse_size(p, "32K\n").unwrap(), 32 * 1024);
        assert_eq!(parse_size(p, "8M").unwrap(), 8 << 20);
        assert_eq!(parse_size(p, "512").unwrap(), 512);
        let (line, col, msg) = err_at(parse_size(p, "  12Q\n"));
        assert_eq!((line, col), (1, 3));
        assert!(msg.contains("12Q"), "{msg}");
    }

    #[test]
    fn list_errors_name_line_and_column() {
        let p = Path::new("online");
        assert_eq!(parse_list(p, "0-3,8\n").unwrap().to_string(), "0-3,8");
        let (line, col, msg) = err_at(parse_list(p, "0-3,x\n"));
        assert_eq!((line, col), (1, 5));
        assert!(msg.contains("\"x\""), "{msg}");
        let (_, col, _) = err_at(parse_list(p, "0,,2"));
        assert_eq!(col, 3);
        let (_, col, msg) = err_at(parse_list(p, "0,7-3"));
        assert_eq!(col, 3);
        assert!(msg.contains("reversed"), "{msg}");
    }

    #[test]
    fn numbers_errors_point_at_the_token() {
        let p = Path::new("distance");
        assert_eq!(parse_numbers::<u32>(p, "10 21\n").unwrap(), vec![10, 21]);
        let (line, col, _) = err_at(parse_numbers::<u32>(p, "10 1 1x\n"));
        assert_eq!((line, col), (1, 6));
        let (line, col, msg) = err_at(parse_one::<u32>(p, "\n"));
        assert_eq!((line, col), (1, 1));
        assert!(msg.contains("empty"), "{msg}");
    }
}
