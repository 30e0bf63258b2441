//! A host that moves its vCPUs, simulated (`measure --simulate FILE --moves-every N`
//! on a published matrix): the repeat check marks the matrix unstable, and `plan`,
//! `plan --live`, `compare` and `report` on it say "the host moves vCPUs: latency
//! placement off" first and claim no gain. The same file simulated without moves is
//! stable and planned on as before.

use std::path::{Path, PathBuf};

use super::helper::{pinnerd, Run};

const LINE: &str = "the host moves vCPUs: latency placement off";

fn ryzen() -> PathBuf {
    super::placement::data_dir().join("AMD_Ryzen_7_2700X_Eight-Core_Processor.csv")
}

/// `measure --simulate` of the Ryzen file into `dir/NAME`, moving or not.
fn simulated(dir: &Path, name: &str, moves_every: Option<&str>) -> PathBuf {
    let out = dir.join(name);
    let (file, path) = (ryzen(), out.to_str().unwrap().to_string());
    let mut args = vec![
        "measure",
        "--simulate",
        file.to_str().unwrap(),
        "--out",
        &path,
    ];
    if let Some(n) = moves_every {
        args.extend(["--moves-every", n]);
    }
    let r = pinnerd(&args);
    assert!(r.ok, "{}", r.stderr);
    out
}

