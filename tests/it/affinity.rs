//! Affinity on the real kernel: real child processes, the real proc connector, the
//! manager driven exactly as the daemon drives it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use pinnerd::affinity::restore::Journal;
use pinnerd::affinity::{AffinityOps, SystemOps};
use pinnerd::cpuset::CpuSet;
use pinnerd::manager::{Change, Input, Manager, ManagerConfig};
use pinnerd::plan::{Cpus, Plan};
use pinnerd::rules::{compile_text, LoadPolicy, RuleSet};
use pinnerd::sysroot::SysRoot;
use pinnerd::watch::{Connector, ProcFs, ProcMsg};

use super::helper::Helper;

/// Tests that take CPUs offline hold this for writing; tests that expect a CPU to
/// stay online hold it for reading.
pub static CPU_LAYOUT: RwLock<()> = RwLock::new(());

pub fn cpus(s: &str) -> CpuSet {
    s.parse().unwrap()
}

pub fn online() -> CpuSet {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

pub fn on_cpus(online: CpuSet) -> Cpus {
    Cpus {
        online,
        reserved: CpuSet::new(),
    }
}

/// New rules, planned on the online CPUs without latency domains (explicit `cpus` only).
pub fn new_rules(rules: RuleSet) -> Input {
    Input::RulesChanged(Plan::new(&rules, &on_cpus(online()), None))
}

pub fn rules(text: &str) -> RuleSet {
    let rules = compile_text(Path::new("test.toml"), text, &LoadPolicy::unchecked())
        .unwrap_or_else(|e| panic!("bad test rules: {e:?}"));
    RuleSet::new(rules)
}

pub fn mask(tid: i32) -> CpuSet {
    SystemOps::default().get_affinity(tid).unwrap()
}

/// The manager, the real connector and the real kernel, pumped by the test.
pub struct Rig {
    pub mgr: Manager,
    pub conn: Connector,
    pub changes: Vec<Change>,
    buf: Vec<ProcMsg>,
}

impl Rig {
    pub fn new(recv_buffer: usize) -> Rig {
        let conn = Connector::open(Duration::from_secs(5), recv_buffer).expect("proc connector");
        conn.set_nonblocking().unwrap();
        let mgr = Manager::new(
            Arc::new(SystemOps::default()),
            Arc::new(ProcFs::default()),
            on_cpus(online()),
            ManagerConfig::default(),
        );
        Rig {
            mgr,
            conn,
            changes: Vec::new(),
            buf: Vec::new(),
        }
    }

    pub fn with_journal(mut self, dir: &Path) -> Rig {
        let mgr = std::mem::replace(
            &mut self.mgr,
            Manager::new(
                Arc::new(SystemOps::default()),
                Arc::new(ProcFs::default()),
                on_cpus(online()),
                ManagerConfig::default(),
            ),
        );
        self.mgr = mgr.with_journal(Journal::new(dir));
        self
    }

    pub fn handle(&mut self, ev: Input) {
        let c = self.mgr.handle(ev);
        self.changes.extend(c);
        self.mgr.flush().unwrap();
    }

    /// Feeds connector events to the manager until `done` holds or `timeout` passes.
    pub fn pump_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&Manager) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.mgr) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if self.conn.wait(Duration::from_millis(20)) {
                self.buf.clear();
                self.conn.read(&mut self.buf).unwrap();
                for m in std::mem::take(&mut self.buf) {
                    self.handle(Input::Proc(m));
                }
            }
        }
    }

    /// Pumps for `d`, whatever happens.
    pub fn pump_for(&mut self, d: Duration) {
        self.pump_until(d, |_| false);
    }
}

fn all_threads_on(h: &Helper, want: &CpuSet) -> bool {
    h.tids().iter().all(|&t| mask(t) == *want)
}

