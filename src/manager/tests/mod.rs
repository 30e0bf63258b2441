use super::*;
use crate::affinity::{Call, FakeOps};
use crate::plan::tests::{count_request, cpus, rules, set, LowestFirst};
use crate::watch::scan::FakeProcs;

mod cpusets;
mod pins;
mod sched;
mod steps;
mod threads;

/// The plan of `rules` on `online` CPUs.
fn plan_on(rules: RuleSet, online: &str) -> Plan {
    Plan::new(&rules, &cpus(online, ""), Some(&LowestFirst))
}

/// New rules, planned on CPUs 0-7.
fn new_rules(rules: RuleSet) -> Input {
    Input::RulesChanged(plan_on(rules, "0-7"))
}

struct T {
    ops: Arc<FakeOps>,
    procs: Arc<FakeProcs>,
    mgr: Manager,
    /// The chooser the daemon would keep with the plan (`None`: plans made with a
    /// borrowed one, never chosen again).
    choose: Option<&'static dyn crate::plan::Choose>,
}

fn rig(config: ManagerConfig) -> T {
    let ops = Arc::new(FakeOps::new());
    let procs = Arc::new(FakeProcs::new());
    let mgr = Manager::new(ops.clone(), procs.clone(), cpus("0-7", ""), config);
    T {
        ops,
        procs,
        mgr,
        choose: None,
    }
}

impl T {
    fn process(&self, pid: i32, comm: &str, start: u64, threads: &[(Tid, &str)]) {
        self.procs.put(pid, comm, start, threads);
        let tids: Vec<Tid> = threads.iter().map(|t| t.0).collect();
        self.ops.add_process(pid, start, &tids, &set("0-7"));
    }
    /// One input, as the daemon's loop hands it down: with the plans made again for
    /// what the manager then reports, with the chooser of a shared plan (a plan made
    /// with a borrowed one is only made again to hold the slots taken).
    fn ev(&mut self, e: Input) -> Vec<Change> {
        crate::daemon::replan::hand_down(&mut self.mgr, e, self.choose)
    }
    fn msg(&mut self, m: ProcMsg) -> Vec<Change> {
        self.ev(Input::Proc(m))
    }
    /// `explain` of `pid` says `said` (the whole text is shown where it does not).
    #[track_caller]
    fn assert_explains(&self, pid: i32, said: &str) {
        let why = self.mgr.explain(pid);
        assert!(why.contains(said), "{why}");
    }
    /// The connector reports thread `tid` of process `pid`, created by task `parent`.
    fn new_thread(&mut self, pid: i32, tid: Tid, parent: Tid) -> Vec<Change> {
        self.msg(ProcMsg::NewThread { pid, tid, parent })
    }
    /// Task `tid` of process `pid` names itself `comm`, and the connector says so.
    fn renames(&mut self, pid: i32, tid: Tid, comm: &str) -> Vec<Change> {
        self.procs.rename(pid, tid, comm);
        self.msg(ProcMsg::Comm {
            pid,
            tid,
            comm: comm.into(),
        })
    }
    /// The command lines and memory the manager asked for, read and handed back as the
    /// daemon's readers do.
    fn read_asked(&mut self) -> Vec<Change> {
        crate::daemon::replan::read_here(&mut self.mgr, self.procs.as_ref(), self.choose)
    }
    fn batch(&mut self, msgs: Vec<ProcMsg>) -> Vec<Change> {
        let mut out = self.mgr.handle_batch(msgs);
        out.extend(crate::daemon::replan::settle(&mut self.mgr, self.choose));
        out
    }
}

const FEED: &str = r#"
[[rule]]
name = "feed"
priority = 10
[rule.match]
comm = "feed*"
[rule.place]
cpus = "2-3"
"#;

