//! The steps of pinning one thread (`Manager::pin_thread`), each called on its own:
//! which mask a thread gets, when it is left alone, when it takes a slot, what is
//! given back later, and what someone else's change means.

use super::*;
use crate::manager::applying::{journal_lists, recheck, takes_new_seat, Found, Recheck};

/// Threads named `lcore-*` get a CPU each of 4-6; the others share 4-6.
const DP: &str = r#"
[[rule]]
name = "dp"
[rule.match]
comm = "dpdk"
[rule.place]
cpus = "4-6"
[[rule.threads]]
comm = "lcore-*"
count = 1
"#;

/// Only threads named `tx-*` are placed.
const TX_ONLY: &str = r#"
[[rule]]
name = "feed"
[rule.match]
comm = "feed"
[[rule.threads]]
comm = "tx-*"
cpus = "3"
"#;

const LCORE: ThreadPlacement = ThreadPlacement::Thread(0);
const PROCESS: ThreadPlacement = ThreadPlacement::Process;

/// Process 100 `dpdk` (on 0-7 before) with threads 101 `lcore-0` (slot 0, CPU 4), 102
/// `lcore-1` (slot 1, CPU 5) and 103 `ctl` (4-6), managed by [`DP`].
fn dp() -> T {
    let mut t = rig(ManagerConfig::default());
    t.process(
        100,
        "dpdk",
        1,
        &[(101, "lcore-0"), (102, "lcore-1"), (103, "ctl")],
    );
    t.ev(new_rules(rules(DP)));
    assert_eq!(t.ops.mask(102), Some(set("5")));
    t
}

/// [`dp`] with a new thread 104 `lcore-2` on CPUs 0-1, met for the first time.
fn dp_with_new_thread() -> (T, Found) {
    let t = dp();
    t.procs.add_thread(100, 104, "lcore-2");
    t.ops.add_task(104, &set("0-1"));
    let found = Found {
        pid: 100,
        tid: 104,
        placement: LCORE,
        slot: 2,
        current: set("0-1"),
    };
    (t, found)
}

fn thread(placement: ThreadPlacement, slot: usize, outcome: Outcome) -> ManagedThread {
    ManagedThread::new("t".into(), placement, slot, set("0-7"), outcome)
}

fn applied(cpus: &str) -> Outcome {
    Outcome::Applied {
        effective: set(cpus),
    }
}

#[test]
fn a_known_thread_keeps_its_slot_a_new_one_takes_the_lowest_free() {
    let mut t = dp();
    assert_eq!(
        t.mgr.target_for(100, 101, "lcore-0"),
        (LCORE, 0, Some(set("4")))
    );
    assert_eq!(
        t.mgr.target_for(100, 102, "lcore-1"),
        (LCORE, 1, Some(set("5")))
    );
    assert_eq!(t.mgr.target_for(100, 104, "lcore-9").1, 2);
    // No entry takes it: the rule's CPUs.
    assert_eq!(
        t.mgr.target_for(100, 103, "ctl"),
        (PROCESS, 0, Some(set("4-6")))
    );
    // A thread that left its slot frees it for the next one.
    t.procs.remove(100, 101);
    assert!(!t.mgr.still_its_task(100, 101));
    assert_eq!(t.mgr.target_for(100, 104, "lcore-9").1, 0);
    // Not managed: no target.
    assert_eq!(t.mgr.target_for(999, 999, "lcore-0"), (PROCESS, 0, None));
}

#[test]
fn only_a_rule_with_thread_entries_places_threads_by_name() {
    let dp = rules(DP);
    let feed = rules(FEED);
    assert!(Source::Rule(dp.get("dp").unwrap().clone()).places_by_name());
    assert!(!Source::Rule(feed.get("feed").unwrap().clone()).places_by_name());
    assert!(!Source::Runtime(set("1")).places_by_name());
}

#[test]
fn a_threads_name_is_read_only_when_its_rule_places_threads_by_name() {
    let mut t = dp();
    assert_eq!(
        t.mgr.name_of(100, 101, Some("given".into())),
        Some("given".to_string())
    );
    assert_eq!(t.mgr.name_of(100, 103, None), Some("ctl".to_string()));
    let gone = t.mgr.counters().gone;
    t.procs.remove(100, 103);
    assert_eq!(t.mgr.name_of(100, 103, None), None);
    assert_eq!(t.mgr.counters().gone, gone + 1);

    let mut f = rig(ManagerConfig::default());
    f.process(200, "feed", 1, &[(201, "worker")]);
    f.ev(new_rules(rules(FEED)));
    f.procs.remove(200, 201);
    let gone = f.mgr.counters().gone;
    assert_eq!(f.mgr.name_of(200, 201, None), Some(String::new()));
    assert_eq!(f.mgr.counters().gone, gone, "not read, so not missed");
}

