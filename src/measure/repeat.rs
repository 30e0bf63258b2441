//! The repeat check at the end of every measurement (full, sparse, simulated): a sample
//! of pairs measured again on the same engine and compared with the matrix, so a host
//! that moves its vCPUs while we measure is named instead of published as the machine.
//!
//! ```text
//! matrix ─► sample (each CPU's nearest pair + a spread over the latency range)
//!              │ measured again, ANSWERS times each, the lowest kept
//!              ▼
//!           judge ─► Stability { repeated, disagreeing, nearest_moved, verdict }
//! ```
//!
//! The nearest pairs are the ones placement stands on (a compact plan takes a CPU's
//! nearest partner first), the spread catches a host that moved every level at once.
//! [`sample`] and [`judge`] are pure; [`check`] runs the sample on any
//! [`PairMeasurer`] (the spinner, or [`super::simulate::Simulated`]).
//!
//! Must not touch: placement (it reads the verdict), files.

use std::collections::BTreeSet;

use super::sparse::PairMeasurer;
use super::{drift_check, estimator, MeasureError};
use crate::matrix::{LatencyMatrix, Stability, Verdict};

/// A repeat further than this (relative, `|a − b| / min`) from its cell disagrees. A
/// stable host repeats a pair within a few percent (passes disagreeing by more than
/// 10% already get extra passes); a moved vCPU changes level, which is a factor of 2.5
/// or more between the levels of the matrices in `c2c-data` and on the build VM
/// (9 ns siblings, 25 ns same CCX, 100 ns other CCD).
pub const TOLERANCE: f64 = 0.25;

/// A matrix whose disagreeing repeats exceed this share of the sample is unstable: one
/// pair preempted twice in a row is not a moving host, a quarter of the sample is.
pub const BOUND: f64 = 0.25;

/// Pairs spread over the latency range, on top of each CPU's nearest pair.
pub const SPREAD_PAIRS: usize = 8;

/// Answers per repeated pair; the lowest is kept, since preemption only ever makes a
/// figure higher (two preempted answers in a row are rare enough for [`BOUND`]).
pub const ANSWERS: usize = 2;

/// The share of a measurement's budget kept for the repeat check: a tenth. The check
/// makes at most `2 × (CPUs + 8)` pair measurements against a full matrix's
/// `CPUs × (CPUs − 1)` pair-passes (30 against 240 on the 16-CPU Ryzen 2700X, 2 against
/// 2 on two CPUs), and each stops by the stop rule, usually well before its share.
pub const BUDGET_SHARE: u32 = 10;

/// The pairs to measure again: each CPU's nearest pair (the cell placement trusts
/// most), then [`SPREAD_PAIRS`] pairs spread over the latency range, each pair once,
/// `(low, high)` CPU ids.
pub fn sample(m: &LatencyMatrix) -> Vec<(u32, u32)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let nearest = (0..m.len()).filter_map(|i| nearest(m, i, None).map(|(j, _)| (i, j)));
    let spread = drift_check::probe_sample(m, SPREAD_PAIRS)
        .into_iter()
        .filter_map(|(a, b)| Some((m.index_of(a)?, m.index_of(b)?)));
    for (i, j) in nearest.chain(spread) {
        let (a, b) = (m.cpus[i], m.cpus[j]);
        let pair = (a.min(b), a.max(b));
        if seen.insert(pair) {
            out.push(pair);
        }
    }
    out
}

