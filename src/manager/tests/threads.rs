//! Thread entries (`[[rule.threads]]`): which threads each takes, their slots as
//! threads come, go and are renamed, and what is said about threads no unit takes.

use super::*;

impl T {
    /// New rules planned on CPUs 0-7 as the daemon plans them: its chooser kept to
    /// plan again for what the manager reports.
    fn shared_rules(&mut self, rules: RuleSet) -> Vec<Change> {
        self.choose = Some(&LowestFirst);
        self.ev(new_rules(rules))
    }
    /// The loop's release of slots no thread holds; true when there were some.
    fn release_slots(&mut self) -> bool {
        let released = self.mgr.release_slots();
        crate::daemon::replan::settle(&mut self.mgr, self.choose);
        released
    }
}

#[test]
fn thread_entries_get_their_own_cpus_within_the_rule() {
    let mut t = rig(ManagerConfig::default());
    t.process(
        100,
        "dpdk",
        1,
        &[(101, "lcore-0"), (102, "lcore-1"), (103, "ctl")],
    );
    t.ev(new_rules(rules(
        r#"
[[rule]]
name = "dp"
[rule.match]
comm = "dpdk"
[rule.place]
cpus = "4-6"
[[rule.threads]]
comm = "lcore-*"
count = 1
"#,
    )));
    assert_eq!(t.ops.mask(100), Some(set("4-6")));
    assert_eq!(t.ops.mask(103), Some(set("4-6")));
    assert_eq!(t.ops.mask(101), Some(set("4")));
    assert_eq!(t.ops.mask(102), Some(set("5")));
    // A thread renamed into an entry moves to the next slot.
    t.renames(100, 103, "lcore-2");
    assert_eq!(t.ops.mask(103), Some(set("6")));
    // The journal records threads whose masks differ from the process's.
    let j = t.mgr.journal_entries();
    assert_eq!(j.len(), 1);
    assert_eq!(
        j[0].threads.keys().copied().collect::<Vec<_>>(),
        vec![101, 102, 103]
    );
}

#[test]
fn within_bounds_thread_entries_instead_of_the_rule_cpus() {
    let mut t = rig(ManagerConfig::default());
    t.process(
        100,
        "l3fwd",
        1,
        &[(101, "lcore-1"), (102, "lcore-2"), (103, "eal-intr")],
    );
    t.ev(new_rules(rules(
        r#"
[[rule]]
name = "dp"
[rule.match]
comm = "l3fwd"
[rule.place]
cpus = "0"
[[rule.threads]]
comm = "lcore-*"
count = 1
within = "4-5"
exclusive = true
"#,
    )));
    assert_eq!(t.ops.mask(103), Some(set("0")));
    assert_eq!(t.ops.mask(101), Some(set("4")));
    assert_eq!(t.ops.mask(102), Some(set("5")));
}

/// A thread `tid` born in process 100 (with its creator's name and mask, as a clone
/// is) that then names itself `name`.
fn born_and_named(t: &mut T, tid: Tid, name: &str) {
    t.procs.add_thread(100, tid, "md");
    t.ops.add_task(tid, &set("0"));
    t.new_thread(100, tid, 100);
    t.renames(100, tid, name);
}

/// Thread `tid` of process 100 exits.
fn exits(t: &mut T, tid: Tid) {
    t.procs.remove(100, tid);
    t.ops.remove_task(tid);
    t.msg(ProcMsg::Exit { pid: 100, tid });
}

const RX_PER_THREAD: &str = r#"
[[rule]]
name = "md"
[rule.match]
comm = "md"
[rule.place]
cpus = "0"
[[rule.threads]]
comm = "rx-*"
count = 1
within = "4-6"
"#;

#[test]
fn a_thread_that_replaces_one_that_exited_takes_its_free_slot() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "md", 1, &[(101, "rx-a"), (102, "rx-b"), (103, "rx-c")]);
    t.ev(new_rules(rules(RX_PER_THREAD)));
    let on = |t: &T, tid| t.ops.mask(tid).unwrap().to_string();
    assert_eq!([on(&t, 101), on(&t, 102), on(&t, 103)], ["4", "5", "6"]);
    // rx-b exits and is restarted: the new thread gets CPU 5, the one rx-b left, not
    // a live thread's CPU.
    exits(&mut t, 102);
    born_and_named(&mut t, 104, "rx-b");
    assert_eq!(on(&t, 104), "5");
    // Churn many times over: the slots stay one per thread.
    let mut live = vec![101, 103, 104];
    for n in 0..50 {
        let gone = live.remove(n % 3);
        exits(&mut t, gone);
        let tid = 200 + n as Tid;
        born_and_named(&mut t, tid, "rx-x");
        live.push(tid);
        let mut cpus: Vec<String> = live.iter().map(|&x| on(&t, x)).collect();
        cpus.sort();
        assert_eq!(cpus, ["4", "5", "6"], "after {} restarts", n + 1);
    }
    // A rescan that finds a thread gone without its exit event frees its slot too.
    let gone = live.remove(0);
    let freed = on(&t, gone);
    t.procs.remove(100, gone);
    t.ops.remove_task(gone);
    t.ev(Input::Rescan);
    born_and_named(&mut t, 300, "rx-y");
    assert_eq!(on(&t, 300), freed);
}

