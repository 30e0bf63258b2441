//! The facts `pinnerd report` shows, gathered from an [`advice::Ground`] and the
//! machine: the machine section (the fingerprint's inputs, steal seen now, the
//! sched_ext state, boot CPUs, idle states), the nested boxes, the measured domains, the
//! plans for K = 2, 4, 8 (one-off requests on the ground, as `plan` makes them), the
//! measurement's quality and, with `compare`, the measured effect (`effect`) and the
//! engine against the plain ping-pong (`measure::plain`). `crate::report` draws them.
//!
//! Must not touch: placement or measurement logic (it asks `advice`, `effect` and
//! `measure`), the page (`report`), files written and the daemon (the caller's: the
//! command line writes the page and asks the bus for [`Report::daemon`]). Its plans are
//! not the rules' plan (`plan::making`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::advice::{self, Advice, Ground, Source};
use crate::cpuset::CpuSet;
use crate::domains::{Layout, LevelKind};
use crate::fingerprint::Fingerprint;
use crate::measure::{self, guard, plain, MeasureConfig};
use crate::placement::{Policy, SmtPolicy};
use crate::report::{
    self, Agreement, DomainLevel, Machine, NodeFacts, PlanRow, Quality, Report, Spread,
};
use crate::topology::{CoreType, Topology};
use crate::words::describe_error;

/// Ks of "where CPU numbers lie".
const KS: [usize; 3] = [2, 4, 8];
/// Rounds of the engine against the plain ping-pong.
const AGREEMENT_ROUNDS: usize = 5;

/// What the page is asked for beyond its ground.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The matrix file given (`--matrix`): its name titles another machine's page.
    pub matrix: Option<&'a Path>,
    /// The sysfs tree is this machine's own: steal is watched now and the boot's CPUs
    /// shown.
    pub live_sysfs: bool,
    /// Measure the effect and the engine against the plain ping-pong (this machine's
    /// CPUs spin for about 15 s).
    pub compare: bool,
}

/// The topology the page describes: the sysfs tree's, when the matrix fits its CPUs
/// (online or usable); `None` when the page is drawn from another machine's matrix.
pub fn this_machine(g: &Ground) -> Option<&Topology> {
    let dcpus: CpuSet = g.domains.cpus().iter().copied().collect();
    g.topology
        .as_ref()
        .filter(|t| dcpus == t.online || dcpus == t.usable())
}

/// The page's facts on ground `g`, the daemon's left for the caller to ask (`daemon`
/// is `None`).
pub fn gather(g: &Ground, asked: &Asked<'_>) -> anyhow::Result<Report> {
    let dcpus: CpuSet = g.domains.cpus().iter().copied().collect();
    // The page describes the machine of the sysfs tree when the matrix fits it.
    let known = this_machine(g);
    let machine = match known {
        Some(t) => machine_facts(g, t, asked.live_sysfs)?,
        None => matrix_facts(g, asked.matrix),
    };
    let topology = topology_boxes(g, known, &dcpus);
    let (colour_level, cpu_group) = report::colour_groups(&g.domains);
    let (plans, pair_advice) = plans(g);
    let mut quality = quality(g, known);
    let numa_home = g
        .findings
        .iter()
        .any(|f| f.kind == crate::domains::FindingKind::NumaHome);
    quality
        .findings
        .extend(report::inverted_boxes(&topology, numa_home));
    let effect = match asked.compare {
        true => Some(effect(g, pair_advice, &mut quality)?),
        false => None,
    };
    Ok(Report {
        generated_by: format!("pinnerd {}", env!("CARGO_PKG_VERSION")),
        source: source_description(g),
        this_machine: known.is_some(),
        machine,
        topology,
        topology_from: if known.is_some() { "sysfs" } else { "matrix" }.into(),
        domains: domain_levels(g),
        colour_level,
        cpu_group,
        cpu_order: g.domains.cpus().to_vec(),
        domain_order: report::domain_order(&g.domains),
        plans,
        effect,
        quality,
        latency_off: g.latency_off.map(String::from),
        daemon: None,
    })
}

