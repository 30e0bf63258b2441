//! The daemon's numbers in the Prometheus text format (version 0.0.4): what `pinnerd
//! metrics` prints and what the daemon writes for node_exporter's textfile collector.
//!
//! ```text
//! daemon loop ── Counters (pin outcomes, event-to-pin delay, overruns, rescans) ─┐
//!             ── state, matrix, domains, rules, managed counts ──────────────────├─► MetricsSnapshot ─► render() ─► text
//! ```
//!
//! Names follow Prometheus conventions: base units (`_seconds`), counters end in
//! `_total`, every family has `# HELP` and `# TYPE`, and no label has per-pair or per-pid
//! values (only `level`, `state`, `outcome`, `version`).
//!
//! Owns: [`Counters`] and [`Histogram`] (kept by the daemon), [`MetricsSnapshot`] and
//! its rendering; `textfile` writes the result for node_exporter. Must not touch: the
//! daemon's state (the loop hands its parts to [`MetricsSnapshot::of_daemon`]).

pub mod textfile;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The daemon's states, in the order the `pinnerd_state` family lists them.
pub const STATES: [&str; 4] = ["starting", "measuring", "ready", "degraded"];

/// Every outcome of setting a task's affinity (`affinity::Outcome::label`), listed even
/// when zero so a rate query never sees a series appear from nothing.
pub const OUTCOMES: [&str; 7] = [
    "applied",
    "narrowed",
    "refused",
    "gone",
    "kernel-thread",
    "permission",
    "failed",
];

/// Upper bounds of the event-to-pin delay buckets, in seconds: 10 µs (a pin on the
/// connector path) to 60 s (a pin found only by a rescan).
pub const DELAY_BUCKETS: [f64; 19] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1,
    0.25, 0.5, 1.0, 5.0, 15.0, 60.0,
];

/// A cumulative histogram with fixed bucket bounds (the `+Inf` bucket is `count`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Upper bounds, ascending.
    pub bounds: Vec<f64>,
    /// `buckets[k]`: observations ≤ `bounds[k]` and > the previous bound (not cumulative).
    pub buckets: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            buckets: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value; NaN is ignored, negatives count as 0.
    pub fn observe(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        let v = v.max(0.0);
        if let Some(k) = self.bounds.iter().position(|&b| v <= b) {
            self.buckets[k] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// What the daemon counts from its start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Affinity sets by outcome, in the order of [`OUTCOMES`].
    pub pin_outcomes: [u64; OUTCOMES.len()],
    /// From reading a batch of proc connector events to each pin it made.
    pub event_to_pin_seconds: Histogram,
    /// Times the kernel dropped proc connector events (ENOBUFS).
    pub connector_overruns: u64,
    /// Full /proc rescans.
    pub rescans: u64,
    /// `memory = "follow"` jobs.
    #[serde(default)]
    pub memory: MemoryCounters,
    /// Containers given a cpuset through NRI, and containers a rule named that got none.
    #[serde(default)]
    pub nri_adjusted: u64,
    #[serde(default)]
    pub nri_skipped: u64,
}

/// The outcomes of `memory = "follow"` jobs, in the order the
/// `pinnerd_memory_migrations_total` family lists them.
pub const MEMORY_OUTCOMES: [&str; 4] = ["moved", "nothing", "refused", "failed"];

/// What `memory = "follow"` did since start (no per-process labels).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryCounters {
    /// Jobs by outcome, in the order of [`MEMORY_OUTCOMES`].
    pub migrations: [u64; MEMORY_OUTCOMES.len()],
    /// Bytes moved onto the nodes of the processes' CPUs.
    pub moved_bytes: u64,
    /// Pages `migrate_pages` could not move.
    pub pages_left: u64,
    /// Time spent moving.
    pub seconds: f64,
}

impl MemoryCounters {
    /// Counts one job's outcome.
    pub fn count(&mut self, o: &crate::memory::follow::Outcome) {
        let k = MEMORY_OUTCOMES
            .iter()
            .position(|l| *l == o.label())
            .unwrap_or(MEMORY_OUTCOMES.len() - 1);
        self.migrations[k] += 1;
        if let crate::memory::follow::Outcome::Moved {
            moved,
            pages_left,
            took,
            ..
        } = o
        {
            self.moved_bytes += moved;
            self.pages_left += pages_left;
            self.seconds += took.as_secs_f64();
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            pin_outcomes: [0; OUTCOMES.len()],
            event_to_pin_seconds: Histogram::new(&DELAY_BUCKETS),
            connector_overruns: 0,
            rescans: 0,
            memory: MemoryCounters::default(),
            nri_adjusted: 0,
            nri_skipped: 0,
        }
    }
}

