use super::*;

fn p() -> &'static Path {
    Path::new("m.csv")
}

#[test]
fn csv_lower_triangle() {
    let m = LatencyMatrix::from_csv(",,\n10.5,,\n20,30,\n", p()).unwrap();
    assert_eq!(m.cpus, vec![0, 1, 2]);
    assert_eq!(m.at(1, 0), Some(10.5));
    assert_eq!(m.at(0, 1), Some(10.5));
    assert_eq!(m.between(2, 1), Some(30.0));
    assert_eq!(m.at(1, 1), None);
    m.validate().unwrap();
}

#[test]
fn csv_errors_name_file_and_line() {
    let e = LatencyMatrix::from_csv(",,\n10,,\n20,abc,\n", p()).unwrap_err();
    assert_eq!(e.to_string(), "m.csv:3: cell 2: \"abc\" is not a number");
    let e = LatencyMatrix::from_csv(",,\n10,,\n", p()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.csv:3: the file ends after 2 of 3 rows (the first row has 3 cells): truncated?"
    );
    let e = LatencyMatrix::from_csv(",,\n10,,\n20,30\n", p()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.csv:3: expected 3 comma-separated cells (one per CPU), found 2"
    );
    let e = LatencyMatrix::from_csv(",\n10,\n20,\n", p()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.csv:3: more rows than the 2 cells of the first row: not a square matrix"
    );
    let e = LatencyMatrix::from_csv("", p()).unwrap_err();
    assert!(e.to_string().starts_with("m.csv:1: empty file"), "{e}");
    let e = LatencyMatrix::from_csv(",\n-1,\n", p()).unwrap_err();
    assert_eq!(e.to_string(), "m.csv:2: cell 1: -1 is not a latency");
}

#[test]
fn json_round_trip_and_validation() {
    let m = LatencyMatrix::from_fn(vec![0, 2, 5], |i, j| (i * 10 + j) as f64);
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
    let bad = r#"{"cpus":[0,1],"latency_ns":[[null,1.0],[2.0,null]]}"#;
    let e = LatencyMatrix::from_json(bad, p()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.csv: matrix is not symmetric at CPUs 0 and 1"
    );
    let mut timed = m.clone();
    timed.measure_seconds = Some(12.5);
    let text = serde_json::to_string(&timed).unwrap();
    assert!(text.contains("\"measure_seconds\":12.5"), "{text}");
    assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), timed);
    let e = LatencyMatrix::from_json(&text.replace("12.5", "-1"), p()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.csv: `measure_seconds` -1 is not a duration"
    );
    let e = LatencyMatrix::from_json("{\"cpus\": [0,", p()).unwrap_err();
    assert!(e.to_string().starts_with("m.csv:1: column"), "{e}");
}

#[test]
fn zero_and_quantised_cells_warn() {
    let m = LatencyMatrix::from_fn(
        (0..8).collect(),
        |i, j| if i == 7 && j == 0 { 0.0 } else { 5.0 },
    );
    let w = m.import_flaws();
    assert!(
        w.iter().any(|w| w.contains("1 cell(s) are exactly 0 ns")),
        "{w:?}"
    );
    assert!(w.iter().any(|w| w.contains("quantised")), "{w:?}");
    let smooth = LatencyMatrix::from_fn((0..8).collect(), |i, j| {
        10.0 + i as f64 * 1.37 + j as f64 * 0.11
    });
    assert!(smooth.import_flaws().is_empty());
}

#[test]
fn csv_export_is_core_to_core_latency_layout() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/c2c");
    let path = Path::new(dir).join("Intel_Core_i5-4590_CPU_at_3.30GHz.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let m = LatencyMatrix::load(&path).unwrap();
    assert_eq!(m.to_csv(), text, "byte-for-byte round trip");
    let mut gap = LatencyMatrix::from_fn(vec![3, 7, 9], |i, j| (i + j) as f64 + 0.5);
    gap.latency_ns.set(2, 0, None);
    assert_eq!(gap.to_csv(), ",,\n1.5,,\nnan,3.5,\n");
    let back = LatencyMatrix::from_csv(&gap.to_csv(), p()).unwrap();
    assert_eq!(back.at(2, 0), None);
    assert_eq!(back.at(2, 1), Some(3.5));
}

