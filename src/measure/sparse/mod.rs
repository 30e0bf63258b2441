//! Sparse measurement: recover the hierarchy with few pairs, spot-check every block of
//! it, measure fully only the blocks that disagree, and fill the rest from their block.
//!
//! ```text
//! prior (sysfs groups)  ──or──  first pairs: chain i–(i−1) and i–(i+n/2), in rounds
//!                 │                        │ smooth (no 10% gaps: a mesh, 32–128 CPUs)?
//!                 │                        │    ── yes ─► mesh model from random pairs,
//!                 │                        │       checked on fresh ones ── holds ─► fill
//!                 │                        │       from it, go to plan verification
//!                 │                        ▼ no, or refused
//!                 │             insertion (each CPU joins the tree by a few guessed pairs)
//!                 └──────► tree of nested groups (levels)
//!                                   │
//!             blocks: per group, the pairs joined there (between its child groups)
//!                                   │ random spot checks (a seeded sample), in rounds
//!             agree with the block's median within the tolerance? ── yes ─► fill, mark inferred
//!                                   │ no
//!             split into child pairs, spot-check again ── no ─► measure that block fully
//!   (below `held_out_below` CPUs: fresh pairs of each block to fill, against its fill ── a
//!    miss ─► measure that block fully)
//!   (from `pair_terms_from` CPUs: every pair of regions, the CCDs, measured ten times,
//!    its fill moved to the level its figures agree on)
//!                                   │
//!             plan verification: compact plans (K = 2, 4, 8) from the filled cells,
//!             their unmeasured cells measured, planned again until measured through;
//!             then their runners-up (unmeasured cells taken 3% lower), within a bound
//! ```
//!
//! Works on any [`PairMeasurer`]: the real spinner
//! ([`super::sparse_real::EngineMeasurer`]) or the simulated one
//! ([`super::simulate::Simulated`]). Pure apart from the measurer; every random choice
//! comes from the seed.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::rng::Rng;
use super::schedule::Costs;
use super::{MeasureError, Mode};
use block::{blocks, Block, SubPair};
use fit::{misfits, Fit};
use rowcol::RowCol;
use run::Run;
use tree::{first_pairs, insert_all, prior_tree, Tree};

mod block;
mod fit;
mod held_out;
mod mesh;
mod outcome;
mod regions;
mod rowcol;
mod run;
mod tree;
mod verify;
use crate::cpuset::CpuSet;

pub use outcome::SparseOutcome;

