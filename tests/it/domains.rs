//! Domains where the matrix alone would mislead: emulated noise (trust sysfs instead), a
//! real matrix that splits a cache, NUMA-home artefacts, outlier cells, topology-only
//! domains, and `plan` finding E-core clusters and hidden siblings in matrix files.

use std::path::Path;

use pinnerd::domains::{Domains, FindingKind, Layout, LevelKind, Trust};
use pinnerd::matrix::LatencyMatrix;
use pinnerd::placement::{place, Policy, Request, SmtPolicy};
use pinnerd::CpuSet;

use super::placement::{all, load};

/// `-smp 8,sockets=2,cores=2,threads=2`: siblings (0,1),(2,3)..., sockets 0-3 and 4-7.
pub(super) fn qemu_layout() -> Layout {
    let sets = |s: &str| -> Vec<CpuSet> { s.split(' ').map(|g| g.parse().unwrap()).collect() };
    Layout {
        cpus: "0-7".parse().unwrap(),
        levels: vec![
            (LevelKind::Smt, sets("0-1 2-3 4-5 6-7")),
            (LevelKind::Cache, sets("0-3 4-7")),
            (LevelKind::Package, sets("0-3 4-7")),
            (LevelKind::Node, sets("0-3 4-7")),
        ],
    }
}

/// A deterministic pseudo-random sequence (xorshift), for noise.
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn a_vm_noise_matrix_leads_to_trusting_sysfs() {
    let layout = qemu_layout();
    // What a TCG guest measures: hundreds of ns to µs, no structure.
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let m = LatencyMatrix::from_fn((0..8).collect(), |_, _| 300.0 + 3000.0 * rng.next());
    let (d, findings) = Domains::reconcile_layout(&m, Some(&layout)).unwrap();
    assert_eq!(d.trust(), Trust::Topology);
    let noise: Vec<_> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::Noise)
        .collect();
    assert_eq!(noise.len(), 1, "{findings:?}");
    assert!(
        noise[0].message.contains("sysfs topology is trusted"),
        "{}",
        noise[0]
    );
    let req = Request {
        count: 2,
        smt: SmtPolicy::Avoid,
        ..Default::default()
    };
    let p = place(&d, &req, &all(&d)).unwrap();
    let c: Vec<u32> = p.cpus.iter().collect();
    assert_eq!(c.len(), 2);
    assert_ne!(c[0] / 2, c[1] / 2, "siblings chosen: {}", p.cpus);
    assert_eq!(c[0] / 4, c[1] / 4, "not one package: {}", p.cpus);
    assert_eq!(
        p.explanation.cost.worst_ns, None,
        "no latency from a noise matrix"
    );
    // Without any matrix the same answer comes from sysfs alone.
    let t = Domains::from_layout(&layout).unwrap();
    assert_eq!(place(&t, &req, &all(&t)).unwrap().cpus, p.cpus);
}

#[test]
fn a_real_matrix_that_splits_an_llc_is_trusted_and_reported() {
    // 5950X: sysfs made to claim one LLC over both CCDs; the matrix shows two halves.
    let m = load("AMD_Ryzen_9_5950X_at_3.40_GHz.csv");
    let md = Domains::from_matrix(&m).unwrap();
    let smt = md.levels()[0].groups.clone();
    let layout = Layout {
        cpus: "0-31".parse().unwrap(),
        levels: vec![
            (LevelKind::Smt, smt),
            (LevelKind::Cache, vec!["0-31".parse().unwrap()]),
            (LevelKind::Package, vec!["0-31".parse().unwrap()]),
        ],
    };
    let (d, findings) = Domains::reconcile_layout(&m, Some(&layout)).unwrap();
    assert_eq!(d.trust(), Trust::Matrix);
    assert!(
        findings
            .iter()
            .any(|f| f.kind == FindingKind::SplitsGroup && f.message.contains("llc")),
        "{findings:?}"
    );
    assert!(d
        .levels()
        .iter()
        .any(|l| l.groups.len() == 2 && l.latency_ns.unwrap() < 25.0));
}

#[test]
fn sysfs_sockets_confirm_the_numa_home_artefact() {
    let m = load("AMD_EPYC_7R13_48-Core_Processor.csv");
    let sets = |f: &dyn Fn(u32) -> u32, groups: u32| -> Vec<CpuSet> {
        (0..groups)
            .map(|g| (0..192).filter(|&c| f(c) == g).collect())
            .collect()
    };
    let layout = Layout {
        cpus: "0-191".parse().unwrap(),
        levels: vec![
            (LevelKind::Smt, sets(&|c| c % 96, 96)),
            (LevelKind::Cache, sets(&|c| (c % 96) / 8, 12)),
            (LevelKind::Package, sets(&|c| (c % 96) / 48, 2)),
        ],
    };
    let (d, findings) = Domains::reconcile_layout(&m, Some(&layout)).unwrap();
    assert_eq!(d.trust(), Trust::Matrix);
    assert!(
        findings.iter().any(|f| f.kind == FindingKind::NumaHome),
        "{findings:?}"
    );
    let pkg = d
        .levels()
        .iter()
        .find(|l| l.kind == LevelKind::Package || l.also.contains(&LevelKind::Package));
    assert_eq!(pkg.unwrap().groups.len(), 2);
    assert!(!findings.iter().any(|f| f.kind == FindingKind::Noise));
}