#[test]
fn check_against_names_small_and_foreign_matrices() {
    let m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 20.0);
    let online: CpuSet = "0-3".parse().unwrap();
    let w = m.check_against(&online);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("too small"), "{w:?}");
    assert!(w[0].contains("CPUs 2-3 have no figures"), "{w:?}");
    let w = m.check_against(&"0".parse().unwrap());
    assert!(w[0].contains("CPUs 1 that are not online"), "{w:?}");
    assert!(m.check_against(&"0-1".parse().unwrap()).is_empty());
    let mut holes = m.clone();
    holes.latency_ns.set(0, 1, None);
    let w = holes.check_against(&"0-1".parse().unwrap());
    assert_eq!(w, vec!["1 of 1 pairs have no figure".to_string()]);
}

#[test]
fn summary_finds_levels() {
    // Two groups of two CPUs: 10 ns inside a group, 100 ns across.
    let m = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |i, j| {
        if i / 2 == j / 2 {
            10.0 + i as f64 * 0.1
        } else {
            100.0 + j as f64
        }
    });
    let s = m.summary();
    assert_eq!(s.pairs, 6);
    assert_eq!(s.missing, 0);
    assert_eq!(s.min_ns, 10.1);
    assert_eq!(s.max_ns, 101.0);
    assert_eq!(s.levels.len(), 2, "{s:?}");
    assert_eq!(s.levels[0].pairs, 2);
    assert_eq!(s.levels[1].pairs, 4);
    assert_eq!(s.levels[1].median_ns, 100.5);
}

#[test]
fn stats_are_validated() {
    let mut m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 20.0);
    m.stats.push(PairStats {
        a: 0,
        b: 1,
        p10_ns: 20.0,
        median_ns: 21.0,
        p90_ns: 25.0,
        samples: 30,
        discarded: 1,
        round_trips: 500,
        inferred: false,
    });
    m.validate().unwrap();
    assert_eq!(m.stats_for(1, 0).unwrap().samples, 30);
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
    m.stats[0].b = 5;
    assert!(m.validate().unwrap_err().contains("stats entry 0"));
    m.stats[0].b = 1;
    m.stats[0].p90_ns = 1.0;
    assert!(m.validate().unwrap_err().contains("not ordered"));
}

#[test]
fn sparse_counts_and_inferred_pairs_round_trip_and_old_files_still_load() {
    let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 20.0);
    // An old file: no sparse fields, no `inferred` flag.
    let old = serde_json::to_string(&m).unwrap();
    assert!(
        !old.contains("pairs_measured") && !old.contains("inferred"),
        "{old}"
    );
    let back = LatencyMatrix::from_json(&old, p()).unwrap();
    assert_eq!(back.sparse, None);
    m.sparse = Some(Box::new(SparseCounts {
        pairs_measured: 2,
        pairs_total: 3,
        modelled_seconds: 0.5,
    }));
    m.stats.push(PairStats {
        a: 1,
        b: 2,
        p10_ns: 20.0,
        median_ns: 20.0,
        p90_ns: 20.0,
        samples: 0,
        discarded: 0,
        round_trips: 0,
        inferred: true,
    });
    m.take_inferred_entries();
    assert!(m.stats.is_empty());
    assert!(m.is_inferred(1, 2) && m.inferred_count() == 1);
    let text = serde_json::to_string(&m).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pairs_measured"], 2);
    assert_eq!(v["pairs_total"], 3);
    assert_eq!(v["modelled_seconds"], 0.5);
    assert_eq!(v["stats"][0]["inferred"], true);
    assert_eq!(v["stats"][0]["samples"], 0);
    assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
    // Counts only in part, or unknown keys: read as a matrix without sparse counts.
    let partial = old.replacen('{', "{\"pairs_measured\": 2, \"unknown\": [1, 2], ", 1);
    let back = LatencyMatrix::from_json(&partial, p()).unwrap();
    assert_eq!(back.sparse, None);
}

