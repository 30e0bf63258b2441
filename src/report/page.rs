//! The page itself: [`html`] draws a [`Report`] as one self-contained HTML page (inline
//! SVG and CSS, no script, nothing fetched), and [`esc`] makes text safe inside it.
//! The page's markup is the askama template `page.html` beside this file, compiled in
//! and escaped by construction ([`PageText`], the escaping of [`esc`]); this file
//! turns the facts into the words and figures the template shows, and draws the
//! heatmaps and the nested boxes (SVG and `div`s, escaped with [`esc`]).
//! The heatmaps' cells are an image each (a pixel per cell, a PNG in a `data:` URI,
//! the only images the page's policy allows): a page of 1,024 CPUs stays a few MB
//! and opens at once, where a rectangle per cell made it 122 MB. Past 1,024 CPUs a
//! pixel is a block of CPUs (its slowest pair), so the images stay within 1 Mi pixels
//! each whatever the figures and CPU count.
//!
//! Must not touch: the facts (the parent module gathers and shapes them).

use std::fmt::Write as _;

use askama::Template;

use super::{groups_line, reordered, Report, Spread, TopoBox};
use crate::cpuset::CpuSet;
use crate::effect::{EffectJson, Ratios};
use crate::matrix::{render, LatencyMatrix};

/// Text safe inside HTML elements and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let _ = write_escaped(&mut out, s);
    out
}

/// Writes `s` with `&`, `<`, `>`, `"` and `'` as entities.
fn write_escaped(mut out: impl std::fmt::Write, s: &str) -> std::fmt::Result {
    let mut rest = s;
    while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
        out.write_str(&rest[..at])?;
        out.write_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            _ => "&#39;",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)
}

/// The template's escaper (`askama.toml`): every value the page template shows goes
/// through [`esc`]'s escaping unless the template marks it `safe` (the CSS, and the
/// heatmaps and boxes drawn here).
#[derive(Debug, Clone, Copy)]
pub struct PageText;

impl askama::filters::Escaper for PageText {
    fn write_escaped_str<W: std::fmt::Write>(&self, dest: W, string: &str) -> std::fmt::Result {
        write_escaped(dest, string)
    }
}

fn ns(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} ns"))
        .unwrap_or_else(|| "–".into())
}

fn ids(v: &[u32]) -> String {
    v.iter().copied().collect::<CpuSet>().to_string()
}

/// Background colours of the CPU groups: light enough for black text, distinct in
/// print; the group number is written too, for a grey printer.
const PALETTE: [&str; 12] = [
    "#9ecae9", "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#f1ce63", "#86bcb6", "#fabfd2",
    "#b6992d", "#d7b5a6", "#a0cbe8", "#bab0ac",
];

