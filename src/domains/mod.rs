//! Latency domains: a hierarchy of CPU groups (SMT core → LLC/CCX → die → socket →
//! machine), finest level first, each with the latency paid inside it.
//!
//! Built from a latency matrix alone ([`Domains::from_matrix`]: SMT siblings and cache
//! groups are inferred from the numbers), from the sysfs topology alone
//! ([`Domains::from_layout`], no latencies), or from both ([`Domains::reconcile`]), which
//! reports where the two disagree and decides which to trust, saying why.
//!
//! Clustering: average linkage (UPGMA, nearest-neighbour chain, O(n²)) over the CPUs,
//! cut where the sorted merge heights jump; a cut is kept only when the pairs it joins
//! are cleanly faster than the pairs the next level joins (95th vs 5th percentile), so
//! noise and a few outlier cells make no levels. A level where some groups stalled (the
//! NUMA-home artefact: one socket's cross-CCX pairs as slow as cross-socket) is
//! completed by symmetry and reported.
//!
//! Files: `analyse` (the matrix alone → levels), `cluster` (the dense matrix, merges,
//! cuts, partition checks), `reconcile` (matrix and sysfs → one chain of levels),
//! `select` (which source to place on), `picture` (the domains as an SVG picture).
//!
//! Owns: clustering, reconciliation, the per-CPU cost used by `placement`.
//! Must not touch: the OS (no files, no syscalls, no clocks).

mod analyse;
mod cluster;
mod local;
pub mod picture;
mod reconcile;
mod select;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::topology::Topology;

pub use select::{select, Misfit, SelectError, Selected};

use crate::stats::percentile;
use cluster::*;

/// What a level of groups is, in hardware terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LevelKind {
    /// SMT siblings of one core.
    Smt,
    /// A cluster of cores sharing an L2 (KNL tiles, Arm clusters); sysfs `cluster_id`.
    Cluster,
    /// CPUs sharing the last-level cache (a CCX on AMD, a socket on most Intel parts).
    #[serde(rename = "llc")]
    Cache,
    /// One die (chiplet) of a package.
    Die,
    /// One NUMA node.
    Node,
    /// One socket.
    Package,
    /// A level seen only in the latency matrix, with no hardware name.
    Group,
    /// Every CPU.
    Machine,
}

impl LevelKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            LevelKind::Smt => "smt",
            LevelKind::Cluster => "cluster",
            LevelKind::Cache => "llc",
            LevelKind::Die => "die",
            LevelKind::Node => "node",
            LevelKind::Package => "package",
            LevelKind::Group => "group",
            LevelKind::Machine => "machine",
        }
    }
}

impl fmt::Display for LevelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One level of the hierarchy: a partition of the CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub kind: LevelKind,
    /// Other hardware names for the same partition (e.g. an Intel LLC is also the package).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<LevelKind>,
    /// Typical (median) one-way latency between CPUs first joined at this level; `None`
    /// when no trusted matrix gave one.
    pub latency_ns: Option<f64>,
    /// The groups, ordered by their lowest CPU.
    pub groups: Vec<CpuSet>,
}

impl Level {
    /// `smt`, or `llc = package` when the partition has several names.
    pub fn name(&self) -> String {
        let mut s = self.kind.as_str().to_string();
        for k in &self.also {
            s.push_str(" = ");
            s.push_str(k.as_str());
        }
        s
    }
}

/// Which source the domains (and placement costs) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    Matrix,
    Topology,
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// The matrix splits a sysfs group (e.g. one LLC measured as two halves).
    SplitsGroup,
    /// A sysfs level the matrix does not show.
    LevelNotSeen,
    /// A matrix group that straddles sysfs groups (numbering mismatch or a bad matrix).
    CrossesGroups,
    /// One socket's cross-CCX pairs cost far more than the other's: where the measured
    /// cache line lived in memory, not the hardware.
    NumaHome,
    /// The matrix shows no structure the hardware must have: measurement noise.
    Noise,
    /// A level whose groups were partly completed by symmetry.
    Uneven,
    /// One cell contradicts the rest of the matrix (an SMT pair measured slow); the cell
    /// is named and replaced.
    OutlierCell,
}

