//! sched_ext as `pinnerd topology` and the daemon's `SchedExt` property show it, on a
//! fixture machine with a sched_ext state added and on this machine's kernel.

use std::path::Path;
use std::time::Duration;

use super::daemon::*;
use super::helper::pinnerd;

/// A copy of the Ryzen 2700X fixture with `kernel/sched_ext/{state,root/ops}`.
fn fixture_with(dir: &Path, state: &str, ops: &str) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/ryzen-2700x");
    let dst = dir.join("machine");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success());
    let scx = dst.join("sys/kernel/sched_ext");
    std::fs::create_dir_all(scx.join("root")).unwrap();
    std::fs::write(scx.join("state"), format!("{state}\n")).unwrap();
    std::fs::write(scx.join("root/ops"), format!("{ops}\n")).unwrap();
    dst
}

#[test]
fn topology_json_has_sched_ext_null_when_off_and_the_scheduler_when_on() {
    let d = tempfile::tempdir().unwrap();
    let on = fixture_with(d.path(), "enabled", "layered");
    let r = pinnerd(&["topology", "--json", "--sysfs", on.to_str().unwrap()]);
    assert!(r.ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["sched_ext"],
        serde_json::json!({"state": "enabled", "ops": "layered"})
    );
    let r = pinnerd(&["topology", "--sysfs", on.to_str().unwrap()]);
    assert!(
        r.stdout.ends_with("sched_ext: layered (enabled)\n"),
        "{}",
        r.stdout
    );
    std::fs::write(on.join("sys/kernel/sched_ext/state"), "disabled\n").unwrap();
    let r = pinnerd(&["topology", "--json", "--sysfs", on.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v.get("sched_ext").is_some_and(|s| s.is_null()),
        "{}",
        r.stdout
    );
    let plain = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-e5620");
    let r = pinnerd(&["topology", "--json", "--sysfs", plain.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v.get("sched_ext").is_some_and(|s| s.is_null()),
        "{}",
        r.stdout
    );
}

#[test]
fn the_daemon_and_status_say_whether_a_scheduler_runs() {
    let _cpus = super::cpus_stay_online();
    let state = std::fs::read_to_string("/sys/kernel/sched_ext/state")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let want = if state.is_empty() || state == "disabled" {
        "(ss) \"\" \"\"".to_string()
    } else {
        let ops = std::fs::read_to_string("/sys/kernel/sched_ext/root/ops").unwrap();
        format!("(ss) \"{state}\" \"{}\"", ops.trim())
    };
    bus.wait_for("SchedExt", Duration::from_secs(10), || {
        bus.get("SchedExt") == want
    });
    let r = pinnerd(&["status", &format!("--bus={}", bus.address)]);
    assert!(r.ok, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("sched_ext:"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    if want.ends_with("\"\" \"\"") {
        assert_eq!(line, "sched_ext:    off");
    } else {
        assert!(line.contains(&state), "{line}");
    }
    assert!(d.stop().success());
}

/// `plan --live` applies the `[sched-ext]` policy as the daemon does, reading whether a
/// scheduler runs from the sysfs root it is given.
#[test]
fn plan_live_applies_the_sched_ext_policy_as_the_daemon_does() {
    let d = tempfile::tempdir().unwrap();
    let machine = fixture_with(d.path(), "enabled", "layered");
    let rules = d.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("scx.toml"),
        "[[rule]]\nname = \"scx\"\n[rule.match]\ncomm = \"pd-no-such\"\n[rule.place]\ncount = 2\nsmt = \"avoid\"\n",
    )
    .unwrap();
    let config = d.path().join("pinnerd.toml");
    let live = |policy: &str| {
        std::fs::write(&config, format!("[sched-ext]\npolicy = \"{policy}\"\n")).unwrap();
        let r = pinnerd(&[
            "plan",
            "--live",
            "--rules",
            rules.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--sysfs",
            machine.to_str().unwrap(),
        ]);
        assert!(r.ok, "{r:?}");
        r.stdout
    };
    let widened = live("widen");
    assert!(
        widened.contains("  scx (priority 0): cpus 0-3,8-11\n")
            || widened.contains("  scx (priority 0): cpus 4-7,12-15\n"),
        "{widened}"
    );
    assert!(
        widened.contains("sched_ext: layered (enabled) runs; policy widen"),
        "{widened}"
    );
    let paused = live("pause");
    assert!(paused.contains("policy pause: rules released"), "{paused}");
    assert!(!paused.contains("  scx (priority"), "{paused}");
    let warned = live("warn");
    assert!(
        warned.contains("policy warn: partial masks pinned as usual: scx ("),
        "{warned}"
    );
    // No scheduler: the plan as chosen, and not a word about sched_ext.
    std::fs::write(machine.join("sys/kernel/sched_ext/state"), "disabled\n").unwrap();
    let off = live("widen");
    assert!(!off.contains("sched_ext"), "{off}");
    let line = off
        .lines()
        .find(|l| l.starts_with("  scx (priority 0): cpus "))
        .unwrap_or_else(|| panic!("{off}"));
    let cpus: pinnerd::CpuSet = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(cpus.len(), 2, "{off}");
}
