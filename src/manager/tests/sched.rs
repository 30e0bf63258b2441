//! The scheduling class a rule gives its threads: set when placed, on new threads too,
//! given back when let go (rule gone, process released, daemon stopping, a crash).

use super::*;
use crate::affinity::restore::Journal;
use crate::affinity::sched::{SchedAttr, SCHED_BATCH, SCHED_FIFO, SCHED_OTHER};

const RX: &str = r#"
[[rule]]
name = "feed"
[rule.match]
comm = "feed"
user = 0
[rule.place]
cpus = "2-3"
exclusive = true
[[rule.threads]]
comm = "rx"
cpus = "3"
exclusive = true
sched-policy = "fifo"
sched-priority = 40
"#;

fn fifo(priority: u32) -> SchedAttr {
    SchedAttr {
        policy: SCHED_FIFO,
        priority,
        flags: crate::affinity::sched::SCHED_FLAG_RESET_ON_FORK,
        ..SchedAttr::default()
    }
}

/// Before pinnerd: the main thread at nice 3, the others in the normal class.
fn niced() -> SchedAttr {
    SchedAttr {
        policy: SCHED_OTHER,
        nice: 3,
        ..SchedAttr::default()
    }
}

#[test]
fn the_rx_thread_gets_its_entrys_class_and_the_others_keep_theirs_until_let_go() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx"), (102, "tx")]);
    t.ops.external_sched(100, niced());
    t.ev(new_rules(rules(RX)));
    assert_eq!(t.ops.mask(101), Some(set("3")));
    assert_eq!(t.ops.sched(101), fifo(40));
    assert_eq!(t.ops.sched(100), niced(), "[rule.place] asks for no class");
    assert_eq!(t.ops.sched(102), SchedAttr::default());
    // A new rx thread gets it too (it inherited the normal class: reset-on-fork).
    t.procs.add_thread(100, 103, "feed");
    t.ops.add_task(103, &set("2-3"));
    t.new_thread(100, 103, 100);
    assert_eq!(t.ops.sched(103), SchedAttr::default());
    t.renames(100, 103, "rx");
    assert_eq!(t.ops.mask(103), Some(set("3")));
    assert_eq!(t.ops.sched(103), fifo(40));
    // The priority changes with the rule; the rule goes: every thread gets its own back.
    t.ev(new_rules(rules(&RX.replace("= 40", "= 41"))));
    assert_eq!(t.ops.sched(101), fifo(41));
    t.ev(new_rules(RuleSet::default()));
    for tid in [101, 102, 103] {
        assert_eq!(t.ops.sched(tid), SchedAttr::default(), "tid {tid}");
    }
    assert_eq!(t.ops.sched(100), niced());
}

#[test]
fn a_class_someone_else_changed_is_left_alone_and_a_renamed_thread_gets_its_own_back() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx"), (102, "rx")]);
    t.ev(new_rules(rules(RX)));
    assert_eq!(t.ops.sched(102), fifo(40));
    let theirs = SchedAttr {
        policy: SCHED_BATCH,
        ..SchedAttr::default()
    };
    t.ops.external_sched(101, theirs);
    t.renames(100, 102, "worker");
    assert_eq!(
        t.ops.sched(102),
        SchedAttr::default(),
        "renamed away: given back"
    );
    let changes = t.ev(new_rules(RuleSet::default()));
    assert!(!changes.is_empty());
    assert_eq!(t.ops.sched(101), theirs, "not ours any more: left alone");
}

#[test]
fn stopping_gives_every_class_back_and_a_refusal_is_counted() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx"), (102, "rx")]);
    t.ops.deny_sched(102);
    t.ev(new_rules(rules(RX)));
    assert_eq!(t.ops.sched(101), fifo(40));
    assert_eq!(t.ops.sched(102), SchedAttr::default());
    assert_eq!(t.mgr.counters().failed, 1);
    t.mgr.shutdown().unwrap();
    assert_eq!(t.ops.sched(101), SchedAttr::default());
}

/// A daemon killed while the rx thread ran in its rule's class: the journal has the
/// class from before, and the next start gives it back.
#[test]
fn after_a_crash_the_next_start_gives_the_class_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = rig(ManagerConfig::default());
    t.process(200, "feed", 1, &[(201, "rx"), (202, "tx")]);
    t.ops.external_sched(201, niced());
    let journal = Journal::new(dir.path());
    let fresh = |t: &T| {
        Manager::new(
            t.ops.clone(),
            t.procs.clone(),
            cpus("0-7", ""),
            ManagerConfig::default(),
        )
        .with_journal(journal.clone())
    };
    t.mgr = fresh(&t);
    t.ev(new_rules(rules(RX)));
    t.mgr.flush().unwrap();
    assert_eq!(t.ops.sched(201), fifo(40));
    let saved = journal.load().unwrap();
    let rx = &saved[0].threads[&201];
    assert_eq!(rx.sched.unwrap().original, niced(), "{saved:?}");
    // Killed: the next start restores from the journal alone.
    let root = super::pins::proc_fixture(dir.path(), 200, "feed", 1, &[201, 202]);
    t.mgr = fresh(&t);
    let report = t.mgr.recover(&root).unwrap();
    assert_eq!(report.restored_sched, 1, "{report:?}");
    assert_eq!(t.ops.sched(201), niced());
    assert_eq!(t.ops.sched(202), SchedAttr::default());
}

#[test]
fn a_thread_born_of_the_rx_thread_with_its_name_gets_the_class() {
    let mut t = rig(ManagerConfig::default());
    t.process(100, "feed", 1, &[(101, "rx")]);
    t.ev(new_rules(rules(RX)));
    t.procs.add_thread(100, 104, "rx");
    t.ops.add_task(104, &set("3"));
    t.new_thread(100, 104, 101);
    assert_eq!(t.ops.mask(104), Some(set("3")));
    assert_eq!(t.ops.sched(104), fifo(40));
}
