//! A block's model: a typical level, a factor per child group and, for the fill only, a
//! factor per unit (a CCD inside half a socket) and per CPU (a core's distance to its
//! mesh stop makes it slower to everyone), and a term per pair of units.
//!
//! Must not touch: the measurer (it reads the run's figures only).

use std::collections::{BTreeMap, BTreeSet};

/// Pseudo-count pulling a CPU's factor towards its group's.
const CPU_SHRINK: f64 = 3.0;
/// What one pair may say about its CPUs' factors (ln): an outlier left by preemption
/// moves them by a bounded amount.
const CPU_CLIP: f64 = 0.15;
/// Figures per CPU of a block (on average) from which a block of more than
/// [`MESH_CPUS`] gets factors per CPU.
const CPU_SEEN: usize = 2;
/// Blocks of up to this many CPUs (a die's mesh or ring) always get factors per CPU,
/// however few figures they hold. Larger ones only with [`CPU_SEEN`] figures per CPU:
/// at 128 CPUs and more most CPUs of a block are seen once, and a factor from one
/// figure fits that figure's noise, not the CPU.
const MESH_CPUS: usize = 64;
/// Figures from which a unit ([`Block::unit_of`]) gets a factor of its own.
const UNIT_SEEN: usize = 6;
/// Figures from which a pair of units gets a term of its own, and its pseudo-count.
const PAIR_SEEN: usize = 2;
const PAIR_SHRINK: f64 = 2.0;

use super::block::Block;
use super::run::Run;
use super::PairMeasurer;
use crate::stats::median_in_place;

/// A block's figures as a typical level times a factor per child group (a core far
/// from the others on a mesh is slower to everyone): `ln v = mu + e[a] + e[b]`, fitted
/// to the measured pairs, each group's factor shrunk towards 1 by its sample count.
/// The fill adds a factor per unit and per CPU of a group of several, and a term per
/// pair of units (`ln v = ... + u[i] + u[j] + d[i] + d[j] + p[u(i), u(j)]`), fitted to
/// what the group's factors leave; decisions (spot checks, misfits) use the group
/// factors only, so one low figure cannot be explained away by its two CPUs.
pub(super) struct Fit {
    mu: f64,
    eff: Vec<f64>,
    /// Factors (ln) of the block's units ([`Block::unit_of`]), shrunk towards 0 by
    /// their sample count.
    unit: BTreeMap<usize, f64>,
    /// Per-CPU factors (ln), shrunk towards 0 by their sample count.
    cpu: BTreeMap<usize, f64>,
    /// What is left (ln) between two units ([`Fit::units`]), shrunk towards 0 by its
    /// sample count.
    pair: BTreeMap<(usize, usize), f64>,
    /// The lowest and highest measured figure (ln): a prediction stays between them.
    lo: f64,
    hi: f64,
}

