//! What a crash, a restart, a stop and a systemd not there leave, and how the next
//! reconcile takes it up; imitators and units held only for their own processes.

use super::*;

#[test]
fn a_container_is_held_whole_by_its_scope_and_nothing_is_adopted() {
    let (_d, cg2) = tree();
    let d = cg2.dir("/system.slice/docker-ab.scope");
    std::fs::create_dir_all(&d).unwrap();
    for f in [
        "cpuset.cpus.exclusive",
        "cpuset.cpus.partition",
        "cgroup.procs",
    ] {
        std::fs::write(
            d.join(f),
            if f.ends_with("partition") {
                "member\n"
            } else {
                "\n"
            },
        )
        .unwrap();
    }
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    // What systemd answers for a process of a container: the container's scope, with
    // Delegate= (its runtime's cgroups below it are not units).
    units.0.lock().unwrap().by_pid.insert(
        30,
        UnitInfo {
            name: "docker-ab.scope".into(),
            cgroup: "/system.slice/docker-ab.scope".into(),
            slice: "system.slice".into(),
            delegate: true,
            main_pid: None,
        },
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("db", 30, "4", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("docker-ab.scope"));
    assert!(
        !units.calls().iter().any(|c| c.starts_with("adopt")),
        "{:?}",
        units.calls()
    );
    assert_eq!(
        file(
            &cg2,
            "/system.slice/docker-ab.scope",
            "cpuset.cpus.partition"
        ),
        "isolated"
    );
}

#[test]
fn a_unit_not_found_and_a_systemd_not_there_are_asked_again_at_the_next_reconcile() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    let later = units.clone();
    let tries = Arc::new(Mutex::new(0));
    let counted = tries.clone();
    let mut h = Holder::new(
        Err(UnitError::NoSystemd("not yet".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    )
    .with_owners(owners_of(&units))
    .reconnecting(Box::new(move || {
        *counted.lock().unwrap() += 1;
        Ok(Box::new(later.clone()) as Box<dyn Units>)
    }));
    // Connected at this reconcile; the process's unit is not known to systemd yet.
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert_eq!(*tries.lock().unwrap(), 1);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("GetUnitByPID(10)"),
        "{r:?}"
    );
    // Now it is: asked again, held; the connection is not made again.
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert!(r[0].confined && r[0].problem.is_none(), "{r:?}");
    assert_eq!(*tries.lock().unwrap(), 1);
}

#[test]
fn a_partition_refused_after_the_unit_was_confined_is_not_tried_again_before_its_backoff_unless_wanted_otherwise(
) {
    let (_d, mut cg2) = tree();
    // The kernel refuses the daemon, and no helper unit is installed.
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    let why = r[0].problem.clone().unwrap();
    assert!(
        why.contains("not permitted") && why.contains("not found"),
        "{why}"
    );
    assert_eq!(
        units.allowed_of("md.service").cpus,
        CpuSet::new(),
        "confinement taken back"
    );
    let calls = units.calls().len();
    // The same want again (the daemon's retry, before the backoff): said again, the unit
    // not confined again.
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(r[0].problem.as_deref(), Some(why.as_str()));
    assert_eq!(units.calls().len(), calls, "{:?}", units.calls());
    // Wanted otherwise (other CPUs): tried again.
    h.reconcile(&[want("feed", 10, "5-7", true)]);
    assert!(units.calls().len() > calls);
    // A property systemd refused changed nothing: tried again at once.
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.0.lock().unwrap().refuse_set = true;
    let mut h = holder(&units, &cg2, run.path());
    h.reconcile(&[want("feed", 10, "6-7", false)]);
    h.reconcile(&[want("feed", 10, "6-7", false)]);
    let sets = units
        .calls()
        .iter()
        .filter(|c| c.starts_with("set md.service cpus=6-7"))
        .count();
    assert_eq!(sets, 2, "{:?}", units.calls());
}

/// Nothing a user can imitate is enough: a process named like an isolate rule's, of a
/// uid the rule does not name, in a login session or in a service, is never adopted,
/// confined or isolated, whatever its comm and command line.
#[test]
fn a_users_process_that_imitates_a_rule_is_never_held() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        40,
        "session-9.scope",
        "/user.slice/user-4343.slice/session-9.scope",
        "user-4343.slice",
    );
    units.own(40, 4343);
    units.add_main(30, "md.service", "/system.slice/md.service", "system.slice");
    units.add(41, "md.service", "/system.slice/md.service", "system.slice");
    units.own(41, 4343);
    // A set-uid program run by the user: effective root, real 4343.
    units.add(
        42,
        "session-9.scope",
        "/user.slice/user-4343.slice/session-9.scope",
        "user-4343.slice",
    );
    units.0.lock().unwrap().owners.insert(
        42,
        Owner {
            real: 4343,
            effective: 0,
        },
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want_of("feed", 40, "6-7", &[1001], false),
        want_of("feed", 41, "4-5", &[], true),
        want_of("root-feed", 42, "2-3", &[0], false),
    ]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("pid 40 (uid 4343) runs in a login session in user-4343.slice, and the rule's user is uid 1001: only a process of the rule's users is held there")
    );
    assert_eq!(
        r[1].problem.as_deref(),
        Some("pid 41 (uid 4343) is not held: the rule names no `user`, and it is not the main process of md.service (pid 30); a hold is made only for a process of the rule's users or for the main process of a system service the rule's `unit` names")
    );
    assert!(
        r[2].problem
            .as_deref()
            .unwrap()
            .starts_with("pid 42 (uid 4343) runs in a login session"),
        "{r:?}"
    );
    assert!(r.iter().all(|r| !r.confined && !r.isolated), "{r:?}");
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