#[test]
fn a_released_thread_is_never_touched_again() {
    let mut t = dp();
    assert!(!t.mgr.is_released(100, 101));
    let m = t.mgr.managed.get_mut(&100).unwrap();
    m.threads.get_mut(&101).unwrap().released = true;
    assert!(t.mgr.is_released(100, 101));
    assert!(!t.mgr.is_released(100, 102));
    assert!(!t.mgr.is_released(999, 101));
}

#[test]
fn a_tid_no_longer_listed_under_its_process_is_forgotten_and_counted_gone() {
    let mut t = dp();
    assert!(t.mgr.still_its_task(100, 100));
    assert!(t.mgr.still_its_task(100, 101));
    assert_eq!(t.mgr.managed[&100].free_slot(LCORE), 2);
    let gone = t.mgr.counters().gone;
    t.procs.remove(100, 101);
    assert!(!t.mgr.still_its_task(100, 101));
    assert!(!t.mgr.managed[&100].threads.contains_key(&101));
    assert_eq!(t.mgr.managed[&100].free_slot(LCORE), 0);
    assert_eq!(t.mgr.counters().gone, gone + 1);
}

#[test]
fn a_mask_that_cannot_be_read_ends_the_pin_and_a_gone_thread_is_forgotten() {
    let mut t = dp();
    let mut out = Vec::new();
    let seat = (LCORE, 0);
    let target = set("4");
    let read = t
        .mgr
        .read_mask(100, 101, "lcore-0", seat, Some(&target), &mut out);
    assert_eq!(read, Some(set("4")));
    let gone = t.mgr.counters().gone;
    t.ops.remove_task(101);
    let read = t
        .mgr
        .read_mask(100, 101, "lcore-0", seat, Some(&target), &mut out);
    assert_eq!(read, None);
    assert!(!t.mgr.managed[&100].threads.contains_key(&101));
    assert_eq!(t.mgr.counters().gone, gone + 1);
    assert_eq!(out, vec![]);
    // Not a managed process: nothing to pin.
    t.ops.add_task(999, &set("0-7"));
    assert_eq!(t.mgr.read_mask(999, 999, "x", seat, None, &mut out), None);
}

#[test]
fn a_thread_no_unit_takes_is_left_alone_with_the_mask_it_had() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx-0"), (102, "tx-0")]);
    t.ev(new_rules(rules(TX_ONLY)));
    t.ops.clear_calls();
    let found = Found {
        pid: 100,
        tid: 104,
        placement: PROCESS,
        slot: 0,
        current: set("0-1"),
    };
    t.mgr.leave_alone(&found, "ctl".into());
    let th = &t.mgr.managed[&100].threads[&104];
    let why = "no [[rule.threads]] entry takes its name and the rule has no [rule.place]";
    assert_eq!(th.outcome, Outcome::LeftAlone { why: why.into() });
    assert_eq!((th.comm.as_str(), &th.original), ("ctl", &set("0-1")));
    assert_eq!(t.ops.calls(), vec![], "no affinity call");
}

#[test]
fn a_thread_renamed_away_from_its_slot_gets_its_mask_back_and_frees_the_slot() {
    let mut t = dp();
    t.mgr.journal_dirty = false;
    // Its unit is now the process's, and that one is not applied.
    let found = Found {
        pid: 100,
        tid: 101,
        placement: PROCESS,
        slot: 0,
        current: set("4"),
    };
    t.mgr.leave_alone(&found, "ctl".into());
    assert_eq!(t.ops.mask(101), Some(set("0-7")));
    let m = &t.mgr.managed[&100];
    let th = &m.threads[&101];
    assert_eq!(
        (th.placement, th.slot, th.comm.as_str()),
        (PROCESS, 0, "ctl")
    );
    assert!(
        matches!(&th.outcome, Outcome::LeftAlone { why } if why.starts_with("its unit [rule.place] is not applied")),
        "{:?}",
        th.outcome
    );
    assert_eq!(m.free_slot(LCORE), 0);
    assert!(t.mgr.journal_dirty);
}

