//! Which pairs run when: serial order, the round-robin tournament for parallel rounds,
//! the serial cross-check sample, and the time model. Pure.

use std::time::Duration;

/// Every unordered pair of positions `0..n` as `(i, j)` with `i < j`, row by row.
pub fn all_pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect()
}

/// A round-robin tournament over positions `0..n` (the circle method): `n − 1` rounds of
/// `n / 2` disjoint pairs for even `n`, `n` rounds of `(n − 1) / 2` pairs for odd `n`
/// (one position sits out each round). Every pair appears exactly once; each pair is
/// `(lower, higher)`.
pub fn tournament(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // Odd n: add a phantom position `n`; its partner sits the round out.
    let m = if n % 2 == 0 { n } else { n + 1 };
    let mut ring: Vec<usize> = (0..m).collect();
    let mut rounds = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        for k in 0..m / 2 {
            let (a, b) = (ring[k], ring[m - 1 - k]);
            if a < n && b < n {
                round.push((a.min(b), a.max(b)));
            }
        }
        rounds.push(round);
        // Keep ring[0] fixed, rotate the rest by one.
        let last = ring.pop().expect("m >= 2");
        ring.insert(1, last);
    }
    rounds
}

/// A spread-out sample of `k` pairs out of `pairs` (every `len/k`-th), for the serial
/// cross-check of a parallel run.
pub fn sample<T: Copy>(pairs: &[T], k: usize) -> Vec<T> {
    if k == 0 || pairs.is_empty() {
        return Vec::new();
    }
    if k >= pairs.len() {
        return pairs.to_vec();
    }
    (0..k).map(|s| pairs[s * pairs.len() / k]).collect()
}

/// What one pair-pass costs and what a run adds around it, for the time model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Wall time of one pair in one pass (spawn, pin, warm, calibrate, batches).
    pub per_pair: Duration,
    /// Extra wall time of a parallel round per pair in it (spawning and joining the
    /// threads is done by one coordinating thread).
    pub per_round_pair: Duration,
    /// Fixed cost: load guard and frequency warm-up.
    pub fixed: Duration,
    /// Passes over every pair (2 by default: the repeat that catches disagreement).
    pub passes: u32,
    /// Pairs re-measured serially to check a parallel run.
    pub serial_check: usize,
}

/// What a round costs on a crew of spinners (`spin::crew`: one thread per CPU, started
/// once per slice and fed a pair each round), for the time model of completion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrewCosts {
    /// Wall time of a round once its pairs are handed out: one pair-pass (the pairs run
    /// at once), as [`Costs::per_pair`].
    pub per_round: Duration,
    /// The coordinator's time to hand out one pair's jobs (serial: a round of `r` pairs
    /// waits `r` times this before its last pair starts).
    pub per_pair: Duration,
    /// Starting, pinning and placing the page of one CPU's thread (serial, once per CPU
    /// per slice).
    pub per_spinner: Duration,
}

/// Predicted wall time to measure `n` CPUs: `serial` pairs one at a time, otherwise
/// the tournament's rounds, each as long as its slowest pair plus its thread overhead,
/// and then the serial cross-check sample.
pub fn model(n: usize, parallel: bool, c: &Costs) -> Duration {
    let pairs = (n * n.saturating_sub(1) / 2) as u32;
    let passes = c.passes.max(1);
    if !parallel {
        return c.fixed + c.per_pair * pairs * passes;
    }
    let rounds = if n % 2 == 0 { n.saturating_sub(1) } else { n } as u32;
    let per_round = c.per_pair + c.per_round_pair * (n / 2) as u32;
    c.fixed + per_round * rounds * passes + c.per_pair * c.serial_check.min(pairs as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn check_tournament(n: usize) {
        let rounds = tournament(n);
        let expected_rounds = if n % 2 == 0 { n - 1 } else { n };
        assert_eq!(rounds.len(), expected_rounds, "n={n}");
        let mut seen = BTreeSet::new();
        for round in &rounds {
            assert_eq!(round.len(), n / 2, "n={n}: {round:?}");
            let mut used = BTreeSet::new();
            for &(a, b) in round {
                assert!(a < b && b < n);
                assert!(used.insert(a) && used.insert(b), "not disjoint: {round:?}");
                assert!(seen.insert((a, b)), "pair twice: {a},{b}");
            }
        }
        assert_eq!(seen.len(), n * (n - 1) / 2, "n={n}");
    }

    #[test]
    fn tournament_covers_every_pair_once_in_disjoint_rounds() {
        for n in 2..=33 {
            check_tournament(n);
        }
        check_tournament(128);
        assert!(tournament(1).is_empty());
        assert_eq!(tournament(2), vec![vec![(0, 1)]]);
    }

    #[test]
    fn all_pairs_and_sample() {
        assert_eq!(all_pairs(3), vec![(0, 1), (0, 2), (1, 2)]);
        let p = all_pairs(10);
        let s = sample(&p, 4);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], (0, 1));
        assert_eq!(sample(&p[..2], 4), p[..2].to_vec());
        assert!(sample(&p, 0).is_empty());
    }

    #[test]
    fn model_serial_vs_rounds() {
        let c = Costs {
            per_pair: Duration::from_millis(10),
            per_round_pair: Duration::from_micros(100),
            fixed: Duration::from_millis(500),
            passes: 2,
            serial_check: 16,
        };
        // 2 CPUs: one pair, two passes.
        assert_eq!(model(2, false, &c), Duration::from_millis(520));
        // 512 CPUs serially: 130816 pairs x 2 x 10 ms.
        assert_eq!(
            model(512, false, &c),
            Duration::from_millis(500 + 2_616_320)
        );
        // In rounds: 511 rounds x 2 x (10 ms + 256 x 0.1 ms) + 16 x 10 ms.
        let rounds = model(512, true, &c);
        assert_eq!(
            rounds,
            Duration::from_micros(500_000 + 511 * 2 * 35_600 + 160_000)
        );
        assert!(rounds < Duration::from_secs(300));
    }
}
