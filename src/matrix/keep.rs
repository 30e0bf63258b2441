//! Keeping measured cells across CPU hotplug and SMT toggles.
//!
//! The stored matrix covers every CPU ever measured on this hardware (the fingerprint
//! keys on possible/present CPUs, not online ones). When the usable set changes:
//!
//! ```text
//! stored matrix ──► cover(stored, usable) ──► no pair missing: the stored cells, restricted
//!                                         └─► pairs missing:   measure only those,
//!                                                              then fill(stored, cells)
//! new full matrix ──► merge(new, stored): the new cells win, CPUs it did not measure
//!                     (offline now) keep theirs
//! ```
//!
//! Pure functions of plain data. Must not touch: measurement, the store's files.

use crate::cpuset::CpuSet;

use super::{Cells, LatencyMatrix, PairStats};

/// What a stored matrix gives for a set of CPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Coverage {
    /// The stored cells among the CPUs, when no pair is missing.
    pub matrix: Option<LatencyMatrix>,
    /// Pairs `(a, b)`, `a < b`, of the CPUs that the stored matrix has no cell for.
    pub missing: Vec<(u32, u32)>,
}

/// Which pairs of `cpus` the stored matrix lacks, and the matrix over `cpus` when none.
/// Each CPU's row is looked up once (a lookup per pair, by a linear `index_of`, made
/// this cubic: a 4,096-CPU daemon did not start within 7 minutes).
pub fn cover(stored: &LatencyMatrix, cpus: &CpuSet) -> Coverage {
    let rows: std::collections::HashMap<u32, usize> = stored
        .cpus
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, i))
        .collect();
    let ids: Vec<(u32, Option<usize>)> = cpus.iter().map(|c| (c, rows.get(&c).copied())).collect();
    let mut missing = Vec::new();
    for (k, &(b, j)) in ids.iter().enumerate() {
        for &(a, i) in &ids[..k] {
            let cell = i.zip(j).and_then(|(i, j)| stored.at(i, j));
            if cell.is_none() {
                missing.push((a, b));
            }
        }
    }
    let matrix = missing.is_empty().then(|| restrict(stored, cpus));
    Coverage { matrix, missing }
}

/// Whether measuring only `missing` pairs of `cpus` CPUs pays, rather than the full
/// matrix: when they are at most half of all pairs (one new CPU in many, not an SMT
/// switch doubling the CPUs).
pub fn worth_filling(missing: usize, cpus: usize) -> bool {
    missing > 0 && missing * 4 <= cpus * cpus.saturating_sub(1)
}

/// The share of a full measurement's `budget` that `missing` pairs of `cpus` CPUs get,
/// at least `floor`.
pub fn fill_budget(
    budget: std::time::Duration,
    missing: usize,
    cpus: usize,
    floor: std::time::Duration,
) -> std::time::Duration {
    let pairs = (cpus * cpus.saturating_sub(1) / 2).max(1) as u32;
    (budget * missing.min(u32::MAX as usize) as u32 / pairs).max(floor)
}

/// The matrix over the CPUs of `m` that are in `cpus`, metadata and statistics kept.
pub fn restrict(m: &LatencyMatrix, cpus: &CpuSet) -> LatencyMatrix {
    let keep: Vec<usize> = (0..m.len()).filter(|&i| cpus.contains(m.cpus[i])).collect();
    let mut out = m.clone();
    out.cpus = keep.iter().map(|&i| m.cpus[i]).collect();
    out.latency_ns = Cells::new(keep.len());
    out.inferred = super::Inferred::default();
    for (a, &i) in keep.iter().enumerate() {
        for (b, &j) in keep.iter().enumerate().skip(a + 1) {
            out.latency_ns.set(a, b, m.latency_ns.get(i, j));
            if m.is_inferred(i, j) {
                out.inferred.set(keep.len(), a, b, true);
            }
        }
    }
    out.stats
        .retain(|s| cpus.contains(s.a) && cpus.contains(s.b));
    // Fewer CPUs, fewer pairs: the sparse counts are those of what is left.
    out.recount();
    out
}

