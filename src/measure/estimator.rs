//! From batch figures to one pair's estimate. Pure: numbers in, numbers out.
//!
//! A batch is the mean one-way latency over K round trips, so a single preemption
//! inflates one batch and never deflates one. The estimate is therefore a low percentile
//! (p10) of the batches — the minimum while there are fewer than ten — and the spread
//! (p10/median/p90) says how noisy the pair was.

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

/// The estimate of a pair from its batch figures: p10 with ten or more batches,
/// else the minimum. `None` without batches.
pub fn estimate(batches: &[f64]) -> Option<f64> {
    if batches.is_empty() {
        return None;
    }
    let s = sorted(batches);
    Some(if s.len() >= 10 {
        percentile(&s, 0.10)
    } else {
        s[0]
    })
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
