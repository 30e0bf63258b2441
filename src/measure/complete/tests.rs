use super::*;
use crate::matrix::SparseCounts;
use crate::measure::simulate::Simulated;
use std::collections::BTreeSet;

/// A sparse-looking matrix of 8 CPUs (pairs at 10 ns, fours at 30, 80 across), the
/// cells with both CPUs ≥ 4 inferred 20% low.
fn half_inferred() -> (LatencyMatrix, LatencyMatrix) {
    let truth = LatencyMatrix::from_fn((0..8).collect(), |i, j| {
        if i / 2 == j / 2 {
            10.0
        } else if i / 4 == j / 4 {
            30.0
        } else {
            80.0
        }
    });
    let mut m = truth.clone();
    for i in 0..8 {
        for j in i + 1..8 {
            let v = truth.at(i, j).unwrap();
            let inferred = i >= 4;
            let v = if inferred { v * 0.8 } else { v };
            m.latency_ns.set(i, j, Some(v));
            m.stats.push(PairStats {
                a: i as u32,
                b: j as u32,
                p10_ns: v,
                median_ns: v,
                p90_ns: v,
                samples: if inferred { 0 } else { 1 },
                discarded: 0,
                round_trips: 0,
                inferred,
            });
        }
    }
    m.take_inferred_entries();
    assert_eq!((m.stats.len(), m.inferred_count()), (22, 6));
    m.sparse = Some(Box::new(SparseCounts {
        pairs_measured: 22,
        pairs_total: 28,
        modelled_seconds: 1.0,
    }));
    (truth, m)
}

#[test]
fn pending_pairs_are_the_inferred_and_empty_cells() {
    let (_, mut m) = half_inferred();
    assert_eq!(
        pending(&m),
        vec![(4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)]
    );
    m.latency_ns.set(0, 1, None);
    assert_eq!(pending(&m)[0], (0, 1));
    assert_eq!(measured_share(&m), (21, 28));
    // A full matrix has nothing pending, even with a hole (the store's fill owns
    // those).
    m.sparse = None;
    assert_eq!(pending(&m).len(), 6);
}

#[test]
fn slices_are_rounds_of_disjoint_pairs_within_the_size_and_off_cpus() {
    let all: Vec<(u32, u32)> = (0..8u32)
        .flat_map(|a| (a + 1..8).map(move |b| (a, b)))
        .collect();
    let rounds = pick(&all, 10, &"7".parse().unwrap());
    assert_eq!(rounds.iter().map(Vec::len).sum::<usize>(), 10);
    for r in &rounds {
        let cpus: BTreeSet<u32> = r.iter().flat_map(|&(a, b)| [a, b]).collect();
        assert_eq!(cpus.len(), 2 * r.len(), "disjoint: {r:?}");
        assert!(!cpus.contains(&7), "an off CPU is never picked: {r:?}");
    }
    // 7 CPUs usable: at most 3 pairs at once.
    assert_eq!(rounds[0].len(), 3);
    assert!(pick(&all, 0, &CpuSet::new()).is_empty());
}

/// The completion takes its slices out of a bitset instead of scanning the list:
/// the same rounds as [`pick`] on the list, slice after slice, to the last pair.
#[test]
fn slices_taken_from_the_set_are_the_rounds_pick_makes_of_the_list() {
    let mut rng = crate::measure::rng::Rng::new(7);
    for (top, size) in [(9u32, 4usize), (70, 16), (130, 512), (200, 7)] {
        let mut list: Vec<(u32, u32)> = (0..top)
            .flat_map(|a| (a + 1..top).map(move |b| (a, b)))
            .filter(|_| rng.unit() < 0.6)
            .collect();
        let mut set = Pending::empty(top as usize);
        for &(a, b) in &list {
            set.insert(a, b);
        }
        assert_eq!(set.pairs(), list);
        let mut slices = 0;
        while !list.is_empty() {
            let want = pick(&list, size, &CpuSet::new());
            assert_eq!(set.take(size), want, "{top} CPUs, slice {slices}");
            let picked: BTreeSet<(u32, u32)> = want.iter().flatten().copied().collect();
            list.retain(|p| !picked.contains(p));
            assert_eq!(set.left, list.len());
            slices += 1;
        }
        assert!(set.take(size).is_empty());
    }
}

