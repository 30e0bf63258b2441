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
//! Owns: clustering, reconciliation, the per-CPU cost used by `placement`.
//! Must not touch: the OS (no files, no syscalls, no clocks).

mod cluster;
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

    /// Domains from a matrix and, when given, the topology: findings say where they
    /// disagree and which was trusted. Without a topology this is `from_matrix` plus the
    /// findings the matrix alone supports (NUMA-home artefact, uneven levels). The
    /// matrix must cover the topology's online CPUs, or its usable (non-isolated) ones.
    pub fn reconcile(
        m: &LatencyMatrix,
        topology: Option<&Topology>,
    ) -> Result<(Domains, Vec<Finding>), DomainError> {
        let Some(t) = topology else {
            return Self::reconcile_layout(m, None);
        };
        let mut layout = Layout::from_topology(t);
        let mset: CpuSet = m.cpus.iter().copied().collect();
        if mset != layout.cpus && mset == t.usable() {
            layout = layout.restricted(&mset);
        }
        Self::reconcile_layout(m, Some(&layout))
    }

    /// [`Domains::reconcile`] with the sysfs grouping as plain data.
    pub fn reconcile_layout(
        m: &LatencyMatrix,
        layout: Option<&Layout>,
    ) -> Result<(Domains, Vec<Finding>), DomainError> {
        let (mdom, mut findings, dense) = Self::analyse(m)?;
        let Some(layout) = layout else {
            return Ok((mdom, findings));
        };
        let mset: CpuSet = m.cpus.iter().copied().collect();
        if mset != layout.cpus {
            return Err(DomainError::CpuMismatch {
                matrix_len: mset.len(),
                matrix: mset,
                topology_len: layout.cpus.len(),
                topology: layout.cpus.clone(),
            });
        }
        let tdom = Self::from_layout(layout)?;
        let cpus = tdom.cpus.clone();

        // 1. Does the matrix show the hardware levels at all? SMT siblings share an L1
        //    and are always the fastest pairs on real hardware; without SMT, sockets
        //    are always slower between than within. A matrix that misses either is
        //    noise (an emulator, a VM whose vCPUs move) or from another machine.
        let has_smt = tdom.levels.iter().any(|l| l.kind == LevelKind::Smt);
        let mut decisive = Vec::new();
        for (li, level) in tdom.levels.iter().enumerate() {
            if level.kind == LevelKind::Machine {
                continue;
            }
            let (within, between) = level_cells(&dense, &tdom.group_of, li);
            let (Some(w), Some(b)) = (percentile(&within, 0.5), percentile(&between, 0.5)) else {
                continue;
            };
            let is_pkg =
                level.kind == LevelKind::Package || level.also.contains(&LevelKind::Package);
            let decides = level.kind == LevelKind::Smt || (is_pkg && !has_smt);
            // A level that decides must also be consistent: most pairs inside faster
            // than most pairs across, not just a lucky median.
            let consistent = match (percentile(&within, 0.75), percentile(&between, 0.25)) {
                (Some(w75), Some(b25)) => w75 < b25,
                _ => false,
            };
            // SMT siblings share an L1: on every published matrix they cost under
            // 0.4x the next pairs; ask for 1.5x to call the level seen.
            let needed = if level.kind == LevelKind::Smt {
                1.5
            } else {
                CONTRAST_SEEN
            };
            if b / w.max(1e-9) >= needed && (!decides || consistent) {
                continue;
            }
            if decides {
                decisive.push(format!(
                    "{} pairs cost {w:.1} ns against {b:.1} ns outside them",
                    level.name()
                ));
            } else {
                findings.push(Finding {
                    kind: FindingKind::LevelNotSeen,
                    trusted: Trust::Matrix,
                    cpus: layout.cpus.clone(),
                    message: format!(
                        "sysfs has a {} level ({} groups) but the matrix does not see it: {w:.1} ns inside vs {b:.1} ns across; measured costs are used",
                        level.name(),
                        level.groups.len()
                    ),
                });
            }
        }
        // A matrix with clean SMT pairs that are not sysfs's siblings was numbered
        // differently (Windows numbers siblings adjacently) or measured elsewhere.
        if let (Some(ms), Some(ts)) = (mdom.smt_level(), tdom.smt_level()) {
            if !same_partition(&mdom.group_of[ms], &tdom.group_of[ts]) {
                let mg = &mdom.levels[ms].groups;
                let tg = &tdom.levels[ts].groups;
                let example = mg.iter().find(|g| g.len() == 2 && !tg.contains(g));
                findings.retain(|f| f.kind != FindingKind::LevelNotSeen);
                findings.push(Finding {
                    kind: FindingKind::CrossesGroups,
                    trusted: Trust::Topology,
                    cpus: example.cloned().unwrap_or_default(),
                    message: format!(
                        "the matrix's SMT pairs ({}, e.g. CPUs {}) are not sysfs's siblings (e.g. CPUs {}): the matrix uses another CPU numbering (Windows numbers siblings adjacently) or comes from another machine, so the sysfs topology is trusted and latencies are unknown",
                        mg.iter().filter(|g| g.len() == 2).count(),
                        example.map(|g| g.to_string()).unwrap_or_default(),
                        tg.first().map(|g| g.to_string()).unwrap_or_default()
                    ),
                });
                return Ok((tdom, findings));
            }
        }
        if !decisive.is_empty() {
            findings.retain(|f| f.kind != FindingKind::LevelNotSeen);
            findings.push(Finding {
                kind: FindingKind::Noise,
                trusted: Trust::Topology,
                cpus: layout.cpus.clone(),
                message: format!(
                    "the matrix looks like noise: {}; real hardware always shows this level, so the sysfs topology is trusted and latencies are unknown",
                    decisive.join("; ")
                ),
            });
            return Ok((tdom, findings));
        }

        // 2. Matrix groups that straddle sockets cannot be real: the matrix was taken
        //    with another numbering (or on another machine).
        if let Some(pkg) = tdom
            .levels
            .iter()
            .position(|l| l.kind == LevelKind::Package || l.also.contains(&LevelKind::Package))
        {
            if tdom.levels[pkg].groups.len() > 1 {
                for ml in mdom.levels.iter().filter(|l| l.kind != LevelKind::Machine) {
                    let bad: Vec<&CpuSet> = ml
                        .groups
                        .iter()
                        .filter(|g| {
                            let first = tdom.index_of(g.first().unwrap_or(0)).unwrap_or(0);
                            g.iter().any(|c| {
                                tdom.index_of(c).is_some_and(|i| {
                                    tdom.group_of(pkg, i) != tdom.group_of(pkg, first)
                                })
                            })
                        })
                        .collect();
                    if let Some(g) = bad.first() {
                        findings.push(Finding {
                            kind: FindingKind::CrossesGroups,
                            trusted: Trust::Topology,
                            cpus: (*g).clone(),
                            message: format!(
                                "the matrix puts CPUs {g} in one {} group although sysfs places them in different sockets ({} such groups): the matrix's CPU numbering does not match this machine, so the sysfs topology is trusted",
                                ml.name(),
                                bad.len()
                            ),
                        });
                        return Ok((tdom, findings));
                    }
                }
            }
        }

        // 3. Merge both hierarchies into one chain of partitions; the matrix's win
        //    conflicts (it is measured), sysfs names the levels they share.
        let mut chain: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> = Vec::new();
        for (li, l) in mdom.levels.iter().enumerate() {
            if l.kind == LevelKind::Machine {
                continue;
            }
            let kinds = if l.kind == LevelKind::Group || l.kind == LevelKind::Cache {
                Vec::new()
            } else {
                vec![l.kind]
            };
            chain.push((kinds, mdom.group_of[li].clone(), l.latency_ns));
        }
        for (li, tl) in tdom.levels.iter().enumerate() {
            if tl.kind == LevelKind::Machine {
                continue;
            }
            let part = &tdom.group_of[li];
            let mut names = vec![tl.kind];
            names.extend(tl.also.iter().copied());
            if let Some(c) = chain.iter_mut().find(|c| same_partition(&c.1, part)) {
                for k in names {
                    if !c.0.contains(&k) {
                        c.0.push(k);
                    }
                }
                continue;
            }
            // Not in the matrix: keep it if it nests with every matrix level.
            let nests = chain
                .iter()
                .all(|c| refines(&c.1, part) || refines(part, &c.1));
            if nests {
                let finer = chain
                    .iter()
                    .filter(|c| refines(&c.1, part) && !same_partition(&c.1, part))
                    .min_by_key(|c| count_groups(&c.1))
                    .map(|c| c.1.clone());
                let within = joined_cells(&dense, finer.as_ref(), part);
                chain.push((names, part.clone(), percentile(&within, 0.5)));
            } else {
                let g = chain
                    .iter()
                    .find(|c| !refines(&c.1, part) && !refines(part, &c.1))
                    .map(|c| first_split_group(part, &c.1, &cpus))
                    .unwrap_or_default();
                findings.push(Finding {
                    kind: FindingKind::CrossesGroups,
                    trusted: Trust::Matrix,
                    cpus: g.clone(),
                    message: format!(
                        "the sysfs {} groups do not nest with the measured groups (first conflict: CPUs {g}): the measured groups are used",
                        tl.name()
                    ),
                });
            }
        }
        chain.sort_by_key(|c| std::cmp::Reverse(count_groups(&c.1)));
        // Report matrix groups finer than a sysfs level they refine (e.g. two halves of
        // one LLC), once per sysfs level.
        for (li, tl) in tdom.levels.iter().enumerate() {
            if (tl.kind == LevelKind::Machine && tl.also.is_empty()) || tl.kind == LevelKind::Smt {
                continue;
            }
            let part = &tdom.group_of[li];
            let finer = chain
                .iter()
                .filter(|c| c.0.is_empty() && refines(&c.1, part) && !same_partition(&c.1, part))
                .max_by_key(|c| std::cmp::Reverse(count_groups(&c.1)));
            let Some(c) = finer else { continue };
            // Only when the matrix level sits directly under this one.
            let coarser_named = chain.iter().any(|o| {
                !o.0.is_empty()
                    && refines(&c.1, &o.1)
                    && refines(&o.1, part)
                    && !same_partition(&o.1, part)
                    && !same_partition(&o.1, &c.1)
            });
            if coarser_named {
                continue;
            }
            let g = first_split_group(part, &c.1, &cpus);
            if g.is_empty() {
                continue;
            }
            let parts = count_groups(&c.1) / count_groups(part).max(1);
            findings.push(Finding {
                kind: FindingKind::SplitsGroup,
                trusted: Trust::Matrix,
                cpus: g.clone(),
                message: format!(
                    "sysfs says CPUs {g} share one {} but the matrix shows ~{parts} groups inside it ({} ns inside each, more across): the measured split is kept as a level",
                    tl.name(),
                    c.2.map(|v| format!("{v:.1}")).unwrap_or_else(|| "?".into())
                ),
            });
        }
        // NUMA-home check against sysfs sockets when the matrix alone did not flag it.
        if !findings.iter().any(|f| f.kind == FindingKind::NumaHome) {
            if let Some(f) = numa_home_by_layout(&dense, &tdom) {
                findings.push(f);
            }
        }
        let dom = Self::assemble(cpus, chain, Some(&dense), Trust::Matrix);
        Ok((dom, findings))
    }

    /// Matrix-only analysis, also returning the cleaned dense matrix for reconciliation.
    fn analyse(m: &LatencyMatrix) -> Result<(Domains, Vec<Finding>, Dense), DomainError> {
        let (dense, cpus) = Dense::from_matrix(m)?;
        let n = dense.n;
        let merges = upgma(&dense);
        let mut heights: Vec<f64> = merges.iter().map(|m| m.2).collect();
        heights.sort_by(f64::total_cmp);

        // Candidate cuts at jumps of the sorted merge heights.
        let mut cuts: Vec<(f64, f64)> = Vec::new(); // (threshold, jump ratio)
        for w in heights.windows(2) {
            let (lo, hi) = (w[0].max(1e-9), w[1]);
            if hi / lo >= CUT_RATIO && hi - lo >= 1.0 {
                cuts.push(((lo * hi).sqrt(), hi / lo));
            }
        }
        let mut parts: Vec<(Vec<u32>, f64)> = cuts
            .iter()
            .map(|&(t, r)| (cut(&merges, n, t), r))
            .filter(|(p, _)| count_groups(p) > 1 && count_groups(p) < n)
            .collect();
        parts.dedup_by(|a, b| same_partition(&a.0, &b.0));

        // Two adjacent levels that differ by a handful of merges are one level blurred by
        // an odd cell: keep the one with the bigger jump.
        loop {
            let mut changed = false;
            for i in 0..parts.len().saturating_sub(1) {
                let (ga, gb) = (count_groups(&parts[i].0), count_groups(&parts[i + 1].0));
                let delta = ga - gb;
                if (delta as f64) < (0.1 * ga as f64).max(1.0) {
                    let drop = if parts[i].1 >= parts[i + 1].1 {
                        i + 1
                    } else {
                        i
                    };
                    parts.remove(drop);
                    changed = true;
                    break;
                }
            }
            if !changed {
                break;
            }
        }

        // Keep only clean levels: the pairs joined here are clearly faster than the pairs
        // joined at the next level.
        let machine: Vec<u32> = vec![0; n];
        loop {
            let mut removed = false;
            for i in 0..parts.len() {
                let finer: Option<&Vec<u32>> = if i == 0 { None } else { Some(&parts[i - 1].0) };
                let coarser: &Vec<u32> = parts.get(i + 1).map(|p| &p.0).unwrap_or(&machine);
                let within = joined_cells(&dense, finer, &parts[i].0);
                let between = joined_cells(&dense, Some(&parts[i].0), coarser);
                let clean = match (percentile(&within, 0.95), percentile(&between, 0.05)) {
                    (Some(w), Some(b)) => w < b,
                    _ => false,
                };
                if !clean {
                    parts.remove(i);
                    removed = true;
                    break;
                }
            }
            if !removed {
                break;
            }
        }

        // Complete uneven levels by symmetry (NUMA-home artefact).
        // The level's latency is then the fast groups' figure: the hardware's cost when
        // the line is homed locally.
        let mut findings = Vec::new();
        let mut fixed_latency: Vec<Option<f64>> = vec![None; parts.len()];
        for i in 0..parts.len() {
            let finer: Option<Vec<u32>> = if i == 0 {
                None
            } else {
                Some(parts[i - 1].0.clone())
            };
            if let Some((completed, f, fast)) =
                complete_by_symmetry(&dense, finer.as_ref(), &parts[i].0, &cpus)
            {
                parts[i].0 = completed;
                fixed_latency[i] = Some(fast);
                findings.extend(f);
            }
        }

        // A mutual-nearest pair far below both members' next partners is an SMT core
        // even when its cell is slower than the other siblings' (3960X: 0/24 at 13 ns).
        if !parts.is_empty() {
            let next = parts
                .get(1)
                .map(|p| p.0.clone())
                .unwrap_or_else(|| vec![0; n]);
            let first = &mut parts[0];
            let sizes = group_sizes(&first.0);
            let cells = joined_cells(&dense, None, &first.0);
            if sizes.iter().all(|&s| s <= 2)
                && percentile(&cells, 0.5).is_some_and(|v| v <= SMT_MAX_NS)
            {
                add_lone_siblings(&dense, &mut first.0, &next);
            }
        }

        // Name the levels.
        let mut built: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> = Vec::new();
        let mut have_cache = false;
        for (i, (p, _)) in parts.iter().enumerate() {
            let finer = if i == 0 { None } else { Some(&parts[i - 1].0) };
            let within = joined_cells(&dense, finer, p);
            let lat = fixed_latency[i].or(percentile(&within, 0.5));
            let max_size = group_sizes(p).into_iter().max().unwrap_or(1);
            let kind = if i == 0 && max_size <= 2 && lat.is_some_and(|l| l <= SMT_MAX_NS) {
                LevelKind::Smt
            } else if i == 0 && max_size <= 2 {
                LevelKind::Cluster
            } else if !have_cache && lat.is_some_and(|l| l <= 60.0) {
                have_cache = true;
                LevelKind::Cache
            } else {
                LevelKind::Group
            };
            built.push((vec![kind], p.clone(), lat));
        }
        let dom = Self::assemble(cpus, built, Some(&dense), Trust::Matrix);
        Ok((dom, findings, dense))
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
            m.latency_ns[15][j] = None;
            m.latency_ns[j][15] = None;
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
        m.latency_ns[5][4] = None;
        m.latency_ns[4][5] = None;
        let d = Domains::from_matrix(&m).unwrap();
        assert_eq!(d.levels().len(), 4);
        assert_eq!(d.levels()[1].groups.len(), 4);
    }
}
