//! Partitions: one unit at a time, undone when their cgroup empties, CPUs the kernel
//! keeps isolated; masks and runtime drop-ins given back at the let-go.

use super::*;

#[test]
fn no_partition_is_written_while_a_removed_one_still_has_cpus_isolated() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // isolcpus=1 was there before pinnerd: never in the way.
    isolated_now(&cg2, "1");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    // A partition's cgroup was removed and the kernel still lists its CPUs 2-3.
    isolated_now(&cg2, "1-3");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].isolated && !r[0].confined, "{r:?}");
    let why = r[0].problem.as_deref().unwrap();
    assert!(why.contains("CPUs 2-3 are still isolated"), "{why}");
    // Nothing was written: no grant, no partition, the unit not even confined.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // The kernel let go: the same want is made at the next try.
    isolated_now(&cg2, "1");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
}

#[test]
fn cpus_the_kernel_keeps_isolated_after_a_release_are_said_and_their_grants_wait() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    isolated_now(&cg2, "6-7");
    // Let go: `member` is written, and the kernel keeps listing 6-7.
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(
        h.notes(),
        vec![
            "CPUs 6-7 still isolated after the partition of /system.slice/md.service \
             was released: the kernel kept them"
                .to_string()
        ]
    );
    // The ancestors' grants stay while the kernel keeps the CPUs, on record for the
    // next start, and no partition is made meanwhile.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
    let journal = Journal::new(run.path()).load().unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(
        journal[0].partition.as_ref().unwrap().cgroup,
        "/system.slice/md.service"
    );
    let r = h.reconcile(&[want("feed", 11, "4", true)]);
    assert!(!r[0].isolated, "{r:?}");
    // The kernel lets go: the grants are taken back at the next try, the note goes.
    isolated_now(&cg2, "");
    let later = Instant::now() + Duration::from_secs(60);
    h.expire(later);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(h.notes().is_empty());
    assert!(h.deadline().is_none());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_partition_is_undone_as_soon_as_its_cgroup_reports_no_process() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let events = cg2.dir("/system.slice/md.service").join("cgroup.events");
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    // The main process exits: the cgroup says so before systemd removes it, and before
    // the daemon has seen the exit (the same want comes again).
    std::fs::write(&events, "populated 0\nfrozen 0\n").unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].isolated, "{r:?}");
    assert!(
        r[0].problem.as_deref().unwrap().contains("no process left"),
        "{r:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    // The unit starts again (populated anew): held anew, isolated again.
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    // Let go for good: nothing is left.
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_partition_someone_else_made_after_the_start_is_not_taken_for_a_removed_one() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    // An administrator's partition of CPU 4, made after pinnerd started.
    let other = cg2.dir("/system.slice/other.service");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("cpuset.cpus.partition"), "isolated\n").unwrap();
    std::fs::write(other.join("cpuset.cpus.exclusive.effective"), "4\n").unwrap();
    isolated_now(&cg2, "4");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    // Once it is gone (its CPUs still listed), it is a removed partition.
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    std::fs::remove_dir_all(&other).unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("CPUs 4 are still isolated"),
        "{r:?}"
    );
}