/// A disagreement or an oddity, with the decision taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// Which source was trusted for this point.
    pub trusted: Trust,
    /// The CPUs concerned.
    pub cpus: CpuSet,
    /// What was seen, what was decided and why.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The hardware grouping read from sysfs, as plain data: the online CPUs and, per level,
/// its groups. Levels may be given in any order; equal partitions are merged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    pub cpus: CpuSet,
    pub levels: Vec<(LevelKind, Vec<CpuSet>)>,
}

impl Layout {
    /// The grouping sysfs reports: SMT cores, clusters, LLCs, dies, NUMA nodes and
    /// packages, over the online CPUs. A level that is missing for some CPUs (no cache
    /// information) or does not nest with the finer ones (sub-NUMA clustering quirks) is
    /// left out.
    pub fn from_topology(t: &Topology) -> Layout {
        let cpus: CpuSet = t.cpus.iter().map(|c| c.cpu).collect();
        let distinct = |sets: Vec<CpuSet>| -> Vec<CpuSet> {
            let mut out: Vec<CpuSet> = Vec::new();
            for s in sets {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            out
        };
        let mut candidates: Vec<(LevelKind, Vec<CpuSet>)> = vec![
            (
                LevelKind::Smt,
                distinct(t.cpus.iter().map(|c| c.siblings.clone()).collect()),
            ),
            (
                LevelKind::Package,
                distinct(t.cpus.iter().map(|c| c.package_cpus.clone()).collect()),
            ),
        ];
        let llc: Vec<CpuSet> = t
            .cpus
            .iter()
            .filter_map(|c| c.llc().map(|l| l.shared.intersection(&cpus)))
            .collect();
        if llc.len() == t.cpus.len() {
            candidates.push((LevelKind::Cache, distinct(llc)));
        }
        candidates.push((
            LevelKind::Die,
            distinct(t.cpus.iter().map(|c| c.die_cpus.clone()).collect()),
        ));
        candidates.push((
            LevelKind::Node,
            t.nodes
                .iter()
                .filter(|n| !n.cpus.is_empty())
                .map(|n| n.cpus.intersection(&cpus))
                .collect(),
        ));
        // Where the kernel reports no clusters, cluster_cpus is the core: no level.
        let clusters = distinct(t.cpus.iter().map(|c| c.cluster_cpus.clone()).collect());
        let cores = distinct(t.cpus.iter().map(|c| c.siblings.clone()).collect());
        if t.cpus.iter().any(|c| c.cluster.is_some()) && clusters != cores {
            candidates.push((LevelKind::Cluster, clusters));
        }
        let mut layout = Layout {
            cpus: cpus.clone(),
            levels: Vec::new(),
        };
        for (kind, groups) in candidates {
            let groups: Vec<CpuSet> = groups
                .into_iter()
                .map(|g| g.intersection(&cpus))
                .filter(|g| !g.is_empty())
                .collect();
            let mut trial = layout.clone();
            trial.levels.push((kind, groups));
            let ids: Vec<u32> = cpus.iter().collect();
            if layout_partitions(&trial, &ids).is_ok() {
                layout = trial;
            }
        }
        layout
    }

    /// The same grouping over a subset of the CPUs.
    pub fn restricted(&self, keep: &CpuSet) -> Layout {
        Layout {
            cpus: self.cpus.intersection(keep),
            levels: self
                .levels
                .iter()
                .map(|(k, gs)| {
                    (
                        *k,
                        gs.iter()
                            .map(|g| g.intersection(keep))
                            .filter(|g| !g.is_empty())
                            .collect(),
                    )
                })
                .collect(),
        }
    }
}

/// Domains that cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DomainError {
    /// The matrix is malformed (NaN, negative, asymmetric cells...).
    #[error("latency matrix is unusable: {0}")]
    InvalidMatrix(String),
    /// Too few CPUs.
    #[error("latency matrix has {0} CPU(s); at least 2 are needed")]
    TooSmall(usize),
    /// Too many cells are missing to trust anything.
    #[error("latency matrix is missing {missing} of {total} pairs (zero, NaN or null cells), e.g. CPUs {} and {}; at most 10% may be missing", .example.0, .example.1)]
    TooSparse {
        missing: usize,
        total: usize,
        example: (u32, u32),
    },
    /// The matrix was measured on other CPUs than the topology lists.
    #[error("latency matrix covers CPUs {matrix} ({matrix_len}) but the topology's online CPUs are {topology} ({topology_len})")]
    CpuMismatch {
        matrix: CpuSet,
        matrix_len: usize,
        topology: CpuSet,
        topology_len: usize,
    },
    /// The layout is not a set of partitions of its CPUs.
    #[error("topology level {kind} is not a partition of the online CPUs {cpus}: {detail}")]
    BadLayout {
        kind: LevelKind,
        cpus: CpuSet,
        detail: String,
    },
    /// No CPUs at all.
    #[error("no CPUs to build domains from")]
    Empty,
}

