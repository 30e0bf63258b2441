//! The seeded generator of sparse measurement's spot checks and of the simulated
//! measurer's noise, so that a run can be repeated exactly.

/// A small deterministic generator (SplitMix64): the spot-check samples and the
/// simulated noise come from a seed, so a run can be repeated exactly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Keeps `k` of `v` (all when it holds fewer), drawn at random: a partial
    /// Fisher–Yates shuffle, the first `k` the sample.
    pub fn sample<T>(&mut self, v: &mut Vec<T>, k: usize) {
        let k = k.min(v.len());
        for t in 0..k {
            let s = t + self.below(v.len() - t);
            v.swap(t, s);
        }
        v.truncate(k);
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
