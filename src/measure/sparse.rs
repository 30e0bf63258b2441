//! Sparse measurement: recover the hierarchy with few pairs, spot-check every block of
//! it, measure fully only the blocks that disagree, and fill the rest from their block.
//!
//! ```text
//! prior (sysfs groups)  ──or──  insertion (each CPU joins the tree by a few guessed pairs)
//!                 │                        │ chain i–(i−1) and i–(i+n/2) measured first, in rounds
//!                 └──────► tree of nested groups (levels)
//!                                   │
//!             blocks: per group, the pairs joined there (between its child groups)
//!                                   │ random spot checks (a seeded sample), in rounds
//!             agree with the block's median within the tolerance? ── yes ─► fill, mark inferred
//!                                   │ no
//!             split into child pairs, spot-check again ── no ─► measure that block fully
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
use fit::{misfits, Fit};
use rowcol::RowCol;

mod fit;
mod rowcol;
use crate::cpuset::CpuSet;
use crate::matrix::{LatencyMatrix, PairStats, SparseCounts};

/// Measures pairs of CPUs. Sparse measurement asks for one round at a time: the pairs
/// of a round share no CPU, so they may run at once.
pub trait PairMeasurer {
    /// One figure (one-way ns) per pair of the round, `None` when the pair gave none.
    fn measure_round(&mut self, round: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError>;
}

/// From this many CPUs on, the daemon measures sparsely by default. At 128 CPUs a full
/// matrix in parallel rounds models at 5.7 s and sparse runs at 0.9–1.7 s with ≥ 95% of
/// the cells within 10% on every published 128+ CPU matrix; at 64 a full matrix models
/// at 2.2 s, and sparse misses the 95% mark on the mesh parts of that size (Graviton)
/// and measures more than 15% of the pairs on some (Graviton2, Kunpeng 920). Figures:
/// `benches/README.md`, "Sparse measurement".
pub const SPARSE_FROM_CPUS: usize = 128;

impl Mode {
    /// The daemon's mode for a machine of `cpus` CPUs: sparse from
    /// [`SPARSE_FROM_CPUS`] on, else a full matrix in serial order.
    pub fn default_for(cpus: usize) -> Mode {
        if cpus >= SPARSE_FROM_CPUS {
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
    /// Seed of the spot-check sample.
    pub seed: u64,
    /// The time model's costs, for [`SparseOutcome::modelled`].
    pub costs: Costs,
}

impl Default for SparseConfig {
    fn default() -> SparseConfig {
        SparseConfig {
            tolerance: 0.10,
            samples: 8,
            small_block: 4,
            search: 3,
            level_ratio: 1.18,
            seed: 1,
            costs: MODEL_COSTS,
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

/// What a sparse run produced: every cell, which were measured, and how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseOutcome {
    /// CPU ids, in row order.
    pub cpus: Vec<u32>,
    /// Row-major n×n cells (NaN on the diagonal and where nothing is known).
    pub cells: Vec<f64>,
    /// Row-major n×n: the cell was measured (else inferred from its block).
    pub measured: Vec<bool>,
    /// Distinct pairs measured at least once.
    pub pairs_measured: usize,
    /// Measurements taken (a re-measured pair counts again).
    pub measurements: usize,
    /// Sizes of the rounds run, in order (a serial measurement is a round of one).
    pub rounds: Vec<usize>,
    /// The groups of the tree, finest level first (each level a partition of the CPUs).
    pub levels: Vec<Vec<CpuSet>>,
    /// Blocks accepted from spot checks, and blocks measured fully.
    pub blocks_filled: usize,
    pub blocks_measured: usize,
    /// Whether the tree came from the prior.
    pub used_prior: bool,
}

impl SparseOutcome {
    pub fn n(&self) -> usize {
        self.cpus.len()
    }

    /// All pairs of the matrix.
    pub fn pairs_total(&self) -> usize {
        self.n() * self.n().saturating_sub(1) / 2
    }

    /// The cell between two row indices.
    pub fn at(&self, i: usize, j: usize) -> Option<f64> {
        let v = self.cells[i * self.n() + j];
        (!v.is_nan()).then_some(v)
    }

    /// What the run would take on real hardware: the fixed cost, then every round as
    /// long as one pair plus the thread overhead of each pair in it.
    pub fn modelled(&self, c: &Costs) -> Duration {
        let mut t = c.fixed;
        for &r in &self.rounds {
            t += c.per_pair
                + if r > 1 {
                    c.per_round_pair * r as u32
                } else {
                    Duration::ZERO
                };
        }
        t
    }
}

/// Nested groups, built by insertion or from the prior: `group[level][cpu]`.
#[derive(Debug, Clone)]
struct Tree {
    /// Typical figure of each level (insertion only), ascending.
    lat: Vec<Vec<f64>>,
    group: Vec<Vec<usize>>,
    next: usize,
}

const NONE: usize = usize::MAX;

impl Tree {
    fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next
    }

    fn typical(&self, k: usize) -> f64 {
        let mut v = self.lat[k].clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// The level a figure belongs to, adding a level when it is near none.
    fn classify(&mut self, v: f64, ratio: f64, inserted: &[usize]) -> usize {
        let best = (0..self.lat.len())
            .map(|k| (k, (v / self.typical(k)).ln().abs()))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((k, d)) = best {
            if d <= ratio.ln() {
                self.lat[k].push(v);
                return k;
            }
        }
        // A new level: its partition starts as the finer one's (no joins there yet).
        let pos = (0..self.lat.len())
            .find(|&k| self.typical(k) > v)
            .unwrap_or(self.lat.len());
        let part = if pos == 0 {
            let n = self.group.first().map_or(0, Vec::len);
            let mut p = vec![NONE; n];
            for &i in inserted {
                p[i] = self.fresh();
            }
            p
        } else {
            self.group[pos - 1].clone()
        };
        self.group.insert(pos, part);
        self.lat.insert(pos, vec![v]);
        pos
    }

    /// `q` joins `p` at level `k`: same groups from `k` up.
    fn join(&mut self, q: usize, p: usize, k: usize) {
        for l in k..self.group.len() {
            self.group[l][q] = self.group[l][p];
        }
    }
}

/// The run's state: the measurer, every figure so far, the rounds.
struct Run<'a, M: PairMeasurer> {
    ids: &'a [u32],
    meas: &'a mut M,
    cells: Vec<f64>,
    measured: Vec<bool>,
    measurements: usize,
    rounds: Vec<usize>,
}

impl<M: PairMeasurer> Run<'_, M> {
    fn n(&self) -> usize {
        self.ids.len()
    }

    fn get(&self, i: usize, j: usize) -> Option<f64> {
        let v = self.cells[i * self.n() + j];
        (!v.is_nan()).then_some(v)
    }

    fn set(&mut self, i: usize, j: usize, v: f64) {
        let n = self.n();
        self.cells[i * n + j] = v;
        self.cells[j * n + i] = v;
        self.measured[i * n + j] = true;
        self.measured[j * n + i] = true;
    }

    /// Measures `pairs` (indices) in rounds of disjoint pairs. A pair measured before
    /// keeps the lower of its figures when `again` (preemption only inflates).
    fn measure(&mut self, pairs: &[(usize, usize)], again: bool) -> Result<(), MeasureError> {
        let mut todo: Vec<(usize, usize)> = pairs
            .iter()
            .map(|&(i, j)| (i.min(j), i.max(j)))
            .filter(|&(i, j)| i != j && (again || !self.measured[i * self.n() + j]))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        while !todo.is_empty() {
            let mut busy = vec![false; self.n()];
            let mut round = Vec::new();
            let mut rest = Vec::new();
            for (i, j) in todo {
                if busy[i] || busy[j] {
                    rest.push((i, j));
                } else {
                    busy[i] = true;
                    busy[j] = true;
                    round.push((i, j));
                }
            }
            let ids: Vec<(u32, u32)> = round
                .iter()
                .map(|&(i, j)| (self.ids[i], self.ids[j]))
                .collect();
            let figures = self.meas.measure_round(&ids)?;
            self.rounds.push(round.len());
            self.measurements += round.len();
            for (&(i, j), f) in round.iter().zip(figures) {
                if let Some(v) = f.filter(|v| v.is_finite() && *v >= 0.0) {
                    let keep = self.get(i, j).map_or(v, |old| old.min(v));
                    self.set(i, j, keep);
                }
            }
            todo = rest;
        }
        Ok(())
    }

    fn figure(&mut self, i: usize, j: usize) -> Result<Option<f64>, MeasureError> {
        if self.get(i, j).is_none() {
            self.measure(&[(i, j)], false)?;
        }
        Ok(self.get(i, j))
    }
}

/// The prior as nested partitions of row indices, finest first: levels that do not nest
/// in the finer ones are dropped, equal ones merged; the whole machine comes last.
fn prior_tree(ids: &[u32], prior: &[Vec<CpuSet>]) -> Tree {
    let n = ids.len();
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let mut levels: Vec<&Vec<CpuSet>> = prior.iter().collect();
    levels.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for level in levels {
        let mut part = vec![NONE; n];
        for (g, set) in level.iter().enumerate() {
            for (i, &c) in ids.iter().enumerate() {
                if set.contains(c) {
                    part[i] = g;
                }
            }
        }
        // CPUs the prior does not list sit alone.
        for (i, p) in part.iter_mut().enumerate() {
            if *p == NONE {
                *p = level.len() + i;
            }
        }
        let nests = parts.last().is_none_or(|finer| {
            let mut up = BTreeMap::new();
            (0..n).all(|i| *up.entry(finer[i]).or_insert(part[i]) == part[i])
        });
        if nests && parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    let machine = vec![0; n];
    if parts.last() != Some(&machine) {
        parts.push(machine);
    }
    Tree {
        lat: vec![Vec::new(); parts.len()],
        group: parts,
        next: 0,
    }
}

/// The partners to try first for the CPU at index `q` (lower indices only): the previous
/// CPU, and the one half the machine below (where Linux numbers SMT siblings and
/// second sockets).
fn guesses(q: usize, n: usize) -> Vec<usize> {
    let mut g = Vec::new();
    if q >= 1 {
        g.push(q - 1);
    }
    if q >= n / 2 && n / 2 > 1 {
        g.push(q - n / 2);
    }
    if q >= 2 {
        g.push(q - 2);
    }
    g
}

/// Builds the tree by inserting the CPUs one by one: each joins the tree where its first
/// partner says, then looks for a closer group among its guesses and the other groups of
/// the level it joined, trying at most `search` more pairs.
fn insert_all<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cfg: &SparseConfig,
) -> Result<Tree, MeasureError> {
    let n = run.n();
    // The first guesses of every CPU, in parallel rounds: the chain and the half-offset.
    let mut first: Vec<(usize, usize)> = Vec::new();
    for q in 1..n {
        first.extend(guesses(q, n).into_iter().take(2).map(|p| (p, q)));
    }
    run.measure(&first, false)?;
    // Twice, keeping the lower: a preempted figure here would misplace a CPU (one
    // SMT sibling looking like a cache neighbour), and these rounds are cheap.
    run.measure(&first, true)?;
    let mut tree = Tree {
        lat: Vec::new(),
        group: Vec::new(),
        next: 0,
    };
    let mut inserted: Vec<usize> = vec![0];
    // Offsets that found a CPU's closest partner, most recent first.
    let mut offsets: Vec<usize> = Vec::new();
    let mut found: BTreeMap<usize, usize> = BTreeMap::new();
    for q in 1..n {
        for l in 0..tree.group.len() {
            tree.group[l][q] = tree.fresh();
        }
        let mut cands: Vec<usize> = offsets
            .iter()
            .filter(|&&d| d <= q)
            .map(|&d| q - d)
            .collect();
        cands.extend(guesses(q, n));
        let mut seen = BTreeSet::new();
        cands.retain(|c| seen.insert(*c));
        // The closest partner with a figure already places q; else the first that
        // gives one.
        let mut placed = cands
            .iter()
            .filter_map(|&c| Some((c, run.get(c, q)?)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        if placed.is_none() {
            for &c in &cands {
                if let Some(v) = run.figure(c, q)? {
                    placed = Some((c, v));
                    break;
                }
            }
        }
        let Some((mut best, v)) = placed else {
            return Err(MeasureError::NothingMeasured {
                reason: format!("CPU {}: no pair with a lower CPU gave a figure", run.ids[q]),
            });
        };
        if tree.group.is_empty() {
            tree.group.push(vec![NONE; n]);
            tree.group[0][0] = tree.fresh();
            tree.group[0][q] = tree.fresh();
            tree.lat.push(vec![v]);
        }
        let mut level = tree.classify(v, cfg.level_ratio, &inserted);
        // A new level may have been added: q needs an id there.
        for l in 0..tree.group.len() {
            if tree.group[l][q] == NONE {
                tree.group[l][q] = tree.fresh();
            }
        }
        tree.join(q, best, level);
        let mut tried: BTreeSet<usize> = cands
            .iter()
            .copied()
            .filter(|&c| run.get(c, q).is_some())
            .collect();
        tried.insert(best);
        let mut extra = 0;
        while level > 0 {
            // q is in `best`'s group at `level`, not (yet) in any group below it:
            // candidates are CPUs of that group in another child group.
            let g = tree.group[level][q];
            let known: Vec<usize> = cands
                .iter()
                .copied()
                .filter(|&c| run.get(c, q).is_some() && tree.group[level][c] == g)
                .collect();
            // A cached figure already says q is closer to one of them.
            let mut moved = false;
            for c in known {
                let w = run.get(c, q).expect("filtered");
                let k = tree.classify(w, cfg.level_ratio, &inserted);
                for l in 0..tree.group.len() {
                    if tree.group[l][q] == NONE {
                        tree.group[l][q] = tree.fresh();
                    }
                }
                if k < level {
                    level = k;
                    best = c;
                    tree.join(q, best, level);
                    moved = true;
                    break;
                }
            }
            if moved {
                continue;
            }
            if extra >= cfg.search {
                break;
            }
            // The guesses not measured yet, then the other child groups, most recently
            // created first (numbering order).
            let mut reps: Vec<usize> = cands
                .iter()
                .copied()
                .filter(|&c| tree.group[level][c] == g && c != best)
                .collect();
            let mut children = BTreeSet::new();
            for &c in inserted.iter().rev() {
                if tree.group[level][c] == g && children.insert(tree.group[level - 1][c]) {
                    reps.push(c);
                }
            }
            let Some(&c) = reps.iter().find(|c| !tried.contains(c)) else {
                break;
            };
            tried.insert(c);
            extra += 1;
            let Some(w) = run.figure(c, q)? else {
                continue;
            };
            let k = tree.classify(w, cfg.level_ratio, &inserted);
            for l in 0..tree.group.len() {
                if tree.group[l][q] == NONE {
                    tree.group[l][q] = tree.fresh();
                }
            }
            if k < level {
                level = k;
                best = c;
                tree.join(q, best, level);
            }
        }
        if best < q {
            *found.entry(q - best).or_insert(0usize) += 1;
            let mut ranked: Vec<(usize, usize)> = found.iter().map(|(&d, &c)| (c, d)).collect();
            ranked.sort_by(|x, y| y.cmp(x));
            offsets = ranked.into_iter().take(3).map(|(_, d)| d).collect();
        }
        inserted.push(q);
    }
    let top = tree.group.last().expect("two CPUs make a level");
    if top.iter().any(|&g| g != top[0]) {
        tree.group.push(vec![0; n]);
        tree.lat.push(Vec::new());
    }
    Ok(tree)
}

/// Two child groups of an irregular block (rows, columns) and their pairs.
type SubPair<'a> = (&'a [usize], &'a [usize], Vec<(usize, usize)>);

/// One block: the pairs joined inside one group, between two of its child groups (at
/// the finest level the children are single CPUs).
struct Block {
    /// The child groups' CPUs (row indices).
    kids: Vec<Vec<usize>>,
    /// Child of each CPU of the block.
    kid_of: BTreeMap<usize, usize>,
}

impl Block {
    fn cells(&self) -> usize {
        let total: usize = self.kids.iter().map(Vec::len).sum();
        let inside: usize = self.kids.iter().map(|k| k.len() * k.len()).sum();
        (total * total - inside) / 2
    }

    /// Every pair between child groups `a` and `b`.
    fn between(&self, a: usize, b: usize) -> Vec<(usize, usize)> {
        self.kids[a]
            .iter()
            .flat_map(|&i| self.kids[b].iter().map(move |&j| (i.min(j), i.max(j))))
            .collect()
    }

    /// Every pair of the block.
    fn pairs(&self) -> Vec<(usize, usize)> {
        (0..self.kids.len())
            .flat_map(|a| (0..a).map(move |b| (a, b)))
            .flat_map(|(a, b)| self.between(a, b))
            .collect()
    }

    /// `k` pairs, each child group in turn on one side and a random CPU of another
    /// group on the other, so every group is seen.
    fn sample(&self, k: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
        let m = self.kids.len();
        (0..k)
            .map(|r| {
                let a = r % m;
                let b = (a + 1 + rng.below(m - 1)) % m;
                let i = self.kids[a][rng.below(self.kids[a].len())];
                let j = self.kids[b][rng.below(self.kids[b].len())];
                (i.min(j), i.max(j))
            })
            .collect()
    }
}

/// The blocks of a tree.
fn blocks(tree: &Tree) -> Vec<Block> {
    let mut out = Vec::new();
    for (k, part) in tree.group.iter().enumerate() {
        let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, &g) in part.iter().enumerate() {
            members.entry(g).or_default().push(i);
        }
        for cpus in members.values() {
            let mut children: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for &i in cpus {
                let child = if k == 0 { i } else { tree.group[k - 1][i] };
                children.entry(child).or_default().push(i);
            }
            if children.len() < 2 {
                continue;
            }
            let kids: Vec<Vec<usize>> = children.into_values().collect();
            let kid_of = kids
                .iter()
                .enumerate()
                .flat_map(|(x, k)| k.iter().map(move |&i| (i, x)))
                .collect();
            out.push(Block { kids, kid_of });
        }
    }
    out
}

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
    let mut run = Run {
        ids: cpus,
        meas,
        cells: vec![f64::NAN; n * n],
        measured: vec![false; n * n],
        measurements: 0,
        rounds: Vec::new(),
    };
    let tree = match prior {
        Some(p) => prior_tree(cpus, p),
        None => insert_all(&mut run, cfg)?,
    };
    let mut rng = Rng::new(cfg.seed);
    let blocks = blocks(&tree);
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
        .filter_map(|b| Some(misfits(&run, b, &Fit::new(&run, b)?, tol)))
        .flatten()
        .collect();
    run.measure(&again, true)?;
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
        let Some(fit) = Fit::new(&run, b) else {
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
        for (i, j) in misfits(&run, b, &fit, broken) {
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
            let (_, lo, hi) = spread(&run, p);
            hi > lo * tol
        })
        .flat_map(|p| p.iter().copied().filter(|&(i, j)| run.get(i, j).is_some()))
        .collect();
    run.measure(&again, true)?;
    let mut sub_fill: Vec<(Vec<(usize, usize)>, f64)> = Vec::new();
    let mut modelled = Vec::new();
    for (rows, cols, pairs) in subs {
        let (count, lo, hi) = spread(&run, &pairs);
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
            let o = obs(&run, rows, cols);
            RowCol::new(rows, cols, &o).map_or_else(Vec::new, |f| f.misfits(&o, half))
        })
        .collect();
    run.measure(&again, true)?;
    let mut rc_fill = Vec::new();
    for (rows, cols, pairs) in modelled {
        let o = obs(&run, rows, cols);
        match RowCol::new(rows, cols, &o) {
            Some(f) if f.misfits(&o, half).is_empty() => {
                rc_fill.push((rows, cols, f));
                filled += 1;
            }
            _ => {
                full.extend(pairs);
                full_blocks += 1;
            }
        }
    }
    run.measure(&full, false)?;
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
    let pairs_measured = (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter(|&(i, j)| run.measured[i * n + j])
        .count();
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
        used_prior: prior.is_some(),
    })
}

impl SparseOutcome {
    /// The matrix: every known cell, `mode` sparse, `pairs_measured`, `pairs_total`
    /// and `modelled_seconds`; `stats` from `measured_stats` for measured pairs (a
    /// single figure when it has none) and an `inferred` entry with 0 samples for every
    /// filled pair.
    pub fn to_matrix(
        &self,
        measured_stats: &BTreeMap<(u32, u32), PairStats>,
        costs: &Costs,
    ) -> LatencyMatrix {
        let n = self.n();
        let mut m = LatencyMatrix::from_fn(self.cpus.clone(), |i, j| self.cells[i * n + j]);
        for i in 0..n {
            for j in 0..i {
                if self.cells[i * n + j].is_nan() {
                    m.latency_ns[i][j] = None;
                    m.latency_ns[j][i] = None;
                }
            }
        }
        for j in 0..n {
            for i in j + 1..n {
                let Some(v) = self.at(i, j) else { continue };
                let (a, b) = (
                    self.cpus[i].min(self.cpus[j]),
                    self.cpus[i].max(self.cpus[j]),
                );
                let s = if self.measured[i * n + j] {
                    measured_stats.get(&(a, b)).cloned().unwrap_or(PairStats {
                        a,
                        b,
                        p10_ns: v,
                        median_ns: v,
                        p90_ns: v,
                        samples: 1,
                        discarded: 0,
                        round_trips: 0,
                        inferred: false,
                    })
                } else {
                    PairStats {
                        a,
                        b,
                        p10_ns: v,
                        median_ns: v,
                        p90_ns: v,
                        samples: 0,
                        discarded: 0,
                        round_trips: 0,
                        inferred: true,
                    }
                };
                m.stats.push(s);
            }
        }
        m.mode = Some("sparse".into());
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: self.pairs_measured,
            pairs_total: self.pairs_total(),
            modelled_seconds: self.modelled(costs).as_secs_f64(),
        }));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn the_daemon_measures_sparsely_from_128_cpus() {
        assert_eq!(Mode::default_for(2), Mode::Serial);
        assert_eq!(Mode::default_for(SPARSE_FROM_CPUS - 1), Mode::Serial);
        assert_eq!(Mode::default_for(SPARSE_FROM_CPUS), Mode::Sparse);
        assert_eq!(Mode::default_for(512), Mode::Sparse);
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
        };
        // 300 ms + 7.3 ms + (7.3 ms + 4 × 210.2 µs).
        let t = out.modelled(&MODEL_COSTS);
        assert_eq!(
            t,
            Duration::from_micros(300_000 + 7_300 + 7_300 + 840) + Duration::from_nanos(800)
        );
    }
}
