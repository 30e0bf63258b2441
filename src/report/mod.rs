//! `pinnerd report`'s page: the machine's facts, its topology drawn as nested boxes with
//! the latency measured inside each, the heatmap in CPU-number and in domain order,
//! autopilot against planned CPUs, the measured effect and the measurement's quality.
//!
//! [`Report`] holds the facts (it is `report.json`); [`html`] (`page`) draws them as one
//! self-contained page: inline SVG (the heatmaps of `matrix::render`, their cells an
//! embedded image) and CSS, no script, nothing fetched, readable printed and on a phone.
//!
//! Must not touch: the OS, measurement or placement (`report_facts` gathers the facts).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::domains::{Domains, LevelKind};
use crate::matrix::{KeptCells, LatencyMatrix};

mod page;
pub use page::{esc, html};

/// Everything the page shows, in the page's order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `pinnerd 0.1.0`.
    pub generated_by: String,
    /// Where the matrix came from, in words.
    pub source: String,
    /// False when the page is drawn from another machine's matrix alone.
    pub this_machine: bool,
    pub machine: Machine,
    /// The nested boxes, the machine outermost.
    pub topology: TopoBox,
    /// Where the boxes come from: `sysfs` or `matrix`.
    pub topology_from: String,
    /// The measured latency domains, finest first.
    pub domains: Vec<DomainLevel>,
    /// The level whose groups colour the CPUs, and each CPU's group there.
    pub colour_level: Option<String>,
    pub cpu_group: BTreeMap<u32, usize>,
    /// CPU ids in number order and in domain order (the heatmaps' axes).
    pub cpu_order: Vec<u32>,
    pub domain_order: Vec<u32>,
    pub plans: Vec<PlanRow>,
    /// `pinnerd compare`'s JSON object, with `--compare`.
    pub effect: Option<crate::effect::EffectJson>,
    pub quality: Quality,
    /// The matrix is unstable (its repeats disagreed): this line, exactly, and the
    /// plans are the topology's, with no gain shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_off: Option<String>,
    /// The running daemon's containers, on the page of this machine only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonFacts>,
}

/// What the running daemon says of containers: whether it is registered with a
/// container runtime, and one line per container a rule names (as the reader of the
/// report may read them: the names are root's).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DaemonFacts {
    /// `registered with containerd 1.7.24`, `not connected (…)`; "" when NRI is off.
    pub nri: String,
    /// The `Containers` property's lines.
    pub containers: Vec<String>,
    /// Why the daemon could not be asked (not running, another bus).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The machine section.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub model: Option<String>,
    pub fingerprint: Option<String>,
    pub kernel: Option<String>,
    /// `on (control: on)`, `no SMT threads`, or from the matrix.
    pub smt: String,
    pub cpus: usize,
    pub online: Option<String>,
    pub nodes: Vec<NodeFacts>,
    /// `P 0-15 · E 16-23`, when the cores are of two kinds.
    pub core_kinds: Option<String>,
    pub x3d_mode: Option<String>,
    pub sched_ext: Option<String>,
    /// `guest of kvm`, `guest (hypervisor)`, or `None` on bare metal.
    pub virtualisation: Option<String>,
    /// Steal seen while the report was made, and steal warnings of the measurement.
    pub steal: Vec<String>,
    /// What only the boot gives CPUs (`nohz_full`, `rcu_nocbs`), on this machine only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// The CPUs' resume-latency limits and idle states, CPUs alike grouped (a CPU an
    /// `idle-limit-us` rule holds stands apart: `knobs::idle::grouped`).
    #[serde(default)]
    pub idle: Vec<String>,
}

/// One NUMA node: its CPUs and SLIT distances.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFacts {
    pub id: u32,
    pub cpus: CpuSet,
    pub distances: Vec<u32>,
}

/// A box of the topology drawing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoBox {
    /// `package 0`, `llc 3`, `core 5`, `CPU 12`.
    pub label: String,
    pub cpus: CpuSet,
    /// Median latency between CPUs first joined in this box (ns).
    pub latency_ns: Option<f64>,
    pub children: Vec<TopoBox>,
}

/// One measured domain level.
#[derive(Debug, Clone, Serialize)]
pub struct DomainLevel {
    pub name: String,
    pub latency_ns: Option<f64>,
    pub groups: Vec<CpuSet>,
}