/// The nested boxes of the page: sysfs's levels when the matrix is this machine's
/// (`known`), else the matrix's own domains.
fn topology_boxes(g: &Ground, known: Option<&Topology>, dcpus: &CpuSet) -> report::TopoBox {
    let levels = match known {
        Some(t) => Layout::from_topology(t)
            .restricted(dcpus)
            .levels
            .into_iter()
            .map(|(k, groups)| (level_word(k), groups))
            .collect(),
        None => report::domain_levels(&g.domains)
            .into_iter()
            .map(|(n, groups)| (if n == "smt" { "core".into() } else { n }, groups))
            .collect(),
    };
    report::topo_boxes(
        "machine".into(),
        dcpus,
        &report::tidy_levels(levels),
        g.matrix.as_ref(),
    )
}

/// The plans for K = 2, 4, 8 (as many as there are CPUs for), compact and spread, and
/// the compact pair's advice for `--compare`.
fn plans(g: &Ground) -> (Vec<PlanRow>, Option<Advice>) {
    let mut plans = Vec::new();
    let mut pair_advice = None;
    for k in KS.into_iter().filter(|&k| k <= g.available.len()) {
        for policy in [Policy::Compact, Policy::Spread] {
            let req = advice::count_request(k, policy, SmtPolicy::Allow, CpuSet::new());
            plans.push(match advice::place_on(g, &req, &Default::default()) {
                Ok(a) => {
                    let mut row = plan_row(k, policy, &a);
                    if g.latency_off.is_some() {
                        // No gain from an unstable matrix's figures.
                        row.ratio = None;
                    }
                    if k == 2 && policy == Policy::Compact {
                        pair_advice = Some(a);
                    }
                    row
                }
                Err(e) => PlanRow::failed(k, policy.to_string(), describe_error(&e)),
            });
        }
    }
    (plans, pair_advice)
}

/// `--compare`: the ring on the planned pair and the others, as `pinnerd compare`, and
/// the engine against the plain ping-pong on the first two CPUs (into `quality`).
fn effect(
    g: &Ground,
    pair_advice: Option<Advice>,
    quality: &mut Quality,
) -> anyhow::Result<crate::effect::EffectJson> {
    let advice = pair_advice.context("no plan of two CPUs to compare")?;
    let mut e = crate::effect::measure(
        &advice.placement.cpus,
        &advice.domains,
        &advice.source_description(),
        2,
        7,
        Duration::from_millis(300),
    )
    .context("measuring the effect")?;
    e.latency_off = advice.latency_off;
    let avail: Vec<u32> = g.available.iter().collect();
    match avail.as_slice() {
        [a, b, ..] => match agreement(*a, *b) {
            Ok(a) => quality.agreement = Some(a),
            Err(e) => quality.agreement_error = Some(describe_error(&e)),
        },
        _ => quality.agreement_error = Some("fewer than two usable CPUs".into()),
    }
    Ok(e.as_json())
}

/// The measured latency domains. A level whose every group is one CPU (an `smt` level
/// without SMT) groups nothing: it is not in the data, so not on the page.
fn domain_levels(g: &Ground) -> Vec<DomainLevel> {
    g.domains
        .levels()
        .iter()
        .filter(|l| l.kind == LevelKind::Machine || l.groups.iter().any(|g| g.len() > 1))
        .map(|l| DomainLevel {
            name: l.name(),
            latency_ns: l.latency_ns,
            groups: l.groups.clone(),
        })
        .collect()
}

/// Where the matrix came from, in words, a measurement's kind included.
fn source_description(g: &Ground) -> String {
    match &g.source {
        Source::Measured(d) => format!(
            "matrix measured now ({:.1} s, {})",
            d.as_secs_f64(),
            if g.matrix.as_ref().is_some_and(|m| m.sparse.is_some()) {
                "sparse"
            } else {
                "every pair"
            }
        ),
        other => other.describe(),
    }
}

fn level_word(k: LevelKind) -> String {
    match k {
        LevelKind::Smt => "core".into(),
        other => other.as_str().into(),
    }
}

