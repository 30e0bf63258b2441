//! The fill of a tree's blocks: spot checks, fits, full measurement where they
//! disagree, and every cell still unknown taken from what its block was trusted with.
//! [`fill_tree`] runs the steps in order; each decides for some blocks (or pairs of
//! child groups) whether they are filled, and how, or measured fully, into one
//! [`FillPlan`].
//!
//! The order of the steps, and of the pairs each asks for, is part of the result: every
//! random choice comes from the seed in that order, and the measurer sees the rounds in
//! it. A step that draws apart does so from a generator of its own.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::BTreeSet;

use super::block::{blocks, Block, SubPair};
use super::fit::{misfits, Fit};
use super::held_out::held_out;
use super::rowcol::{self, RowCol};
use super::run::Run;
use super::tree::Tree;
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::measure::rng::Rng;

/// What the checks decided so far: the pairs to measure fully and the fills.
#[derive(Default)]
struct FillPlan<'b> {
    /// Pairs measured fully, in the order the steps chose them.
    full: Vec<(usize, usize)>,
    /// Blocks (or pairs of child groups) measured fully.
    full_blocks: usize,
    /// Blocks (or pairs of child groups) filled.
    filled: usize,
    /// Blocks filled from their fit.
    fits: Vec<(&'b Block, Fit)>,
    /// Pairs of child groups filled from one level.
    levels: Vec<(Vec<(usize, usize)>, f64)>,
    /// Pairs of child groups filled from a factor per CPU on each side.
    rowcols: Vec<(&'b [usize], &'b [usize], RowCol)>,
}

impl FillPlan<'_> {
    fn measure_fully(&mut self, pairs: impl IntoIterator<Item = (usize, usize)>) {
        self.full.extend(pairs);
        self.full_blocks += 1;
    }
}

/// A large pair of child groups of a block to be filled, holding a figure a level
/// above the block's fit: its pairs, checked again before they are measured fully.
type Suspect<'b> = (&'b Block, Vec<(usize, usize)>);

/// The filled cells (row-major n×n), the blocks filled and the blocks measured fully.
pub(super) struct Filled {
    pub(super) cells: Vec<f64>,
    pub(super) filled: usize,
    pub(super) full_blocks: usize,
}

/// Fills `tree`'s blocks (docs/measurement.md, "Sparse mode", steps 2–5): spot checks,
/// the misfits measured again, each block judged on its sample, large suspect child
/// pairs checked again, held-out pairs on a small machine, irregular blocks split into
/// their child pairs (a level each, or a factor per CPU on each side), full measurement
/// of whatever none of these explains, and the fill.
pub(super) fn fill_tree<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    tree: &Tree,
    cfg: &SparseConfig,
) -> Result<Filled, MeasureError> {
    let mut rng = Rng::new(cfg.seed);
    let blocks = blocks(tree, run.n() >= cfg.pair_terms_from);
    let drawn = spot_check(run, &blocks, cfg, &mut rng)?;
    measure_misfits_again(run, &blocks, cfg)?;
    let mut plan = FillPlan::default();
    let (irregular, suspect) = judge_blocks(run, &blocks, &drawn, cfg, &mut plan);
    check_suspects_again(run, suspect, cfg, &mut rng, &mut plan)?;
    check_held_out(run, cfg, &mut plan)?;
    tracing::debug!(
        pairs = run.distinct(),
        irregular = irregular.len(),
        full = plan.full.len(),
        "sparse: fits and held-out checks"
    );
    let modelled = split_irregular(run, &irregular, cfg, &mut rng, &mut plan)?;
    fit_factors_per_cpu(run, modelled, cfg, &mut plan)?;
    run.measure(&plan.full, false)?;
    tracing::debug!(pairs = run.distinct(), "sparse: blocks measured fully");
    Ok(Filled {
        cells: fill_cells(run, &plan),
        filled: plan.filled,
        full_blocks: plan.full_blocks,
    })
}

/// How many spot checks a block of `cells` pairs gets: twice as many as it has child
/// groups or pairs of units, more for a big block, at least `cfg.samples` and at most
/// eight times that, never more than it has.
fn spot_checks(b: &Block, cells: usize, cfg: &SparseConfig) -> usize {
    (2 * b.kids.len())
        .max(2 * b.unit_pairs().len())
        .max((cells as f64).sqrt() as usize / 4)
        .clamp(cfg.samples, 8 * cfg.samples)
        .min(cells)
}