/// Command lines are read only while a rule matches on one: reading one takes the
/// process's memory-map lock, which a process whose pages are being moved holds.
#[test]
fn command_lines_are_read_only_while_a_rule_matches_on_one() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[]);
    t.process(200, "feed", 1, &[]);
    t.procs.set_cmdline(100, &["feed", "--venue=X"]);
    t.ev(new_rules(rules(FEED)));
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    assert_eq!(t.ops.mask(200), Some(set("2-3")));
    assert!(t.procs.snapshots() >= 2);
    assert_eq!(t.procs.cmdlines(), 0);
    t.assert_explains(100, "feed");
    assert_eq!(t.procs.cmdlines(), 0);

    let venue = FEED.replace(
        "comm = \"feed*\"",
        "comm = \"feed*\"\ncmdline = \"--venue=X\"",
    );
    t.ev(new_rules(rules(&venue)));
    assert_eq!(t.procs.cmdlines(), 0, "the manager itself never reads one");
    t.read_asked();
    assert_eq!(t.procs.cmdlines(), 2);
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    assert_eq!(
        t.ops.mask(200),
        Some(set("0-7")),
        "no --venue=X: given back"
    );

    t.ev(new_rules(rules(FEED)));
    let read = t.procs.cmdlines();
    t.ev(Input::Rescan);
    t.assert_explains(200, "feed");
    assert_eq!(t.procs.cmdlines(), read);
}

const VENUE: &str = r#"
[[rule]]
name = "venue"
priority = 10
[rule.match]
comm = "feed*"
cmdline = "--venue=X"
[rule.place]
cpus = "2-3"

[[rule]]
name = "other"
[rule.match]
comm = "other"
[rule.place]
cpus = "6"
"#;

/// A command line is never read by the manager (its loop): a process a `cmdline` key
/// can decide waits, undecided, for the one read asked for it, however many events name
/// it; processes no `cmdline` key can decide are placed meanwhile.
#[test]
fn a_burst_of_renames_asks_for_one_command_line_and_others_are_placed_meanwhile() {
    let mut t = rig(ManagerConfig::default());
    t.ev(new_rules(rules(VENUE)));
    t.process(100, "idle", 1, &[]);
    t.procs.set_cmdline(100, &["feed", "--venue=X"]);
    for i in 0..1500 {
        t.renames(100, 100, if i % 2 == 0 { "feed" } else { "feedx" });
    }
    t.process(200, "other", 1, &[]);
    t.renames(200, 200, "other");
    assert_eq!(t.ops.mask(200), Some(set("6")), "placed while 100 waits");
    assert_eq!(t.procs.cmdlines(), 0);
    let asked = t.mgr.take_cmdline_reads();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!((asked[0].pid, asked[0].start_time), (100, 1));
    assert_eq!(
        t.ops.mask(100),
        Some(set("0-7")),
        "undecided until it comes"
    );
    t.assert_explains(100, "command line: not read yet");

    // A read asked for an earlier process by that pid changes nothing.
    let mut stale = asked[0];
    stale.start_time = 0;
    t.ev(Input::Cmdline(cmdlines::CmdlineRead {
        wanted: stale,
        args: Some(vec!["feed".into(), "--venue=X".into()]),
    }));
    assert_eq!(t.ops.mask(100), Some(set("0-7")));

    t.ev(Input::Cmdline(cmdlines::CmdlineRead {
        wanted: asked[0],
        args: Some(vec!["feed".into(), "--venue=X".into()]),
    }));
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    // Known now: more renames read nothing and ask nothing.
    for i in 0..100 {
        t.renames(100, 100, if i % 2 == 0 { "feedx" } else { "feed" });
    }
    assert!(t.mgr.take_cmdline_reads().is_empty());
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    t.assert_explains(100, "managed by venue");

    // An exec forgets it: the new image's is asked for, and decides.
    t.procs.set_cmdline(100, &["feed", "--venue=Y"]);
    t.msg(ProcMsg::Exec { pid: 100 });
    assert_eq!(t.mgr.take_cmdline_reads().len(), 1);
    t.procs.set_cmdline(100, &["feed", "--venue=Y"]);
    t.msg(ProcMsg::Exec { pid: 100 });
    let asked = t.mgr.take_cmdline_reads();
    assert_eq!(asked.len(), 1, "asked again after the second exec");
    t.ev(Input::Cmdline(cmdlines::CmdlineRead {
        wanted: asked[0],
        args: Some(vec!["feed".into(), "--venue=Y".into()]),
    }));
    assert_eq!(t.ops.mask(100), Some(set("0-7")), "released: no --venue=X");
    assert_eq!(t.procs.cmdlines(), 0);
    // Exited: nothing is kept for it.
    t.procs.remove(100, 100);
    t.msg(ProcMsg::Exit { pid: 100, tid: 100 });
    assert_eq!(t.mgr.cmdlines.sizes(), (0, 0));
}