impl Counters {
    /// Counts one outcome by its name (`affinity::Outcome::label`); an unknown name is
    /// counted as `failed` so nothing is lost.
    pub fn pin_outcome(&mut self, kind: &str) {
        let k = OUTCOMES
            .iter()
            .position(|&o| o == kind)
            .unwrap_or(OUTCOMES.len() - 1);
        self.pin_outcomes[k] += 1;
    }
}

/// Everything one rendering needs, as plain data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    pub version: String,
    /// One of [`STATES`].
    pub state: String,
    /// Per domain level, finest first: the label (`fleet::level_labels`) and the
    /// typical latency in ns, when known.
    pub levels: Vec<(String, Option<f64>)>,
    /// Placement uses a measured matrix that agrees with the topology.
    pub matrix_trusted: bool,
    /// When the matrix in use was measured, µs since the epoch.
    pub matrix_measured_at_us: Option<u64>,
    /// How long measuring it took.
    pub matrix_measure_seconds: Option<f64>,
    /// Share of its pairs measured (the rest inferred by sparse measurement, until
    /// background completion measures them).
    pub matrix_measured_ratio: Option<f64>,
    /// The time of the snapshot, µs since the epoch (for the matrix's age).
    pub now_us: u64,
    pub cpus: u32,
    pub rules: u32,
    pub rule_errors: u32,
    pub managed_processes: u32,
    pub managed_threads: u32,
    pub counters: Counters,
    /// Registered with a container runtime over NRI; `None` with `[nri] enable = "off"`.
    #[serde(default)]
    pub nri_registered: Option<bool>,
}

/// What the daemon loop keeps for its metrics besides the manager's counters: the
/// event-to-pin histogram and when the textfile is due.
#[derive(Debug, Clone)]
pub struct Kept {
    pub event_to_pin: Histogram,
    /// What `memory = "follow"` did.
    pub memory: MemoryCounters,
    next_textfile: Option<std::time::Instant>,
}

impl Default for Kept {
    fn default() -> Self {
        Kept {
            event_to_pin: Histogram::new(&DELAY_BUCKETS),
            memory: MemoryCounters::default(),
            next_textfile: None,
        }
    }
}

impl Kept {
    /// Records the delay from reading a batch of proc events (`read_at`) to now for
    /// every thread the batch pinned (applied or narrowed).
    pub fn pins_after(&mut self, read_at: std::time::Instant, changes: &[crate::manager::Change]) {
        let delay = read_at.elapsed().as_secs_f64();
        for c in changes {
            if let crate::manager::Change::Pinned { outcome, .. } = c {
                if outcome.effective().is_some() {
                    self.event_to_pin.observe(delay);
                }
            }
        }
    }

    /// The textfile directory when a write is due at `now` (and schedules the next).
    pub fn textfile_due(
        &mut self,
        now: std::time::Instant,
        s: &crate::settings::MetricsSettings,
    ) -> Option<std::path::PathBuf> {
        if s.textfile_dir.as_os_str().is_empty() {
            self.next_textfile = None;
            return None;
        }
        if self.next_textfile.is_some_and(|due| now < due) {
            return None;
        }
        self.next_textfile = Some(now + s.textfile_period.0);
        Some(s.textfile_dir.clone())
    }
}