/// Spot checks of every block at once: a seeded sample of each, all of a small block.
/// Returns each block's sample, in the order of `blocks`.
fn spot_check<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    blocks: &[Block],
    cfg: &SparseConfig,
    rng: &mut Rng,
) -> Result<Vec<Vec<(usize, usize)>>, MeasureError> {
    let mut want = Vec::new();
    let mut drawn: Vec<Vec<(usize, usize)>> = Vec::new();
    for b in blocks {
        let cells = b.cells();
        if cells <= cfg.small_block {
            want.extend(b.pairs());
            drawn.push(b.pairs());
            continue;
        }
        let sample = b.sample(spot_checks(b, cells, cfg), rng);
        want.extend(sample.iter().copied());
        drawn.push(sample);
    }
    run.measure(&want, false)?;
    Ok(drawn)
}

/// Figures off their block's fit by more than the tolerance are measured once more,
/// the lower kept: preemption only inflates a figure.
fn measure_misfits_again<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    blocks: &[Block],
    cfg: &SparseConfig,
) -> Result<(), MeasureError> {
    let tol = 1.0 + cfg.tolerance;
    let again: Vec<(usize, usize)> = blocks
        .iter()
        .filter_map(|b| Some(misfits(run, b, &Fit::new(run, b)?, tol)))
        .flatten()
        .collect();
    run.measure(&again, true)?;
    tracing::debug!(
        pairs = run.distinct(),
        blocks = blocks.len(),
        "sparse: spot checks"
    );
    Ok(())
}

/// Judges each block on its random sample. A block without a fit is measured fully. A
/// block where more than a quarter of the sample misses the fit, or where one figure
/// is a level below it (a closer group the tree does not know), is irregular: returned
/// first, to be split into its child pairs. Any other block is filled from its fit,
/// except the pairs of child groups holding a figure a level above it: measured fully
/// when small, returned second (suspect) when large.
fn judge_blocks<'b, M: PairMeasurer>(
    run: &Run<'_, M>,
    blocks: &'b [Block],
    drawn: &[Vec<(usize, usize)>],
    cfg: &SparseConfig,
    plan: &mut FillPlan<'b>,
) -> (Vec<&'b Block>, Vec<Suspect<'b>>) {
    let tol = 1.0 + cfg.tolerance;
    // A figure this far from its block's fit is not variation inside a level but a
    // pair the tree placed wrongly (levels are at least `level_ratio` apart).
    let broken = cfg.level_ratio;
    let mut irregular = Vec::new();
    let mut suspect = Vec::new();
    for (b, sample) in blocks.iter().zip(drawn) {
        let Some(fit) = Fit::new(run, b) else {
            plan.measure_fully(b.pairs());
            continue;
        };
        // Judged on the random sample only: the pairs measured while inserting follow
        // the numbering, and would fit better than the block does.
        let seen = sample
            .iter()
            .filter(|&&(i, j)| run.get(i, j).is_some())
            .count();
        let off = sample
            .iter()
            .filter(|&&(i, j)| {
                run.get(i, j)
                    .is_some_and(|v| (v / fit.predict(b, i, j)).ln().abs() > tol.ln())
            })
            .count();
        let hidden = sample.iter().any(|&(i, j)| {
            run.get(i, j)
                .is_some_and(|v| fit.predict(b, i, j) / v > broken)
        });
        if off * 4 > seen || hidden {
            irregular.push(b);
            continue;
        }
        let mut split = BTreeSet::new();
        for (i, j) in misfits(run, b, &fit, broken) {
            let (x, y) = (b.kid_of[&i], b.kid_of[&j]);
            split.insert((x.max(y), x.min(y)));
        }
        for &(x, y) in &split {
            let pairs = b.between(x, y);
            if pairs.len() <= 4 * cfg.samples {
                plan.measure_fully(pairs);
            } else {
                // One broken figure in a large child pair may be the only one.
                suspect.push((b, pairs));
            }
        }
        plan.filled += 1;
        plan.fits.push((b, fit));
    }
    (irregular, suspect)
}

/// Each large suspect child pair gets `2 × cfg.samples` more random figures; it is
/// measured fully when more than a quarter of what it holds is a level off its
/// block's fit, and otherwise stays filled.
fn check_suspects_again<'b, M: PairMeasurer>(
    run: &mut Run<'_, M>,
    suspect: Vec<Suspect<'b>>,
    cfg: &SparseConfig,
    rng: &mut Rng,
    plan: &mut FillPlan<'b>,
) -> Result<(), MeasureError> {
    let broken = cfg.level_ratio;
    let mut want = Vec::new();
    for (_, pairs) in &suspect {
        for _ in 0..2 * cfg.samples {
            want.push(pairs[rng.below(pairs.len())]);
        }
    }
    run.measure(&want, false)?;
    for (b, pairs) in suspect {
        let Some(fit) = plan
            .fits
            .iter()
            .find(|(fb, _)| std::ptr::eq(*fb, b))
            .map(|(_, f)| f)
        else {
            continue;
        };
        let seen: Vec<f64> = pairs
            .iter()
            .filter_map(|&(i, j)| Some((run.get(i, j)? / fit.predict(b, i, j)).ln().abs()))
            .collect();
        let off = seen.iter().filter(|&&d| d > broken.ln()).count();
        if off * 4 > seen.len() {
            plan.measure_fully(pairs);
        }
    }
    Ok(())
}