#[test]
fn sparse_counts_are_read_off_the_cells_not_taken_from_the_file() {
    // Three pairs: (0, 1) measured, (1, 2) inferred, (0, 2) without a figure.
    let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 20.0);
    m.latency_ns.set(0, 2, None);
    m.stats.push(PairStats {
        a: 2,
        b: 1,
        p10_ns: 20.0,
        median_ns: 20.0,
        p90_ns: 20.0,
        samples: 0,
        discarded: 0,
        round_trips: 0,
        inferred: true,
    });
    m.take_inferred_entries();
    m.sparse = Some(Box::new(SparseCounts {
        pairs_measured: 1,
        pairs_total: 3,
        modelled_seconds: 0.5,
    }));
    let text = serde_json::to_string(&m).unwrap();
    for (measured, total) in [(5, 1), (0, 1), (3, 3), (0, 0)] {
        let damaged = text
            .replace(
                "\"pairs_measured\":1",
                &format!("\"pairs_measured\":{measured}"),
            )
            .replace("\"pairs_total\":3", &format!("\"pairs_total\":{total}"));
        assert!(
            damaged.contains(&format!("\"pairs_total\":{total}")),
            "{damaged}"
        );
        let back = LatencyMatrix::from_json(&damaged, p()).unwrap();
        let sp = back.sparse.as_ref().unwrap();
        assert_eq!(
            (sp.pairs_measured, sp.pairs_total),
            (1, 3),
            "{measured}/{total}"
        );
        assert_eq!(back, m);
        // The same count completion's pending pairs give.
        assert_eq!(crate::measure::complete::pending(&back).len(), 3 - 1);
    }
    // Narrowed to CPUs 0 and 1, the one pair left is measured.
    let narrowed = keep::restrict(&m, &CpuSet::from_iter([0, 1]));
    let sp = narrowed.sparse.as_ref().unwrap();
    assert_eq!((sp.pairs_measured, sp.pairs_total), (1, 1));
}

/// Past 1,024 CPUs a file leaves out the inferred pairs' statistics and reads back
/// the same matrix; at 1,024 and below it is written as before, every entry in it.
#[test]
fn a_large_sparse_matrix_is_stored_without_its_inferred_statistics_and_read_back_whole() {
    fn sparse_of(n: usize) -> LatencyMatrix {
        let mut m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
            if i / 16 == j / 16 {
                30.0
            } else {
                90.0 + (i % 7) as f64
            }
        });
        m.latency_ns.set(5, 0, None);
        for j in 0..n {
            for i in j + 1..n {
                let Some(v) = m.latency_ns.get(i, j) else {
                    continue;
                };
                let measured = i == j + 1;
                m.stats.push(PairStats {
                    a: j as u32,
                    b: i as u32,
                    p10_ns: v - 1.0 * f64::from(u8::from(measured)),
                    median_ns: v,
                    p90_ns: v,
                    samples: u32::from(measured) * 9,
                    discarded: 0,
                    round_trips: 0,
                    inferred: !measured,
                });
            }
        }
        m.mode = Some("sparse".into());
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: 0,
            pairs_total: 0,
            modelled_seconds: 1.5,
        }));
        m.take_inferred_entries();
        m.recount();
        m
    }
    let small = sparse_of(COMPACT_FROM_CPUS - 1);
    let text = serde_json::to_string(&small).unwrap();
    assert!(text.contains("\"inferred\":true") && !text.contains("inferred_stats"));
    let big = sparse_of(COMPACT_FROM_CPUS);
    let text = serde_json::to_string(&big).unwrap();
    assert!(
        !text.contains("\"inferred\":true"),
        "no inferred entry written"
    );
    assert!(text.contains("\"inferred_stats\":\"omitted\""));
    assert!(text.len() < 16 << 20, "{} bytes", text.len());
    let back = LatencyMatrix::from_json(&text, Path::new("big.json")).unwrap();
    assert_eq!(back.stats.len(), big.stats.len());
    assert!(back == big, "read back whole, in the same order");
    let sp = back.sparse.as_ref().unwrap();
    assert_eq!(sp.pairs_measured, COMPACT_FROM_CPUS - 1);
}

/// Past 1,024 CPUs each cell is written to a hundredth of a nanosecond (a noisy figure
/// in 7 bytes, not 18); at 1,024 and below as it is.
#[test]
fn a_large_matrix_writes_its_cells_to_a_hundredth_of_a_nanosecond() {
    let noisy = |n: usize| {
        LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
            40.0 + ((i * 31 + j * 17) % 97) as f64 / 7.0
        })
    };
    let small = noisy(COMPACT_FROM_CPUS - 1);
    let text = serde_json::to_string(&small).unwrap();
    let back = LatencyMatrix::from_json(&text, Path::new("small.json")).unwrap();
    assert!(back == small, "written as it is at 1,024 CPUs");
    let big = noisy(COMPACT_FROM_CPUS);
    let text = serde_json::to_string(&big).unwrap();
    let back = LatencyMatrix::from_json(&text, Path::new("big.json")).unwrap();
    let (mut exact, mut rounded) = (0, 0);
    for i in 0..big.len() {
        for (cell, back_cell) in big.latency_ns.row(i).zip(back.latency_ns.row(i)) {
            match (cell, back_cell) {
                (Some(v), Some(b)) => {
                    assert_eq!(b, (v * 100.0).round() / 100.0, "{v} read back as {b}");
                    assert!((v - b).abs() <= 0.005 + 1e-9);
                    if v == b {
                        exact += 1;
                    } else {
                        rounded += 1;
                    }
                }
                (None, None) => {}
                other => panic!("cell {other:?}"),
            }
        }
    }
    assert!(rounded > exact, "{rounded} cells rounded, {exact} exact");
    let cells = (big.len() * big.len()) as f64;
    assert!(
        (text.len() as f64) / cells < 8.0,
        "{} bytes for {cells} cells",
        text.len()
    );
}