/// The hierarchy plus the pairwise cost used to place threads.
#[derive(Debug, Clone, PartialEq)]
pub struct Domains {
    /// CPU ids, ascending; "index" below means a position in this list.
    cpus: Vec<u32>,
    /// Finest first; the last is always the machine.
    levels: Vec<Level>,
    /// `group_of[level][index]`: which group of that level holds the CPU.
    group_of: Vec<Vec<u32>>,
    /// Row-major n×n pairwise cost: ns when `cost_is_ns`, else the rank of the finest
    /// level two CPUs share (1 = first level).
    cost: Vec<f64>,
    cost_is_ns: bool,
    trust: Trust,
}

/// Merge-height jump that separates two levels.
const CUT_RATIO: f64 = 1.3;
/// Largest SMT sibling latency seen in published data is ~13 ns; above this a
/// tightly-bound pair is an L2 cluster, not SMT.
const SMT_MAX_NS: f64 = 20.0;
/// Contrast (between / within) below which a hardware level is "not seen" in a matrix.
const CONTRAST_SEEN: f64 = 1.2;

impl Domains {
    /// CPU ids, ascending.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Levels, finest first; the last is the machine.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Which source the groups and costs come from.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// Whether [`Domains::cost`] is in nanoseconds (else a level rank).
    pub fn cost_is_ns(&self) -> bool {
        self.cost_is_ns
    }

    /// Position of a CPU id.
    pub fn index_of(&self, cpu: u32) -> Option<usize> {
        self.cpus.binary_search(&cpu).ok()
    }

    /// Pairwise cost between two indices (0 on the diagonal).
    #[inline]
    pub fn cost(&self, i: usize, j: usize) -> f64 {
        self.cost[i * self.cpus.len() + j]
    }

    /// Sets the cost between two CPU ids to a figure measured after the analysis, where
    /// it stays close enough to the cell it replaces that the groups stand (plan
    /// verification, `measure::sparse::verify`). Nothing where the costs are level
    /// ranks or a CPU is not here.
    pub(crate) fn set_cost_ns(&mut self, a: u32, b: u32, ns: f64) {
        let (Some(i), Some(j)) = (self.index_of(a), self.index_of(b)) else {
            return;
        };
        if !self.cost_is_ns || i == j {
            return;
        }
        let n = self.cpus.len();
        self.cost[i * n + j] = ns;
        self.cost[j * n + i] = ns;
    }

    /// Group index of a CPU index at a level.
    #[inline]
    pub fn group_of(&self, level: usize, i: usize) -> usize {
        self.group_of[level][i] as usize
    }

    /// The SMT level, if there is one.
    pub fn smt_level(&self) -> Option<usize> {
        self.levels.iter().position(|l| l.kind == LevelKind::Smt)
    }

    /// Index of the finest level at which two CPU indices share a group.
    pub fn shared_level(&self, i: usize, j: usize) -> usize {
        (0..self.levels.len())
            .find(|&l| self.group_of[l][i] == self.group_of[l][j])
            .unwrap_or(self.levels.len() - 1)
    }

    /// Domains from a latency matrix alone.
    pub fn from_matrix(m: &LatencyMatrix) -> Result<Domains, DomainError> {
        Ok(Self::analyse(m)?.0)
    }