/// Measures pairs of CPUs. Sparse measurement asks for one round at a time: the pairs
/// of a round share no CPU, so they may run at once.
pub trait PairMeasurer {
    /// One figure (one-way ns) per pair of the round, `None` when the pair gave none.
    fn measure_round(&mut self, round: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError>;
}

/// From this many CPUs on, the daemon measures sparsely by default (the default of the
/// `measure.sparse-from-cpus` setting, which the daemon reads). At 128 CPUs a full
/// matrix in parallel rounds models at 5.7 s and sparse runs in 1.5 s (EPYC 7773X) and
/// 2.3 s (8375C) at most, with ≥ 95% of the cells within 10% and compact plans within
/// 5% on every published 128+ CPU matrix (seeds 1–3). At 64 sparse meets the targets
/// too (the meshes and the Kunpeng 920 through the mesh model), but at 0.8–1.4 s
/// against 2.2 s for a full matrix, whose cells are all measured. Figures:
/// `benches/README.md`, "Sparse measurement".
pub const SPARSE_FROM_CPUS: usize = 128;

impl Mode {
    /// The daemon's mode for a machine of `cpus` CPUs: sparse from `sparse_from` on
    /// (the `measure.sparse-from-cpus` setting, [`SPARSE_FROM_CPUS`] by default), else
    /// a full matrix in serial order.
    pub fn default_for(cpus: usize, sparse_from: usize) -> Mode {
        if cpus >= sparse_from {
            Mode::Sparse
        } else {
            Mode::Serial
        }
    }
}

/// How sparse measurement decides.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseConfig {
    /// A spot check further than this (relative) from its block's median disagrees.
    pub tolerance: f64,
    /// Spot checks per block (fewer when the block has fewer pairs).
    pub samples: usize,
    /// Blocks of at most this many pairs are measured fully.
    pub small_block: usize,
    /// Pairs tried per CPU while inserting it, beyond the first.
    pub search: usize,
    /// Two figures further apart than this ratio are different levels when inserting.
    pub level_ratio: f64,
    /// Below this many CPUs, fresh pairs of every filled block are checked against
    /// its fill and a block they miss is measured fully (`sparse/held_out.rs`). From
    /// it on, where the pair targets apply, a pair of child groups that is one level
    /// with scattered exceptions is filled from its median instead of measured fully.
    pub held_out_below: usize,
    /// From this many CPUs on, a block's fill takes a factor per unit (the groups one
    /// level below its children, where they are large: a CCD in half a socket) and a
    /// term per pair of units, and its spot checks visit every pair of units
    /// (`sparse/block.rs`, `sparse/fit.rs`). 64: where the pair targets apply.
    pub pair_terms_from: usize,
    /// The first pairs' smooth share from which the mesh model is tried
    /// (`sparse/mesh.rs`; 0.35: the meshes and the Kunpeng 920 reach 0.38–1.00, every
    /// other published matrix of 32 CPUs and more at most 0.34). Above 1: never.
    pub mesh_share: f64,
    /// Seed of the spot-check sample.
    pub seed: u64,
    /// The time model's costs, for [`SparseOutcome::modelled`].
    pub costs: Costs,
    /// Compact plans of these sizes are verified: every cell among the CPUs the
    /// reconstruction's plan chooses is measured, and planned again (empty: none).
    /// 2, 4 and 8 are the sizes the targets judge; they stand for a pair of
    /// communicating threads, a small pool sharing a cache and a half-CCD/CCX-sized
    /// one, and a plan of 3 or 6 is cut from the same groups.
    pub verify_counts: Vec<usize>,
    /// Verification stops before it measures more than this share of all pairs; the
    /// plans then stand on the cells known so far.
    pub verify_share: f64,
    /// Once every verified choice is measured throughout, its runners-up: unmeasured
    /// cells are taken this much (relative) lower and planned on, and a choice that
    /// wins there is measured too, where all it lacks fits in the bound (0: none).
    /// 0.03: over the published matrices it cut the mean excess of the K = 4 and 8
    /// plans over those from the full matrix by 22% and 17% on seeds 1–23, and by 20%
    /// and 10% on seeds 24–43, for 3% more pairs (`benches/README.md`).
    pub verify_runner_up: f64,
    /// From [`SparseConfig::pair_terms_from`] CPUs on, every pair of regions (the
    /// finest level of 3–12 groups of 4 CPUs and more: the CCDs of an EPYC) is
    /// measured up to this many times, and its filled cells scaled where the figures
    /// agree on a level more than 4% off the fill (`sparse/regions.rs`; 0: never).
    /// 10: the cells of a pair of the EPYC 7773X's CCDs spread ±12% about their level
    /// CPU by CPU; on seeds 1–23 its cells stay under 95% on 3 seeds with 3 figures (as
    /// without the step), on 1 with 6 and on none with 10 (`benches/README.md`).
    pub region_figures: usize,
}

impl Default for SparseConfig {
    fn default() -> SparseConfig {
        SparseConfig {
            tolerance: 0.10,
            samples: 8,
            small_block: 4,
            search: 3,
            level_ratio: 1.18,
            held_out_below: 64,
            pair_terms_from: 64,
            mesh_share: mesh::MESH_SHARE,
            seed: 1,
            costs: MODEL_COSTS,
            verify_counts: vec![2, 4, 8],
            verify_share: 0.0125,
            verify_runner_up: 0.03,
            region_figures: 10,
        }
    }
}