#[test]
fn a_matched_process_has_every_thread_pinned_and_new_threads_follow() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx"), (102, "tx")]);
    t.process(200, "other", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    for tid in [100, 101, 102] {
        assert_eq!(t.ops.mask(tid), Some(set("2-3")), "tid {tid}");
    }
    assert_eq!(t.ops.mask(200), Some(set("0-7")));
    assert!(
        t.ops.sets().iter().all(|(tid, _)| *tid != 200),
        "unmatched untouched"
    );

    // A new thread inherits the pinned mask: it is checked, not written.
    t.procs.add_thread(100, 103, "worker");
    t.procs.add_thread(100, 103, "rx");
    t.ops.add_task(103, &set("2-3"));
    t.ops.clear_calls();
    let c = t.new_thread(100, 103, 100);
    assert!(matches!(
        &c[..],
        [Change::Pinned {
            tid: 103,
            outcome: Outcome::Applied { .. },
            ..
        }]
    ));
    assert!(t.ops.sets().is_empty());
    // One created by a thread someone else had moved is written.
    t.procs.add_thread(100, 104, "rx");
    t.ops.add_task(104, &set("0-7"));
    t.new_thread(100, 104, 100);
    assert_eq!(t.ops.mask(104), Some(set("2-3")));
    assert_eq!(t.mgr.managed_threads(), 5);

    t.msg(ProcMsg::Exit { pid: 100, tid: 104 });
    assert_eq!(t.mgr.managed_threads(), 4);
    let rows = t.mgr.list_managed();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].rule.as_str(),
            rows[0].cpus.as_str(),
            rows[0].state.as_str()
        ),
        ("feed", "2-3", "applied")
    );
}

#[test]
fn a_new_thread_is_pinned_from_the_fork_event_without_reading_proc() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ev(new_rules(rules(FEED)));
    // Inherited from a pinned creator: one read-back, no write, no /proc read.
    t.procs.add_thread(100, 102, "rx");
    t.ops.add_task(102, &set("2-3"));
    t.ops.clear_calls();
    let reads = t.procs.reads();
    t.new_thread(100, 102, 101);
    assert_eq!(t.ops.calls(), vec![Call::Get(102)]);
    // Created by a task someone else had moved: written and read back.
    t.procs.add_thread(100, 103, "rx");
    t.ops.add_task(103, &set("0-7"));
    t.ops.clear_calls();
    t.new_thread(100, 103, 100);
    assert_eq!(
        t.ops.calls(),
        vec![Call::Get(103), Call::Set(103, set("2-3")), Call::Get(103)]
    );
    assert_eq!(t.procs.reads(), reads, "the FORK path read /proc");
    // Its original mask is what it had, and comes back when the rule goes.
    t.ev(new_rules(rules("")));
    assert_eq!(t.ops.mask(102), Some(set("0-7")));
    assert_eq!(t.ops.mask(103), Some(set("0-7")));
}