/// A row of the plans table: `pinnerd plan --json`'s figures for one request.
fn plan_row(k: usize, policy: Policy, a: &Advice) -> PlanRow {
    let x = &a.placement.explanation;
    let worst = x.cost.worst_ns;
    let auto = x.autopilot.as_ref();
    let auto_worst = auto.and_then(|(_, c)| c.worst_ns);
    PlanRow {
        k,
        policy: policy.to_string(),
        cpus: a.placement.cpus.iter().collect(),
        worst_latency_ns: worst,
        mean_latency_ns: x.cost.mean_ns,
        autopilot_cpus: auto.map(|(cpus, _)| cpus.iter().collect()),
        autopilot_worst_ns: auto_worst,
        autopilot_mean_ns: auto.and_then(|(_, c)| c.mean_ns),
        // How much nearer the plan's farthest pair is than autopilot's: a compact
        // plan's gain. A spread plan seeks distance, where the ratio means nothing.
        ratio: match (auto_worst, worst) {
            (Some(a), Some(p)) if p > 0.0 && policy == Policy::Compact => Some(a / p),
            _ => None,
        },
        error: None,
    }
}

/// The machine section from sysfs and procfs.
fn machine_facts(g: &Ground, t: &Topology, real_sysfs: bool) -> anyhow::Result<Machine> {
    let fp = Fingerprint::read(&g.root).context("computing the hardware fingerprint")?;
    let i = &fp.inputs;
    let smt = match (&i.smt_control, t.has_smt()) {
        (Some(c), true) => format!("on (control: {c})"),
        (Some(c), false) => format!("no SMT threads (control: {c})"),
        (None, true) => "on".into(),
        (None, false) => "no SMT threads".into(),
    };
    let core_kinds = t.core_types_from.as_ref().map(|from| {
        format!(
            "performance {} · efficiency {} (from {from})",
            t.cpus_of_kind(CoreType::Performance),
            t.cpus_of_kind(CoreType::Efficiency)
        )
    });
    let virtualisation =
        (i.hypervisor_flag || i.hypervisor_type.is_some()).then(|| match &i.hypervisor_type {
            Some(h) => format!("guest of {h}"),
            None => "guest (hypervisor flag set)".into(),
        });
    let mut steal = Vec::new();
    if real_sysfs {
        // Steal over a quarter second now: a host taking time from these CPUs.
        if let Ok(before) = guard::read_stat(&g.root) {
            std::thread::sleep(Duration::from_millis(250));
            if let Ok(after) = guard::read_stat(&g.root) {
                let ticks = guard::steal_ticks(&before, &after, &t.online);
                if !ticks.is_empty() {
                    let per: Vec<String> =
                        ticks.iter().map(|(c, n)| format!("CPU {c}: {n}")).collect();
                    steal.push(format!(
                        "steal ticks in 0.25 s while reporting: {}",
                        per.join(", ")
                    ));
                }
            }
        }
    }
    if let Some(m) = &g.matrix {
        steal.extend(
            m.warnings
                .iter()
                .filter(|w| w.contains("steal"))
                .map(|w| format!("while measuring: {w}")),
        );
    }
    Ok(Machine {
        model: i.cpu_model_name.clone().or_else(|| i.cpu_model.clone()),
        fingerprint: Some(fp.hex.clone()),
        kernel: i.kernel_release.clone(),
        smt,
        cpus: t.cpus.len(),
        online: Some(t.online.to_string()),
        nodes: t
            .nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .map(|n| NodeFacts {
                id: n.id,
                cpus: n.cpus.clone(),
                distances: n.distances.values().copied().collect(),
            })
            .collect(),
        core_kinds,
        x3d_mode: t.x3d_mode.clone(),
        sched_ext: crate::sched_ext::read(&g.root)
            .context("reading the sched_ext state")?
            .map(|s| s.describe()),
        virtualisation,
        steal,
        boot: real_sysfs.then(|| crate::boot_cpus::read(&g.root).machine_words()),
        idle: crate::knobs::idle::grouped(&g.root, &t.online),
    })
}