/// The build VM's costs from `benches/README.md` ("Time model"): 7.30 ms per pair-pass,
/// 210.2 µs per pair of a parallel round, 300 ms fixed (warm-up and guard).
pub const MODEL_COSTS: Costs = Costs {
    per_pair: Duration::from_micros(7_300),
    per_round_pair: Duration::from_nanos(210_200),
    fixed: Duration::from_millis(300),
    passes: 1,
    serial_check: 0,
};

/// Sparse measurement of `cpus`: the tree from `prior` (nested groups of CPU ids, e.g.
/// the sysfs levels) or, without one, by insertion; then spot checks per block, full
/// measurement where they disagree, and the fill.
pub fn run_sparse<M: PairMeasurer>(
    cpus: &[u32],
    prior: Option<&[Vec<CpuSet>]>,
    meas: &mut M,
    cfg: &SparseConfig,
) -> Result<SparseOutcome, MeasureError> {
    let n = cpus.len();
    if n < 2 {
        return Err(MeasureError::TooFewCpus {
            cpus: cpus.iter().copied().collect(),
        });
    }
    let mut run = Run::new(cpus, meas);
    // A prior with no group of two or more CPUs below the machine (an Arm mesh's
    // sysfs: every core alone in one package) says nothing: insertion finds more, and
    // the first pairs show a mesh.
    let prior = prior.map(|p| prior_tree(cpus, p)).filter(Tree::has_groups);
    let used_prior = prior.is_some();
    let mut mesh_model = None;
    let tree = match prior {
        Some(t) => t,
        None => {
            let first = first_pairs(n);
            run.measure(&first, false)?;
            // Twice, keeping the lower: a preempted figure here would misplace a CPU
            // (one SMT sibling looking like a cache neighbour), and these rounds are
            // cheap.
            run.measure(&first, true)?;
            let figures: Vec<f64> = first.iter().filter_map(|&(i, j)| run.get(i, j)).collect();
            let share = mesh::smooth_share(&figures, 1.0 + cfg.tolerance);
            tracing::debug!(share, "sparse: first pairs' smooth share");
            if (mesh::MESH_FROM..=mesh::MESH_UP_TO).contains(&n) && share >= cfg.mesh_share {
                // Drawn apart, so a refused model leaves the other steps' draws as
                // they would be without it.
                let mut rng = Rng::new(cfg.seed ^ 0x6d65_7368);
                mesh_model = mesh::map_mesh(&mut run, cfg, &mut rng)?;
            }
            if mesh_model.is_some() {
                Tree {
                    lat: vec![Vec::new()],
                    group: vec![vec![0; n]],
                    next: 0,
                }
            } else {
                insert_all(&mut run, cfg)?
            }
        }
    };
    tracing::debug!(
        pairs = run.distinct(),
        levels = ?tree.shape(),
        mesh = mesh_model.is_some(),
        "sparse: tree built"
    );
    let (mut cells, filled, full_blocks) = match &mesh_model {
        Some(model) => {
            let mut cells = run.cells.clone();
            for i in 0..n {
                for j in 0..n {
                    if i != j && cells[i * n + j].is_nan() {
                        cells[i * n + j] = model.predict(i, j);
                    }
                }
            }
            (cells, 1, 0)
        }
        None => fill_tree(&mut run, &tree, cfg)?,
    };
    // 5b. Where the pair targets apply, every pair of large groups (the CCDs) checked
    // on figures of its own, `cfg.region_figures` of them (`sparse/regions.rs`).
    if mesh_model.is_none() && n >= cfg.pair_terms_from {
        let mut rng = Rng::new(cfg.seed ^ 0x7265_6769);
        let r = regions::correct_regions(&mut run, &tree, &mut cells, cfg, &mut rng)?;
        tracing::debug!(
            regions = r.regions,
            pairs = r.pairs,
            moved = r.moved,
            "sparse: region pairs checked"
        );
    }
    // 6. Plan verification: the compact plans from the filled cells, measured through.
    let v = verify::verify_plans(&mut run, &mut cells, cfg)?;
    tracing::debug!(
        pairs = v.pairs,
        rounds = v.rounds,
        settled = v.settled,
        "compact plans verified"
    );
    let levels = tree
        .group
        .iter()
        .map(|part| {
            let mut groups: BTreeMap<usize, CpuSet> = BTreeMap::new();
            for (i, &g) in part.iter().enumerate() {
                groups.entry(g).or_default().insert(cpus[i]);
            }
            let mut v: Vec<CpuSet> = groups.into_values().collect();
            v.sort_by_key(|s| s.iter().next());
            v
        })
        .collect();
    let pairs_measured = run.distinct();
    Ok(SparseOutcome {
        cpus: cpus.to_vec(),
        cells,
        measured: run.measured,
        pairs_measured,
        measurements: run.measurements,
        rounds: run.rounds,
        levels,
        blocks_filled: filled,
        blocks_measured: full_blocks,
        used_prior,
        mesh: mesh_model.is_some(),
    })
}

