//! What makes two CPUs at the same distance unequal: core kinds (from the hybrid PMU
//! lists, else from clear capacity classes), preferred-core rankings, the AMD X3D mode,
//! and the L3 each last-level-cache group offers per core.
//!
//! ```text
//! cpuN/cpu_capacity ─┐
//! cpuN/acpi_cppc/highest_perf ─┼─► classes ─► Cpu::core_type (when no PMU list names them)
//! cpuN/cpufreq/amd_pstate_highest_perf ─┘
//! cpuN/cpufreq/amd_pstate_prefcore_ranking ─► Cpu::prefcore_ranking
//! bus/platform/drivers/amd_x3d_vcache/*/amd_x3d_mode ─► Topology::x3d_mode
//! ```
//!
//! Must not touch: placement decisions (see `shape`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{CoreType, Cpu, Topology, TopologyError, CPU_DIR};
use super::parse::parse_error;
use super::read::Reader;
use crate::cpuset::CpuSet;

/// The files whose values may split the CPUs into capacity classes, in the order tried
/// (relative to `cpuN/`).
const CAPACITY_FILES: [&str; 3] = [
    "cpu_capacity",
    "acpi_cppc/highest_perf",
    "cpufreq/amd_pstate_highest_perf",
];

/// CPU → its kind.
type Kinds = BTreeMap<u32, CoreType>;

/// Where the X3D driver binds its device.
const X3D_DRIVER: &str = "bus/platform/drivers/amd_x3d_vcache";

/// The lower class's best may reach at most this fraction of the upper class's worst:
/// a clear gap, not the few percent preferred-core rankings differ by.
const CLASS_GAP: f64 = 0.75;
/// Within one class the lowest value is at least this fraction of the highest.
const CLASS_SPREAD: f64 = 0.85;

/// Splits per-CPU capacity values into performance and efficiency classes, or `None`
/// when they do not fall into two clear classes: the largest gap between neighbouring
/// distinct values must leave the lower side at most 75% of the upper, and each side
/// must be tight (its lowest within 85% of its highest). Values all equal, or spread
/// evenly (preferred-core rankings), give `None`.
pub fn classes(values: &BTreeMap<u32, u64>) -> Option<BTreeMap<u32, CoreType>> {
    let mut distinct: Vec<u64> = values.values().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 || distinct[0] == 0 {
        return None;
    }
    let ratio = |lo: u64, hi: u64| lo as f64 / hi as f64;
    let split = (1..distinct.len()).min_by(|&a, &b| {
        ratio(distinct[a - 1], distinct[a]).total_cmp(&ratio(distinct[b - 1], distinct[b]))
    })?;
    let (lower, upper) = distinct.split_at(split);
    let clear = ratio(lower[lower.len() - 1], upper[0]) <= CLASS_GAP
        && ratio(lower[0], lower[lower.len() - 1]) >= CLASS_SPREAD
        && ratio(upper[0], upper[upper.len() - 1]) >= CLASS_SPREAD;
    clear.then(|| {
        values
            .iter()
            .map(|(&cpu, &v)| {
                let kind = if v >= upper[0] {
                    CoreType::Performance
                } else {
                    CoreType::Efficiency
                };
                (cpu, kind)
            })
            .collect()
    })
}

/// One last-level-cache group: its CPUs, the L3 (or LLC) they share and what each of
/// its cores gets of it; the facts `prefer = "cache" | "frequency"` compares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlcGroup {
    /// Online CPUs sharing the cache.
    pub cpus: CpuSet,
    /// The cache's level (3 on most parts).
    pub level: u8,
    /// Its size in bytes, where reported.
    pub size_bytes: Option<u64>,
    /// Physical cores (SMT groups) among `cpus`.
    pub cores: usize,
    /// `size_bytes / cores`.
    pub bytes_per_core: Option<u64>,
    /// The highest preferred-core ranking among `cpus`.
    pub best_ranking: Option<u32>,
    /// The highest maximum frequency among `cpus` (kHz).
    pub max_freq_khz: Option<u64>,
}

impl Topology {
    /// The kind of an online CPU: its core type, and on a machine with one kind of
    /// core, every CPU is a performance CPU.
    pub fn kind_of(&self, cpu: u32) -> Option<CoreType> {
        self.cpu(cpu)
            .map(|c| c.core_type.unwrap_or(CoreType::Performance))
    }