/// One row of "where CPU numbers lie": a plan and autopilot CPUs 0..K−1.
#[derive(Debug, Clone, Serialize)]
pub struct PlanRow {
    pub k: usize,
    /// `compact` or `spread`.
    pub policy: String,
    /// `pinnerd plan --json`'s `cpus`, `worst_latency_ns`, `mean_latency_ns`.
    pub cpus: Vec<u32>,
    pub worst_latency_ns: Option<f64>,
    pub mean_latency_ns: Option<f64>,
    /// `pinnerd plan --json`'s `autopilot`: CPUs 0..K−1 and their cost.
    pub autopilot_cpus: Option<Vec<u32>>,
    pub autopilot_worst_ns: Option<f64>,
    pub autopilot_mean_ns: Option<f64>,
    /// Autopilot's worst pair over the plan's.
    pub ratio: Option<f64>,
    /// Why there is no plan for this K and policy.
    pub error: Option<String>,
}

impl PlanRow {
    /// No plan for `k` CPUs by `policy`, and why.
    pub fn failed(k: usize, policy: String, error: String) -> PlanRow {
        PlanRow {
            k,
            policy,
            cpus: Vec::new(),
            worst_latency_ns: None,
            mean_latency_ns: None,
            autopilot_cpus: None,
            autopilot_worst_ns: None,
            autopilot_mean_ns: None,
            ratio: None,
            error: Some(error),
        }
    }
}

/// A level's groups in words: the first `most` of them joined by ` | `, followed by
/// ` … (N groups)` when there are more.
pub fn groups_line(groups: &[CpuSet], most: usize) -> String {
    let shown: Vec<String> = groups.iter().take(most).map(|g| g.to_string()).collect();
    let mut line = shown.join(" | ");
    if groups.len() > most {
        let _ = write!(line, " … ({} groups)", groups.len());
    }
    line
}

/// Minimum, median and maximum of some per-pair figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            min: v[0],
            median: crate::stats::percentile_sorted(&v, 0.5),
            max: v[v.len() - 1],
        })
    }
}

/// The engine's figure for one pair against the plain ping-pong's minimum, interleaved.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    pub a: u32,
    pub b: u32,
    /// (engine, plain) one-way ns per round.
    pub rounds: Vec<(f64, f64)>,
    pub engine_min_ns: f64,
    pub plain_min_ns: f64,
    /// engine_min / plain_min.
    pub ratio: f64,
}

/// How far the matrix can be trusted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Quality {
    /// Why no matrix was measured or read (the page then gives no matrix figure);
    /// `None` when there is a matrix.
    pub not_measured: Option<String>,
    /// Pairs of the matrix and those with a figure; `None` when there is no matrix.
    pub pairs_total: Option<usize>,
    pub pairs_with_figure: Option<usize>,
    /// Batches kept per measured pair.
    pub samples_per_pair: Option<Spread>,
    /// (p90 − p10) / median of each measured pair's batches.
    pub batch_spread: Option<Spread>,
    /// Largest relative difference between a pair's passes (a matrix measured now).
    pub pass_disagreement: Option<Spread>,
    /// Pairs whose passes still disagreed beyond the tolerance.
    pub unstable_pairs: Option<usize>,
    pub kept: Option<KeptCells>,
    /// The matrix was imported (core-to-core-latency's CSV): how it was measured is
    /// not recorded.
    pub imported: bool,
    /// Pairs measured by sparse mode (the rest inferred), and the share.
    pub sparse_measured: Option<(usize, usize, f64)>,
    /// Domain findings: `kind: message`.
    pub findings: Vec<String>,
    /// Matrix warnings and mismatches with sysfs.
    pub warnings: Vec<String>,
    pub agreement: Option<Agreement>,
    /// Why there is no agreement figure although one was asked for.
    pub agreement_error: Option<String>,
}

/// The levels of `domains` coarsest first, without the machine, as (name, groups).
pub fn domain_levels(d: &Domains) -> Vec<(String, Vec<CpuSet>)> {
    d.levels()
        .iter()
        .rev()
        .filter(|l| l.kind != LevelKind::Machine)
        .map(|l| (l.kind.as_str().to_string(), l.groups.clone()))
        .collect()
}

/// Orders levels coarse to fine (fewest groups first), merges equal partitions
/// (`package = node`) and drops levels of one group.
pub fn tidy_levels(mut levels: Vec<(String, Vec<CpuSet>)>) -> Vec<(String, Vec<CpuSet>)> {
    for (_, g) in &mut levels {
        g.sort_by_key(|s| s.iter().next());
    }
    levels.sort_by_key(|(_, g)| g.len());
    let mut out: Vec<(String, Vec<CpuSet>)> = Vec::new();
    for (name, groups) in levels {
        if groups.len() < 2 {
            continue;
        }
        match out.iter_mut().find(|(_, g)| *g == groups) {
            Some((n, _)) => {
                if !n.split(" = ").any(|x| x == name) {
                    n.push_str(" = ");
                    n.push_str(&name);
                }
            }
            None => out.push((name, groups)),
        }
    }
    out
}