/// Steps 1–5 on the tree: spot checks, fits, full measurement where they disagree and
/// the fill. The cells, the blocks filled and the blocks measured fully.
fn fill_tree<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    tree: &Tree,
    cfg: &SparseConfig,
) -> Result<(Vec<f64>, usize, usize), MeasureError> {
    let n = run.n();
    let mut rng = Rng::new(cfg.seed);
    let blocks = blocks(tree, n >= cfg.pair_terms_from);
    let tol = 1.0 + cfg.tolerance;
    // A figure this far from its block's fit is not variation inside a level but a
    // pair the tree placed wrongly (levels are at least 1.3 apart).
    let broken = cfg.level_ratio;

    // 1. Spot checks of every block at once: twice as many as it has child groups,
    // more for big blocks, all of a small one.
    let mut want = Vec::new();
    let mut drawn: Vec<Vec<(usize, usize)>> = Vec::new();
    for b in &blocks {
        let cells = b.cells();
        if cells <= cfg.small_block {
            want.extend(b.pairs());
            drawn.push(b.pairs());
            continue;
        }
        let k = (2 * b.kids.len())
            .max(2 * b.unit_pairs().len())
            .max((cells as f64).sqrt() as usize / 4)
            .clamp(cfg.samples, 8 * cfg.samples)
            .min(cells);
        let sample = b.sample(k, &mut rng);
        want.extend(sample.iter().copied());
        drawn.push(sample);
    }
    run.measure(&want, false)?;
    // 2. Figures off their block's fit are measured once more (the lower is kept:
    // preemption only inflates).
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
    // 3. A block whose figures mostly fit is filled from the fit, except the child
    // pairs holding a figure that breaks it: those are measured fully. A block where
    // more than a quarter miss the fit is measured fully.
    let mut full = Vec::new();
    let mut fill: Vec<(&Block, Fit)> = Vec::new();
    let mut filled = 0usize;
    let mut full_blocks = 0usize;
    let mut irregular: Vec<&Block> = Vec::new();
    let mut suspect: Vec<(&Block, Vec<(usize, usize)>)> = Vec::new();
    for (b, sample) in blocks.iter().zip(&drawn) {
        let Some(fit) = Fit::new(run, b) else {
            full.extend(b.pairs());
            full_blocks += 1;
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
        // A random spot check a level below its fit: a closer group the tree does
        // not know hides in this block (a prior or a numbering that lies). Every pair
        // of child groups gets checked.
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
                full.extend(pairs);
                full_blocks += 1;
            } else {
                // A large child pair is checked again before it is measured fully:
                // one broken figure there may be the only one.
                suspect.push((b, pairs));
            }
        }
        filled += 1;
        fill.push((b, fit));
    }
    let mut want = Vec::new();
    for (_, pairs) in &suspect {
        for _ in 0..2 * cfg.samples {
            want.push(pairs[rng.below(pairs.len())]);
        }
    }
    run.measure(&want, false)?;
    for (b, pairs) in suspect {
        let Some(fit) = fill
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
            full.extend(pairs);
            full_blocks += 1;
        }
    }
    // 3b. On a small machine, fresh pairs of every filled block against its fill
    // (drawn apart, so the other steps draw as they would without them).
    let mut fresh = Rng::new(cfg.seed.rotate_left(32));
    for k in held_out::held_out(run, &fill, cfg, &mut fresh)? {
        full.extend(fill[k].0.pairs());
        full_blocks += 1;
        filled -= 1;
    }
    tracing::debug!(
        pairs = run.distinct(),
        irregular = irregular.len(),
        full = full.len(),
        "sparse: fits and held-out checks"
    );
    // 4. A block where more than a quarter miss the fit is split into its child pairs,
    // each spot-checked twice: filled from their mean when the two agree, else
    // measured fully.
    let mut subs: Vec<SubPair<'_>> = Vec::new();
    let mut want = Vec::new();
    for b in &irregular {
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
    let spread = |run: &Run<'_, M>, pairs: &[(usize, usize)]| {
        let v: Vec<f64> = pairs.iter().filter_map(|&(i, j)| run.get(i, j)).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        (v.len(), lo, hi)
    };
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
    let mut sub_fill: Vec<(Vec<(usize, usize)>, f64)> = Vec::new();
    let mut modelled = Vec::new();
    for (rows, cols, pairs) in subs {
        let (count, lo, hi) = spread(run, &pairs);
        if count == pairs.len() {
            continue;
        }
        if count == 0 || hi > lo * tol {
            // Two figures that disagree: a factor per CPU may still explain them.
            if rowcol::worth(rows, cols) {
                modelled.push((rows, cols, pairs));
                continue;
            }
            full.extend(pairs);
            full_blocks += 1;
        } else {
            let v: f64 = pairs
                .iter()
                .filter_map(|&(i, j)| run.get(i, j))
                .sum::<f64>();
            sub_fill.push((pairs, v / count as f64));
            filled += 1;
        }
    }
    // A child pair whose figures disagree: a factor per CPU on each side, from a few
    // pairs per CPU; misfits measured once more; filled from it when every figure fits
    // within half the tolerance, else measured fully.
    let want: Vec<(usize, usize)> = modelled
        .iter()
        .flat_map(|(rows, cols, _)| rowcol::design(rows, cols))
        .collect();
    run.measure(&want, false)?;
    let obs = |run: &Run<'_, M>, rows: &[usize], cols: &[usize]| -> Vec<(usize, usize, f64)> {
        rows.iter()
            .flat_map(|&i| cols.iter().map(move |&j| (i, j)))
            .filter_map(|(i, j)| Some((i, j, run.get(i, j)?)))
            .collect()
    };
    let half = 1.0 + cfg.tolerance / 2.0;
    let again: Vec<(usize, usize)> = modelled
        .iter()
        .flat_map(|(rows, cols, _)| {
            let o = obs(run, rows, cols);
            RowCol::new(rows, cols, &o).map_or_else(Vec::new, |f| f.misfits(&o, half))
        })
        .collect();
    run.measure(&again, true)?;
    let mut rc_fill = Vec::new();
    for (rows, cols, pairs) in modelled {
        let o = obs(run, rows, cols);
        match RowCol::new(rows, cols, &o) {
            Some(f) if f.misfits(&o, half).is_empty() => {
                rc_fill.push((rows, cols, f));
                filled += 1;
            }
            // One level with a few exceptions (a dual EPYC 7742's CCX pairs: 122 ns
            // with one cell in ten at 100). From the pair target's size on, filled from
            // the median, the exceptions seen staying measured; below it, measured fully.
            _ => match mostly_level(&o, tol).filter(|_| n >= cfg.held_out_below) {
                Some(level) => {
                    sub_fill.push((pairs, level));
                    filled += 1;
                }
                None => {
                    full.extend(pairs);
                    full_blocks += 1;
                }
            },
        }
    }
    run.measure(&full, false)?;
    tracing::debug!(pairs = run.distinct(), "sparse: blocks measured fully");
    // 5. The fill: every cell still unknown takes its block's fit.
    let mut cells = run.cells.clone();
    for (pairs, v) in &sub_fill {
        for &(i, j) in pairs {
            if cells[i * n + j].is_nan() {
                cells[i * n + j] = *v;
                cells[j * n + i] = *v;
            }
        }
    }
    for (rows, cols, f) in &rc_fill {
        for &i in rows.iter() {
            for &j in cols.iter() {
                if cells[i * n + j].is_nan() {
                    let v = f.predict(i, j);
                    cells[i * n + j] = v;
                    cells[j * n + i] = v;
                }
            }
        }
    }
    for (b, fit) in &fill {
        for (i, j) in b.pairs() {
            if cells[i * n + j].is_nan() {
                let v = fit.fill(b, i, j);
                cells[i * n + j] = v;
                cells[j * n + i] = v;
            }
        }
    }
    Ok((cells, filled, full_blocks))
}

