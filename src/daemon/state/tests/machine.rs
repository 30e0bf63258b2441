//! The machine changing under the daemon: CPUs going offline and back, cgroup cpusets
//! read again after a hotplug, new CPUs measured by their pairs, a new fingerprint.

use super::*;

#[test]
fn a_cpu_going_offline_and_back_keeps_the_matrix_and_measures_nothing() {
    let (mut s, _d) = on_e5620_copy(Timing::default());
    measured_first(&mut s);
    let measured = s.snapshot().measured_at_us;
    assert!(measured > 0);
    let fingerprint = s.snapshot().fingerprint;
    for online in ["0-14", "0-15", "0-7", "0-15"] {
        set_online(&s.cfg.sysroot, online);
        s.handle(Event::Hotplug);
        let snap = s.snapshot();
        assert!(
            jobs(&s.take_actions()).is_empty(),
            "{online}: nothing to measure"
        );
        assert_eq!(set_asides(&s), Vec::<String>::new(), "{online}");
        assert_eq!(snap.fingerprint, fingerprint, "{online}");
        assert_eq!(
            snap.measured_at_us, measured,
            "{online}: the matrix is kept"
        );
        assert_eq!(snap.state, Phase::Ready, "{online}");
        let cpus: CpuSet = s
            .machine
            .current
            .as_ref()
            .unwrap()
            .cpus
            .iter()
            .copied()
            .collect();
        assert_eq!(
            cpus.to_string(),
            online,
            "the matrix follows the usable CPUs"
        );
    }
    // A hotplug the uevent socket missed is found by the periodic re-read.
    set_online(&s.cfg.sysroot, "0-14");
    s.handle(Event::Tick(Instant::now() + Duration::from_secs(61)));
    assert!(jobs(&s.take_actions()).is_empty());
    let cpus: CpuSet = s
        .machine
        .current
        .as_ref()
        .unwrap()
        .cpus
        .iter()
        .copied()
        .collect();
    assert_eq!(cpus.to_string(), "0-14", "found without a uevent");
    // The store still has every CPU's cells.
    let stored = MatrixStore::open(&s.cfg.state_dir).unwrap();
    let m = stored.load_current(&fingerprint).unwrap().matrix.unwrap();
    assert_eq!(m.len(), 16);
}

#[test]
fn the_cgroup_cpusets_are_read_again_a_moment_after_a_hotplug() {
    let (mut s, _d) = on_e5620_copy(Timing::default());
    measured_first(&mut s);
    let events = |s: &State| s.managed.manager.as_ref().unwrap().counters().events;
    set_online(&s.cfg.sysroot, "0-14");
    let t0 = Instant::now();
    s.handle(Event::Hotplug);
    let after_event = events(&s);
    let due = s.deadline().expect("a recheck is due");
    assert!(
        due > t0 && due <= Instant::now() + HOTPLUG_RECHECK,
        "{due:?}"
    );
    s.handle(Event::Tick(due - Duration::from_millis(1)));
    assert_eq!(events(&s), after_event, "not before it is due");
    s.handle(Event::Tick(due));
    assert_eq!(events(&s), after_event + 1, "one rescan when due");
    assert_eq!(s.deadline(), None);
    s.handle(Event::Tick(due + HOTPLUG_RECHECK));
    assert_eq!(events(&s), after_event + 1, "and only one");
}