#[test]
fn a_batch_names_new_threads_from_its_comm_events_and_skips_tasks_that_exit() {
    const DP: &str = r#"
[[rule]]
name = "dp"
[rule.match]
comm = "dpdk"
[rule.place]
cpus = "4-6"
[[rule.threads]]
comm = "lcore-*"
cpus = "6"
"#;
    let mut t = rig(ManagerConfig::default());
    t.process(100, "dpdk", 1, &[]);
    t.ev(new_rules(rules(DP)));
    // Thread 101 is born with its creator's name and renames itself; 102 is born
    // and gone within the batch; 103 keeps its inherited name (read from /proc).
    t.procs.add_thread(100, 101, "lcore-0");
    t.ops.add_task(101, &set("4-6"));
    t.ops.add_task(102, &set("4-6"));
    t.procs.add_thread(100, 103, "dpdk");
    t.ops.add_task(103, &set("4-6"));
    t.ops.clear_calls();
    let reads = t.procs.reads();
    let c = t.batch(vec![
        ProcMsg::NewThread {
            pid: 100,
            tid: 101,
            parent: 1,
        },
        ProcMsg::NewThread {
            pid: 100,
            tid: 102,
            parent: 1,
        },
        ProcMsg::Comm {
            pid: 100,
            tid: 101,
            comm: "lcore-0".into(),
        },
        ProcMsg::Exit { pid: 100, tid: 102 },
    ]);
    assert_eq!(
        t.procs.reads(),
        reads,
        "a name known from the batch was read"
    );
    assert_eq!(
        t.ops.calls(),
        vec![Call::Get(101), Call::Set(101, set("6")), Call::Get(101)],
        "101 pinned once for its final name, 102 not at all"
    );
    assert!(matches!(&c[..], [Change::Pinned { tid: 101, .. }]));
    assert_eq!(t.mgr.counters().gone, 1);
    t.batch(vec![ProcMsg::NewThread {
        pid: 100,
        tid: 103,
        parent: 1,
    }]);
    assert_eq!(t.procs.reads(), reads + 1);
    assert_eq!(t.ops.mask(103), Some(set("4-6")));
    // The same messages one at a time end in the same masks.
    let mut u = rig(ManagerConfig::default());
    u.process(100, "dpdk", 1, &[(101, "lcore-0")]);
    u.ev(new_rules(rules(DP)));
    assert_eq!(u.ops.mask(101), t.ops.mask(101));
}

#[test]
fn a_rescan_checks_an_unchanged_managed_process_without_a_full_snapshot() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ev(new_rules(rules(FEED)));
    let snaps = t.procs.snapshots();
    // A thread the events missed, and one that left unseen.
    t.procs.add_thread(100, 102, "tx");
    t.ops.add_task(102, &set("0-7"));
    t.procs.remove(100, 101);
    t.ops.remove_task(101);
    t.ev(Input::Rescan);
    assert_eq!(t.procs.snapshots(), snaps, "a full snapshot was taken");
    assert_eq!(t.ops.mask(102), Some(set("2-3")));
    assert_eq!(t.mgr.managed_threads(), 2);
    // Someone else's change is still noticed.
    t.ops.external_set(102, &set("5"));
    let c = t.ev(Input::Rescan);
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Foreign {
            tid: 102,
            released: true,
            ..
        }
    )));
    assert_eq!(t.procs.snapshots(), snaps);
    // A renamed process (an exec the events missed) gets a full look.
    t.procs.rename(100, 100, "other");
    t.ev(Input::Rescan);
    assert!(t.procs.snapshots() > snaps);
    assert_eq!(t.mgr.managed_processes(), 0);
}

/// A release says which process, why, and how many threads got their masks back or
/// were left as someone else set them, in its message.
#[test]
fn a_release_is_logged_in_words() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx"), (102, "tx")]);
    t.ev(new_rules(rules(FEED)));
    t.ops.external_set(102, &set("5"));
    let (_, said) = crate::test_log::messages(|| t.ev(new_rules(RuleSet::default())));
    assert!(
        said.contains(
            &"INFO released pid 100 (feed), managed for rule feed: no rule matches any more; \
              2 threads given their masks back, 1 thread left alone (someone else changed \
              their masks)"
                .to_string()
        ),
        "{said:#?}"
    );
}

#[test]
fn removing_the_rule_gives_back_the_original_masks() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ops.external_set(101, &set("5"));
    t.ev(new_rules(rules(FEED)));
    assert_eq!(t.ops.mask(101), Some(set("2-3")));
    let c = t.ev(new_rules(RuleSet::default()));
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Released {
            pid: 100,
            restored: 2,
            ..
        }
    )));
    assert_eq!(t.ops.mask(100), Some(set("0-7")));
    assert_eq!(
        t.ops.mask(101),
        Some(set("5")),
        "each thread gets its own original"
    );
    assert_eq!(t.mgr.managed_processes(), 0);
}

#[test]
fn a_process_that_stops_matching_is_released_and_a_renamed_one_is_matched() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "bash", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    assert!(!t.mgr.is_managed(100));
    t.renames(100, 100, "feed-a");
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    t.procs.rename(100, 100, "bash");
    t.msg(ProcMsg::Exec { pid: 100 });
    assert!(!t.mgr.is_managed(100));
    assert_eq!(t.ops.mask(100), Some(set("0-7")));
}

