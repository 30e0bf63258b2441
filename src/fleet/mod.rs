//! Comparing machines: two matrices of one layout (`diff`) and many matrices of one CPU
//! model (`fleet`).
//!
//! ```text
//! A, B ──► domains of A (reference) ──► per level: median of A, of B, ratio
//!                                   ├─► per group pair (block): median ratio
//!                                   └─► per cell: ratio beyond the cell tolerance
//!                                              ──► verdict "same" | "differs" + reasons
//! fleet: cellwise median of all hosts = reference; each host is diffed against it;
//!        a host that differs is an outlier.
//! ```
//!
//! A *block* is the set of pairs that two groups of the next finer level join at a level
//! (the two CCDs of a Ryzen at the machine level; two CCX at the socket level); pairs of
//! cores (blocks over the SMT level) vary from chip to chip and are left to the cells. A
//! firmware setting that slows one CCD pair moves one block, not the level's median: the
//! verdict looks at both.
//!
//! Owns: the comparison and its plain-data results. Must not touch: files, the OS
//! (the CLI in `cli/fleet.rs` loads the matrices and prints).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::domains::{DomainError, Domains, Level, LevelKind};
use crate::matrix::LatencyMatrix;
use crate::stats::median_in_place;

mod many;
pub use many::{fleet, Fleet, FleetLevel, Host, HostLevel};

/// (level, group, group) of the finer level: one block.
type BlockKey = (usize, usize, usize);

/// How far apart two figures may be and still count as the same.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    /// A level's or a block's median may differ by this fraction (0.10 = 10%).
    pub level: f64,
    /// A single cell may differ by this fraction before it is listed.
    pub cell: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            level: 0.10,
            cell: 0.25,
        }
    }
}

/// A block with fewer pairs than this must also pass the cell tolerance to differ: one
/// or two cells are too few to tell a setting from noise.
const SMALL_BLOCK: usize = 4;

/// Why two matrices cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FleetError {
    /// The matrices cover different CPUs.
    #[error("{b} covers CPUs {b_cpus} but {a} covers {a_cpus}: only machines of the same layout can be compared")]
    Layout {
        a: String,
        a_cpus: CpuSet,
        b: String,
        b_cpus: CpuSet,
    },
    /// The reference matrix has no usable domain structure.
    /// The cause is in the message, not also a source: a chain printed whole (`{:#}`)
    /// says it once.
    #[error("{name}: {cause}")]
    Domains { name: String, cause: DomainError },
    /// Fewer matrices than the operation needs.
    #[error("{0}")]
    TooFew(String),
}

/// The two figures of one level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelDiff {
    /// The level's label (see [`level_labels`]).
    pub level: String,
    /// Median of the pairs first joined at this level, in A and in B.
    pub a_ns: Option<f64>,
    pub b_ns: Option<f64>,
    /// `b_ns / a_ns`.
    pub ratio: Option<f64>,
    /// Pairs compared at this level.
    pub pairs: usize,
    /// Cells of this level beyond the cell tolerance.
    pub cells_differing: usize,
    /// The median moved beyond the level tolerance.
    pub differs: bool,
}

/// A block (two groups of the finer level joined at `level`) whose median moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockDiff {
    pub level: String,
    /// The two groups of the next finer level.
    pub groups: [CpuSet; 2],
    pub a_ns: f64,
    pub b_ns: f64,
    pub ratio: f64,
    pub pairs: usize,
}

/// One cell beyond the cell tolerance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellDiff {
    pub a: u32,
    pub b: u32,
    pub level: String,
    pub a_ns: f64,
    pub b_ns: f64,
    pub ratio: f64,
}

/// `same` or `differs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Same,
    Differs,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Differs => "differs",
        }
    }
}