#[test]
fn every_thread_gets_the_rule_mask_and_gets_its_own_back_when_the_rule_goes() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"pt-aff-a*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    let mut h = Helper::spawn(dir.path(), "pt-aff-a1");
    let before = mask(h.pid);
    assert_eq!(before, online(), "the helper starts unpinned");
    let early = h.spawn_threads(2, Some("early"));
    let pid = h.pid;
    assert!(
        rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)),
        "helper never matched"
    );
    rig.pump_for(Duration::from_millis(200));
    assert!(
        all_threads_on(&h, &cpus("1")),
        "existing threads not pinned"
    );
    // Threads made after the match, including by an unpinned-looking name.
    let late = h.spawn_threads(5, Some("late"));
    rig.pump_for(Duration::from_millis(300));
    for t in early.iter().chain(&late) {
        assert_eq!(mask(*t), cpus("1"), "tid {t}");
    }
    let row = rig
        .mgr
        .list_managed()
        .into_iter()
        .find(|r| r.pid == pid as u32)
        .unwrap();
    assert_eq!(
        (row.rule.as_str(), row.cpus.as_str(), row.state.as_str()),
        ("a", "1", "applied")
    );
    assert!(rig.mgr.explain(pid).contains("applied 1"));

    rig.handle(new_rules(RuleSet::default()));
    assert!(!rig.mgr.is_managed(pid));
    assert!(all_threads_on(&h, &before), "original masks not restored");
    h.exit();
}

#[test]
fn stopping_restores_and_a_mask_set_by_someone_else_is_left_alone() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut rig = Rig::new(8 << 20).with_journal(dir.path());
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"b\"\n[rule.match]\ncomm = \"pt-aff-b*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    let mut h = Helper::spawn(dir.path(), "pt-aff-b1");
    let tids = h.spawn_threads(3, None);
    let pid = h.pid;
    assert!(rig.pump_until(Duration::from_secs(5), |m| m.is_managed(pid)));
    rig.pump_for(Duration::from_millis(200));
    assert!(all_threads_on(&h, &cpus("1")));
    // The journal names the process while it is managed.
    let journal = Journal::new(dir.path()).load().unwrap();
    assert_eq!(journal.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![pid]);

    // An administrator moves one thread; the next check notices and lets go of it.
    SystemOps::default()
        .set_affinity(tids[0], &cpus("0"))
        .unwrap();
    rig.handle(Input::Rescan);
    assert!(rig.changes.iter().any(|c| matches!(c,
        Change::Foreign { tid, released: true, .. } if *tid == tids[0])));
    assert_eq!(rig.mgr.counters().foreign_changes, 1);
    // A second check does not fight or report again.
    rig.handle(Input::Rescan);
    assert_eq!(rig.mgr.counters().foreign_changes, 1);
    assert_eq!(mask(tids[0]), cpus("0"));

    rig.mgr.shutdown().unwrap();
    assert_eq!(
        mask(tids[0]),
        cpus("0"),
        "a thread someone else moved was restored"
    );
    for t in h.tids().into_iter().filter(|t| *t != tids[0]) {
        assert_eq!(mask(t), online(), "tid {t} not restored");
    }
    assert!(Journal::new(dir.path()).load().unwrap().is_empty());
    h.exit();
}

#[test]
fn a_crash_leaves_a_journal_that_the_next_start_restores() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-aff-c1");
    h.spawn_threads(2, None);
    let pid = h.pid;
    {
        let mut rig = Rig::new(8 << 20).with_journal(dir.path());
        rig.handle(new_rules(rules(
            "[[rule]]\nname = \"c\"\n[rule.match]\ncomm = \"pt-aff-c*\"\n[rule.place]\ncpus = \"1\"\n",
        )));
        assert!(rig.mgr.is_managed(pid), "the start rescan matches it");
        assert!(all_threads_on(&h, &cpus("1")));
        // Dropped without shutdown: a crash.
    }
    assert!(all_threads_on(&h, &cpus("1")));
    let rig = Rig::new(8 << 20).with_journal(dir.path());
    let mut mgr = rig.mgr;
    let report = mgr.recover(&SysRoot::default()).unwrap();
    assert_eq!(report.restored, h.tids().len(), "{report:?}");
    assert!(all_threads_on(&h, &online()));
    // Its masks from before stay on record while it runs, until it is managed again
    // (a restore a unit's cpuset narrowed is not what it is to get back).
    let kept = Journal::new(dir.path()).load().unwrap();
    assert_eq!(kept.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![pid]);
    h.exit();
}