/// A unit is held whole, so only for what may hold all of it: its main process (a
/// rule naming the unit), or a process of the rule's users while every process of the
/// unit is theirs. A user's job inside a root service (cron) confines nothing.
#[test]
fn a_unit_is_held_only_for_its_main_process_or_when_all_of_it_is_the_rules_users() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add_main(
        30,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    units.add(
        31,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    units.own(31, 4343);
    let mut h = holder(&units, &cg2, run.path());
    // The user's job matched a rule naming the unit: it is not the main process.
    let r = h.reconcile(&[want_of("job", 31, "2-3", &[], true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("not the main process of cron.service (pid 30)"),
        "{r:?}"
    );
    // Root's cron matched a rule naming root: the unit also runs the user's job.
    let r = h.reconcile(&[want_of("cron", 30, "2-3", &[0], false)]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("cron.service is held whole and also runs pid 31 of uid 4343, which the rule does not name (the rule's user is uid 0): not held")
    );
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // The rule's users own all of it: held.
    let r = h.reconcile(&[want_of("cron", 30, "2-3", &[0, 4343], false)]);
    assert!(r[0].isolated && r[0].problem.is_none(), "{r:?}");
    // The main process of a unit the rule names: held, and a child of it the rule
    // does not vouch for is in that hold without adding its CPUs.
    h.reconcile(&[]);
    let r = h.reconcile(&[
        want_of("cron", 30, "2-3", &[], true),
        want_of("cron", 31, "4-5", &[], true),
    ]);
    assert!(r[0].isolated && r[1].isolated, "{r:?}");
    assert!(r[1].problem.is_none(), "{r:?}");
    assert_eq!(r[1].cpus, "2-3".parse().unwrap());
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "2-3");
    // A user's manager is no system service, whoever its main process is.
    units.add_main(
        50,
        "user@4343.service",
        "/user.slice/user-4343.slice/user@4343.service",
        "user-4343.slice",
    );
    units.own(50, 4343);
    let r = h.reconcile(&[want_of("mgr", 50, "6", &[], true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("user@4343.service is a user's unit"),
        "{r:?}"
    );
}

#[test]
fn a_stop_undoes_holds_until_its_deadline_and_leaves_the_rest_in_the_journal() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    for (pid, name) in [(11, "a.service"), (12, "b.service")] {
        service_cgroup(&cg2, name);
        units.add(pid, name, &format!("/system.slice/{name}"), "system.slice");
    }
    let clock = FakeClock::new();
    let mut h = holder(&units, &cg2, run.path()).with_clock(clock.boxed());
    let r = h.reconcile(&[
        want("a", 11, "2", false),
        want("b", 12, "3", false),
        want("feed", 10, "6-7", true),
    ]);
    assert!(r.iter().all(|r| r.confined) && r[2].isolated, "{r:?}");
    // From now on systemd takes 6 s per call; the stop has 10 s.
    units.0.lock().unwrap().slow = Some((clock.clone(), Duration::from_secs(6)));
    let lines = h.release_all(clock.now() + Duration::from_secs(10));
    // The partition went first, then one more unit; the last was not reached.
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(units.allowed_of("md.service").cpus, CpuSet::new());
    assert_eq!(units.allowed_of("a.service").cpus, CpuSet::new());
    assert_eq!(units.allowed_of("b.service").cpus, "3".parse().unwrap());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("b.service") && lines[0].contains("left in the journal"),
        "{lines:?}"
    );
    let left = Journal::new(run.path()).load().unwrap();
    assert_eq!(
        left.iter().map(|h| h.unit.as_str()).collect::<Vec<_>>(),
        ["b.service"]
    );

    // The next start finds it there and, not wanted, undoes it after the grace.
    units.0.lock().unwrap().slow = None;
    let mut next = holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    next.recover(t0);
    next.expire(t0 + RECOVERY_GRACE);
    assert_eq!(units.allowed_of("b.service").cpus, CpuSet::new());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_partition_no_record_names_is_undone_and_its_values_are_not_taken_as_the_units_own() {
    // What a run whose journal was removed left: md.service isolated on 6-7, granted
    // down from the slice, and AllowedCPUs=6-7 set by pinnerd.
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units
        .set_allowed("md.service", Some(&"6-7".parse().unwrap()), None)
        .unwrap();
    for cg in ["/system.slice", "/system.slice/md.service"] {
        std::fs::write(cg2.dir(cg).join("cpuset.cpus.exclusive"), "6-7\n").unwrap();
    }
    std::fs::write(
        cg2.dir("/system.slice/md.service")
            .join("cpuset.cpus.partition"),
        "isolated\n",
    )
    .unwrap();
    let mut h = holder(&units, &cg2, run.path());
    assert!(h.recover(Instant::now()).is_empty(), "no journal");
    let r = h.reconcile(&[want("feed", 10, "4-5", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(h.held()[0].before_cpus, CpuSet::new());
    // The old partition's grants went with it: only the new CPUs are granted.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "4-5");
    // Let go: nothing of either run is left.
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.exclusive"),
        ""
    );
    assert_eq!(units.allowed_of("md.service").cpus, CpuSet::new());
}

#[test]
fn a_hold_a_previous_run_left_that_cannot_be_undone_stays_on_record_and_is_not_taken_as_the_units_own(
) {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // The unit's own value.
    units
        .set_allowed("md.service", Some(&"0-7".parse().unwrap()), None)
        .unwrap();
    let mut first = holder(&units, &cg2, run.path());
    first.reconcile(&[want("feed", 10, "6-7", false)]);
    drop(first); // killed
                 // The next start has no systemd yet, and the unit has no process: the undo cannot
                 // give AllowedCPUs= back, so the hold stays on record.
    std::fs::write(cg2.dir("/system.slice/md.service").join("cgroup.procs"), "").unwrap();
    let later = units.clone();
    let mut second = Holder::new(
        Err(UnitError::NoSystemd("not yet".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    )
    .with_owners(owners_of(&units))
    .reconnecting(Box::new(move || {
        Ok(Box::new(later.clone()) as Box<dyn Units>)
    }));
    let lines = second.recover(Instant::now());
    assert!(
        lines[0].starts_with("could not fully undo what a previous run held")
            && lines[0].ends_with("kept in the journal"),
        "{lines:?}"
    );
    assert_eq!(Journal::new(run.path()).load().unwrap().len(), 1);
    // Wanted again once systemd is there, which refuses the property at first: nothing
    // changed, so the hold left stays on record as it was.
    std::fs::write(
        cg2.dir("/system.slice/md.service").join("cgroup.procs"),
        "10\n",
    )
    .unwrap();
    units.0.lock().unwrap().refuse_set = true;
    let r = second.reconcile(&[want("feed", 10, "5-7", false)]);
    assert!(!r[0].confined, "{r:?}");
    let left = Journal::new(run.path()).load().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].cpus, "6-7".parse().unwrap());
    // Then accepted: 6-7 is pinnerd's, not the unit's own.
    units.0.lock().unwrap().refuse_set = false;
    let r = second.reconcile(&[want("feed", 10, "5-7", false)]);
    assert!(r[0].confined, "{r:?}");
    assert_eq!(second.held()[0].before_cpus, "0-7".parse().unwrap());
    assert_eq!(Journal::new(run.path()).load().unwrap().len(), 1);
    second.reconcile(&[]);
    assert_eq!(units.allowed_of("md.service").cpus, "0-7".parse().unwrap());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_refused_partition_is_tried_again_after_a_backoff_that_doubles_up_to_its_bound() {
    let (_d, mut cg2) = tree();
    // The kernel refuses the daemon, and the helper unit is not there (yet).
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let clock = FakeClock::new();
    let mut h = holder(&units, &cg2, run.path()).with_clock(clock.boxed());
    let wants = [want("feed", 10, "6-7", true)];
    let tries = |u: &FakeUnits| {
        u.calls()
            .iter()
            .filter(|c| c.starts_with("start pinnerd-partition@isolated"))
            .count()
    };
    let r = h.reconcile(&wants);
    assert!(
        r[0].problem.as_deref().unwrap().contains("not found"),
        "{r:?}"
    );
    assert_eq!(tries(&units), 1);
    let mut expected = 1;
    for wait in [30, 60, 120, 240, 480, 600, 600] {
        let wait = Duration::from_secs(wait);
        assert_eq!(h.deadline(), Some(clock.now() + wait));
        clock.advance(wait - Duration::from_secs(1));
        assert!(!h.retry_due());
        let r = h.reconcile(&wants);
        assert!(r[0].problem.is_some() && !r[0].confined, "{r:?}");
        assert_eq!(tries(&units), expected, "not tried before {wait:?}");
        clock.advance(Duration::from_secs(1));
        assert!(h.retry_due());
        h.reconcile(&wants);
        expected += 1;
        assert_eq!(tries(&units), expected, "tried again after {wait:?}");
    }
    // The helper unit installed: the next try makes the partition.
    units.0.lock().unwrap().tree = Some(cg2.clone());
    clock.advance(REFUSAL_RETRY_MAX);
    let r = h.reconcile(&wants);
    assert!(r[0].isolated && r[0].problem.is_none(), "{r:?}");
    assert_eq!(h.deadline(), None);
}