/// On a small machine (`cfg.held_out_below`), fresh pairs of every filled block
/// against its fill (`held_out.rs`); a block they miss is measured fully instead. Drawn
/// apart, so the other steps draw as they would without them.
fn check_held_out<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cfg: &SparseConfig,
    plan: &mut FillPlan<'_>,
) -> Result<(), MeasureError> {
    let mut fresh = Rng::new(cfg.seed.rotate_left(32));
    for k in held_out(run, &plan.fits, cfg, &mut fresh)? {
        let pairs = plan.fits[k].0.pairs();
        plan.measure_fully(pairs);
        plan.filled -= 1;
    }
    Ok(())
}

/// The lowest and highest figure measured among `pairs`, and how many there are.
fn spread<M: PairMeasurer>(run: &Run<'_, M>, pairs: &[(usize, usize)]) -> (usize, f64, f64) {
    let v: Vec<f64> = pairs.iter().filter_map(|&(i, j)| run.get(i, j)).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (v.len(), lo, hi)
}

/// Splits each irregular block into its pairs of child groups, each spot-checked twice
/// (figures that disagree measured once more): one whose figures agree within the
/// tolerance is filled from their mean; one whose figures disagree is returned to be
/// fitted a factor per CPU on each side where that is worth it, else measured fully.
fn split_irregular<'b, M: PairMeasurer>(
    run: &mut Run<'_, M>,
    irregular: &[&'b Block],
    cfg: &SparseConfig,
    rng: &mut Rng,
    plan: &mut FillPlan<'b>,
) -> Result<Vec<SubPair<'b>>, MeasureError> {
    let tol = 1.0 + cfg.tolerance;
    let mut subs: Vec<SubPair<'b>> = Vec::new();
    let mut want = Vec::new();
    for b in irregular {
        for x in 0..b.kids.len() {
            for y in 0..x {
                let pairs = b.between(x, y);
                if pairs.len() <= 2 {
                    want.extend(pairs.iter().copied());
                } else {
                    let have = pairs
                        .iter()
                        .filter(|&&(i, j)| run.get(i, j).is_some())
                        .count();
                    for _ in have..2 {
                        want.push(pairs[rng.below(pairs.len())]);
                    }
                }
                subs.push((&b.kids[x], &b.kids[y], pairs));
            }
        }
    }
    run.measure(&want, false)?;
    let again: Vec<(usize, usize)> = subs
        .iter()
        .map(|(_, _, p)| p)
        .filter(|p| {
            let (_, lo, hi) = spread(run, p);
            hi > lo * tol
        })
        .flat_map(|p| p.iter().copied().filter(|&(i, j)| run.get(i, j).is_some()))
        .collect();
    run.measure(&again, true)?;
    tracing::debug!(
        pairs = run.distinct(),
        "sparse: irregular blocks' child pairs"
    );
    let mut modelled = Vec::new();
    for (rows, cols, pairs) in subs {
        let (count, lo, hi) = spread(run, &pairs);
        if count == pairs.len() {
            continue;
        }
        if count == 0 || hi > lo * tol {
            if rowcol::worth(rows, cols) {
                modelled.push((rows, cols, pairs));
                continue;
            }
            plan.measure_fully(pairs);
        } else {
            let v: f64 = pairs
                .iter()
                .filter_map(|&(i, j)| run.get(i, j))
                .sum::<f64>();
            plan.levels.push((pairs, v / count as f64));
            plan.filled += 1;
        }
    }
    Ok(modelled)
}

/// The figures measured between `rows` and `cols`.
fn observed<M: PairMeasurer>(
    run: &Run<'_, M>,
    rows: &[usize],
    cols: &[usize],
) -> Vec<(usize, usize, f64)> {
    rows.iter()
        .flat_map(|&i| cols.iter().map(move |&j| (i, j)))
        .filter_map(|(i, j)| Some((i, j, run.get(i, j)?)))
        .collect()
}

