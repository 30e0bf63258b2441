//! The Prometheus text pinnerd writes, checked by the real tools: `promtool check
//! metrics` (package `prometheus`) lints names, units, HELP and TYPE.

use std::io::Write;
use std::process::{Command, Stdio};

use pinnerd::metrics::{render, Counters, MetricsSnapshot};

/// `promtool check metrics` on `text`: its exit status and what it said.
pub fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (package prometheus) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && said.trim().is_empty(), said)
}

fn busy_snapshot() -> MetricsSnapshot {
    let mut counters = Counters::default();
    for kind in ["applied", "applied", "narrowed", "gone", "permission"] {
        counters.pin_outcome(kind);
    }
    for v in [12e-6, 80e-6, 3e-3, 0.7, 59.0] {
        counters.event_to_pin_seconds.observe(v);
    }
    counters.connector_overruns = 2;
    counters.rescans = 5;
    MetricsSnapshot {
        version: env!("CARGO_PKG_VERSION").into(),
        state: "ready".into(),
        levels: vec![
            ("smt".into(), Some(7.8)),
            ("llc".into(), Some(18.1)),
            ("machine".into(), Some(85.2)),
        ],
        matrix_trusted: true,
        matrix_measured_at_us: Some(1_763_000_000_000_000),
        matrix_measure_seconds: Some(31.5),
        now_us: 1_763_000_100_000_000,
        cpus: 32,
        rules: 3,
        rule_errors: 0,
        managed_processes: 2,
        managed_threads: 40,
        counters,
    }
}

#[test]
fn promtool_accepts_the_rendered_metrics() {
    let text = render(&busy_snapshot());
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics:\n{said}\non:\n{text}");
    // And it is not a linter that accepts anything: a counter without `_total` and a
    // family without HELP are reported.
    let bad = "# TYPE pinnerd_rescans counter\npinnerd_rescans 1\n";
    let (ok, said) = promtool_check(bad);
    assert!(!ok, "promtool accepted a bad counter: {said}");
}
