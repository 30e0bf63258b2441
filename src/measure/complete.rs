//! Completion: measuring the inferred cells of a sparse matrix, a slice at a time, until
//! every pair is measured. The sparse map is the first answer, not the last.
//!
//! ```text
//! sparse matrix ──► pending: inferred cells (and, in a sparse matrix, empty ones)
//!      ▲                 │ pick: a slice of rounds of disjoint pairs
//!      │                 ▼
//!      │            measure_slice (any PairMeasurer: the spinner or the simulated one);
//!      │            a figure off its inferred cell is measured again until two agree
//!      │                 │
//!      └── apply: cells ← figures, `inferred` cleared, counts updated, corrections ◄┘
//! ```
//!
//! The daemon runs one slice per job, paced by `measure.complete-slice` and
//! `measure.complete-pause`; `pinnerd measure --mode sparse --complete` runs the slices
//! back to back. Pure apart from the measurer.
//!
//! Must not touch: files, the daemon, the OS (the measurer does).

use std::collections::BTreeMap;
use std::time::Duration;

use super::schedule::CrewCosts;
use super::sparse::PairMeasurer;
use super::MeasureError;
use crate::cpuset::CpuSet;
use crate::matrix::{LatencyMatrix, PairStats};

/// Fewest pairs of a default completion slice: what every machine's slice was before
/// slices grew with the machine (2 rounds at 512 CPUs, 8 at 128).
pub const SLICE_FLOOR: usize = 512;

/// Most rounds of disjoint pairs in a default slice: each CPU spins at most this many
/// pair-passes (8 × 7.30 ms modelled, 58 ms) per slice, and a slice is followed by the
/// load guard's sample and `measure.complete-pause` (1.2 s by default), so completion
/// keeps a CPU spinning at most about 5% of the time (`benches/README.md`).
pub const SLICE_ROUNDS_MAX: usize = 8;

/// Pairs of one completion slice on a machine of `cpus` CPUs, by default (when
/// `measure.complete-slice` is not set): `cpus / 256` rounds of `cpus / 2` pairs, at
/// least 2 and at most [`SLICE_ROUNDS_MAX`], and never fewer than [`SLICE_FLOOR`] pairs.
/// 512 at 128 to 512 CPUs, 2,048 at 1,024, 8,192 at 2,048, 16,384 at 4,096 and 32,768
/// at 8,192: the slices of a machine stay about 256 to 1,024, not 16,000 and more.
pub fn default_slice(cpus: usize) -> usize {
    let rounds = (cpus / 256).clamp(2, SLICE_ROUNDS_MAX);
    (rounds * (cpus / 2)).max(SLICE_FLOOR)
}

/// Pairs of one slice: `configured` (`measure.complete-slice`) when set, else
/// [`default_slice`] of `cpus`.
pub fn slice_size(configured: Option<u32>, cpus: usize) -> usize {
    configured.map_or_else(|| default_slice(cpus), |n| (n as usize).max(1))
}

/// Pause between two slices of the daemon, by default (`measure.complete-pause`).
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// A figure further than this (relative) from the cell it replaces, or from the pair's
/// previous figure, is measured again: a preempted figure only inflates, and one that
/// two figures agree on is the pair's.
pub const AGREE: f64 = 0.10;

/// Most figures one pair gets in a slice (the lowest is kept).
pub const MAX_FIGURES: usize = 4;

/// Pairs `(a, b)`, `a < b`, of `m` without a measured figure: its inferred cells and, in
/// a sparse matrix, its empty ones. Empty for a matrix that is fully measured.
pub fn pending(m: &LatencyMatrix) -> Vec<(u32, u32)> {
    Pending::of(m).pairs()
}

/// Pending pairs as one bit per pair: row `a` holds bit `b` for each pending `(a, b)`,
/// `a < b` (CPU ids). A completion takes its slices out of it at the cost of the slice,
/// not of what is still pending: 8.4 M pairs at 4,096 CPUs, a list scanned and filtered
/// at every slice of 512, made the completion quadratic (stopped at 300 s). n²/8 bytes:
/// 2 MiB at 4,096 CPUs, 8 MiB at 8,192.
struct Pending {
    /// Words (of 64 bits) in a row.
    words: usize,
    bits: Vec<u64>,
    /// Per row, the first word that may still hold a bit.
    first: Vec<usize>,
    left: usize,
}

