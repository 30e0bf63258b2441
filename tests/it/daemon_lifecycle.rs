//! The daemon's life: one instance per bus name, SIGTERM, reloads (inotify, SIGHUP, the
//! Reload method), a stored matrix across restarts and a bad settings file.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::daemon::*;

#[test]
fn a_second_instance_is_refused_because_the_name_is_taken() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _first = Daemon::start(&bus, &dirs);
    let dirs2 = Dirs::new();
    let mut second = Daemon::spawn(&bus, &dirs2, &[]);
    let end = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = second.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < end, "second instance kept running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let mut log = String::new();
    std::fs::File::open(&second.log)
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("already taken"), "{log}");
    assert!(!second.notes.iter().any(|n| n == "READY=1"));
    // The first still owns it.
    assert!(bus.get("State").starts_with("s "));
}

#[test]
fn sigterm_exits_cleanly() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let st = d.stop();
    assert!(st.success(), "{st}");
    // The name is free again.
    let out = bus.busctl(&["status", NAME]);
    assert!(!out.status.success());
}

/// A system bus that takes connections and never says a word: a systemd connection
/// made to it waits for its whole bound. Returns its address and a receiver told of
/// each connection.
fn silent_system_bus(dir: &std::path::Path) -> (String, std::sync::mpsc::Receiver<()>) {
    let path = dir.join("silent-system-bus");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().flatten() {
            open.push(stream);
            let _ = tx.send(());
        }
    });
    (format!("unix:path={}", path.display()), rx)
}

/// SIGTERM while the holder is stuck in a systemd call (here: connecting to a bus that
/// never answers, for its 5 s bound): the loop does not wait for it asleep. It goes on
/// pinging the watchdog between `STATUS=stopping…` and `STOPPING=1`, answers a call at
/// once (refused: stopping), and exits once the holder has undone what it held.
#[test]
fn a_holder_stuck_at_exit_leaves_the_loop_pinging_and_answering() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let (system_bus, connected) = silent_system_bus(dirs.root.path());
    // A hold journal left by a previous run: the holder starts with the daemon.
    std::fs::write(dirs.runtime().join("holds.json"), "[]").unwrap();
    let mut d = Daemon::spawn_wrapped(&bus, &dirs, |cmd| {
        let mut c = Command::new(cmd.get_program());
        c.args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env("DBUS_SYSTEM_BUS_ADDRESS", &system_bus)
            .env("WATCHDOG_USEC", "400000");
        c
    });
    d.wait_note("READY=1", Duration::from_secs(60));
    connected
        .recv_timeout(Duration::from_secs(60))
        .expect("the holder never connected to the system bus");
    d.signal(libc::SIGTERM);
    let end = Instant::now() + Duration::from_secs(60);
    while !d.log().contains("terminating: restoring masks") {
        assert!(
            Instant::now() < end,
            "SIGTERM not handled; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = bus.busctl(&["call", NAME, PATH, IFACE, "ListManaged"]);
    assert!(
        !out.status.success() && text(&out).contains("the daemon is shutting down"),
        "{}",
        text(&out)
    );
    let notes = d.notes_until_exit(Duration::from_secs(60));
    let at = |want: &str| {
        notes
            .iter()
            .position(|n| n == want)
            .unwrap_or_else(|| panic!("no {want} in {notes:?}"))
    };
    let (stopping, stopped) = (at("STATUS=stopping: restoring masks"), at("STOPPING=1"));
    let pings = notes[stopping..stopped]
        .iter()
        .filter(|n| *n == "WATCHDOG=1")
        .count();
    assert!(
        pings >= 1,
        "no watchdog ping while the holder undid: {:?}; log:\n{}",
        &notes[stopping..=stopped],
        d.log()
    );
    assert!(d.child.wait().unwrap().success());
}

#[test]
fn inotify_reloads_and_a_bad_file_keeps_the_previous_rules() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("RuleCount"), "u 0");
    dirs.write_rule("10-a.toml", &rule("a"));
    bus.wait_for(
        "RuleCount 1 after a file appeared",
        Duration::from_secs(30),
        || bus.get("RuleCount") == "u 1",
    );
    assert_eq!(bus.get("RuleErrors"), "as 0");
    // The same file, now broken: its rule stays, the error shows.
    dirs.write_rule("10-a.toml", "[[rule]]\nname = \"a\"\nbogus = true\n");
    bus.wait_for(
        "RuleErrors after a bad edit",
        Duration::from_secs(30),
        || bus.get("RuleErrors") != "as 0",
    );
    assert_eq!(bus.get("RuleCount"), "u 1");
    let errors = bus.get("RuleErrors");
    let file = dirs.rules().join("10-a.toml");
    assert!(
        errors.contains(&format!("{}:3:1", file.display())),
        "{errors}"
    );
    // Deleting it removes its rule.
    std::fs::remove_file(&file).unwrap();
    bus.wait_for("RuleCount 0 after delete", Duration::from_secs(30), || {
        bus.get("RuleCount") == "u 0"
    });
    assert_eq!(bus.get("RuleErrors"), "as 0");
}

