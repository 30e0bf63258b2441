//! What measurement keeps away from: never CPUs, an exclusive rule's CPUs, and the plans
//! that keep off them.

use super::*;

#[test]
fn never_cpus_are_measured_around_and_keep_their_earlier_cells() {
    let (mut s, _d) = on_e5620_copy(no_interval());
    // Every CPU the first time.
    let job = measured_first(&mut s);
    assert_eq!(job.cfg.cpus.to_string(), "0-15");
    // CPU 3 is never to be measured now: the job stays off it.
    s.loaded.settings.measure.never_cpus = "3".parse().unwrap();
    let job = remeasure_job(&mut s);
    assert_eq!(job.cfg.cpus.to_string(), "0-2,4-15");
    let mut m = LatencyMatrix::from_fn(job.cfg.cpus.iter().collect(), |_, _| 50.0);
    m.measured_at_us = Some(1_800_000_000_000_000);
    m.fingerprint = job.cfg.fingerprint.clone();
    s.handle(Event::Measured(Box::new(Finished {
        id: job.id,
        result: Ok(Product::Matrix(Box::new(m))),
    })));
    let a = s.take_actions();
    assert_eq!(finished(&a), vec![(job.id, true)]);
    let summary = &summaries(&a)[0];
    assert!(
        summary.ends_with("; kept 15 earlier cells of CPU 3 (CPU 3: measure.never-cpus)"),
        "{summary}"
    );
    let cur = s.machine.current.clone().unwrap();
    assert_eq!(cur.len(), 16);
    assert_eq!(
        cur.between(3, 4),
        Some(40.0),
        "CPU 3's cells are the earlier ones"
    );
    assert_eq!(cur.between(2, 4), Some(50.0), "the rest are new");
    assert_eq!(cur.measured_at_us, Some(1_800_000_000_000_000));
    // The stored matrix says which cells are old; so does the status line.
    let fp = s.snapshot().fingerprint;
    let stored = MatrixStore::open(&s.cfg.state_dir).unwrap();
    let st = stored.load_current(&fp).unwrap().matrix.unwrap();
    assert_eq!(st.kept, cur.kept);
    assert_eq!(st.kept.as_ref().unwrap().cpus.to_string(), "3");
    let status: Vec<_> = a
        .iter()
        .filter_map(|a| match a {
            Action::Status(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert!(
        status
            .last()
            .unwrap()
            .ends_with("matrix of 16 CPUs, earlier cells kept for CPU 3"),
        "{status:?}"
    );
    // Drift probes stay off CPU 3 too.
    for _ in 0..20 {
        s.start_drift_probe();
        for j in jobs(&s.take_actions()) {
            let JobKind::Drift { pairs, .. } = &j.kind else {
                panic!()
            };
            assert!(pairs.iter().all(|&(a, b)| a != 3 && b != 3), "{pairs:?}");
            assert!(!j.cfg.cpus.contains(3));
            s.handle(probes(&j, 45.0));
            s.take_actions();
        }
    }
}

#[test]
fn an_exclusive_rule_s_cpus_are_not_measured_and_two_cpus_minus_one_measure_nothing() {
    let (mut s, d) = on_e5620_copy(no_interval());
    write_rule(d.path(), "feed", "[[rule]]\nname = \"feed\"\n[rule.match]\ncomm = \"feed\"\n[rule.place]\ncpus = \"5\"\nexclusive = true\n");
    s.start().unwrap();
    let job = jobs(&s.take_actions())[0].clone();
    assert_eq!(job.cfg.cpus.to_string(), "0-4,6-15");
    s.handle(ok_matrix(&job));
    let a = s.take_actions();
    let summary = &summaries(&a)[0];
    assert!(
        summary.ends_with("; kept 0 earlier cells of CPU 5 (CPU 5: exclusive rule \"feed\"), 15 pairs never measured"),
        "{summary}"
    );
    // Two CPUs online, one held: no pair to measure. The job ends at once, keeps
    // the earlier cells and says so; nothing failed and nothing asks again.
    set_online(&s.cfg.sysroot, "4-5");
    s.handle(Event::Hotplug);
    s.take_actions();
    let Ok(id) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    let a = s.take_actions();
    assert!(jobs(&a).is_empty(), "no spinner at all");
    assert_eq!(finished(&a), vec![(id, true)]);
    assert_eq!(
        summaries(&a)[0],
        "nothing measured: only CPU 4 may be measured (CPU 5: exclusive rule \"feed\"); no earlier cells to keep"
    );
    assert_eq!(s.snapshot().state, Phase::Ready);
    assert!(s.measurement.schedule.running().is_none());
    s.handle(Event::Tick(Instant::now() + Duration::from_secs(5)));
    assert!(jobs(&s.take_actions()).is_empty(), "no retry loop");
}

#[test]
fn with_an_earlier_pair_a_single_measurable_cpu_keeps_it() {
    let (mut s, _d) = on_e5620_copy(no_interval());
    set_online(&s.cfg.sysroot, "0-1");
    measured_first(&mut s);
    s.loaded.settings.measure.never_cpus = "1".parse().unwrap();
    let Ok(id) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    let a = s.take_actions();
    assert!(jobs(&a).is_empty());
    assert_eq!(finished(&a), vec![(id, true)]);
    assert_eq!(
        summaries(&a)[0],
        "nothing measured: only CPU 0 may be measured (CPU 1: measure.never-cpus); kept 1 earlier cell of CPU 1 (CPU 1: measure.never-cpus)"
    );
    let cur = s.machine.current.clone().unwrap();
    assert_eq!(cur.between(0, 1), Some(40.0));
    assert_eq!(
        cur.measured_at_us,
        Some(1_700_000_000_000_000),
        "the earlier time"
    );
}

#[test]
fn plan_keeps_off_an_exclusive_rule_s_cpus_as_plan_with_and_pins_do() {
    use crate::api::PlaceSpec;
    let (mut s, d) = on_e5620_copy(no_interval());
    write_rule(d.path(), "hold", "[[rule]]\nname = \"hold\"\n[rule.match]\ncomm = \"no-such\"\n[rule.place]\ncpus = \"0\"\nexclusive = true\n");
    measured_first(&mut s);
    let plan = plan_with(
        &mut s,
        crate::api::PlaceSpec::count(1, Policy::Compact, SmtPolicy::Allow),
    )
    .unwrap();
    let plan_with = plan_with(&mut s, PlaceSpec::Request(count_request(1))).unwrap();
    let cpus = &plan;
    assert!(
        !cpus.contains(0),
        "Plan chose the exclusive rule's CPU: {cpus}"
    );
    assert_eq!(plan, plan_with);
}