impl MetricsSnapshot {
    /// The snapshot of a running daemon, at the current time: its published snapshot,
    /// the domains and matrix in use, the manager's counters and what the loop keeps.
    pub fn of_daemon(
        snapshot: crate::api::Snapshot,
        domains: Option<&crate::domains::Domains>,
        matrix: Option<&crate::matrix::LatencyMatrix>,
        manager: Option<&crate::manager::Counters>,
        kept: &Kept,
    ) -> MetricsSnapshot {
        let mut counters = Counters {
            event_to_pin_seconds: kept.event_to_pin.clone(),
            memory: kept.memory.clone(),
            ..Counters::default()
        };
        if let Some(c) = manager {
            counters.pin_outcomes = [
                c.applied,
                c.narrowed,
                c.refused,
                c.gone,
                c.kernel_threads,
                c.permission,
                c.failed,
            ];
            counters.connector_overruns = c.overruns;
            counters.rescans = c.rescans;
        }
        let levels = domains.map_or_else(Vec::new, |d| {
            crate::fleet::level_labels(d.levels())
                .into_iter()
                .zip(d.levels().iter().map(|l| l.latency_ns))
                .collect()
        });
        let s = snapshot;
        MetricsSnapshot {
            version: s.version,
            state: s.state.as_str().to_string(),
            levels,
            matrix_trusted: domains.is_some_and(|d| d.trust() == crate::domains::Trust::Matrix),
            matrix_measured_at_us: matrix.and_then(|m| m.measured_at_us),
            matrix_measure_seconds: matrix.and_then(|m| m.measure_seconds),
            matrix_measured_ratio: matrix.map(|m| {
                let (measured, total) = crate::measure::complete::measured_share(m);
                if total == 0 {
                    1.0
                } else {
                    measured as f64 / total as f64
                }
            }),
            now_us: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            cpus: s.cpu_count,
            rules: s.rule_count,
            rule_errors: s.rule_errors.len() as u32,
            managed_processes: s.managed_processes,
            managed_threads: s.managed_threads,
            counters,
            nri_registered: (!s.nri.is_empty()).then(|| s.nri.starts_with("registered")),
        }
    }
}

/// A float as Prometheus writes one.
fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A label value escaped for the text format (backslash, quote, newline).
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: f64) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {}", num(v));
}

/// A counter family with its one sample.
fn counter(out: &mut String, name: &str, help: &str, v: impl std::fmt::Display) {
    family(out, name, "counter", help);
    let _ = writeln!(out, "{name} {v}");
}

/// A counter family with one sample per outcome: `counts[k]` for `outcomes[k]`.
fn counters_by_outcome(
    out: &mut String,
    name: &str,
    help: &str,
    outcomes: &[&str],
    counts: &[u64],
) {
    family(out, name, "counter", help);
    for (outcome, n) in outcomes.iter().zip(counts) {
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {n}");
    }
}

/// The snapshot in the Prometheus text exposition format.
pub fn render(s: &MetricsSnapshot) -> String {
    let mut o = String::with_capacity(4096);
    daemon_families(&mut o, s);
    matrix_families(&mut o, s);
    rule_families(&mut o, s);
    pin_families(&mut o, s);
    memory_families(&mut o, s);
    nri_families(&mut o, s);
    o
}

/// The NRI plugin: registered or not, containers given a cpuset, and not.
fn nri_families(o: &mut String, s: &MetricsSnapshot) {
    let Some(registered) = s.nri_registered else {
        return;
    };
    gauge(
        o,
        "pinnerd_nri_registered",
        "1 while registered as an NRI plugin with a container runtime.",
        if registered { 1.0 } else { 0.0 },
    );
    counter(
        o,
        "pinnerd_nri_adjustments_total",
        "Containers given a cpuset through NRI (at creation, at synchronization, or moved).",
        s.counters.nri_adjusted,
    );
    counter(
        o,
        "pinnerd_nri_skipped_total",
        "Containers a rule named that got no cpuset (no answer in time, or no CPUs in the plan).",
        s.counters.nri_skipped,
    );
}

/// The running version and the daemon's state.
fn daemon_families(o: &mut String, s: &MetricsSnapshot) {
    family(
        o,
        "pinnerd_info",
        "gauge",
        "The running pinnerd's version; the value is always 1.",
    );
    let _ = writeln!(o, "pinnerd_info{{version=\"{}\"}} 1", label(&s.version));
    family(
        o,
        "pinnerd_state",
        "gauge",
        "The daemon's state: 1 for the current one, 0 for the others.",
    );
    for st in STATES {
        let _ = writeln!(
            o,
            "pinnerd_state{{state=\"{st}\"}} {}",
            u8::from(s.state == st)
        );
    }
}

