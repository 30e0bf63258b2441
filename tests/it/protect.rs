//! A rule that matches everything, on the real system through `plan --live` (a dry run):
//! PID 1, the bus daemon and pinnerd itself are listed as protected, never as managed.

use super::daemon::{Bus, Policy};

#[test]
fn plan_live_shows_pid_1_the_bus_daemon_and_itself_protected_from_a_broad_rule() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("all.toml"),
        "[[rule]]\nname = \"all\"\n[rule.match]\ncomm = \"*\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    let out = super::helper::pinnerd_command()
        .args(["plan", "--live", "--json", "--rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let protected = v["protected"].as_array().unwrap();
    let why = |pid: i64| {
        protected
            .iter()
            .find(|p| p["pid"] == pid)
            .and_then(|p| p["why"].as_str())
            .unwrap_or_else(|| panic!("pid {pid} not listed as protected: {v}"))
            .to_string()
    };
    assert!(why(1).starts_with("PID 1: protected"), "{}", why(1));
    let bus_pid = i64::from(bus.pid());
    assert!(why(bus_pid).starts_with("the bus daemon: protected"));
    let own = protected
        .iter()
        .find(|p| p["comm"] == "pinnerd")
        .unwrap_or_else(|| panic!("pinnerd itself not listed: {v}"));
    assert_eq!(own["why"], "pinnerd's own process: never managed");
    let managed = v["processes"].as_array().unwrap();
    for p in managed {
        assert!(
            p["pid"] != 1 && p["pid"] != bus_pid && p["pid"] != own["pid"],
            "a protected process would be managed: {p}"
        );
    }
}

#[test]
fn check_notes_rules_broad_enough_to_match_pid_1_or_the_bus_daemon() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.toml"),
        "[[rule]]\nname = \"all\"\n[rule.match]\ncgroup = \"/*\"\n[rule.place]\ncpus = \"0\"\n\
         [[rule]]\nname = \"named\"\n[rule.match]\ncomm = [\"systemd\", \"dbus-daemon\"]\n[rule.place]\ncpus = \"0\"\n\
         [[rule]]\nname = \"buses\"\n[rule.match]\ncomm = \"dbus-*\"\n[rule.place]\ncpus = \"0\"\n\
         [[rule]]\nname = \"svc\"\n[rule.match]\ncgroup = \"/system.slice/app.service\"\n[rule.place]\ncpus = \"0\"\n\
         [[rule]]\nname = \"pods\"\n[rule.match]\npod = \"*\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    let out = super::helper::pinnerd_command()
        .args(["check", "--no-permissions"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let file = dir.path().join("a.toml");
    assert!(
        stdout.contains(&format!(
            "note: {}:2:8: rule \"all\" may match PID 1 and the bus daemon: they are left alone unless `comm` names them exactly",
            file.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("rule \"buses\" may match the bus daemon:"),
        "{stdout}"
    );
    assert!(!stdout.contains("rule \"named\""), "{stdout}");
    assert!(!stdout.contains("rule \"svc\""), "{stdout}");
    // PID 1 and the bus daemon run in no container.
    assert!(!stdout.contains("rule \"pods\""), "{stdout}");
    assert!(stdout.contains("ok: 1 file, 5 rules"), "{stdout}");
}

/// A run-time pin over the bus cannot take pinnerd itself or the bus daemon either.
#[test]
fn pin_process_refuses_pinnerd_itself_and_the_bus_daemon() {
    use super::daemon::{text, Daemon, Dirs};
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let own = d.child.id().to_string();
    let bus_pid = bus.pid().to_string();
    for (pid, said) in [
        (&own, "pinnerd's own process"),
        (&bus_pid, "the bus daemon"),
    ] {
        let out = bus.busctl(&[
            "call",
            "org.pinnerd.Pinnerd1",
            "/org/pinnerd/Pinnerd1",
            "org.pinnerd.Pinnerd1",
            "PinProcess",
            "uuss",
            pid,
            "1",
            "compact",
            "allow",
        ]);
        let said_back = text(&out);
        assert!(!out.status.success(), "pid {pid} was pinned: {said_back}");
        assert!(
            said_back.contains(&format!("pid {pid}: {said}")),
            "{said_back}"
        );
    }
    let listed = bus.call("ListManaged", &[]);
    assert!(
        !listed.contains(&own) && !listed.contains(&bus_pid),
        "{listed}"
    );
}
