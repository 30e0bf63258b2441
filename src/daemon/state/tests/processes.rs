//! Processes as their owners see them: run-time pins by an owner, where memory is shown,
//! and memory that follows its CPUs one job at a time.

use super::*;
use crate::topology::Topology;

#[test]
fn a_pin_for_an_owner_is_refused_once_the_process_is_not_theirs() {
    use crate::api::PlaceSpec;
    let (mut s, _d, _job) = started_on_system(Timing::default());
    let child = Sleeper::spawn("sleep");
    let pid = child.pid();
    assert_eq!(ask(&mut s, |reply| Call::Owner { pid, reply }).unwrap(), 0);
    let place = PlaceSpec::Request(count_request(1));
    // Authorized for uid 1000's process, but it is root's now: nothing is pinned.
    match pin(&mut s, pid, place.clone(), Some(false), Some(1000)) {
        Err(e @ CommandError::NotOwner { uid: 1000, .. }) => {
            assert_eq!(
                e.to_string(),
                format!("pid {pid}: not a process of uid 1000")
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ask(&mut s, |reply| Call::ListManaged {
            caller_uid: 0,
            reply
        })
        .unwrap(),
        vec![]
    );
    let Ok(cpus) = pin(&mut s, pid, place, Some(false), Some(0)) else {
        panic!("the owner's pin")
    };
    assert_eq!(cpus.len(), 1);
    let list = ask(&mut s, |reply| Call::ListManaged {
        caller_uid: 0,
        reply,
    })
    .unwrap();
    assert!(
        list.iter().any(|e| e.pid == pid && e.rule == "(runtime)"),
        "{list:?}"
    );
    // Another user sees root's process by pid, rule and CPUs only, as Explain shows it.
    let theirs = ask(&mut s, |reply| Call::ListManaged {
        caller_uid: 1000,
        reply,
    })
    .unwrap();
    let row = theirs.iter().find(|e| e.pid == pid).expect("listed");
    assert_eq!(
        (row.comm.as_str(), row.rule.as_str(), row.state.as_str()),
        ("", "(runtime)", ""),
        "{row:?}"
    );
    assert_eq!(row.cpus, cpus.to_string());
    match plan_with(&mut s, PlaceSpec::Rule("nope".into())) {
        Err(CommandError::NoRule(m)) => assert_eq!(m, "no loaded rule is named \"nope\""),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ask(&mut s, |reply| Call::Owner { pid: 0, reply }),
        Err(CommandError::NoSuchProcess(0))
    ));
}

#[test]
fn a_run_time_pin_and_its_release_act_through_the_operations_handed_in() {
    let (mut s, _d, ops, procs) = state_with_fakes(Timing::default());
    s.start().unwrap();
    let online = s.machine.online();
    procs.put(4242, "fake-feed", 7, &[(4243, "fake-worker")]);
    ops.add_process(4242, 7, &[4242, 4243], &online);
    let place = PlaceSpec::count(1, Policy::Compact, SmtPolicy::Allow);
    let cpus = pin(&mut s, 4242, place, None, None).unwrap();
    assert_eq!(cpus.len(), 1, "{cpus}");
    assert_eq!(ops.mask(4242), Some(cpus.clone()));
    assert_eq!(ops.mask(4243), Some(cpus.clone()));
    let rows = ask(&mut s, |reply| Call::ListManaged {
        caller_uid: 0,
        reply,
    })
    .unwrap();
    assert!(
        rows.iter()
            .any(|r| r.pid == 4242 && r.rule == "(runtime)" && r.cpus == cpus.to_string()),
        "{rows:?}"
    );
    let release = |s: &mut State| {
        let release = crate::api::ReleaseRequest {
            pid: 4242,
            for_owner: None,
        };
        ask(s, |reply| Call::Release { release, reply })
    };
    release(&mut s).unwrap();
    assert_eq!(ops.mask(4242), Some(online.clone()), "its mask given back");
    assert_eq!(ops.mask(4243), Some(online));
    assert!(matches!(
        release(&mut s),
        Err(CommandError::NotManaged(4242))
    ));
}

#[test]
fn explain_says_where_the_memory_is_to_those_who_see_it_all() {
    let (mut s, _d, _job) = started_on_system(Timing::default());
    let child = Sleeper::spawn("sleep");
    let pid = child.pid();
    let one_node = s.machine.topology.as_ref().unwrap().nodes.len() <= 1;
    let Explained { text: why, .. } = ask(&mut s, |reply| Call::Explain {
        pid,
        caller_uid: 0,
        reply,
    })
    .unwrap();
    let mem = serde_json::to_value(
        ask(&mut s, |reply| Call::Memory {
            pid,
            caller_uid: 0,
            reply,
        })
        .unwrap(),
    )
    .unwrap();
    if one_node {
        assert!(why.contains("memory: one node"), "{why}");
        assert_eq!(mem, serde_json::json!({"one_node": true, "nodes": []}));
    } else {
        assert!(why.contains(" resident — node "), "{why}");
        assert!(mem["total_bytes"].as_u64().unwrap() > 0, "{mem}");
    }
    // Another user sees its rule and CPUs only: no memory.
    let Explained { text: why, .. } = ask(&mut s, |reply| Call::Explain {
        pid,
        caller_uid: 1000,
        reply,
    })
    .unwrap();
    assert!(!why.contains("memory"), "{why}");
    assert_eq!(
        serde_json::to_value(
            ask(&mut s, |reply| Call::Memory {
                pid,
                caller_uid: 1000,
                reply
            })
            .unwrap()
        )
        .unwrap(),
        serde_json::Value::Null
    );
    // Once it has exited and been reaped, it is no such process.
    drop(child);
    assert!(matches!(
        ask(&mut s, |reply| Call::Memory { pid, caller_uid: 0, reply }),
        Err(CommandError::NoSuchProcess(p)) if p == pid
    ));
}

/// `Explain` of one's own process on a machine of several nodes reads its `numa_maps`
/// off the loop: here a FIFO, which blocks a reader as a process whose memory map is
/// held blocks one. The loop's handler returns with the read left to a reader and the
/// call unanswered; the reader answers it once the read returns.
#[test]
fn explain_leaves_the_memory_read_to_a_reader_and_it_answers() {
    use std::io::Write;
    use std::sync::mpsc;
    let (mut s, d, _job) = started_on_system(Timing::default());
    let fixture = SysRoot::machine(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-e5620"),
    );
    s.machine.topology = Some(Topology::discover(&fixture).unwrap());
    let child = Sleeper::spawn("sleep");
    let pid = child.pid();
    // Where memory is read from: a tree whose numa_maps for `pid` is a FIFO.
    let proc_dir = d.path().join("proc");
    let own = proc_dir.join(pid.to_string());
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("cgroup"), "0::/\n").unwrap();
    let fifo = own.join("numa_maps");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    s.cfg.sysroot.proc = proc_dir;

    let (reply, mut answer) = tokio::sync::oneshot::channel();
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        s.handle(Event::Command(Call::Explain {
            pid,
            caller_uid: 0,
            reply,
        }));
        let _ = done_tx.send(s);
    });
    let mut s = done
        .recv_timeout(Duration::from_secs(20))
        .expect("the loop's handler read numa_maps itself");
    assert!(answer.try_recv().is_err(), "answered before the read");
    let reads: Vec<_> = s
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::ReadMemory(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(reads.len(), 1);
    // The loop goes on answering while the read waits.
    let listed = ask(&mut s, |reply| Call::ListManaged {
        caller_uid: 0,
        reply,
    });
    assert!(listed.is_ok(), "{listed:?}");
    let read = reads.into_iter().next().unwrap();
    let reader = std::thread::spawn(move || read.run(|_| {}));
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(b"7f0000000000 default anon=768 dirty=768 N0=256 N1=512 kernelpagesize_kB=4\n")
        .unwrap();
    drop(w);
    reader.join().unwrap();
    let Ok(Ok(Explained { text, full, .. })) = answer.try_recv() else {
        panic!("no answer after the read")
    };
    assert!(full);
    assert!(text.contains("node 1"), "{text}");
    assert!(text.contains("numa_maps"), "{text}");
}

