//! Measurement jobs through the state: the first one, remeasure calls joining or
//! following it, the stored matrix, failures, drift probes and periodic measurements.

use super::*;

#[test]
fn without_a_stored_matrix_start_measures_and_remeasure_joins_it() {
    let (mut s, _d, job) = started(Timing::default());
    assert_eq!(s.snapshot().state, Phase::Measuring);
    assert_eq!(s.snapshot().measured_at_us, 0);
    assert_eq!(job.cfg.cpus, s.machine.usable());
    // A machine this small gets every pair; from 128 CPUs on, the sparse mode.
    assert!(job.cfg.cpus.len() < measure::SPARSE_FROM_CPUS);
    assert_eq!(job.cfg.mode, measure::Mode::Serial);
    assert_eq!(
        job.cfg.mode,
        measure::Mode::default_for(job.cfg.cpus.len(), measure::SPARSE_FROM_CPUS)
    );
    // Concurrent Remeasure calls coalesce into the running job.
    assert_eq!(ask(&mut s, Call::Remeasure).unwrap(), job.id);
    assert_eq!(ask(&mut s, Call::Remeasure).unwrap(), job.id);
    assert!(jobs(&s.take_actions()).is_empty());

    s.handle(ok_matrix(&job));
    let a = s.take_actions();
    assert_eq!(finished(&a), vec![(job.id, true)]);
    let snap = s.snapshot();
    assert_eq!(snap.state, Phase::Ready);
    assert_eq!(snap.measured_at_us, 1_700_000_000_000_000);
    let MatrixReply { cpus, latency_ns } = ask(&mut s, Call::GetMatrix).unwrap();
    assert_eq!(cpus, job.cfg.cpus.iter().collect::<Vec<_>>());
    assert!(latency_ns[0][0].is_nan());
    if cpus.len() > 1 {
        assert_eq!(latency_ns[0][1], 40.0);
    }
}

#[test]
fn remeasure_calls_close_together_join_the_previous_job() {
    let (mut s, _d) = state(Timing::default());
    let job = measured_first(&mut s);
    let Ok(first) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    assert!(first > job.id);
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1);
    s.handle(ok_matrix(&j[0]));
    let fresh = summaries(&s.take_actions());
    assert_eq!(fresh.len(), 1);
    assert!(!fresh[0].contains("earlier call"), "{fresh:?}");
    // Within remeasure-min-interval: the same job, whose end is told again, saying it
    // is an earlier call's job and why no new one started.
    assert_eq!(ask(&mut s, Call::Remeasure).unwrap(), first);
    let a = s.take_actions();
    assert!(jobs(&a).is_empty());
    assert_eq!(finished(&a), vec![(first, true)]);
    let again = summaries(&a);
    assert!(again[0].starts_with(&fresh[0]), "{again:?}");
    assert!(
        again[0].contains(&format!("(job {first}, asked for 0 s ago by an earlier call: a new measurement starts at most every {} s, limits.remeasure-min-interval)",
            Timing::default().remeasure_min_interval.as_secs())),
        "{again:?}"
    );
}

#[test]
fn with_no_minimum_interval_each_remeasure_after_the_last_ended_is_new() {
    let timing = Timing {
        remeasure_min_interval: Duration::ZERO,
        ..Timing::default()
    };
    let (mut s, _d, job) = started(timing);
    s.handle(ok_matrix(&job));
    let Ok(a) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    let j = jobs(&s.take_actions());
    s.handle(ok_matrix(&j[0]));
    let Ok(b) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    assert!(b > a);
}

#[test]
fn the_matrix_is_stored_and_used_at_the_next_start() {
    let (mut s, d, job) = started(Timing::default());
    s.handle(ok_matrix(&job));
    let cfg = s.cfg.clone();
    let ops = managed::Ops::fakes();
    let mut again = State::with_ops(
        cfg,
        Settings::default(),
        Timing::default(),
        Instant::now(),
        ops,
    );
    again.loaded.policy = LoadPolicy::unchecked();
    again.start().unwrap();
    assert!(
        jobs(&again.take_actions()).is_empty(),
        "stored matrix reused"
    );
    assert_eq!(again.snapshot().measured_at_us, 1_700_000_000_000_000);
    assert_eq!(again.snapshot().state, Phase::Ready);
    drop(d);
}