impl Pending {
    /// The pending pairs of `m` (see [`pending`]).
    fn of(m: &LatencyMatrix) -> Pending {
        let top = m.cpus.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
        let mut set = Pending::empty(top);
        for i in 0..m.len() {
            for j in i + 1..m.len() {
                let (a, b) = (m.cpus[i].min(m.cpus[j]), m.cpus[i].max(m.cpus[j]));
                let empty = m.sparse.is_some() && m.at(i, j).is_none();
                if a != b && (empty || m.is_inferred(i, j)) {
                    set.insert(a, b);
                }
            }
        }
        set
    }

    fn empty(top: usize) -> Pending {
        let words = top.div_ceil(64);
        Pending {
            words,
            bits: vec![0; top * words],
            first: vec![0; top],
            left: 0,
        }
    }

    fn insert(&mut self, a: u32, b: u32) {
        let (a, b) = (a as usize, b as usize);
        let w = &mut self.bits[a * self.words + b / 64];
        if *w & (1 << (b % 64)) == 0 {
            *w |= 1 << (b % 64);
            self.left += 1;
        }
    }

    /// The pairs, in order.
    fn pairs(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::with_capacity(self.left);
        for (k, &word) in self.bits.iter().enumerate() {
            let mut w = word;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                let (a, b) = (k / self.words, (k % self.words) * 64 + bit);
                out.push((a as u32, b as u32));
                w &= w - 1;
            }
        }
        out
    }

    /// [`pick`] of the pending pairs in order with no CPU off, the pairs picked taken
    /// out: the same rounds, in the same order.
    fn take(&mut self, size: usize) -> Vec<Vec<(u32, u32)>> {
        let top = self.first.len();
        let mut rounds = Vec::new();
        let mut taken = 0usize;
        while taken < size && self.left > 0 {
            let mut busy = vec![false; top];
            let mut round = Vec::new();
            'rows: for a in 0..top {
                if taken + round.len() >= size {
                    break;
                }
                if busy[a] {
                    continue;
                }
                let row = &mut self.bits[a * self.words..(a + 1) * self.words];
                while self.first[a] < row.len() && row[self.first[a]] == 0 {
                    self.first[a] += 1;
                }
                for (k, word) in row.iter_mut().enumerate().skip(self.first[a]) {
                    let mut w = *word;
                    while w != 0 {
                        let bit = w.trailing_zeros() as usize;
                        let b = k * 64 + bit;
                        if !busy[b] {
                            *word &= !(1 << bit);
                            self.left -= 1;
                            busy[a] = true;
                            busy[b] = true;
                            round.push((a as u32, b as u32));
                            continue 'rows;
                        }
                        w &= w - 1;
                    }
                }
            }
            if round.is_empty() {
                break;
            }
            taken += round.len();
            rounds.push(round);
        }
        rounds
    }
}

/// How much of `m` is measured: (measured pairs, all pairs), from [`pending`].
pub fn measured_share(m: &LatencyMatrix) -> (usize, usize) {
    let total = m.len() * m.len().saturating_sub(1) / 2;
    (total - pending(m).len().min(total), total)
}

/// The next slice: at most `size` pending pairs with no CPU in `off`, as rounds of
/// disjoint pairs (each round as full as the pending pairs allow).
pub fn pick(pending: &[(u32, u32)], size: usize, off: &CpuSet) -> Vec<Vec<(u32, u32)>> {
    let top = pending
        .iter()
        .map(|&(a, b)| a.max(b) as usize + 1)
        .max()
        .unwrap_or(0);
    let mut used: Vec<bool> = pending
        .iter()
        .map(|&(a, b)| off.contains(a) || off.contains(b))
        .collect();
    let mut rounds = Vec::new();
    let mut taken = 0usize;
    while taken < size {
        let mut busy = vec![false; top];
        let mut round = Vec::new();
        for (k, &(a, b)) in pending.iter().enumerate() {
            if taken + round.len() >= size {
                break;
            }
            let (x, y) = (a as usize, b as usize);
            if used[k] || busy[x] || busy[y] {
                continue;
            }
            busy[x] = true;
            busy[y] = true;
            used[k] = true;
            round.push((a, b));
        }
        if round.is_empty() {
            break;
        }
        taken += round.len();
        rounds.push(round);
    }
    rounds
}

