//! Reconciling a matrix's domains with the sysfs grouping: which levels the matrix
//! sees, whether its numbering fits this machine, and one chain of levels from both.
//!
//! Must not touch: the OS (no files, no syscalls, no clocks).

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::stats::percentile;
use crate::topology::Topology;

use super::cluster::*;
use super::{
    DomainError, Domains, Finding, FindingKind, Layout, Level, LevelKind, Trust, CONTRAST_SEEN,
};

impl Domains {
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

    /// [`Domains::reconcile`] with the sysfs grouping as plain data: the matrix is
    /// checked against the hardware levels (1), against the sockets (2), and only then
    /// are both hierarchies merged into one chain of levels (3).
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

        // 1. Does the matrix show the hardware levels at all?
        let decisive = hardware_levels_not_seen(&dense, &tdom, &layout.cpus, &mut findings);
        let untrusted = match smt_pairs_numbered_elsewhere(&mdom, &tdom) {
            Some(f) => Some(f),
            None if !decisive.is_empty() => Some(noise(&decisive, &layout.cpus)),
            None => None,
        };
        if let Some(f) = untrusted {
            findings.retain(|f| f.kind != FindingKind::LevelNotSeen);
            findings.push(f);
            return Ok((tdom, findings));
        }
        // 2. Matrix groups that straddle sockets cannot be real.
        if let Some(f) = groups_straddling_sockets(&mdom, &tdom) {
            findings.push(f);
            return Ok((tdom, findings));
        }
        // 3. Merge both hierarchies into one chain of partitions.
        let chain = merged_chain(&mdom, &tdom, &dense, &mut findings);
        findings.extend(groups_split_by_the_matrix(&tdom, &chain));
        // NUMA-home check against sysfs sockets when the matrix alone did not flag it.
        if !findings.iter().any(|f| f.kind == FindingKind::NumaHome) {
            if let Some(f) = numa_home_by_layout(&dense, &tdom) {
                findings.push(f);
            }
        }
        let dom = Self::assemble(tdom.cpus.clone(), chain, Some(&dense), Trust::Matrix);
        Ok((dom, findings))
    }
}

/// One level of the merged chain: the hardware names it carries (none for a level only
/// the matrix sees), its partition (a group number per CPU index) and its latency.
type Link = (Vec<LevelKind>, Vec<u32>, Option<f64>);

/// Step 1: SMT siblings share an L1 and are always the fastest pairs on real hardware;
/// without SMT, sockets are always slower between than within. A matrix that misses
/// either is noise (an emulator, a VM whose vCPUs move) or from another machine: those
/// misses come back, one line each. Other sysfs levels the matrix does not see are
/// findings, and the measured costs are used.
fn hardware_levels_not_seen(
    dense: &Dense,
    tdom: &Domains,
    cpus: &CpuSet,
    findings: &mut Vec<Finding>,
) -> Vec<String> {
    let has_smt = tdom.levels.iter().any(|l| l.kind == LevelKind::Smt);
    let mut decisive = Vec::new();
    for (li, level) in tdom.levels.iter().enumerate() {
        if level.kind == LevelKind::Machine {
            continue;
        }
        let (within, between) = level_cells(dense, &tdom.group_of, li);
        let (Some(w), Some(b)) = (percentile(&within, 0.5), percentile(&between, 0.5)) else {
            continue;
        };
        let is_pkg = level.kind == LevelKind::Package || level.also.contains(&LevelKind::Package);
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
                cpus: cpus.clone(),
                message: format!(
                    "sysfs has a {} level ({} groups) but the matrix does not see it: {w:.1} ns inside vs {b:.1} ns across; measured costs are used",
                    level.name(),
                    level.groups.len()
                ),
            });
        }
    }
    decisive
}

/// Step 1: a matrix with clean SMT pairs that are not sysfs's siblings was numbered
/// differently (Windows numbers siblings adjacently) or measured elsewhere.
fn smt_pairs_numbered_elsewhere(mdom: &Domains, tdom: &Domains) -> Option<Finding> {
    let (ms, ts) = (mdom.smt_level()?, tdom.smt_level()?);
    if same_partition(&mdom.group_of[ms], &tdom.group_of[ts]) {
        return None;
    }
    let mg = &mdom.levels[ms].groups;
    let tg = &tdom.levels[ts].groups;
    let example = mg.iter().find(|g| g.len() == 2 && !tg.contains(g));
    Some(Finding {
        kind: FindingKind::CrossesGroups,
        trusted: Trust::Topology,
        cpus: example.cloned().unwrap_or_default(),
        message: format!(
            "the matrix's SMT pairs ({}, e.g. CPUs {}) are not sysfs's siblings (e.g. CPUs {}): the matrix uses another CPU numbering (Windows numbers siblings adjacently) or comes from another machine, so the sysfs topology is trusted and latencies are unknown",
            mg.iter().filter(|g| g.len() == 2).count(),
            example.map(|g| g.to_string()).unwrap_or_default(),
            tg.first().map(|g| g.to_string()).unwrap_or_default()
        ),
    })
}