/// The machine section of a matrix from elsewhere: what the matrix itself says.
fn matrix_facts(g: &Ground, path: Option<&Path>) -> Machine {
    let name = path
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().replace('_', " "));
    let smt = match g.domains.smt_level() {
        Some(l) => format!(
            "{} SMT pairs seen in the matrix",
            g.domains.levels()[l].groups.len()
        ),
        None => "no SMT pairs seen in the matrix".into(),
    };
    Machine {
        model: name.map(|n| format!("{n} (published matrix)")),
        fingerprint: g.matrix.as_ref().and_then(|m| m.fingerprint.clone()),
        smt,
        cpus: g.domains.cpus().len(),
        ..Machine::default()
    }
}

/// The measurement-quality section.
fn quality(g: &Ground, known: Option<&Topology>) -> Quality {
    let mut q = Quality {
        findings: g
            .findings
            .iter()
            .map(|f| {
                format!(
                    "{}: {}",
                    serde_json::to_value(f.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    f.message
                )
            })
            .collect(),
        warnings: g.warnings.clone(),
        ..Quality::default()
    };
    let Some(m) = &g.matrix else {
        q.not_measured = Some(match &g.source {
            Source::TopologyOnly(why) => why.clone(),
            _ => "no matrix".into(),
        });
        return q;
    };
    let summary = m.summary();
    q.pairs_total = Some(summary.pairs + summary.missing);
    q.pairs_with_figure = Some(summary.pairs);
    let measured: Vec<_> = m.stats.iter().filter(|s| !s.inferred).collect();
    q.samples_per_pair = Spread::of(
        &measured
            .iter()
            .map(|s| s.samples as f64)
            .collect::<Vec<_>>(),
    );
    q.batch_spread = Spread::of(
        &measured
            .iter()
            .filter(|s| s.median_ns > 0.0)
            .map(|s| (s.p90_ns - s.p10_ns) / s.median_ns)
            .collect::<Vec<_>>(),
    );
    if let Some(run) = &g.run {
        let d: Vec<f64> = run
            .pass_estimates
            .values()
            .filter(|v| v.len() >= 2)
            .map(|v| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(0.0, f64::max);
                if lo > 0.0 {
                    hi / lo - 1.0
                } else {
                    f64::NAN
                }
            })
            .collect();
        q.pass_disagreement = Spread::of(&d);
        q.unstable_pairs = Some(run.unstable.len());
    }
    q.kept = m.kept.clone();
    q.imported = m.measured_at_us.is_none() && m.primitive.is_none();
    q.sparse_measured = m.sparse.as_ref().map(|s| {
        (
            s.pairs_measured,
            s.pairs_total,
            s.pairs_measured as f64 / s.pairs_total.max(1) as f64,
        )
    });
    if let Some(t) = known {
        // Mismatches with sysfs: CPUs the matrix names that are not online, or lacks.
        for w in m.check_against(&t.online) {
            if !q.warnings.contains(&w) {
                q.warnings.push(w);
            }
        }
    }
    q
}

/// The engine's figure for `a`↔`b` against the plain ping-pong's minimum, interleaved
/// [`AGREEMENT_ROUNDS`] times.
fn agreement(a: u32, b: u32) -> anyhow::Result<Agreement> {
    let mut cfg = MeasureConfig::new([a, b].into_iter().collect());
    // A two-CPU check right after the effect runs: measured whatever the load.
    cfg.guard.min_idle = 0.0;
    let mut rounds = Vec::new();
    for _ in 0..AGREEMENT_ROUNDS {
        let m = measure::run(&cfg, |_| {}).context("the engine on the pair")?;
        let e = m
            .between(a, b)
            .with_context(|| format!("the engine gave no figure for CPUs {a} and {b}"))?;
        let p = plain::min_one_way_ns(a, b, 1000, 100, Duration::from_secs(30))?;
        rounds.push((e, p));
    }
    let engine_min_ns = rounds.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    let plain_min_ns = rounds.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    Ok(Agreement {
        a,
        b,
        rounds,
        engine_min_ns,
        plain_min_ns,
        ratio: engine_min_ns / plain_min_ns,
    })
}