impl Fit {
    pub(super) fn new<M: PairMeasurer>(run: &Run<'_, M>, b: &Block) -> Option<Fit> {
        let obs: Vec<(usize, usize, f64)> = b
            .pairs()
            .into_iter()
            .filter_map(|(i, j)| Some((b.kid_of[&i], b.kid_of[&j], run.get(i, j)?.max(1e-3).ln())))
            .collect();
        if obs.is_empty() {
            return None;
        }
        let mut logs: Vec<f64> = obs.iter().map(|o| o.2).collect();
        let mut fit = Fit {
            // Sorts `logs`, so its ends are the range below.
            mu: median_in_place(&mut logs)?,
            eff: vec![0.0; b.kids.len()],
            unit: BTreeMap::new(),
            cpu: BTreeMap::new(),
            pair: BTreeMap::new(),
            lo: logs[0],
            hi: logs[logs.len() - 1],
        };
        for _ in 0..4 {
            let mut sum = vec![0.0; b.kids.len()];
            let mut cnt = vec![0usize; b.kids.len()];
            for &(x, y, v) in &obs {
                sum[x] += v - fit.mu - fit.eff[y];
                cnt[x] += 1;
                sum[y] += v - fit.mu - fit.eff[x];
                cnt[y] += 1;
            }
            for x in 0..b.kids.len() {
                fit.eff[x] = sum[x] / (cnt[x] + 1) as f64;
            }
            let mut rest: Vec<f64> = obs
                .iter()
                .map(|&(x, y, v)| v - fit.eff[x] - fit.eff[y])
                .collect();
            fit.mu = median_in_place(&mut rest)?;
        }
        let obs: Vec<(usize, usize, f64)> = b
            .pairs()
            .into_iter()
            .filter_map(|(i, j)| {
                let v = run.get(i, j)?.max(1e-3).ln();
                Some((
                    i,
                    j,
                    v - fit.mu - fit.eff[b.kid_of[&i]] - fit.eff[b.kid_of[&j]],
                ))
            })
            .collect();
        // Below the child groups, a factor per unit (a CCD inside a child that is half
        // a socket) and per CPU, then a term per pair of units (of child groups where
        // the block has no units): backfitted on what the child factors leave, each
        // shrunk towards 0 by its sample count. A unit that is its whole child adds
        // nothing the child's factor does not say, nor a CPU alone in its child.
        let kid_size = |i: usize| b.kids[b.kid_of[&i]].len();
        let mut unit_size: BTreeMap<usize, usize> = BTreeMap::new();
        for &u in b.unit_of.values() {
            *unit_size.entry(u).or_default() += 1;
        }
        let whole: BTreeSet<usize> = b
            .unit_of
            .iter()
            .filter(|&(&i, u)| kid_size(i) == unit_size[u])
            .map(|(_, &u)| u)
            .collect();
        // A large block with too few pairs for a CPU's factor to be more than the noise
        // of its one or two figures keeps to its groups' factors.
        let cpus: usize = b.kids.iter().map(Vec::len).sum();
        let per_cpu = cpus <= MESH_CPUS || 2 * obs.len() >= CPU_SEEN * cpus;
        for _ in 0..4 {
            if !b.unit_of.is_empty() {
                fit.unit = fit
                    .factor_sums(b, &obs, |i| b.unit_of[&i], |f, i| f.unit(b, i))
                    .into_iter()
                    .filter(|&(u, (_, c))| c >= UNIT_SEEN && !whole.contains(&u))
                    .map(|(u, (s, c))| (u, s / (c as f64 + CPU_SHRINK)))
                    .collect();
            }
            if per_cpu {
                fit.cpu = fit
                    .factor_sums(b, &obs, |i| i, |f, i| f.d(i))
                    .into_iter()
                    .filter(|&(i, _)| kid_size(i) > 1)
                    .map(|(i, (s, c))| (i, s / (c as f64 + CPU_SHRINK)))
                    .collect();
            }
            if b.pair_terms {
                let mut sum: BTreeMap<(usize, usize), (f64, usize)> = BTreeMap::new();
                for &(i, j, r) in &obs {
                    let key = Fit::units(b, i, j);
                    let rest = r - fit.shape(b, i, j) + fit.pair(b, i, j);
                    let e = sum.entry(key).or_default();
                    e.0 += rest.clamp(-CPU_CLIP, CPU_CLIP);
                    e.1 += 1;
                }
                fit.pair = sum
                    .into_iter()
                    .filter(|&(_, (_, c))| c >= PAIR_SEEN)
                    .map(|(k, (s, c))| (k, s / (c as f64 + PAIR_SHRINK)))
                    .collect();
            }
        }
        Some(fit)
    }

    /// For each `key` (a unit, a CPU): the sum and count of what each figure of `obs`
    /// (residuals after the child factors) leaves for its two CPUs' `own` factor, every
    /// other term taken out, each clipped.
    fn factor_sums(
        &self,
        b: &Block,
        obs: &[(usize, usize, f64)],
        key: impl Fn(usize) -> usize,
        own: impl Fn(&Fit, usize) -> f64,
    ) -> BTreeMap<usize, (f64, usize)> {
        let mut sum: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
        for &(i, j, r) in obs {
            let rest = r - self.shape(b, i, j);
            for x in [i, j] {
                let e = sum.entry(key(x)).or_default();
                e.0 += (rest + own(self, x)).clamp(-CPU_CLIP, CPU_CLIP);
                e.1 += 1;
            }
        }
        sum
    }

