//! The page itself: [`html`] draws a [`Report`] as one self-contained HTML page (inline
//! SVG and CSS, no script, nothing fetched), and [`esc`] makes text safe inside it.
//! The heatmaps' cells are an image each (a pixel per cell, a PNG in a `data:` URI,
//! the only images the page's policy allows): a page of 1,024 CPUs stays a few MB
//! and opens at once, where a rectangle per cell made it 122 MB.
//!
//! Must not touch: the facts (the parent module gathers and shapes them).

use std::fmt::Write as _;

use super::{groups_line, reordered, Report, Spread, TopoBox};
use crate::cpuset::CpuSet;
use crate::matrix::{render, LatencyMatrix};

/// Text safe inside HTML elements and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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

/// The heatmap of `m` in `order`, with a transparent band per row naming its CPU, and
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
    let g = render::heatmap_geometry(mo.len());
    let n = mo.len() as i32;
    let mut overlay = format!("<g class=\"rows\" id=\"{id}-rows\">");
    for (i, c) in mo.cpus.iter().enumerate() {
        let _ = write!(
            overlay,
            "<rect data-cpu=\"{c}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" pointer-events=\"all\"><title>CPU {c}</title></rect>",
            g.left,
            g.top + i as i32 * g.cell,
            g.cell * n,
            g.cell
        );
    }
    overlay.push_str("</g><g class=\"bounds\">");
    for &(p, w) in lines {
        let at = p as i32 * g.cell;
        let _ = write!(
            overlay,
            "<line x1=\"{x0}\" y1=\"{y}\" x2=\"{x1}\" y2=\"{y}\" stroke=\"#e8175d\" stroke-width=\"{w}\"/><line x1=\"{x}\" y1=\"{y0}\" x2=\"{x}\" y2=\"{y1}\" stroke=\"#e8175d\" stroke-width=\"{w}\"/>",
            x0 = g.left,
            x1 = g.left + g.cell * n,
            y = g.top + at,
            x = g.left + at,
            y0 = g.top,
            y1 = g.top + g.cell * n,
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

fn row(out: &mut String, k: &str, v: &str) {
    let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// The page. `matrix` draws the heatmaps; without one they are said to be missing.
pub fn html(r: &Report, matrix: Option<&LatencyMatrix>) -> String {
    let mut s = String::with_capacity(1 << 16);
    let title = r
        .machine
        .model
        .clone()
        .unwrap_or_else(|| format!("{} CPUs", r.machine.cpus));
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
<title>pinnerd report: {}</title><style>{CSS}</style></head><body>\n",
        esc(&title)
    );
    let _ = writeln!(
        s,
        "<h1>{}</h1><p class=\"note\">From the {}. {} Made by {}.</p>",
        esc(&title),
        esc(&r.source),
        if r.this_machine {
            "This machine."
        } else {
            "Not this machine: the page is drawn from the matrix's own domains."
        },
        esc(&r.generated_by)
    );
    if let Some(line) = &r.latency_off {
        let _ = write!(
            s,
            "<p><b>{}</b>: the matrix's figures did not hold when measured again, so the plans below come from the sysfs topology and no gain is shown.</p>",
            esc(line)
        );
    }

    // 1. The machine.
    s.push_str("<section id=\"machine\"><h2>The machine</h2><table>");
    let m = &r.machine;
    // A published matrix says nothing of the machine's kernel, nodes or host.
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
    row(&mut s, "model", m.model.as_deref().unwrap_or("unknown"));
    row(&mut s, "fingerprint", &fact(&m.fingerprint, "–"));
    row(&mut s, "kernel", &fact(&m.kernel, "–"));
    row(
        &mut s,
        "CPUs",
        &format!(
            "{}{}",
            m.cpus,
            m.online
                .as_ref()
                .map(|o| format!(" (online {o})"))
                .unwrap_or_default()
        ),
    );
    row(&mut s, "SMT", &m.smt);
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
    row(&mut s, "NUMA nodes", &nodes);
    row(&mut s, "core kinds", &fact(&m.core_kinds, "one kind"));
    row(&mut s, "X3D mode", &fact(&m.x3d_mode, "–"));
    row(&mut s, "sched_ext", &fact(&m.sched_ext, "none running"));
    row(
        &mut s,
        "virtualisation",
        &fact(&m.virtualisation, "none seen (bare metal)"),
    );
    row(
        &mut s,
        "steal",
        &if m.steal.is_empty() {
            unknown("none seen").to_string()
        } else {
            m.steal.join("; ")
        },
    );
    s.push_str("</table></section>\n");

    // 2. The topology as nested boxes.
    let _ = write!(
        s,
        "<section id=\"topology\"><h2>Topology, with the latency measured inside each box</h2>\
<p class=\"note\">Boxes from {}; each box gives the median one-way latency between its CPUs that sit in different inner boxes (a core: between its SMT siblings). CPUs are coloured by their measured {} group (dN), so a CPU numbered into the wrong box stands out.</p><div class=\"wide\">",
        if r.topology_from == "sysfs" {
            "sysfs (package → node → LLC → core)"
        } else {
            "the matrix's own domains (no sysfs of that machine)"
        },
        esc(r.colour_level.as_deref().unwrap_or("domain"))
    );
    box_html(&r.topology, r, &mut s);
    s.push_str("</div>");
    if !r.domains.is_empty() {
        s.push_str("<table><tr><th>measured level</th><th>latency</th><th>groups</th></tr>");
        for l in &r.domains {
            let _ = write!(
                s,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                esc(&l.name),
                ns(l.latency_ns),
                esc(&groups_line(&l.groups, 16)),
            );
        }
        s.push_str("</table>");
    }
    s.push_str("</section>\n");

    // 3. The heatmaps.
    s.push_str("<section id=\"heatmaps\"><h2>The latency matrix, twice</h2>");
    match matrix {
        Some(mx) => {
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
            let _ = write!(
                s,
                "<figure>{}<figcaption>In CPU-number order: how CPUs are picked on autopilot (0, 1, 2 …). Dark is near.</figcaption></figure>",
                heatmap(mx, &r.cpu_order, "CPU-number order (ns)", &[], "heatmap-cpu-order")
            );
            let _ = write!(
                s,
                "<figure>{}<figcaption>In domain order, with the level boundaries drawn (thicker: coarser level): how the machine really is.</figcaption></figure>",
                heatmap(
                    mx,
                    &r.domain_order,
                    "domain order (ns)",
                    &boundaries(&r.domain_order, &levels),
                    "heatmap-domain-order"
                )
            );
        }
        None => s.push_str("<p class=\"note\">No latency matrix: nothing to draw.</p>"),
    }
    s.push_str("</section>\n");

    // 4. Where CPU numbers lie.
    s.push_str(
        "<section id=\"plans\"><h2>Where CPU numbers lie</h2>\
<p class=\"note\">Plans (as <code>pinnerd plan -k K --policy P</code> gives them) against autopilot CPUs 0..K−1. Ratio: autopilot's worst pair over the plan's, for compact plans only (a spread plan seeks distance: no ratio).</p>\
<div class=\"wide\"><table id=\"plan-rows\"><tr><th>K</th><th>policy</th><th>CPUs</th><th>worst</th><th>mean</th><th>autopilot CPUs</th><th>worst</th><th>mean</th><th>ratio</th></tr>",
    );
    for p in &r.plans {
        match &p.error {
            Some(e) => {
                let _ = write!(
                    s,
                    "<tr class=\"plan-missing\"><td class=\"n\">{}</td><td>{}</td><td colspan=\"7\">{}</td></tr>",
                    p.k,
                    esc(&p.policy),
                    esc(e)
                );
            }
            None => {
                let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
                let _ = write!(
                    s,
                    "<tr class=\"plan\" data-k=\"{}\" data-policy=\"{}\" data-cpus=\"{}\" data-worst-ns=\"{}\" data-mean-ns=\"{}\"><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    p.k,
                    esc(&p.policy),
                    p.cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
                    num(p.worst_latency_ns),
                    num(p.mean_latency_ns),
                    p.k,
                    esc(&p.policy),
                    ids(&p.cpus),
                    ns(p.worst_latency_ns),
                    ns(p.mean_latency_ns),
                    p.autopilot_cpus.as_deref().map(ids).unwrap_or_else(|| "–".into()),
                    ns(p.autopilot_worst_ns),
                    ns(p.autopilot_mean_ns),
                    p.ratio.map(|x| format!("{x:.2}×")).unwrap_or_else(|| "–".into()),
                );
            }
        }
    }
    s.push_str("</table></div></section>\n");

    // 5. The measured effect.
    if let Some(e) = &r.effect {
        s.push_str(
            "<section id=\"effect\"><h2>The measured effect</h2>\
<p class=\"note\">A ring of threads passing a token through one cache line (as <code>pinnerd compare</code>), interleaved runs; op/s, higher is better.</p>\
<div class=\"wide\"><table><tr><th>variant</th><th>CPUs</th><th>worst pair</th><th>median op/s</th><th>min – max</th><th>spread</th></tr>",
        );
        for v in e["variants"].as_array().into_iter().flatten() {
            let cpus = v["cpus"]
                .as_array()
                .map(|a| {
                    let c: Vec<u32> = a
                        .iter()
                        .filter_map(|x| x.as_u64())
                        .map(|x| x as u32)
                        .collect();
                    ids(&c)
                })
                .unwrap_or_else(|| "(any)".into());
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3e}</td><td class=\"n\">{:.3e} – {:.3e}</td><td class=\"n\">{:.0}%</td></tr>",
                esc(v["name"].as_str().unwrap_or("")),
                cpus,
                ns(v["worst_latency_ns"].as_f64()),
                v["median"].as_f64().unwrap_or(f64::NAN),
                v["min"].as_f64().unwrap_or(f64::NAN),
                v["max"].as_f64().unwrap_or(f64::NAN),
                100.0 * v["spread"].as_f64().unwrap_or(f64::NAN),
            );
        }
        let ratio = |k: &str| {
            e["ratios"][k]
                .as_f64()
                .map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "–".into())
        };
        let _ = write!(
            s,
            "</table></div><p>Ratios of medians: planned/autopilot <b>{}</b>, planned/worst <b>{}</b>, planned/unpinned <b>{}</b> ({} runs × {} ms each).</p><ul>",
            ratio("planned_vs_autopilot"),
            ratio("planned_vs_worst"),
            ratio("planned_vs_unpinned"),
            e["runs"],
            e["duration_ms"]
        );
        for n in e["notes"].as_array().into_iter().flatten() {
            let _ = write!(s, "<li>{}</li>", esc(n.as_str().unwrap_or("")));
        }
        s.push_str("</ul></section>\n");
    }

    // 6. Measurement quality.
    let q = &r.quality;
    s.push_str("<section id=\"quality\"><h2>Measurement quality</h2><table>");
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
    if let Some(why) = &q.not_measured {
        // Nothing was measured or read: no figure, only why.
        row(&mut s, "latency matrix", &format!("not measured: {why}"));
    } else {
        row(
            &mut s,
            "pairs with a figure",
            &format!(
                "{} of {}",
                q.pairs_with_figure.unwrap_or(0),
                q.pairs_total.unwrap_or(0)
            ),
        );
        row(
            &mut s,
            "samples (batches) per pair",
            &sp(&q.samples_per_pair, false),
        );
        row(
            &mut s,
            "batch spread (p90−p10)/median",
            &sp(&q.batch_spread, true),
        );
        row(
            &mut s,
            "disagreement between passes",
            &match (&q.pass_disagreement, q.unstable_pairs) {
                (Some(_), Some(u)) => format!(
                    "{}; {u} pair(s) still apart beyond the tolerance",
                    sp(&q.pass_disagreement, true)
                ),
                _ => "not measured now (stored or imported matrix)".into(),
            },
        );
        row(
            &mut s,
            "kept cells",
            &match &q.kept {
                Some(k) => format!(
                    "{} pair(s) kept from an earlier run (CPUs {}: {}), {} missing",
                    k.pairs, k.cpus, k.reason, k.missing
                ),
                None if q.imported => "not recorded (imported matrix)".into(),
                None => "none: every CPU measured in one run".into(),
            },
        );
        row(
            &mut s,
            "share of pairs measured",
            &match q.sparse_measured {
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
                &mut s,
                &format!("CPUs {}↔{}: engine vs plain ping-pong minimum", a.a, a.b),
                &format!(
                    "{:.1} ns vs {:.1} ns, ratio {} (rounds engine/plain: {})",
                    a.engine_min_ns,
                    a.plain_min_ns,
                    f3(a.ratio),
                    rounds.join(", ")
                ),
            );
        }
        (None, Some(e)) => row(&mut s, "engine vs plain ping-pong", e),
        (None, None) => {}
    }
    s.push_str("</table>");
    s.push_str("<h3>Findings</h3><ul id=\"findings\">");
    if q.findings.is_empty() && q.warnings.is_empty() {
        s.push_str("<li>none</li>");
    }
    for f in q.findings.iter().chain(&q.warnings) {
        let _ = write!(s, "<li>{}</li>", esc(f));
    }
    s.push_str("</ul></section>\n</body></html>\n");
    s
}