/// The median of `obs`' figures when at least three quarters of them (and at least 8)
/// lie within `tol` (a ratio) of it: one level with a few exceptions.
fn mostly_level(obs: &[(usize, usize, f64)], tol: f64) -> Option<f64> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::measure::simulate::Simulated;

    /// 2 sockets × 2 CCX × 2 cores × 2 threads, siblings at +8: 16 CPUs, four levels.
    fn machine() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            let core = |x: usize| x % 8;
            if core(i) == core(j) {
                8.0
            } else if core(i) / 2 == core(j) / 2 {
                25.0
            } else if core(i) / 4 == core(j) / 4 {
                110.0
            } else {
                250.0
            }
        })
    }

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

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

    #[test]
    fn insertion_recovers_every_level_and_fills_the_rest() {
        let m = machine();
        let mut sim = Simulated::new(&m, 0.0, 3);
        let out = run_sparse(&m.cpus, None, &mut sim, &SparseConfig::default()).unwrap();
        let sizes: Vec<usize> = out.levels.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![8, 4, 2, 1], "{:?}", out.levels);
        assert_eq!(out.levels[0][0], set("0,8"));
        assert_eq!(out.levels[1][0], set("0-1,8-9"));
        assert_eq!(out.levels[2][0], set("0-3,8-11"));
        for i in 0..16 {
            for j in 0..16 {
                if i != j {
                    let (want, got) = (m.at(i, j).unwrap(), out.at(i, j).unwrap());
                    assert!((want - got).abs() <= 0.1 * want, "{i},{j}: {got} vs {want}");
                }
            }
        }
        assert!(
            out.pairs_measured < out.pairs_total(),
            "{}",
            out.pairs_measured
        );
        assert_eq!(out.pairs_total(), 120);
        // The matrix marks what was inferred.
        let mx = out.to_matrix(&BTreeMap::new(), &MODEL_COSTS);
        let inferred = mx.stats.iter().filter(|s| s.inferred).count();
        assert_eq!(inferred + out.pairs_measured, 120);
        assert_eq!(
            mx.sparse.as_ref().unwrap().pairs_measured,
            out.pairs_measured
        );
        mx.validate().unwrap();
    }

    fn within_10(m: &LatencyMatrix, out: &SparseOutcome) -> f64 {
        let near = (0..16)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .filter(|&(i, j)| {
                let (want, got) = (m.at(i, j).unwrap(), out.at(i, j).unwrap());
                (want - got).abs() <= 0.1 * want
            })
            .count();
        near as f64 / 120.0
    }

    #[test]
    fn a_wrong_prior_is_caught_by_the_spot_checks_and_a_non_nesting_level_is_dropped() {
        let m = machine();
        let socket = vec![set("0-3,8-11"), set("4-7,12-15")];
        let ccx = vec![
            set("0-1,8-9"),
            set("2-3,10-11"),
            set("4-5,12-13"),
            set("6-7,14-15"),
        ];
        let smt: Vec<CpuSet> = (0..8).map(|c| set(&format!("{c},{}", c + 8))).collect();
        let right = vec![smt, ccx, socket.clone()];
        // Siblings said to be 2k and 2k+1 (Windows numbering): wrong here.
        let wrong_smt: Vec<CpuSet> = (0..8)
            .map(|k| set(&format!("{},{}", 2 * k, 2 * k + 1)))
            .collect();
        let wrong = vec![wrong_smt, socket, vec![set("0-5"), set("6-15")]];
        let t = prior_tree(&m.cpus, &wrong);
        assert_eq!(
            t.group.len(),
            3,
            "pairs, sockets, machine: the crossing level is dropped"
        );
        let cfg = SparseConfig::default();
        for seed in 1..=5 {
            let cfg = SparseConfig {
                seed,
                ..cfg.clone()
            };
            let ok = run_sparse(
                &m.cpus,
                Some(&right),
                &mut Simulated::new(&m, 0.0, seed),
                &cfg,
            )
            .unwrap();
            let bad = run_sparse(
                &m.cpus,
                Some(&wrong),
                &mut Simulated::new(&m, 0.0, seed),
                &cfg,
            )
            .unwrap();
            assert!(ok.used_prior && bad.used_prior);
            assert_eq!(within_10(&m, &ok), 1.0, "seed {seed}");
            assert!(
                within_10(&m, &bad) >= 0.9,
                "seed {seed}: {}",
                within_10(&m, &bad)
            );
        }
    }

    #[test]
    fn a_prior_of_lone_cpus_in_one_package_is_no_prior() {
        let m = machine();
        let alone: Vec<CpuSet> = (0..16).map(|c| set(&c.to_string())).collect();
        let flat = vec![alone, vec![set("0-15")]];
        let out = run_sparse(
            &m.cpus,
            Some(&flat),
            &mut Simulated::new(&m, 0.0, 1),
            &SparseConfig::default(),
        )
        .unwrap();
        assert!(!out.used_prior);
        assert_eq!(within_10(&m, &out), 1.0);
        assert_eq!(out.levels.len(), 4, "found by insertion: {:?}", out.levels);
    }

    #[test]
    fn two_cpus_are_one_measured_pair_and_fewer_is_an_error() {
        let m = LatencyMatrix::from_fn(vec![3, 5], |_, _| 40.0);
        let mut sim = Simulated::new(&m, 0.0, 1);
        let out = run_sparse(&[3, 5], None, &mut sim, &SparseConfig::default()).unwrap();
        assert_eq!((out.pairs_measured, out.pairs_total()), (1, 1));
        assert_eq!(out.at(0, 1), Some(40.0));
        let e = run_sparse(&[3], None, &mut sim, &SparseConfig::default()).unwrap_err();
        assert!(matches!(e, MeasureError::TooFewCpus { .. }), "{e}");
    }

    #[test]
    fn the_daemon_measures_sparsely_from_128_cpus_or_the_setting() {
        let by_default = |n| Mode::default_for(n, SPARSE_FROM_CPUS);
        assert_eq!(by_default(2), Mode::Serial);
        assert_eq!(by_default(SPARSE_FROM_CPUS - 1), Mode::Serial);
        assert_eq!(by_default(SPARSE_FROM_CPUS), Mode::Sparse);
        assert_eq!(by_default(512), Mode::Sparse);
        // `measure.sparse-from-cpus = 4`: a small machine gets the fast first map.
        assert_eq!(Mode::default_for(3, 4), Mode::Serial);
        assert_eq!(Mode::default_for(8, 4), Mode::Sparse);
    }

    #[test]
    fn the_model_counts_rounds() {
        let out = SparseOutcome {
            cpus: vec![0, 1],
            cells: vec![f64::NAN; 4],
            measured: vec![false; 4],
            pairs_measured: 0,
            measurements: 0,
            rounds: vec![1, 4],
            levels: Vec::new(),
            blocks_filled: 0,
            blocks_measured: 0,
            used_prior: false,
            mesh: false,
        };
        // 300 ms + 7.3 ms + (7.3 ms + 4 × 210.2 µs).
        let t = out.modelled(&MODEL_COSTS);
        assert_eq!(
            t,
            Duration::from_micros(300_000 + 7_300 + 7_300 + 840) + Duration::from_nanos(800)
        );
    }
}
