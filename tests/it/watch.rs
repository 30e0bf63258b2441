//! The event sources on the real kernel: proc connector, uevents, procfs.

use std::process::Command;
use std::time::{Duration, Instant};

use pinnerd::watch::{Connector, ProcMsg};

#[test]
fn the_connector_reports_fork_exec_and_exit_of_a_child() {
    let mut conn = Connector::open(Duration::from_secs(5), 4 << 20).expect("proc connector");
    let child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let mut child = child;
    child.wait().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = Vec::new();
    while Instant::now() < deadline {
        if !conn.wait(Duration::from_millis(100)) {
            continue;
        }
        buf.clear();
        conn.read(&mut buf).unwrap();
        for m in buf.drain(..) {
            match m {
                ProcMsg::NewProcess { pid: p, .. } if p == pid => seen.push("fork"),
                ProcMsg::Exec { pid: p } if p == pid => seen.push("exec"),
                ProcMsg::Exit { pid: p, tid } if p == pid && tid == pid => seen.push("exit"),
                _ => {}
            }
        }
        if seen.contains(&"exit") {
            break;
        }
    }
    assert_eq!(seen, vec!["fork", "exec", "exit"]);
}

use pinnerd::affinity::Outcome;
use pinnerd::manager::{Change, Input};
use pinnerd::plan::Plan;
use pinnerd::watch::UeventSocket;

use super::affinity::{cpus, new_rules, on_cpus, online, rules, Rig, CPU_LAYOUT};
use super::helper::Helper;

fn all_on(h: &Helper, want: &pinnerd::cpuset::CpuSet) -> bool {
    h.tids().iter().all(|&t| super::affinity::mask(t) == *want)
}

#[test]
fn an_overrun_leads_to_a_rescan_that_catches_up() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // The smallest receive buffer the kernel allows: a few events.
    let mut rig = Rig::new(1);
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"o\"\n[rule.match]\ncomm = \"pt-ovr*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    let rescans = rig.mgr.counters().rescans;
    // Fill the buffer while nobody reads, then start the process to be matched.
    let mut flood = Helper::spawn(dir.path(), "pt-flood");
    flood.spawn_threads(300, None);
    let mut h = Helper::spawn(dir.path(), "pt-ovr1");
    h.spawn_threads(3, None);
    let pid = h.pid;
    assert!(
        rig.pump_until(Duration::from_secs(10), |m| m.counters().overruns >= 1
            && m.is_managed(pid)),
        "counters: {:?}",
        rig.mgr.counters()
    );
    assert!(
        rig.mgr.counters().rescans > rescans,
        "no rescan after the overrun"
    );
    assert!(all_on(&h, &cpus("1")));
    flood.exit();
    h.exit();
}

/// Puts CPU 1 back online whatever happens.
struct Cpu1Online;

impl Drop for Cpu1Online {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/devices/system/cpu/cpu1/online", "1");
    }
}

fn wait_uevent(ue: &mut UeventSocket, cpu: u32, online: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if ue.wait(Duration::from_millis(100)) {
            if let Some(changes) = ue.read_changes().unwrap() {
                if changes.iter().any(|c| c.cpu == cpu && c.online == online) {
                    return;
                }
            }
        }
    }
    panic!("no uevent for cpu{cpu} online={online}");
}

#[test]
fn cpu1_offline_then_online_repins() {
    let _cpu = CPU_LAYOUT.write().unwrap_or_else(|p| p.into_inner());
    let path = "/sys/devices/system/cpu/cpu1/online";
    assert!(
        std::path::Path::new(path).exists(),
        "this test needs a machine where CPU 1 can be taken offline"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut ue = UeventSocket::open().unwrap();
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"hp\"\n[rule.match]\ncomm = \"pt-hp*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    let mut h = Helper::spawn(dir.path(), "pt-hp1");
    h.spawn_threads(2, None);
    let pid = h.pid;
    assert!(rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)));
    rig.pump_for(Duration::from_millis(100));
    assert!(all_on(&h, &cpus("1")));

    let _restore = Cpu1Online;
    std::fs::write(path, "0").unwrap();
    wait_uevent(&mut ue, 1, false);
    rig.changes.clear();
    let plan = Plan::new(rig.mgr.rules(), &on_cpus(online()), None);
    rig.handle(Input::PlanChanged(plan));
    assert!(
        rig.changes.iter().any(|c| matches!(c,
            Change::Pinned { pid: p, outcome: Outcome::Refused { .. }, .. } if *p == pid)),
        "{:?}",
        rig.changes
    );

    std::fs::write(path, "1").unwrap();
    wait_uevent(&mut ue, 1, true);
    let before: Vec<String> = h
        .tids()
        .iter()
        .map(|&t| super::affinity::mask(t).to_string())
        .collect();
    let plan = Plan::new(rig.mgr.rules(), &on_cpus(online()), None);
    rig.handle(Input::PlanChanged(plan));
    assert!(
        all_on(&h, &cpus("1")),
        "not re-pinned after CPU 1 came back (masks before re-applying: {before:?})"
    );
    assert_eq!(rig.mgr.counters().foreign_changes, 0);
    h.exit();
}

