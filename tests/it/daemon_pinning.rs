//! The daemon pinning real processes: rules applied to every thread, processes found
//! from events alone, rule directories coming and going, restarts after a crash, and
//! pins made at run time — through the bus and the `pinnerd` client commands.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use pinnerd::sysroot::SysRoot;
use pinnerd::CpuSet;

use super::daemon::*;
use super::helper::{pinnerd, Helper};

fn online() -> CpuSet {
    std::fs::read_to_string(SysRoot::default().sys_path("devices/system/cpu/online"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The affinity of every thread of `h`, as the kernel reports it.
fn masks(h: &Helper) -> Vec<CpuSet> {
    h.tids()
        .into_iter()
        .filter_map(|tid| {
            let status = std::fs::read_to_string(
                SysRoot::default().proc_path(format!("{}/task/{tid}/status", h.pid)),
            )
            .ok()?;
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))?;
            line.split_once(':')?.1.trim().parse().ok()
        })
        .collect()
}

fn all_on(h: &Helper, want: &CpuSet) -> bool {
    let m = masks(h);
    !m.is_empty() && m.iter().all(|x| x == want)
}

fn explicit_rule(name: &str, comm: &str, cpus: &CpuSet) -> String {
    format!("[[rule]]\nname = \"{name}\"\n[rule.match]\ncomm = \"{comm}\"\n[rule.place]\ncpus = \"{cpus}\"\n")
}

#[test]
fn a_rule_pins_every_thread_and_sigterm_restores_the_masks() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let mut h = Helper::spawn(dirs.root.path(), "pd-term");
    h.spawn_threads(2, Some("pd-worker"));
    let original = online();
    assert!(all_on(&h, &original), "{:?}", masks(&h));
    let target: CpuSet = std::iter::once(original.last().unwrap()).collect();
    dirs.write_rule("10-term.toml", &explicit_rule("term", "pd-term", &target));
    let d = Daemon::start(&bus, &dirs);
    bus.wait_for("the helper pinned", Duration::from_secs(30), || {
        all_on(&h, &target)
    });
    bus.wait_for("ManagedProcesses 1", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1"
    });
    let threads = masks(&h).len();
    assert_eq!(bus.get("ManagedThreads"), format!("u {threads}"));
    let list = bus.call("ListManaged", &[]);
    assert!(
        list.starts_with(&format!(
            "a(ussss) 1 {} \"pd-term\" \"term\" \"{target}\"",
            h.pid
        )),
        "{list}"
    );
    let why = bus.call("Explain", &["u", &h.pid.to_string()]);
    assert!(why.contains("term"), "{why}");
    // A thread made later is pinned too.
    h.spawn_threads(1, Some("pd-late"));
    bus.wait_for("the late thread pinned", Duration::from_secs(30), || {
        all_on(&h, &target)
    });
    assert_eq!(masks(&h).len(), threads + 1);
    bus.wait_for("the late thread managed", Duration::from_secs(30), || {
        bus.get("ManagedThreads") == format!("u {}", threads + 1)
    });
    // SIGTERM gives every thread its mask back.
    assert!(d.stop().success());
    assert!(all_on(&h, &original), "{:?}", masks(&h));
}

/// A signal the daemon has no other use for (SIGUSR1 here) would end it by default
/// without giving the masks back: it stops as on SIGTERM.
#[test]
fn sigusr1_stops_the_daemon_and_restores_the_masks() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-usr1");
    let original = online();
    let target: CpuSet = std::iter::once(original.last().unwrap()).collect();
    dirs.write_rule("10-usr1.toml", &explicit_rule("usr1", "pd-usr1", &target));
    let mut d = Daemon::start(&bus, &dirs);
    bus.wait_for("the helper pinned", Duration::from_secs(30), || {
        all_on(&h, &target)
    });
    d.signal(libc::SIGUSR1);
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = d.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            std::time::Instant::now() < end,
            "did not stop:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}\nlog:\n{}", d.log());
    assert!(all_on(&h, &original), "{:?}", masks(&h));
}

#[test]
fn a_process_started_after_the_daemon_is_pinned_from_its_events_alone() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    // No periodic rescan: only the proc connector, read on the loop thread, can find it.
    dirs.write_settings("[watch]\nrescan-interval = \"off\"\n");
    let original = online();
    let target: CpuSet = std::iter::once(original.last().unwrap()).collect();
    dirs.write_rule("10-born.toml", &explicit_rule("born", "pd-born", &target));
    let d = Daemon::start(&bus, &dirs);
    // Subscribed, and the rescan that follows the subscription done: from here on only
    // events can find a new process.
    bus.wait_for("the connector subscribed", Duration::from_secs(30), || {
        d.log().contains("proc connector subscribed")
    });
    bus.wait_for("State ready", Duration::from_secs(30), || {
        bus.get("State") == "s \"ready\""
    });
    let mut h = Helper::spawn(dirs.root.path(), "pd-born");
    bus.wait_for("the new process pinned", Duration::from_secs(30), || {
        all_on(&h, &target)
    });
    h.spawn_threads(3, Some("pd-born-w"));
    assert!(all_on(&h, &target), "{:?}", masks(&h));
    bus.wait_for("its threads managed", Duration::from_secs(30), || {
        bus.get("ManagedThreads") == format!("u {}", masks(&h).len())
    });
    assert!(d.stop().success());
    assert!(all_on(&h, &original), "{:?}", masks(&h));
}

