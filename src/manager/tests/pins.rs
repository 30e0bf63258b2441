//! Run-time pins and release (the masks from first contact come back whatever came
//! between), what pinnerd never touches, what explain shows another user, and threads
//! whose mask may not be read.

use super::*;
use std::path::Path;

#[test]
fn runtime_pins_override_rules_and_release_restores() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[]);
    t.process(200, "app", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    let cpus = t
        .mgr
        .plan()
        .pin(&count_request(2), Some(&LowestFirst))
        .unwrap();
    assert_eq!(cpus, set("0-1"));
    t.mgr.pin(200, &cpus).unwrap();
    assert_eq!(t.ops.mask(200), Some(set("0-1")));
    t.mgr.unpin(200).unwrap();
    assert_eq!(t.ops.mask(200), Some(set("0-7")));
    assert!(matches!(
        t.mgr.unpin(200),
        Err(ManagerError::NotPinned { pid: 200 })
    ));
    assert!(matches!(
        t.mgr.pin(999, &cpus),
        Err(ManagerError::NoProcess { pid: 999 })
    ));
}

/// Each thread's mask before pinnerd first touched it, as the journal records it.
fn journal_originals(t: &T, pid: i32) -> Vec<(Tid, CpuSet)> {
    let e = t
        .mgr
        .journal_entries()
        .into_iter()
        .find(|e| e.pid == pid)
        .expect("in the journal");
    [pid, 201, 202]
        .into_iter()
        .map(|tid| {
            let o = e.threads.get(&tid).map_or(&e.original, |t| &t.original);
            (tid, o.clone())
        })
        .collect()
}

/// A manager seeing process 200 (`comm`) with threads 201 and 202, 202 moved to CPU 5
/// by someone else; with each task's mask before pinnerd touches it.
fn moved_thread_rig(comm: &str) -> (T, Vec<(Tid, CpuSet)>) {
    let t = rig(ManagerConfig::default());
    t.process(200, comm, 1, &[(201, "a"), (202, "b")]);
    t.ops.external_set(202, &set("5"));
    (
        t,
        vec![(200, set("0-7")), (201, set("0-7")), (202, set("5"))],
    )
}

/// Each task in `want` has the mask beside it.
fn assert_masks(t: &T, want: &[(Tid, CpuSet)]) {
    for (tid, m) in want {
        assert_eq!(t.ops.mask(*tid), Some(m.clone()), "tid {tid}");
    }
}

#[test]
fn a_second_pin_keeps_the_masks_from_first_contact() {
    let (mut t, want) = moved_thread_rig("app");
    t.mgr.pin(200, &set("1")).unwrap();
    t.mgr.pin(200, &set("0")).unwrap();
    for tid in [200, 201, 202] {
        assert_eq!(t.ops.mask(tid), Some(set("0")), "tid {tid}");
    }
    assert_eq!(journal_originals(&t, 200), want);
    let c = t.mgr.unpin(200).unwrap();
    assert!(
        c.iter()
            .any(|c| matches!(c, Change::Released { restored: 3, .. })),
        "{c:?}"
    );
    assert_masks(&t, &want);
    assert_eq!(t.mgr.managed_processes(), 0);
}

#[test]
fn a_rule_then_a_runtime_pin_then_no_rule_gives_back_the_first_masks() {
    let (mut t, want) = moved_thread_rig("feed");
    t.ev(new_rules(rules(FEED)));
    assert_eq!(t.ops.mask(201), Some(set("2-3")));
    t.mgr.pin(200, &set("6")).unwrap();
    t.ev(new_rules(RuleSet::default()));
    assert_eq!(t.ops.mask(201), Some(set("6")), "the pin holds");
    assert_eq!(journal_originals(&t, 200), want);
    t.mgr.unpin(200).unwrap();
    assert_masks(&t, &want);
}

const EVERYTHING: &str = r#"
[[rule]]
name = "all"
[rule.match]
comm = "*"
[rule.place]
cpus = "2"
"#;

/// A manager that sees PID 1, pinnerd's own process and the bus daemon (pid 300,
/// named `bus`); with pinnerd's pid.
fn protected_three(bus: &str) -> (T, i32) {
    let t = rig(ManagerConfig::default());
    let own = std::process::id() as i32;
    t.process(1, "systemd", 1, &[]);
    t.process(own, "pinnerd", 1, &[]);
    t.process(300, bus, 1, &[]);
    (t, own)
}

#[test]
fn a_runtime_pin_never_takes_pinnerd_itself_pid_1_or_the_bus_daemon() {
    let (mut t, own) = protected_three("dbus-broker");
    for (pid, said) in [
        (own, "pinnerd's own process"),
        (1, "PID 1"),
        (300, "the bus daemon"),
    ] {
        let e = t.mgr.pin(pid, &set("1")).unwrap_err();
        assert!(
            matches!(e, ManagerError::Protected { pid: p, .. } if p == pid),
            "{e}"
        );
        assert!(e.to_string().contains(said), "{e}");
        assert_eq!(t.ops.mask(pid), Some(set("0-7")), "pid {pid} was moved");
    }
    assert!(t.ops.sets().is_empty());
    assert_eq!(t.mgr.managed_processes(), 0);
}

