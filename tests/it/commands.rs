//! The commands over latency domains, run as a user runs them: `plan` (with a matrix
//! file, a fixture tree, the topology alone), `topology --matrix` and `compare`.

use std::path::{Path, PathBuf};

use pinnerd::domains::{Domains, Trust};
use pinnerd::matrix::LatencyMatrix;

use super::domains::Rng;
use super::helper::{pinnerd, Run};
use super::placement::{data_dir, load};

fn fixture(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sysfs")).join(name)
}

/// A matrix for the dual Xeon E5620 fixture (sockets even/odd, siblings i and i+8):
/// 8 ns between siblings, 35 ns in a socket, 110 ns across.
fn e5620_matrix(dir: &Path) -> PathBuf {
    let m = LatencyMatrix::from_fn((0..16).collect(), |i, j| {
        if i % 8 == j % 8 {
            8.0 + (i + j) as f64 * 0.01
        } else if i % 2 == j % 2 {
            35.0 + ((i * 7 + j * 3) % 5) as f64 * 0.3
        } else {
            110.0 + ((i + j) % 3) as f64
        }
    });
    let path = dir.join("e5620.json");
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    path
}

#[test]
fn plan_json_explains_against_autopilot_on_a_dual_socket_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = e5620_matrix(dir.path());
    let sysfs = fixture("xeon-e5620");
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "plan",
        "--count",
        "2",
        "--smt",
        "avoid",
        "--json",
        "--sysfs",
        sysfs.to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cpus: Vec<u64> = v["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(cpus.len(), 2);
    assert_eq!(cpus[0] % 2, cpus[1] % 2, "one package: {cpus:?}");
    assert_ne!(cpus[0] % 8, cpus[1] % 8, "not siblings: {cpus:?}");
    let worst = v["worst_latency_ns"].as_f64().unwrap();
    assert!((35.0..37.0).contains(&worst), "{v}");
    assert!(v["mean_latency_ns"].as_f64().is_some());
    assert_eq!(v["autopilot"]["cpus"], serde_json::json!([0, 1]));
    assert!(
        v["autopilot"]["worst_latency_ns"].as_f64().unwrap() >= 110.0,
        "{v}"
    );
    assert_eq!(v["trust"], "matrix");
    assert_eq!(v["findings"], serde_json::json!([]));

    // The human form names the domain, its cost and the autopilot's.
    let Run {
        ok, stdout: out, ..
    } = pinnerd(&[
        "plan",
        "-k",
        "2",
        "--sysfs",
        sysfs.to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
    ]);
    assert!(ok);
    assert!(out.starts_with("CPUs 0,8 "), "{out}");
    assert!(out.contains("domain:    smt 0,8"), "{out}");
    assert!(
        out.contains("autopilot: CPUs 0-1 would cost worst 111.0 ns"),
        "{out}"
    );
}

#[test]
fn plan_trusts_sysfs_over_a_noise_matrix_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let m = LatencyMatrix::from_fn((0..16).collect(), |_, _| 200.0 + 5000.0 * rng.next());
    let path = dir.path().join("noise.json");
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    let sysfs = fixture("xeon-e5620");
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "plan",
        "-k",
        "2",
        "--smt",
        "avoid",
        "--json",
        "--sysfs",
        sysfs.to_str().unwrap(),
        "--matrix",
        path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cpus"], serde_json::json!([0, 2]), "{v}");
    assert_eq!(v["trust"], "topology");
    assert_eq!(v["worst_latency_ns"], serde_json::Value::Null);
    assert_eq!(v["findings"][0]["kind"], "noise", "{v}");
}

#[test]
fn plan_without_a_matrix_on_a_fixture_says_it_uses_the_topology_alone() {
    let sysfs = fixture("i9-12900k");
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "plan",
        "-k",
        "4",
        "--smt",
        "avoid",
        "--sysfs",
        sysfs.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("sysfs topology alone"), "{out}");
    assert!(out.contains("worst unknown"), "{out}");
}