#[test]
fn a_corrupt_stored_matrix_is_set_aside_and_measured_again() {
    let (s, d) = state(Timing::default());
    std::fs::write(s.cfg.state_dir.join("matrix.json"), "{ not json").unwrap();
    let mut s = s;
    s.start().unwrap();
    assert_eq!(jobs(&s.take_actions()).len(), 1);
    let aside = std::fs::read_dir(&s.cfg.state_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("corrupt"));
    assert!(aside, "corrupt file moved aside");
    drop(d);
}

#[test]
fn a_failed_first_measurement_degrades() {
    let (mut s, _d, job) = started(Timing::default());
    s.handle(Event::Measured(Box::new(Finished {
        id: job.id,
        result: Err(JobError::Spawn(std::io::Error::other("CPUs busy"))),
    })));
    assert_eq!(finished(&s.take_actions()), vec![(job.id, false)]);
    assert_eq!(s.snapshot().state, Phase::Degraded);
    // Said in words, with what to do.
    assert_eq!(
        s.snapshot().state_reason,
        "no latency matrix: the measurement failed (cannot start the measurement thread: CPUs busy); placement uses the sysfs topology until one succeeds — `pinnerd remeasure --wait` tries again and says why it fails"
    );
}

#[test]
fn a_stale_result_is_ignored() {
    let (mut s, _d, job) = started(Timing::default());
    let mut stale = job.clone();
    stale.id += 100;
    s.handle(ok_matrix(&stale));
    assert!(finished(&s.take_actions()).is_empty());
    assert_eq!(s.snapshot().state, Phase::Measuring);
}

fn probe_timing() -> Timing {
    Timing {
        drift_every: Some(Duration::from_secs(10)),
        full_every: None,
        ..Timing::default()
    }
}

#[test]
fn drift_probe_runs_when_due_and_only_drift_triggers_a_full_measurement() {
    let t0 = Instant::now();
    let (mut s, _d, job) = started(probe_timing());
    if job.cfg.cpus.len() < 2 {
        return; // a one-CPU machine has no pair to probe
    }
    s.handle(ok_matrix(&job));
    s.take_actions();

    // Not due yet.
    s.handle(Event::Tick(t0 + Duration::from_secs(5)));
    assert!(jobs(&s.take_actions()).is_empty());
    // Due: a probe, not a full measurement; the phase stays ready.
    s.handle(Event::Tick(t0 + Duration::from_secs(11)));
    let probe = jobs(&s.take_actions());
    assert_eq!(probe.len(), 1);
    assert!(matches!(probe[0].kind, JobKind::Drift { .. }));
    assert_eq!(s.snapshot().state, Phase::Ready);
    // Same latency: no full measurement.
    s.handle(probes(&probe[0], 42.0));
    assert!(jobs(&s.take_actions()).is_empty());

    // The next probe finds drift: a full measurement follows.
    s.handle(Event::Tick(t0 + Duration::from_secs(22)));
    let probe = jobs(&s.take_actions());
    assert_eq!(probe.len(), 1);
    s.handle(probes(&probe[0], 120.0));
    let full = jobs(&s.take_actions());
    assert_eq!(full.len(), 1);
    assert!(matches!(full[0].kind, JobKind::Full));
    assert_eq!(
        full[0].cfg.mode,
        measure::Mode::default_for(full[0].cfg.cpus.len(), measure::SPARSE_FROM_CPUS)
    );
    assert_eq!(s.snapshot().state, Phase::Measuring);
}

