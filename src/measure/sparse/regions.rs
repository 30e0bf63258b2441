//! Region pairs: the level of every pair of large groups checked on figures of its own.
//!
//! ```text
//! tree ──► regions: the finest level of 3–12 groups of 4 CPUs and more (the CCDs)
//!              │ every pair of regions: figures between them topped up to ten
//!              ▼
//!   each figure over the fill where it stands (its row's and column's factors kept):
//!   two thirds within 10% of their median, the median more than 4% from 1
//!        ── yes ─► the pair's filled cells scaled by that median
//! ```
//!
//! The fill of a block takes a factor per child group, per unit and per CPU, and a
//! term per pair of units where their figures allow; but where insertion nests groups
//! that are in truth all about one level apart (an EPYC's CCDs, with no hierarchy among
//! them, grouped as three and five), a pair of CCDs may get one figure or none, and its
//! cells follow the factors of CCDs elsewhere. Such a pair's cells do sit about one
//! level of their own, so its own figures can set it.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::BTreeMap;

use super::run::Run;
use super::tree::{Tree, NONE};
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::measure::rng::Rng;
use crate::stats::upper_median;

/// Groups a level must have to be the regions: from three, two regions being one
/// block, filled from its own figures already; at most twelve, 66 pairs.
const REGIONS: std::ops::RangeInclusive<usize> = 3..=12;
/// CPUs a group must hold to be a region (a pair of them 16 cells and more).
const REGION_CPUS: usize = 4;
/// Two thirds of a pair's figures must lie this close (relative) to their median to
/// move its fill: figures that scatter more say the pair is not one level.
const AGREE: f64 = 0.10;
/// The fill moves only when the figures' median ratio to it is further than this
/// (relative) from 1: noise of 2% and the CPU-by-CPU spread on ten figures stay under
/// it.
const MOVE: f64 = 0.04;

/// What the step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Corrected {
    /// Regions found (0: no level qualified).
    pub(super) regions: usize,
    /// Pairs measured here.
    pub(super) pairs: usize,
    /// Pairs of regions whose filled cells were scaled.
    pub(super) moved: usize,
}

/// The regions: each CPU's region at the finest level of the tree with 3–12 groups,
/// every one of at least [`REGION_CPUS`] CPUs. `None` where no level has them.
fn regions(tree: &Tree, n: usize) -> Option<Vec<usize>> {
    tree.group.iter().find_map(|part| {
        if part.len() != n || part.contains(&NONE) {
            return None;
        }
        let mut size: BTreeMap<usize, usize> = BTreeMap::new();
        for &g in part {
            *size.entry(g).or_default() += 1;
        }
        let ok = REGIONS.contains(&size.len()) && size.values().all(|&s| s >= REGION_CPUS);
        ok.then(|| {
            let index: BTreeMap<usize, usize> =
                size.keys().enumerate().map(|(x, &g)| (g, x)).collect();
            part.iter().map(|g| index[g]).collect()
        })
    })
}

/// Tops every pair of regions up to `cfg.region_figures` figures, then scales the
/// filled cells of a pair whose figures agree with each other but not with its fill.
/// `cells` is the filled matrix (row-major n×n): new figures replace the fill in it.
pub(super) fn correct_regions<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    tree: &Tree,
    cells: &mut [f64],
    cfg: &SparseConfig,
    rng: &mut Rng,
) -> Result<Corrected, MeasureError> {
    let n = run.n();
    let figures = cfg.region_figures;
    if figures == 0 {
        return Ok(Corrected::default());
    }
    let Some(region) = regions(tree, n) else {
        return Ok(Corrected::default());
    };
    let count = region.iter().max().map_or(0, |&r| r + 1);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (i, &r) in region.iter().enumerate() {
        members[r].push(i);
    }
    let pairs: Vec<(usize, usize)> = (0..count)
        .flat_map(|a| (0..a).map(move |b| (a, b)))
        .collect();
    let before = run.distinct();
    // 1. Ten figures (by default) for every pair of regions.
    top_up(run, cells, &members, &pairs, figures, rng)?;
    let mut done = Corrected {
        regions: count,
        pairs: run.distinct() - before,
        moved: 0,
    };
    // 2. Move the fill of a pair whose figures agree and sit apart from it.
    for &(a, b) in &pairs {
        let Some(ratios) = ratios(run, cells, &members, &region, a, b) else {
            continue;
        };
        if ratios.len() < figures.min(members[a].len() * members[b].len()) {
            continue;
        }
        let Some(ratio) = upper_median(&ratios) else {
            continue;
        };
        // Two thirds of them at least: a preempted figure does not count.
        let agree = ratios
            .iter()
            .filter(|&&r| (r / ratio).ln().abs() <= (1.0 + AGREE).ln())
            .count();
        if 3 * agree < 2 * ratios.len()
            || !ratio.is_finite()
            || ratio.ln().abs() <= (1.0 + MOVE).ln()
        {
            continue;
        }
        for &i in &members[a] {
            for &j in &members[b] {
                if !run.measured[i * n + j] {
                    cells[i * n + j] *= ratio;
                    cells[j * n + i] = cells[i * n + j];
                }
            }
        }
        done.moved += 1;
    }
    Ok(done)
}