#[test]
fn a_broad_rule_never_takes_pinnerd_itself_pid_1_or_the_bus_daemon() {
    let (mut t, own) = protected_three("dbus-daemon");
    t.process(400, "app", 1, &[]);
    t.ev(new_rules(rules(EVERYTHING)));
    assert_eq!(t.ops.mask(400), Some(set("2")));
    for pid in [1, own, 300] {
        assert_eq!(t.ops.mask(pid), Some(set("0-7")), "pid {pid} was moved");
    }
    assert_eq!(t.mgr.list_managed().len(), 1);
    let kept: Vec<(i32, protect::Protected)> =
        t.mgr.protected().iter().map(|p| (p.pid, p.why)).collect();
    assert_eq!(
        kept,
        vec![
            (1, protect::Protected::Init),
            (300, protect::Protected::BusDaemon),
            (own, protect::Protected::Own)
        ]
        .into_iter()
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    for (pid, said) in [
        (1, "not managed: PID 1: protected; managed only by a rule whose `comm` is exactly its name"),
        (own, "not managed: pinnerd's own process: never managed"),
        (300, "not managed: the bus daemon: protected"),
    ] {
        t.assert_explains(pid, said);
    }
}

#[test]
fn pid_1_and_the_bus_daemon_are_managed_by_a_rule_that_names_them_exactly_but_pinnerd_never() {
    let (mut t, own) = protected_three("dbus-daemon");
    t.ev(new_rules(rules(
        r#"
[[rule]]
name = "core"
[rule.match]
comm = ["systemd", "dbus-daemon", "pinnerd"]
[rule.place]
cpus = "0"
"#,
    )));
    assert_eq!(t.ops.mask(1), Some(set("0")));
    assert_eq!(t.ops.mask(300), Some(set("0")));
    assert_eq!(t.ops.mask(own), Some(set("0-7")), "pinnerd pinned itself");
}

#[test]
fn explain_shows_another_users_process_only_by_rule_and_cpus() {
    let mut t = rig(ManagerConfig::default());
    // FakeProcs' processes belong to root.
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.process(200, "other", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    let full = t.mgr.explain_for(100, 0);
    assert_eq!(full, t.mgr.explain(100));
    assert!(full.contains("original mask"), "{full}");
    let theirs = t.mgr.explain_for(100, 65534);
    assert_eq!(
        theirs,
        "pid 100: a process of another user; shown: its rule and CPUs only\nmanaged by feed on CPUs 2-3\n"
    );
    assert_eq!(
        t.mgr.explain_for(200, 65534),
        "pid 200: a process of another user; shown: its rule and CPUs only\nnot managed\n"
    );
}

/// The recording fake, with reads of some tasks' masks refused with EPERM (another
/// user's task without CAP_SYS_NICE, or a security module's verdict).
struct Unreadable {
    inner: Arc<FakeOps>,
    tids: std::sync::Mutex<BTreeSet<Tid>>,
}

impl AffinityOps for Unreadable {
    fn set_affinity(&self, tid: Tid, cpus: &CpuSet) -> Result<(), crate::affinity::AffinityError> {
        self.inner.set_affinity(tid, cpus)
    }
    fn get_affinity(&self, tid: Tid) -> Result<CpuSet, crate::affinity::AffinityError> {
        if self.tids.lock().unwrap().contains(&tid) {
            return Err(crate::affinity::AffinityError::Permission { tid });
        }
        self.inner.get_affinity(tid)
    }
    fn hold(
        &self,
        pid: i32,
        start_time: u64,
    ) -> Result<ProcessHandle, crate::affinity::AffinityError> {
        self.inner.hold(pid, start_time)
    }
    fn alive(&self, handle: &ProcessHandle) -> bool {
        self.inner.alive(handle)
    }
    fn get_sched(
        &self,
        tid: Tid,
    ) -> Result<crate::affinity::sched::SchedAttr, crate::affinity::AffinityError> {
        self.inner.get_sched(tid)
    }
    fn set_sched(
        &self,
        tid: Tid,
        attr: &crate::affinity::sched::SchedAttr,
    ) -> Result<(), crate::affinity::AffinityError> {
        self.inner.set_sched(tid, attr)
    }
}

/// A manager over [`Unreadable`], refusing reads of `tids`.
fn unreadable_rig(tids: &[Tid]) -> (T, Arc<Unreadable>) {
    let mut t = rig(ManagerConfig::default());
    let ops = Arc::new(Unreadable {
        inner: t.ops.clone(),
        tids: std::sync::Mutex::new(tids.iter().copied().collect()),
    });
    t.mgr = Manager::new(
        ops.clone(),
        t.procs.clone(),
        cpus("0-7", ""),
        ManagerConfig::default(),
    );
    (t, ops)
}

#[test]
fn a_thread_whose_mask_may_not_be_read_is_not_gone_and_explain_says_so() {
    let (mut t, _ops) = unreadable_rig(&[102]);
    t.process(100, "feed", 1, &[(101, "rx"), (102, "tx")]);
    let c = t.ev(new_rules(rules(FEED)));
    assert!(
        c.contains(&Change::Pinned {
            pid: 100,
            tid: 102,
            rule: "feed".into(),
            outcome: Outcome::Permission,
        }),
        "{c:?}"
    );
    assert_eq!(t.ops.mask(101), Some(set("2-3")));
    assert_eq!(t.ops.mask(102), Some(set("0-7")), "not touched");
    assert_eq!(t.mgr.counters().gone, 0);
    assert_eq!(t.mgr.counters().permission, 1);
    t.assert_explains(
        100,
        "tid 102 (tx): permission: not permitted to read or set its affinity",
    );
    let rows = t.mgr.list_managed();
    assert!(rows[0].state.contains("1 permission"), "{rows:?}");
    // Rescans do not count it again.
    t.ev(Input::Rescan);
    t.ev(Input::Rescan);
    assert_eq!(t.mgr.counters().permission, 1);
    assert_eq!(t.mgr.counters().gone, 0);
}

#[test]
fn a_process_whose_mask_may_not_be_read_is_not_managed_counted_once_and_explained() {
    let (mut t, ops) = unreadable_rig(&[100]);
    t.process(100, "feed", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    assert!(!t.mgr.is_managed(100));
    assert_eq!(t.mgr.counters().gone, 0);
    assert_eq!(t.mgr.counters().permission, 1);
    t.assert_explains(
        100,
        "not managed: permission: not permitted to read or set its affinity",
    );
    t.ev(Input::Rescan);
    assert_eq!(t.mgr.counters().permission, 1, "once per process");
    // Allowed again (the policy changed): managed at the next look.
    ops.tids.lock().unwrap().clear();
    t.ev(Input::Rescan);
    assert!(t.mgr.is_managed(100));
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
}

/// `/proc/PID/stat` and `/proc/PID/task/*` of one process under `dir`, as a crash
/// restore reads them.
pub(super) fn proc_fixture(dir: &Path, pid: i32, comm: &str, start: u64, tids: &[Tid]) -> SysRoot {
    let proc = dir.join("proc");
    let task = proc.join(format!("{pid}/task"));
    for tid in std::iter::once(&pid).chain(tids) {
        std::fs::create_dir_all(task.join(tid.to_string())).unwrap();
    }
    let stat =
        format!("{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 {start} 0 0");
    std::fs::write(proc.join(format!("{pid}/stat")), stat).unwrap();
    SysRoot::new(dir.join("sys"), proc)
}

/// A daemon killed while the unit of a managed process was held: the next start's
/// restore is narrowed by the unit's cpuset (the hold is kept), yet what the process
/// gets back when its rule goes is what it had before pinnerd first touched it.
#[test]
fn after_a_crash_under_a_held_cpuset_the_masks_from_before_the_first_run_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = rig(ManagerConfig::default());
    t.process(200, "feed", 1, &[(201, "a"), (202, "b")]);
    t.ops.external_set(202, &set("1-7"));
    let journal = Journal::new(dir.path());
    t.mgr = Manager::new(
        t.ops.clone(),
        t.procs.clone(),
        cpus("0-7", ""),
        ManagerConfig::default(),
    )
    .with_journal(journal.clone());
    t.ev(new_rules(rules(FEED)));
    t.mgr.flush().unwrap();
    // The hold confines the unit to the rule's CPUs; then the daemon is killed.
    for tid in [200, 201, 202] {
        assert_eq!(t.ops.mask(tid), Some(set("2-3")), "tid {tid}");
        t.ops.set_cpuset(tid, &set("2-3"));
    }
    let root = proc_fixture(dir.path(), 200, "feed", 1, &[201, 202]);
    t.mgr = Manager::new(
        t.ops.clone(),
        t.procs.clone(),
        cpus("0-7", ""),
        ManagerConfig::default(),
    )
    .with_journal(journal.clone());
    let report = t.mgr.recover(&root).unwrap();
    assert_eq!(report.restored, 3, "{report:?}");
    assert_eq!(t.ops.mask(201), Some(set("2-3")), "narrowed by the cpuset");
    assert!(
        journal.load().unwrap().iter().any(|e| e.pid == 200),
        "the masks from before stay on record until the process is managed again"
    );
    t.ev(new_rules(rules(FEED)));
    t.assert_explains(200, "original mask 0-7");
    // The hold lets go (the unit's cpuset widens), the rule goes.
    for tid in [200, 201, 202] {
        t.ops.set_cpuset(tid, &set("0-7"));
    }
    t.ev(new_rules(RuleSet::default()));
    assert_masks(
        &t,
        &[(200, set("0-7")), (201, set("0-7")), (202, set("1-7"))],
    );
}
