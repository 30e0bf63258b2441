use std::time::{Duration, Instant};

use super::*;
use crate::measure::estimator::StopRule;
use crate::measure::Primitive;

fn two_cpus() -> (u32, u32) {
    let ids: Vec<u32> = crate::measure::allowed_cpus().unwrap().iter().collect();
    assert!(ids.len() >= 2, "the crew needs two CPUs to test");
    (ids[0], ids[1])
}

fn plan(a: u32, b: u32, primitive: Primitive) -> PairPlan {
    PairPlan {
        initiator: a,
        responder: b,
        primitive,
        first_touch: FirstTouch::Initiator,
        warm: Duration::from_millis(1),
        batch: Duration::from_micros(20),
        stop: StopRule {
            min_batches: 10,
            max_batches: 40,
            ..StopRule::default()
        },
        deadline: Instant::now() + Duration::from_secs(5),
        priority: SpinPriority::Normal,
    }
}

/// The name of thread `tid` of this process (the kernel keeps 15 bytes of it), `None`
/// once it ended.
fn comm(tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
}

#[test]
fn one_crew_measures_round_after_round_on_the_same_threads() {
    let _spin = crate::measure::one_spinner_at_a_time();
    let (a, b) = two_cpus();
    let crew = Crew::start(&[a, b], SpinPriority::Normal).unwrap();
    assert_eq!(crew.cpus().collect::<Vec<_>>(), vec![a.min(b), a.max(b)]);
    // One live thread per CPU, named after it.
    let tids = crew.tids();
    assert_eq!(tids.len(), 2);
    for &(cpu, tid) in &tids {
        let name: String = format!("pinnerd-spin-{cpu}-crew")
            .chars()
            .take(15)
            .collect();
        assert_eq!(comm(tid).as_deref(), Some(&*name), "CPU {cpu}");
    }
    for (k, primitive) in [Primitive::Cas, Primitive::LoadStore, Primitive::Cas]
        .into_iter()
        .enumerate()
    {
        // Both directions and both first touchers, on the same two threads.
        let mut p = if k % 2 == 0 {
            plan(a, b, primitive)
        } else {
            plan(b, a, primitive)
        };
        if k == 2 {
            p.first_touch = FirstTouch::Responder;
        }
        let runs = crew.round(std::slice::from_ref(&p)).unwrap();
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.pin_failure, None, "{primitive:?}: {run:?}");
        assert!(!run.stalled, "{run:?}");
        assert!(
            !run.batches.is_empty() || run.switched + run.migrated >= 1,
            "{primitive:?}: {run:?}"
        );
        for f in &run.batches {
            assert!(*f > 0.0 && *f < 1_000_000.0, "{primitive:?}: {f}");
        }
        // The same threads, still there: fed, not started again.
        assert_eq!(crew.tids(), tids, "round {k}");
        assert!(tids.iter().all(|&(_, t)| comm(t).is_some()), "round {k}");
    }
    drop(crew);
    assert!(
        tids.iter().all(|&(_, t)| comm(t).is_none()),
        "joined on drop"
    );
}

#[test]
fn a_pin_that_cannot_hold_gives_no_batches_and_says_why() {
    let _spin = crate::measure::one_spinner_at_a_time();
    let (a, _) = two_cpus();
    let crew = Crew::start(&[a, 4000], SpinPriority::Normal).unwrap();
    for (i, r) in [(a, 4000), (4000, a)] {
        let run = crew.round(&[plan(i, r, Primitive::Cas)]).unwrap().remove(0);
        assert!(run.batches.is_empty(), "{run:?}");
        assert!(
            matches!(run.pin_failure, Some(PinFailure::Refused { cpu: 4000, .. })),
            "{run:?}"
        );
    }
}

#[test]
fn a_round_must_be_disjoint_pairs_of_the_crew() {
    let _spin = crate::measure::one_spinner_at_a_time();
    let (a, b) = two_cpus();
    let crew = Crew::start(&[a, b], SpinPriority::Normal).unwrap();
    assert!(crew.covers(&[plan(a, b, Primitive::Cas)]));
    assert!(!crew.covers(&[plan(a, 4001, Primitive::Cas)]));
    assert!(!crew.covers(&[plan(a, a, Primitive::Cas)]));
    assert!(!crew.covers(&[plan(a, b, Primitive::Cas), plan(b, a, Primitive::Cas)]));
    assert!(crew.round(&[]).unwrap().is_empty());
}

/// What a round costs beyond its pair's own spinning, with threads per pair
/// (`spawn_pair`, what rounds ran on) and with a crew; and what starting a crew costs
/// per CPU. Prints the figures of the time model (asserts nothing about time, only that
/// every round gave its pair's figure on its CPUs); a second or so in the debug build.
/// `cargo test --lib crew::tests::overhead -- --nocapture`
#[test]
fn overhead() {
    let _spin = crate::measure::one_spinner_at_a_time();
    let (a, b) = two_cpus();
    let mut p = plan(a, b, Primitive::Cas);
    p.warm = Duration::ZERO;
    p.batch = Duration::from_nanos(1);
    p.stop = StopRule {
        min_batches: 1,
        max_batches: 1,
        ..StopRule::default()
    };
    let reps = 400u32;
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut spawned = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let run = super::super::run_pair(p.clone()).unwrap();
        spawned.push(t.elapsed());
        assert_eq!(run.pin_failure, None);
    }
    let crew = Crew::start(&[a, b], SpinPriority::Normal).unwrap();
    let (mut fed, mut handed) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        let run = crew.round(std::slice::from_ref(&p)).unwrap().remove(0);
        fed.push(t.elapsed());
        handed.push(crew.last_feed());
        assert_eq!(run.pin_failure, None);
    }
    drop(crew);
    let mut started = Vec::new();
    for _ in 0..reps / 4 {
        let t = Instant::now();
        let crew = Crew::start(&[a, b], SpinPriority::Normal).unwrap();
        started.push(t.elapsed());
        drop(crew);
    }
    println!(
        "one-pair round, threads per pair: median {:?}; crew: median {:?}, of which handing out the pair's jobs {:?}; crew of 2 started: median {:?} (per CPU {:?}); {reps} rounds each",
        median(spawned),
        median(fed),
        median(handed),
        median(started.clone()),
        median(started) / 2
    );
}