/// The latency matrix in use: its domain latencies, trust, age and completion.
fn matrix_families(o: &mut String, s: &MetricsSnapshot) {
    if s.levels.iter().any(|(_, v)| v.is_some()) {
        family(
            o,
            "pinnerd_domain_latency_seconds",
            "gauge",
            "Typical one-way core-to-core latency between CPUs first joined at this domain level (smt, llc, ..., machine), from the matrix in use.",
        );
        for (level, ns) in &s.levels {
            if let Some(ns) = ns {
                let _ = writeln!(
                    o,
                    "pinnerd_domain_latency_seconds{{level=\"{}\"}} {}",
                    label(level),
                    num(ns / 1e9)
                );
            }
        }
    }
    gauge(
        o,
        "pinnerd_matrix_trusted",
        "1 when placement uses a measured latency matrix that agrees with the topology, 0 when it uses the topology alone.",
        f64::from(u8::from(s.matrix_trusted)),
    );
    if let Some(at) = s.matrix_measured_at_us {
        gauge(
            o,
            "pinnerd_matrix_measured_timestamp_seconds",
            "When the latency matrix in use was measured, in seconds since the Unix epoch.",
            at as f64 / 1e6,
        );
        gauge(
            o,
            "pinnerd_matrix_age_seconds",
            "Age of the latency matrix in use.",
            s.now_us.saturating_sub(at) as f64 / 1e6,
        );
    }
    if let Some(d) = s.matrix_measure_seconds {
        gauge(
            o,
            "pinnerd_matrix_measurement_duration_seconds",
            "How long measuring the latency matrix in use took.",
            d,
        );
    }
    if let Some(r) = s.matrix_measured_ratio {
        gauge(
            o,
            "pinnerd_matrix_measured_ratio",
            "Share of the latency matrix's pairs that are measured; below 1 the others are inferred from a sparse measurement and background completion is measuring them.",
            r,
        );
        gauge(
            o,
            "pinnerd_matrix_completing",
            "1 while background completion measures the inferred pairs of the latency matrix in use, else 0.",
            f64::from(u8::from(r < 1.0)),
        );
    }
}

/// CPUs, rules and what the daemon manages.
fn rule_families(o: &mut String, s: &MetricsSnapshot) {
    gauge(o, "pinnerd_cpus", "Online CPUs.", f64::from(s.cpus));
    gauge(o, "pinnerd_rules", "Rules loaded.", f64::from(s.rules));
    gauge(
        o,
        "pinnerd_rule_errors",
        "Errors in the rule files and the settings file (see the RuleErrors property).",
        f64::from(s.rule_errors),
    );
    gauge(
        o,
        "pinnerd_managed_processes",
        "Processes whose threads pinnerd manages.",
        f64::from(s.managed_processes),
    );
    gauge(
        o,
        "pinnerd_managed_threads",
        "Threads pinnerd manages.",
        f64::from(s.managed_threads),
    );
}

/// Pins by outcome, their delay after an event, proc connector overruns and rescans.
fn pin_families(o: &mut String, s: &MetricsSnapshot) {
    counters_by_outcome(
        o,
        "pinnerd_pin_outcomes_total",
        "Affinity sets by outcome: applied, narrowed (a cpuset allowed part), refused (a cpuset allowed none), gone (the thread exited), kernel-thread, permission (not permitted to read or set a task's mask: not gone), failed.",
        &OUTCOMES,
        &s.counters.pin_outcomes,
    );
    let h = &s.counters.event_to_pin_seconds;
    family(
        o,
        "pinnerd_event_to_pin_delay_seconds",
        "histogram",
        "Delay from reading a batch of proc connector events to each pin it made (applied or narrowed).",
    );
    let mut cumulative = 0;
    for (b, n) in h.bounds.iter().zip(&h.buckets) {
        cumulative += n;
        let _ = writeln!(
            o,
            "pinnerd_event_to_pin_delay_seconds_bucket{{le=\"{}\"}} {cumulative}",
            num(*b)
        );
    }
    let _ = writeln!(
        o,
        "pinnerd_event_to_pin_delay_seconds_bucket{{le=\"+Inf\"}} {}",
        h.count
    );
    let _ = writeln!(o, "pinnerd_event_to_pin_delay_seconds_sum {}", num(h.sum));
    let _ = writeln!(o, "pinnerd_event_to_pin_delay_seconds_count {}", h.count);
    counter(
        o,
        "pinnerd_connector_overruns_total",
        "Times the kernel dropped proc connector events (ENOBUFS); each is followed by a rescan.",
        s.counters.connector_overruns,
    );
    counter(
        o,
        "pinnerd_rescans_total",
        "Full /proc rescans.",
        s.counters.rescans,
    );
}