#[test]
fn threads_that_outnumber_their_slots_are_said_to_share() {
    let mut t = rig(ManagerConfig::default());
    t.process(
        100,
        "md",
        1,
        &[(101, "rx-a"), (102, "rx-b"), (103, "rx-c"), (104, "rx-d")],
    );
    t.ev(new_rules(rules(RX_PER_THREAD)));
    // Three slots (CPUs 4, 5, 6), four threads: the fourth wraps to the first slot.
    assert_eq!(t.ops.mask(104), Some(set("4")));
    let why = t.mgr.explain(100);
    assert!(
        why.contains(
            "tid 104 (rx-d): applied 4 (slot 3, past the last of 3 slots: shares the CPUs of slot 0)"
        ),
        "{why}"
    );
    assert!(!why.contains("tid 101 (rx-a): applied 4 ("), "{why}");
}

const FEED_THREADS_ONLY: &str = r#"
[[rule]]
name = "feed"
[rule.match]
comm = "feed"
[[rule.threads]]
comm = "tx-*"
cpus = "3"
"#;

#[test]
fn a_thread_no_unit_takes_is_left_alone_not_failed_and_says_why() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx-0"), (102, "tx-0")]);
    t.ev(new_rules(rules(FEED_THREADS_ONLY)));
    assert_eq!(t.ops.mask(102), Some(set("3")));
    let why = t.mgr.explain(100);
    assert!(
        why.contains("tid 101 (rx-0): left alone: no [[rule.threads]] entry takes its name and the rule has no [rule.place]"),
        "{why}"
    );
    assert!(!why.contains("failed"), "{why}");
    let rows = t.mgr.list_managed();
    assert_eq!(rows[0].state, "1 applied, 2 left-alone", "{rows:?}");
}

#[test]
fn a_reload_that_changes_a_rule_places_threads_already_seen_at_once() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx-0"), (102, "tx-0")]);
    t.ev(new_rules(rules(FEED_THREADS_ONLY)));
    assert_eq!(t.ops.mask(101), Some(set("0-7")));
    // The same rule, edited to take the rx thread too.
    t.ev(new_rules(rules(
        &FEED_THREADS_ONLY.replace("tx-*", "[rt]x-*"),
    )));
    assert_eq!(t.ops.mask(101), Some(set("3")));
    t.assert_explains(100, "tid 101 (rx-0): applied 3");
}

#[test]
fn a_renamed_thread_shows_its_current_name() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx-0"), (102, "tx-0")]);
    t.ev(new_rules(rules(FEED_THREADS_ONLY)));
    t.renames(100, 101, "ctl");
    t.assert_explains(100, "tid 101 (ctl): left alone");
    // And one a rescan finds renamed, without an event.
    t.procs.rename(100, 102, "tx-renamed");
    t.ev(Input::Rescan);
    t.assert_explains(100, "tid 102 (tx-renamed): applied 3");
}

#[test]
fn an_exclusive_entry_holds_the_slots_its_threads_take_as_they_come_and_go() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "md", 1, &[(101, "rx-a"), (102, "rx-b")]);
    t.shared_rules(rules(
        r#"
[[rule]]
name = "md"
priority = 10
[rule.match]
comm = "md"
[[rule.threads]]
comm = "rx-*"
count = 1
within = "4-7"
exclusive = true

[[rule]]
name = "other"
[rule.match]
comm = "other"
[rule.place]
count = 1
exclusive = true
within = "4-7"
"#,
    ));
    let held = |t: &T| t.mgr.plan_of("md", Some(0)).unwrap().held().to_string();
    assert_eq!(held(&t), "4-5");
    assert_eq!(
        t.mgr.plan_of("other", None),
        Some(&PlanState::Placed { cpus: set("6") })
    );
    // A third rx thread, seen in a batch: its slot is held at the end of the batch, and
    // the lower rule moves off it.
    t.procs.add_thread(100, 103, "rx-c");
    t.ops.add_task(103, &set("0-7"));
    t.batch(vec![
        ProcMsg::NewThread {
            pid: 100,
            tid: 103,
            parent: 100,
        },
        ProcMsg::Comm {
            pid: 100,
            tid: 103,
            comm: "rx-c".into(),
        },
    ]);
    assert_eq!(t.ops.mask(103), Some(set("6")));
    assert_eq!(held(&t), "4-6");
    assert_eq!(
        t.mgr.plan_of("other", None),
        Some(&PlanState::Placed { cpus: set("7") })
    );
    // It exits: the slot stays held until the loop releases slots, then is free for
    // others again.
    exits(&mut t, 103);
    assert_eq!(held(&t), "4-6");
    assert!(t.release_slots());
    assert_eq!(held(&t), "4-5");
    assert_eq!(
        t.mgr.plan_of("other", None),
        Some(&PlanState::Placed { cpus: set("6") })
    );
}