    /// The units of `i` and `j` (their child groups where the block has no units), in
    /// order.
    fn units(b: &Block, i: usize, j: usize) -> (usize, usize) {
        let of = |x: usize| b.unit_of.get(&x).copied().unwrap_or(b.kid_of[&x]);
        let (u, v) = (of(i), of(j));
        (u.min(v), u.max(v))
    }

    /// Everything the fill adds to the block's level and child factors for `(i, j)`.
    fn shape(&self, b: &Block, i: usize, j: usize) -> f64 {
        self.unit(b, i) + self.d(i) + self.unit(b, j) + self.d(j) + self.pair(b, i, j)
    }

    fn unit(&self, b: &Block, i: usize) -> f64 {
        b.unit_of
            .get(&i)
            .and_then(|u| self.unit.get(u))
            .copied()
            .unwrap_or(0.0)
    }

    fn pair(&self, b: &Block, i: usize, j: usize) -> f64 {
        self.pair.get(&Fit::units(b, i, j)).copied().unwrap_or(0.0)
    }

    fn d(&self, i: usize) -> f64 {
        self.cpu.get(&i).copied().unwrap_or(0.0)
    }

    /// The fill's figure: the group factors, the units' and CPUs' own and the pair
    /// term.
    pub(super) fn fill(&self, b: &Block, i: usize, j: usize) -> f64 {
        (self.mu + self.eff[b.kid_of[&i]] + self.eff[b.kid_of[&j]] + self.shape(b, i, j))
            .clamp(self.lo, self.hi)
            .exp()
    }

    pub(super) fn predict(&self, b: &Block, i: usize, j: usize) -> f64 {
        (self.mu + self.eff[b.kid_of[&i]] + self.eff[b.kid_of[&j]])
            .clamp(self.lo, self.hi)
            .exp()
    }
}