#[test]
fn the_holder_thread_undoes_a_partition_when_its_watched_cgroup_empties() {
    use crate::daemon::holding::HolderThread;
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let events = cg2.dir("/system.slice/md.service").join("cgroup.events");
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (u, c, r) = (units.clone(), cg2.clone(), run.path().to_path_buf());
    let mut t = HolderThread::start(
        move || holder(&u, &c, &r),
        move |reports, _notes| {
            let _ = tx.send(reports);
        },
        || {},
    )
    .unwrap();
    t.want(vec![want("feed", 10, "6-7", true)]);
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(first[0].isolated, "{first:?}");
    // The unit's last process exits: nothing is sent to the thread, the kernel's
    // cgroup.events change is what wakes it.
    // `fs::write` truncates before it writes: the thread may wake on the empty file
    // (not known to be empty, so still held) and report once more before the
    // `populated 0` it then reads; the kernel changes the file in one step.
    std::fs::write(&events, "populated 0\nfrozen 0\n").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut next = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    while next[0].isolated && std::time::Instant::now() < until {
        next = rx
            .recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
            .unwrap();
    }
    assert!(!next[0].isolated, "{next:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    t.stop(Duration::from_secs(5));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !t.ended() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(t.ended(), "the holder thread ended after its stop");
}

/// One rule's explicit CPUs wanted by each of its services (short-lived services of a
/// template, several instances): the first is held and isolated, the others are left
/// as they are, with a line naming the first, and nothing is confined for them
/// (confining one over another's partition made Linux 6.12 warn and leave the CPUs
/// isolated for nobody). When the first lets go, the next is held.
#[test]
fn a_cpu_is_isolated_for_one_unit_at_a_time() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(
        30,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true), want("feed", 30, "6-7", true)]);
    assert!(r[1].isolated, "{r:?}");
    assert_eq!(r[1].unit.as_deref(), Some("cron.service"));
    assert_eq!(
        r[0].problem.as_deref(),
        Some("CPUs 6-7 are held for cron.service (rule feed) as an isolated partition: a CPU is held for one unit at a time where one of them isolates it")
    );
    assert!(
        !units.calls().iter().any(|c| c.contains("md.service")),
        "{:?}",
        units.calls()
    );
    // A unit-cpuset hold beside it on the same CPUs is refused too, and one on other
    // CPUs is not.
    let mut confine = want("other", 10, "7", false);
    confine.vouch.users = vec![0];
    let r = h.reconcile(&[want("feed", 30, "6-7", true), confine]);
    assert!(r[1]
        .problem
        .as_deref()
        .unwrap()
        .starts_with("CPUs 7 are held for cron.service"));
    let r = h.reconcile(&[want("feed", 30, "6-7", true), want("other", 10, "5", false)]);
    assert!(r[1].confined && r[1].problem.is_none(), "{r:?}");
    // The first lets go: the next is held.
    h.reconcile(&[]);
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
}

/// `systemctl restart` of the daemon (or an upgrade): what is held stays, on record,
/// and the next start takes it over untouched, as after a crash; a plain stop undoes it.
#[test]
fn a_restart_of_the_daemon_keeps_what_is_held_for_the_next_start() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    // Not restarting: nothing kept, the stop undoes.
    assert_eq!(h.keep_for_restart(), None);
    units.0.lock().unwrap().restarting = true;
    let calls = units.calls().len();
    assert_eq!(
        h.keep_for_restart(),
        Some(vec![
            "the daemon restarts: 1 hold kept for the next start to take over".to_string()
        ])
    );
    assert_eq!(units.calls().len(), calls, "nothing undone");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    // The next daemon takes it over untouched when it wants it the same way.
    let mut next = holder(&units, &cg2, run.path());
    std::fs::write(
        cg2.dir("/system.slice/md.service").join("cgroup.procs"),
        "10\n",
    )
    .unwrap();
    next.recover(std::time::Instant::now());
    let r = next.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(units.calls().len(), calls, "taken over without a change");
    // A plain stop of that one undoes.
    units.0.lock().unwrap().restarting = false;
    assert_eq!(next.keep_for_restart(), None);
    next.release_all(std::time::Instant::now() + Duration::from_secs(10));
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
}

/// Two isolate rules let go in one reconcile: each unit's AllowedCPUs= reset, the
/// cpuset.cpus systemd leaves behind on the first (its slice keeps the controller for
/// the second) widened — short of the second's partition while it stands, to every CPU
/// once it goes — and each unit's tasks handed their masks from before pinnerd.
#[test]
fn two_holds_let_go_at_once_both_give_back_their_masks_and_cpus() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add_main(
        11,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    let (mut h, given) = recording_holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want_with("a", 10, "6-7", &[(10, "0-7"), (12, "1-7")]),
        want_with("b", 11, "4-5", &[(11, "0-7")]),
    ]);
    assert!(r.iter().all(|r| r.isolated), "{r:?}");
    assert_eq!(file(&cg2, "/system.slice/md.service", "cpuset.cpus"), "6-7");
    h.reconcile(&[]);
    for (unit, cg) in [
        ("md.service", "/system.slice/md.service"),
        ("cron.service", "/system.slice/cron.service"),
    ] {
        assert!(units.allowed_of(unit).cpus.is_empty(), "{unit}");
        assert_eq!(file(&cg2, cg, "cpuset.cpus.partition"), "member", "{unit}");
        assert_eq!(
            file(&cg2, cg, "cpuset.cpus"),
            "0-7",
            "{unit}: the CPUs left widened"
        );
    }
    let given = given.lock().unwrap().clone();
    let set = |s: &str| s.parse::<CpuSet>().unwrap();
    assert_eq!(
        given,
        vec![
            (
                "/system.slice/cron.service".to_string(),
                set("4-5"),
                BTreeMap::from([(11, set("0-7"))])
            ),
            // Widened to 0-5 only while md held 6-7: its tasks left there get their
            // masks back again once md lets go.
            (
                "/system.slice/cron.service".to_string(),
                set("0-5"),
                BTreeMap::from([(11, set("0-7"))])
            ),
            (
                "/system.slice/md.service".to_string(),
                set("6-7"),
                BTreeMap::from([(10, set("0-7")), (12, set("1-7"))])
            ),
        ]
    );
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