/// Row `i`'s nearest partner and its figure, leaving out `except` (a tie goes to the
/// lower row).
fn nearest(m: &LatencyMatrix, i: usize, except: Option<usize>) -> Option<(usize, f64)> {
    (0..m.len())
        .filter(|&j| j != i && Some(j) != except)
        .filter_map(|j| Some((j, m.at(i, j)?)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
}

/// The verdict on `m` from `repeats` (`(a, b, figure)`, a figure `None` when the pair
/// gave none). `vm`: the machine says it is a virtual machine. `None` when no repeat
/// gave a figure for a cell the matrix has: nothing was checked.
pub fn judge(
    m: &LatencyMatrix,
    repeats: &[(u32, u32, Option<f64>)],
    vm: bool,
) -> Option<Stability> {
    let mut repeated = 0;
    let mut disagreeing = 0;
    let mut figure = std::collections::BTreeMap::new();
    for &(a, b, ns) in repeats {
        let (Some(cell), Some(ns)) = (m.between(a, b), ns) else {
            continue;
        };
        repeated += 1;
        if estimator::disagreement(cell, ns) > TOLERANCE {
            disagreeing += 1;
        }
        figure.insert((a.min(b), a.max(b)), (cell, ns));
    }
    if repeated == 0 {
        return None;
    }
    // A CPU whose nearest pair now measures further than its next pair in the matrix:
    // a compact plan made from the matrix would take the wrong partner.
    let nearest_moved = (0..m.len())
        .filter(|&i| {
            let Some((j, _)) = nearest(m, i, None) else {
                return false;
            };
            let (a, b) = (m.cpus[i], m.cpus[j]);
            let Some(&(cell, ns)) = figure.get(&(a.min(b), a.max(b))) else {
                return false;
            };
            let next = nearest(m, i, Some(j)).map_or(f64::INFINITY, |(_, v)| v);
            estimator::disagreement(cell, ns) > TOLERANCE && ns > next
        })
        .count();
    let share = disagreeing as f64 / repeated as f64;
    let mut why = Vec::new();
    if share > BOUND {
        why.push(format!(
            "{disagreeing} of {repeated} pairs measured again differ from the matrix by more than {:.0}% (bound {:.0}% of them)",
            TOLERANCE * 100.0,
            BOUND * 100.0
        ));
    }
    if nearest_moved > 0 {
        why.push(format!(
            "{nearest_moved} CPU(s) found their nearest pair further than their next one when measured again"
        ));
    }
    Some(Stability {
        repeated,
        disagreeing,
        nearest_moved,
        tolerance: TOLERANCE,
        bound: BOUND,
        verdict: if why.is_empty() {
            Verdict::Stable
        } else {
            Verdict::Unstable
        },
        vm,
        why: (!why.is_empty()).then(|| why.join("; ")),
    })
}

/// Measures [`sample`] of `m` again on `meas`, one pair per round, [`ANSWERS`] times
/// (all pairs, then all again, so a pair's answers are apart in time), and judges.
/// The pairs' figures, for the caller's records, come with the verdict.
pub fn check<M: PairMeasurer>(
    m: &LatencyMatrix,
    meas: &mut M,
    vm: bool,
) -> Result<(Option<Stability>, Repeats), MeasureError> {
    let pairs = sample(m);
    let mut best: Vec<Option<f64>> = vec![None; pairs.len()];
    for _ in 0..ANSWERS {
        for (k, &pair) in pairs.iter().enumerate() {
            let got = meas.measure_round(&[pair])?.into_iter().next().flatten();
            if let Some(ns) = got {
                best[k] = Some(best[k].map_or(ns, |b: f64| b.min(ns)));
            }
        }
    }
    let repeats: Repeats = pairs
        .iter()
        .zip(best)
        .map(|(&(a, b), ns)| (a, b, ns))
        .collect();
    Ok((judge(m, &repeats, vm), repeats))
}

/// Pairs measured again, `(a, b, figure)`: the lowest of the pair's answers, `None`
/// when none gave a figure.
pub type Repeats = Vec<(u32, u32, Option<f64>)>;

/// Runs [`check`] and records its verdict in `m` (its `stability`, and a warning saying
/// why when it is unstable). A check that cannot run (a measuring thread not started)
/// leaves the matrix measured and not checked, with a warning saying why: the matrix is
/// never lost to its check.
pub fn record<M: PairMeasurer>(
    m: &mut LatencyMatrix,
    meas: &mut M,
    vm: bool,
) -> Result<(), MeasureError> {
    let t0 = std::time::Instant::now();
    let stability = match check(m, meas, vm) {
        Ok((stability, _)) => stability,
        Err(e) => {
            tracing::warn!(error = %e, "the repeat check could not run: {e}");
            m.warnings
                .push(format!("the repeat check could not run ({e}): not checked"));
            None
        }
    };
    if let Some(s) = &stability {
        tracing::info!(
            repeated = s.repeated,
            disagreeing = s.disagreeing,
            nearest_moved = s.nearest_moved,
            verdict = %s.verdict,
            took_s = t0.elapsed().as_secs_f64(),
            "repeat check: {}: {} pairs measured again, {} disagree, {} CPUs' nearest pair moved \
             ({:.1} s)",
            s.verdict,
            s.repeated,
            s.disagreeing,
            s.nearest_moved,
            t0.elapsed().as_secs_f64()
        );
        if let (Some(line), Some(why)) = (s.latency_off(), &s.why) {
            m.warnings.push(format!("{line} ({why})"));
        }
    }
    m.stability = stability;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::simulate::Simulated;
    use crate::measure::sparse::{run_sparse, SparseConfig};

    /// A measurer whose every round fails, as one whose threads cannot start.
    struct Failing;

    impl PairMeasurer for Failing {
        fn measure_round(&mut self, _: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError> {
            Err(MeasureError::EmptyCpuList)
        }
    }

    #[test]
    fn a_check_that_cannot_run_leaves_the_matrix_measured_and_not_checked() {
        let mut m = ryzen();
        let cells = m.clone();
        record(&mut m, &mut Failing, false).unwrap();
        assert_eq!(m.stability, None);
        assert!(
            m.warnings
                .iter()
                .any(|w| w.starts_with("the repeat check could not run (")),
            "{:?}",
            m.warnings
        );
        assert_eq!(m.latency_off(), None);
        assert_eq!(
            (0..m.len()).map(|i| m.at(i, 0)).collect::<Vec<_>>(),
            (0..cells.len()).map(|i| cells.at(i, 0)).collect::<Vec<_>>()
        );
    }

    /// A published 16-CPU matrix (Ryzen 7 2700X: SMT siblings, two CCXs).
    fn ryzen() -> LatencyMatrix {
        LatencyMatrix::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "tests/fixtures/c2c-data/nviennot/AMD_Ryzen_7_2700X_Eight-Core_Processor.csv",
            ),
        )
        .unwrap()
    }

    #[test]
    fn the_sample_holds_every_cpus_nearest_pair_and_a_spread_once_each() {
        let m = LatencyMatrix::nested(8, &[5.0, 20.0, 80.0]);
        let s = sample(&m);
        for p in [(0, 1), (2, 3), (4, 5), (6, 7)] {
            assert!(s.contains(&p), "{p:?} in {s:?}");
        }
        let set: BTreeSet<_> = s.iter().copied().collect();
        assert_eq!(set.len(), s.len(), "no pair twice: {s:?}");
        assert!(
            s.iter().any(|&(a, b)| m.between(a, b) == Some(80.0)),
            "{s:?}"
        );
        assert!(s.len() <= m.len() + SPREAD_PAIRS);
    }

    #[test]
    fn repeats_that_agree_are_stable_and_moved_ones_are_not() {
        let m = LatencyMatrix::nested(8, &[5.0, 20.0, 80.0]);
        let same: Vec<_> = sample(&m)
            .into_iter()
            .map(|(a, b)| (a, b, m.between(a, b).map(|v| v * 1.05)))
            .collect();
        let s = judge(&m, &same, true).unwrap();
        assert_eq!(
            (s.verdict, s.disagreeing, s.nearest_moved),
            (Verdict::Stable, 0, 0)
        );
        assert_eq!(s.latency_off(), None);
        assert_eq!(s.why, None);

        // Only the siblings 0–1 moved apart: one pair of the sample, below the bound,
        // but CPU 0's and CPU 1's nearest pair is now further than their next one.
        let one_moved: Vec<_> = same
            .iter()
            .map(|&(a, b, v)| {
                if (a, b) == (0, 1) {
                    (a, b, Some(80.0))
                } else {
                    (a, b, v)
                }
            })
            .collect();
        let s = judge(&m, &one_moved, true).unwrap();
        assert_eq!(
            (s.verdict, s.disagreeing, s.nearest_moved),
            (Verdict::Unstable, 1, 2)
        );
        assert_eq!(s.latency_off(), Some(crate::matrix::HOST_MOVES_VCPUS));
        assert!(
            s.why
                .as_deref()
                .unwrap()
                .contains("2 CPU(s) found their nearest pair"),
            "{s:?}"
        );

        // Without the hypervisor flag the cause is worded as what was seen.
        let s = judge(&m, &one_moved, false).unwrap();
        assert_eq!(s.latency_off(), Some(crate::matrix::REPEATS_DISAGREE));
        assert_eq!(
            crate::matrix::HOST_MOVES_VCPUS,
            "the host moves vCPUs: latency placement off"
        );

        // Nothing repeated with a figure: not checked.
        let none: Vec<_> = same.iter().map(|&(a, b, _)| (a, b, None)).collect();
        assert_eq!(judge(&m, &none, true), None);
    }

    #[test]
    fn a_share_of_disagreeing_spread_pairs_over_the_bound_is_unstable() {
        let m = LatencyMatrix::nested(8, &[5.0, 20.0, 80.0]);
        // Far pairs came out near (and near ones stayed): more than a quarter disagree.
        let reps: Vec<_> = sample(&m)
            .into_iter()
            .map(|(a, b)| {
                let v = m.between(a, b).unwrap();
                (a, b, Some(if v > 50.0 { 20.0 } else { v }))
            })
            .collect();
        let s = judge(&m, &reps, false).unwrap();
        assert_eq!(s.nearest_moved, 0);
        assert!(s.disagreeing as f64 / s.repeated as f64 > BOUND, "{s:?}");
        assert_eq!(s.verdict, Verdict::Unstable);
    }

    /// The sparse matrix of `truth` measured on `sim` with `seed`, and the repeat
    /// check's verdict on it (on a virtual machine).
    fn measured_and_checked(
        truth: &LatencyMatrix,
        sim: &mut Simulated<'_>,
        seed: u64,
    ) -> (LatencyMatrix, Stability) {
        let cfg = SparseConfig {
            seed,
            ..SparseConfig::default()
        };
        let out = run_sparse(&truth.cpus, None, sim, &cfg).unwrap();
        let m = out.to_matrix(&Default::default(), &cfg.costs);
        let (s, _) = check(&m, sim, true).unwrap();
        (m, s.unwrap())
    }

    /// A stable simulated host at the simulator's default noise (2%, 1% preempted
    /// answers) is never called unstable, over many seeds: no false alarm.
    #[test]
    fn a_stable_simulated_host_is_never_unstable() {
        let truth = ryzen();
        for seed in 0..200 {
            let mut sim = Simulated::new(&truth, 0.02, seed);
            let (_, s) = measured_and_checked(&truth, &mut sim, seed);
            assert_eq!(s.verdict, Verdict::Stable, "seed {seed}: {s:?}");
        }
    }

    /// A simulated host that moves its vCPUs while (and after) it is measured is always
    /// called unstable, over many seeds and move intervals.
    #[test]
    fn a_moving_simulated_host_is_always_unstable() {
        let truth = ryzen();
        for seed in 0..200 {
            for every in [5, 20, 60] {
                let mut sim = Simulated::new(&truth, 0.02, seed).moving(every);
                let (m, s) = measured_and_checked(&truth, &mut sim, seed);
                assert!(
                    sim.moves > 1,
                    "seed {seed} every {every}: the host moved ({} answers)",
                    sim.answered
                );
                assert_eq!(
                    s.verdict,
                    Verdict::Unstable,
                    "seed {seed} every {every}: {s:?}"
                );
                assert_eq!(m.len(), 16);
            }
        }
    }
}