#[test]
fn a_reused_pid_is_never_acted_on_for_the_old_process() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    assert!(t.mgr.is_managed(100));
    // The process exits unseen (events lost) and another takes its pid.
    t.ops.remove_task(100);
    t.procs.remove(100, 100);
    t.process(100, "other", 2, &[]);
    t.ops.clear_calls();
    t.ev(Input::Rescan);
    assert!(!t.mgr.is_managed(100));
    assert!(
        t.ops.sets().is_empty(),
        "the new process was touched: {:?}",
        t.ops.calls()
    );
    assert_eq!(t.ops.mask(100), Some(set("0-7")));
}

#[test]
fn kernel_threads_are_skipped_quietly() {
    let mut t = rig(ManagerConfig::default());
    t.process(3, "feedworker", 1, &[]);
    t.procs.set_kernel_thread(3);
    t.ev(new_rules(rules(FEED)));
    assert!(!t.mgr.is_managed(3));
    assert!(t.ops.sets().is_empty());
    assert!(t.mgr.counters().kernel_threads >= 1);
}

/// The `kernel-thread` outcome counts kernel threads a rule's name fits, once each:
/// not again at every rescan, and not those no rule could take.
#[test]
fn kernel_threads_are_counted_once_each_and_only_when_a_rule_fits_them() {
    let mut t = rig(ManagerConfig::default());
    t.process(3, "feedworker", 1, &[]);
    t.procs.set_kernel_thread(3);
    t.process(4, "kworker/0:1", 1, &[]);
    t.procs.set_kernel_thread(4);
    t.process(5, "ksoftirqd/0", 1, &[]);
    t.procs.set_kernel_thread(5);
    t.ev(new_rules(rules(FEED)));
    for _ in 0..5 {
        t.ev(Input::Rescan);
    }
    assert_eq!(t.mgr.counters().kernel_threads, 1, "feedworker, once");
    assert!(t.ops.sets().is_empty());
}

#[test]
fn exclusive_rules_never_share_cpus_and_the_loser_is_visible() {
    let mut t = rig(ManagerConfig::default());
    t.ev(new_rules(rules(
        r#"
[[rule]]
name = "hi"
priority = 50
[rule.match]
comm = "hi"
[rule.place]
cpus = "2-3"
exclusive = true

[[rule]]
name = "lo"
priority = 10
[rule.match]
comm = "lo"
[rule.place]
cpus = "3-4"

[[rule]]
name = "lo-excl"
priority = 5
[rule.match]
comm = "lox"
[rule.place]
cpus = "4-5"
exclusive = true

[[rule]]
name = "count"
priority = 1
[rule.match]
comm = "cnt"
[rule.place]
count = 2
"#,
    )));
    assert_eq!(
        t.mgr.plan_of("hi", None),
        Some(&PlanState::Placed { cpus: set("2-3") })
    );
    assert_eq!(
        t.mgr.plan_of("lo", None),
        Some(&PlanState::Lost {
            to: "hi".into(),
            cpus: set("3")
        })
    );
    // lo lost, so 4 is free for the exclusive rule below it.
    assert_eq!(
        t.mgr.plan_of("lo-excl", None),
        Some(&PlanState::Placed { cpus: set("4-5") })
    );
    // Count placement steers around every exclusive CPU.
    assert_eq!(
        t.mgr.plan_of("count", None),
        Some(&PlanState::Placed { cpus: set("0-1") })
    );

    t.process(100, "lo", 1, &[]);
    t.ev(Input::Rescan);
    assert_eq!(
        t.ops.mask(100),
        Some(set("0-7")),
        "a losing rule is not applied"
    );
    let rows = t.mgr.list_managed();
    assert_eq!(rows[0].state, "conflict: lost to hi");
    t.assert_explains(100, "lost CPUs 3 to rule \"hi\"");
}

#[test]
fn a_lower_priority_exclusive_rule_cannot_take_shared_cpus() {
    let mut t = rig(ManagerConfig::default());
    t.ev(new_rules(rules(
        r#"
[[rule]]
name = "a"
priority = 9
[rule.match]
comm = "a"
[rule.place]
cpus = "1-2"

[[rule]]
name = "b"
priority = 1
[rule.match]
comm = "b"
[rule.place]
cpus = "2"
exclusive = true
"#,
    )));
    assert_eq!(
        t.mgr.plan_of("b", None),
        Some(&PlanState::Lost {
            to: "a".into(),
            cpus: set("2")
        })
    );
}