/// Fresh pairs, drawn at random, for every pair of regions of `which` with fewer than
/// `figures` figures; measured at once, their figures written into `cells`.
fn top_up<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cells: &mut [f64],
    members: &[Vec<usize>],
    which: &[(usize, usize)],
    figures: usize,
    rng: &mut Rng,
) -> Result<(), MeasureError> {
    let n = run.n();
    let mut want = Vec::new();
    for &(a, b) in which {
        let (seen, mut fresh): (Vec<_>, Vec<_>) = members[a]
            .iter()
            .flat_map(|&i| members[b].iter().map(move |&j| (i.min(j), i.max(j))))
            .partition(|&(i, j)| run.get(i, j).is_some());
        rng.sample(&mut fresh, figures.saturating_sub(seen.len()));
        want.extend(fresh);
    }
    run.measure(&want, false)?;
    for &(i, j) in &want {
        if let Some(v) = run.get(i, j) {
            cells[i * n + j] = v;
            cells[j * n + i] = v;
        }
    }
    Ok(())
}

/// Each figure between regions `a` and `b` over the fill where it stands: the median
/// filled cell of its row to the other region times that of its column, over the
/// median filled cell of the pair (a CPU's factor kept). `None` where the pair has no
/// filled cell.
fn ratios<M: PairMeasurer>(
    run: &Run<'_, M>,
    cells: &[f64],
    members: &[Vec<usize>],
    region: &[usize],
    a: usize,
    b: usize,
) -> Option<Vec<f64>> {
    let n = run.n();
    let open = |i: usize, j: usize| !run.measured[i * n + j];
    let fill: Vec<f64> = members[a]
        .iter()
        .flat_map(|&i| members[b].iter().map(move |&j| (i, j)))
        .filter(|&(i, j)| open(i, j))
        .map(|(i, j)| cells[i * n + j])
        .collect();
    let level = upper_median(&fill)?;
    let line = |i: usize, other: usize| {
        let v: Vec<f64> = members[other]
            .iter()
            .filter(|&&j| open(i, j))
            .map(|&j| cells[i * n + j])
            .collect();
        upper_median(&v).unwrap_or(level)
    };
    Some(
        members[a]
            .iter()
            .flat_map(|&i| members[b].iter().map(move |&j| (i, j)))
            .filter_map(|(i, j)| {
                let v = run.get(i, j)?;
                Some(v * level / (line(i, region[j]) * line(j, region[i])))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::measure::simulate::Simulated;

    /// Four regions of six CPUs; `level(a, b)` between regions, 10 ns inside one, and
    /// a factor per CPU.
    fn machine(level: impl Fn(usize, usize, usize, usize) -> f64) -> LatencyMatrix {
        let f = |i: usize| 1.0 + 0.02 * (i % 3) as f64;
        LatencyMatrix::from_fn((0..24).collect(), |i, j| {
            let (a, b) = (i / 6, j / 6);
            if a == b {
                10.0
            } else {
                level(a.max(b), a.min(b), i, j) * f(i) * f(j)
            }
        })
    }

    fn tree(groups: Vec<usize>) -> Tree {
        Tree {
            lat: Vec::new(),
            group: vec![groups, vec![0; 24]],
            next: 0,
        }
    }

    /// Runs the step on `truth` from a fill of 110 ns between regions (with the right
    /// factor per CPU); the report, the cells and the measured flags.
    fn correct(truth: &LatencyMatrix, cfg: &SparseConfig) -> (Corrected, Vec<f64>, Vec<bool>) {
        let f = |i: usize| 1.0 + 0.02 * (i % 3) as f64;
        let mut sim = Simulated::new(truth, 0.0, 3);
        let mut run = Run::new(&truth.cpus, &mut sim);
        let mut cells: Vec<f64> = (0..24 * 24)
            .map(|x| {
                let (i, j) = (x / 24, x % 24);
                if i == j {
                    f64::NAN
                } else if i / 6 == j / 6 {
                    10.0
                } else {
                    110.0 * f(i) * f(j)
                }
            })
            .collect();
        let t = tree((0..24).map(|i| i / 6).collect());
        let mut rng = Rng::new(7);
        let c = correct_regions(&mut run, &t, &mut cells, cfg, &mut rng).unwrap();
        (c, cells, run.measured)
    }

    #[test]
    fn a_pair_of_regions_off_its_fill_is_set_by_its_own_figures() {
        let levels = |a: usize, b: usize| match (a, b) {
            (1, 0) => 95.0,
            (2, 0) => 110.0,
            (3, 0) => 125.0,
            (2, 1) => 100.0,
            (3, 1) => 120.0,
            _ => 135.0,
        };
        let truth = machine(|a, b, _, _| levels(a, b));
        let (c, cells, measured) = correct(&truth, &SparseConfig::default());
        assert_eq!(c.regions, 4);
        // Ten figures for each of the six pairs of regions (36 cells each).
        assert_eq!(c.pairs, 60, "{c:?}");
        assert_eq!(measured.iter().filter(|&&m| m).count(), 2 * 60);
        // Every pair but regions 0 and 2 (filled right) moves, and lands within 2%.
        assert_eq!(c.moved, 5, "{c:?}");
        for i in 0..24 {
            for j in 0..24 {
                if i / 6 != j / 6 {
                    let t = truth.at(i, j).unwrap();
                    let off = (cells[i * 24 + j] / t - 1.0).abs();
                    assert!(off < 0.02, "{i},{j}: {} for {t}", cells[i * 24 + j]);
                }
            }
        }
    }

    #[test]
    fn figures_that_scatter_leave_the_fill_and_zero_figures_measure_nothing() {
        // Regions 2 and 3: 80 or 140 ns by the parity of the pair, no one level; the
        // other pairs at the fill's 110.
        let truth = machine(|a, b, i, j| {
            if (a, b) == (3, 2) {
                if (i + j) % 2 == 0 {
                    80.0
                } else {
                    140.0
                }
            } else {
                110.0
            }
        });
        let (c, cells, _) = correct(&truth, &SparseConfig::default());
        assert_eq!(c.moved, 0, "{c:?}");
        let f = |i: usize| 1.0 + 0.02 * (i % 3) as f64;
        assert_eq!(cells[12 * 24 + 19], 110.0 * f(12) * f(19));
        let off = SparseConfig {
            region_figures: 0,
            ..SparseConfig::default()
        };
        let (c, _, measured) = correct(&truth, &off);
        assert_eq!(c, Corrected::default());
        assert!(measured.iter().all(|&m| !m));
    }

    #[test]
    fn regions_are_three_to_twelve_groups_of_four_cpus_and_more() {
        // Four groups of six: regions.
        let r = regions(&tree((0..24).map(|i| i / 6).collect()), 24).unwrap();
        assert_eq!(r[13], 2);
        // Two groups: one block, no regions; a group of two CPUs: none either.
        assert!(regions(&tree((0..24).map(|i| i / 12).collect()), 24).is_none());
        let small: Vec<usize> = (0..24).map(|i| if i < 2 { 0 } else { 1 + i / 8 }).collect();
        assert!(regions(&tree(small), 24).is_none());
        // Thirteen groups: too many pairs to top up.
        let many: Vec<usize> = (0..24).map(|i| i % 13).collect();
        assert!(regions(&tree(many), 24).is_none());
    }
}