/// `newer` with the cells of `older` for the pairs of a CPU `newer` does not cover (one
/// offline, or kept out of the measurement, while it was measured), over the union of
/// their CPUs. A pair of two CPUs `newer` covers is `newer`'s, also when it has no
/// figure there: that pair is left for completion to measure, as the daemon's matrix in
/// memory leaves it, so the stored file and the matrix in use say the same. Metadata
/// (time, primitive, fingerprint, warnings) is `newer`'s.
pub fn merge(newer: &LatencyMatrix, older: &LatencyMatrix) -> LatencyMatrix {
    let union: CpuSet = newer.cpus.iter().chain(&older.cpus).copied().collect();
    let cpus: Vec<u32> = union.iter().collect();
    let covered = |a: u32, b: u32| newer.index_of(a).is_some() && newer.index_of(b).is_some();
    let cell = |a: u32, b: u32| {
        if covered(a, b) {
            newer.between(a, b)
        } else {
            older.between(a, b)
        }
    };
    let rows = |m: &LatencyMatrix| -> std::collections::HashMap<u32, usize> {
        m.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect()
    };
    let (in_newer, in_older) = (rows(newer), rows(older));
    let inferred = |a: u32, b: u32| {
        let (m, at) = if covered(a, b) {
            (newer, &in_newer)
        } else {
            (older, &in_older)
        };
        match (at.get(&a), at.get(&b)) {
            (Some(&i), Some(&j)) => m.is_inferred(i, j),
            _ => false,
        }
    };
    let mut latency_ns = Cells::new(cpus.len());
    let mut marks = super::Inferred::default();
    for (i, &a) in cpus.iter().enumerate() {
        for (j, &b) in cpus.iter().enumerate().skip(i + 1) {
            latency_ns.set(i, j, cell(a, b));
            if inferred(a, b) {
                marks.set(cpus.len(), i, j, true);
            }
        }
    }
    let has = |s: &PairStats| covered(s.a, s.b);
    let mut stats: Vec<PairStats> = newer.stats.clone();
    stats.extend(older.stats.iter().filter(|s| !has(s)).cloned());
    stats.sort_by_key(|s| (s.a, s.b));
    let mut out = LatencyMatrix {
        cpus,
        latency_ns,
        stats,
        inferred: marks,
        ..newer.clone()
    };
    // More CPUs, more pairs: sparse counts are those of the union.
    out.recount();
    out
}