#[test]
fn after_two_pins_and_a_crash_the_next_start_restores_the_masks_from_before_the_first() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-aff-t1");
    h.spawn_threads(2, None);
    let pid = h.pid;
    assert!(all_threads_on(&h, &online()));
    {
        let mut rig = Rig::new(8 << 20).with_journal(dir.path());
        rig.mgr.pin(pid, &cpus("0")).unwrap();
        rig.mgr.pin(pid, &cpus("1")).unwrap();
        rig.mgr.flush().unwrap();
        assert!(all_threads_on(&h, &cpus("1")));
        // Dropped without shutdown: a crash.
    }
    let rig = Rig::new(8 << 20).with_journal(dir.path());
    let mut mgr = rig.mgr;
    let report = mgr.recover(&SysRoot::default()).unwrap();
    assert_eq!(report.restored, h.tids().len(), "{report:?}");
    for t in h.tids() {
        assert_eq!(mask(t), online(), "tid {t}");
    }
    h.exit();
}

#[test]
fn a_corrupt_journal_at_start_survives_the_next_write() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let journal = Journal::new(&runtime);
    let torn = "{\n  \"version\": 1,\n  \"processes\": [{\"pid\": 4242, \"sta";
    std::fs::write(journal.path(), torn).unwrap();
    let h = Helper::spawn(dir.path(), "pt-aff-j1");
    let pid = h.pid;
    let rig = Rig::new(8 << 20).with_journal(&runtime);
    let mut mgr = rig.mgr;
    let err = mgr.recover(&SysRoot::default()).unwrap_err().to_string();
    assert!(
        err.contains("restore.json:3:") && err.contains("moved aside"),
        "{err}"
    );
    mgr.handle(new_rules(rules(
        "[[rule]]\nname = \"j\"\n[rule.match]\ncomm = \"pt-aff-j*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    mgr.flush().unwrap();
    assert!(mgr.is_managed(pid));
    // The new journal names the new process, and the old one is still there, whole.
    assert_eq!(
        journal
            .load()
            .unwrap()
            .iter()
            .map(|e| e.pid)
            .collect::<Vec<_>>(),
        vec![pid]
    );
    let kept: Vec<String> = std::fs::read_dir(&runtime)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|t| t == torn)
        .collect();
    assert_eq!(kept.len(), 1, "the corrupt journal was overwritten");
    mgr.shutdown().unwrap();
    h.exit();
}

#[test]
fn exit_races_and_pid_identity() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ops = SystemOps::default();

    // A held process that exits is dead to its pidfd, whatever takes its pid next.
    let h = Helper::spawn(dir.path(), "pt-aff-d1");
    let pid = h.pid;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = pinnerd::affinity::parse_stat(&stat).unwrap().start_time;
    assert!(
        ops.hold(pid, start + 1).is_err(),
        "a wrong start time must not be held"
    );
    let handle = ops.hold(pid, start).unwrap();
    assert!(ops.alive(&handle));
    h.kill();
    assert!(!ops.alive(&handle));
    assert!(ops.hold(pid, start).is_err());

    // Processes that exit while being matched and pinned: no error, nothing left.
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"d\"\n[rule.match]\ncomm = \"pt-aff-d*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    for i in 0..20 {
        let mut h = Helper::spawn(dir.path(), &format!("pt-aff-d{i}"));
        if i % 2 == 0 {
            h.spawn_threads(4, None);
        }
        if i % 3 == 0 {
            rig.pump_for(Duration::from_millis(5));
        }
        h.kill();
    }
    rig.pump_for(Duration::from_millis(500));
    rig.handle(Input::Rescan);
    assert_eq!(rig.mgr.managed_processes(), 0);
    assert_eq!(rig.mgr.counters().failed, 0);
    assert_eq!(rig.mgr.counters().permission, 0);
}