/// `memory = "follow"`: jobs by outcome, bytes moved, pages left, time spent.
fn memory_families(o: &mut String, s: &MetricsSnapshot) {
    let mem = &s.counters.memory;
    counters_by_outcome(
        o,
        "pinnerd_memory_migrations_total",
        "memory = \"follow\" jobs by outcome: moved, nothing (already in place, one node), refused (no room, too large), failed.",
        &MEMORY_OUTCOMES,
        &mem.migrations,
    );
    counter(
        o,
        "pinnerd_memory_moved_bytes_total",
        "Bytes memory = \"follow\" moved onto the nodes of the processes' CPUs.",
        mem.moved_bytes,
    );
    counter(
        o,
        "pinnerd_memory_pages_left_total",
        "Pages memory = \"follow\" could not move (shared without CAP_SYS_NICE, in use).",
        mem.pages_left,
    );
    counter(
        o,
        "pinnerd_memory_migration_seconds_total",
        "Time memory = \"follow\" spent moving pages.",
        num(mem.seconds),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> MetricsSnapshot {
        let mut counters = Counters::default();
        counters.pin_outcome("applied");
        counters.pin_outcome("applied");
        counters.pin_outcome("kernel-thread");
        counters.pin_outcome("something new");
        counters.event_to_pin_seconds.observe(30e-6);
        counters.event_to_pin_seconds.observe(0.2);
        counters.event_to_pin_seconds.observe(100.0);
        counters.rescans = 3;
        MetricsSnapshot {
            version: "0.1.0".into(),
            state: "ready".into(),
            levels: vec![
                ("smt".into(), Some(7.8)),
                ("llc".into(), Some(18.1)),
                ("machine".into(), Some(85.2)),
            ],
            matrix_trusted: true,
            matrix_measured_at_us: Some(1_700_000_000_000_000),
            matrix_measure_seconds: Some(42.5),
            matrix_measured_ratio: Some(0.25),
            now_us: 1_700_000_600_000_000,
            cpus: 32,
            rules: 4,
            rule_errors: 1,
            managed_processes: 2,
            managed_threads: 17,
            counters,
            nri_registered: Some(true),
        }
    }

    #[test]
    fn every_family_has_help_and_type_and_values() {
        let text = render(&sample());
        let mut families = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.push(rest.split(' ').next().unwrap().to_string());
            }
        }
        for f in &families {
            assert!(text.contains(&format!("# HELP {f} ")), "{f}");
        }
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(
                families
                    .iter()
                    .any(|f| name == f || name.starts_with(&format!("{f}_"))),
                "{line} has no family"
            );
        }
        for sample in [
            "pinnerd_state{state=\"ready\"} 1",
            "pinnerd_state{state=\"degraded\"} 0",
            "pinnerd_domain_latency_seconds{level=\"llc\"} 0.0000000181",
            "pinnerd_matrix_age_seconds 600",
            "pinnerd_matrix_measured_ratio 0.25",
            "pinnerd_matrix_completing 1",
            "pinnerd_pin_outcomes_total{outcome=\"applied\"} 2",
            "pinnerd_pin_outcomes_total{outcome=\"failed\"} 1",
            "pinnerd_pin_outcomes_total{outcome=\"refused\"} 0",
            "pinnerd_event_to_pin_delay_seconds_bucket{le=\"0.00005\"} 1",
            "pinnerd_event_to_pin_delay_seconds_bucket{le=\"0.25\"} 2",
            "pinnerd_event_to_pin_delay_seconds_bucket{le=\"60\"} 2",
            "pinnerd_event_to_pin_delay_seconds_bucket{le=\"+Inf\"} 3",
            "pinnerd_event_to_pin_delay_seconds_count 3",
            "pinnerd_rescans_total 3",
        ] {
            assert!(text.contains(&format!("{sample}\n")), "{sample} in {text}");
        }
    }

    #[test]
    fn without_a_matrix_no_latency_or_age() {
        let mut s = sample();
        s.levels = vec![("smt".into(), None), ("machine".into(), None)];
        s.matrix_trusted = false;
        s.matrix_measured_at_us = None;
        s.matrix_measure_seconds = None;
        let text = render(&s);
        assert!(!text.contains("pinnerd_domain_latency_seconds"));
        assert!(!text.contains("pinnerd_matrix_age_seconds"));
        assert!(text.contains("pinnerd_matrix_trusted 0\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = sample();
        s.version = "1\"2\\3\n".into();
        assert!(render(&s).contains("pinnerd_info{version=\"1\\\"2\\\\3\\n\"} 1\n"));
    }
}
