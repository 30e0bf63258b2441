//! Plan verification: the compact plans the reconstruction leads to stand on measured
//! cells, not on filled ones.
//!
//! ```text
//! filled cells ──► Domains::from_matrix ──► place(Compact, K) for every K of the list
//!      ▲                                          │ chosen CPUs
//!      │ measured figures replace the fill        ▼
//!      └──────────── measure, in rounds, every cell among them not measured yet
//!                    (the smaller K first; stop: the bound spent)
//!                                                 │ every K's choice measured
//!                                                 ▼
//!      runners-up: the same, on the cells with every unmeasured one taken a few per
//!      cent lower; a choice that wins there is measured whole or not at all
//!      (stop: every such choice measured, or none fits in the bound)
//! ```
//!
//! The fill gives every cell of a block one level, but inside a group the cells differ
//! (a CCD's 10, 15 and 21 ns): a plan from the fill chooses among equals and may take
//! the slow pair. Once a choice's cells are measured its worst cell is known, so any
//! other choice whose (estimated) cells are lower wins the next planning and is
//! measured in turn, until the planner's choice is measured throughout. A choice whose
//! fill is a little above the measured one's figures (four CPUs of a mesh cluster
//! under a median filled from the whole level) would never win on the fill: the
//! runners-up round measures it, and the figures decide.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::{BTreeMap, BTreeSet};

use super::run::Run;
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::cpuset::CpuSet;
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
    /// Times the domains were found from the cells: once, once more for the
    /// runners-up, and again only after a figure came in lower than its cell by more
    /// than `cfg.tolerance` (each costs O(n²): seconds at 4,096 CPUs).
    pub(super) analyses: usize,
}

/// Measures the cells among the CPUs of the compact plans for `cfg.verify_counts`, and
/// plans again, until every choice is measured throughout, then their runners-up
/// (`cfg.verify_runner_up`), until the bound is spent: `cfg.verify_share` of all
/// pairs, but at least the pairs of the largest plan (three times that below
/// `cfg.held_out_below` CPUs). `cells` is the filled matrix (row-major n×n): measured
/// figures replace the fill in it.
pub(super) fn verify_plans<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cells: &mut [f64],
    cfg: &SparseConfig,
) -> Result<Verified, MeasureError> {
    let mut v = Verifying::new(run, cfg);
    loop {
        if v.current.is_none() {
            v.current = match analyse(run, cells, v.runner_up, cfg) {
                Some(d) => Some(d),
                None => return Ok(v.done),
            };
            v.done.analyses += 1;
        }
        let Round {
            mut want,
            worst_seen,
        } = v.plan_round(run, cells, cfg);
        if want.is_empty() {
            if v.runner_up || cfg.verify_runner_up <= 0.0 {
                v.done.settled = true;
                return Ok(v.done);
            }
            // The planner's choices stand on measured cells; now their runners-up.
            v.done.settled = true;
            v.runner_up = true;
            v.current = None;
            continue;
        }
        // The bound: the plans stand on the cells known so far (the fill where a
        // choice was not measured); a full matrix is the way to more.
        want.truncate(v.budget.saturating_sub(v.asked.len()));
        if want.is_empty() {
            return Ok(v.done);
        }
        measure_round(run, cells, &want, &worst_seen)?;
        v.take_figures(run, cells, cfg, &want, &worst_seen);
    }
}

/// The pairs [`verify_plans`] may measure: `cfg.verify_share` of all pairs, but at
/// least the pairs of the largest plan (three times that below `cfg.held_out_below`
/// CPUs).
fn bound(n: usize, cfg: &SparseConfig) -> usize {
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
    ((cfg.verify_share * total as f64).ceil() as usize).max(largest.unwrap_or(0) * plans)
}

/// Where [`verify_plans`] stands between its rounds.
struct Verifying {
    n: usize,
    /// The bound on the pairs asked for (see [`bound`]).
    budget: usize,
    /// A CPU's place in the run's list.
    index: BTreeMap<u32, usize>,
    /// Every CPU of the run, for the planner.
    all: CpuSet,
    /// Pairs asked for once: one that gave no figure is not asked again.
    asked: BTreeSet<(usize, usize)>,
    /// Figures from before verification measured again here (once each).
    checked: BTreeSet<(usize, usize)>,
    done: Verified,
    /// Set once the planner's choices are measured throughout: from then on a round
    /// plans on cells where every unmeasured one is taken `cfg.verify_runner_up`
    /// lower, so a choice whose fill comes that close to the measured one's figures is
    /// measured too (the runner-up), and wins if it is better.
    runner_up: bool,
    /// The domains planned on, found again only when a round leaves them stale.
    current: Option<Domains>,
}