    /// Domains from the sysfs grouping alone. Costs are level ranks, latencies unknown.
    pub fn from_layout(layout: &Layout) -> Result<Domains, DomainError> {
        let cpus: Vec<u32> = layout.cpus.iter().collect();
        if cpus.is_empty() {
            return Err(DomainError::Empty);
        }
        let parts = layout_partitions(layout, &cpus)?;
        let mut levels: Vec<(Vec<LevelKind>, Vec<u32>)> = Vec::new();
        for (kind, part) in parts {
            if let Some(l) = levels.iter_mut().find(|(_, p)| *p == part) {
                l.0.push(kind);
            } else {
                levels.push((vec![kind], part));
            }
        }
        // Finest first: more groups first; ties cannot happen after merging equal ones
        // unless partitions cross, which layout_partitions refuses.
        levels.sort_by_key(|(_, p)| std::cmp::Reverse(count_groups(p)));
        let built: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> =
            levels.into_iter().map(|(k, p)| (k, p, None)).collect();
        Ok(Self::assemble(cpus, built, None, Trust::Topology))
    }

    /// Domains from the sysfs topology alone: what the daemon uses until a matrix
    /// exists. Costs are level ranks, latencies unknown.
    pub fn from_topology(t: &Topology) -> Result<Domains, DomainError> {
        Self::from_layout(&Layout::from_topology(t))
    }