#[test]
fn clustering_survives_noise_and_outlier_cells() {
    for file in [
        "AMD_EPYC_7R13_48-Core_Processor.csv",
        "Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
        "AMD_Ryzen_Threadripper_1950X.csv",
        "AMD_EPYC_7773X.csv",
    ] {
        let clean = load(file);
        let want = Domains::from_matrix(&clean).unwrap();
        let mut rng = Rng(42);
        let mut noisy = clean.clone();
        let n = noisy.len();
        for i in 0..n {
            for j in 0..i {
                let mut v = noisy.latency_ns.get(i, j).unwrap() * (0.95 + 0.1 * rng.next());
                // 0.5% of the cells ruined by preemption: 3x to 8x their value.
                if rng.next() < 0.005 {
                    v *= 3.0 + 5.0 * rng.next();
                }
                noisy.latency_ns.set(i, j, Some(v));
            }
        }
        let got = Domains::from_matrix(&noisy).unwrap();
        // Every level above SMT is recovered exactly (an SMT pair whose one cell was
        // ruined may be lost: one cell is all the evidence there is).
        let coarse = |d: &Domains| -> Vec<Vec<CpuSet>> {
            d.levels()
                .iter()
                .filter(|l| l.kind != LevelKind::Smt)
                .map(|l| l.groups.clone())
                .collect()
        };
        assert_eq!(coarse(&got), coarse(&want), "{file}");
        let pairs = |d: &Domains| d.levels()[0].groups.iter().filter(|g| g.len() == 2).count();
        assert!(
            pairs(&got) * 100 >= pairs(&want) * 97,
            "{file}: {} vs {}",
            pairs(&got),
            pairs(&want)
        );
    }
}

#[test]
fn topology_only_domains_place_by_level() {
    let t = Domains::from_layout(&qemu_layout()).unwrap();
    let names: Vec<String> = t.levels().iter().map(|l| l.name()).collect();
    assert_eq!(names, ["smt", "llc = package = node", "machine"]);
    let p = place(
        &t,
        &Request {
            count: 2,
            ..Default::default()
        },
        &all(&t),
    )
    .unwrap();
    assert_eq!(p.cpus.to_string(), "0-1");
    let p = place(
        &t,
        &Request {
            count: 2,
            policy: Policy::Spread,
            ..Default::default()
        },
        &all(&t),
    )
    .unwrap();
    assert_eq!(p.cpus.to_string(), "0,4");
}

/// A matrix file in pinnerd's JSON form from a cell function.
fn write_matrix(path: &Path, n: usize, f: impl Fn(usize, usize) -> f64) {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let cells: Vec<String> = (0..n)
                .map(|j| match i == j {
                    true => "null".to_string(),
                    false => format!("{:.1}", f(i.max(j), i.min(j))),
                })
                .collect();
            format!("[{}]", cells.join(","))
        })
        .collect();
    let cpus: Vec<String> = (0..n).map(|c| c.to_string()).collect();
    let json = format!(
        r#"{{"cpus": [{}], "latency_ns": [{}]}}"#,
        cpus.join(","),
        rows.join(",")
    );
    std::fs::write(path, json).unwrap();
}

#[test]
fn plan_finds_e_clusters_and_hidden_siblings_in_matrix_files() {
    let dir = tempfile::tempdir().unwrap();
    // Hybrid: P-cores 0-15 (siblings 2k/2k+1, 30 ns apart), E clusters 16-19 and 20-23
    // (45 ns inside, 62 ns across), P to E 50 ns.
    let hybrid = dir.path().join("hybrid.json");
    write_matrix(&hybrid, 24, |a, b| match (a >= 16, b >= 16) {
        (false, _) if a / 2 == b / 2 => 4.5,
        (false, _) => 30.0,
        (true, false) => 50.0,
        _ if (a - 16) / 4 == (b - 16) / 4 => 45.0,
        _ => 62.0,
    });
    let h = hybrid.to_str().unwrap();
    let o = super::helper::pinnerd(&[
        "plan", "-k", "4", "--policy", "spread", "--matrix", h, "--json",
    ]);
    assert!(o.ok, "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["cpus"], serde_json::json!([0, 2, 16, 20]), "{}", o.stdout);
    // 64 CPUs, siblings i and i+32, the cell of 5 and 37 ruined.
    let smt = dir.path().join("smt.json");
    write_matrix(&smt, 64, |a, b| match (a, b) {
        (37, 5) => 140.0,
        _ if a % 32 == b % 32 => 6.0,
        _ if (a % 32) / 16 == (b % 32) / 16 => 45.0,
        _ => 130.0,
    });
    let s = smt.to_str().unwrap();
    let o = super::helper::pinnerd(&[
        "plan", "-k", "32", "--smt", "avoid", "--matrix", s, "--json",
    ]);
    assert!(o.ok, "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let cpus: Vec<u64> = v["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(cpus.len(), 32);
    assert!(!(cpus.contains(&5) && cpus.contains(&37)), "{cpus:?}");
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["kind"] == "outlier-cell"
            && f["message"]
                .as_str()
                .unwrap()
                .starts_with("the cell of CPUs 5 and 37 reads 140.0 ns")),
        "{findings:?}"
    );
    let o = super::helper::pinnerd(&["plan", "-k", "33", "--smt", "avoid", "--matrix", s]);
    assert!(!o.ok, "{o:?}");
    assert!(
        o.stderr.contains("only 32 are usable (one CPU per core"),
        "{}",
        o.stderr
    );
}
