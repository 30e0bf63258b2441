//! Holds and what the rule is planned on: the cpuset a rule's own hold makes is never
//! planned in, so a hold settles in one step and memory follows only what settled. On
//! the Xeon E5620 tree (two sockets, SMT: CPU n and n+8 are siblings, even CPUs on node
//! 0, odd on node 1), through fake operations: the holder's part is played by the test
//! (the unit's cpuset set to what was held, its report handed in).

use super::*;
use crate::hold::{HoldReport, Want};
use std::collections::BTreeSet;

const FEED: i32 = 4242;

/// A state on the E5620 tree, its manager acting through fakes, with rule file `rule`
/// loaded and process `FEED` (`comm`, threads `threads`) running on every CPU.
fn with_feed(
    rule: &str,
    comm: &str,
    threads: &[(i32, &str)],
) -> (
    State,
    tempfile::TempDir,
    std::sync::Arc<crate::affinity::FakeOps>,
    std::sync::Arc<crate::watch::scan::FakeProcs>,
) {
    let (mut s, d, ops, procs) = state_with_fakes(Timing::default());
    s.cfg.sysroot = fixture("xeon-e5620");
    write_rule(d.path(), "held", rule);
    s.start().unwrap();
    s.take_actions();
    let online = s.machine.online();
    assert_eq!(online.len(), 16, "the E5620 tree: {online}");
    procs.put(FEED, comm, 7, threads);
    let tids: Vec<i32> = threads.iter().map(|(t, _)| *t).collect();
    ops.add_process(FEED, 7, &tids, &online);
    (s, d, ops, procs)
}

/// The wants of every `Hold` action in `actions`, in order.
fn holds(actions: &[Action]) -> Vec<Vec<Want>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Hold(w) => Some(w.clone()),
            _ => None,
        })
        .collect()
}

/// The nodes of every memory-follow job in `actions`.
fn follows(actions: &[Action]) -> Vec<BTreeSet<u32>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Follow(j) => Some(j.target.clone()),
            _ => None,
        })
        .collect()
}

/// What the holder does with `w`: the unit confined to its CPUs, isolated, the
/// cgroup's cpuset reading them; its report handed in, then the rescan's look.
fn hold_made(s: &mut State, procs: &crate::watch::scan::FakeProcs, w: &Want) -> Vec<Action> {
    procs.set_cpuset(FEED, Some(w.cpus.clone()));
    s.handle(Event::Held(vec![HoldReport {
        rule: w.rule.clone(),
        pid: w.pid,
        unit: Some("md-feed.service".into()),
        cpus: w.cpus.clone(),
        mems: w.mems.clone(),
        confined: true,
        isolate: w.isolate,
        isolated: w.isolate,
        problem: None,
    }]));
    s.manager_event(crate::manager::Input::Rescan);
    s.take_actions()
}

/// The market-data example with `isolate = true` and `memory = "follow"`: four CPUs,
/// one per core, exclusive. Its hold confines the unit to those four CPUs, whose
/// siblings are outside: planned in that cpuset the rule had no CPU left, let go, and
/// was held again, forever, its memory moved to and fro. Now: held once, where its
/// memory is, and nothing changes after.
#[test]
fn a_count_rule_s_own_isolated_hold_settles_in_one_step_where_its_memory_is() {
    let (mut s, _d, ops, procs) = with_feed(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\nuser = 0\n\
         [rule.place]\ncount = 4\npolicy = \"compact\"\nsmt = \"avoid\"\nexclusive = true\n\
         isolate = true\nmemory = \"follow\"\n",
        "md-feed",
        &[(4243, "rx-0")],
    );
    // All of its memory on node 1.
    procs.set_memory(FEED, &[(1, 1 << 30)]);
    s.manager_event(crate::manager::Input::Rescan);
    let first = s.take_actions();
    assert!(
        holds(&first).iter().all(Vec::is_empty),
        "held before its memory was weighed: {:?}",
        holds(&first)
    );
    assert!(follows(&first).is_empty(), "{first:?}");
    s.handle(Event::Memory((FEED, 7, Some([(1, 1 << 30)].into()))));
    let weighed = s.take_actions();
    let wanted = holds(&weighed);
    assert_eq!(wanted.len(), 1, "one hold asked for: {wanted:?}");
    let w = wanted[0][0].clone();
    let node1: CpuSet = "1,3,5,7,9,11,13,15".parse().unwrap();
    assert_eq!(w.cpus.len(), 4, "{w:?}");
    assert!(w.cpus.is_subset(&node1), "held away from its memory: {w:?}");
    assert_eq!(w.mems, Some("1".parse().unwrap()));
    assert!(
        follows(&weighed).is_empty(),
        "memory followed a placement not settled: {weighed:?}"
    );
    assert_eq!(ops.mask(FEED), Some(w.cpus.clone()));

    // The hold is made: the unit's cpuset reads its four CPUs. Its memory follows once,
    // to where it is already; nothing moves after.
    let after = hold_made(&mut s, &procs, &w);
    assert!(holds(&after).is_empty(), "held again: {:?}", holds(&after));
    assert_eq!(follows(&after), vec![BTreeSet::from([1])], "{after:?}");
    for _ in 0..3 {
        s.manager_event(crate::manager::Input::Rescan);
        let again = s.take_actions();
        assert!(holds(&again).is_empty(), "{:?}", holds(&again));
        assert!(follows(&again).is_empty(), "{again:?}");
    }
    assert_eq!(
        s.managed.manager.as_ref().unwrap().plan_of("md", None),
        Some(&crate::plan::PlanState::Placed {
            cpus: w.cpus.clone()
        })
    );
    assert_eq!(ops.mask(FEED), Some(w.cpus.clone()));
    assert_eq!(ops.mask(4243), Some(w.cpus.clone()));
    // As `explain` and `plan --live` say it.
    let said = s.managed.manager.as_ref().unwrap().cpuset_of(FEED).unwrap();
    assert!(
        said.ends_with(&format!(
            "; it reads {} while its rule's hold confines the unit: planned as without the hold",
            w.cpus
        )),
        "{said}"
    );
}