#[test]
fn a_new_thread_gives_back_its_own_mask_unless_it_inherited_ours() {
    let t = dp();
    let m = &t.mgr.managed[&100];
    assert_eq!(m.original, set("0-7"));
    let want = set("7");
    assert_eq!(m.original_for(100, 200, &set("0-1"), &want), set("0-1"));
    // The main thread: the process's.
    assert_eq!(m.original_for(100, 100, &set("0-1"), &want), set("0-7"));
    // Already on its target, on the main thread's mask, on another thread's.
    assert_eq!(m.original_for(100, 200, &set("7"), &want), set("0-7"));
    assert_eq!(m.original_for(100, 200, &set("4-6"), &want), set("0-7"));
    assert_eq!(m.original_for(100, 200, &set("5"), &want), set("0-7"));
}

#[test]
fn recheck_leaves_a_thread_with_our_mask_or_a_final_outcome_alone() {
    let seat = (LCORE, 1);
    let five = set("5");
    let ours = thread(LCORE, 1, applied("5"));
    assert_eq!(
        recheck(&ours, seat, &five, &five, &five, true),
        Recheck::Settled
    );
    let refused = thread(
        LCORE,
        1,
        Outcome::Refused {
            requested: set("5"),
        },
    );
    assert_eq!(
        recheck(&refused, seat, &set("0-7"), &five, &five, true),
        Recheck::Settled
    );
    let denied = thread(LCORE, 1, Outcome::Permission);
    assert_eq!(
        recheck(&denied, seat, &set("0-7"), &five, &five, true),
        Recheck::Settled
    );
}

#[test]
fn recheck_applies_for_a_new_seat_a_stale_thread_or_one_not_applied_yet() {
    let five = set("5");
    let ours = thread(LCORE, 1, applied("5"));
    assert_eq!(
        recheck(&ours, (LCORE, 2), &five, &set("6"), &set("6"), true),
        Recheck::Apply
    );
    assert_eq!(
        recheck(&ours, (PROCESS, 0), &five, &set("4-6"), &set("4-6"), true),
        Recheck::Apply
    );
    let mut stale = thread(LCORE, 1, applied("5"));
    stale.stale = true;
    assert_eq!(
        recheck(&stale, (LCORE, 1), &five, &five, &five, true),
        Recheck::Apply
    );
    let mut refused = thread(
        LCORE,
        1,
        Outcome::Refused {
            requested: set("5"),
        },
    );
    refused.stale = true;
    assert_eq!(
        recheck(&refused, (LCORE, 1), &set("0-7"), &five, &five, true),
        Recheck::Apply,
        "CPUs or rules changed: tried again"
    );
    let recorded = thread(LCORE, 1, Outcome::Gone);
    assert_eq!(
        recheck(&recorded, (LCORE, 1), &set("0-7"), &five, &five, true),
        Recheck::Apply
    );
}

#[test]
fn recheck_tells_someone_elses_change_from_the_kernels() {
    let seat = (PROCESS, 0);
    let target = set("2-3");
    let ours = thread(PROCESS, 0, applied("2-3"));
    assert_eq!(
        recheck(&ours, seat, &set("0-7"), &target, &target, true),
        Recheck::Foreign {
            expected: set("2-3")
        }
    );
    assert_eq!(
        recheck(&ours, seat, &set("0-7"), &target, &target, false),
        Recheck::Apply,
        "only looked for when verifying"
    );
    // Narrowed within the target: a cpuset or an offline CPU.
    assert_eq!(
        recheck(&ours, seat, &set("2"), &target, &target, true),
        Recheck::Apply
    );
    // Every target CPU offline: the kernel runs it anywhere.
    assert_eq!(
        recheck(&ours, seat, &set("0-1"), &target, &CpuSet::new(), true),
        Recheck::Apply
    );
}

#[test]
fn a_seat_is_taken_anew_at_first_contact_or_when_renamed_into_another() {
    let t = thread(LCORE, 1, applied("5"));
    assert!(takes_new_seat(None, (LCORE, 1)));
    assert!(!takes_new_seat(Some(&t), (LCORE, 1)));
    assert!(takes_new_seat(Some(&t), (LCORE, 2)));
    assert!(takes_new_seat(Some(&t), (PROCESS, 1)));
}