/// What one round of [`verify_plans`] asks for.
struct Round {
    /// Disjoint pairs of the choices, in order of K, the highest estimates first.
    want: Vec<(usize, usize)>,
    /// The choices' worst figures from before verification, to be looked at again.
    worst_seen: BTreeSet<(usize, usize)>,
}

impl Verifying {
    fn new<M: PairMeasurer>(run: &Run<'_, M>, cfg: &SparseConfig) -> Verifying {
        let n = run.n();
        Verifying {
            n,
            budget: bound(n, cfg),
            index: run.ids.iter().enumerate().map(|(i, &c)| (c, i)).collect(),
            all: run.ids.iter().copied().collect(),
            asked: BTreeSet::new(),
            checked: BTreeSet::new(),
            done: Verified::default(),
            runner_up: false,
            current: None,
        }
    }

    /// The pairs of this round: for every K of the list, in order (the smaller plans,
    /// cheap to settle, first when the bound leaves room for part of a round only),
    /// the compact plan on the current domains and the pairs of its choice not asked
    /// for yet.
    fn plan_round<M: PairMeasurer>(
        &self,
        run: &Run<'_, M>,
        cells: &[f64],
        cfg: &SparseConfig,
    ) -> Round {
        let n = self.n;
        let d = self.current.as_ref().expect("analysed above");
        let mut round = Round {
            want: Vec::new(),
            worst_seen: BTreeSet::new(),
        };
        let mut counts: Vec<usize> = cfg
            .verify_counts
            .iter()
            .copied()
            .filter(|&k| k >= 2 && k <= n)
            .collect();
        counts.sort_unstable();
        counts.dedup();
        for k in counts {
            let req = Request {
                count: k,
                policy: Policy::Compact,
                ..Request::default()
            };
            let p = match place(d, &req, &self.all) {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(count = k, error = %e, "plan verification: no compact plan");
                    continue;
                }
            };
            let chosen: Vec<usize> = p
                .cpus
                .iter()
                .filter_map(|c| self.index.get(&c).copied())
                .collect();
            self.add_choice(run, cells, &chosen, &mut round);
        }
        round
    }

    /// Adds to `round` the pairs of one choice (`chosen`, places in the run's list):
    /// its worst figure from before verification, and one round's worth of its pairs
    /// not asked for yet.
    fn add_choice<M: PairMeasurer>(
        &self,
        run: &Run<'_, M>,
        cells: &[f64],
        chosen: &[usize],
        round: &mut Round,
    ) {
        let n = self.n;
        // The choice's pairs not asked for here yet: unmeasured, or measured before.
        let (seen, mut open): (Vec<_>, Vec<_>) = chosen
            .iter()
            .enumerate()
            .flat_map(|(a, &i)| chosen[..a].iter().map(move |&j| (i.min(j), i.max(j))))
            .filter(|pair| !self.asked.contains(pair))
            .partition(|&(i, j)| run.measured[i * n + j]);
        // The choice's worst figure from before verification (measured once) gets
        // the same second and third look as the figures measured here.
        if let Some(&w) = seen
            .iter()
            .max_by(|a, b| cells[a.0 * n + a.1].total_cmp(&cells[b.0 * n + b.1]))
        {
            if !self.checked.contains(&w) {
                round.worst_seen.insert(w);
            }
        }
        // One round's worth: disjoint pairs, the highest estimates first. A choice
        // that hides a slow cell is left after a round, not after all its cells.
        // A runner-up is measured only where all it lacks fits in the bound: one
        // left half measured would win on the fill of the cells it hides.
        if self.runner_up
            && open.len()
                > self
                    .budget
                    .saturating_sub(self.asked.len() + round.want.len())
        {
            return;
        }
        open.sort_by(|a, b| cells[b.0 * n + b.1].total_cmp(&cells[a.0 * n + a.1]));
        let mut busy = BTreeSet::new();
        for (i, j) in open {
            if !busy.contains(&i) && !busy.contains(&j) && !round.want.contains(&(i, j)) {
                busy.insert(i);
                busy.insert(j);
                round.want.push((i, j));
            }
        }
    }

    /// Measured figures replace their cells. The domains found before stand, with
    /// the figures as their costs, unless one is lower than its cell by more than
    /// the tolerance: then the groups may be wrong (a fill that hid a closer group)
    /// and the next round finds them again. A figure above its cell only makes its
    /// choice lose, which the costs say.
    fn take_figures<M: PairMeasurer>(
        &mut self,
        run: &Run<'_, M>,
        cells: &mut [f64],
        cfg: &SparseConfig,
        want: &[(usize, usize)],
        worst_seen: &BTreeSet<(usize, usize)>,
    ) {
        let mut stale = false;
        for &(i, j) in worst_seen {
            if let Some(v) = run.get(i, j) {
                stale |= self.replace(run, cells, cfg, (i, j), v);
            }
            self.checked.insert((i, j));
        }
        self.done.rounds += 1;
        for &(i, j) in want {
            self.asked.insert((i, j));
            let Some(v) = run.get(i, j) else { continue };
            stale |= self.replace(run, cells, cfg, (i, j), v);
            self.done.pairs += 1;
        }
        if stale {
            self.current = None;
        }
    }

    /// Puts figure `v` of pair `(i, j)` in its cells and the domains' costs; `true` when
    /// it leaves the domains stale (lower than its cell by more than the tolerance).
    fn replace<M: PairMeasurer>(
        &mut self,
        run: &Run<'_, M>,
        cells: &mut [f64],
        cfg: &SparseConfig,
        (i, j): (usize, usize),
        v: f64,
    ) -> bool {
        let n = self.n;
        let old = cells[i * n + j];
        let stale = !(old.is_finite() && v >= old * (1.0 - cfg.tolerance));
        cells[i * n + j] = v;
        cells[j * n + i] = v;
        if let Some(d) = self.current.as_mut() {
            d.set_cost_ns(run.ids[i], run.ids[j], v);
        }
        stale
    }
}