/// A child pair whose figures disagree gets a factor per CPU on each side
/// (`latency ≈ r_i · c_j`), from a few pairs per CPU, its misfits measured once more.
/// It is filled from the factors when every figure fits within half the tolerance.
/// Else, on a machine where the pair targets apply, a child pair that is one level
/// with scattered exceptions ([`mostly_level`]) is filled from that level, the
/// exceptions seen staying measured; anything else is measured fully.
fn fit_factors_per_cpu<'b, M: PairMeasurer>(
    run: &mut Run<'_, M>,
    modelled: Vec<SubPair<'b>>,
    cfg: &SparseConfig,
    plan: &mut FillPlan<'b>,
) -> Result<(), MeasureError> {
    let tol = 1.0 + cfg.tolerance;
    let half = 1.0 + cfg.tolerance / 2.0;
    let want: Vec<(usize, usize)> = modelled
        .iter()
        .flat_map(|(rows, cols, _)| rowcol::design(rows, cols))
        .collect();
    run.measure(&want, false)?;
    let again: Vec<(usize, usize)> = modelled
        .iter()
        .flat_map(|(rows, cols, _)| {
            let o = observed(run, rows, cols);
            RowCol::new(rows, cols, &o).map_or_else(Vec::new, |f| f.misfits(&o, half))
        })
        .collect();
    run.measure(&again, true)?;
    for (rows, cols, pairs) in modelled {
        let o = observed(run, rows, cols);
        match RowCol::new(rows, cols, &o) {
            Some(f) if f.misfits(&o, half).is_empty() => {
                plan.rowcols.push((rows, cols, f));
                plan.filled += 1;
            }
            _ => match mostly_level(&o, tol).filter(|_| run.n() >= cfg.held_out_below) {
                Some(level) => {
                    plan.levels.push((pairs, level));
                    plan.filled += 1;
                }
                None => plan.measure_fully(pairs),
            },
        }
    }
    Ok(())
}

/// The median of `obs`' figures when at least three quarters of them (and at least 8)
/// lie within `tol` (a ratio) of it: one level with a few exceptions (a dual EPYC
/// 7742's CCX pairs: 122 ns with one cell in ten at 100).
pub(super) fn mostly_level(obs: &[(usize, usize, f64)], tol: f64) -> Option<f64> {
    let v: Vec<f64> = obs.iter().map(|o| o.2).collect();
    if v.len() < 8 {
        return None;
    }
    let m = crate::stats::upper_median(&v)?;
    let near = v
        .iter()
        .filter(|&&x| (x / m).ln().abs() <= tol.ln())
        .count();
    (4 * near >= 3 * v.len()).then_some(m)
}

/// The cells: every figure measured, and every cell still unknown taken from its fill
/// (a level, then factors per CPU, then a block's fit: a cell two of them cover keeps
/// the first).
fn fill_cells<M: PairMeasurer>(run: &Run<'_, M>, plan: &FillPlan<'_>) -> Vec<f64> {
    let n = run.n();
    let mut cells = run.cells.clone();
    let mut set = |i: usize, j: usize, v: &dyn Fn() -> f64| {
        if cells[i * n + j].is_nan() {
            let v = v();
            cells[i * n + j] = v;
            cells[j * n + i] = v;
        }
    };
    for (pairs, v) in &plan.levels {
        for &(i, j) in pairs {
            set(i, j, &|| *v);
        }
    }
    for (rows, cols, f) in &plan.rowcols {
        for &i in rows.iter() {
            for &j in cols.iter() {
                set(i, j, &|| f.predict(i, j));
            }
        }
    }
    for (b, fit) in &plan.fits {
        for (i, j) in b.pairs() {
            set(i, j, &|| fit.fill(b, i, j));
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_level_with_a_few_exceptions_is_its_median_and_two_levels_are_none() {
        let obs = |v: &[f64]| -> Vec<(usize, usize, f64)> {
            v.iter().enumerate().map(|(k, &x)| (k, k + 1, x)).collect()
        };
        let mut v = vec![122.0, 121.0, 124.0, 123.0, 120.0, 125.0, 122.0, 121.0];
        v.extend([100.0, 99.0]);
        // 8 of 10 near 122: one level, its median.
        assert_eq!(mostly_level(&obs(&v), 1.10), Some(122.0));
        // Half at 100: two levels, not one with exceptions.
        v.extend([100.0, 101.0, 98.0, 100.0, 99.0, 100.0]);
        assert_eq!(mostly_level(&obs(&v), 1.10), None);
        // Too few figures to say.
        assert_eq!(mostly_level(&obs(&[122.0; 7]), 1.10), None);
    }
}
