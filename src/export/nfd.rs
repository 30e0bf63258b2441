//! A Node Feature Discovery feature file, for
//! `/etc/kubernetes/node-feature-discovery/features.d/`: one `name=value` per line, names
//! without a prefix get `feature.node.kubernetes.io/`. Values are integers or
//! `true`/`false`, so node affinity can select with `In`, `Gt` and `Lt`.
//!
//! ```text
//! pinnerd-smt=true
//! pinnerd-llc-groups=2             distinct last-level caches (sysfs)
//! pinnerd-llc-cpus=16              CPUs in the smallest of them
//! pinnerd-matrix-trusted=true      a measured matrix is in use (not the topology alone)
//! pinnerd-latency-smt-ns=8         per latency level, rounded ns (only when trusted)
//! pinnerd-latency-llc-ns=18
//! pinnerd-latency-machine-ns=85
//! ```

use std::fmt::Write as _;

use crate::domains::{Domains, Trust};
use crate::fleet::level_labels;
use crate::topology::Topology;

/// The prefix of every feature name.
pub const PREFIX: &str = "pinnerd-";

/// The feature file for a topology and, when one is known, its latency domains.
pub fn render(t: &Topology, domains: Option<&Domains>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# pinnerd {}: CPU topology and measured core-to-core latency",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(s, "{PREFIX}smt={}", t.has_smt());
    let llc = t.llc_groups();
    if !llc.is_empty() && llc.iter().map(|g| g.len()).sum::<usize>() == t.cpus.len() {
        let _ = writeln!(s, "{PREFIX}llc-groups={}", llc.len());
        let smallest = llc.iter().map(|g| g.len()).min().unwrap_or(0);
        let _ = writeln!(s, "{PREFIX}llc-cpus={smallest}");
    }
    let trusted = domains.is_some_and(|d| d.trust() == Trust::Matrix);
    let _ = writeln!(s, "{PREFIX}matrix-trusted={trusted}");
    if let (true, Some(d)) = (trusted, domains) {
        for (label, level) in level_labels(d.levels()).iter().zip(d.levels()) {
            if let Some(ns) = level.latency_ns {
                let _ = writeln!(s, "{PREFIX}latency-{label}-ns={}", ns.round() as u64);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::sysroot::SysRoot;

    fn fixture(name: &str) -> Topology {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sysfs/");
        Topology::discover(&SysRoot::machine(format!("{dir}{name}"))).unwrap()
    }

    #[test]
    fn ryzen_with_its_matrix() {
        let t = fixture("ryzen-2700x");
        // Latencies in this machine's numbering (siblings i and i+8, CCX 0-3 and 4-7),
        // at the figures of the published 2700X matrix.
        let cpus: Vec<u32> = t.cpus.iter().map(|c| c.cpu).collect();
        let m = LatencyMatrix::from_fn(cpus.clone(), |i, j| {
            let (a, b) = (&t.cpus[i], &t.cpus[j]);
            if a.siblings.contains(b.cpu) {
                9.7
            } else if a.llc().is_some_and(|l| l.shared.contains(b.cpu)) {
                23.5 + (i + j) as f64 * 0.01
            } else {
                92.1 + (i * j) as f64 * 0.001
            }
        });
        let (d, _) = Domains::reconcile(&m, Some(&t)).unwrap();
        let out = render(&t, Some(&d));
        let lines: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(
            lines[..4],
            [
                "pinnerd-smt=true",
                "pinnerd-llc-groups=2",
                "pinnerd-llc-cpus=8",
                "pinnerd-matrix-trusted=true"
            ]
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("pinnerd-latency-smt-ns=")),
            "{out}"
        );
        assert!(lines.contains(&"pinnerd-latency-machine-ns=92"), "{out}");
        for l in &lines {
            let (name, value) = l.split_once('=').unwrap();
            assert!(
                name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "{l}"
            );
            assert!(value.bytes().all(|b| b.is_ascii_alphanumeric()), "{l}");
        }
    }

    #[test]
    fn without_a_matrix_only_the_topology() {
        let t = fixture("container-no-cache");
        let d = Domains::from_topology(&t).unwrap();
        let out = render(&t, Some(&d));
        assert!(out.contains("pinnerd-matrix-trusted=false\n"), "{out}");
        assert!(!out.contains("pinnerd-latency"), "{out}");
        assert!(!out.contains("llc-"), "no cache information: {out}");
    }
}