#[test]
fn cpusets_narrow_or_refuse_and_refusals_are_not_retried() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ops.set_cpuset(100, &set("0-2"));
    t.ops.set_cpuset(101, &set("0-1"));
    let c = t.ev(new_rules(rules(FEED)));
    let outcomes: Vec<(Tid, Outcome)> = c
        .into_iter()
        .filter_map(|c| match c {
            Change::Pinned { tid, outcome, .. } => Some((tid, outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (
                100,
                Outcome::Narrowed {
                    requested: set("2-3"),
                    effective: set("2")
                }
            ),
            (
                101,
                Outcome::Refused {
                    requested: set("2-3")
                }
            ),
        ]
    );
    t.ops.clear_calls();
    t.ev(Input::Rescan);
    assert!(t.ops.sets().is_empty(), "retried: {:?}", t.ops.sets());
    assert_eq!(t.mgr.counters().refused, 1);
}

#[test]
fn someone_elses_change_is_released_or_reasserted_as_configured() {
    for (policy, expect, after) in [
        (ForeignChange::Release, set("7"), set("7")),
        (ForeignChange::Reassert, set("2-3"), set("0-7")),
    ] {
        let mut t = rig(ManagerConfig {
            on_foreign_change: policy,
        });
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ev(new_rules(rules(FEED)));
        t.ops.external_set(101, &set("7"));
        let c = t.ev(Input::Rescan);
        assert!(c
            .iter()
            .any(|c| matches!(c, Change::Foreign { tid: 101, .. })));
        assert_eq!(t.ops.mask(101), Some(expect.clone()), "{policy:?}");
        // A cpuset narrowing within our CPUs is not someone else's change.
        t.ops.set_cpuset(100, &set("3"));
        let c = t.ev(Input::Rescan);
        assert!(!c
            .iter()
            .any(|c| matches!(c, Change::Foreign { tid: 100, .. })));
        t.mgr.shutdown().unwrap();
        // Shutdown restores what is still ours and leaves a released thread alone.
        assert_eq!(t.ops.mask(101), Some(after), "{policy:?}");
    }
}

#[test]
fn hotplug_replans_and_reapplies() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "cnt", 1, &[]);
    t.ev(new_rules(rules(
        "[[rule]]\nname = \"c\"\n[rule.match]\ncomm = \"cnt\"\n[rule.place]\ncount = 2\n",
    )));
    assert_eq!(t.ops.mask(100), Some(set("0-1")));
    // CPU 1 goes away; the kernel widens nothing here but the plan moves.
    let rules = t.mgr.rules().clone();
    t.ev(Input::PlanChanged(plan_on(rules.clone(), "0,2-7")));
    assert_eq!(
        t.mgr.plan_of("c", None),
        Some(&PlanState::Placed { cpus: set("0,2") })
    );
    assert_eq!(t.ops.mask(100), Some(set("0,2")));
    // The kernel widened a mask while the CPU was away; coming back re-applies.
    t.ops.external_set(100, &set("0-7"));
    t.ev(Input::PlanChanged(plan_on(rules, "0-7")));
    assert_eq!(t.ops.mask(100), Some(set("0-1")));
    assert_eq!(t.mgr.counters().foreign_changes, 0);
}

#[test]
fn a_child_of_a_managed_process_that_matches_nothing_gets_the_original_back() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[]);
    t.ev(new_rules(rules(FEED)));
    // The child inherits the pinned mask, then is seen with another name.
    t.procs.put(300, "helper", 5, &[]);
    t.ops.add_process(300, 5, &[], &set("2-3"));
    t.msg(ProcMsg::NewProcess {
        pid: 300,
        parent: 100,
    });
    assert!(!t.mgr.is_managed(300));
    assert_eq!(t.ops.mask(300), Some(set("0-7")));
    // A matching child keeps the parent's original for later.
    t.procs.put(301, "feed", 6, &[]);
    t.ops.add_process(301, 6, &[], &set("2-3"));
    t.msg(ProcMsg::NewProcess {
        pid: 301,
        parent: 100,
    });
    t.ev(new_rules(RuleSet::default()));
    assert_eq!(t.ops.mask(301), Some(set("0-7")));
}

