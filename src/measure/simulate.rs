//! The simulated measurer: answers each pair from a given matrix (a published one, or
//! our own file) with lognormal noise and occasional preemption-like outliers, instead
//! of spinning. How sparse measurement is developed, tested and benchmarked on every
//! public matrix; [`super::sparse`] runs the same code on real pairs.
//!
//! [`Simulated::moving`] makes it a host that moves its vCPUs, as a cloud hypervisor
//! does: the measured CPU ids are vCPUs, placed on the matrix's CPUs by a permutation
//! drawn anew every N answers, so a pair's figure changes with where the host put it.
//!
//! Must not touch: the OS (no threads, no clocks).

use super::rng::Rng;
use super::sparse::PairMeasurer;
use super::MeasureError;
use crate::matrix::LatencyMatrix;

/// Chance that one answer is inflated like a preempted measurement.
pub const OUTLIER_RATE: f64 = 0.01;

/// Answers pairs from a matrix.
#[derive(Debug, Clone)]
pub struct Simulated<'a> {
    truth: &'a LatencyMatrix,
    /// The row of `truth` of each CPU id (indexed by id): an answer looks its pair up
    /// in constant time, not by searching `cpus` (8.4 M answers at 4,096 CPUs).
    rows: Vec<Option<usize>>,
    /// Sigma of the lognormal noise (0.02: about 2% per answer).
    noise: f64,
    rng: Rng,
    /// Pairs answered so far (every answer counts, repeats included).
    pub answered: usize,
    /// A moving host: a new vCPU placement every this many answers.
    moves_every: Option<usize>,
    /// Where each vCPU (row of `truth`) sits now: a row of `truth`. The identity for a
    /// host that does not move.
    placed: Vec<usize>,
    /// Placements drawn so far (the first one included).
    pub moves: usize,
}

impl<'a> Simulated<'a> {
    /// `noise` is the sigma of the multiplicative lognormal noise (≥ 0, finite).
    pub fn new(truth: &'a LatencyMatrix, noise: f64, seed: u64) -> Simulated<'a> {
        let top = truth
            .cpus
            .iter()
            .map(|&c| c as usize + 1)
            .max()
            .unwrap_or(0);
        let mut rows = vec![None; top];
        for (i, &c) in truth.cpus.iter().enumerate() {
            rows[c as usize].get_or_insert(i);
        }
        Simulated {
            truth,
            rows,
            noise: if noise.is_finite() {
                noise.max(0.0)
            } else {
                0.0
            },
            rng: Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xa5a5),
            answered: 0,
            moves_every: None,
            placed: (0..truth.len()).collect(),
            moves: 0,
        }
    }

    /// The same host moving its vCPUs: a random placement of the vCPUs on the matrix's
    /// CPUs now, and a new one every `every` answers (at least 1).
    pub fn moving(mut self, every: usize) -> Simulated<'a> {
        self.moves_every = Some(every.max(1));
        self.move_vcpus();
        self
    }

    /// Draws a new placement (Fisher–Yates over the matrix's rows).
    fn move_vcpus(&mut self) {
        for i in (1..self.placed.len()).rev() {
            let j = self.rng.below(i + 1);
            self.placed.swap(i, j);
        }
        self.moves += 1;
    }

    /// The matrix's figure for vCPUs `a` and `b` where they sit now.
    fn truth_between(&self, a: u32, b: u32) -> Option<f64> {
        let row = |c: u32| self.rows.get(c as usize).copied().flatten();
        let (i, j) = (row(a)?, row(b)?);
        self.truth.at(self.placed[i], self.placed[j])
    }

    /// One noisy answer for two CPU ids; `None` for a pair the matrix lacks.
    pub fn answer(&mut self, a: u32, b: u32) -> Option<f64> {
        if let Some(every) = self.moves_every {
            if self.answered > 0 && self.answered % every == 0 {
                self.move_vcpus();
            }
        }
        let v = self.truth_between(a, b)?;
        self.answered += 1;
        let mut x = v * (self.noise * self.rng.normal()).exp();
        if self.rng.unit() < OUTLIER_RATE {
            // Preempted: the figure comes out 1.5 to 4 times too high, never lower.
            x *= 1.5 + 2.5 * self.rng.unit();
        }
        Some(x)
    }
}

impl PairMeasurer for Simulated<'_> {
    fn measure_round(&mut self, round: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError> {
        Ok(round.iter().map(|&(a, b)| self.answer(a, b)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_seeded_lognormal_and_outliers_only_inflate() {
        let m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 100.0);
        let mut a = Simulated::new(&m, 0.02, 7);
        let mut b = Simulated::new(&m, 0.02, 7);
        let xs: Vec<f64> = (0..4000).map(|_| a.answer(0, 1).unwrap()).collect();
        let ys: Vec<f64> = (0..4000).map(|_| b.answer(0, 1).unwrap()).collect();
        assert_eq!(xs, ys, "same seed, same answers");
        let mut c = Simulated::new(&m, 0.02, 8);
        assert_ne!(c.answer(0, 1), Some(xs[0]));
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        let med = sorted[sorted.len() / 2];
        assert!((med - 100.0).abs() < 0.5, "median {med}");
        let inflated = xs.iter().filter(|&&x| x > 130.0).count();
        assert!((10..=80).contains(&inflated), "{inflated} outliers of 4000");
        assert!(xs.iter().all(|&x| x > 90.0), "noise at 2% never loses 10%");
        assert_eq!(a.answered, 4000);
        assert_eq!(a.answer(0, 5), None);
        let mut exact = Simulated::new(&m, 0.0, 1);
        let ok: Vec<f64> = (0..200).filter_map(|_| exact.answer(1, 2)).collect();
        assert!(ok.iter().filter(|&&x| x == 100.0).count() > 180);
    }
}
