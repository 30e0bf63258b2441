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
        let mut parts = candidate_levels(&dense);
        merge_blurred_levels(&mut parts);
        keep_clean_levels(&dense, &mut parts);
        // A level that exists in one part of the machine only (E-core clusters beside a
        // P-core ring, a CCD split on one socket) is found at that part's own scale.
        refine_partial_levels(&dense, &mut parts);
        let (mut findings, mut fixed_latency) = complete_uneven_levels(&dense, &mut parts, &cpus);
        findings.extend(recover_siblings(&mut dense, &mut parts, &cpus));
        drop_repeated_levels(&mut parts, &mut fixed_latency);
        let built = named_levels(&dense, &parts, &fixed_latency);
        let dom = Self::assemble(cpus, built, Some(&dense), Trust::Matrix);
        Ok((dom, findings, dense))
    }
}

/// A candidate level: its partition (a group number per CPU index) and the jump of
/// merge heights it was cut at.
type Part = (Vec<u32>, f64);

/// Candidate cuts of the average-linkage merges at jumps of the sorted merge heights,
/// finest first, each a partition with more than one group and fewer than one per CPU.
fn candidate_levels(dense: &Dense) -> Vec<Part> {
    let n = dense.n;
    let merges = upgma(dense);
    let mut heights: Vec<f64> = merges.iter().map(|m| m.2).collect();
    heights.sort_by(f64::total_cmp);
    let mut cuts: Vec<(f64, f64)> = Vec::new(); // (threshold, jump ratio)
    for w in heights.windows(2) {
        let (lo, hi) = (w[0].max(1e-9), w[1]);
        if hi / lo >= CUT_RATIO && hi - lo >= 1.0 {
            cuts.push(((lo * hi).sqrt(), hi / lo));
        }
    }
    let mut parts: Vec<Part> = cuts
        .iter()
        .map(|&(t, r)| (cut(&merges, n, t), r))
        .filter(|(p, _)| count_groups(p) > 1 && count_groups(p) < n)
        .collect();
    parts.dedup_by(|a, b| same_partition(&a.0, &b.0));
    parts
}

/// Two adjacent levels that differ by a handful of merges are one level blurred by an
/// odd cell: keep the one with the bigger jump.
fn merge_blurred_levels(parts: &mut Vec<Part>) {
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
}

/// Keep only clean levels: the pairs joined here are clearly faster than the pairs
/// joined at the next level.
fn keep_clean_levels(dense: &Dense, parts: &mut Vec<Part>) {
    let machine: Vec<u32> = vec![0; dense.n];
    loop {
        let mut removed = false;
        for i in 0..parts.len() {
            let finer: Option<&Vec<u32>> = if i == 0 { None } else { Some(&parts[i - 1].0) };
            let coarser: &Vec<u32> = parts.get(i + 1).map(|p| &p.0).unwrap_or(&machine);
            let within = joined_cells(dense, finer, &parts[i].0);
            let between = joined_cells(dense, Some(&parts[i].0), coarser);
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
}

/// Complete uneven levels by symmetry (NUMA-home artefact). The level's latency is then
/// the fast groups' figure: the hardware's cost when the line is homed locally. Returns
/// the findings and, per level, that figure where it was fixed so.
fn complete_uneven_levels(
    dense: &Dense,
    parts: &mut [Part],
    cpus: &[u32],
) -> (Vec<Finding>, Vec<Option<f64>>) {
    let mut findings = Vec::new();
    let mut fixed_latency: Vec<Option<f64>> = vec![None; parts.len()];
    for i in 0..parts.len() {
        let finer: Option<Vec<u32>> = if i == 0 {
            None
        } else {
            Some(parts[i - 1].0.clone())
        };
        if let Some((completed, f, fast)) =
            complete_by_symmetry(dense, finer.as_ref(), &parts[i].0, cpus)
        {
            parts[i].0 = completed;
            fixed_latency[i] = Some(fast);
            findings.extend(f);
        }
    }
    (findings, fixed_latency)
}

/// A mutual-nearest pair far below both members' next partners is an SMT core even
/// when its cell is slower than the other siblings' (3960X: 0/24 at 13 ns); a pair
/// hidden by one ruined cell is recovered from the others' numbering.
fn recover_siblings(dense: &mut Dense, parts: &mut [Part], cpus: &[u32]) -> Vec<Finding> {
    let Some(first) = parts.first() else {
        return Vec::new();
    };
    let mut first = first.0.clone();
    let next = parts
        .get(1)
        .map(|p| p.0.clone())
        .unwrap_or_else(|| vec![0; dense.n]);
    let sizes = group_sizes(&first);
    let cells = joined_cells(dense, None, &first);
    let mut findings = Vec::new();
    if sizes.iter().all(|&s| s <= 2) && percentile(&cells, 0.5).is_some_and(|v| v <= SMT_MAX_NS) {
        add_lone_siblings(dense, &mut first, &next);
        findings = siblings_by_pattern(dense, cpus, &mut first, &next);
    }
    parts[0].0 = first;
    findings
}

/// Pairing lone CPUs can make the first level equal to the second (cores of two CPUs):
/// one level, the finer one's.
fn drop_repeated_levels(parts: &mut Vec<Part>, fixed_latency: &mut Vec<Option<f64>>) {
    let mut k = 1;
    while k < parts.len() {
        if same_partition(&parts[k - 1].0, &parts[k].0) {
            parts.remove(k);
            fixed_latency.remove(k);
        } else {
            k += 1;
        }
    }
}

/// The levels named, finest first: SMT (or a cluster of pairs), the first cache-fast
/// level, then groups; each with its latency.
fn named_levels(
    dense: &Dense,
    parts: &[Part],
    fixed_latency: &[Option<f64>],
) -> Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> {
    let mut built: Vec<(Vec<LevelKind>, Vec<u32>, Option<f64>)> = Vec::new();
    let mut have_cache = false;
    for (i, (p, _)) in parts.iter().enumerate() {
        let finer = if i == 0 { None } else { Some(&parts[i - 1].0) };
        let within = joined_cells(dense, finer, p);
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
    built
}