#[test]
fn plan_bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = e5620_matrix(dir.path());
    let sysfs = fixture("xeon-e5620");
    let s = sysfs.to_str().unwrap();
    let m = matrix.to_str().unwrap();
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["plan", "-k", "0", "--sysfs", s, "--matrix", m]);
    assert!(!ok);
    assert!(err.contains("count must be at least 1"), "{err}");
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["plan", "-k", "17", "--sysfs", s, "--matrix", m]);
    assert!(!ok);
    assert!(
        err.contains("asked for 17 CPUs but only 16 are usable"),
        "{err}"
    );
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&[
        "plan",
        "-k",
        "2",
        "--exclude",
        "0-15",
        "--sysfs",
        s,
        "--matrix",
        m,
    ]);
    assert!(!ok);
    assert!(
        err.contains("asked for 2 CPUs but only 0 are usable"),
        "{err}"
    );
    // A 24-CPU machine and a 16-CPU matrix.
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&[
        "plan",
        "-k",
        "2",
        "--sysfs",
        fixture("i9-12900k").to_str().unwrap(),
        "--matrix",
        m,
    ]);
    assert!(!ok);
    assert!(
        err.contains(
            "latency matrix covers CPUs 0-15 (16) but the topology's online CPUs are 0-23 (24)"
        ),
        "{err}"
    );
    // Negative and non-numeric cells name the file and line.
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, ",,\n10,,\n20,-3,\n").unwrap();
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["plan", "-k", "2", "--matrix", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.csv:3: cell 2: -3 is not a latency"),
        "{err}"
    );
    let nan = dir.path().join("nan.csv");
    std::fs::write(&nan, ",,\n10,,\n20,NaN,\n").unwrap();
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["plan", "-k", "2", "--matrix", nan.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("nan.csv: latency matrix is missing 1 of 3 pairs (zero, NaN or null cells), e.g. CPUs 1 and 2"),
        "{err}"
    );
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["plan", "--live", "--rules", "/nonexistent/pinnerd.d"]);
    assert!(!ok);
    assert!(
        err.contains("/nonexistent/pinnerd.d: no such rule directory"),
        "{err}"
    );
}

#[test]
fn topology_with_a_matrix_lists_domains_finest_first() {
    let file = data_dir().join("AMD_Ryzen_9_5950X_at_3.40_GHz.csv");
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&["topology", "--json", "--matrix", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let levels = v["domains"].as_array().unwrap();
    let names: Vec<&str> = levels
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["smt", "llc", "machine"]);
    assert_eq!(levels[0]["groups"].as_array().unwrap().len(), 16);
    assert_eq!(levels[1]["groups"].as_array().unwrap().len(), 2);
    assert_eq!(levels[2]["groups"][0].as_array().unwrap().len(), 32);
    let lat: Vec<f64> = levels
        .iter()
        .map(|l| l["latency_ns"].as_f64().unwrap())
        .collect();
    assert!(lat[0] < 10.0 && lat[1] < 25.0 && lat[2] > 80.0, "{lat:?}");
    assert!(v["cpus"].is_array(), "the topology report is still there");

    // On the fixture the matrix was measured for, domains are reconciled and named.
    let dir = tempfile::tempdir().unwrap();
    let matrix = e5620_matrix(dir.path());
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "topology",
        "--sysfs",
        fixture("xeon-e5620").to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("latency domains from"), "{out}");
    assert!(out.contains("(trusted: Matrix)"), "{out}");
    assert!(out.contains("package"), "{out}");
}

#[test]
fn compare_runs_here_and_reports_every_variant() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "compare",
        "--runs",
        "2",
        "--duration-ms",
        "200",
        "--no-measure",
        "--json",
        "--state-dir",
        "/nonexistent-pinnerd-state",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let variants = v["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["planned", "autopilot", "worst", "unpinned"]);
    for x in variants {
        let runs = x["ops_per_s"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        assert!(runs.iter().all(|r| r.as_f64().unwrap() > 0.0), "{x}");
    }
    assert_eq!(variants[1]["cpus"], serde_json::json!([0, 1]));
    assert!(v["ratios"]["planned_vs_autopilot"].as_f64().unwrap() > 0.0);
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&["compare", "--count", "1"]);
    assert!(!ok);
    assert!(err.contains("--count must be at least 2"), "{err}");
}

#[test]
fn domains_from_real_sysfs_fixtures() {
    use pinnerd::sysroot::SysRoot;
    use pinnerd::topology::Topology;
    let root = SysRoot::machine(fixture("xeon-e5620"));
    let t = Topology::discover(&root).unwrap();
    let d = Domains::from_topology(&t).unwrap();
    let names: Vec<String> = d.levels().iter().map(|l| l.name()).collect();
    assert_eq!(names[0], "smt", "{names:?}");
    assert_eq!(d.levels()[0].groups[0].to_string(), "0,8");
    assert!(names[1].contains("package"), "{names:?}");
    assert_eq!(d.levels()[1].groups[0].to_string(), "0,2,4,6,8,10,12,14");
    // The matching matrix reconciles without findings.
    let dir = tempfile::tempdir().unwrap();
    let m = LatencyMatrix::load(&e5620_matrix(dir.path())).unwrap();
    let (r, findings) = Domains::reconcile(&m, Some(&t)).unwrap();
    assert_eq!(r.trust(), Trust::Matrix);
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(r.levels().len(), 3);
    // A Windows-numbered matrix of a 2700X against the 2700X's Linux sysfs.
    let t = Topology::discover(&SysRoot::machine(fixture("ryzen-2700x"))).unwrap();
    let m = load("AMD_Ryzen_7_2700X_Eight-Core_Processor.csv");
    let (r, findings) = Domains::reconcile(&m, Some(&t)).unwrap();
    assert_eq!(r.trust(), Trust::Topology);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].message.contains("another CPU numbering"),
        "{}",
        findings[0]
    );
}