/// Findings for boxes whose CPUs talk no faster inside than the box that holds them:
/// the inner boundary is then no latency boundary, which the page would otherwise show
/// without a word (a group at 200.5 ns inside a machine at 197.2 ns). `numa_home`:
/// whether the domains already found the NUMA-home artefact, its likeliest cause.
pub fn inverted_boxes(root: &TopoBox, numa_home: bool) -> Vec<String> {
    fn walk(b: &TopoBox, numa_home: bool, out: &mut Vec<String>) {
        for c in &b.children {
            if let (Some(inner), Some(outer)) = (c.latency_ns, b.latency_ns) {
                if inner >= outer {
                    out.push(format!(
                        "inner level slower: {} (CPUs {}) is {inner:.1} ns inside, no nearer \
                         than the {outer:.1} ns of the {} box that holds it. Its boundary is no latency \
                         boundary here: its CPUs reach each other through the same fabric \
                         as the rest ({}), so keeping threads inside it gains nothing",
                        c.label,
                        c.cpus,
                        b.label,
                        if numa_home {
                            "probably the NUMA-home artefact found above: the measured \
                             cache line lived in the other socket's memory"
                        } else {
                            "on a multi-die part, crossing dies inside it costs what \
                             crossing the outer level does"
                        }
                    ));
                }
            }
            walk(c, numa_home, out);
        }
    }
    let mut out = Vec::new();
    walk(root, numa_home, &mut out);
    out
}

/// Median of the cells between CPUs of `cpus` that lie in different `parts`.
fn joined_latency(
    m: Option<&LatencyMatrix>,
    cpus: &[u32],
    part: &BTreeMap<u32, usize>,
) -> Option<f64> {
    let m = m?;
    let idx: Vec<(usize, usize)> = cpus
        .iter()
        .filter_map(|&c| Some((m.index_of(c)?, *part.get(&c)?)))
        .collect();
    let mut v = Vec::new();
    for (x, &(i, pi)) in idx.iter().enumerate() {
        for &(j, pj) in &idx[..x] {
            if pi != pj {
                if let Some(ns) = m.at(i, j) {
                    v.push(ns);
                }
            }
        }
    }
    crate::stats::median(&v)
}

/// The nested boxes for `cpus` under `levels` (coarsest first, as [`tidy_levels`]
/// gives), CPUs as the leaves, each box labelled with the latency first paid in it.
pub fn topo_boxes(
    label: String,
    cpus: &CpuSet,
    levels: &[(String, Vec<CpuSet>)],
    m: Option<&LatencyMatrix>,
) -> TopoBox {
    // The first level that splits these CPUs.
    let mut rest = levels;
    let mut label = label;
    let children: Vec<TopoBox> = loop {
        match rest.split_first() {
            None => {
                break cpus
                    .iter()
                    .map(|c| TopoBox {
                        label: format!("CPU {c}"),
                        cpus: std::iter::once(c).collect(),
                        latency_ns: None,
                        children: Vec::new(),
                    })
                    .collect()
            }
            Some(((name, groups), tail)) => {
                let inside: Vec<(usize, CpuSet)> = groups
                    .iter()
                    .enumerate()
                    .map(|(i, g)| (i, g.intersection(cpus)))
                    .filter(|(_, g)| !g.is_empty())
                    .collect();
                rest = tail;
                if inside.len() == 1 {
                    // This level is the box itself: name it alongside.
                    let _ = write!(label, " · {name} {}", inside[0].0);
                    continue;
                }
                break inside
                    .into_iter()
                    .map(|(i, g)| topo_boxes(format!("{name} {i}"), &g, tail, m))
                    .collect();
            }
        }
    };
    let mut part = BTreeMap::new();
    for (i, ch) in children.iter().enumerate() {
        for c in ch.cpus.iter() {
            part.insert(c, i);
        }
    }
    let ids: Vec<u32> = cpus.iter().collect();
    TopoBox {
        label,
        cpus: cpus.clone(),
        latency_ns: joined_latency(m, &ids, &part),
        children,
    }
}

/// The level that colours the CPUs: the finest level above SMT with several groups,
/// else the SMT level when it pairs CPUs; with each CPU's group there.
pub fn colour_groups(d: &Domains) -> (Option<String>, BTreeMap<u32, usize>) {
    let levels = d.levels();
    let pick = levels
        .iter()
        .position(|l| !matches!(l.kind, LevelKind::Smt | LevelKind::Machine) && l.groups.len() > 1)
        .or_else(|| {
            levels.iter().position(|l| {
                l.kind != LevelKind::Machine
                    && l.groups.len() > 1
                    && l.groups.iter().any(|g| g.len() > 1)
            })
        });
    let Some(l) = pick else {
        return (None, BTreeMap::new());
    };
    let map = d
        .cpus()
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, d.group_of(l, i)))
        .collect();
    (Some(levels[l].name()), map)
}