/// The measured pairs of a block further than `ratio` from the fit.
pub(super) fn misfits<M: PairMeasurer>(
    run: &Run<'_, M>,
    b: &Block,
    fit: &Fit,
    ratio: f64,
) -> Vec<(usize, usize)> {
    b.pairs()
        .into_iter()
        .filter(|&(i, j)| {
            run.get(i, j)
                .is_some_and(|v| (v / fit.predict(b, i, j)).ln().abs() > ratio.ln())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::measure::simulate::Simulated;

    /// Two groups of four CPUs; across them, 100 ns times a factor per CPU (its
    /// distance to the mesh stop), the factors varying inside each group.
    #[test]
    fn per_cpu_factors_fill_a_mesh_block_closer_than_group_factors() {
        let f = [0.80, 1.00, 1.25, 0.90, 1.20, 0.85, 1.00, 1.10];
        let ids: Vec<u32> = (0..8).collect();
        let truth = LatencyMatrix::from_fn(ids.clone(), |i, j| 100.0 * f[i] * f[j]);
        let mut sim = Simulated::new(&truth, 0.0, 1);
        let mut run = Run::new(&ids, &mut sim);
        // Each CPU in three pairs across the groups (12 of the 16).
        let sampled = [
            (0, 4),
            (0, 5),
            (1, 5),
            (1, 6),
            (2, 6),
            (2, 7),
            (3, 7),
            (3, 4),
            (0, 6),
            (1, 7),
            (2, 4),
            (3, 5),
        ];
        run.measure(&sampled, false).unwrap();
        let b = Block {
            kids: vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]],
            kid_of: (0..8).map(|i| (i, i / 4)).collect(),
            unit_of: BTreeMap::new(),
            pair_terms: false,
        };
        let fit = Fit::new(&run, &b).unwrap();
        let (mut by_cpu, mut by_group) = (0.0, 0.0);
        for (i, j) in b.pairs() {
            if sampled.contains(&(i, j)) {
                continue;
            }
            let t = truth.at(i, j).unwrap();
            by_cpu += (fit.fill(&b, i, j) / t).ln().abs();
            by_group += (fit.predict(&b, i, j) / t).ln().abs();
        }
        assert!(
            by_cpu < 0.9 * by_group,
            "per-CPU {by_cpu:.3} vs per-group {by_group:.3}"
        );
        // Decisions stay on the group factors: every pair of a group has one figure.
        assert_eq!(fit.predict(&b, 0, 6), fit.predict(&b, 2, 6));
        // A block of more than MESH_CPUS with fewer figures than two per CPU keeps its
        // group factors.
        let ids: Vec<u32> = (0..80).collect();
        let big = LatencyMatrix::from_fn(ids.clone(), |i, j| {
            100.0 * (0.8 + (i % 7) as f64 / 15.0) * (0.8 + (j % 5) as f64 / 10.0)
        });
        let mut sim = Simulated::new(&big, 0.0, 1);
        let mut few = Run::new(&ids, &mut sim);
        let some: Vec<(usize, usize)> = (0..40).map(|i| (i, 40 + (i * 3) % 40)).collect();
        few.measure(&some, false).unwrap();
        let b = Block {
            kids: vec![(0..40).collect(), (40..80).collect()],
            kid_of: (0..80).map(|i| (i, i / 40)).collect(),
            unit_of: BTreeMap::new(),
            pair_terms: false,
        };
        let fit = Fit::new(&few, &b).unwrap();
        assert!(b
            .pairs()
            .into_iter()
            .all(|(i, j)| fit.fill(&b, i, j) == fit.predict(&b, i, j)));
        // With two figures per CPU it gets them.
        let more: Vec<(usize, usize)> = (0..40).map(|i| (i, 40 + (i * 7 + 1) % 40)).collect();
        few.measure(&more, false).unwrap();
        let fit = Fit::new(&few, &b).unwrap();
        assert!(b
            .pairs()
            .into_iter()
            .any(|(i, j)| fit.fill(&b, i, j) != fit.predict(&b, i, j)));
    }

    /// Two children of two units each (8 CPUs a unit), crossed: units 0 and 2 are
    /// close, as are 1 and 3, and 0–3 and 1–2 far. No factor per child or unit can
    /// say that; a term per pair of units can, from the sample that visits each pair.
    #[test]
    fn pair_terms_fill_crossed_units_that_factors_cannot() {
        let unit = |i: usize| i / 8;
        let ids: Vec<u32> = (0..32).collect();
        let truth = LatencyMatrix::from_fn(ids.clone(), |i, j| {
            if unit(i) / 2 == unit(j) / 2 {
                20.0
            } else if unit(i) % 2 == unit(j) % 2 {
                100.0
            } else {
                130.0
            }
        });
        let mut sim = Simulated::new(&truth, 0.02, 1);
        let mut run = Run::new(&ids, &mut sim);
        let block = |pair_terms: bool| Block {
            kids: vec![(0..16).collect(), (16..32).collect()],
            kid_of: (0..32).map(|i| (i, i / 16)).collect(),
            unit_of: if pair_terms {
                (0..32).map(|i| (i, unit(i))).collect()
            } else {
                BTreeMap::new()
            },
            pair_terms,
        };
        let b = block(true);
        assert_eq!(b.unit_pairs().len(), 4);
        let sample = b.sample(16, &mut crate::measure::rng::Rng::new(1));
        // Every pair of units is visited, four times.
        for u in [0, 1] {
            for v in [2, 3] {
                let seen = sample
                    .iter()
                    .filter(|&&(i, j)| unit(i) == u && unit(j) == v)
                    .count();
                assert_eq!(seen, 4, "units {u}, {v}");
            }
        }
        run.measure(&sample, false).unwrap();
        let near = |b: &Block| {
            let fit = Fit::new(&run, b).unwrap();
            let pairs = b.pairs();
            let ok = pairs
                .iter()
                .filter(|&&(i, j)| (fit.fill(b, i, j) / truth.at(i, j).unwrap() - 1.0).abs() <= 0.1)
                .count();
            ok as f64 / pairs.len() as f64
        };
        let with = near(&b);
        let without = near(&block(false));
        assert!(with >= 0.95, "with pair terms {with}");
        assert!(without < 0.5, "with the child factors only {without}");
    }
}