/// What one slice measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slice {
    /// Per pair `(a, b)`, `a < b`: its figure (the lowest of those taken), `None` when
    /// the pair gave none.
    pub figures: Vec<(u32, u32, Option<f64>)>,
    /// Measurements taken (a pair measured again counts again).
    pub measurements: usize,
    /// Sizes of the rounds run, in order.
    pub rounds: Vec<usize>,
}

/// Measures the pairs of `rounds` (from [`pick`]). A figure more than [`AGREE`] off
/// `reference(a, b)` (the cell it replaces; `None`: nothing to agree with) is measured
/// again, until one agrees with the reference or with the figure before it, at most
/// [`MAX_FIGURES`] in all; the lowest is kept.
pub fn measure_slice<M: PairMeasurer>(
    meas: &mut M,
    rounds: &[Vec<(u32, u32)>],
    reference: impl Fn(u32, u32) -> Option<f64>,
) -> Result<Slice, MeasureError> {
    let mut out = Slice::default();
    // Per pair: lowest figure, last figure, figures taken.
    type Taken = (Option<f64>, Option<f64>, usize);
    let mut got: BTreeMap<(u32, u32), Taken> = BTreeMap::new();
    let mut again: Vec<(u32, u32)> = Vec::new();
    let agree = |x: f64, y: f64| (x / y).ln().abs() <= (1.0 + AGREE).ln();
    let mut todo: Vec<Vec<(u32, u32)>> = rounds.to_vec();
    while !todo.is_empty() {
        for round in &todo {
            if round.is_empty() {
                continue;
            }
            let figures = meas.measure_round(round)?;
            out.rounds.push(round.len());
            out.measurements += round.len();
            for (&(a, b), f) in round.iter().zip(figures) {
                let key = (a.min(b), a.max(b));
                let f = f.filter(|v| v.is_finite() && *v >= 0.0);
                let e = got.entry(key).or_insert((None, None, 0));
                let (last, inferred) = (e.1, reference(a, b));
                e.2 += 1;
                if let Some(v) = f {
                    e.0 = Some(e.0.map_or(v, |lo: f64| lo.min(v)));
                    e.1 = Some(v);
                }
                let settled = f.is_some_and(|v| {
                    inferred.is_some_and(|p| agree(v, p)) || last.is_some_and(|p| agree(v, p))
                });
                if !settled && e.2 < MAX_FIGURES {
                    again.push(key);
                }
            }
        }
        todo = pick(&std::mem::take(&mut again), usize::MAX, &CpuSet::new());
    }
    out.figures = got.into_iter().map(|((a, b), e)| (a, b, e.0)).collect();
    Ok(out)
}

/// Statistics of the pairs a slice measured, by `(a, b)`, `a < b`.
pub type SliceStats = BTreeMap<(u32, u32), PairStats>;

/// A cell that completion measured where sparse measurement had inferred it.
#[derive(Debug, Clone, PartialEq)]
pub struct Correction {
    pub a: u32,
    pub b: u32,
    pub inferred_ns: f64,
    pub measured_ns: f64,
}

/// Puts the figures of a slice into `m`: each cell takes its figure and a statistics
/// entry (`stats`, else a single figure), is no longer marked inferred, and the sparse
/// counts follow. Pairs without a figure stay as they were.
/// Returns the inferred cells it replaced.
pub fn apply(
    m: &mut LatencyMatrix,
    figures: &[(u32, u32, Option<f64>)],
    stats: &BTreeMap<(u32, u32), PairStats>,
) -> Vec<Correction> {
    let mut index = StatsIndex::of(m);
    apply_indexed(m, figures, stats, &mut index)
}