/// CPU ids sorted by their group at every level, coarsest first: how the machine is.
pub fn domain_order(d: &Domains) -> Vec<u32> {
    let n = d.levels().len();
    let mut idx: Vec<usize> = (0..d.cpus().len()).collect();
    idx.sort_by_key(|&i| {
        let key: Vec<usize> = (0..n).rev().map(|l| d.group_of(l, i)).collect();
        (key, d.cpus()[i])
    });
    idx.into_iter().map(|i| d.cpus()[i]).collect()
}

/// The matrix with its rows and columns in `order` (CPUs it lacks are left out).
pub fn reordered(m: &LatencyMatrix, order: &[u32]) -> LatencyMatrix {
    let idx: Vec<usize> = order.iter().filter_map(|&c| m.index_of(c)).collect();
    let mut cells = crate::matrix::Cells::new(idx.len());
    for (a, &i) in idx.iter().enumerate() {
        for (b, &j) in idx.iter().enumerate().skip(a + 1) {
            cells.set(a, b, m.at(i, j));
        }
    }
    LatencyMatrix::new(idx.iter().map(|&i| m.cpus[i]).collect(), cells)
}

#[cfg(test)]
mod tests {
    use super::*;
    use page::boundaries;

    use crate::cpuset::set;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn levels_are_ordered_merged_and_single_groups_dropped() {
        let levels = tidy_levels(vec![
            ("smt".into(), vec![set("0,2"), set("1,3")]),
            ("package".into(), vec![set("0-3")]),
            ("llc".into(), vec![set("1,3"), set("0,2")]),
        ]);
        assert_eq!(
            levels,
            vec![("smt = llc".to_string(), vec![set("0,2"), set("1,3")])]
        );
    }

    #[test]
    fn a_groups_line_names_the_first_groups_and_counts_them_all() {
        let groups = vec![set("0-1"), set("2-3"), set("4-5")];
        assert_eq!(groups_line(&groups, 3), "0-1 | 2-3 | 4-5");
        assert_eq!(groups_line(&groups, 2), "0-1 | 2-3 … (3 groups)");
        assert_eq!(groups_line(&[], 2), "");
    }

    #[test]
    fn boxes_nest_and_carry_the_latency_first_paid_inside() {
        // Two LLCs of two cores; 10 ns inside a core, 30 inside an LLC, 100 across.
        let m = LatencyMatrix::nested(8, &[10.0, 30.0, 100.0]);
        let levels = tidy_levels(vec![
            ("llc".into(), vec![set("0-3"), set("4-7")]),
            (
                "core".into(),
                vec![set("0-1"), set("2-3"), set("4-5"), set("6-7")],
            ),
        ]);
        let b = topo_boxes("machine".into(), &set("0-7"), &levels, Some(&m));
        assert_eq!(b.latency_ns, Some(100.0));
        assert_eq!(b.children.len(), 2);
        assert_eq!(b.children[1].label, "llc 1");
        assert_eq!(b.children[1].latency_ns, Some(30.0));
        assert_eq!(b.children[1].children[0].label, "core 2");
        assert_eq!(b.children[1].children[0].latency_ns, Some(10.0));
        assert_eq!(b.children[1].children[0].children[1].label, "CPU 5");
        // A level that does not split a box names it instead of nesting.
        let one = topo_boxes("machine".into(), &set("0-1"), &levels, Some(&m));
        assert_eq!(one.label, "machine · llc 0 · core 0");
        assert_eq!(one.children.len(), 2);
    }

    #[test]
    fn domain_order_groups_what_the_numbering_interleaves() {
        // CPUs 0,2,4,6 share one LLC and 1,3,5,7 the other (numbering alternates).
        let m = LatencyMatrix::interleaved(8, 20.0, 90.0);
        let d = Domains::from_matrix(&m).unwrap();
        assert_eq!(domain_order(&d), vec![0, 2, 4, 6, 1, 3, 5, 7]);
        let (level, groups) = colour_groups(&d);
        assert!(level.is_some());
        assert_eq!(groups[&0], groups[&6]);
        assert_ne!(groups[&0], groups[&1]);
        let levels: Vec<(String, Vec<CpuSet>)> =
            vec![("llc".into(), vec![set("0,2,4,6"), set("1,3,5,7")])];
        assert_eq!(boundaries(&domain_order(&d), &levels), vec![(4, 1)]);
        let r = reordered(&m, &domain_order(&d));
        assert_eq!(r.cpus, vec![0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(r.between(0, 2), Some(20.0));
        assert_eq!(r.at(0, 4), Some(90.0));
    }
}