/// A child cpuset of the v1 cpuset hierarchy, removed on drop.
struct Cpuset {
    dir: PathBuf,
    parent: PathBuf,
    mounted: Option<PathBuf>,
}

impl Cpuset {
    fn create(cpus: &str) -> Cpuset {
        let mut mounted = None;
        let parent = PathBuf::from("/sys/fs/cgroup/cpuset");
        let parent = if parent.join("cpuset.cpus").exists() {
            parent
        } else {
            let m = std::env::temp_dir().join(format!("pinnerd-cpuset-{}", std::process::id()));
            std::fs::create_dir_all(&m).unwrap();
            let st = std::process::Command::new("mount")
                .args(["-t", "cgroup", "-o", "cpuset", "cpuset"])
                .arg(&m)
                .status()
                .unwrap();
            assert!(st.success(), "cannot mount the v1 cpuset hierarchy");
            mounted = Some(m.clone());
            m
        };
        let dir = parent.join(format!("pinnerd-test-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        std::fs::write(dir.join("cpuset.cpus"), cpus).unwrap();
        let mems = std::fs::read_to_string(parent.join("cpuset.mems")).unwrap();
        std::fs::write(dir.join("cpuset.mems"), mems.trim()).unwrap();
        Cpuset {
            dir,
            parent,
            mounted,
        }
    }

    fn add(&self, pid: i32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cpuset {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for p in procs.lines() {
                let _ = std::fs::write(self.parent.join("cgroup.procs"), p);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(m) = &self.mounted {
            let _ = std::process::Command::new("umount").arg(m).status();
            let _ = std::fs::remove_dir(m);
        }
    }
}

#[test]
fn a_cpuset_narrows_or_refuses_and_the_outcome_says_so() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let set = Cpuset::create("0");
    let narrowed = Helper::spawn(dir.path(), "pt-aff-n1");
    let refused = Helper::spawn(dir.path(), "pt-aff-r1");
    set.add(narrowed.pid);
    set.add(refused.pid);
    assert_eq!(mask(narrowed.pid), cpus("0"));
    let mut rig = Rig::new(8 << 20);
    rig.handle(new_rules(rules(
        "[[rule]]\nname = \"n\"\n[rule.match]\ncomm = \"pt-aff-n*\"\n[rule.place]\ncpus = \"0-1\"\n\
         [[rule]]\nname = \"r\"\n[rule.match]\ncomm = \"pt-aff-r*\"\n[rule.place]\ncpus = \"1\"\n",
    )));
    let outcome = |pid: i32| {
        rig.changes
            .iter()
            .rev()
            .find_map(|c| match c {
                Change::Pinned { tid, outcome, .. } if *tid == pid => Some(outcome.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no outcome for {pid}"))
    };
    assert_eq!(
        outcome(narrowed.pid),
        pinnerd::affinity::Outcome::Narrowed {
            requested: cpus("0-1"),
            effective: cpus("0")
        }
    );
    assert_eq!(
        outcome(refused.pid),
        pinnerd::affinity::Outcome::Refused {
            requested: cpus("1")
        }
    );
    assert_eq!(
        mask(refused.pid),
        cpus("0"),
        "a refused task keeps its mask"
    );
    let refused_before = rig.mgr.counters().refused;
    // No retry loop: a rescan does not try again.
    rig.handle(Input::Rescan);
    assert_eq!(rig.mgr.counters().refused, refused_before);
    let row = rig
        .mgr
        .list_managed()
        .into_iter()
        .find(|r| r.pid == narrowed.pid as u32)
        .unwrap();
    assert_eq!(row.state, "narrowed");
    drop(set);
    narrowed.exit();
    refused.exit();
}
