//! One truth per setting and command: `plan --live` takes the directories `plan` takes,
//! `run --print` says why it used the topology alone without naming a flag nobody
//! gave, and the idle threshold has one unit in the settings and on the command line.

use std::path::Path;

use super::helper::pinnerd;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

#[test]
fn plan_live_takes_a_captured_machine_directory_as_plan_does() {
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule(
        "10-a.toml",
        "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"ot-no-such-app\"\n[rule.place]\ncount = 2\nsmt = \"avoid\"\n",
    );
    let config = dirs.root.path().join("none.toml");
    let live = |sysfs: &Path| {
        pinnerd(&[
            "plan",
            "--live",
            "--rules",
            dirs.rules().to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--sysfs",
            sysfs.to_str().unwrap(),
        ])
    };
    let machine = live(&fixture("xeon-e5620"));
    assert!(machine.ok, "{machine:?}");
    let sys = live(&fixture("xeon-e5620").join("sys"));
    assert!(sys.ok, "{sys:?}");
    assert_eq!(machine.stdout, sys.stdout);
    assert!(
        machine.stdout.contains("a (priority 0): cpus 0,2\n"),
        "{}",
        machine.stdout
    );
    // And `plan` itself, for the same directory.
    let plan = pinnerd(&[
        "plan",
        "--count",
        "2",
        "--smt",
        "avoid",
        "--no-measure",
        "--sysfs",
        fixture("xeon-e5620").to_str().unwrap(),
    ]);
    assert!(plan.ok, "{plan:?}");
}

#[test]
fn run_print_says_why_it_used_the_topology_without_claiming_a_flag() {
    let state = tempfile::tempdir().unwrap();
    let out = pinnerd(&[
        "run",
        "--bus",
        "unix:path=/nonexistent/pinnerd-test-bus",
        "--count",
        "1",
        "--state-dir",
        state.path().to_str().unwrap(),
        "--config",
        state.path().join("none.toml").to_str().unwrap(),
        "--print",
    ]);
    assert!(out.ok, "{out:?}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(!text.contains("--no-measure"), "{text}");
    assert!(
        text.contains(&format!(
            "no stored matrix in {} and `run` never measures",
            state.path().display()
        )),
        "{text}"
    );
}

#[test]
fn the_idle_threshold_setting_is_percent_idle_like_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("pinnerd.toml");
    std::fs::write(&settings, "[measure]\nidle-threshold = 75\n").unwrap();
    let out = pinnerd(&["check", "--no-permissions", settings.to_str().unwrap()]);
    assert!(out.ok, "{out:?}");
    // The old busy fraction is refused with the value to write, never misread.
    std::fs::write(&settings, "[measure]\nidle-threshold = 0.1\n").unwrap();
    let out = pinnerd(&["check", "--no-permissions", settings.to_str().unwrap()]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains(":2:18: 0.1 looks like a busy fraction: idle-threshold is the minimum percent idle, 0 to 100, as `pinnerd measure --idle-threshold` (for 0.1 write 90)"),
        "{}",
        out.stderr
    );
    let help = pinnerd(&["measure", "--help"]);
    assert!(
        help.stdout.contains("Minimum idle share (percent)"),
        "{}",
        help.stdout
    );
}

