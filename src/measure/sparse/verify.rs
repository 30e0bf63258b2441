//! Plan verification: the compact plans the reconstruction leads to stand on measured
//! cells, not on filled ones.
//!
//! ```text
//! filled cells ──► Domains::from_matrix ──► place(Compact, K) for every K of the list
//!      ▲                                          │ chosen CPUs
//!      │ measured figures replace the fill        ▼
//!      └──────────── measure, in rounds, every cell among them not measured yet
//!                    (stop: every K's choice fully measured, or the budget spent)
//! ```
//!
//! The fill gives every cell of a block one level, but inside a group the cells differ
//! (a CCD's 10, 15 and 21 ns): a plan from the fill chooses among equals and may take
//! the slow pair. Once a choice's cells are measured its worst cell is known, so any
//! other choice whose (estimated) cells are lower wins the next planning and is
//! measured in turn, until the planner's choice is measured throughout.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::{BTreeMap, BTreeSet};

use super::run::Run;
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::domains::Domains;
use crate::matrix::LatencyMatrix;
use crate::placement::{place, Policy, Request};

/// What verification did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Verified {
    /// Pairs it measured (new ones only).
    pub(super) pairs: usize,
    /// Planning rounds run.
    pub(super) rounds: usize,
    /// Every K's choice was measured throughout (false: the budget ran out first, or
    /// the reconstruction gave no domains).
    pub(super) settled: bool,
}

