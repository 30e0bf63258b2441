//! Knobs set while CPUs are held (`state/knobs.rs`): the resume-latency limit of an
//! `idle-limit-us` rule's CPUs and the unbound workqueue mask, set when the rule holds
//! them and given back when the process exits, when the rule changes, at stop and at
//! the next start after a crash. On a writable copy of the Xeon E5620 tree (16 CPUs),
//! through fake operations.

use super::*;

const FEED: i32 = 5151;

fn rule(limit: u32) -> String {
    format!(
        "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md-feed\"\nuser = 0\n\
         [rule.place]\ncpus = \"2-3\"\nexclusive = true\nidle-limit-us = {limit}\n"
    )
}

/// A state on a copy of the E5620 tree whose CPUs have resume-latency files reading `0`
/// (no constraint) and an unbound workqueue mask of every CPU, with `rule` loaded.
fn started_on_copy(rule: &str) -> (State, tempfile::TempDir, Arc<FakeOps>, Arc<FakeProcs>) {
    let (mut s, d, ops, procs) = state_with_fakes(Timing::default());
    s.cfg.sysroot = fixture_copy("xeon-e5620", d.path());
    prepare(&s.cfg.sysroot);
    write_rule(d.path(), "held", rule);
    s.start().unwrap();
    s.take_actions();
    (s, d, ops, procs)
}

fn prepare(root: &SysRoot) {
    for cpu in 0..16 {
        let p = root.sys_path(format!("devices/system/cpu/cpu{cpu}/power"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("pm_qos_resume_latency_us"), "0\n").unwrap();
    }
    let wq = root.sys_path(crate::knobs::kthreads::WORKQUEUE_DIR);
    std::fs::create_dir_all(&wq).unwrap();
    std::fs::write(wq.join("cpumask"), "ffff\n").unwrap();
}

fn feed_runs(s: &mut State, ops: &FakeOps, procs: &FakeProcs) {
    procs.put(FEED, "md-feed", 7, &[(FEED + 1, "rx-0")]);
    ops.add_process(FEED, 7, &[FEED + 1], &s.machine.online());
    s.manager_event(crate::manager::Input::Rescan);
    s.take_actions();
}

fn qos(s: &State, cpu: u32) -> String {
    std::fs::read_to_string(s.cfg.sysroot.sys_path(crate::knobs::idle::qos_path(cpu)))
        .unwrap()
        .trim()
        .to_string()
}

fn wq(s: &State) -> String {
    let p = format!("{}/cpumask", crate::knobs::kthreads::WORKQUEUE_DIR);
    std::fs::read_to_string(s.cfg.sysroot.sys_path(p))
        .unwrap()
        .trim()
        .to_string()
}

use crate::affinity::FakeOps;
use crate::watch::scan::FakeProcs;
use std::sync::Arc;

#[test]
fn an_idle_limit_is_set_while_the_rule_holds_its_cpus_and_given_back_when_the_process_exits() {
    let (mut s, _d, ops, procs) = started_on_copy(&rule(0));
    assert_eq!(qos(&s, 2), "0", "nothing held yet");
    feed_runs(&mut s, &ops, &procs);
    assert_eq!(qos(&s, 2), "n/a", "0 µs: no idle state");
    assert_eq!(qos(&s, 3), "n/a");
    assert_eq!(qos(&s, 4), "0", "not held: left alone");
    assert_eq!(wq(&s), "fff3", "unbound workqueues off the exclusive CPUs");
    assert!(s.cfg.runtime_dir.join("knobs.json").exists());
    let text = s
        .sharing
        .knobs
        .lines(&s.cfg.sysroot, &"2-3".parse().unwrap());
    assert!(
        text[0].starts_with("idle: CPU 2: resume latency limit n/a"),
        "{text:?}"
    );
    assert!(
        text[2].starts_with("kernel work: kept off CPUs 2-3: 1 workqueue mask"),
        "{text:?}"
    );
    procs.remove(FEED, FEED);
    s.manager_event(crate::manager::Input::Rescan);
    assert_eq!(qos(&s, 2), "0");
    assert_eq!(qos(&s, 3), "0");
    assert_eq!(wq(&s), "ffff");
    assert!(!s.cfg.runtime_dir.join("knobs.json").exists());
}

#[test]
fn a_changed_rule_sets_its_new_limit_and_stop_gives_back_the_first_value() {
    let (mut s, d, ops, procs) = started_on_copy(&rule(20));
    feed_runs(&mut s, &ops, &procs);
    assert_eq!(qos(&s, 2), "20");
    write_rule(d.path(), "held", &rule(5));
    s.handle(Event::Reload(event::ReloadCause::Signal));
    s.take_actions();
    assert_eq!(qos(&s, 2), "5", "the rule's new limit");
    s.handle(Event::Terminate);
    assert_eq!(qos(&s, 2), "0", "what was there before the first limit");
    assert_eq!(wq(&s), "ffff");
}

#[test]
fn after_a_crash_the_next_start_gives_every_knob_back() {
    let (mut s, d, ops, procs) = started_on_copy(&rule(10));
    feed_runs(&mut s, &ops, &procs);
    assert_eq!(qos(&s, 3), "10");
    let (root, runtime) = (s.cfg.sysroot.clone(), s.cfg.runtime_dir.clone());
    // The daemon dies: no stop, its state dropped.
    drop(s);
    write_rule(d.path(), "held", "");
    let (mut next, _d2, _ops, _procs) = state_with_fakes(Timing::default());
    next.cfg.sysroot = root;
    next.cfg.runtime_dir = runtime;
    next.start().unwrap();
    assert_eq!(qos(&next, 3), "0");
    assert_eq!(wq(&next), "ffff");
    assert!(!next.cfg.runtime_dir.join("knobs.json").exists());
}
