//! A process's unit confined, isolated and given back; what is refused before anything
//! changes; the dry run.

use super::*;

#[test]
fn a_service_is_confined_isolated_and_given_back_its_own_values() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // The unit had values of its own.
    units
        .set_allowed("md.service", Some(&"0-7".parse().unwrap()), None)
        .unwrap();
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(r.len(), 1);
    assert!(r[0].confined && r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("md.service"));
    assert_eq!(
        r[0].line(),
        "unit md.service: AllowedCPUs=6-7 (set by pinnerd); CPUs 6-7 isolated (cpuset partition)"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
    assert!(run.path().join(JOURNAL_FILE).exists());
    // The same want again changes nothing.
    let before = units.calls().len();
    h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(units.calls().len(), before);
    // Let go: partition undone, the unit's own 0-7 back, the journal gone.
    let r = h.reconcile(&[]);
    assert!(r.is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(units.allowed_of("md.service").cpus, "0-7".parse().unwrap());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_service_in_a_slice_the_units_do_not_allow_is_refused_before_anything_changes() {
    let (_d, cg2) = tree();
    for cg in ["trading.slice", "trading.slice/md.service"] {
        let d = cg2.dir(cg);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
        std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
    }
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        10,
        "md.service",
        "/trading.slice/md.service",
        "trading.slice",
    );
    let shipped = partition::MountView::Shipped {
        mount: cg2.mount().to_path_buf(),
    };
    let mut h = holder(&units, &cg2, run.path()).with_mounts(shipped.clone());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    let slice = cg2.dir("trading.slice");
    let why = format!(
        "{}/cpuset.cpus.exclusive: read-only file system: pinnerd may write only below the slices its units' ReadWritePaths= name; ReadWritePaths=-{} in a drop-in of pinnerd.service and of pinnerd-partition@.service allows this one (docs/sharing.md, \"A slice of its own\")",
        slice.display(),
        slice.display()
    );
    assert_eq!(
        r[0].line(),
        format!("not isolated: {why}; the rule stays merely exclusive")
    );
    assert!(!r[0].confined && !r[0].isolated, "{r:?}");
    // Nothing was asked of systemd, nothing written.
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "");
    // The dry run says the same, in the same words.
    let info = unit_of_cgroup("/trading.slice/md.service").unwrap();
    let w = Want {
        vouch: Vouch {
            users: vec![0],
            unit: true,
        },
        ..want("feed", 10, "6-7", true)
    };
    let root = |_| {
        Ok(Owner {
            real: 0,
            effective: 0,
        })
    };
    let cannot = cg2
        .writable_on_the_way(&info.cgroup, &shipped)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        dry_line(&w, Ok(info), cannot.as_deref(), &root),
        format!("unit md.service: not isolated: {why}; the rule stays merely exclusive")
    );
    // A drop-in naming the slice (the daemon's own view here: a writable tree):
    // isolated as any other.
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].confined && r[0].isolated, "{r:?}");
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "6-7");
    assert_eq!(
        file(&cg2, "/trading.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_process_of_a_login_session_gets_a_scope_of_its_own_in_the_same_slice() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        20,
        "session-3.scope",
        "/user.slice/user-1000.slice/session-3.scope",
        "user-1000.slice",
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 20, "3", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("pinnerd-feed-20.scope"));
    assert!(
        units.calls()[0].starts_with("adopt pinnerd-feed-20.scope in user-1000.slice pid 20"),
        "{:?}",
        units.calls()
    );
    assert_eq!(
        file(
            &cg2,
            "/user.slice/user-1000.slice/pinnerd-feed-20.scope",
            "cpuset.cpus.partition"
        ),
        "isolated"
    );
    // The session scope itself was never confined.
    assert!(!units.calls().iter().any(|c| c.contains("session-3.scope")));
    // Wanted again, the process is found in its scope: nothing is redone.
    let n = units.calls().len();
    let r = h.reconcile(&[want("feed", 20, "3", true)]);
    assert!(r[0].isolated);
    assert_eq!(units.calls().len(), n);
}

#[test]
fn init_scope_is_never_confined_and_two_rules_do_not_share_a_unit() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(1, "init.scope", "/init.scope", "-.slice");
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want("a", 1, "1", false),
        want("b", 10, "2", false),
        want("c", 11, "3", false),
    ]);
    assert!(
        r[0].problem.as_deref().unwrap().contains("init.scope"),
        "{r:?}"
    );
    assert!(!r[0].confined);
    assert!(r[1].confined);
    assert_eq!(
        r[2].problem.as_deref(),
        Some("unit md.service is already held for rule b")
    );
}

#[test]
fn two_processes_of_one_rule_in_one_service_hold_it_together() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("a", 10, "2", false), want("a", 11, "3", false)]);
    assert_eq!(r[0].cpus, "2-3".parse().unwrap());
    assert_eq!(r[1].cpus, "2-3".parse().unwrap());
    assert_eq!(units.allowed_of("md.service").cpus, "2-3".parse().unwrap());
}

#[test]
fn isolation_the_kernel_cannot_give_leaves_the_unit_as_it_was_and_says_why() {
    let (_d, cg2) = tree();
    std::fs::remove_file(cg2.mount().join("cpuset.cpus.isolated")).unwrap();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    assert!(h
        .cannot_isolate()
        .unwrap()
        .contains("remote cpuset partitions"));
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].confined && !r[0].isolated);
    let line = r[0].line();
    assert!(
        line.starts_with("not isolated: the kernel has no remote cpuset partitions"),
        "{line}"
    );
    assert!(line.ends_with("the rule stays merely exclusive"), "{line}");
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // Without isolation, unit-cpuset alone still confines.
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert!(r[0].confined && r[0].problem.is_none(), "{r:?}");
}