#[test]
fn the_journal_lists_the_main_thread_and_threads_with_masks_of_their_own() {
    let process = set("0-7");
    assert!(journal_lists(100, 100, PROCESS, &process, &process));
    assert!(!journal_lists(100, 101, PROCESS, &process, &process));
    assert!(journal_lists(100, 101, LCORE, &process, &process));
    assert!(journal_lists(100, 101, PROCESS, &set("0-1"), &process));
}

#[test]
fn a_new_thread_takes_its_slot_and_is_recorded_before_it_is_applied() {
    let (mut t, found) = dp_with_new_thread();
    t.ops.clear_calls();
    let mut out = Vec::new();
    assert!(t
        .mgr
        .take_seat(&found, "lcore-2".into(), &set("6"), true, &mut out));
    let m = &t.mgr.managed[&100];
    assert_eq!(m.free_slot(LCORE), 3);
    let th = &m.threads[&104];
    assert_eq!(
        (th.comm.as_str(), th.placement, th.slot, &th.original),
        ("lcore-2", LCORE, 2, &set("0-1"))
    );
    assert_eq!(th.outcome, Outcome::Gone, "not applied yet");
    assert_eq!(out, vec![]);
    assert_eq!(t.ops.calls(), vec![]);
}

#[test]
fn a_thread_with_our_mask_is_not_taken_again() {
    let mut t = dp();
    let found = Found {
        pid: 100,
        tid: 102,
        placement: LCORE,
        slot: 1,
        current: set("5"),
    };
    let mut out = Vec::new();
    assert!(!t
        .mgr
        .take_seat(&found, "lcore-1".into(), &set("5"), true, &mut out));
    assert_eq!(out, vec![]);
}

#[test]
fn a_thread_someone_else_moved_is_theirs_or_reasserted_as_configured() {
    for (on_foreign_change, released) in [
        (ForeignChange::Release, true),
        (ForeignChange::Reassert, false),
    ] {
        let mut t = rig(ManagerConfig { on_foreign_change });
        t.process(100, "feed", 1, &[]);
        t.ev(new_rules(rules(FEED)));
        t.ops.external_set(100, &set("0-7"));
        let found = Found {
            pid: 100,
            tid: 100,
            placement: PROCESS,
            slot: 0,
            current: set("0-7"),
        };
        let mut out = Vec::new();
        let taken = t
            .mgr
            .take_seat(&found, "feed".into(), &set("2-3"), true, &mut out);
        assert_eq!(taken, !released);
        assert_eq!(
            out,
            vec![Change::Foreign {
                pid: 100,
                tid: 100,
                expected: set("2-3"),
                found: set("0-7"),
                released,
            }]
        );
        assert_eq!(t.mgr.is_released(100, 100), released);
        assert_eq!(t.mgr.counters().foreign_changes, 1);
    }
}

#[test]
fn applying_records_and_reports_the_outcome() {
    let (mut t, found) = dp_with_new_thread();
    let mut out = Vec::new();
    assert!(t
        .mgr
        .take_seat(&found, "lcore-2".into(), &set("6"), true, &mut out));
    t.mgr.journal_dirty = false;
    let applied_before = t.mgr.counters().applied;
    t.mgr.apply_target(&found, &set("6"), &mut out);
    assert_eq!(t.ops.mask(104), Some(set("6")));
    assert_eq!(
        out,
        vec![Change::Pinned {
            pid: 100,
            tid: 104,
            rule: "dp".into(),
            outcome: applied("6"),
        }]
    );
    assert_eq!(t.mgr.managed[&100].threads[&104].outcome, applied("6"));
    assert_eq!(t.mgr.counters().applied, applied_before + 1);
    assert!(t.mgr.journal_dirty, "a thread entry's mask is journalled");
}

#[test]
fn a_thread_that_exits_before_its_mask_is_set_is_forgotten() {
    let (mut t, found) = dp_with_new_thread();
    let mut out = Vec::new();
    assert!(t
        .mgr
        .take_seat(&found, "lcore-2".into(), &set("6"), true, &mut out));
    t.ops.remove_task(104);
    let gone = t.mgr.counters().gone;
    t.mgr.apply_target(&found, &set("6"), &mut out);
    assert_eq!(out, vec![]);
    assert!(!t.mgr.managed[&100].threads.contains_key(&104));
    assert_eq!(t.mgr.managed[&100].free_slot(LCORE), 2);
    assert_eq!(t.mgr.counters().gone, gone + 1);
}