#[test]
fn a_rule_directory_made_after_start_is_read_and_one_removed_is_looked_for_again() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let later = dirs.root.path().join("later");
    let later_arg = later.display().to_string();
    let mut d = Daemon::spawn(&bus, &dirs, &["--rules", &later_arg]);
    d.wait_note("READY=1", Duration::from_secs(60));
    assert_eq!(bus.get("RuleCount"), "u 0");
    let h = Helper::spawn(dirs.root.path(), "pd-later");
    let original = online();
    let target: CpuSet = std::iter::once(original.last().unwrap()).collect();
    let make = || {
        std::fs::create_dir(&later).unwrap();
        std::fs::set_permissions(&later, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            later.join("10-later.toml"),
            explicit_rule("later", "pd-later", &target),
        )
        .unwrap();
    };
    make();
    bus.wait_for(
        "the new directory's rule applied",
        Duration::from_secs(30),
        || bus.get("RuleCount") == "u 1" && all_on(&h, &target),
    );
    // Gone: its rule goes (and the mask comes back); back: read again.
    std::fs::remove_dir_all(&later).unwrap();
    bus.wait_for(
        "the rule gone with its directory",
        Duration::from_secs(30),
        || bus.get("RuleCount") == "u 0" && all_on(&h, &original),
    );
    make();
    bus.wait_for(
        "the directory back, its rule again",
        Duration::from_secs(30),
        || bus.get("RuleCount") == "u 1" && all_on(&h, &target),
    );
    let appeared = format!("rule directory {} appeared; watching it", later.display());
    assert!(d.log().contains(&appeared), "{}", d.log());
    assert!(d.stop().success());
}

#[test]
fn after_kill_9_a_restart_re_pins_and_restores_what_a_removed_rule_held() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-kill9");
    let original = online();
    let target: CpuSet = std::iter::once(original.first().unwrap()).collect();
    dirs.write_rule("10-k.toml", &explicit_rule("k", "pd-kill9", &target));
    let mut d = Daemon::start(&bus, &dirs);
    bus.wait_for("pinned", Duration::from_secs(30), || all_on(&h, &target));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(d);
    // Restart with the rule still there: still pinned, still managed.
    let mut d = Daemon::start(&bus, &dirs);
    bus.wait_for("managed again", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1"
    });
    assert!(all_on(&h, &target), "{:?}", masks(&h));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(d);
    // The rule goes while no daemon runs; the next one restores from the journal.
    std::fs::remove_file(dirs.rules().join("10-k.toml")).unwrap();
    let _d = Daemon::start(&bus, &dirs);
    assert!(all_on(&h, &original), "{:?}", masks(&h));
    assert_eq!(bus.get("ManagedProcesses"), "u 0");
}

#[test]
fn pin_process_and_release_process_at_run_time() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-pin");
    let original = online();
    let _d = Daemon::start(&bus, &dirs);
    let pid = h.pid.to_string();
    let got = bus.call("PinProcess", &["uuss", &pid, "1", "compact", "allow"]);
    let cpus: CpuSet = got
        .trim_start_matches("s ")
        .trim_matches('"')
        .parse()
        .unwrap();
    assert_eq!(cpus.len(), 1, "{got}");
    assert!(cpus.is_subset(&original));
    assert!(all_on(&h, &cpus), "{:?}", masks(&h));
    assert_eq!(bus.get("ManagedProcesses"), "u 1");
    bus.call("ReleaseProcess", &["u", &pid]);
    assert!(all_on(&h, &original), "{:?}", masks(&h));
    let out = bus.busctl(&["call", NAME, PATH, IFACE, "ReleaseProcess", "u", &pid]);
    assert!(
        stderr_of(&out).contains(&format!("pid {pid}: not pinned by PinProcess")),
        "{}",
        text(&out)
    );
    let out = bus.busctl(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PinProcess",
        "uuss",
        "4194304",
        "1",
        "compact",
        "allow",
    ]);
    assert!(
        stderr_of(&out).contains("pid 4194304: no such process"),
        "{}",
        text(&out)
    );
}