#[test]
fn a_thread_renamed_out_of_its_entry_frees_its_slot() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "md", 1, &[(101, "rx-a"), (102, "rx-b")]);
    t.ev(new_rules(rules(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md\"\n[[rule.threads]]\ncomm = \"rx-*\"\ncount = 1\nwithin = \"4-6\"\n",
    )));
    assert_eq!(t.ops.mask(101), Some(set("4")));
    t.renames(100, 101, "ctl");
    // It has its own mask back, and the next rx thread takes the slot it left.
    assert_eq!(t.ops.mask(101), Some(set("0-7")));
    born_and_named(&mut t, 104, "rx-c");
    assert_eq!(t.ops.mask(104), Some(set("4")));
    t.assert_explains(100, "tid 101 (ctl): left alone: no [[rule.threads]] entry");
}

/// A thread renamed in and out of an exclusive entry 200 times (a user's own process can
/// do that 1,000 times a second) plans again once, not 200 times: the slot it leaves is
/// kept, and taken again by the next rename, until the loop releases the slots no
/// thread holds. Another rule's managed threads, whose CPUs an exclusive slot moves, are
/// re-checked once per plan, not once per rename.
#[test]
fn renames_in_and_out_of_an_exclusive_entry_plan_again_once_per_release() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "md", 1, &[(101, "ctl")]);
    let names: Vec<(Tid, &str)> = (0..500).map(|i| (1000 + i, "w")).collect();
    t.process(200, "big", 1, &names);
    t.shared_rules(rules(
        r#"
[[rule]]
name = "md"
priority = 10
[rule.match]
comm = "md"
[[rule.threads]]
comm = "rx-*"
count = 1
within = "4-7"
exclusive = true

[[rule]]
name = "big"
[rule.match]
comm = "big"
[rule.place]
count = 2
within = "4-7"
"#,
    ));
    let big_on = |t: &T| t.ops.mask(1000).unwrap().to_string();
    assert_eq!(big_on(&t), "4-5");
    let big_tids = |t: &T| {
        t.ops
            .calls()
            .iter()
            .filter(|c| match c {
                Call::Set(tid, _) | Call::Get(tid) => (1000..1500).contains(tid) || *tid == 200,
            })
            .count()
    };
    t.ops.clear_calls();
    let reads = t.procs.reads();
    for i in 0..200 {
        t.renames(100, 101, if i % 2 == 0 { "rx-a" } else { "ctl" });
    }
    // The first rename took the slot (CPU 4): one plan, the big rule's threads moved once.
    let first = big_tids(&t);
    // One round: each of its 501 threads read, set and read back.
    assert!(
        first <= 3 * 501,
        "{first} affinity calls on the big rule's threads"
    );
    assert!(
        t.procs.reads() - reads <= 2 * 200 + 10,
        "{} reads",
        t.procs.reads() - reads
    );
    assert_eq!(big_on(&t), "5-6");
    assert_eq!(
        t.mgr.plan_of("md", Some(0)).unwrap().held().to_string(),
        "4"
    );
    t.assert_explains(100, "tid 101 (ctl): left alone");

    // Released (the loop's doing, once per SLOTS_KEPT at most): one more plan, the big
    // rule's threads moved back once; nothing more to release after.
    t.ops.clear_calls();
    assert!(t.release_slots());
    assert_eq!(big_on(&t), "4-5");
    let back = big_tids(&t);
    assert!(
        back <= 3 * 501,
        "{back} affinity calls on the big rule's threads"
    );
    assert!(t.mgr.plan_of("md", Some(0)).unwrap().held().is_empty());
    assert!(!t.release_slots());
    // A thread that takes the slot again plans again, as the first did.
    t.renames(100, 101, "rx-a");
    assert_eq!(big_on(&t), "5-6");
    assert_eq!(t.ops.mask(101), Some(set("4")));
}