/// Measures the cells among the CPUs of the compact plans for `cfg.verify_counts`, and
/// plans again, until every choice is measured throughout or the next round would pass
/// the bound: `cfg.verify_share` of all pairs, but at least the pairs of the largest
/// plan. `cells` is the filled matrix (row-major n×n): measured figures replace the
/// fill in it.
pub(super) fn verify_plans<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cells: &mut [f64],
    cfg: &SparseConfig,
) -> Result<Verified, MeasureError> {
    let n = run.n();
    let total = n * n.saturating_sub(1) / 2;
    // At least the pairs of the largest plan, so a small machine can measure one.
    let largest = cfg
        .verify_counts
        .iter()
        .map(|&k| k * k.saturating_sub(1) / 2)
        .max();
    // Below the size from which the held-out checks stop (where a full matrix takes a
    // second or two), three times that: a choice, and two more if it loses.
    let plans = if n < cfg.held_out_below { 3 } else { 1 };
    let budget =
        ((cfg.verify_share * total as f64).ceil() as usize).max(largest.unwrap_or(0) * plans);
    let index: BTreeMap<u32, usize> = run.ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let all = run.ids.iter().copied().collect();
    // Pairs asked for once: one that gave no figure is not asked again.
    let mut asked: BTreeSet<(usize, usize)> = BTreeSet::new();
    // Figures from before verification measured again here (once each).
    let mut checked: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut done = Verified::default();
    loop {
        let m = LatencyMatrix::from_fn(run.ids.to_vec(), |i, j| cells[i * n + j]);
        let d = match Domains::from_matrix(&m) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "plan verification stopped: no domains");
                return Ok(done);
            }
        };
        let mut want: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut worst_seen: BTreeSet<(usize, usize)> = BTreeSet::new();
        for &k in cfg.verify_counts.iter().filter(|&&k| k >= 2 && k <= n) {
            let req = Request {
                count: k,
                policy: Policy::Compact,
                ..Request::default()
            };
            let p = match place(&d, &req, &all) {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(count = k, error = %e, "plan verification: no compact plan");
                    continue;
                }
            };
            let chosen: Vec<usize> = p
                .cpus
                .iter()
                .filter_map(|c| index.get(&c).copied())
                .collect();
            // The choice's pairs not asked for here yet: unmeasured, or measured before.
            let (seen, mut open): (Vec<_>, Vec<_>) = chosen
                .iter()
                .enumerate()
                .flat_map(|(a, &i)| chosen[..a].iter().map(move |&j| (i.min(j), i.max(j))))
                .filter(|pair| !asked.contains(pair))
                .partition(|&(i, j)| run.measured[i * n + j]);
            // The choice's worst figure from before verification (measured once) gets
            // the same second and third look as the figures measured here.
            if let Some(&w) = seen
                .iter()
                .max_by(|a, b| cells[a.0 * n + a.1].total_cmp(&cells[b.0 * n + b.1]))
            {
                if !checked.contains(&w) {
                    worst_seen.insert(w);
                }
            }
            // One round's worth: disjoint pairs, the highest estimates first. A choice
            // that hides a slow cell is left after a round, not after all its cells.
            open.sort_by(|a, b| cells[b.0 * n + b.1].total_cmp(&cells[a.0 * n + a.1]));
            let mut busy = BTreeSet::new();
            for (i, j) in open {
                if !busy.contains(&i) && !busy.contains(&j) {
                    busy.insert(i);
                    busy.insert(j);
                    want.insert((i, j));
                }
            }
        }
        if want.is_empty() {
            done.settled = true;
            return Ok(done);
        }
        if asked.len() + want.len() > budget {
            // The bound: the plans stand on the cells known so far (the fill where a
            // choice was not measured); a full matrix is the way to more.
            return Ok(done);
        }
        let want: Vec<(usize, usize)> = want.into_iter().collect();
        run.measure(&want, false)?;
        // A figure above the estimate it replaces is measured up to twice more (the
        // lowest is kept): the worst of a choice's figures is its noisiest, and a
        // choice should not lose to an unmeasured one by its noise alone.
        for _ in 0..2 {
            let mut high: Vec<(usize, usize)> = want
                .iter()
                .copied()
                .filter(|&(i, j)| run.get(i, j).is_some_and(|v| v > cells[i * n + j]))
                .collect();
            high.extend(worst_seen.iter().copied());
            run.measure(&high, true)?;
        }
        for &(i, j) in &worst_seen {
            if let Some(v) = run.get(i, j) {
                cells[i * n + j] = v;
                cells[j * n + i] = v;
            }
            checked.insert((i, j));
        }
        done.rounds += 1;
        for &(i, j) in &want {
            asked.insert((i, j));
            let Some(v) = run.get(i, j) else { continue };
            cells[i * n + j] = v;
            cells[j * n + i] = v;
            done.pairs += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::simulate::Simulated;

    /// 12 CPUs at 30 ns from each other, except CPUs 1, 4, 7 and 10: 10 ns among them.
    fn hidden_clique() -> LatencyMatrix {
        let near = |i: usize| i % 3 == 1;
        LatencyMatrix::from_fn((0..12).collect(), |i, j| {
            if near(i) && near(j) {
                10.0
            } else {
                30.0
            }
        })
    }

    /// Runs verification from a flat fill of 20 ns (what a block's level says) and
    /// returns its report, the cells and the measured flags.
    fn verify(cfg: &SparseConfig) -> (Verified, Vec<f64>, Vec<bool>) {
        let m = hidden_clique();
        let mut sim = Simulated::new(&m, 0.0, 1);
        let mut run = Run::new(&m.cpus, &mut sim);
        let mut cells: Vec<f64> = (0..144)
            .map(|x| if x / 12 == x % 12 { f64::NAN } else { 20.0 })
            .collect();
        let v = verify_plans(&mut run, &mut cells, cfg).unwrap();
        (v, cells, run.measured)
    }

    #[test]
    fn the_plan_a_flat_fill_hides_is_found_and_measured_throughout() {
        let cfg = SparseConfig {
            verify_counts: vec![4],
            verify_share: 1.0,
            ..SparseConfig::default()
        };
        let (v, cells, measured) = verify(&cfg);
        assert!(v.settled, "{v:?}");
        let clique = [1usize, 4, 7, 10];
        for &i in &clique {
            for &j in &clique {
                if i != j {
                    assert!(measured[i * 12 + j], "{i},{j} not measured");
                    assert_eq!(cells[i * 12 + j], 10.0);
                }
            }
        }
        // The planner, asked again on the verified cells, takes the clique.
        let m = LatencyMatrix::from_fn((0..12).collect(), |i, j| cells[i * 12 + j]);
        let d = Domains::from_matrix(&m).unwrap();
        let req = Request {
            count: 4,
            policy: Policy::Compact,
            ..Request::default()
        };
        let p = place(&d, &req, &(0..12).collect()).unwrap();
        assert_eq!(p.cpus, "1,4,7,10".parse().unwrap());
        let counted = (0..12)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .filter(|&(i, j)| measured[i * 12 + j])
            .count();
        assert_eq!(counted, v.pairs);
        assert!(v.pairs < 66, "every pair measured: {v:?}");
    }

    #[test]
    fn the_bound_stops_it_and_no_plan_asks_nothing() {
        // On a machine of the pair targets' size, a bound of the largest plan's
        // pairs (6 for K = 4): it stops unsettled.
        let cfg = SparseConfig {
            verify_counts: vec![4],
            verify_share: 0.0,
            held_out_below: 12,
            ..SparseConfig::default()
        };
        let (v, _, measured) = verify(&cfg);
        assert!(!v.settled, "{v:?}");
        assert!(v.pairs <= 6, "{v:?}");
        assert_eq!(measured.iter().filter(|&&b| b).count(), 2 * v.pairs);
        // Below that size, three times as many: more than the 6 are measured.
        let cfg = SparseConfig {
            held_out_below: 13,
            ..cfg
        };
        let (v, _, _) = verify(&cfg);
        assert!(v.pairs > 6 && v.pairs <= 18, "{v:?}");
        let cfg = SparseConfig {
            verify_counts: Vec::new(),
            ..SparseConfig::default()
        };
        let (v, _, measured) = verify(&cfg);
        assert_eq!(
            v,
            Verified {
                pairs: 0,
                rounds: 0,
                settled: true
            }
        );
        assert!(measured.iter().all(|&b| !b));
    }
}