/// The masks from before pinnerd are on record with the hold: a hold a killed daemon
/// left, not wanted again, gives them back when the next start lets it go.
#[test]
fn a_hold_left_by_a_crash_gives_back_the_masks_from_before_pinnerd() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    let (mut first, _) = recording_holder(&units, &cg2, run.path());
    first.reconcile(&[want_with("a", 10, "6-7", &[(10, "0-7"), (12, "3")])]);
    drop(first); // killed: nothing undone
    let (mut second, given) = recording_holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    second.recover(t0);
    second.reconcile(&[]);
    assert!(given.lock().unwrap().is_empty(), "kept for the grace");
    second.expire(t0 + RECOVERY_GRACE);
    let set = |s: &str| s.parse::<CpuSet>().unwrap();
    assert_eq!(
        given.lock().unwrap().clone(),
        vec![(
            "/system.slice/md.service".to_string(),
            set("6-7"),
            BTreeMap::from([(10, set("0-7")), (12, set("3"))])
        )]
    );
    assert_eq!(file(&cg2, "/system.slice/md.service", "cpuset.cpus"), "0-7");
}

/// Letting go leaves the unit as its files say: the runtime drop-ins set-property wrote
/// for the hold are removed, and one the administrator had set at run time before the
/// hold is put back as it was.
#[test]
fn letting_go_removes_the_runtime_dropins_of_the_hold_and_keeps_the_admins() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    // The administrator's own run-time value, before pinnerd.
    units
        .set_allowed("md.service", None, Some(&"0-1".parse().unwrap()))
        .unwrap();
    let key = |p: &str| ("md.service".to_string(), p.to_string());
    let admins = units
        .0
        .lock()
        .unwrap()
        .dropins
        .get(&key("AllowedMemoryNodes"))
        .cloned();
    assert!(admins.is_some());
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[Want {
        mems: Some("1".parse().unwrap()),
        ..want("feed", 10, "6-7", true)
    }]);
    assert!(r[0].confined, "{r:?}");
    assert!(units
        .0
        .lock()
        .unwrap()
        .dropins
        .contains_key(&key("AllowedCPUs")));
    h.reconcile(&[]);
    let w = units.0.lock().unwrap();
    assert_eq!(
        w.dropins.get(&key("AllowedCPUs")),
        None,
        "pinnerd's drop-in left"
    );
    assert_eq!(w.dropins.get(&key("AllowedMemoryNodes")), admins.as_ref());
}

#[test]
fn runtime_dropins_are_removed_written_back_and_never_outside_their_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("md.service.d/50-AllowedCPUs.conf");
    assert_eq!(
        systemd::runtime_dropin(d, "md.service", "AllowedCPUs").unwrap(),
        path
    );
    assert_eq!(
        systemd::read_runtime_dropin(d, "md.service", "AllowedCPUs").unwrap(),
        None
    );
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "[Service]\nAllowedCPUs=6-7\n").unwrap();
    std::fs::write(d.join("md.service.d/50-MemoryMax.conf"), "x").unwrap();
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    assert!(!path.exists());
    assert!(
        d.join("md.service.d/50-MemoryMax.conf").exists(),
        "another's kept"
    );
    systemd::restore_runtime_dropin(d, "md.service", "MemoryMax", None).unwrap();
    assert!(
        !d.join("md.service.d").exists(),
        "the emptied directory goes"
    );
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", Some("a")).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a");
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    for bad in ["../x.service", "", ".service", "a/b.service"] {
        assert!(
            systemd::runtime_dropin(d, bad, "AllowedCPUs").is_err(),
            "{bad}"
        );
    }
}