    /// Online CPUs of one kind.
    pub fn cpus_of_kind(&self, kind: CoreType) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.core_type.unwrap_or(CoreType::Performance) == kind)
            .map(|c| c.cpu)
            .collect()
    }

    /// The last-level-cache groups with their sizes, ordered by first CPU.
    pub fn llc_summary(&self) -> Vec<LlcGroup> {
        self.llc_groups()
            .into_iter()
            .map(|cpus| {
                let members: Vec<&Cpu> = cpus.iter().filter_map(|c| self.cpu(c)).collect();
                let cache = members.first().and_then(|c| c.llc());
                let mut cores: Vec<Option<u32>> =
                    members.iter().map(|c| c.siblings.first()).collect();
                cores.sort_unstable();
                cores.dedup();
                let size_bytes = cache.and_then(|c| c.size_bytes);
                LlcGroup {
                    level: cache.map_or(0, |c| c.level),
                    size_bytes,
                    cores: cores.len(),
                    bytes_per_core: size_bytes.map(|s| s / cores.len().max(1) as u64),
                    best_ranking: members.iter().filter_map(|c| c.prefcore_ranking).max(),
                    max_freq_khz: members.iter().filter_map(|c| c.max_freq_khz).max(),
                    cpus,
                }
            })
            .collect()
    }
}

impl Reader<'_> {
    /// A CPU's preferred-core ranking and highest performance level.
    pub(super) fn perf(&self, cpu: u32) -> Result<(Option<u32>, Option<u32>), TopologyError> {
        let at = |rel: &str| self.cpu_path(&format!("cpu{cpu}/{rel}"));
        let ranking = self.num(&at("cpufreq/amd_pstate_prefcore_ranking"))?;
        let highest = match self.num(&at("acpi_cppc/highest_perf"))? {
            Some(v) => Some(v),
            None => self.num(&at("cpufreq/amd_pstate_highest_perf"))?,
        };
        Ok((ranking, highest))
    }

    /// Core types from the first capacity file that every online CPU has and whose
    /// values fall into two clear classes; with the file's name.
    pub(super) fn capacity_kinds(
        &self,
        cpus: &[Cpu],
    ) -> Result<Option<(String, Kinds)>, TopologyError> {
        for file in CAPACITY_FILES {
            let mut values = BTreeMap::new();
            for c in cpus {
                match self.num::<u64>(&self.cpu_path(&format!("cpu{}/{file}", c.cpu)))? {
                    Some(v) => values.insert(c.cpu, v),
                    None => break,
                };
            }
            if values.len() != cpus.len() {
                continue;
            }
            if let Some(kinds) = classes(&values) {
                return Ok(Some((format!("{CPU_DIR}/cpuN/{file}"), kinds)));
            }
        }
        Ok(None)
    }

    /// The X3D mode of the first device bound to the `amd_x3d_vcache` driver.
    pub(super) fn x3d_mode(&self) -> Result<Option<String>, TopologyError> {
        let dir = self.root.sys_path(X3D_DRIVER);
        for name in self.names(&dir)? {
            let path = dir.join(&name).join("amd_x3d_mode");
            if let Some(text) = self.text(&path)? {
                let mode = text.trim();
                return match mode {
                    "cache" | "frequency" => Ok(Some(mode.to_string())),
                    other => Err(parse_error(
                        &path,
                        &text,
                        other,
                        "expected cache or frequency",
                    )),
                };
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(values: &[(u32, u64)]) -> Option<Vec<(u32, CoreType)>> {
        classes(&values.iter().copied().collect()).map(|m| m.into_iter().collect())
    }

    #[test]
    fn two_clear_classes_are_kinds() {
        use CoreType::{Efficiency as E, Performance as P};
        // big.LITTLE capacities.
        assert_eq!(
            kinds(&[(0, 446), (1, 446), (2, 1024), (3, 1024)]),
            Some(vec![(0, E), (1, E), (2, P), (3, P)])
        );
        // Three ARM tiers: the mid and big cores are both "performance".
        assert_eq!(
            kinds(&[(0, 446), (1, 900), (2, 1024)]),
            Some(vec![(0, E), (1, P), (2, P)])
        );
    }

    #[test]
    fn rankings_and_one_value_are_not_kinds() {
        assert_eq!(kinds(&[(0, 1024), (1, 1024)]), None);
        // Preferred-core rankings spread evenly: no gap.
        assert_eq!(
            kinds(&[(0, 166), (1, 176), (2, 186), (3, 196), (4, 206), (5, 231)]),
            None
        );
        // A gap, but one side spread wide: not two clear classes.
        assert_eq!(kinds(&[(0, 100), (1, 200), (2, 800), (3, 1000)]), None);
        assert_eq!(kinds(&[(0, 0), (1, 1024)]), None);
        assert_eq!(kinds(&[]), None);
    }
}