#[test]
fn exits_and_vanishing_threads_are_outcomes_not_errors() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ev(new_rules(rules(FEED)));
    // A thread reported by the connector that is already gone.
    let c = t.new_thread(100, 555, 100);
    assert!(c.is_empty());
    assert!(t.mgr.counters().gone >= 1);
    t.ops.remove_task(100);
    t.ops.remove_task(101);
    t.procs.remove(100, 100);
    let c = t.msg(ProcMsg::Exit { pid: 100, tid: 100 });
    assert_eq!(c, vec![Change::Exited { pid: 100 }]);
    assert_eq!(t.mgr.managed_processes(), 0);
}

/// A process renaming its main thread in a burst is looked at once per batch of events,
/// with its last name, not once per rename.
#[test]
fn a_burst_of_renames_in_one_batch_is_one_look() {
    let mut t = rig(ManagerConfig::default());
    t.ev(new_rules(rules(FEED)));
    t.process(100, "idle", 1, &[(101, "w")]);
    let msgs: Vec<ProcMsg> = (0..1000)
        .map(|i| ProcMsg::Comm {
            pid: 100,
            tid: 100,
            comm: if i % 2 == 0 { "feedx" } else { "idle" }.into(),
        })
        .chain(std::iter::once(ProcMsg::Comm {
            pid: 100,
            tid: 100,
            comm: "feed".into(),
        }))
        .collect();
    t.procs.rename(100, 100, "feed");
    let snapshots = t.procs.snapshots();
    t.batch(msgs);
    assert_eq!(t.procs.snapshots() - snapshots, 1);
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    assert_eq!(t.ops.mask(101), Some(set("2-3")));
    assert_eq!(t.mgr.counters().events, 1 + 1001, "every message counted");
}

/// A process the watcher finds in the cgroup of a container the runtime told about
/// matches the container keys; the same process outside it, or in a user's look-alike
/// cgroup, does not.
#[test]
fn a_process_in_a_known_containers_cgroup_matches_container_rules() {
    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let pods = "[[rule]]\nname = \"pod\"\n[rule.match]\ncontainer = \"md-feed\"\n[rule.place]\ncpus = \"4-5\"\n";
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[]);
    t.procs.set_cgroup(
        100,
        &format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope"),
    );
    t.process(200, "feed", 1, &[]);
    t.procs.set_cgroup(
        200,
        &format!("/user.slice/user-1000.slice/user@1000.service/cri-containerd-{ID}.scope"),
    );
    t.process(300, "feed", 1, &[]);
    // Cgroups a user or a container may make where it is delegated one (a service's
    // `Delegate=yes`, a container's own writable cgroup), named after the container.
    let look_alikes = [
        format!("/system.slice/bob.service/cri-containerd-{ID}.scope"),
        format!("/system.slice/bob.service/kubepods/pod1/{ID}"),
        format!("/kubepods/besteffort/pod2/{}/{ID}", "f".repeat(64)),
        format!(
            "/kubepods/besteffort/pod2/{}/kubepods/pod1/{ID}",
            "f".repeat(64)
        ),
        format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope/sub"),
    ];
    for (i, cg) in look_alikes.iter().enumerate() {
        let pid = 400 + i as i32;
        t.process(pid, "feed", 1, &[]);
        t.procs.set_cgroup(pid, cg);
    }
    t.mgr.set_containers(vec![(
        ID.to_string(),
        crate::rules::ContainerInfo {
            name: "md-feed".into(),
            pod: "api-0".into(),
            namespace: "trading".into(),
            labels: None,
        },
    )]);
    t.ev(new_rules(rules(pods)));
    assert_eq!(t.ops.mask(100), Some(set("4-5")));
    assert_eq!(
        t.ops.mask(200),
        Some(set("0-7")),
        "a user's look-alike cgroup"
    );
    assert_eq!(t.ops.mask(300), Some(set("0-7")), "in no container");
    for (i, cg) in look_alikes.iter().enumerate() {
        assert_eq!(t.ops.mask(400 + i as i32), Some(set("0-7")), "{cg}");
    }
    t.assert_explains(
        100,
        "in container md-feed (pod trading/api-0), as the runtime said over NRI",
    );
}