/// The dry run plans on what the daemon plans on: the matrix stored for this machine in
/// the state directory (`--state-dir`, else the daemon's), not the sysfs topology, and
/// it says which. Nothing is created in a state directory that has no matrix.
#[test]
fn plan_live_plans_on_the_stored_matrix_as_the_daemon_does() {
    use pinnerd::fingerprint::Fingerprint;
    use pinnerd::matrix::store::MatrixStore;
    use pinnerd::matrix::LatencyMatrix;
    use pinnerd::sysroot::SysRoot;
    let _cpus = super::cpus_stay_online();
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule(
        "10-a.toml",
        "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"ot-no-such-app\"\n[rule.place]\ncount = 2\n",
    );
    let config = dirs.root.path().join("none.toml");
    let state = tempfile::tempdir().unwrap();
    let live = |state: &Path| {
        pinnerd(&[
            "plan",
            "--live",
            "--rules",
            dirs.rules().to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
    };
    // No matrix yet: the topology, said so, and the directory left as it was.
    let empty = state.path().join("none-yet");
    let r = live(&empty);
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("placement from sysfs topology: no stored matrix for this machine in"),
        "{}",
        r.stdout
    );
    assert!(!empty.exists(), "a dry run created {}", empty.display());
    // A matrix stored for this machine, as the daemon stores it: planned on.
    let fp = Fingerprint::read(&SysRoot::default()).unwrap();
    let online: Vec<u32> = fp.inputs.online.iter().collect();
    let mut m = LatencyMatrix::from_fn(online, |i, j| if i + j == 1 { 9.0 } else { 50.0 });
    m.fingerprint = Some(fp.hex.clone());
    MatrixStore::open(state.path()).unwrap().save(&m).unwrap();
    let r = live(state.path());
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "placement from the stored matrix {}, as the daemon plans",
            state.path().join("matrix.json").display()
        )),
        "{}",
        r.stdout
    );
    // The same matrix found unstable when measured again (its verdict taken from a
    // simulated moving host): the topology, and which matrix did not hold, in words.
    let moving = state.path().join("moving.json");
    let ryzen = super::placement::data_dir().join("AMD_Ryzen_7_2700X_Eight-Core_Processor.csv");
    let sim = pinnerd(&[
        "measure",
        "--simulate",
        ryzen.to_str().unwrap(),
        "--moves-every",
        "20",
        "--out",
        moving.to_str().unwrap(),
    ]);
    assert!(sim.ok, "{}", sim.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&moving).unwrap()).unwrap();
    m.stability = serde_json::from_value(v["stability"].clone()).unwrap();
    MatrixStore::open(state.path()).unwrap().save(&m).unwrap();
    let r = live(state.path());
    assert!(r.ok, "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("dry run: nothing was changed; placement from sysfs topology: ")
            && first.ends_with(&format!(
                "(the stored matrix {} did not hold when measured again)",
                state.path().join("matrix.json").display()
            )),
        "{first}"
    );
}

