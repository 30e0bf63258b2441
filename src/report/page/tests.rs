use super::*;
use crate::report::{Agreement, DomainLevel, Machine, PlanRow, Quality};

/// A report whose every text field holds markup.
fn hostile() -> Report {
    let evil = "<script>alert('x')</script> & \"q\"";
    let cpus: CpuSet = "0-1".parse().unwrap();
    Report {
            generated_by: evil.into(),
            source: evil.into(),
            this_machine: false,
            machine: Machine {
                model: Some(evil.into()),
                smt: evil.into(),
                cpus: 2,
                steal: vec![evil.into()],
                boot: Some(evil.into()),
                idle: Vec::new(),
                ..Machine::default()
            },
            topology: TopoBox {
                label: evil.into(),
                cpus: cpus.clone(),
                latency_ns: Some(5.0),
                children: Vec::new(),
            },
            topology_from: "matrix".into(),
            domains: vec![DomainLevel {
                name: evil.into(),
                latency_ns: Some(5.0),
                groups: vec![cpus],
            }],
            colour_level: Some(evil.into()),
            cpu_group: Default::default(),
            cpu_order: vec![0, 1],
            domain_order: vec![0, 1],
            plans: vec![PlanRow::failed(2, evil.into(), evil.into())],
            effect: Some(
                serde_json::from_value(serde_json::json!({
                    "variants": [{"name": evil, "cpus": null, "median": 1.0, "min": 1.0, "max": 1.0, "spread": 0.0}],
                    "notes": [evil],
                    "runs": 1,
                    "duration_ms": 1,
                }))
                .unwrap(),
            ),
            quality: Quality {
                not_measured: Some(evil.into()),
                findings: vec![evil.into()],
                warnings: vec![evil.into()],
                agreement: Some(Agreement {
                    a: 0,
                    b: 1,
                    rounds: vec![(5.0, 5.5)],
                    engine_min_ns: 5.0,
                    plain_min_ns: 5.5,
                    ratio: 5.0 / 5.5,
                }),
                ..Quality::default()
            },
            latency_off: Some(evil.into()),
            daemon: Some(crate::report::DaemonFacts {
                nri: evil.into(),
                containers: vec![evil.into()],
                error: None,
            }),
        }
}