#[test]
fn offline_and_isolated_cpus_are_never_planned() {
    // i7-7700 fixture: CPU 3 offline, CPU 6 isolated; siblings i and i+4.
    let dir = tempfile::tempdir().unwrap();
    let sysfs = fixture("i7-7700-cpu3-offline");
    let matrix_over = |cpus: Vec<u32>, name: &str| -> PathBuf {
        let ids = cpus.clone();
        let m = LatencyMatrix::from_fn(
            cpus,
            |i, j| if ids[i] % 4 == ids[j] % 4 { 7.0 } else { 20.0 },
        );
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
        path
    };
    // Measured on the usable CPUs only (what `pinnerd measure` does by default), or on
    // every online CPU: both fit; the isolated CPU is never chosen.
    for m in [
        matrix_over(vec![0, 1, 2, 4, 5, 7], "usable.json"),
        matrix_over(vec![0, 1, 2, 4, 5, 6, 7], "online.json"),
    ] {
        let Run {
            ok,
            stdout: out,
            stderr: err,
            ..
        } = pinnerd(&[
            "plan",
            "-k",
            "6",
            "--json",
            "--sysfs",
            sysfs.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["cpu_list"], "0-2,4-5,7", "{v}");
        assert_eq!(v["trust"], "matrix", "{v}");
        let Run {
            ok, stderr: err, ..
        } = pinnerd(&[
            "plan",
            "-k",
            "7",
            "--sysfs",
            sysfs.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
        ]);
        assert!(!ok);
        assert!(
            err.contains("asked for 7 CPUs but only 6 are usable"),
            "{err}"
        );
    }
    // A matrix that includes the offline CPU does not fit this machine.
    let m = matrix_over(vec![0, 1, 2, 3, 4, 5, 6, 7], "all.json");
    let Run {
        ok, stderr: err, ..
    } = pinnerd(&[
        "plan",
        "-k",
        "2",
        "--sysfs",
        sysfs.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains(
            "latency matrix covers CPUs 0-7 (8) but the topology's online CPUs are 0-2,4-7 (7)"
        ),
        "{err}"
    );
}

#[test]
fn plan_uses_the_stored_cells_of_the_usable_cpus_and_not_a_matrix_lacking_some() {
    use pinnerd::fingerprint::Fingerprint;
    use pinnerd::matrix::store::MatrixStore;
    use pinnerd::sysroot::SysRoot;
    let _cpus = super::cpus_stay_online();
    let fp = Fingerprint::read(&SysRoot::default()).unwrap();
    let online: Vec<u32> = fp.inputs.online.iter().collect();
    let dir = tempfile::tempdir().unwrap();
    let store = MatrixStore::open(dir.path()).unwrap();
    let plan = || {
        pinnerd(&[
            "plan",
            "--count",
            "2",
            "--no-measure",
            "--state-dir",
            dir.path().to_str().unwrap(),
        ])
    };
    // Stored with a CPU that is not online (its cells kept for when it comes back).
    let mut with_offline: Vec<u32> = online.clone();
    with_offline.push(online.last().unwrap() + 100);
    let mut m = LatencyMatrix::from_fn(with_offline, |i, j| if i + j == 1 { 9.0 } else { 50.0 });
    m.fingerprint = Some(fp.hex.clone());
    store.save(&m).unwrap();
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = plan();
    assert!(ok, "{err}");
    assert!(out.contains("stored matrix"), "{out}");
    // Stored without a pair of online CPUs: not used, and the plan says why.
    let mut lacking = LatencyMatrix::from_fn(online.clone(), |_, _| 9.0);
    lacking.latency_ns.set(0, 1, None);
    lacking.fingerprint = Some(fp.hex.clone());
    store.save(&lacking).unwrap();
    let Run {
        ok,
        stdout: out,
        stderr: err,
        ..
    } = plan();
    assert!(ok, "{err}");
    assert!(out.contains("sysfs topology alone"), "{out}");
    assert!(out.contains("lacks 1 pair(s)"), "{out}{err}");
}