#[test]
fn a_cpu_never_measured_gets_only_its_pairs_measured() {
    let (mut s, _d) = on_e5620_copy(Timing::default());
    set_online(&s.cfg.sysroot, "0-14");
    let job = measured_first(&mut s);
    assert_eq!(job.cfg.cpus.to_string(), "0-14");
    // CPU 15 comes online for the first time: only its 15 pairs are measured.
    set_online(&s.cfg.sysroot, "0-15");
    s.handle(Event::Hotplug);
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1, "{j:?}");
    let JobKind::Drift { pairs, budget } = &j[0].kind else {
        panic!("a full measurement: {:?}", j[0].kind)
    };
    assert_eq!(*pairs, (0..15).map(|c| (c, 15)).collect::<Vec<_>>());
    assert!(*budget < Timing::default().full_budget, "{budget:?}");
    assert_eq!(s.snapshot().state, Phase::Measuring);
    s.handle(probes(&j[0], 55.0));
    assert!(
        jobs(&s.take_actions()).is_empty(),
        "no full measurement after"
    );
    let m = s
        .machine
        .current
        .clone()
        .expect("the completed matrix is used");
    assert_eq!(m.len(), 16);
    assert_eq!(m.between(3, 15), Some(55.0));
    assert_eq!(m.between(3, 4), Some(40.0), "the stored cells are kept");
    assert_eq!(s.snapshot().state, Phase::Ready);
    let stored = MatrixStore::open(&s.cfg.state_dir).unwrap();
    let fp = s.snapshot().fingerprint;
    assert_eq!(stored.load_current(&fp).unwrap().matrix, Some(m));
    // Going offline again measures nothing.
    set_online(&s.cfg.sysroot, "0-14");
    s.handle(Event::Hotplug);
    assert!(jobs(&s.take_actions()).is_empty());
}

#[test]
fn a_new_pair_that_cannot_be_measured_leads_to_a_full_measurement() {
    let (mut s, _d) = on_e5620_copy(Timing::default());
    set_online(&s.cfg.sysroot, "0-14");
    measured_first(&mut s);
    set_online(&s.cfg.sysroot, "0-15");
    s.handle(Event::Hotplug);
    let fill = jobs(&s.take_actions())[0].clone();
    let Event::Measured(finished) = probes(&fill, 55.0) else {
        unreachable!()
    };
    let Finished {
        id,
        result: Ok(Product::Probes(mut p)),
    } = *finished
    else {
        unreachable!()
    };
    p[3].estimate_ns = None;
    s.handle(Event::Measured(Box::new(Finished {
        id,
        result: Ok(Product::Probes(p)),
    })));
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1, "{j:?}");
    assert!(matches!(j[0].kind, JobKind::Full));
    assert_eq!(j[0].cfg.cpus.to_string(), "0-15");
    // The pairs that were measured are kept meanwhile.
    let stored = MatrixStore::open(&s.cfg.state_dir).unwrap();
    let fp = s.snapshot().fingerprint;
    let m = stored.load_current(&fp).unwrap().matrix.unwrap();
    assert_eq!(m.between(0, 15), Some(55.0));
    assert_eq!(m.between(3, 15), None);
}

#[test]
fn a_changed_fingerprint_sets_the_matrix_aside_and_measures_the_new_cpus() {
    let t0 = Instant::now();
    let (mut s, _d) = state(Timing::default());
    s.cfg.sysroot = fixture("xeon-e5620");
    s.start().unwrap();
    let job = jobs(&s.take_actions())[0].clone();
    assert_eq!(job.cfg.cpus.to_string(), "0-15");
    s.handle(ok_matrix(&job));
    let before = s.snapshot();
    assert_eq!(before.cpu_count, 16);
    assert!(before.measured_at_us > 0);

    // The same machine after a change (here: another machine's tree).
    s.cfg.sysroot = fixture("ryzen-2700x");
    s.handle(Event::Tick(t0 + Duration::from_secs(61)));
    let after = s.snapshot();
    assert_ne!(after.fingerprint, before.fingerprint);
    assert_eq!(after.measured_at_us, 0, "the old matrix no longer applies");
    let aside = std::fs::read_dir(&s.cfg.state_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("foreign"));
    assert!(
        aside,
        "the stored matrix of the old fingerprint is moved aside"
    );
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1, "a full measurement of the new CPUs");
    assert_eq!(j[0].cfg.cpus, s.machine.usable());
    assert_eq!(
        j[0].cfg.fingerprint.as_deref(),
        Some(after.fingerprint.as_str())
    );
    assert_eq!(after.state, Phase::Measuring);
    // Until it ends, placement works from sysfs.
    let cpus = plan_with(
        &mut s,
        crate::api::PlaceSpec::count(2, Policy::Compact, SmtPolicy::Allow),
    )
    .unwrap();
    assert_eq!(cpus.len(), 2, "{cpus}");
}