/// Drift found by the probe that follows a fresh measurement whose repeat check
/// passed: the host moved the vCPUs since. The matrix in use and the stored one are
/// marked unstable, and the snapshot and the status line say so, exactly.
#[test]
fn drift_soon_after_a_measurement_marks_the_matrix_unstable() {
    use crate::matrix::{Stability, Verdict, HOST_MOVES_VCPUS};
    let t0 = Instant::now();
    let (mut s, _d, job) = started(probe_timing());
    if job.cfg.cpus.len() < 2 {
        return; // a one-CPU machine has no pair to probe
    }
    let mut m = matrix_for(&job);
    m.measured_at_us = Some(crate::measure::now_us());
    m.stability = Some(Stability {
        repeated: 1,
        disagreeing: 0,
        nearest_moved: 0,
        tolerance: 0.25,
        bound: 0.25,
        verdict: Verdict::Stable,
        vm: true,
        why: None,
    });
    s.handle(Event::Measured(Box::new(Finished {
        id: job.id,
        result: Ok(Product::Matrix(Box::new(m))),
    })));
    s.take_actions();
    assert_eq!(s.snapshot().latency_off, "");

    s.handle(Event::Tick(t0 + Duration::from_secs(11)));
    let probe = jobs(&s.take_actions());
    assert_eq!(probe.len(), 1);
    s.handle(probes(&probe[0], 120.0));
    let actions = s.take_actions();
    assert_eq!(s.snapshot().latency_off, HOST_MOVES_VCPUS);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Status(t) if t.contains(HOST_MOVES_VCPUS))),
        "{actions:?}"
    );
    let fp = s.snapshot().fingerprint;
    let stored = MatrixStore::open(&s.cfg.state_dir)
        .unwrap()
        .load_current(&fp)
        .unwrap()
        .matrix
        .unwrap();
    assert_eq!(stored.latency_off(), Some(HOST_MOVES_VCPUS));
    let st = stored.stability.unwrap();
    assert_eq!(
        (st.verdict, st.disagreeing),
        (Verdict::Unstable, probe_pairs(&probe[0]))
    );
    // A full measurement still follows, to replace the matrix.
    assert!(jobs(&actions)
        .iter()
        .any(|j| matches!(j.kind, JobKind::Full)));
}

fn probe_pairs(job: &Job) -> usize {
    match &job.kind {
        JobKind::Drift { pairs, .. } => pairs.len(),
        _ => 0,
    }
}

#[test]
fn remeasure_during_a_probe_is_promised_and_runs_after_it() {
    let t0 = Instant::now();
    let (mut s, _d, job) = started(probe_timing());
    if job.cfg.cpus.len() < 2 {
        return;
    }
    s.handle(ok_matrix(&job));
    s.take_actions();
    s.handle(Event::Tick(t0 + Duration::from_secs(11)));
    let probe = jobs(&s.take_actions())[0].clone();
    let Ok(promised) = ask(&mut s, Call::Remeasure) else {
        panic!()
    };
    assert_eq!(ask(&mut s, Call::Remeasure).unwrap(), promised, "coalesced");
    assert!(jobs(&s.take_actions()).is_empty(), "waits for the probe");
    s.handle(Event::Measured(Box::new(Finished {
        id: probe.id,
        result: Err(JobError::Spawn(std::io::Error::other("busy"))),
    })));
    let full = jobs(&s.take_actions());
    assert_eq!(full.len(), 1);
    assert_eq!(full[0].id, promised);
}

#[test]
fn periodic_full_measurement() {
    let t0 = Instant::now();
    let timing = Timing {
        full_every: Some(Duration::from_secs(100)),
        drift_every: None,
        ..Timing::default()
    };
    let (mut s, _d) = state(timing);
    measured_first(&mut s);
    s.handle(Event::Tick(t0 + Duration::from_secs(50)));
    assert!(jobs(&s.take_actions()).is_empty());
    s.handle(Event::Tick(t0 + Duration::from_secs(101)));
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1);
    assert!(matches!(j[0].kind, JobKind::Full));
}
