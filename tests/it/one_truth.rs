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
}
