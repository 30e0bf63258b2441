//! Reconciling a matrix's domains with the sysfs grouping: which levels the matrix
//! sees, whether its numbering fits this machine, and one chain of levels from both.
//!
//! Must not touch: the OS (no files, no syscalls, no clocks).

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::stats::percentile;
use crate::topology::Topology;

use super::cluster::*;
use super::{DomainError, Domains, Finding, FindingKind, Layout, LevelKind, Trust, CONTRAST_SEEN};

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
                // Siblings are a fact of the hardware, whatever the matrix's figure made
                // of them (a pair level slower than real SMT, as under an emulator, is
                // named a cluster): sysfs's SMT names the level, so that `smt = "avoid"`
                // and exclusive cores see the cores.
                if tl.kind == LevelKind::Smt {
                    c.0.retain(|&k| k != LevelKind::Smt);
                    c.0.insert(0, LevelKind::Smt);
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
}