/// The row of each CPU id of `m` (indexed by id).
fn rows(m: &LatencyMatrix) -> Vec<Option<usize>> {
    let top = m.cpus.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
    let mut rows = vec![None; top];
    for (i, &c) in m.cpus.iter().enumerate() {
        rows[c as usize] = Some(i);
    }
    rows
}

/// Where each pair's statistics entry is in `m.stats`, by the pair's rows: one slot per
/// pair of the triangle (4 bytes: 32 MiB at 4,096 CPUs, where a map of the 8.4 M pairs
/// took about ten times that).
struct StatsIndex {
    n: usize,
    at: Vec<u32>,
    /// The row of each CPU id of the matrix (see [`rows`]), made once for every slice.
    rows: Vec<Option<usize>>,
}

impl StatsIndex {
    const NONE: u32 = u32::MAX;

    fn of(m: &LatencyMatrix) -> StatsIndex {
        let n = m.len();
        let mut index = StatsIndex {
            n,
            at: vec![Self::NONE; n * n.saturating_sub(1) / 2],
            rows: rows(m),
        };
        for (k, s) in m.stats.iter().enumerate() {
            if let (Some(i), Some(j)) = (index.row(s.a), index.row(s.b)) {
                index.set(i, j, k);
            }
        }
        index
    }

    fn row(&self, c: u32) -> Option<usize> {
        self.rows.get(c as usize).copied().flatten()
    }

    fn slot(&self, i: usize, j: usize) -> Option<usize> {
        let (i, j) = (i.min(j), i.max(j));
        (i != j && j < self.n).then(|| i * (2 * self.n - i - 1) / 2 + (j - i - 1))
    }

    fn get(&self, i: usize, j: usize) -> Option<usize> {
        let k = *self.at.get(self.slot(i, j)?)?;
        (k != Self::NONE).then_some(k as usize)
    }

    fn set(&mut self, i: usize, j: usize, k: usize) {
        if let (Some(slot), Ok(k)) = (self.slot(i, j), u32::try_from(k)) {
            self.at[slot] = k;
        }
    }
}

/// [`apply`] with the index of `m.stats` kept by the caller across slices.
fn apply_indexed(
    m: &mut LatencyMatrix,
    figures: &[(u32, u32, Option<f64>)],
    stats: &BTreeMap<(u32, u32), PairStats>,
    at: &mut StatsIndex,
) -> Vec<Correction> {
    let mut corrections = Vec::new();
    // Pairs that had no measured figure before.
    let mut newly = 0usize;
    for &(a, b, v) in figures {
        let (Some(v), Some(i), Some(j)) = (v, at.row(a), at.row(b)) else {
            continue;
        };
        if i == j {
            continue;
        }
        let key = (a.min(b), a.max(b));
        let entry = stats
            .get(&key)
            .cloned()
            .unwrap_or_else(|| PairStats::single_figure(key.0, key.1, v));
        let entry = PairStats {
            inferred: false,
            ..entry
        };
        let old = m.at(i, j);
        if m.is_inferred(i, j) {
            newly += 1;
            m.set_inferred(i, j, false);
            if let Some(old) = old {
                corrections.push(Correction {
                    a: key.0,
                    b: key.1,
                    inferred_ns: old,
                    measured_ns: v,
                });
            }
        } else if old.is_none() {
            newly += 1;
        }
        match at.get(i, j) {
            Some(k) => m.stats[k] = entry,
            None => {
                at.set(i, j, m.stats.len());
                m.stats.push(entry);
            }
        }
        m.latency_ns.set(i, j, Some(v));
    }
    if let Some(sp) = m.sparse.as_mut() {
        sp.pairs_measured = (sp.pairs_measured + newly).min(sp.pairs_total);
    }
    corrections
}