#[test]
fn completion_measures_every_inferred_cell_once_and_names_the_correction() {
    let (truth, mut m) = half_inferred();
    let mut sim = Simulated::new(&truth, 0.0, 1);
    let done = complete(&mut m, &mut sim, 4, |_| BTreeMap::new()).unwrap();
    assert!(pending(&m).is_empty());
    assert_eq!(done.pairs, 6);
    assert_eq!(done.slices, 2);
    // Every figure was 25% off its inferred cell: each measured twice (they agree).
    assert_eq!(done.measurements, 12, "{done:?}");
    assert_eq!(done.rechecked, 0);
    assert!(m.stats.iter().all(|s| !s.inferred));
    assert_eq!(m.inferred_count(), 0);
    let sp = m.sparse.as_ref().unwrap();
    assert_eq!((sp.pairs_measured, sp.pairs_total), (28, 28));
    for i in 0..8 {
        for j in 0..8 {
            assert_eq!(m.at(i, j), truth.at(i, j), "{i}–{j}");
        }
    }
    m.validate().unwrap();
    assert_eq!(done.corrections.len(), 6);
    assert_eq!(
        describe(&done.corrections, 0.10).unwrap(),
        "6 cell(s) among CPUs 4-7 were inferred 20% low (median)"
    );
    assert_eq!(describe(&done.corrections, 0.25), None);
    let json = serde_json::to_string(&m).unwrap();
    assert!(!json.contains("\"inferred\""), "{json}");
}

#[test]
fn a_figure_that_agrees_with_its_cell_is_taken_once_and_outliers_are_retaken() {
    let truth = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |_, _| 100.0);
    // Answers 100, then a preempted 300, then 101.
    struct Scripted(Vec<f64>);
    impl PairMeasurer for Scripted {
        fn measure_round(
            &mut self,
            round: &[(u32, u32)],
        ) -> Result<Vec<Option<f64>>, MeasureError> {
            Ok(round.iter().map(|_| Some(self.0.remove(0))).collect())
        }
    }
    let rounds = vec![vec![(0, 1)]];
    let s = measure_slice(&mut Scripted(vec![100.0]), &rounds, |a, b| {
        truth.between(a, b)
    })
    .unwrap();
    assert_eq!(
        (s.measurements, s.figures.clone()),
        (1, vec![(0, 1, Some(100.0))])
    );
    let s = measure_slice(&mut Scripted(vec![300.0, 101.0, 100.0]), &rounds, |a, b| {
        truth.between(a, b)
    })
    .unwrap();
    assert_eq!(s.figures, vec![(0, 1, Some(101.0))], "{s:?}");
    assert_eq!(s.measurements, 2);
    // Nothing to agree with: taken until two figures in a row agree.
    let s = measure_slice(&mut Scripted(vec![300.0, 100.0, 105.0]), &rounds, |_, _| {
        None
    })
    .unwrap();
    assert_eq!((s.measurements, s.figures[0].2), (3, Some(100.0)));
    // At most MAX_FIGURES, the lowest kept.
    let s = measure_slice(
        &mut Scripted(vec![300.0, 200.0, 400.0, 250.0, 1.0]),
        &rounds,
        |_, _| None,
    )
    .unwrap();
    assert_eq!(s.figures, vec![(0, 1, Some(200.0))]);
    assert_eq!(s.measurements, MAX_FIGURES);
}

#[test]
fn a_preempted_figure_is_suspect_and_taken_again() {
    // Two cores of two SMT siblings each: 5 ns within a core, 50 across.
    let truth = LatencyMatrix::from_fn(
        vec![0, 1, 2, 3],
        |i, j| {
            if i / 2 == j / 2 {
                5.0
            } else {
                50.0
            }
        },
    );
    let mut m = truth.clone();
    m.latency_ns.set(0, 2, Some(160.0));
    assert_eq!(suspects(&truth), vec![]);
    assert_eq!(suspects(&m), vec![(0, 2, 50.0)]);
    let mut sim = Simulated::new(&truth, 0.0, 3);
    let done = complete(&mut m, &mut sim, 8, |_| BTreeMap::new()).unwrap();
    assert_eq!((done.pairs, done.rechecked), (0, 1));
    assert_eq!(m.between(0, 2), Some(50.0));
}

#[test]
fn completion_time_is_modelled_per_slice_spinner_and_round() {
    let c = Completion {
        slices: 2,
        spinners: 10,
        rounds: vec![4, 1],
        ..Completion::default()
    };
    let costs = CrewCosts {
        per_round: Duration::from_millis(10),
        per_pair: Duration::from_millis(1),
        per_spinner: Duration::from_millis(3),
    };
    let ms = Duration::from_millis;
    // 2 × (200 + 1000) + 10 × 3 + (10 + 4) + (10 + 1).
    assert_eq!(
        c.modelled(&costs, ms(200), ms(1000)),
        ms(2400 + 30 + 14 + 11)
    );
}

