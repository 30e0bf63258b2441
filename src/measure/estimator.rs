//! From batch figures to one pair's estimate. Pure: numbers in, numbers out.
//!
//! A batch is the mean one-way latency over K round trips, so a single preemption
//! inflates one batch and never deflates one. The estimate is therefore a low percentile
//! (p10) of the batches — the minimum while there are fewer than ten — and the spread
//! (p10/median/p90) says how noisy the pair was. The one thing that deflates batches is
//! a pair that runs at two speeds (see [`TWO_SPEEDS`]): then the median is the figure.

use crate::matrix::PairStats;

/// Percentile `q` (0..=1) of `sorted` by nearest rank; `NaN` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    crate::stats::percentile_sorted(sorted, q)
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// A pair whose median batch costs over this many times its p10 ran at two speeds, and
/// its p10 is not its cost. Noise only adds, a few batches at a time, and lifts the
/// median by a fraction. A host that moves vCPUs can put both of a pair for a while on
/// the two threads of one core, where they answer at L1 speed: siblings cost under 0.4x
/// the next pairs on every published matrix, so those batches sit at least 2.5x below
/// the rest, and a p10 taken from them would make two vCPUs look like siblings that are
/// not. The two kinds of pair, as measured on a guest: `benches/README.md`.
pub const TWO_SPEEDS: f64 = 2.0;

/// Whether batches with this p10 and median ran at two speeds ([`TWO_SPEEDS`]).
pub fn two_speeds(p10: f64, median: f64) -> bool {
    median > p10 * TWO_SPEEDS
}

/// The estimate of a pair from its batch figures: p10 with ten or more batches (the
/// median when they ran at [two speeds](TWO_SPEEDS)), else the minimum. `None` without
/// batches.
pub fn estimate(batches: &[f64]) -> Option<f64> {
    if batches.is_empty() {
        return None;
    }
    let s = sorted(batches);
    if s.len() < 10 {
        return Some(s[0]);
    }
    let (p10, median) = (percentile(&s, 0.10), percentile(&s, 0.5));
    Some(if two_speeds(p10, median) { median } else { p10 })
}

/// p10, median and p90 of the batches.
pub fn spread(batches: &[f64]) -> Option<(f64, f64, f64)> {
    if batches.is_empty() {
        return None;
    }
    let s = sorted(batches);
    Some((
        percentile(&s, 0.10),
        percentile(&s, 0.5),
        percentile(&s, 0.90),
    ))
}

/// The stats of a measured pair `a`–`b` from its batches (p10, median, p90, counts);
/// `None` without batches.
pub fn measured_stats(
    a: u32,
    b: u32,
    batches: &[f64],
    discarded: u32,
    round_trips: u32,
) -> Option<PairStats> {
    let (p10, med, p90) = spread(batches)?;
    Some(PairStats {
        a,
        b,
        p10_ns: p10,
        median_ns: med,
        p90_ns: p90,
        samples: batches.len() as u32,
        discarded,
        round_trips,
        inferred: false,
    })
}

/// Relative disagreement of two estimates: |a − b| / min(a, b).
pub fn disagreement(a: f64, b: f64) -> f64 {
    let lo = a.min(b);
    if lo <= 0.0 {
        if a == b {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (a - b).abs() / lo
    }
}

/// When to stop collecting batches for a pair in one pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    /// Never stop before this many valid batches.
    pub min_batches: usize,
    /// Never take more than this many valid batches.
    pub max_batches: usize,
    /// The estimate is stable when it moved less than `tolerance` (relative) over the
    /// last `window` batches.
    pub window: usize,
    pub tolerance: f64,
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule {
            min_batches: 16,
            max_batches: 200,
            window: 8,
            tolerance: 0.01,
        }
    }
}

impl StopRule {
    /// Whether `batches` (in the order taken) are enough.
    pub fn done(&self, batches: &[f64]) -> bool {
        let n = batches.len();
        if n >= self.max_batches {
            return true;
        }
        if n < self.min_batches.max(self.window + 1) {
            return false;
        }
        let (Some(before), Some(now)) = (estimate(&batches[..n - self.window]), estimate(batches))
        else {
            return false;
        };
        disagreement(before, now) <= self.tolerance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_ignores_preempted_batches() {
        let mut b = vec![20.0; 30];
        b[3] = 500.0;
        b[17] = 90.0;
        assert_eq!(estimate(&b), Some(20.0));
        assert_eq!(estimate(&[31.0, 30.0, 400.0]), Some(30.0));
        assert_eq!(estimate(&[]), None);
        let (p10, med, p90) = spread(&(1..=11).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((p10, med, p90), (2.0, 6.0, 10.0));
        let s = measured_stats(4, 9, &[12.0, 10.0, 11.0], 2, 50).unwrap();
        assert_eq!(
            (s.a, s.b, s.samples, s.discarded, s.round_trips),
            (4, 9, 3, 2, 50)
        );
        assert_eq!(
            (s.p10_ns, s.median_ns, s.p90_ns, s.inferred),
            (10.0, 11.0, 12.0, false)
        );
        assert!(measured_stats(4, 9, &[], 0, 0).is_none());
    }

    #[test]
    fn a_pair_that_ran_at_two_speeds_is_its_median() {
        // As measured on a 16-vCPU KVM guest: vCPUs 7 and 10 shared a host core for a
        // fifth of the batches (9.3 ns), and sat on two cores for the rest (75 ns).
        let b: Vec<f64> = (0..60)
            .map(|k| {
                if k % 5 == 0 {
                    9.3
                } else {
                    75.0 + (k % 7) as f64
                }
            })
            .collect();
        let (p10, median, _) = spread(&b).unwrap();
        assert_eq!(p10, 9.3);
        assert_eq!(estimate(&b), Some(median));
        assert!(median >= 75.0, "{median}");
        // Preemption or interrupts in most batches lift the median by a fraction only:
        // the p10 stays the figure.
        let b: Vec<f64> = (0..60)
            .map(|k| if k % 3 == 0 { 67.8 } else { 67.8 * 1.8 })
            .collect();
        assert_eq!(estimate(&b), Some(67.8));
        assert!(two_speeds(9.3, 75.1) && !two_speeds(67.8, 83.6) && !two_speeds(9.0, 18.0));
    }

    #[test]
    fn p10_is_robust_to_one_low_outlier() {
        let mut b: Vec<f64> = (0..40).map(|k| 30.0 + (k % 5) as f64).collect();
        b[7] = 1.0; // a timer glitch
        assert_eq!(estimate(&b), Some(30.0));
    }

    #[test]
    fn stop_rule_waits_for_stability() {
        let rule = StopRule::default();
        let steady = vec![25.0; 16];
        assert!(rule.done(&steady));
        assert!(!rule.done(&steady[..15]));
        // Still falling by 5% per batch: not stable.
        let falling: Vec<f64> = (0..40).map(|k| 100.0 * 0.95f64.powi(k)).collect();
        assert!(!rule.done(&falling));
        assert!(rule.done(&vec![1.0; 200]), "max reached");
    }

    #[test]
    fn disagreement_is_relative_to_the_smaller() {
        assert_eq!(disagreement(10.0, 11.0), 0.1);
        assert_eq!(disagreement(11.0, 10.0), 0.1);
        assert_eq!(disagreement(0.0, 0.0), 0.0);
        assert!(disagreement(0.0, 1.0).is_infinite());
    }
}