/// The daemon and its dry run make the same plan on the same machine state: the same
/// rules, settings and stored matrix, the same running processes. Each unit's CPUs
/// (what `Explain` says of the plan, what `plan --live --json` lists in `plans`) and
/// each process's CPUs (what the daemon applied, what the dry run says it would get)
/// are compared.
#[test]
fn the_daemon_and_plan_live_make_the_same_plan() {
    use super::daemon::{Bus, Daemon, Dirs, Policy, IFACE, NAME, PATH};
    use super::helper::Helper;
    use pinnerd::fingerprint::Fingerprint;
    use pinnerd::matrix::store::MatrixStore;
    use pinnerd::matrix::LatencyMatrix;
    use pinnerd::sysroot::SysRoot;
    use std::collections::BTreeMap;
    let _cpus = super::cpus_stay_online();
    let dirs = Dirs::new();
    // An exclusive CPU for `a`; `b` gets what is left.
    dirs.write_rule(
        "10-same.toml",
        "[[rule]]\nname = \"a\"\npriority = 10\n[rule.match]\ncomm = \"ot-same-a\"\n[rule.place]\ncount = 1\nexclusive = true\n\n\
         [[rule]]\nname = \"b\"\n[rule.match]\ncomm = \"ot-same-b\"\n[rule.place]\ncount = 1\n",
    );
    // A matrix stored for this machine: both plan on it, nothing is measured.
    let fp = Fingerprint::read(&SysRoot::default()).unwrap();
    let online: Vec<u32> = fp.inputs.online.iter().collect();
    let mut m = LatencyMatrix::from_fn(online, |i, j| if i + j == 1 { 9.0 } else { 50.0 });
    m.fingerprint = Some(fp.hex.clone());
    MatrixStore::open(dirs.state()).unwrap().save(&m).unwrap();
    let a = Helper::spawn(dirs.root.path(), "ot-same-a");
    let b = Helper::spawn(dirs.root.path(), "ot-same-b");
    let bus = Bus::start(Policy::AllowAll);
    let d = Daemon::start(&bus, &dirs);
    let json = |method: &str, args: &[&str]| -> serde_json::Value {
        let mut argv = vec!["--json=short", "call", NAME, PATH, IFACE, method];
        argv.extend_from_slice(args);
        let out = bus.busctl(&argv);
        assert!(
            out.status.success(),
            "{method}: {}",
            super::daemon::text(&out)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The daemon: pid → (rule, CPUs applied), once both are managed.
    let applied = || -> BTreeMap<u64, (String, String)> {
        let v = json("ListManaged", &[]);
        v["data"][0]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| [a.pid, b.pid].contains(&(r[0].as_u64().unwrap() as i32)))
            .map(|r| {
                let rule = r[2].as_str().unwrap().to_string();
                (
                    r[0].as_u64().unwrap(),
                    (rule, r[3].as_str().unwrap().to_string()),
                )
            })
            .collect()
    };
    bus.wait_for("both managed", std::time::Duration::from_secs(20), || {
        applied().len() == 2
    });
    let daemon_procs = applied();
    // The daemon's plan of each unit, as `Explain` of a process of its rule says it.
    let daemon_plans: BTreeMap<String, Vec<String>> = [(&a, "a"), (&b, "b")]
        .into_iter()
        .map(|(h, rule)| {
            let v = json("Explain", &["u", &h.pid.to_string()]);
            let text = v["data"][0].as_str().unwrap().to_string();
            let lines = text
                .lines()
                .filter_map(|l| l.strip_prefix("  plan "))
                .map(str::to_string)
                .collect();
            (rule.to_string(), lines)
        })
        .collect();

    let live = pinnerd(&[
        "plan",
        "--live",
        "--json",
        "--rules",
        dirs.rules().to_str().unwrap(),
        "--config",
        dirs.settings().to_str().unwrap(),
        "--state-dir",
        dirs.state().to_str().unwrap(),
    ]);
    assert!(live.ok, "{live:?}");
    let v: serde_json::Value = serde_json::from_str(&live.stdout).unwrap();
    assert!(
        v["placement_from"]
            .as_str()
            .unwrap()
            .starts_with("the stored matrix"),
        "{v}"
    );
    let live_procs: BTreeMap<u64, (String, String)> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let rule = p["rule"].as_str().unwrap().to_string();
            (
                p["pid"].as_u64().unwrap(),
                (rule, p["would_get"].as_str().unwrap().to_string()),
            )
        })
        .collect();
    let mut live_plans: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in v["plans"].as_array().unwrap() {
        assert_eq!(u["state"], "placed", "{u}");
        assert!(u["thread_entry"].is_null(), "{u}");
        live_plans
            .entry(u["rule"].as_str().unwrap().to_string())
            .or_default()
            .push(format!("place: cpus {}", u["cpus"].as_str().unwrap()));
    }

    assert_eq!(live_procs, daemon_procs, "{v}\n{}", d.log());
    assert_eq!(live_plans, daemon_plans, "{v}\n{}", d.log());
    // A plan worth comparing: each rule got one CPU, not the same one.
    let (ca, cb) = (
        &daemon_procs[&(a.pid as u64)].1,
        &daemon_procs[&(b.pid as u64)].1,
    );
    assert_ne!(ca, cb, "{daemon_procs:?}");
    assert_eq!(
        (
            ca.parse::<pinnerd::CpuSet>().unwrap().len(),
            cb.parse::<pinnerd::CpuSet>().unwrap().len()
        ),
        (1, 1)
    );
    assert!(d.stop().success());
    a.exit();
    b.exit();
}
