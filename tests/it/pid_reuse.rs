//! PID reuse on the real kernel: a pid or tid that pinnerd knew is handed to another
//! process (driven through `/proc/sys/kernel/ns_last_pid`), and pinnerd, told late about
//! the old one, must never pin the newcomer.
//!
//! Evidence is twofold: the newcomer's real mask is still every online CPU (read at
//! the check: other test binaries on the machine may take CPUs offline meanwhile), and
//! the manager reports no change on it.

use std::process::{Child, Command};
use std::time::Duration;

use pinnerd::manager::{Change, Input};
use pinnerd::plan::Plan;

use super::affinity::{mask, new_rules, on_cpus, online, rules, Rig, CPU_LAYOUT};
use super::helper::Helper;

/// Whether any change concerns task `tid`.
fn touched(changes: &[Change], tid: i32) -> bool {
    changes.iter().any(|c| match c {
        Change::Pinned { tid: t, .. } | Change::Foreign { tid: t, .. } => *t == tid,
        Change::Released { pid, .. } => *pid == tid,
        _ => false,
    })
}

/// Starts `sleep 60` under the name `comm` with pid `want`, by setting the kernel's
/// last-allocated pid just below it. Other processes fork too (tests run in parallel),
/// so it tries again until it gets the pid.
fn impostor_with_pid(dir: &std::path::Path, comm: &str, want: i32) -> Child {
    let link = dir.join(comm);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
    for _ in 0..2000 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (want - 1).to_string())
            .expect("write ns_last_pid (needs root)");
        let mut child = Command::new(&link).arg("60").spawn().unwrap();
        if child.id() as i32 == want {
            // Wait for the exec, so that its comm is the impostor's name.
            for _ in 0..200 {
                let comm_now =
                    std::fs::read_to_string(format!("/proc/{want}/comm")).unwrap_or_default();
                if comm_now.trim() == comm {
                    return child;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            panic!("the impostor {want} never ran as {comm}");
        }
        let _ = child.kill();
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("could not get pid {want} through ns_last_pid in 2000 tries");
}

/// A thread of a managed process ends; its tid goes to another process before the
/// manager has read the thread's FORK event. The stale event must not pin the newcomer.
#[test]
fn a_reused_tid_of_a_managed_process_is_never_pinned() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = online().iter().last().unwrap().to_string();
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rules(&format!(
        "[[rule]]\nname = \"p\"\n[rule.match]\ncomm = \"pt-reuse-p*\"\n[rule.place]\ncpus = \"{target}\"\n"
    ))));
    for round in 0..5 {
        let mut h = Helper::spawn(dir.path(), "pt-reuse-p1");
        let pid = h.pid;
        assert!(
            rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)),
            "the helper never matched"
        );
        rig.pump_for(Duration::from_millis(50));
        // The thread is born and ends while the manager is not reading its events.
        let tid = h.brief_thread();
        let mut impostor = impostor_with_pid(dir.path(), "pt-impostor", tid);
        let seen = rig.changes.len();
        // Now the manager reads FORK(pid, tid) — about a task that is someone else's.
        rig.pump_for(Duration::from_millis(300));
        rig.handle(Input::Rescan);
        assert_eq!(
            mask(tid),
            online(),
            "round {round}: the impostor {tid} was pinned"
        );
        assert!(
            !touched(&rig.changes[seen..], tid),
            "round {round}: the manager acted on the impostor {tid}: {:?}",
            &rig.changes[seen..]
        );
        assert!(rig.mgr.is_managed(pid));
        assert!(!rig.mgr.is_managed(tid));
        let _ = impostor.kill();
        let _ = impostor.wait();
        h.exit();
    }
    assert_eq!(rig.mgr.counters().failed, 0);
}