#[test]
fn sighup_reloads() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    // A second rule directory that does not exist yet cannot be watched: only SIGHUP
    // sees what appears in it.
    let late = dirs.root.path().join("late");
    let mut d = Daemon::spawn(&bus, &dirs, &["--rules", late.to_str().unwrap()]);
    d.wait_note("READY=1", Duration::from_secs(60));
    std::fs::create_dir(&late).unwrap();
    std::fs::write(late.join("b.toml"), rule("b")).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        bus.get("RuleCount"),
        "u 0",
        "nothing watched that directory"
    );
    d.signal(libc::SIGHUP);
    d.wait_note("RELOADING=1", Duration::from_secs(30));
    d.wait_note("READY=1", Duration::from_secs(30));
    assert_eq!(bus.get("RuleCount"), "u 1");
}

#[test]
fn reload_method_returns_the_count_and_the_errors_and_signals() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let mut monitor = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args(["monitor", "--json=short", NAME])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dirs.rules().join("20-bad.toml"), "[[rule]]\nname = 1\n").unwrap();
    std::fs::write(dirs.rules().join("10-good.toml"), rule("good")).unwrap();
    let out = bus.call("Reload", &[]);
    assert!(out.starts_with("uas 1 1 \""), "{out}");
    assert!(out.contains("20-bad.toml:2:"), "{out}");
    bus.wait_for("RuleCount 1", Duration::from_secs(30), || {
        bus.get("RuleCount") == "u 1"
    });
    std::thread::sleep(Duration::from_millis(500));
    let _ = monitor.kill();
    let mut seen = String::new();
    monitor
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut seen)
        .unwrap();
    let _ = monitor.wait();
    assert!(seen.contains("\"member\":\"RulesReloaded\""), "{seen}");
    assert!(seen.contains("\"member\":\"PropertiesChanged\""), "{seen}");
    assert!(seen.contains("RuleCount"), "{seen}");
}

#[test]
fn a_stored_matrix_is_used_after_restart_and_a_corrupt_one_is_survived() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let measured = d.wait_measured(&bus, "");
    assert!(d.stop().success());
    assert!(dirs.state().join("matrix.json").exists());

    // Restart: the stored matrix is used, nothing is measured.
    let d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("MeasuredAt"), measured);
    assert_eq!(bus.get("State"), "s \"ready\"");
    assert!(d.stop().success());

    // Corrupt it: the daemon starts, sets it aside and measures again.
    std::fs::write(
        dirs.state().join("matrix.json"),
        "{\"cpus\": [0, 1], \"latency_ns\": garbage",
    )
    .unwrap();
    let d = Daemon::start(&bus, &dirs);
    d.wait_measured(&bus, &measured);
    let names: Vec<String> = std::fs::read_dir(dirs.state())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("matrix.json.corrupt-")),
        "{names:?}"
    );
}

#[test]
fn a_bad_settings_file_stops_the_daemon_with_the_config_exit_code() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("[limits]\nno-such-key = 1\n");
    let mut d = Daemon::spawn(&bus, &dirs, &[]);
    let st = d.child.wait().unwrap();
    assert_eq!(st.code(), Some(3), "{}", d.log());
    let log = d.log();
    // The line of the bad key, after the settings every test daemon gets.
    let text = std::fs::read_to_string(dirs.settings()).unwrap();
    let line = 1 + text
        .lines()
        .position(|l| l.starts_with("no-such-key"))
        .unwrap();
    assert!(
        log.contains(&format!("{}:{line}:1", dirs.settings().display())),
        "{log}"
    );
    // It never took the name.
    assert!(!bus.busctl(&["status", NAME]).status.success());
}