#[test]
fn every_text_from_the_facts_is_escaped_on_the_page() {
    let page = html(&hostile(), None);
    assert!(
        !page.contains("<script"),
        "markup from the facts got through"
    );
    assert!(!page.contains("alert('x')"));
    let escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;";
    // Title and heading, source, made by, model, SMT, steal, boot, level, colour level,
    // plan policy and error, effect variant and note, the reason no matrix was
    // measured, a finding and a warning (a one-CPU box shows its CPU, no label), the
    // line saying latency placement is off, and the daemon's NRI line and container.
    assert_eq!(page.matches(escaped).count(), 20, "{page}");
    assert!(page.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
    assert!(page.ends_with("</ul></section>\n</body></html>\n"));
}

/// The page of `n` CPUs with `m`'s figures: every CPU a box of the topology, LLCs of
/// 16 CPUs, the domain order interleaving the even and the odd CPUs.
fn page_of(m: &LatencyMatrix) -> String {
    let n = m.len() as u32;
    let all: CpuSet = (0..n).collect();
    let llcs: Vec<CpuSet> = (0..n / 16)
        .map(|g| (g * 16..g * 16 + 16).collect())
        .collect();
    let cpu = |c: u32| TopoBox {
        label: format!("CPU {c}"),
        cpus: std::iter::once(c).collect(),
        latency_ns: None,
        children: Vec::new(),
    };
    let r = Report {
        generated_by: "pinnerd".into(),
        source: "noise".into(),
        this_machine: false,
        machine: Machine {
            cpus: n as usize,
            ..Machine::default()
        },
        topology: TopoBox {
            label: "machine".into(),
            cpus: all.clone(),
            latency_ns: Some(200.0),
            children: llcs
                .iter()
                .enumerate()
                .map(|(i, g)| TopoBox {
                    label: format!("llc {i}"),
                    cpus: g.clone(),
                    latency_ns: Some(30.0),
                    children: g.iter().map(cpu).collect(),
                })
                .collect(),
        },
        topology_from: "matrix".into(),
        domains: vec![
            DomainLevel {
                name: "llc".into(),
                latency_ns: Some(30.0),
                groups: llcs,
            },
            DomainLevel {
                name: "package".into(),
                latency_ns: Some(200.0),
                groups: (0..n / 1024)
                    .map(|k| (k * 1024..k * 1024 + 1024).collect())
                    .collect(),
            },
        ],
        colour_level: None,
        cpu_group: Default::default(),
        cpu_order: (0..n).collect(),
        domain_order: (0..n).step_by(2).chain((1..n).step_by(2)).collect(),
        plans: Vec::new(),
        effect: None,
        quality: Quality::default(),
        latency_off: None,
        daemon: None,
    };
    html(&r, Some(m))
}

#[test]
fn the_page_of_4096_noisy_cpus_stays_within_its_bound() {
    let page = page_of(&render::tests::noisy(4096, 11));
    // The bound of benches/README.md ("The report page") for any figures.
    assert!(
        page.len() <= 4 << 20,
        "the page of 4,096 noisy CPUs is {} bytes, over 4 MiB",
        page.len()
    );
    for id in ["heatmap-cpu-order", "heatmap-domain-order"] {
        let at = page.find(&format!("<svg id=\"{id}\"")).unwrap();
        let svg = &page[at..at + page[at..].find("</svg>").unwrap()];
        assert!(svg.contains("each pixel is 4×4 CPUs"), "{id}");
        // A band per row of blocks, naming its CPUs in the heatmap's order.
        assert_eq!(svg.matches("<rect data-cpus=").count(), 1024, "{id}");
    }
    // The packages' boundaries in domain order, every 512 CPUs; not the LLCs' (8
    // CPUs apart there: 2 blocks), which would cover the cells.
    let at = page.find("<svg id=\"heatmap-domain-order\"").unwrap();
    let svg = &page[at..at + page[at..].find("</svg>").unwrap()];
    assert_eq!(
        svg.matches("stroke=\"#e8175d\"").count(),
        2 * 7,
        "{}",
        &svg[svg.len() - 4000..]
    );
    assert!(page.contains("<title>CPUs 0, 1, 2, 3</title>"));
    assert!(page.contains("<title>CPUs 4088, 4090, 4092, 4094</title>"));
    assert!(page.contains("<title>CPUs 4089, 4091, 4093, 4095</title>"));
}

#[test]
fn a_heatmap_of_blocks_draws_the_levels_whose_boundaries_stand_apart() {
    // LLC (width 1) every 16 CPUs, package (2) every 64, a lone node (3) at 128.
    let lines: Vec<(usize, u32)> = (1..16)
        .map(|k| (k * 16, if k % 4 == 0 { 2 } else { 1 }))
        .map(|(p, w)| if p == 128 { (p, 3) } else { (p, w) })
        .collect();
    let widths = |gap| {
        let mut w: Vec<u32> = spaced(&lines, gap).iter().map(|l| l.1).collect();
        w.dedup();
        w.sort_unstable();
        w.dedup();
        w
    };
    assert_eq!(widths(16), [1, 2, 3]);
    assert_eq!(widths(17), [2, 3]);
    assert_eq!(widths(64), [2, 3]);
    assert_eq!(widths(65), [3]);
    assert_eq!(widths(129), Vec::<u32>::new());
}

#[test]
fn the_page_escapes_as_esc_does() {
    let mut out = String::new();
    askama::filters::Escaper::write_escaped_str(&PageText, &mut out, "a<b>&\"c'd").unwrap();
    assert_eq!(out, esc("a<b>&\"c'd"));
    assert_eq!(out, "a&lt;b&gt;&amp;&quot;c&#39;d");
}