#[test]
fn client_commands_talk_to_the_daemon() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-client");
    let target: CpuSet = std::iter::once(online().first().unwrap()).collect();
    dirs.write_rule("10-c.toml", &explicit_rule("client", "pd-client", &target));
    let _d = Daemon::start(&bus, &dirs);
    bus.wait_for("pinned", Duration::from_secs(30), || all_on(&h, &target));
    let addr = bus.address.as_str();

    let out = pinnerd(&["status", "--bus", addr]);
    assert!(out.status.success(), "{out:?}");
    let s = out.stdout.as_str();
    assert!(s.contains("rules:        1 (0 errors)"), "{s}");
    assert!(s.contains("managed:      1 process, "), "{s}");

    let out = pinnerd(&["managed", "--bus", addr]);
    assert!(out.status.success(), "{out:?}");
    let s = out.stdout.as_str();
    let row = s
        .lines()
        .find(|l| l.contains("pd-client"))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(
        row.contains(&h.pid.to_string()) && row.contains("client"),
        "{row}"
    );

    let out = pinnerd(&["explain", "--bus", addr, &h.pid.to_string()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.as_str().contains("client"),
        "{}",
        format!("{out:?}")
    );
    let out = pinnerd(&["explain", "--json", "--bus", addr, &h.pid.to_string()]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.as_str()).unwrap();
    assert_eq!(
        (v["pid"].as_u64(), v["rule"].as_str()),
        (Some(h.pid as u64), Some("client"))
    );
    assert!(v["container"].is_null(), "in no container: {v}");

    let out = pinnerd(&["reload", "--bus", addr]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.as_str().contains("1 rule loaded, 0 errors"),
        "{}",
        format!("{out:?}")
    );
    // A bad file: reload reports it and exits with the config code.
    std::fs::write(dirs.rules().join("20-bad.toml"), "[[rule]]\nname = 2\n").unwrap();
    let out = pinnerd(&["reload", "--bus", addr]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        out.stdout.as_str().contains("20-bad.toml:2:"),
        "{}",
        format!("{out:?}")
    );

    // Without a daemon on the bus, a clear error.
    let other = Bus::start(Policy::Project);
    let out = pinnerd(&["status", "--bus", &other.address]);
    assert!(!out.status.success());
    assert!(
        out.stderr.as_str().contains("pinnerd:"),
        "{}",
        format!("{out:?}")
    );
}

/// `PinProcessWith` pins a real process on CPUs shaped by its options, and a request
/// the kind cannot hold pins nothing.
#[test]
fn pin_process_with_options_pins_a_real_process() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-pinwith");
    let original = online();
    let _d = Daemon::start(&bus, &dirs);
    let pid = h.pid.to_string();
    let out = bus.busctl(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PinProcessWith",
        "ua{sv}",
        &pid,
        "2",
        "count",
        "u",
        "1",
        "core-type",
        "s",
        "efficiency",
    ]);
    assert!(
        stderr_of(&out).contains("one kind of core"),
        "{}",
        text(&out)
    );
    assert!(all_on(&h, &original), "{:?}", masks(&h));
    let got = bus.call(
        "PinProcessWith",
        &[
            "ua{sv}",
            &pid,
            "3",
            "count",
            "u",
            "1",
            "core-type",
            "s",
            "performance",
            "prefer",
            "s",
            "frequency",
        ],
    );
    let cpus: CpuSet = got
        .trim_start_matches("s ")
        .trim_matches('"')
        .parse()
        .unwrap();
    assert_eq!(cpus.len(), 1, "{got}");
    assert!(cpus.is_subset(&original));
    assert!(all_on(&h, &cpus), "{:?}", masks(&h));
    bus.call("ReleaseProcess", &["u", &pid]);
    assert!(all_on(&h, &original), "{:?}", masks(&h));
}

/// A rule with `core-type` and `near` is planned with the machine's facts: on this
/// one-kind machine `performance` holds every core and `/dev/null` (no node) restricts
/// nothing, so the process is pinned; `efficiency` cannot be met, and the plan says why
/// instead of widening.
#[test]
fn rules_with_core_type_and_near_are_planned_by_the_daemon() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-kind");
    let e = Helper::spawn(dirs.root.path(), "pd-ecore");
    let original = online();
    dirs.write_rule(
        "10-kind.toml",
        "[[rule]]\nname = \"kind\"\n[rule.match]\ncomm = \"pd-kind\"\n[rule.place]\ncount = 1\ncore-type = \"performance\"\nnear = \"/dev/null\"\nprefer = \"frequency\"\n\n\
         [[rule]]\nname = \"ecore\"\n[rule.match]\ncomm = \"pd-ecore\"\n[rule.place]\ncount = 1\ncore-type = \"efficiency\"\n",
    );
    let _d = Daemon::start(&bus, &dirs);
    bus.wait_for(
        "the helper pinned to one CPU",
        Duration::from_secs(30),
        || {
            let m = masks(&h);
            !m.is_empty() && m.iter().all(|x| x.len() == 1 && x.is_subset(&original))
        },
    );
    let why = bus.call("Explain", &["u", &e.pid.to_string()]);
    assert!(
        why.contains("asked for 1 efficiency CPUs but only 0 are usable"),
        "{why}"
    );
    assert!(all_on(&e, &original), "{:?}", masks(&e));
}