#[test]
fn a_refused_property_is_said_and_nothing_is_held() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.0.lock().unwrap().refuse_set = true;
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(
        r[0].problem.as_deref().unwrap().contains("Access denied"),
        "{r:?}"
    );
    assert!(h.held().is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_crash_leaves_a_journal_the_next_start_keeps_while_wanted_and_undoes_otherwise() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut first = holder(&units, &cg2, run.path());
    first.reconcile(&[want("feed", 10, "6-7", true)]);
    drop(first); // killed: nothing undone
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );

    // The next start keeps it (the service still runs) and takes it over untouched.
    let mut second = holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    let lines = second.recover(t0);
    assert!(
        lines[0].starts_with("kept what a previous run held for rule feed"),
        "{lines:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    let calls = units.calls().len();
    let r = second.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated);
    assert_eq!(units.calls().len(), calls, "taken over without a change");
    drop(second);

    // A start that never wants it again undoes it once the grace has passed.
    let mut third = holder(&units, &cg2, run.path());
    third.recover(t0);
    assert!(third.expire(t0 + RECOVERY_GRACE / 2).is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    let lines = third.expire(t0 + RECOVERY_GRACE);
    assert!(lines[0].contains("not wanted again"), "{lines:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(!run.path().join(JOURNAL_FILE).exists());

    // A journal whose unit has no process left is undone at once.
    let mut fourth = holder(&units, &cg2, run.path());
    fourth.reconcile(&[want("feed", 10, "6-7", true)]);
    drop(fourth);
    std::fs::write(cg2.dir("/system.slice/md.service").join("cgroup.procs"), "").unwrap();
    let mut fifth = holder(&units, &cg2, run.path());
    let lines = fifth.recover(t0);
    assert!(
        lines[0].starts_with("undid what a previous run held"),
        "{lines:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
}

#[test]
fn slices_are_laid_out_as_systemd_does() {
    assert_eq!(slice_path("user-1000.slice"), "user.slice/user-1000.slice");
    assert_eq!(slice_path("system.slice"), "system.slice");
    assert_eq!(slice_path("a-b-c.slice"), "a.slice/a-b.slice/a-b-c.slice");
    assert_eq!(slice_path("-.slice"), "");
}

#[test]
fn a_dry_run_names_the_unit_from_the_cgroup_path_and_what_would_be_set() {
    let u = unit_of_cgroup("/system.slice/md-feed.service").unwrap();
    assert_eq!(
        (u.name.as_str(), u.slice.as_str()),
        ("md-feed.service", "system.slice")
    );
    let u = unit_of_cgroup("/user.slice/user-1000.slice/session-3.scope").unwrap();
    assert_eq!(
        (u.name.as_str(), u.slice.as_str()),
        ("session-3.scope", "user-1000.slice")
    );
    // A container's cgroups below its scope are the scope's.
    let u = unit_of_cgroup("/system.slice/docker-ab.scope/init.scope").unwrap();
    assert_eq!(
        (u.name.as_str(), u.cgroup.as_str()),
        ("docker-ab.scope", "/system.slice/docker-ab.scope")
    );
    assert!(unit_of_cgroup("/").is_none());

    let root = |_: u32| {
        Ok(Owner {
            real: 0,
            effective: 0,
        })
    };
    let mut w = want("feed", 42, "4-7", false);
    w.mems = Some("1".parse().unwrap());
    let info = unit_of_cgroup("/system.slice/md-feed.service").ok_or_else(String::new);
    assert_eq!(
        dry_line(&w, info.clone(), None, &root),
        "unit md-feed.service: AllowedCPUs=4-7, AllowedMemoryNodes=1 (would be set by pinnerd)"
    );
    w.isolate = true;
    assert_eq!(
        dry_line(
            &w,
            info.clone(),
            Some("no cgroup v2 hierarchy (cgroup v1 only)"),
            &root
        ),
        "unit md-feed.service: not isolated: no cgroup v2 hierarchy (cgroup v1 only); the rule stays merely exclusive"
    );
    assert!(dry_line(&w, info.clone(), None, &root)
        .ends_with("; CPUs 4-7 would be isolated (cpuset partition)"));
    let session =
        unit_of_cgroup("/user.slice/user-1000.slice/session-3.scope").ok_or_else(String::new);
    assert!(dry_line(&w, session.clone(), None, &root).starts_with(
        "unit pinnerd-feed-42.scope (a scope of its own in user-1000.slice): AllowedCPUs=4-7"
    ));
    // A process of a user the rule does not name: not held; a unit rule's process is
    // held only if it is the main process, which the dry run cannot know.
    let user = |_: u32| {
        Ok(Owner {
            real: 4343,
            effective: 4343,
        })
    };
    assert_eq!(
        dry_line(&w, session, None, &user),
        "not held: pid 42 (uid 4343) runs in a login session in user-1000.slice, and the rule's user is uid 0: only a process of the rule's users is held there"
    );
    let by_unit = want_of("feed", 42, "4-7", &[], true);
    assert_eq!(
        dry_line(&by_unit, info, None, &user),
        "unit md-feed.service: AllowedCPUs=4-7 (would be set by pinnerd); CPUs 4-7 would be isolated (cpuset partition) — only if pid 42 is the main process of md-feed.service"
    );
}

#[test]
fn a_partition_the_kernel_refuses_the_daemon_is_made_by_the_helper_unit_and_undone_by_it() {
    let (_d, mut cg2) = tree();
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    assert!(units
        .calls()
        .contains(&"start pinnerd-partition@isolated:system.slice-md.service.service".to_string()));
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");

    // Without systemd to start the helper, the refusal is said as the kernel put it.
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = Holder::new(
        Err(UnitError::NoSystemd("no bus".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    );
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("systemd is not on the system bus: no bus")
    );
}