/// The comparison of B against A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub levels: Vec<LevelDiff>,
    /// Blocks whose median moved beyond the tolerance, largest change first.
    pub groups: Vec<BlockDiff>,
    /// Cells beyond the cell tolerance, largest change first.
    pub cells: Vec<CellDiff>,
    pub cells_compared: usize,
    /// Pairs with a figure in only one of the two.
    pub cells_missing: usize,
    pub verdict: Verdict,
    /// The main reason, one sentence.
    pub reason: String,
    /// Every reason (the first is `reason`).
    pub reasons: Vec<String>,
    pub tolerance: Tolerance,
}

/// Labels for the levels, finest first: the kind's name (`smt`, `llc`, `group`,
/// `machine`…), with `-2`, `-3` added when a kind repeats. The same labels name levels
/// in `diff`, `fleet`, the Prometheus `level` label and the NFD feature names.
pub fn level_labels(levels: &[Level]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(levels.len());
    for l in levels {
        let base = l.kind.as_str();
        let seen = out
            .iter()
            .filter(|s| *s == base || s.starts_with(&format!("{base}-")))
            .count();
        out.push(if seen == 0 {
            base.to_string()
        } else {
            format!("{base}-{}", seen + 1)
        });
    }
    out
}

/// Ratio `b / a`, with a zero A only equal to a zero B.
fn ratio(a: f64, b: f64) -> f64 {
    if a > 0.0 {
        b / a
    } else if b > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// How far a ratio is from 1, symmetric for faster and slower (2x and 0.5x both 1.0).
fn departure(r: f64) -> f64 {
    if r >= 1.0 {
        r - 1.0
    } else if r > 0.0 {
        1.0 / r - 1.0
    } else {
        f64::INFINITY
    }
}

fn check_layout(
    a: &LatencyMatrix,
    a_name: &str,
    b: &LatencyMatrix,
    b_name: &str,
) -> Result<(), FleetError> {
    let sa: CpuSet = a.cpus.iter().copied().collect();
    let sb: CpuSet = b.cpus.iter().copied().collect();
    if sa != sb {
        return Err(FleetError::Layout {
            a: a_name.to_string(),
            a_cpus: sa,
            b: b_name.to_string(),
            b_cpus: sb,
        });
    }
    Ok(())
}

/// Compares B against A, using A's latency domains to name the levels.
pub fn diff(
    a: &LatencyMatrix,
    a_name: &str,
    b: &LatencyMatrix,
    b_name: &str,
    tol: Tolerance,
) -> Result<Diff, FleetError> {
    check_layout(a, a_name, b, b_name)?;
    let domains = Domains::from_matrix(a).map_err(|cause| FleetError::Domains {
        name: a_name.to_string(),
        cause,
    })?;
    Ok(diff_with(&domains, a, b, tol))
}

/// [`diff`] with the domains given (the fleet's reference domains): every pair of CPUs
/// compared once, then summed up per level and per block of groups, then the reasons.
pub fn diff_with(domains: &Domains, a: &LatencyMatrix, b: &LatencyMatrix, tol: Tolerance) -> Diff {
    let labels = level_labels(domains.levels());
    let CellWalk {
        a_cells,
        b_cells,
        diff_count,
        blocks,
        mut cells,
        compared,
        missing,
    } = CellWalk::of(domains, &labels, a, b, tol);
    cells.sort_by(|x, y| departure(y.ratio).total_cmp(&departure(x.ratio)));
    let level_diffs = level_diffs(a_cells, b_cells, &diff_count, &labels, tol);
    let groups = block_diffs(blocks, domains.levels(), &labels, tol);

    let mut reasons = difference_reasons(domains, &labels, b, &level_diffs, &groups, tol);
    let verdict = if reasons.is_empty() {
        Verdict::Same
    } else {
        Verdict::Differs
    };
    if verdict == Verdict::Same {
        reasons.extend(sameness_reasons(&level_diffs, cells.len(), compared, tol));
    }
    if missing > 0 {
        reasons.push(format!(
            "{missing} pairs have a figure in only one of the two and were not compared"
        ));
    }
    Diff {
        levels: level_diffs,
        groups,
        cells,
        cells_compared: compared,
        cells_missing: missing,
        verdict,
        reason: reasons[0].clone(),
        reasons,
        tolerance: tol,
    }
}

/// Every pair of CPUs of A and B compared once: per level, A's cells, B's cells and how
/// many differ; per block, the (a, b) pairs; the cells beyond the tolerance.
struct CellWalk {
    a_cells: Vec<Vec<f64>>,
    b_cells: Vec<Vec<f64>>,
    diff_count: Vec<usize>,
    blocks: BTreeMap<BlockKey, (Vec<f64>, Vec<f64>)>,
    cells: Vec<CellDiff>,
    compared: usize,
    missing: usize,
}

impl CellWalk {
    fn of(
        domains: &Domains,
        labels: &[String],
        a: &LatencyMatrix,
        b: &LatencyMatrix,
        tol: Tolerance,
    ) -> CellWalk {
        let levels = domains.levels();
        let cpus = domains.cpus();
        let n = cpus.len();
        let ai: Vec<Option<usize>> = cpus.iter().map(|&c| a.index_of(c)).collect();
        let bi: Vec<Option<usize>> = cpus.iter().map(|&c| b.index_of(c)).collect();
        let cell = |m: &LatencyMatrix, idx: &[Option<usize>], i: usize, j: usize| -> Option<f64> {
            m.at(idx[i]?, idx[j]?)
        };
        let nl = levels.len();
        let mut walk = CellWalk {
            a_cells: vec![Vec::new(); nl],
            b_cells: vec![Vec::new(); nl],
            diff_count: vec![0usize; nl],
            blocks: BTreeMap::new(),
            cells: Vec::new(),
            compared: 0,
            missing: 0,
        };
        for i in 0..n {
            for j in 0..i {
                let (va, vb) = (cell(a, &ai, i, j), cell(b, &bi, i, j));
                let (va, vb) = match (va, vb) {
                    (Some(x), Some(y)) => (x, y),
                    (None, None) => continue,
                    _ => {
                        walk.missing += 1;
                        continue;
                    }
                };
                walk.compared += 1;
                let l = domains.shared_level(i, j);
                walk.a_cells[l].push(va);
                walk.b_cells[l].push(vb);
                // Blocks join groups of a finer level that is not SMT: two cores of one
                // CCX differ from chip to chip, two CCX are a design (or a setting).
                if l >= 1 && levels[l - 1].kind != LevelKind::Smt {
                    let (x, y) = (domains.group_of(l - 1, i), domains.group_of(l - 1, j));
                    let e = walk.blocks.entry((l, x.min(y), x.max(y))).or_default();
                    e.0.push(va);
                    e.1.push(vb);
                }
                let r = ratio(va, vb);
                if departure(r) > tol.cell {
                    walk.diff_count[l] += 1;
                    walk.cells.push(CellDiff {
                        a: cpus[j],
                        b: cpus[i],
                        level: labels[l].clone(),
                        a_ns: va,
                        b_ns: vb,
                        ratio: r,
                    });
                }
            }
        }
        walk
    }
}

/// Per level: the medians of A and B, their ratio, and whether it is beyond the
/// tolerance.
fn level_diffs(
    mut a_cells: Vec<Vec<f64>>,
    mut b_cells: Vec<Vec<f64>>,
    diff_count: &[usize],
    labels: &[String],
    tol: Tolerance,
) -> Vec<LevelDiff> {
    let nl = a_cells.len();
    let mut level_diffs = Vec::with_capacity(nl);
    for l in 0..nl {
        let pairs = a_cells[l].len();
        let a_ns = median_in_place(&mut a_cells[l]);
        let b_ns = median_in_place(&mut b_cells[l]);
        let r = match (a_ns, b_ns) {
            (Some(x), Some(y)) => Some(ratio(x, y)),
            _ => None,
        };
        level_diffs.push(LevelDiff {
            level: labels[l].clone(),
            a_ns,
            b_ns,
            ratio: r,
            pairs,
            cells_differing: diff_count[l],
            differs: r.is_some_and(|r| departure(r) > tol.level),
        });
    }
    level_diffs
}

/// The blocks of groups whose medians moved beyond the tolerance (a small block only
/// past the cell tolerance), the largest move first.
fn block_diffs(
    blocks: BTreeMap<BlockKey, (Vec<f64>, Vec<f64>)>,
    levels: &[Level],
    labels: &[String],
    tol: Tolerance,
) -> Vec<BlockDiff> {
    let group_set = |level: usize, g: usize| -> CpuSet {
        levels[level].groups.get(g).cloned().unwrap_or_default()
    };
    let mut groups = Vec::new();
    for ((l, gi, gj), (mut va, mut vb)) in blocks {
        let pairs = va.len();
        let (Some(ma), Some(mb)) = (median_in_place(&mut va), median_in_place(&mut vb)) else {
            continue;
        };
        let r = ratio(ma, mb);
        let d = departure(r);
        let differs = d > tol.level && (pairs >= SMALL_BLOCK || d > tol.cell);
        if !differs {
            continue;
        }
        groups.push(BlockDiff {
            level: labels[l].clone(),
            groups: [group_set(l - 1, gi), group_set(l - 1, gj)],
            a_ns: ma,
            b_ns: mb,
            ratio: r,
            pairs,
        });
    }
    groups.sort_by(|x, y| departure(y.ratio).total_cmp(&departure(x.ratio)));
    groups
}

/// Why B differs from A, most telling first: another numbering, levels that moved,
/// group pairs that moved at a level that did not, another structure. None when B is
/// the same.
fn difference_reasons(
    domains: &Domains,
    labels: &[String],
    b: &LatencyMatrix,
    level_diffs: &[LevelDiff],
    groups: &[BlockDiff],
    tol: Tolerance,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let (numbering, structure) = structure_reasons(domains, labels, b);
    reasons.extend(numbering);
    for ld in level_diffs.iter().filter(|l| l.differs) {
        reasons.push(format!(
            "level {}: {} in A, {} in B ({:.2}x), beyond the {:.0}% tolerance",
            ld.level,
            ns(ld.a_ns),
            ns(ld.b_ns),
            ld.ratio.unwrap_or(f64::NAN),
            tol.level * 100.0
        ));
    }
    // Blocks at a level whose median already moved add nothing unless they are the
    // only ones; name at most a few, then count.
    let moved: Vec<&BlockDiff> = groups
        .iter()
        .filter(|g| !level_diffs.iter().any(|l| l.differs && l.level == g.level))
        .collect();
    for g in moved.iter().take(4) {
        reasons.push(block_reason(g));
    }
    if moved.len() > 4 {
        reasons.push(format!(
            "{} more group pairs moved beyond the tolerance",
            moved.len() - 4
        ));
    }
    reasons.extend(structure);
    reasons
}

/// Why B is the same as A: the largest level move within the tolerance, and the cells
/// beyond the cell tolerance called noise when no level or block moved with them.
fn sameness_reasons(
    level_diffs: &[LevelDiff],
    cells_differing: usize,
    compared: usize,
    tol: Tolerance,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let worst = level_diffs
        .iter()
        .filter(|l| l.ratio.is_some())
        .max_by(|x, y| {
            departure(x.ratio.unwrap_or(1.0)).total_cmp(&departure(y.ratio.unwrap_or(1.0)))
        });
    let mut s = format!(
        "every level and group pair within {:.0}%",
        tol.level * 100.0
    );
    if let Some(w) = worst {
        s.push_str(&format!(
            " (largest: level {} {:.2}x)",
            w.level,
            w.ratio.unwrap_or(1.0)
        ));
    }
    reasons.push(s);
    if cells_differing > 0 {
        reasons.push(format!(
            "{cells_differing} of {compared} cells differ by more than {:.0}%, scattered (no level or group pair moved as a whole): noise",
            tol.cell * 100.0
        ));
    }
    reasons
}

/// Where B's own latency levels group the CPUs differently from the reference: SMT
/// siblings that differ mean another CPU numbering (Windows numbers siblings
/// adjacently, Linux N apart), so cells are not comparable one for one; other levels
/// that differ are a different structure. Returns (numbering, structure) reasons.
fn structure_reasons(
    domains: &Domains,
    labels: &[String],
    b: &LatencyMatrix,
) -> (Vec<String>, Vec<String>) {
    let Ok(bd) = Domains::from_matrix(b) else {
        return (Vec::new(), Vec::new());
    };
    let (mut numbering, mut structure) = (Vec::new(), Vec::new());
    for (l, level) in domains.levels().iter().enumerate() {
        if level.kind == LevelKind::Machine || bd.levels().iter().any(|x| x.groups == level.groups)
        {
            continue;
        }
        let first = |ls: &[Level]| -> String {
            ls.iter()
                .find(|x| x.kind == level.kind)
                .and_then(|x| x.groups.first())
                .map(|g| g.to_string())
                .unwrap_or_else(|| "none".into())
        };
        // Most of B's SMT groups unknown to A: another numbering, not a changed pair.
        let renumbered = level.kind == LevelKind::Smt
            && bd
                .levels()
                .iter()
                .find(|x| x.kind == LevelKind::Smt)
                .is_some_and(|x| {
                    let foreign = x
                        .groups
                        .iter()
                        .filter(|g| !level.groups.contains(g))
                        .count();
                    foreign * 2 > x.groups.len()
                });
        if renumbered {
            numbering.push(format!(
                "the CPUs are numbered differently: SMT siblings are {} in A but {} in B, so cells do not compare one for one",
                first(domains.levels()),
                first(bd.levels()),
            ));
        } else {
            structure.push(format!(
                "level {}: A's groups ({} groups, e.g. {}) are not a level of B's own latencies",
                labels[l],
                level.groups.len(),
                level
                    .groups
                    .first()
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
            ));
        }
    }
    (numbering, structure)
}

fn block_reason(g: &BlockDiff) -> String {
    format!(
        "level {}: the {} pairs between {} and {} cost {:.1} ns in A, {:.1} ns in B ({:.2}x)",
        g.level, g.pairs, g.groups[0], g.groups[1], g.a_ns, g.b_ns, g.ratio
    )
}

fn ns(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} ns"))
        .unwrap_or_else(|| "no figure".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two CCDs of four cores, SMT siblings i and i+8: 8 ns siblings, 20 ns inside a
    /// CCD, 80 ns across.
    fn two_ccd() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            let (ci, cj) = (i % 8, j % 8);
            if ci == cj {
                8.0
            } else if ci / 4 == cj / 4 {
                20.0 + ((i + j) % 3) as f64 * 0.5
            } else {
                80.0 + ((i * j) % 5) as f64
            }
        })
    }

    #[test]
    fn huge_finite_cells_do_not_overflow_the_medians() {
        let m = LatencyMatrix::from_fn((0..8).collect(), |_, _| 1e308);
        let d = diff(&m, "a", &m, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Same, "{d:#?}");
        assert!(
            d.levels
                .iter()
                .all(|l| l.a_ns == Some(1e308) && l.ratio == Some(1.0)),
            "{d:#?}"
        );
        let hosts: Vec<(String, LatencyMatrix)> =
            (0..3).map(|i| (format!("h{i}"), m.clone())).collect();
        let f = fleet(&hosts, Tolerance::default()).unwrap();
        assert_eq!(f.outliers, 0, "{f:#?}");
        assert_eq!(crate::stats::median(&[f64::MAX, f64::MAX]), Some(f64::MAX));
    }

    #[test]
    fn a_matrix_is_the_same_as_itself() {
        let m = two_ccd();
        let d = diff(&m, "a", &m, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Same, "{d:#?}");
        assert!(d.cells.is_empty());
        assert_eq!(d.cells_compared, 120);
        let names: Vec<&str> = d.levels.iter().map(|l| l.level.as_str()).collect();
        assert_eq!(names, ["smt", "llc", "machine"]);
        assert!(d.levels.iter().all(|l| l.ratio == Some(1.0)));
    }

    #[test]
    fn the_cross_ccd_level_slowed_differs_and_is_named() {
        let a = two_ccd();
        let mut b = a.clone();
        for i in 0..16 {
            for j in 0..16 {
                if i < j && (i % 8) / 4 != (j % 8) / 4 {
                    b.latency_ns
                        .set(i, j, b.latency_ns.get(i, j).map(|v| v * 2.0));
                }
            }
        }
        let d = diff(&a, "a", &b, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Differs);
        assert!(d.reason.starts_with("level machine:"), "{}", d.reason);
        let machine = d.levels.iter().find(|l| l.level == "machine").unwrap();
        assert!(machine.differs);
        assert_eq!(machine.cells_differing, 64);
        assert!(!d.levels[0].differs && !d.levels[1].differs);
    }

    #[test]
    fn siblings_that_stop_being_siblings_change_the_structure() {
        let a = two_ccd();
        let mut b = a.clone();
        b.latency_ns.set(3, 11, Some(30.0));
        let d = diff(&a, "a", &b, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Differs, "{d:#?}");
        assert!(d.groups.is_empty());
        assert_eq!(
            d.reason,
            "level smt: A's groups (8 groups, e.g. 0,8) are not a level of B's own latencies"
        );
        assert_eq!(d.cells.len(), 1);
        assert_eq!((d.cells[0].a, d.cells[0].b), (3, 11));
    }

    #[test]
    fn one_slow_pair_of_cores_is_noise() {
        let a = two_ccd();
        let mut b = a.clone();
        for (i, j) in [(1, 2), (1, 10), (9, 2), (9, 10)] {
            b.latency_ns.set(i, j, Some(28.0));
        }
        let d = diff(&a, "a", &b, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Same, "{d:#?}");
        assert_eq!(d.cells.len(), 4);
        assert!(
            d.reasons[1].starts_with("4 of 120 cells differ"),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn another_numbering_is_said_first() {
        let a = two_ccd();
        // The same machine numbered with siblings adjacent: CPU k of A is CPU p(k) of B.
        let p = |k: usize| (k % 8) * 2 + k / 8;
        let mut cpus_of_b = [0usize; 16];
        for k in 0..16 {
            cpus_of_b[p(k)] = k;
        }
        let b = LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            a.at(cpus_of_b[i], cpus_of_b[j]).unwrap()
        });
        let d = diff(&a, "a", &b, "b", Tolerance::default()).unwrap();
        assert_eq!(d.verdict, Verdict::Differs);
        assert_eq!(
            d.reason,
            "the CPUs are numbered differently: SMT siblings are 0,8 in A but 0-1 in B, so cells do not compare one for one"
        );
    }

    #[test]
    fn layouts_must_match() {
        let a = two_ccd();
        let b = LatencyMatrix::from_fn((0..8).collect(), |_, _| 10.0);
        let e = diff(&a, "a.csv", &b, "b.csv", Tolerance::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "b.csv covers CPUs 0-7 but a.csv covers 0-15: only machines of the same layout can be compared"
        );
    }

    #[test]
    fn labels_repeat_with_a_number() {
        let m = LatencyMatrix::nested(8, &[10.0, 40.0, 160.0]);
        let d = Domains::from_matrix(&m).unwrap();
        let labels = level_labels(d.levels());
        assert_eq!(labels.len(), d.levels().len());
        let mut sorted = labels.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn a_fleet_needs_three() {
        let m = two_ccd();
        let e = fleet(
            &[("a".into(), m.clone()), ("b".into(), m)],
            Tolerance::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 3"), "{e}");
    }
}