/// A managed process exits and its pid goes to another process (same name as well)
/// before the manager has read the exit: re-planning and releasing act on the held
/// process only (its pidfd), never on the newcomer.
#[test]
fn a_reused_pid_of_a_managed_process_is_never_pinned_or_restored() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let all = online();
    let (first, last) = (
        all.iter().next().unwrap().to_string(),
        all.iter().last().unwrap().to_string(),
    );
    let rule = |cpus: &str| {
        rules(&format!(
            "[[rule]]\nname = \"q\"\n[rule.match]\ncomm = \"pt-reuse-q*\"\n[rule.place]\ncpus = \"{cpus}\"\n"
        ))
    };
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rule(&last)));
    for round in 0..5 {
        let h = Helper::spawn(dir.path(), "pt-reuse-q1");
        let pid = h.pid;
        assert!(rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)));
        rig.pump_for(Duration::from_millis(50));
        h.kill();
        // A newcomer with the same pid, which no rule matches.
        let mut impostor = impostor_with_pid(dir.path(), "pt-other", pid);
        // Before the manager reads any event: a re-plan to other CPUs, a hotplug
        // re-apply and a release all concern the held (dead) process.
        let steps = [
            ("re-planned", new_rules(rule(&first))),
            (
                "re-applied",
                Input::PlanChanged(Plan::new(&rule(&first), &on_cpus(all.clone()), None)),
            ),
            ("released", new_rules(Default::default())),
        ];
        for (what, ev) in steps {
            let c = rig.mgr.handle(ev);
            assert_eq!(
                mask(pid),
                online(),
                "round {round}: {what} onto the newcomer"
            );
            assert!(!touched(&c, pid), "round {round}: {what}: {c:?}");
        }
        rig.mgr.handle(new_rules(rule(&last)));
        let _ = impostor.kill();
        let _ = impostor.wait();
        rig.pump_for(Duration::from_millis(100));
    }
}

/// A pinned thread ends while the manager is not reading events, and its tid goes to a
/// process that runs on the very CPUs the rule gave the thread: releasing the rule must
/// not "give back" a mask to the newcomer.
#[test]
fn a_reused_tid_of_a_pinned_thread_is_not_restored_on_release() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = online().iter().last().unwrap().to_string();
    let ours: pinnerd::CpuSet = target.parse().unwrap();
    let mut rig = Rig::new(8 << 20);
    let rule = rules(&format!(
        "[[rule]]\nname = \"r\"\n[rule.match]\ncomm = \"pt-reuse-r*\"\n[rule.place]\ncpus = \"{target}\"\n"
    ));
    for round in 0..3 {
        rig.handle(new_rules(rule.clone()));
        let mut h = Helper::spawn(dir.path(), "pt-reuse-r1");
        let pid = h.pid;
        let tid = h.spawn_threads(1, None)[0];
        assert!(rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)));
        rig.pump_for(Duration::from_millis(100));
        h.end_thread(tid);
        let mut impostor = impostor_with_pid(dir.path(), "pt-impostor-r", tid);
        pinnerd::affinity::AffinityOps::set_affinity(
            &pinnerd::affinity::SystemOps::default(),
            tid,
            &ours,
        )
        .unwrap();
        // The rule goes before the manager has read the thread's exit.
        let c = rig.mgr.handle(new_rules(Default::default()));
        assert_eq!(
            mask(tid),
            ours,
            "round {round}: the newcomer {tid} was restored"
        );
        assert!(!touched(&c, tid), "round {round}: {c:?}");
        assert_eq!(
            mask(pid),
            online(),
            "round {round}: the held process is restored"
        );
        let _ = impostor.kill();
        let _ = impostor.wait();
        h.exit();
        rig.pump_for(Duration::from_millis(100));
    }
}

/// The same on the recording fakes, where the newcomer's mask is ours exactly and no
/// other test can take a CPU offline meanwhile.
#[test]
fn releasing_skips_a_tid_that_left_the_process() {
    use std::sync::Arc;

    use pinnerd::affinity::FakeOps;
    use pinnerd::manager::{Manager, ManagerConfig};
    use pinnerd::watch::scan::FakeProcs;

    let set = |s: &str| s.parse::<pinnerd::CpuSet>().unwrap();
    let ops = Arc::new(FakeOps::new());
    let procs = Arc::new(FakeProcs::new());
    procs.put(100, "feed", 1, &[(101, "rx")]);
    ops.add_process(100, 1, &[101], &set("0-7"));
    let mut mgr = Manager::new(
        ops.clone(),
        procs.clone(),
        on_cpus(set("0-7")),
        ManagerConfig::default(),
    );
    let plan = |r| Input::RulesChanged(Plan::new(&r, &on_cpus(set("0-7")), None));
    mgr.handle(plan(rules(
        "[[rule]]\nname = \"f\"\n[rule.match]\ncomm = \"feed\"\n[rule.place]\ncpus = \"2-3\"\n",
    )));
    assert_eq!(ops.mask(101), Some(set("2-3")));
    // Thread 101 ends; another process's task now holds tid 101, on CPUs 2-3.
    procs.remove(100, 101);
    ops.remove_task(101);
    ops.add_task(101, &set("2-3"));
    let c = mgr.handle(plan(Default::default()));
    assert_eq!(
        ops.mask(100),
        Some(set("0-7")),
        "the held process is restored"
    );
    assert_eq!(
        ops.mask(101),
        Some(set("2-3")),
        "the newcomer holding tid 101 was changed: {c:?}"
    );
}