/// A memory move of `pid` that took 1 GiB from node `from` to node `to` in 0.5 s,
/// whole, finished `at`.
fn moved_whole(pid: u32, from: u32, to: u32, at: Instant) -> Event {
    use crate::memory::follow::{Finished, Outcome};
    use std::collections::BTreeSet;
    Event::Followed(Box::new(Finished {
        pid: pid as i32,
        target: BTreeSet::from([to]),
        outcome: Outcome::Moved {
            from: BTreeSet::from([from]),
            to: BTreeSet::from([to]),
            moved: 1 << 30,
            left: 0,
            pages_left: 0,
            took: Duration::from_millis(500),
        },
        at,
    }))
}

#[test]
fn memory_follows_one_job_at_a_time_and_waits_out_the_interval() {
    use crate::api::PlaceSpec;
    use std::collections::BTreeSet;
    let (mut s, _d, _job) = started_on_system(Timing::default());
    // Two nodes: even CPUs on node 0, odd on node 1.
    let fixture = SysRoot::machine(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-e5620"),
    );
    s.machine.topology = Some(Topology::discover(&fixture).unwrap());
    s.loaded.settings.memory.follow_interval =
        crate::settings::HumanDuration(Duration::from_secs(300));
    let child = Sleeper::spawn("sleep");
    let pid = child.pid();
    // `follow`: `Some` as `PinProcessWith` gives it, `None` as `PinProcess` (no such
    // argument: as it was).
    let pin = |s: &mut State, cpu: &str, follow: Option<bool>| {
        let place = PlaceSpec::Request(PlacementRequest {
            target: CpuTarget::Cpus(cpu.parse().unwrap()),
            within: None,
            policy: Policy::Compact,
            smt: SmtPolicy::Allow,
            exclusive: false,
            shape: Default::default(),
        });
        pin(s, pid, place, follow, None).unwrap();
        s.take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Follow(j) => Some((j.pid, j.target.clone())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Pinned to CPU 1 (node 1): one job, towards node 1.
    assert_eq!(
        pin(&mut s, "1", Some(true)),
        vec![(pid as i32, BTreeSet::from([1]))]
    );
    // While it runs, no second one.
    s.sync_memory(Instant::now());
    assert!(s.take_actions().is_empty());
    let explain = |s: &mut State| match ask(s, |reply| Call::Explain {
        pid,
        caller_uid: 0,
        reply,
    }) {
        Ok(Explained { text, .. }) => text,
        other => panic!("{other:?}"),
    };
    assert!(explain(&mut s).contains("memory follow: moving its memory to node 1 now"));
    let done = Instant::now();
    s.handle(moved_whole(pid, 0, 1, done));
    let why = explain(&mut s);
    assert!(
        why.contains("memory follow: moved 1.0 GiB from node 0 to node 1 in 0.5 s"),
        "{why}"
    );
    let metrics = ask(&mut s, Call::Metrics).unwrap();
    assert!(
        metrics.contains("pinnerd_memory_migrations_total{outcome=\"moved\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("pinnerd_memory_moved_bytes_total 1073741824\n"));
    // Its CPUs move to node 0 within the interval, by a pin that says nothing of memory
    // (`PinProcess`): it still follows, waits, and says so.
    assert!(pin(&mut s, "0", None).is_empty());
    let why = explain(&mut s);
    assert!(
        why.contains("memory follow: its CPUs are on node 0 now; moving there in "),
        "{why}"
    );
    // Once the interval has passed, the next job starts.
    s.sync_memory(done + Duration::from_secs(301));
    let next: Vec<_> = s
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Follow(j) => Some(j.target.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(next, vec![BTreeSet::from([0])]);
    // A pin that says not to follow (`PinProcessWith`, follow false) to node 1 ends
    // it: once the move under way is done, nothing more is moved.
    assert!(pin(&mut s, "1", Some(false)).is_empty());
    let later = done + Duration::from_secs(302);
    s.handle(moved_whole(pid, 1, 0, later));
    s.sync_memory(later + Duration::from_secs(3600));
    let follows = s
        .take_actions()
        .into_iter()
        .filter(|a| matches!(a, Action::Follow(_)))
        .count();
    assert_eq!(follows, 0);
    let why = explain(&mut s);
    assert!(!why.contains("its CPUs are on node 1 now"), "{why}");
}

#[test]
fn queued_memory_moves_say_they_wait_for_the_one_before_them() {
    use crate::api::PlaceSpec;
    use crate::memory::follow::{Finished, Outcome};
    use std::collections::BTreeSet;
    let (mut s, _d, _job) = started_on_system(Timing::default());
    // Two nodes: even CPUs on node 0, odd on node 1.
    let fixture = SysRoot::machine(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-e5620"),
    );
    s.machine.topology = Some(Topology::discover(&fixture).unwrap());
    let (a, b) = (Sleeper::spawn("sleep"), Sleeper::spawn("sleep"));
    let mut queued = Vec::new();
    for pid in [a.pid(), b.pid()] {
        let place = PlaceSpec::Request(PlacementRequest {
            target: CpuTarget::Cpus("1".parse().unwrap()),
            within: None,
            policy: Policy::Compact,
            smt: SmtPolicy::Allow,
            exclusive: false,
            shape: Default::default(),
        });
        pin(&mut s, pid, place, Some(true), None).unwrap();
        queued.extend(s.take_actions().into_iter().filter_map(|x| match x {
            Action::Follow(j) => Some(j.pid),
            _ => None,
        }));
    }
    // One job each, queued in order: the first moves, the second waits for it.
    assert_eq!(queued, vec![a.pid() as i32, b.pid() as i32]);
    let explain = |s: &mut State, pid| match ask(s, |reply| Call::Explain {
        pid,
        caller_uid: 0,
        reply,
    }) {
        Ok(Explained { text, .. }) => text,
        other => panic!("{other:?}"),
    };
    let first = explain(&mut s, a.pid());
    assert!(
        first.contains("memory follow: moving its memory to node 1 now"),
        "{first}"
    );
    let second = explain(&mut s, b.pid());
    assert!(
        second.contains(
            "memory follow: waiting to move its memory to node 1: one process moves at a time, 1 ahead of it"
        ),
        "{second}"
    );
    s.handle(Event::Followed(Box::new(Finished {
        pid: a.pid() as i32,
        target: BTreeSet::from([1]),
        outcome: Outcome::Nothing("all of its 1.0 MiB is on node 1 already".into()),
        at: Instant::now(),
    })));
    let second = explain(&mut s, b.pid());
    assert!(
        second.contains("memory follow: moving its memory to node 1 now"),
        "{second}"
    );
}

/// A managed process of an `isolate` rule is wanted held on its rule's CPUs; what the
/// holder reports is in `explain`, the problem logged once; when the process is gone
/// nothing is wanted any more.
#[test]
fn an_isolate_rule_s_process_is_wanted_held_and_explain_says_what_came_of_it() {
    let (mut s, d, _job) = started_on_system(Timing::default());
    let online = s.machine.online();
    let last = online.iter().last().unwrap();
    let prog = d.path().join("pinnerd-isohold");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    write_rule(
        d.path(),
        "iso",
        &format!(
            "[[rule]]\nname = \"iso\"\n[rule.match]\ncomm = \"pinnerd-isohol*\"\nuser = 0\n[rule.place]\ncpus = \"{last}\"\nexclusive = true\nisolate = true\n"
        ),
    );
    s.handle(Event::Reload(ReloadCause::Bus));
    s.take_actions();
    let child = Sleeper::spawn(&prog);
    let pid = child.pid();
    s.manager_event(crate::manager::Input::Rescan);
    let wants: Vec<_> = s
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Hold(w) => Some(w),
            _ => None,
        })
        .collect();
    assert_eq!(wants.len(), 1, "one Hold action");
    assert_eq!(wants[0].len(), 1);
    let w = &wants[0][0];
    assert_eq!((w.rule.as_str(), w.pid, w.isolate), ("iso", pid, true));
    assert_eq!(w.cpus, CpuSet::from_iter([last]));
    // The same state again sends nothing.
    s.manager_event(crate::manager::Input::Rescan);
    assert!(!s
        .take_actions()
        .iter()
        .any(|a| matches!(a, Action::Hold(_))));

    s.handle(Event::Held(vec![crate::hold::HoldReport {
        rule: "iso".into(),
        pid,
        unit: None,
        cpus: w.cpus.clone(),
        mems: None,
        confined: false,
        isolate: true,
        isolated: false,
        problem: Some("the kernel has no remote cpuset partitions".into()),
    }]));
    let Explained { text, .. } = ask(&mut s, |reply| Call::Explain {
        pid,
        caller_uid: 0,
        reply,
    })
    .unwrap();
    assert!(
        text.contains("held: not isolated: the kernel has no remote cpuset partitions; the rule stays merely exclusive"),
        "{text}"
    );
    // Another user does not see how it is held.
    let Explained { text, .. } = ask(&mut s, |reply| Call::Explain {
        pid,
        caller_uid: 1000,
        reply,
    })
    .unwrap();
    assert!(!text.contains("held:"), "{text}");

    drop(child);
    s.manager_event(crate::manager::Input::Rescan);
    let last_wants = s.take_actions().into_iter().rev().find_map(|a| match a {
        Action::Hold(w) => Some(w),
        _ => None,
    });
    assert_eq!(last_wants, Some(vec![]), "let go once the process is gone");
}

/// A hold with a problem is asked for again once `HOLD_RETRY` has passed, the same wants
/// included; without a problem the same wants are not sent twice.
#[test]
fn a_hold_with_a_problem_is_asked_for_again_after_the_retry_interval() {
    let (mut s, d, _job) = started_on_system(Timing::default());
    let last = s.machine.online().iter().last().unwrap();
    let prog = d.path().join("pinnerd-isoretr");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    write_rule(
        d.path(),
        "iso",
        &format!(
            "[[rule]]\nname = \"iso\"\n[rule.match]\ncomm = \"pinnerd-isoret*\"\nuser = 0\n[rule.place]\ncpus = \"{last}\"\nexclusive = true\nisolate = true\n"
        ),
    );
    s.handle(Event::Reload(ReloadCause::Bus));
    let child = Sleeper::spawn(&prog);
    let pid = child.pid();
    s.manager_event(crate::manager::Input::Rescan);
    let holds = |s: &mut State| -> usize {
        s.take_actions()
            .iter()
            .filter(|a| matches!(a, Action::Hold(_)))
            .count()
    };
    assert_eq!(holds(&mut s), 1);
    let report = |problem: Option<&str>| crate::hold::HoldReport {
        rule: "iso".into(),
        pid,
        unit: Some("x.service".into()),
        cpus: CpuSet::from_iter([last]),
        mems: None,
        confined: problem.is_none(),
        isolate: true,
        isolated: problem.is_none(),
        problem: problem.map(str::to_string),
    };
    s.handle(Event::Held(vec![report(Some(
        "systemd is not on the system bus: not yet",
    ))]));
    s.take_actions();
    // Not yet due: nothing is sent again.
    s.sync_holds();
    assert_eq!(holds(&mut s), 0);
    // Due: the same wants again.
    s.sharing.holds.retry_at = Some(Instant::now() - Duration::from_secs(1));
    s.sync_holds();
    assert_eq!(holds(&mut s), 1);
    // Held without a problem: never sent again for nothing.
    s.handle(Event::Held(vec![report(None)]));
    s.take_actions();
    s.sharing.holds.retry_at = Some(Instant::now() - Duration::from_secs(1));
    s.sync_holds();
    assert_eq!(holds(&mut s), 0);
    drop(child);
}