/// The corrections whose inferred figure was more than `tolerance` (relative to the
/// measured one) off, in words: how many, between which CPUs, and by how much (the
/// median), low and high apart, e.g. `24 cell(s) among CPUs 12-40 were inferred 18% low
/// (median)`. `None` when none was that far off.
pub fn describe(corrections: &[Correction], tolerance: f64) -> Option<String> {
    let mut parts = Vec::new();
    for low in [true, false] {
        let mut cpus = CpuSet::new();
        let mut off: Vec<f64> = Vec::new();
        for c in corrections {
            // How far the inferred figure was from the measured one.
            let r = c.inferred_ns / c.measured_ns - 1.0;
            if (low && r < -tolerance) || (!low && r > tolerance) {
                cpus.insert(c.a);
                cpus.insert(c.b);
                off.push(r.abs());
            }
        }
        if off.is_empty() {
            continue;
        }
        off.sort_by(f64::total_cmp);
        parts.push(format!(
            "{} cell(s) among CPUs {cpus} were inferred {:.0}% {} (median)",
            off.len(),
            off[off.len() / 2] * 100.0,
            if low { "low" } else { "high" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A measured cell this many times above what both its CPUs' nearest neighbours see
/// of the other CPU is suspect: a preempted figure (they only inflate; a real level is
/// shared by a CPU and its nearest neighbour, an SMT sibling or a cache neighbour).
pub const SUSPECT: f64 = 1.3;

/// Measured cells of a fully measured `m` that look preempted (see [`SUSPECT`]), with
/// the figure their neighbours agree on: `(a, b, expected)`, `a < b`.
pub fn suspects(m: &LatencyMatrix) -> Vec<(u32, u32, f64)> {
    let n = m.len();
    // Each CPU's nearest neighbour and its figure.
    let near: Vec<Option<(usize, f64)>> = (0..n)
        .map(|i| {
            (0..n)
                .filter(|&k| k != i)
                .filter_map(|k| m.at(i, k).map(|v| (k, v)))
                .min_by(|x, y| x.1.total_cmp(&y.1))
        })
        .collect();
    let mut out = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let Some(v) = m.at(i, j) else { continue };
            // What i's neighbour sees of j, and j's neighbour of i, where the neighbour
            // is much closer than the other CPU (so it shares the level).
            let seen = |x: usize, y: usize| -> Option<f64> {
                let (k, d) = near[x]?;
                (k != y && d * SUSPECT < v).then(|| m.at(k, y)).flatten()
            };
            if let (Some(p), Some(q)) = (seen(i, j), seen(j, i)) {
                if v > SUSPECT * p.max(q) {
                    let (a, b) = (m.cpus[i].min(m.cpus[j]), m.cpus[i].max(m.cpus[j]));
                    out.push((a, b, p.max(q)));
                }
            }
        }
    }
    out
}

/// What a completion of a whole matrix did (`pinnerd measure --complete`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// Slices run.
    pub slices: usize,
    /// Distinct pairs given a figure.
    pub pairs: usize,
    /// Measurements taken (repeats included).
    pub measurements: usize,
    /// Sizes of every round run, in order.
    pub rounds: Vec<usize>,
    pub corrections: Vec<Correction>,
    /// Measured cells taken again at the end because they looked preempted
    /// ([`suspects`]).
    pub rechecked: usize,
    /// Spinner threads started: each slice (and the recheck) starts one per CPU of its
    /// pairs ([`crate::measure::spin::crew`]).
    pub spinners: usize,
}

impl Completion {
    /// What the completion takes on real hardware: per slice the load guard's sample
    /// and `pause`, per spinner its start, per round one pair-pass plus handing out each
    /// pair's jobs.
    pub fn modelled(&self, costs: &CrewCosts, guard: Duration, pause: Duration) -> Duration {
        modelled(
            self.slices,
            self.spinners,
            &self.rounds,
            costs,
            guard,
            pause,
        )
    }
}

/// Modelled time of `slices` slices that started `spinners` threads in all and ran
/// these rounds (see [`Completion::modelled`]). The spinners of a round run at once:
/// a round lasts one pair-pass after the coordinator has handed out its pairs.
pub fn modelled(
    slices: usize,
    spinners: usize,
    rounds: &[usize],
    costs: &CrewCosts,
    guard: Duration,
    pause: Duration,
) -> Duration {
    let times = |d: Duration, k: usize| d.saturating_mul(k.min(u32::MAX as usize) as u32);
    let fixed = times(guard + pause, slices) + times(costs.per_spinner, spinners);
    rounds.iter().fold(fixed, |t, &r| {
        t + costs.per_round + times(costs.per_pair, r)
    })
}

/// The build VM's costs of a crew round (`benches/README.md`, "Completion"): one
/// pair-pass 7.30 ms ([`crate::measure::sparse::MODEL_COSTS`]), 9.1 µs to hand out a
/// pair, 92.1 µs to start one CPU's spinner (the medians of
/// `spin::crew::tests::overhead`, debug build, loaded 2-CPU VM: upper bounds).
pub const MODEL_COSTS: CrewCosts = CrewCosts {
    per_round: Duration::from_micros(7_300),
    per_pair: Duration::from_nanos(9_100),
    per_spinner: Duration::from_nanos(92_100),
};

/// CPUs of the pairs of `rounds`: the spinners a slice starts.
fn spinners(rounds: &[Vec<(u32, u32)>]) -> usize {
    let cpus: CpuSet = rounds.iter().flatten().flat_map(|&(a, b)| [a, b]).collect();
    cpus.len()
}

/// Completes `m` through `meas`, `slice` pairs at a time, until nothing is pending or a
/// slice gives no figure (those pairs stay pending); then measures the [`suspects`]
/// again once, each cell keeping its lowest figure. `stats` of a slice come from
/// `take_stats` (the spinner's; empty for the simulated measurer).
pub fn complete<M: PairMeasurer>(
    m: &mut LatencyMatrix,
    meas: &mut M,
    slice: usize,
    mut take_stats: impl FnMut(&mut M) -> BTreeMap<(u32, u32), PairStats>,
) -> Result<Completion, MeasureError> {
    let mut done = Completion::default();
    let mut todo = Pending::of(m);
    let mut index = StatsIndex::of(m);
    let at = rows(m);
    let row = |c: u32| at.get(c as usize).copied().flatten();
    while todo.left > 0 {
        // Every pair of the slice leaves the set; one without a figure stays pending
        // in the matrix.
        let rounds = todo.take(slice.max(1));
        let s = measure_slice(meas, &rounds, |a, b| m.at(row(a)?, row(b)?))?;
        done.slices += 1;
        done.spinners += spinners(&rounds);
        done.measurements += s.measurements;
        done.rounds.extend(&s.rounds);
        done.pairs += s.figures.iter().filter(|f| f.2.is_some()).count();
        let stats = take_stats(meas);
        done.corrections
            .extend(apply_indexed(m, &s.figures, &stats, &mut index));
    }
    let suspect = suspects(m);
    if !suspect.is_empty() {
        let expected: BTreeMap<(u32, u32), f64> =
            suspect.iter().map(|&(a, b, e)| ((a, b), e)).collect();
        let pairs: Vec<(u32, u32)> = expected.keys().copied().collect();
        let rounds = pick(&pairs, usize::MAX, &CpuSet::new());
        let s = measure_slice(meas, &rounds, |a, b| expected.get(&(a, b)).copied())?;
        done.rechecked = suspect.len();
        done.spinners += spinners(&rounds);
        done.measurements += s.measurements;
        done.rounds.extend(&s.rounds);
        let lower: Vec<(u32, u32, Option<f64>)> = s
            .figures
            .iter()
            .map(|&(a, b, v)| {
                (
                    a,
                    b,
                    v.filter(|&v| {
                        let old = row(a).zip(row(b)).and_then(|(i, j)| m.at(i, j));
                        old.is_none_or(|old| v < old)
                    }),
                )
            })
            .collect();
        let stats = take_stats(meas);
        apply_indexed(m, &lower, &stats, &mut index);
    }
    Ok(done)
}

#[cfg(test)]
mod tests;