/// `isolate` on a thread entry, as the DPDK example advises: the entry's slots join the
/// process's partition with its `[rule.place]` CPU, once; the workers stay on their
/// slots. Planned in the cpuset that hold made, the entry found no CPU with whole
/// cores free, and the hold shrank to the `[rule.place]` CPU alone.
#[test]
fn a_thread_entry_s_isolate_joins_the_partition_once_and_its_threads_keep_their_slots() {
    let (mut s, _d, ops, procs) = with_feed(
        "[[rule]]\nname = \"dpdk\"\n[rule.match]\ncomm = \"dpdk-l3fwd\"\nuser = 0\n\
         [rule.place]\ncpus = \"1\"\nexclusive = true\n\
         [[rule.threads]]\ncomm = \"lcore-worker-*\"\ncount = 1\nwithin = \"2-7,10-15\"\n\
         smt = \"avoid\"\nexclusive = true\nisolate = true\n",
        "dpdk-l3fwd",
        &[(4243, "lcore-worker-1"), (4244, "lcore-worker-2")],
    );
    s.manager_event(crate::manager::Input::Rescan);
    let first = s.take_actions();
    let wanted = holds(&first);
    assert_eq!(wanted.len(), 1, "one hold asked for: {wanted:?}");
    let w = wanted[0][0].clone();
    let (a, b) = (ops.mask(4243).unwrap(), ops.mask(4244).unwrap());
    assert_eq!((a.len(), b.len()), (1, 1), "one CPU per worker: {a} {b}");
    assert_ne!(a, b);
    let want_cpus = CpuSet::from_iter([1]).union(&a).union(&b);
    assert_eq!(w.cpus, want_cpus, "[rule.place] and the slots: {w:?}");
    assert!(w.isolate);

    let after = hold_made(&mut s, &procs, &w);
    assert!(holds(&after).is_empty(), "held again: {:?}", holds(&after));
    for _ in 0..3 {
        s.manager_event(crate::manager::Input::Rescan);
        assert!(holds(&s.take_actions()).is_empty());
    }
    assert_eq!(ops.mask(4243), Some(a));
    assert_eq!(ops.mask(4244), Some(b));
    assert_eq!(ops.mask(FEED), Some(CpuSet::from_iter([1])));
}

/// A process first seen in a cpuset its rule's hold made (a held service's new main
/// process, a hold a previous run left): planned as on all CPUs, not inside it.
#[test]
fn a_process_first_seen_inside_its_rule_s_hold_is_planned_as_without_it() {
    let (mut s, _d, ops, procs) = with_feed(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\nuser = 0\n\
         [rule.place]\ncount = 4\nsmt = \"avoid\"\nexclusive = true\nisolate = true\n",
        "md-feed",
        &[],
    );
    s.manager_event(crate::manager::Input::Rescan);
    // Its memory (weighed by a compact count) read: none to weigh.
    s.handle(Event::Memory((FEED, 7, None)));
    let w = holds(&s.take_actions())[0][0].clone();
    hold_made(&mut s, &procs, &w);
    // The service restarts: a new main process, born in the held cgroup.
    procs.remove(FEED, FEED);
    s.manager_event(crate::manager::Input::Rescan);
    s.take_actions();
    procs.put(FEED + 10, "md-feed", 9, &[]);
    procs.set_cpuset(FEED + 10, Some(w.cpus.clone()));
    ops.add_process(FEED + 10, 9, &[], &w.cpus);
    s.manager_event(crate::manager::Input::Rescan);
    s.handle(Event::Memory((FEED + 10, 9, None)));
    let wanted = holds(&s.take_actions());
    let last = wanted.last().expect("held for the new process");
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!(last[0].cpus, w.cpus, "{last:?}");
    assert_eq!(ops.mask(FEED + 10), Some(w.cpus.clone()));
}