#[test]
fn plan_live_shows_what_would_happen_and_changes_nothing() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let rules_dir = dir.path().join("rules");
    std::fs::create_dir(&rules_dir).unwrap();
    std::fs::write(
        rules_dir.join("live.toml"),
        "[[rule]]\nname = \"live\"\n[rule.match]\ncomm = \"pt-live*\"\n[rule.place]\ncpus = \"1\"\n\
         [[rule]]\nname = \"greedy\"\npriority = -1\n[rule.match]\ncomm = \"pt-nothing\"\n\
         [rule.place]\ncpus = \"1\"\nexclusive = true\n",
    )
    .unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-live1");
    h.spawn_threads(2, None);
    let before: Vec<_> = h.tids().iter().map(|&t| super::affinity::mask(t)).collect();
    let out = super::helper::pinnerd_command()
        .args(["plan", "--live", "--json", "--rules"])
        .arg(&rules_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let procs = v["processes"].as_array().unwrap();
    let me = procs
        .iter()
        .find(|p| p["pid"] == h.pid)
        .unwrap_or_else(|| panic!("helper not listed: {v}"));
    assert_eq!(me["rule"], "live");
    assert_eq!(me["would_get"], "1");
    // The exclusive rule below it lost CPU 1 and says to whom.
    let plans = v["plans"].as_array().unwrap();
    let greedy = plans.iter().find(|p| p["rule"] == "greedy").unwrap();
    assert_eq!(greedy["state"], "lost");
    assert_eq!(greedy["to"], "live");
    let after: Vec<_> = h.tids().iter().map(|&t| super::affinity::mask(t)).collect();
    assert_eq!(before, after, "the dry run changed a mask");
    h.exit();
}

#[test]
fn plan_live_keeps_the_settings_housekeeping_cpus_free() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let online = online();
    if online.len() < 2 {
        panic!("this test needs 2 online CPUs, found {online}");
    }
    let dir = tempfile::tempdir().unwrap();
    let rules_dir = dir.path().join("rules");
    std::fs::create_dir(&rules_dir).unwrap();
    std::fs::write(
        rules_dir.join("hk.toml"),
        "[[rule]]\nname = \"hk\"\n[rule.match]\ncomm = \"pt-hk*\"\n[rule.place]\ncount = 1\n",
    )
    .unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-hk1");
    h.spawn_threads(1, None);
    // Every online CPU but `expect` is kept for housekeeping: the unit gets `expect`.
    for expect in online.iter().take(2) {
        let settings = dir.path().join(format!("keep-{expect}.toml"));
        let housekeeping = online.difference(&std::iter::once(expect).collect());
        std::fs::write(
            &settings,
            format!("[placement]\nhousekeeping-cpus = \"{housekeeping}\"\n"),
        )
        .unwrap();
        let out = super::helper::pinnerd(&[
            "plan",
            "--live",
            "--json",
            "--config",
            settings.to_str().unwrap(),
            "--rules",
            rules_dir.to_str().unwrap(),
        ]);
        assert!(out.ok, "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let plan = v["plans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["rule"] == "hk")
            .unwrap_or_else(|| panic!("no plan for hk: {v}"));
        assert_eq!(plan["cpus"], expect.to_string(), "{v}");
        let me = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == h.pid)
            .unwrap_or_else(|| panic!("helper not listed: {v}"));
        assert_eq!(me["would_get"], expect.to_string(), "{v}");
    }
    h.exit();
}

/// The rule watcher follows the path: a symlink pointed at another directory, or the
/// directory moved away and another put in its place, is noticed without SIGHUP, and
/// changes in the new directory are watched from then on.
#[test]
fn the_rule_watcher_follows_a_swapped_symlink_and_a_moved_directory() {
    use pinnerd::daemon::sources::{rule_changes, rule_watcher, MISSING_POLL};
    use pinnerd::daemon::{Event, ReloadCause};
    let tmp = tempfile::tempdir().unwrap();
    let (v1, v2, link, plain) = (
        tmp.path().join("v1"),
        tmp.path().join("v2"),
        tmp.path().join("pinnerd.d"),
        tmp.path().join("plain.d"),
    );
    for d in [&v1, &v2, &plain] {
        std::fs::create_dir(d).unwrap();
    }
    std::os::unix::fs::symlink(&v1, &link).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let w = rule_watcher(&[link.clone(), plain.clone()]).unwrap();
        tokio::spawn(rule_changes(w, tx));
        // Generous: one look every MISSING_POLL, then the debounce, on a busy machine.
        async fn reloaded(rx: &mut tokio::sync::mpsc::Receiver<Event>, what: &str) {
            match tokio::time::timeout(MISSING_POLL * 5, rx.recv()).await {
                Ok(Some(Event::Reload(ReloadCause::Inotify))) => {}
                other => panic!("{what}: no reload ({other:?})"),
            }
            // Drain what the same change caused.
            while let Ok(Some(_)) =
                tokio::time::timeout(std::time::Duration::from_millis(400), rx.recv()).await
            {
            }
        }
        std::fs::write(v1.join("a.toml"), "").unwrap();
        reloaded(&mut rx, "a file in the first target").await;

        // `ln -sfn v2 pinnerd.d`: the link is replaced atomically.
        let new_link = tmp.path().join("pinnerd.d.new");
        std::os::unix::fs::symlink(&v2, &new_link).unwrap();
        std::fs::rename(&new_link, &link).unwrap();
        reloaded(&mut rx, "the symlink swapped").await;
        std::fs::write(v2.join("b.toml"), "").unwrap();
        reloaded(&mut rx, "a file in the new target").await;

        // `mv plain.d plain.d.old && mkdir plain.d`.
        std::fs::rename(&plain, tmp.path().join("plain.d.old")).unwrap();
        reloaded(&mut rx, "the directory moved away").await;
        std::fs::create_dir(&plain).unwrap();
        reloaded(&mut rx, "a new directory under the name").await;
        std::fs::write(plain.join("c.toml"), "").unwrap();
        reloaded(&mut rx, "a file in the new directory").await;
    });
}