    /// Builds the final structure from partitions (finest first), adding the machine.
    fn assemble(
        cpus: Vec<u32>,
        parts: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)>,
        dense: Option<&Dense>,
        trust: Trust,
    ) -> Domains {
        let n = cpus.len();
        // Matrix rows may be in any CPU order; domains use ascending ids.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| cpus[i]);
        let sorted: Vec<u32> = order.iter().map(|&i| cpus[i]).collect();
        let mut levels = Vec::new();
        let mut group_of = Vec::new();
        let mut all_parts: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> = parts;
        // A level with one group is the machine under another name (one socket, one LLC).
        let mut machine_kinds = vec![LevelKind::Machine];
        while all_parts.last().is_some_and(|p| count_groups(&p.1) <= 1) {
            if let Some(p) = all_parts.pop() {
                machine_kinds.extend(p.0);
            }
        }
        let machine_lat = dense.and_then(|d| {
            let last = all_parts.last().map(|p| p.1.clone());
            percentile(&joined_cells(d, last.as_ref(), &vec![0; n]), 0.5)
        });
        all_parts.push((machine_kinds, vec![0; n], machine_lat));
        for (kinds, part, lat) in all_parts {
            // Renumber groups by lowest CPU id.
            let mut remap: Vec<Option<u32>> = vec![None; n];
            let mut next = 0u32;
            let mut g_of = vec![0u32; n];
            let mut groups: Vec<CpuSet> = Vec::new();
            for (si, &orig) in order.iter().enumerate() {
                let g = part[orig] as usize;
                let id = *remap[g].get_or_insert_with(|| {
                    next += 1;
                    groups.push(CpuSet::new());
                    next - 1
                });
                g_of[si] = id;
                groups[id as usize].insert(sorted[si]);
            }
            let mut kinds = kinds;
            let kind = if kinds.is_empty() {
                LevelKind::Group
            } else {
                kinds.remove(0)
            };
            levels.push(Level {
                kind,
                also: kinds,
                latency_ns: lat.map(|v| (v * 10.0).round() / 10.0),
                groups,
            });
            group_of.push(g_of);
        }
        let mut dom = Domains {
            cpus: sorted,
            levels,
            group_of,
            cost: vec![0.0; n * n],
            cost_is_ns: dense.is_some(),
            trust,
        };
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                dom.cost[a * n + b] = match dense {
                    Some(d) => d.at(order[a], order[b]),
                    None => (dom.shared_level(a, b) + 1) as f64,
                };
            }
        }
        dom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 sockets x 2 CCX x 2 cores x 2 threads, siblings i and i+8 (Linux numbering).
    fn synthetic() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            let (ci, cj) = (i % 8, j % 8);
            if ci == cj {
                9.0
            } else if ci / 2 == cj / 2 {
                24.0 + (i + j) as f64 % 3.0
            } else if ci / 4 == cj / 4 {
                95.0 + (i * j) as f64 % 5.0
            } else {
                200.0
            }
        })
    }

    #[test]
    fn a_synthetic_hierarchy_is_recovered_level_by_level() {
        let d = Domains::from_matrix(&synthetic()).unwrap();
        let shape: Vec<(String, usize)> = d
            .levels()
            .iter()
            .map(|l| (l.name(), l.groups.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("smt".to_string(), 8),
                ("llc".to_string(), 4),
                ("group".to_string(), 2),
                ("machine".to_string(), 1)
            ]
        );
        assert_eq!(d.levels()[0].groups[0].to_string(), "0,8");
        assert_eq!(d.levels()[1].groups[0].to_string(), "0-1,8-9");
        assert_eq!(d.levels()[2].groups[1].to_string(), "4-7,12-15");
        assert_eq!(d.levels()[0].latency_ns, Some(9.0));
        assert_eq!(d.levels()[3].latency_ns, Some(200.0));
        assert_eq!(d.shared_level(0, 8), 0);
        assert_eq!(d.shared_level(0, 4), 3);
        assert_eq!(d.cost(0, 4), 200.0);
    }

    #[test]
    fn matrix_row_order_does_not_matter() {
        let m = synthetic();
        let order: Vec<usize> = (0..16).rev().collect();
        let shuffled = LatencyMatrix::from_fn(order.iter().map(|&i| i as u32).collect(), |a, b| {
            m.at(order[a], order[b]).unwrap()
        });
        assert_eq!(
            Domains::from_matrix(&shuffled).unwrap().levels(),
            Domains::from_matrix(&m).unwrap().levels()
        );
    }

    #[test]
    fn partitions_refine_and_cut() {
        assert!(refines(&[0, 0, 1, 2], &[0, 0, 1, 1]));
        assert!(!refines(&[0, 0, 1, 1], &[0, 1, 1, 1]));
        assert!(same_partition(&[0, 0, 1], &[1, 1, 0]));
        let merges = vec![(0, 1, 1.0), (2, 3, 1.5), (0, 2, 10.0)];
        assert_eq!(cut(&merges, 4, 2.0), vec![0, 0, 1, 1]);
        assert_eq!(cut(&merges, 4, 0.5), vec![0, 1, 2, 3]);
    }

    #[test]
    fn upgma_merges_nearest_first_with_average_heights() {
        let m = LatencyMatrix::from_fn(vec![0, 1, 2], |i, j| match (i.max(j), i.min(j)) {
            (1, 0) => 2.0,
            (2, 0) => 10.0,
            _ => 20.0,
        });
        let (dense, _) = Dense::from_matrix(&m).unwrap();
        let merges = upgma(&dense);
        assert_eq!(merges.len(), 2);
        assert_eq!((merges[0].0, merges[0].1, merges[0].2), (0, 1, 2.0));
        assert_eq!(merges[1].2, 15.0);
    }

    #[test]
    fn bad_matrices_and_layouts_are_named() {
        let m = LatencyMatrix::from_fn(vec![3], |_, _| 1.0);
        assert_eq!(
            Domains::from_matrix(&m).unwrap_err().to_string(),
            "latency matrix has 1 CPU(s); at least 2 are needed"
        );
        let mut m = synthetic();
        for j in 0..15 {
            m.latency_ns.set(15, j, None);
        }
        let e = Domains::from_matrix(&m).unwrap_err().to_string();
        assert!(
            e.starts_with("latency matrix is missing 15 of 120 pairs"),
            "{e}"
        );
        let layout = Layout {
            cpus: "0-3".parse().unwrap(),
            levels: vec![(
                LevelKind::Smt,
                vec!["0-1".parse().unwrap(), "1-3".parse().unwrap()],
            )],
        };
        assert_eq!(
            Domains::from_layout(&layout).unwrap_err().to_string(),
            "topology level smt is not a partition of the online CPUs 0-3: CPU 1 is in two groups"
        );
        let layout = Layout {
            cpus: "0-3".parse().unwrap(),
            levels: vec![
                (
                    LevelKind::Smt,
                    vec!["0-1".parse().unwrap(), "2-3".parse().unwrap()],
                ),
                (
                    LevelKind::Package,
                    vec!["0,2".parse().unwrap(), "1,3".parse().unwrap()],
                ),
            ],
        };
        let e = Domains::from_layout(&layout).unwrap_err().to_string();
        assert!(e.contains("its groups straddle the"), "{e}");
    }

    #[test]
    fn a_few_missing_cells_are_imputed() {
        let mut m = synthetic();
        m.latency_ns.set(5, 4, None);
        let d = Domains::from_matrix(&m).unwrap();
        assert_eq!(d.levels().len(), 4);
        assert_eq!(d.levels()[1].groups.len(), 4);
    }
}