/// `stored` with the given cells `(a, b, ns)` added (over the union of CPUs); cells
/// without a figure stay missing. Everything else is `stored`'s.
pub fn fill(stored: &LatencyMatrix, cells: &[(u32, u32, Option<f64>)]) -> LatencyMatrix {
    let cpus: Vec<u32> = cells.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    let mut fresh = LatencyMatrix::new(
        cpus.iter().copied().collect::<CpuSet>().iter().collect(),
        Cells::new(0),
    );
    fresh.latency_ns = Cells::new(fresh.cpus.len());
    for &(a, b, ns) in cells {
        if let (Some(i), Some(j), Some(v)) = (fresh.index_of(a), fresh.index_of(b), ns) {
            if i != j {
                fresh.latency_ns.set(i, j, Some(v));
            }
        }
    }
    let mut out = merge(stored, &fresh);
    out.warnings = stored.warnings.clone();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cpuset::set;

    /// Cell value from the CPU ids, so any cell can be checked.
    fn value(a: u32, b: u32) -> f64 {
        10.0 + f64::from(a.min(b)) * 100.0 + f64::from(a.max(b))
    }

    fn over(list: &str) -> LatencyMatrix {
        let ids: Vec<u32> = set(list).iter().collect();
        let mut m = LatencyMatrix::from_fn(ids.clone(), |i, j| value(ids[i], ids[j]));
        m.fingerprint = Some("fp".into());
        m
    }

    #[test]
    fn a_cpu_that_went_offline_and_came_back_needs_nothing_measured() {
        let stored = over("0-7");
        let c = cover(&stored, &set("0-2,4-7"));
        assert!(c.missing.is_empty());
        let m = c.matrix.unwrap();
        assert_eq!(m.cpus, vec![0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(m.between(2, 4), Some(value(2, 4)));
        assert_eq!(m.fingerprint.as_deref(), Some("fp"));
        m.validate().unwrap();
        let back = cover(&stored, &set("0-7")).matrix.unwrap();
        assert_eq!(back, stored);
    }

    #[test]
    fn only_pairs_with_a_new_cpu_are_missing() {
        let stored = over("0-3");
        let c = cover(&stored, &set("0-3,6"));
        assert_eq!(c.matrix, None);
        assert_eq!(c.missing, vec![(0, 6), (1, 6), (2, 6), (3, 6)]);
        // A hole inside the matrix counts too.
        let mut holed = stored.clone();
        holed.latency_ns.set(1, 2, None);
        assert_eq!(cover(&holed, &set("0-3")).missing, vec![(1, 2)]);
    }

    #[test]
    fn filling_the_missing_pairs_completes_the_matrix_and_keeps_the_old_cells() {
        let stored = over("0-3");
        let missing = cover(&stored, &set("0-3,6")).missing;
        let cells: Vec<_> = missing
            .iter()
            .map(|&(a, b)| (a, b, Some(value(a, b))))
            .collect();
        let filled = fill(&stored, &cells);
        filled.validate().unwrap();
        assert_eq!(filled, over("0-3,6"));
        // A pair that could not be measured stays missing, and so is asked for again.
        let mut partial = cells.clone();
        partial[0].2 = None;
        let filled = fill(&stored, &partial);
        assert_eq!(cover(&filled, &set("0-3,6")).missing, vec![(0, 6)]);
    }

    #[test]
    fn filling_pays_for_a_few_new_cpus_not_for_a_doubling() {
        // 16 CPUs, one new: 15 of 120 pairs.
        assert!(worth_filling(15, 16));
        // SMT switched on: 8 → 16 CPUs, 92 of 120 pairs new.
        assert!(!worth_filling(92, 16));
        assert!(!worth_filling(0, 16));
        let s = std::time::Duration::from_secs;
        assert_eq!(fill_budget(s(120), 15, 16, s(1)), s(15));
        assert_eq!(fill_budget(s(120), 1, 16, s(5)), s(5));
    }

    /// A pair the new matrix covers but has no figure for (its measurement failed) is
    /// not filled from the old one: it stays for completion, and the counts say so.
    #[test]
    fn a_pair_the_new_matrix_covers_without_a_figure_is_not_filled_from_the_old() {
        let stored = over("0-4");
        let mut newer = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |_, _| 1.0);
        newer.latency_ns.set(1, 2, None);
        newer.sparse = Some(Box::new(crate::matrix::SparseCounts {
            pairs_measured: 5,
            pairs_total: 6,
            modelled_seconds: 0.0,
        }));
        let m = merge(&newer, &stored);
        assert_eq!(m.between(1, 2), None, "left for completion");
        assert_eq!(m.between(0, 4), Some(value(0, 4)), "CPU 4's cells kept");
        let sp = m.sparse.as_ref().unwrap();
        assert_eq!((sp.pairs_measured, sp.pairs_total), (9, 10));
        assert_eq!(crate::measure::complete::pending(&m), vec![(1, 2)]);
    }

    #[test]
    fn a_new_full_matrix_wins_and_offline_cpus_keep_their_cells() {
        let stored = over("0-7");
        let mut newer = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 1.0);
        newer.measured_at_us = Some(99);
        newer.stats = vec![PairStats {
            a: 0,
            b: 1,
            p10_ns: 1.0,
            median_ns: 1.0,
            p90_ns: 1.0,
            samples: 3,
            discarded: 0,
            round_trips: 100,
            inferred: false,
        }];
        let mut old_stats = newer.stats[0].clone();
        (old_stats.p10_ns, old_stats.median_ns, old_stats.p90_ns) = (5.0, 5.0, 5.0);
        let mut stored_with_stats = stored.clone();
        stored_with_stats.stats = vec![
            old_stats.clone(),
            PairStats {
                a: 3,
                b: 4,
                ..old_stats.clone()
            },
        ];
        let m = merge(&newer, &stored_with_stats);
        m.validate().unwrap();
        assert_eq!(m.cpus, (0..8).collect::<Vec<_>>());
        assert_eq!(m.between(0, 1), Some(1.0));
        assert_eq!(
            m.between(0, 5),
            Some(value(0, 5)),
            "kept from the old matrix"
        );
        assert_eq!(m.between(6, 7), Some(value(6, 7)));
        assert_eq!(m.measured_at_us, Some(99));
        assert_eq!(
            m.stats
                .iter()
                .map(|s| (s.a, s.b, s.median_ns))
                .collect::<Vec<_>>(),
            vec![(0, 1, 1.0), (3, 4, 5.0)]
        );
    }
}