const CSS: &str = "
:root{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#111;background:#fff}
body{margin:0 auto;padding:0 12px 40px;max-width:1100px;line-height:1.4}
h1{font-size:1.5rem;margin:18px 0 4px}h2{font-size:1.2rem;margin:28px 0 8px;border-bottom:1px solid #ccc}
p.note{color:#444;font-size:.9rem;margin:4px 0;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:.88rem;margin:6px 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
td{overflow-wrap:break-word}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.wide{overflow-x:auto;max-width:100%}
.box{border:1px solid #777;border-radius:4px;padding:3px;margin:3px;display:flex;flex-wrap:wrap;align-items:flex-start;background:#fafafa}
.box>.lbl{flex-basis:100%;font-size:.75rem;color:#333;margin:0 2px 2px}
.box .box{background:#fff}
.box.leafs{display:block;padding:1px 2px;margin:2px}.box.leafs>.lbl{font-size:.62rem;margin:0 1px;white-space:nowrap}
.box.leafs>.cpu{display:inline-block}
.cpu{border:1px solid #555;border-radius:3px;margin:2px;padding:1px 4px;font-size:.72rem;min-width:2.6em;text-align:center}
.cpu small{display:block;color:#333;font-size:.62rem}
figure{margin:10px 0}figure svg{max-width:100%;height:auto;display:block}
figcaption{font-size:.88rem;color:#333}
ul{margin:4px 0;padding-left:20px}li{font-size:.9rem}
@media print{body{max-width:none}h2{break-after:avoid}figure,table,.box{break-inside:avoid}.wide{overflow:visible}}
@media (max-width:600px){th,td{padding:2px 3px;font-size:.78rem}}
";

/// The heatmap of `m` in `order`, with a transparent band per row naming its CPU (per
/// row of blocks naming their CPUs, past `render::EMBEDDED_PIXELS_MAX` CPUs), and
/// with `lines` (positions in `order` where a level's groups change, with a width)
/// drawn over it.
fn heatmap(
    m: &LatencyMatrix,
    order: &[u32],
    title: &str,
    lines: &[(usize, u32)],
    id: &str,
) -> String {
    let mo = reordered(m, order);
    let mut svg = match render::svg_heatmap_embedded(&mo, title) {
        Ok(s) => s,
        Err(e) => return format!("<p class=\"note\">{}</p>", esc(&e.to_string())),
    };
    let g = render::embedded_geometry(mo.len());
    let side = g.side();
    let mut overlay = format!("<g class=\"rows\" id=\"{id}-rows\">");
    for (p, cpus) in mo.cpus.chunks(g.block).enumerate() {
        let y = g.top + p as i32 * g.cell;
        let _ = match cpus {
            [c] => write!(
                overlay,
                "<rect data-cpu=\"{c}\" x=\"{}\" y=\"{y}\" width=\"{side}\" height=\"{}\" fill=\"none\" pointer-events=\"all\"><title>CPU {c}</title></rect>",
                g.left, g.cell
            ),
            // A row of blocks: every CPU of it named, in the heatmap's order.
            _ => {
                let ids: Vec<String> = cpus.iter().map(u32::to_string).collect();
                write!(
                    overlay,
                    "<rect data-cpus=\"{}\" x=\"{}\" y=\"{y}\" width=\"{side}\" height=\"{}\" fill=\"none\" pointer-events=\"all\"><title>CPUs {}</title></rect>",
                    ids.join(","),
                    g.left,
                    g.cell,
                    ids.join(", ")
                )
            }
        };
    }
    overlay.push_str("</g><g class=\"bounds\">");
    let lines = if g.block > 1 {
        spaced(lines, LINE_GAP_BLOCKS * g.block)
    } else {
        lines.to_vec()
    };
    for (p, w) in lines {
        let at = g.offset(p);
        let _ = write!(
            overlay,
            "<line x1=\"{x0}\" y1=\"{y}\" x2=\"{x1}\" y2=\"{y}\" stroke=\"#e8175d\" stroke-width=\"{w}\"/><line x1=\"{x}\" y1=\"{y0}\" x2=\"{x}\" y2=\"{y1}\" stroke=\"#e8175d\" stroke-width=\"{w}\"/>",
            x0 = g.left,
            x1 = g.left + side,
            y = g.top + at,
            x = g.left + at,
            y0 = g.top,
            y1 = g.top + side,
        );
    }
    overlay.push_str("</g>");
    match svg.rfind("</svg>") {
        Some(at) => svg.insert_str(at, &overlay),
        None => svg.push_str(&overlay),
    }
    // Its attributes that repeat the defaults go (the cells are one image, but the
    // labels and the rows' bands are many).
    svg.replace(" opacity=\"1\"", "")
        .replace(" stroke=\"none\"", "")
        .replacen("<svg ", &format!("<svg id=\"{id}\" role=\"img\" "), 1)
}

/// The fewest blocks between two level boundaries drawn on a heatmap of blocks (16 px).
const LINE_GAP_BLOCKS: usize = 8;

/// `lines` without the finer levels whose boundaries would stand closer than `gap`
/// CPUs to one another or to a coarser level's: they would cover the cells they bound
/// (LLCs of 16 CPUs are 4 pixels on a 4,096-CPU heatmap). Each level (width) is kept
/// or left out whole, the coarsest first.
fn spaced(lines: &[(usize, u32)], gap: usize) -> Vec<(usize, u32)> {
    let mut widths: Vec<u32> = lines.iter().map(|&(_, w)| w).collect();
    widths.sort_unstable();
    widths.dedup();
    let apart = |w: u32| {
        let mut at: Vec<usize> = lines.iter().filter(|l| l.1 >= w).map(|l| l.0).collect();
        at.sort_unstable();
        at.first().is_none_or(|&p| p >= gap) && at.windows(2).all(|x| x[1] - x[0] >= gap)
    };
    match widths.into_iter().find(|&w| apart(w)) {
        Some(finest) => lines.iter().copied().filter(|l| l.1 >= finest).collect(),
        None => Vec::new(),
    }
}

/// Positions in `order` where a level's group changes, each at its coarsest level,
/// with a line width (coarser: wider). SMT boundaries are left out.
pub(super) fn boundaries(order: &[u32], levels: &[(String, Vec<CpuSet>)]) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = Vec::new();
    let n = levels.len();
    for (rank, (name, groups)) in levels.iter().enumerate() {
        if name == "smt" {
            continue;
        }
        let group_of = |c: u32| groups.iter().position(|g| g.contains(c));
        let width = (n - rank) as u32;
        for p in 1..order.len() {
            if group_of(order[p - 1]) != group_of(order[p]) && !out.iter().any(|&(q, _)| q == p) {
                out.push((p, width));
            }
        }
    }
    out
}

fn box_html(b: &TopoBox, r: &Report, out: &mut String) {
    if b.children.is_empty() {
        let cpu = b.cpus.iter().next().unwrap_or_default();
        let group = r.cpu_group.get(&cpu);
        let bg = group.map(|g| PALETTE[g % PALETTE.len()]).unwrap_or("#eee");
        let _ = write!(
            out,
            "<div class=\"cpu\" data-cpu=\"{cpu}\" style=\"background:{bg}\">{cpu}{}</div>",
            group
                .map(|g| format!("<small>d{g}</small>"))
                .unwrap_or_default()
        );
        return;
    }
    if b.children.iter().all(|c| c.children.is_empty()) {
        // A core (or the smallest box): its CPUs side by side under a short label.
        let _ = write!(
            out,
            "<div class=\"box leafs\" title=\"{} · CPUs {}\"><div class=\"lbl\">{}{}</div>",
            esc(&b.label),
            b.cpus,
            esc(&b.label),
            b.latency_ns
                .map(|v| format!(" · <b>{v:.1}</b>"))
                .unwrap_or_default()
        );
    } else {
        let _ = write!(
            out,
            "<div class=\"box\"><div class=\"lbl\"><b>{}</b> · CPUs {}{}</div>",
            esc(&b.label),
            b.cpus,
            b.latency_ns
                .map(|v| format!(" · <b>{v:.1} ns</b> inside"))
                .unwrap_or_default()
        );
    }
    for c in &b.children {
        box_html(c, r, out);
    }
    out.push_str("</div>");
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// The page's template and what it shows, in the page's order.
#[derive(Template)]
#[template(path = "page.html")]
struct Page<'a> {
    r: &'a Report,
    title: String,
    css: &'static str,
    /// The machine section's rows.
    machine: Vec<(&'static str, String)>,
    colour_level: &'a str,
    /// The nested boxes, drawn by [`box_html`].
    boxes: String,
    /// Measured levels: name, latency, groups.
    domains: Vec<(&'a str, String, String)>,
    /// The heatmaps in CPU-number and in domain order.
    heatmaps: Option<(String, String)>,
    plans: Vec<PlanLine<'a>>,
    effect: Option<EffectLines>,
    /// The measurement-quality rows.
    quality: Vec<(String, String)>,
    findings: Vec<&'a str>,
    /// The daemon's containers (this machine only): its NRI line, the lines.
    containers: Option<(String, Vec<&'a str>)>,
}

/// One row of "where CPU numbers lie", its figures in words.
struct PlanLine<'a> {
    k: usize,
    policy: &'a str,
    error: Option<&'a str>,
    /// The figures as `pinnerd plan --json` gives them, for the row's data attributes.
    data_cpus: String,
    data_worst: String,
    data_mean: String,
    cpus: String,
    worst: String,
    mean: String,
    autopilot_cpus: String,
    autopilot_worst: String,
    autopilot_mean: String,
    ratio: String,
}

/// The measured effect's rows (variant, CPUs, worst pair, median, range, spread), the
/// three ratios of medians, runs, run length and notes, in words.
struct EffectLines {
    variants: Vec<(String, String, String, String, String, String)>,
    ratios: (String, String, String),
    runs: String,
    duration_ms: String,
    notes: Vec<String>,
}

/// The containers section: what the daemon says of NRI (or why it could not be asked),
/// and its lines.
fn container_lines(d: &super::DaemonFacts) -> (String, Vec<&str>) {
    let said = match (&d.error, d.nri.as_str()) {
        (Some(e), _) => format!("pinnerd could not be asked: {e}"),
        (None, "") => "NRI is off in pinnerd.toml: containers are placed after the fact, as the watcher finds their processes".into(),
        (None, nri) => format!("nri: {nri}"),
    };
    let lines = d.containers.iter().map(String::as_str).collect();
    (said, lines)
}

/// The page. `matrix` draws the heatmaps; without one they are said to be missing.
pub fn html(r: &Report, matrix: Option<&LatencyMatrix>) -> String {
    let title = r
        .machine
        .model
        .clone()
        .unwrap_or_else(|| format!("{} CPUs", r.machine.cpus));
    let mut boxes = String::new();
    box_html(&r.topology, r, &mut boxes);
    let page = Page {
        r,
        title,
        css: CSS,
        machine: machine_rows(r),
        colour_level: r.colour_level.as_deref().unwrap_or("domain"),
        boxes,
        domains: r
            .domains
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    ns(l.latency_ns),
                    groups_line(&l.groups, 16),
                )
            })
            .collect(),
        heatmaps: matrix.map(|m| heatmaps(r, m)),
        plans: r.plans.iter().map(plan_line).collect(),
        containers: r.daemon.as_ref().map(container_lines),
        effect: r.effect.as_ref().map(effect_lines),
        quality: quality_rows(r),
        findings: r
            .quality
            .findings
            .iter()
            .chain(&r.quality.warnings)
            .map(String::as_str)
            .collect(),
    };
    let mut s = page
        .render()
        .unwrap_or_else(|e| format!("<p>{}</p>", esc(&e.to_string())));
    s.push('\n');
    s
}

/// The machine section: one fact a row; a published matrix says nothing of the
/// machine's kernel, nodes or host.
fn machine_rows(r: &Report) -> Vec<(&'static str, String)> {
    let m = &r.machine;
    let unknown = |known: &'static str| {
        if r.this_machine {
            known
        } else {
            "not known (a matrix alone)"
        }
    };
    // An optional fact, or what its absence means.
    let fact = |v: &Option<String>, absent: &'static str| {
        v.clone().unwrap_or_else(|| unknown(absent).to_string())
    };
    let online = m
        .online
        .as_ref()
        .map(|o| format!(" (online {o})"))
        .unwrap_or_default();
    let nodes = if m.nodes.is_empty() {
        unknown("–").to_string()
    } else {
        m.nodes
            .iter()
            .map(|n| {
                let d: Vec<String> = n.distances.iter().map(|d| d.to_string()).collect();
                format!("node {}: CPUs {} (distances {})", n.id, n.cpus, d.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let steal = if m.steal.is_empty() {
        unknown("none seen").to_string()
    } else {
        m.steal.join("; ")
    };
    vec![
        ("model", m.model.clone().unwrap_or_else(|| "unknown".into())),
        ("fingerprint", fact(&m.fingerprint, "–")),
        ("kernel", fact(&m.kernel, "–")),
        ("CPUs", format!("{}{online}", m.cpus)),
        ("SMT", m.smt.clone()),
        ("NUMA nodes", nodes),
        ("core kinds", fact(&m.core_kinds, "one kind")),
        ("X3D mode", fact(&m.x3d_mode, "–")),
        ("sched_ext", fact(&m.sched_ext, "none running")),
        (
            "virtualisation",
            fact(&m.virtualisation, "none seen (bare metal)"),
        ),
        ("steal", steal),
        ("nohz_full, rcu_nocbs", fact(&m.boot, "–")),
        (
            "idle states",
            if m.idle.is_empty() {
                unknown("not read").to_string()
            } else {
                m.idle.join("; ")
            },
        ),
    ]
}

/// The heatmap in CPU-number order and in domain order, the level boundaries drawn.
fn heatmaps(r: &Report, mx: &LatencyMatrix) -> (String, String) {
    let levels: Vec<(String, Vec<CpuSet>)> = r
        .domains
        .iter()
        .rev()
        .filter(|l| l.name != "machine")
        .map(|l| {
            (
                l.name.split(" = ").next().unwrap_or("").to_string(),
                l.groups.clone(),
            )
        })
        .collect();
    (
        heatmap(
            mx,
            &r.cpu_order,
            "CPU-number order (ns)",
            &[],
            "heatmap-cpu-order",
        ),
        heatmap(
            mx,
            &r.domain_order,
            "domain order (ns)",
            &boundaries(&r.domain_order, &levels),
            "heatmap-domain-order",
        ),
    )
}

fn plan_line(p: &super::PlanRow) -> PlanLine<'_> {
    let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    PlanLine {
        k: p.k,
        policy: &p.policy,
        error: p.error.as_deref(),
        data_cpus: p
            .cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
        data_worst: num(p.worst_latency_ns),
        data_mean: num(p.mean_latency_ns),
        cpus: ids(&p.cpus),
        worst: ns(p.worst_latency_ns),
        mean: ns(p.mean_latency_ns),
        autopilot_cpus: p
            .autopilot_cpus
            .as_deref()
            .map(ids)
            .unwrap_or_else(|| "–".into()),
        autopilot_worst: ns(p.autopilot_worst_ns),
        autopilot_mean: ns(p.autopilot_mean_ns),
        ratio: p
            .ratio
            .map(|x| format!("{x:.2}×"))
            .unwrap_or_else(|| "–".into()),
    }
}

/// The measured effect from `pinnerd compare --json`'s object. A figure that is not a
/// finite number reads as JSON's `null` did: `NaN`, a ratio `–`.
fn effect_lines(e: &EffectJson) -> EffectLines {
    let finite = |x: f64| if x.is_finite() { x } else { f64::NAN };
    let variants = e
        .variants
        .iter()
        .map(|v| {
            let cpus = v.cpus.as_deref().map(ids).unwrap_or_else(|| "(any)".into());
            (
                v.name.clone(),
                cpus,
                ns(v.worst_latency_ns.filter(|x| x.is_finite())),
                format!("{:.3e}", finite(v.median)),
                format!("{:.3e} – {:.3e}", finite(v.min), finite(v.max)),
                format!("{:.0}%", 100.0 * finite(v.spread)),
            )
        })
        .collect();
    let ratio = |pick: fn(&Ratios) -> f64| {
        e.ratios
            .as_ref()
            .map(pick)
            .filter(|x| x.is_finite())
            .map(|x| format!("{x:.2}×"))
            .unwrap_or_else(|| "–".into())
    };
    EffectLines {
        variants,
        ratios: (
            ratio(|r| r.planned_vs_autopilot),
            ratio(|r| r.planned_vs_worst),
            ratio(|r| r.planned_vs_unpinned),
        ),
        runs: e.runs.to_string(),
        duration_ms: e.duration_ms.to_string(),
        notes: e.notes.clone(),
    }
}

/// The measurement-quality rows: the matrix's figures, or why there is none, and the
/// engine against the plain ping-pong.
fn quality_rows(r: &Report) -> Vec<(String, String)> {
    let q = &r.quality;
    let sp = |x: &Option<Spread>, pct: bool| match x {
        Some(x) if pct => format!(
            "median {:.1}%, min {:.1}%, max {:.1}%",
            100.0 * x.median,
            100.0 * x.min,
            100.0 * x.max
        ),
        Some(x) => format!("median {}, min {}, max {}", x.median, x.min, x.max),
        None => "not recorded".into(),
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
    if let Some(why) = &q.not_measured {
        // Nothing was measured or read: no figure, only why.
        row("latency matrix", format!("not measured: {why}"));
    } else {
        row(
            "pairs with a figure",
            format!(
                "{} of {}",
                q.pairs_with_figure.unwrap_or(0),
                q.pairs_total.unwrap_or(0)
            ),
        );
        row("samples (batches) per pair", sp(&q.samples_per_pair, false));
        row("batch spread (p90−p10)/median", sp(&q.batch_spread, true));
        row(
            "disagreement between passes",
            match (&q.pass_disagreement, q.unstable_pairs) {
                (Some(_), Some(u)) => format!(
                    "{}; {u} pair(s) still apart beyond the tolerance",
                    sp(&q.pass_disagreement, true)
                ),
                _ => "not measured now (stored or imported matrix)".into(),
            },
        );
        row(
            "kept cells",
            match &q.kept {
                Some(k) => format!(
                    "{} pair(s) kept from an earlier run (CPUs {}: {}), {} missing",
                    k.pairs, k.cpus, k.reason, k.missing
                ),
                None if q.imported => "not recorded (imported matrix)".into(),
                None => "none: every CPU measured in one run".into(),
            },
        );
        row(
            "share of pairs measured",
            match q.sparse_measured {
                Some((m, t, share)) => format!(
                    "{m} of {t} ({:.1}%), the rest inferred (sparse)",
                    100.0 * share
                ),
                None if q.imported => "not recorded (imported matrix)".into(),
                None => "all (full matrix)".into(),
            },
        );
    }
    match (&q.agreement, &q.agreement_error) {
        (Some(a), _) => {
            let rounds: Vec<String> = a
                .rounds
                .iter()
                .map(|(e, p)| format!("{e:.1}/{p:.1}"))
                .collect();
            row(
                &format!("CPUs {}↔{}: engine vs plain ping-pong minimum", a.a, a.b),
                format!(
                    "{:.1} ns vs {:.1} ns, ratio {} (rounds engine/plain: {})",
                    a.engine_min_ns,
                    a.plain_min_ns,
                    f3(a.ratio),
                    rounds.join(", ")
                ),
            );
        }
        (None, Some(e)) => row("engine vs plain ping-pong", e.clone()),
        (None, None) => {}
    }
    rows
}

#[cfg(test)]
mod tests;
