//! `pinnerd plan --core-type/--prefer/--near` on the fixture trees: what the CPUs are
//! and where the devices sit shape the choice, and refusals exit non-zero with a reason.

use std::path::PathBuf;

use pinnerd::sysroot::SysRoot;
use pinnerd::topology::{CoreType, Topology};
use pinnerd::CpuSet;

use super::helper::{pinnerd, Run};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn topology(name: &str) -> Topology {
    Topology::discover(&SysRoot::machine(fixture(name))).unwrap()
}

/// `pinnerd plan --json --sysfs FIXTURE ARGS…`, which must succeed.
fn plan(name: &str, args: &[&str]) -> serde_json::Value {
    let run = plan_run(name, args);
    assert!(run.ok, "{name} {args:?}: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

fn plan_run(name: &str, args: &[&str]) -> Run {
    let dir = fixture(name);
    let mut all = vec!["plan", "--json", "--sysfs", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    pinnerd(&all)
}

fn cpus(v: &serde_json::Value) -> CpuSet {
    v["cpu_list"].as_str().unwrap().parse().unwrap()
}

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

fn shaped_keys(v: &serde_json::Value) -> Vec<String> {
    v["shaped_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn performance_with_smt_avoid_gives_distinct_p_cores() {
    for name in ["i9-12900k", "hybrid-e-first"] {
        let t = topology(name);
        let p_cores = t.cpus_of_kind(CoreType::Performance);
        let v = plan(
            name,
            &[
                "--count",
                "4",
                "--smt",
                "avoid",
                "--core-type",
                "performance",
            ],
        );
        let got = cpus(&v);
        assert_eq!(got.len(), 4);
        assert!(
            got.is_subset(&p_cores),
            "{name}: {got} not within {p_cores}"
        );
        let cores: std::collections::BTreeSet<_> =
            got.iter().map(|c| t.siblings(c).unwrap().first()).collect();
        assert_eq!(cores.len(), 4, "{name}: {got} shares a core");
        assert_eq!(shaped_keys(&v), ["core-type"]);
        // Without the key the E cluster's shared L2 draws the choice off the P-cores.
        let plain = cpus(&plan(name, &["--count", "4", "--smt", "avoid"]));
        assert!(!plain.is_subset(&p_cores), "{name}: {plain}");
    }
}

#[test]
fn efficiency_compact_gives_one_e_cluster() {
    for name in ["i9-12900k", "hybrid-e-first"] {
        let t = topology(name);
        let v = plan(
            name,
            &[
                "--count",
                "4",
                "--policy",
                "compact",
                "--core-type",
                "efficiency",
            ],
        );
        let got = cpus(&v);
        let first = got.first().unwrap();
        assert_eq!(got, t.cpu(first).unwrap().cluster_cpus, "{name}");
        assert_eq!(t.kind_of(first), Some(CoreType::Efficiency));
    }
}

#[test]
fn prefer_cache_and_frequency_pick_the_two_ccds() {
    let v = plan("r9-7950x3d", &["--count", "4", "--prefer", "cache"]);
    assert!(cpus(&v).is_subset(&set("0-7,16-23")), "{}", cpus(&v));
    assert_eq!(shaped_keys(&v), ["prefer"]);
    assert!(v["shaped_by"][0]["note"]
        .as_str()
        .unwrap()
        .contains("96 MiB of L3 over 8 cores"));
    let v = plan("r9-7950x3d", &["--count", "4", "--prefer", "frequency"]);
    assert!(cpus(&v).is_subset(&set("8-15,24-31")), "{}", cpus(&v));
}

#[test]
fn near_a_device_gives_its_nodes_cpus() {
    let node1 = set("8-15,24-31");
    for dev in [
        "ens1f0",
        "0000:81:00.0",
        "nvme0n1",
        "/dev/nvme0n1",
        "/dev/block/259:0",
    ] {
        let v = plan(
            "xeon-2s-nic-nvme",
            &["--count", "4", "--smt", "avoid", "--near", dev],
        );
        assert!(cpus(&v).is_subset(&node1), "{dev}: {}", cpus(&v));
        assert_eq!(shaped_keys(&v), ["near"]);
    }
    // Larger than node 1: node 0 joins, and the note says so.
    let v = plan("xeon-2s-nic-nvme", &["--count", "20", "--near", "ens1f0"]);
    assert_eq!(cpus(&v).len(), 20);
    assert!(node1.is_subset(&cpus(&v)), "{}", cpus(&v));
    let note = v["shaped_by"][0]["note"].as_str().unwrap();
    assert!(note.contains("added node 0 (distance 21)"), "{note}");
    // No node: a warning and no restriction.
    let v = plan("xeon-2s-nic-nvme", &["--count", "4", "--near", "eno1"]);
    assert_eq!(shaped_keys(&v), Vec::<String>::new());
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("numa_node -1"), "{warnings}");
}

#[test]
fn requests_that_cannot_be_met_exit_non_zero_with_the_reason() {
    for (name, args, want) in [
        (
            "hybrid-e-first",
            &["--count", "9", "--core-type", "efficiency"][..],
            "asked for 9 efficiency CPUs but only 8 are usable",
        ),
        (
            "i9-12900k",
            &[
                "--count",
                "9",
                "--smt",
                "avoid",
                "--core-type",
                "performance",
            ][..],
            "asked for 9 performance CPUs but only 8 are usable",
        ),
        (
            "r9-7950x3d",
            &["--count", "1", "--core-type", "efficiency"][..],
            "one kind of core",
        ),
        (
            "xeon-2s-nic-nvme",
            &["--count", "2", "--near", "eth9"][..],
            "near \"eth9\": unknown device",
        ),
        (
            "xeon-2s-nic-nvme",
            &["--count", "2", "--near", "/etc/passwd"][..],
            "near \"/etc/passwd\": a path must start with /dev/",
        ),
        (
            "xeon-2s-nic-nvme",
            &["--count", "2", "--core-type", "big"][..],
            "unknown core type \"big\"",
        ),
    ] {
        let run = plan_run(name, args);
        assert!(!run.ok, "{name} {args:?} succeeded: {}", run.stdout);
        assert_ne!(run.code, 0);
        assert!(run.stderr.contains(want), "{name} {args:?}: {}", run.stderr);
    }
}

#[test]
fn the_human_plan_says_what_shaped_it() {
    let dir = fixture("xeon-2s-nic-nvme");
    let run = pinnerd(&[
        "plan",
        "--sysfs",
        dir.to_str().unwrap(),
        "--count",
        "2",
        "--core-type",
        "performance",
        "--near",
        "ens1f0",
        "--prefer",
        "cache",
    ]);
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "shaped by: core-type performance (CPUs 0-31) → near ens1f0 (CPUs 8-15,24-31) → prefer cache (CPUs 8-15,24-31)"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn rule_keys_compile_to_the_request_shape() {
    use pinnerd::rules::{self, LoadPolicy};
    use pinnerd::shape::Prefer;
    let text = r#"
[[rule]]
name = "feed"
match.comm = "feed"

[rule.place]
count = 2
core-type = "performance"
prefer = "frequency"

[[rule.threads]]
comm = "rx-*"
count = 1
near = "0000:81:00.0"
core-type = "efficiency"
"#;
    let rules = rules::compile_text(
        std::path::Path::new("t.toml"),
        text,
        &LoadPolicy::unchecked(),
    )
    .unwrap();
    let place = &rules[0].place.as_ref().unwrap().shape;
    assert_eq!(place.core_type, Some(CoreType::Performance));
    assert_eq!(place.prefer, Some(Prefer::Frequency));
    assert_eq!(place.near, None);
    let t = &rules[0].threads[0].request.shape;
    assert_eq!(t.near.as_deref(), Some("0000:81:00.0"));
    assert_eq!(t.core_type, Some(CoreType::Efficiency));
}

/// The same requests on the fixtures planned with the real published matrices of those
/// parts (`tests/fixtures/c2c-data`): the kinds and caches still decide, latency within them.
#[test]
fn published_matrices_plan_within_the_kind_and_the_cache_group() {
    let matrix = |file: &str| {
        super::placement::data_dir()
            .join(file)
            .to_str()
            .unwrap()
            .to_string()
    };
    let i9 = matrix("Intel_Core_i9-12900K.csv");
    let t = topology("i9-12900k");
    // Measured latencies alone pick an E cluster for 4 CPUs…
    let plain = cpus(&plan(
        "i9-12900k",
        &["--matrix", &i9, "-k", "4", "--smt", "avoid"],
    ));
    assert!(plain.is_subset(&set("16-23")), "{plain}");
    // …the kind keeps them on distinct P-cores.
    let v = plan(
        "i9-12900k",
        &[
            "--matrix",
            &i9,
            "-k",
            "4",
            "--smt",
            "avoid",
            "--core-type",
            "performance",
        ],
    );
    let got = cpus(&v);
    assert!(got.is_subset(&set("0-15")), "{got}");
    let cores: std::collections::BTreeSet<_> =
        got.iter().map(|c| t.siblings(c).unwrap().first()).collect();
    assert_eq!(cores.len(), 4, "{got}");
    assert!(v["worst_latency_ns"].as_f64().is_some(), "{v}");
    let e = cpus(&plan(
        "i9-12900k",
        &[
            "--matrix",
            &i9,
            "-k",
            "4",
            "--policy",
            "compact",
            "--core-type",
            "efficiency",
        ],
    ));
    assert!(e == set("16-19") || e == set("20-23"), "{e}");
    // The 7950X's matrix on the X3D-like tree (same numbering): prefer picks the CCD.
    let x = matrix("AMD_Ryzen_9_7950X.csv");
    let c = cpus(&plan(
        "r9-7950x3d",
        &["--matrix", &x, "-k", "4", "--prefer", "cache"],
    ));
    assert!(c.is_subset(&set("0-7,16-23")), "{c}");
    let f = cpus(&plan(
        "r9-7950x3d",
        &["--matrix", &x, "-k", "4", "--prefer", "frequency"],
    ));
    assert!(f.is_subset(&set("8-15,24-31")), "{f}");
}