/// Step 1: the finding for a matrix that misses a level real hardware always shows.
fn noise(decisive: &[String], cpus: &CpuSet) -> Finding {
    Finding {
        kind: FindingKind::Noise,
        trusted: Trust::Topology,
        cpus: cpus.clone(),
        message: format!(
            "the matrix looks like noise: {}; real hardware always shows this level, so the sysfs topology is trusted and latencies are unknown",
            decisive.join("; ")
        ),
    }
}

/// Step 2: matrix groups that straddle sockets cannot be real: the matrix was taken
/// with another numbering (or on another machine). The first such group of the finest
/// matrix level that has one.
fn groups_straddling_sockets(mdom: &Domains, tdom: &Domains) -> Option<Finding> {
    let pkg = tdom
        .levels
        .iter()
        .position(|l| l.kind == LevelKind::Package || l.also.contains(&LevelKind::Package))?;
    if tdom.levels[pkg].groups.len() <= 1 {
        return None;
    }
    for ml in mdom.levels.iter().filter(|l| l.kind != LevelKind::Machine) {
        let bad: Vec<&CpuSet> = ml
            .groups
            .iter()
            .filter(|g| {
                let first = tdom.index_of(g.first().unwrap_or(0)).unwrap_or(0);
                g.iter().any(|c| {
                    tdom.index_of(c)
                        .is_some_and(|i| tdom.group_of(pkg, i) != tdom.group_of(pkg, first))
                })
            })
            .collect();
        if let Some(g) = bad.first() {
            return Some(Finding {
                kind: FindingKind::CrossesGroups,
                trusted: Trust::Topology,
                cpus: (*g).clone(),
                message: format!(
                    "the matrix puts CPUs {g} in one {} group although sysfs places them in different sockets ({} such groups): the matrix's CPU numbering does not match this machine, so the sysfs topology is trusted",
                    ml.name(),
                    bad.len()
                ),
            });
        }
    }
    None
}

/// Step 3: both hierarchies as one chain of partitions, coarsest first; the matrix's
/// win conflicts (it is measured), sysfs names the levels they share. A sysfs level
/// that does not nest with the measured ones is a finding and left out.
fn merged_chain(
    mdom: &Domains,
    tdom: &Domains,
    dense: &Dense,
    findings: &mut Vec<Finding>,
) -> Vec<Link> {
    let mut chain: Vec<Link> = Vec::new();
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
        if let Some(f) = merge_sysfs_level(&mut chain, tl, &tdom.group_of[li], dense, &tdom.cpus) {
            findings.push(f);
        }
    }
    chain.sort_by_key(|c| std::cmp::Reverse(count_groups(&c.1)));
    chain
}

/// Step 3, one sysfs level: its names go to the matrix level of the same partition;
/// a level the matrix lacks is kept if it nests with every matrix level, and is a
/// finding if not.
fn merge_sysfs_level(
    chain: &mut Vec<Link>,
    tl: &Level,
    part: &[u32],
    dense: &Dense,
    cpus: &[u32],
) -> Option<Finding> {
    let mut names = vec![tl.kind];
    names.extend(tl.also.iter().copied());
    if let Some(c) = chain.iter_mut().find(|c| same_partition(&c.1, part)) {
        for k in names {
            if !c.0.contains(&k) {
                c.0.push(k);
            }
        }
        // Siblings are a fact of the hardware, whatever the matrix's figure made
        // of them (a pair level slower than real SMT, as under an emulator, is
        // named a cluster): sysfs's SMT names the level, so that `smt = "avoid"`
        // and exclusive cores see the cores.
        if tl.kind == LevelKind::Smt {
            c.0.retain(|&k| k != LevelKind::Smt);
            c.0.insert(0, LevelKind::Smt);
        }
        return None;
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
        let within = joined_cells(dense, finer.as_ref(), part);
        chain.push((names, part.to_vec(), percentile(&within, 0.5)));
        return None;
    }
    let g = chain
        .iter()
        .find(|c| !refines(&c.1, part) && !refines(part, &c.1))
        .map(|c| first_split_group(part, &c.1, cpus))
        .unwrap_or_default();
    Some(Finding {
        kind: FindingKind::CrossesGroups,
        trusted: Trust::Matrix,
        cpus: g.clone(),
        message: format!(
            "the sysfs {} groups do not nest with the measured groups (first conflict: CPUs {g}): the measured groups are used",
            tl.name()
        ),
    })
}

/// Step 3: matrix groups finer than a sysfs level they refine (e.g. two halves of one
/// LLC), once per sysfs level, when the matrix level sits directly under it.
fn groups_split_by_the_matrix(tdom: &Domains, chain: &[Link]) -> Vec<Finding> {
    let mut findings = Vec::new();
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
        let g = first_split_group(part, &c.1, &tdom.cpus);
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
    findings
}