/// irqbalance reads only the boot's isolated CPUs: it is told to keep IRQs off the CPUs
/// a hold isolates (with those of `irqs = "away"` rules), and may use them again once
/// the hold is let go.
#[test]
fn irqbalance_is_told_to_keep_off_the_cpus_a_hold_isolates_until_it_is_let_go() {
    use super::super::irqs::fake::{pid, FakeIrqbalance};
    let (mut s, _d, _ops, procs) = with_feed(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\nuser = 0\n\
         [rule.place]\ncpus = \"2-3\"\nexclusive = true\nisolate = true\n",
        "md-feed",
        &[(4243, "rx-0")],
    );
    let proc_root = tempfile::tempdir().unwrap();
    let irqbalance = FakeIrqbalance::start(proc_root.path(), pid(3));
    s.cfg.sysroot = crate::sysroot::SysRoot::new(s.cfg.sysroot.sys_path(""), proc_root.path());
    s.manager_event(crate::manager::Input::Rescan);
    let wanted = holds(&s.take_actions());
    let w = wanted.last().expect("a hold asked for")[0].clone();
    assert_eq!(w.cpus, "2-3".parse().unwrap());
    hold_made(&mut s, &procs, &w);
    assert_eq!(irqbalance.next(), "settings cpus 2-3");
    // Let go: the holder reports nothing held.
    s.handle(Event::Held(vec![]));
    assert_eq!(irqbalance.next(), "settings cpus NULL");
}

/// `explain` says what only the boot gives the CPUs a process's exclusive rule holds
/// (read from the sysfs and procfs roots: a fake tree here), to another user too (it
/// is about CPUs, which they see), and nothing of it for a rule that holds none.
#[test]
fn explain_says_which_held_cpus_the_boot_made_nohz_full_and_rcu_nocbs() {
    let explain = |s: &mut State| {
        let Explained { text, .. } = ask(s, |reply| Call::Explain {
            pid: FEED as u32,
            caller_uid: 1000,
            reply,
        })
        .unwrap();
        text
    };
    let tree = tempfile::tempdir().unwrap();
    let boot = |s: &mut State, nohz_full: &str, cmdline: &str| {
        s.cfg.sysroot = fixture_copy("xeon-e5620", tree.path());
        std::fs::write(
            s.cfg.sysroot.sys_path("devices/system/cpu/nohz_full"),
            nohz_full,
        )
        .unwrap();
        std::fs::write(s.cfg.sysroot.proc_path("cmdline"), cmdline).unwrap();
        // The process asked about exists in that procfs.
        std::fs::create_dir_all(s.cfg.sysroot.proc_path(FEED.to_string())).unwrap();
    };
    let (mut s, _d, _ops, _procs) = with_feed(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\n\
         [rule.place]\ncpus = \"2-3\"\nexclusive = true\n",
        "md-feed",
        &[(4243, "rx-0")],
    );
    boot(
        &mut s,
        "3\n",
        "BOOT_IMAGE=/vmlinuz ro nohz_full=3 rcu_nocbs=2-3:1/1\n",
    );
    s.manager_event(crate::manager::Input::Rescan);
    s.take_actions();
    let text = explain(&mut s);
    assert!(
        text.contains(
            "boot: held CPUs 2-3: nohz_full on 3 only (nohz_full= with 2 too would stop the \
             scheduler tick there while one task runs); rcu_nocbs on all; only the kernel \
             command line sets either, at boot\n"
        ),
        "{text}"
    );
    // Booted with neither: what each would add.
    std::fs::remove_dir_all(tree.path().join("machine")).unwrap();
    boot(&mut s, "(null)\n", "BOOT_IMAGE=/vmlinuz ro quiet\n");
    let text = explain(&mut s);
    assert!(
        text.contains("boot: held CPUs 2-3: not nohz_full (nohz_full= would stop the scheduler tick there while one task runs); not rcu_nocbs (rcu_nocbs= would move their RCU callbacks to kernel threads on other CPUs)"),
        "{text}"
    );

    let (mut s, _d, _ops, _procs) = with_feed(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\n\
         [rule.place]\ncpus = \"2-3\"\n",
        "md-feed",
        &[(4243, "rx-0")],
    );
    std::fs::remove_dir_all(tree.path().join("machine")).unwrap();
    boot(&mut s, "3\n", "ro nohz_full=3\n");
    s.manager_event(crate::manager::Input::Rescan);
    s.take_actions();
    let text = explain(&mut s);
    assert!(text.contains("managed by md on CPUs 2-3"), "{text}");
    assert!(!text.contains("boot:"), "{text}");
}