/// Measures the round's pairs, then a figure above the estimate it replaces up to
/// twice more (the lowest is kept), with the choices' worst figures from before: the
/// worst of a choice's figures is its noisiest, and a choice should not lose to an
/// unmeasured one by its noise alone.
fn measure_round<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cells: &[f64],
    want: &[(usize, usize)],
    worst_seen: &BTreeSet<(usize, usize)>,
) -> Result<(), MeasureError> {
    let n = run.n();
    run.measure(want, false)?;
    for _ in 0..2 {
        let mut high: Vec<(usize, usize)> = want
            .iter()
            .copied()
            .filter(|&(i, j)| run.get(i, j).is_some_and(|v| v > cells[i * n + j]))
            .collect();
        high.extend(worst_seen.iter().copied());
        run.measure(&high, true)?;
    }
    Ok(())
}

/// The domains of the cells (row-major n×n), with every unmeasured cell taken
/// `cfg.verify_runner_up` lower when planning for the runners-up; `None` when the
/// cells give none.
fn analyse<M: PairMeasurer>(
    run: &Run<'_, M>,
    cells: &[f64],
    runner_up: bool,
    cfg: &SparseConfig,
) -> Option<Domains> {
    let n = run.n();
    let view: Vec<f64> = if runner_up {
        (0..n * n)
            .map(|x| {
                let (i, j) = (x / n, x % n);
                if i == j || run.measured[x] {
                    cells[x]
                } else {
                    cells[x] * (1.0 - cfg.verify_runner_up)
                }
            })
            .collect()
    } else {
        cells.to_vec()
    };
    let m = LatencyMatrix::from_fn(run.ids.to_vec(), |i, j| view[i * n + j]);
    match Domains::from_matrix(&m) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::debug!(error = %e, "plan verification stopped: no domains");
            None
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

    /// The compact plan of four CPUs the planner makes from 12 CPUs' `cells`.
    fn compact_four(cells: &[f64]) -> crate::CpuSet {
        let m = LatencyMatrix::from_fn((0..12).collect(), |i, j| cells[i * 12 + j]);
        let d = Domains::from_matrix(&m).unwrap();
        let req = Request {
            count: 4,
            policy: Policy::Compact,
            ..Request::default()
        };
        place(&d, &req, &(0..12).collect()).unwrap().cpus
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
        assert_eq!(compact_four(&cells), "1,4,7,10".parse().unwrap());
        let counted = (0..12)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .filter(|&(i, j)| measured[i * 12 + j])
            .count();
        assert_eq!(counted, v.pairs);
        assert!(v.pairs < 66, "every pair measured: {v:?}");
    }

    /// 64 CPUs in pairs at 10 ns, 40 ns across, filled at 9 ns in the pairs: each pair
    /// measured is slower than the fill of every other, so
    /// the planner moves to an unmeasured pair round after round. The domains are found
    /// once and once more for the runners-up, not every round (each time is O(n²)).
    #[test]
    fn rounds_whose_figures_stay_within_the_tolerance_plan_on_the_domains_found_before() {
        let m = LatencyMatrix::nested(64, &[10.0, 40.0]);
        let mut sim = Simulated::new(&m, 0.0, 1);
        let mut run = Run::new(&m.cpus, &mut sim);
        let mut cells: Vec<f64> = (0..64 * 64)
            .map(|x| match m.latency_ns.get(x / 64, x % 64) {
                None => f64::NAN,
                Some(v) if v < 20.0 => 9.0,
                Some(v) => v,
            })
            .collect();
        let cfg = SparseConfig {
            verify_counts: vec![2],
            verify_share: 1.0,
            ..SparseConfig::default()
        };
        let v = verify_plans(&mut run, &mut cells, &cfg).unwrap();
        assert!(v.settled, "{v:?}");
        assert!(v.rounds >= 16, "the choice moved in few rounds: {v:?}");
        assert_eq!(v.analyses, 2, "{v:?}");
    }

    /// 12 CPUs at 200 ns, CPUs 1, 4, 7 and 10 at 100 ns among themselves; filled at
    /// 220 ns but 198 among CPUs 0, 3, 6 and 9 and 203 among the four close ones (a
    /// fill a few per cent off, as a level's median is for its closest CPUs).
    /// Verifies K = 4 and returns the report, the cells and the measured flags.
    fn verify_runner_up(cfg: &SparseConfig) -> (Verified, Vec<f64>, Vec<bool>) {
        let close = |i: usize| i % 3 == 1;
        let decoy = |i: usize| i % 3 == 0;
        let m = LatencyMatrix::from_fn((0..12).collect(), |i, j| {
            if close(i) && close(j) {
                100.0
            } else {
                200.0
            }
        });
        let mut sim = Simulated::new(&m, 0.0, 1);
        let mut run = Run::new(&m.cpus, &mut sim);
        let mut cells: Vec<f64> = (0..144)
            .map(|x| {
                let (i, j) = (x / 12, x % 12);
                if i == j {
                    f64::NAN
                } else if close(i) && close(j) {
                    203.0
                } else if decoy(i) && decoy(j) {
                    198.0
                } else {
                    220.0
                }
            })
            .collect();
        let cfg = SparseConfig {
            verify_counts: vec![4],
            ..cfg.clone()
        };
        let v = verify_plans(&mut run, &mut cells, &cfg).unwrap();
        (v, cells, run.measured)
    }

    #[test]
    fn a_runner_up_the_fill_puts_close_behind_is_measured_and_wins() {
        let clique = [1usize, 4, 7, 10];
        let clique_measured = |measured: &[bool]| {
            clique
                .iter()
                .all(|&i| clique.iter().all(|&j| i == j || measured[i * 12 + j]))
        };
        let cfg = SparseConfig {
            verify_share: 1.0,
            ..SparseConfig::default()
        };
        // The fill leads to CPUs 0, 3, 6 and 9; measured at 200 they are behind the
        // close four's 203 taken 3% lower, which are measured and win.
        let (v, cells, measured) = verify_runner_up(&cfg);
        assert!(v.settled, "{v:?}");
        assert!(clique_measured(&measured), "{v:?}");
        assert_eq!(compact_four(&cells), "1,4,7,10".parse().unwrap());
        assert_eq!(
            v.pairs, 12,
            "the decoy's 6 pairs and the runner-up's 6: {v:?}"
        );
        // Without runners-up the plan stays on the decoy.
        let off = SparseConfig {
            verify_runner_up: 0.0,
            ..cfg.clone()
        };
        let (v, cells, measured) = verify_runner_up(&off);
        assert!(v.settled, "{v:?}");
        assert!(!clique
            .iter()
            .any(|&i| clique.iter().any(|&j| measured[i * 12 + j])));
        assert_eq!(compact_four(&cells), "0,3,6,9".parse().unwrap());
        // A runner-up that does not fit in the bound whole is not begun: of a bound
        // of 8 pairs (12% of 66), the decoy takes 6 and the close four lack 6.
        let tight = SparseConfig {
            verify_share: 0.12,
            held_out_below: 12,
            ..cfg
        };
        let (v, _, measured) = verify_runner_up(&tight);
        assert!(v.settled, "{v:?}");
        assert_eq!(v.pairs, 6, "{v:?}");
        assert!(!clique
            .iter()
            .any(|&i| clique.iter().any(|&j| measured[i * 12 + j])));
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
                settled: true,
                analyses: 2,
            }
        );
        assert!(measured.iter().all(|&b| !b));
    }
}