/// A complete map past 1,024 CPUs leaves out the entries that repeat their cell (one
/// figure, no spread) and keeps those with batches; read back, every pair is measured
/// and the kept entries are the same. At 1,024 and below every entry is written.
#[test]
fn a_large_complete_matrix_is_stored_without_its_single_figure_statistics() {
    fn complete_of(n: usize) -> LatencyMatrix {
        let mut m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
            if i / 16 == j / 16 {
                30.0
            } else {
                90.0
            }
        });
        for j in 0..n {
            for i in j + 1..n {
                let v = m.latency_ns.get(i, j).unwrap();
                // Pairs of neighbours measured by the spinner (batches), the others
                // by one figure each.
                let batches = i == j + 1;
                m.stats.push(PairStats {
                    a: j as u32,
                    b: i as u32,
                    p10_ns: if batches { v - 1.0 } else { v },
                    median_ns: v,
                    p90_ns: if batches { v + 2.0 } else { v },
                    samples: if batches { 9 } else { 1 },
                    discarded: 0,
                    round_trips: if batches { 1000 } else { 0 },
                    inferred: false,
                });
            }
        }
        m.mode = Some("sparse".into());
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: 0,
            pairs_total: 0,
            modelled_seconds: 1.5,
        }));
        m.take_inferred_entries();
        m.recount();
        m
    }
    let small = complete_of(COMPACT_FROM_CPUS - 1);
    let text = serde_json::to_string(&small).unwrap();
    let back = LatencyMatrix::from_json(&text, Path::new("small.json")).unwrap();
    assert!(back == small, "every entry written at 1,024 CPUs");
    let big = complete_of(COMPACT_FROM_CPUS);
    let pairs = big.len() * (big.len() - 1) / 2;
    let text = serde_json::to_string(&big).unwrap();
    assert!(
        !text.contains("\"samples\":1,"),
        "no single-figure entry written"
    );
    let back = LatencyMatrix::from_json(&text, Path::new("big.json")).unwrap();
    assert_eq!(back.stats.len(), big.len() - 1, "the entries with batches");
    assert!(back.stats.iter().all(|s| s.samples == 9 && !s.inferred));
    assert_eq!(back.latency_ns, big.latency_ns);
    let sp = back.sparse.as_ref().unwrap();
    assert_eq!((sp.pairs_measured, sp.pairs_total), (pairs, pairs));
    assert!(crate::measure::complete::pending(&back).is_empty());
}

#[test]
fn inferred_pairs_are_one_bit_each_and_a_set_emptied_equals_a_new_one() {
    let mut m = LatencyMatrix::from_fn((0..5).collect(), |_, _| 20.0);
    assert_eq!(m.inferred_count(), 0);
    m.set_inferred(3, 1, true);
    m.set_inferred(1, 3, true);
    m.set_inferred(0, 4, true);
    m.set_inferred(2, 2, true);
    assert_eq!(m.inferred_count(), 2);
    assert!(m.is_inferred(1, 3) && m.is_inferred(3, 1) && m.is_inferred(4, 0));
    assert!(!m.is_inferred(0, 1) && !m.is_inferred(2, 2) && !m.is_inferred(9, 1));
    assert_eq!(m.inferred_pairs().collect::<Vec<_>>(), vec![(0, 4), (1, 3)]);
    assert_eq!(m.measured_pairs(), (8, 10));
    m.set_inferred(1, 3, false);
    m.set_inferred(4, 0, false);
    assert_eq!(m.inferred_count(), 0);
    assert_eq!(m, LatencyMatrix::from_fn((0..5).collect(), |_, _| 20.0));
}