fn ok(r: Run) -> Run {
    assert!(r.ok, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

#[test]
fn a_simulated_moving_host_is_marked_unstable_and_a_still_one_is_not() {
    let file = ryzen();
    let f = file.to_str().unwrap();
    let moving = ok(pinnerd(&[
        "measure",
        "--simulate",
        f,
        "--moves-every",
        "20",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&moving.stdout).unwrap();
    let s = &v["stability"];
    assert_eq!(s["verdict"], "unstable", "{s}");
    assert_eq!(
        s["vm"], true,
        "a host that moves vCPUs is a virtual machine"
    );
    assert!(s["disagreeing"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["tolerance"], 0.25);
    assert_eq!(s["bound"], 0.25);
    let human = ok(pinnerd(&[
        "measure",
        "--simulate",
        f,
        "--moves-every",
        "20",
    ]));
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("repeat check: ") && l.ends_with(LINE)),
        "{}",
        human.stdout
    );

    let still = ok(pinnerd(&["measure", "--simulate", f, "--json"]));
    let v: serde_json::Value = serde_json::from_str(&still.stdout).unwrap();
    assert_eq!(v["stability"]["verdict"], "stable", "{}", v["stability"]);
    assert!(!still.stdout.contains(LINE));

    // A move interval of 0 is refused, in words naming the flag.
    let bad = pinnerd(&["measure", "--simulate", f, "--moves-every", "0"]);
    assert!(!bad.ok);
    assert!(bad.stderr.contains("--moves-every"), "{}", bad.stderr);
}

#[test]
fn plan_on_an_unstable_matrix_says_so_first_and_claims_no_gain() {
    let d = tempfile::tempdir().unwrap();
    let unstable = simulated(d.path(), "moving.json", Some("20"));
    let stable = simulated(d.path(), "still.json", None);

    // The still host: planned on its matrix, the gain over autopilot shown.
    let r = ok(pinnerd(&[
        "plan",
        "--count",
        "2",
        "--matrix",
        stable.to_str().unwrap(),
    ]));
    assert!(!r.stdout.contains(LINE), "{}", r.stdout);
    assert!(r.stdout.contains("x the plan's worst"), "{}", r.stdout);

    let r = ok(pinnerd(&[
        "plan",
        "--count",
        "2",
        "--matrix",
        unstable.to_str().unwrap(),
    ]));
    assert_eq!(r.stdout.lines().next(), Some(LINE), "{}", r.stdout);
    assert!(!r.stdout.contains("x the plan's worst"), "{}", r.stdout);
    assert!(r.stdout.contains("(trusted: Topology)"), "{}", r.stdout);

    let r = ok(pinnerd(&[
        "plan",
        "--count",
        "2",
        "--json",
        "--matrix",
        unstable.to_str().unwrap(),
    ]));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["latency_off"], LINE);
    assert_eq!(v["trust"], "topology");
    let r = ok(pinnerd(&[
        "plan",
        "--count",
        "2",
        "--json",
        "--matrix",
        stable.to_str().unwrap(),
    ]));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["latency_off"], serde_json::Value::Null);
}

#[test]
fn plan_live_on_an_unstable_matrix_says_in_its_first_line_that_it_places_on_the_topology() {
    let d = tempfile::tempdir().unwrap();
    let unstable = simulated(d.path(), "moving.json", Some("20"));
    let rules = d.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let settings = d.path().join("absent.toml");
    let args = |json: bool| {
        let mut a = vec![
            "plan".to_string(),
            "--live".into(),
            "--matrix".into(),
            unstable.to_str().unwrap().into(),
            "--rules".into(),
            rules.to_str().unwrap().into(),
            "--config".into(),
            settings.to_str().unwrap().into(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let human = args(false);
    let r = ok(pinnerd(
        &human.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    // The dry run's first line says where placement comes from: the topology, and why.
    let first = format!("dry run: nothing was changed; placement from sysfs topology: {LINE} (");
    assert!(
        r.stdout
            .lines()
            .next()
            .is_some_and(|l| l.starts_with(&first)),
        "{}",
        r.stdout
    );
    let json = args(true);
    let r = ok(pinnerd(
        &json.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["latency_off"], LINE);
}

#[test]
fn compare_on_an_unstable_matrix_shows_the_runs_and_no_gain() {
    let d = tempfile::tempdir().unwrap();
    let unstable = simulated(d.path(), "moving.json", Some("20"));
    let m = unstable.to_str().unwrap();
    let _spin = crate::one_spinner_at_a_time();
    let r = ok(pinnerd(&[
        "compare",
        "--matrix",
        m,
        "--runs",
        "1",
        "--duration-ms",
        "20",
    ]));
    assert_eq!(r.stdout.lines().next(), Some(LINE), "{}", r.stdout);
    assert!(!r.stdout.contains("ratios of medians"), "{}", r.stdout);
    assert!(r.stdout.contains("no gain claimed"), "{}", r.stdout);
    assert!(
        r.stdout.contains("planned "),
        "the runs are shown: {}",
        r.stdout
    );
    let r = ok(pinnerd(&[
        "compare",
        "--matrix",
        m,
        "--runs",
        "1",
        "--duration-ms",
        "20",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["latency_off"], LINE);
    assert_eq!(v["ratios"], serde_json::Value::Null);
    assert_eq!(v["variants"].as_array().unwrap().len(), 4);
}

#[test]
fn report_on_an_unstable_matrix_says_so_first_and_shows_no_gain() {
    let d = tempfile::tempdir().unwrap();
    let unstable = simulated(d.path(), "moving.json", Some("20"));
    let stable = simulated(d.path(), "still.json", None);
    let report = |m: &Path, out: &str| {
        let out = d.path().join(out);
        let r = ok(pinnerd(&[
            "report",
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        let json = std::fs::read_to_string(out.join("report.json")).unwrap();
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        (
            r,
            serde_json::from_str::<serde_json::Value>(&json).unwrap(),
            html,
        )
    };
    let ratios = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["plans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ratio"].clone())
            .collect()
    };

    let (r, v, html) = report(&stable, "still");
    assert!(!r.stdout.contains(LINE));
    assert!(v.get("latency_off").is_none(), "{}", v["latency_off"]);
    assert!(ratios(&v).iter().any(|x| x.is_number()), "{:?}", ratios(&v));
    assert!(!html.contains(LINE));

    let (r, v, html) = report(&unstable, "moving");
    assert_eq!(r.stdout.lines().next(), Some(LINE), "{}", r.stdout);
    assert_eq!(v["latency_off"], LINE);
    assert!(!v["plans"].as_array().unwrap().is_empty());
    assert!(ratios(&v).iter().all(|x| x.is_null()), "{:?}", ratios(&v));
    assert!(html.contains(LINE));
}

/// The real daemon on a stored matrix that its repeat check found unstable: it uses it
/// without measuring again, places on the topology, and `pinnerd status` and the
/// `LatencyOff` property say so first.
#[test]
fn the_daemon_on_a_stored_unstable_matrix_says_so_in_its_status() {
    use super::daemon::{Bus, Daemon, Dirs, Policy};
    let _cpus = super::cpus_stay_online();
    let _spin = crate::one_spinner_at_a_time();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let measured = d.wait_measured(&bus, "");
    assert!(d.stop().success());

    // The stored matrix, as if its repeat check had found the vCPUs moving.
    let path = dirs.state().join("matrix.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["stability"] = serde_json::json!({
        "repeated": 1, "disagreeing": 1, "nearest_moved": 1, "tolerance": 0.25,
        "bound": 0.25, "verdict": "unstable", "vm": true,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();

    let d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("MeasuredAt"), measured, "the stored matrix is used");
    assert_eq!(
        bus.get("LatencyOff"),
        format!("s \"{LINE}\""),
        "log:\n{}",
        d.log()
    );
    let r = ok(pinnerd(&["status", &format!("--bus={}", bus.address)]));
    assert_eq!(r.stdout.lines().next(), Some(LINE), "{}", r.stdout);
    assert!(d.stop().success());
}
