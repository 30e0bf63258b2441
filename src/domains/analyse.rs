//! The matrix alone: average-linkage merges cut into clean levels, uneven levels
//! completed, SMT pairs recovered, levels named.
//!
//! Must not touch: the OS (no files, no syscalls, no clocks).

use crate::matrix::LatencyMatrix;
use crate::stats::percentile;

use super::cluster::*;
use super::local::{refine_partial_levels, siblings_by_pattern};
use super::{DomainError, Domains, Finding, LevelKind, Trust, CUT_RATIO, SMT_MAX_NS};

impl Domains {
    /// Matrix-only analysis, also returning the cleaned dense matrix for reconciliation.
    pub(super) fn analyse(
        m: &LatencyMatrix,
    ) -> Result<(Domains, Vec<Finding>, Dense), DomainError> {
        let (mut dense, cpus) = Dense::from_matrix(m)?;
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

        // A level that exists in one part of the machine only (E-core clusters beside a
        // P-core ring, a CCD split on one socket) is found at that part's own scale.
        refine_partial_levels(&dense, &mut parts);

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
                // A pair hidden by one ruined cell, recovered from the others' numbering.
                findings.extend(siblings_by_pattern(&mut dense, &cpus, &mut first.0, &next));
            }
        }

        // Pairing lone CPUs can make the first level equal to the second (cores of two
        // CPUs): one level, the finer one's.
        let mut k = 1;
        while k < parts.len() {
            if same_partition(&parts[k - 1].0, &parts[k].0) {
                parts.remove(k);
                fixed_latency.remove(k);
            } else {
                k += 1;
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
}