#[test]
fn a_default_slice_is_rounds_of_the_machine() {
    // Up to 512 CPUs: 512 pairs, as before slices grew (2 rounds at 512, 8 at 128).
    for n in [2, 64, 128, 256, 512] {
        assert_eq!(default_slice(n), 512, "{n}");
    }
    // Then n / 256 rounds of n / 2 pairs, at most 8 rounds.
    assert_eq!(default_slice(1024), 4 * 512);
    assert_eq!(default_slice(2048), 8 * 1024);
    assert_eq!(default_slice(4096), 8 * 2048);
    assert_eq!(default_slice(8192), 8 * 4096);
    assert_eq!(default_slice(768), 3 * 384);
    // A configured size is honoured whatever the machine.
    assert_eq!(slice_size(Some(512), 8192), 512);
    assert_eq!(slice_size(Some(7), 4), 7);
    assert_eq!(slice_size(None, 4096), 16_384);
}

#[test]
fn a_slice_counts_the_spinners_it_starts() {
    // The 6 inferred pairs among CPUs 4-7, 2 pairs a slice: each slice is one round of
    // two disjoint pairs over the 4 CPUs.
    let (truth, mut m) = half_inferred();
    let mut sim = Simulated::new(&truth, 0.0, 1);
    let done = complete(&mut m, &mut sim, 2, |_| BTreeMap::new()).unwrap();
    assert_eq!((done.pairs, done.slices, done.rechecked), (6, 3, 0));
    // Each figure is 25% off its inferred cell, so each round is taken again (until two
    // figures agree) on the slice's same spinners.
    assert_eq!(done.rounds, vec![2; 6]);
    assert_eq!(done.spinners, 3 * 4);
}

/// A 1,024-CPU machine whose first map measured only the pairs inside groups of 8: its
/// default slices are 4 full rounds of 512 pairs over every CPU, and the model adds per
/// slice the guard and the pause, per CPU a spinner's start, per round one pair-pass
/// and each pair handed out (no pair is measured twice: the simulated figures agree).
#[test]
fn a_machine_of_1024_cpus_completes_in_slices_of_4_rounds_modelled() {
    let n = 1024usize;
    let truth = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
        if i / 8 == j / 8 {
            20.0
        } else {
            100.0
        }
    });
    // The cells across groups inferred (right: every figure agrees with its cell).
    let mut m = truth.clone();
    for i in 0..n {
        for j in i + 1..n {
            if i / 8 != j / 8 {
                m.stats.push(PairStats {
                    a: i as u32,
                    b: j as u32,
                    p10_ns: 100.0,
                    median_ns: 100.0,
                    p90_ns: 100.0,
                    samples: 0,
                    discarded: 0,
                    round_trips: 0,
                    inferred: true,
                });
            }
        }
    }
    m.take_inferred_entries();
    let first = n * 7 / 2;
    let total = n * (n - 1) / 2;
    m.sparse = Some(Box::new(SparseCounts {
        pairs_measured: first,
        pairs_total: total,
        modelled_seconds: 1.0,
    }));
    let mut sim = Simulated::new(&truth, 0.0, 1);
    let slice = default_slice(n);
    assert_eq!(slice, 2048);
    let done = complete(&mut m, &mut sim, slice, |_| BTreeMap::new()).unwrap();
    assert!(pending(&m).is_empty());
    assert_eq!(done.pairs, total - first);
    // A figure the simulated host inflated is taken again (about 1% here).
    assert!(done.measurements >= done.pairs && done.measurements * 100 <= done.pairs * 102);
    assert_eq!(done.slices, (total - first).div_ceil(slice));
    // Nearly every slice is 4 full rounds of 512 pairs over all 1,024 CPUs (then the
    // retaken figures' small rounds).
    let full = done.rounds.iter().filter(|&&r| r == n / 2).count();
    assert!(full >= 4 * (done.slices - 4), "{full} full rounds");
    // A crew per slice, and one for the cells taken again at the end.
    assert!(done.spinners <= done.slices * n + 2 * done.rechecked);
    assert!(done.spinners >= (done.slices - 2) * n);
    let ms = Duration::from_millis;
    let t = done.modelled(&MODEL_COSTS, ms(200), ms(1000));
    let by_hand = ms(1200) * done.slices as u32
        + MODEL_COSTS.per_spinner * done.spinners as u32
        + MODEL_COSTS.per_round * done.rounds.len() as u32
        + MODEL_COSTS.per_pair * done.measurements as u32;
    assert_eq!(t, by_hand);
    // Minutes: 254 slices, 1,024 spinners each, about 1,450 rounds.
    assert!(t < Duration::from_secs(420), "{t:?}");
}
