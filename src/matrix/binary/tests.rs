use std::path::Path;

use super::*;
use crate::matrix::{Verdict, COMPACT_FROM_CPUS};

/// An 8-CPU matrix with every field set: a missing cell, measured and inferred
/// statistics, sparse counts, kept cells, stability and warnings; figures to 0.01 ns.
fn everything() -> LatencyMatrix {
    let cpus = vec![0, 1, 2, 3, 8, 9, 10, 11];
    let mut m = LatencyMatrix::from_fn(cpus.clone(), |i, j| {
        if i / 4 == j / 4 {
            21.25
        } else {
            104.5 + (i + j) as f64 / 100.0
        }
    });
    m.latency_ns.set(7, 6, None);
    for i in 0..8 {
        for j in i + 1..8 {
            let Some(v) = m.at(i, j) else { continue };
            let measured = (i + j) % 3 == 0;
            m.stats.push(PairStats {
                a: cpus[i],
                b: cpus[j],
                p10_ns: if measured { v - 0.5 } else { v },
                median_ns: v,
                p90_ns: if measured { v + 1.75 } else { v },
                samples: if measured { 31 } else { 0 },
                discarded: u32::from(measured) * 2,
                round_trips: u32::from(measured) * 5000,
                inferred: !measured,
            });
        }
    }
    m.primitive = Some("cas".into());
    m.measured_at_us = Some(1_700_000_000_123_456);
    m.measure_seconds = Some(12.5);
    m.fingerprint = Some("fp-1".into());
    m.first_touch = Some("initiator".into());
    m.mode = Some("sparse".into());
    m.sparse = Some(Box::new(SparseCounts {
        pairs_measured: 0,
        pairs_total: 0,
        modelled_seconds: 3.5,
    }));
    m.warnings = vec![
        "a warning".into(),
        "another, with \"quotes\"\nand a line".into(),
    ];
    m.kept = Some(KeptCells {
        cpus: "10-11".parse().unwrap(),
        pairs: 3,
        missing: 1,
        reason: "CPU 10: exclusive rule \"feed\"".into(),
    });
    m.stability = Some(Stability {
        repeated: 5,
        disagreeing: 1,
        nearest_moved: 0,
        tolerance: 0.25,
        bound: 0.1,
        verdict: Verdict::Stable,
        vm: true,
        why: None,
    });
    m.take_inferred_entries();
    m.recount();
    m.validate().unwrap();
    m
}

fn load_bytes(dir: &Path, bytes: &[u8]) -> Result<LatencyMatrix, MatrixError> {
    let path = dir.join("m.bin");
    std::fs::write(&path, bytes).unwrap();
    LatencyMatrix::load(&path)
}

fn binary(m: &LatencyMatrix) -> Vec<u8> {
    let mut out = Vec::new();
    let n = m.write_binary(&mut out).unwrap();
    assert_eq!(n, out.len() as u64);
    out
}

#[test]
fn every_field_survives_the_binary_form() {
    let dir = tempfile::tempdir().unwrap();
    let m = everything();
    let bytes = binary(&m);
    assert!(bytes.starts_with(b"pinnerd-matrix-bin 1\n{"));
    let back = load_bytes(dir.path(), &bytes).unwrap();
    assert_eq!(back, m);
    assert!(back.inferred_count() > 0);
    assert!(back.stats.iter().all(|s| !s.inferred));
    // The size is the header's: 28 cells and one record per entry after it.
    let header_end = bytes.iter().skip(21).position(|&b| b == b'\n').unwrap() + 22;
    let entries = m.stats.len() + m.inferred_count();
    assert_eq!(bytes.len(), header_end + 4 * 28 + RECORD * entries);
}

/// A large matrix read from its JSON form (cells to 0.01 ns, inferred statistics
/// left out and made again) is the same read from its binary form. (Its statistics'
/// figures are on the 0.01 ns grid: JSON keeps them whole, binary to 0.01 ns.)
#[test]
fn json_then_binary_reads_back_the_same_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let n = COMPACT_FROM_CPUS;
    let mut m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
        40.0 + ((i * 31 + j * 17) % 97) as f64 / 4.0
    });
    for j in 0..n {
        for i in j + 1..n {
            let v = m.latency_ns.get(i, j).unwrap();
            let measured = i == j + 1;
            m.stats.push(PairStats {
                a: j as u32,
                b: i as u32,
                p10_ns: v,
                median_ns: v,
                p90_ns: if measured { v + 1.5 } else { v },
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
    let json = serde_json::to_string(&m).unwrap();
    let from_json = LatencyMatrix::from_json(&json, Path::new("m.json")).unwrap();
    let bytes = from_json.to_file_bytes().unwrap();
    assert!(bytes.starts_with(MAGIC), "written binary at {n} CPUs");
    let back = load_bytes(dir.path(), &bytes).unwrap();
    assert!(
        back == from_json,
        "the same matrix after JSON → binary → read"
    );
    assert_eq!(back.sparse.as_ref().unwrap().pairs_measured, n - 1);
    // 4 bytes a cell and 32 a record with batches: the inferred ones are left out.
    let pairs = n * (n - 1) / 2;
    assert!(
        bytes.len() < 4 * pairs + 32 * n + 64 * 1024,
        "{}",
        bytes.len()
    );
}

#[test]
fn below_the_threshold_every_writer_writes_json() {
    let m = everything();
    let bytes = m.to_file_bytes().unwrap();
    assert_eq!(bytes, m.to_json_text().unwrap().into_bytes());
    let mut streamed = Vec::new();
    let n = m.write_file(&mut streamed).unwrap();
    assert_eq!(n, streamed.len() as u64);
    assert!(streamed.starts_with(b"{"));
}

#[test]
fn a_figure_past_42_ms_is_refused_when_written_naming_the_pair() {
    let mut m = everything();
    m.latency_ns.set(0, 4, Some(MAX_FIGURE_NS));
    let e = m.write_binary(&mut Vec::new()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cell (0, 8): 42949672.95 ns cannot be stored"),
        "{e}"
    );
    // The largest code is a figure.
    m.latency_ns.set(0, 4, Some(MAX_FIGURE_NS - 0.01));
    m.stats.clear();
    let dir = tempfile::tempdir().unwrap();
    let back = load_bytes(dir.path(), &binary(&m)).unwrap();
    assert_eq!(back.between(0, 8), Some(42_949_672.94));
}

/// Bytes of a matrix with one statistics record (the last 32 bytes).
fn with_one_record() -> Vec<u8> {
    let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 10.0);
    m.stats.push(PairStats {
        a: 0,
        b: 2,
        p10_ns: 9.0,
        median_ns: 10.0,
        p90_ns: 11.0,
        samples: 3,
        discarded: 0,
        round_trips: 100,
        inferred: false,
    });
    binary(&m)
}

#[test]
fn each_bad_record_is_refused_naming_it_and_its_byte() {
    let dir = tempfile::tempdir().unwrap();
    let good = with_one_record();
    let at = good.len() - RECORD;
    load_bytes(dir.path(), &good).unwrap();
    let cases: [(usize, &[u8], &str); 4] = [
        (0, &[7, 0], "the pair (7, 2) is not a pair of `cpus`"),
        (2, &[0, 0], "the pair (0, 0) is not a pair of `cpus`"),
        (
            4,
            &[0x10, 0x27, 0, 0],
            "p10/median/p90 100/10/11 are not ordered",
        ),
        (
            28,
            &[2, 0, 0, 0],
            "flags 0x2: only bit 0 (inferred) is known",
        ),
    ];
    for (o, patch, said) in cases {
        let mut bad = good.clone();
        bad[at + o..at + o + patch.len()].copy_from_slice(patch);
        let e = load_bytes(dir.path(), &bad).unwrap_err().to_string();
        let want = format!("m.bin: byte {at}: statistics record 0: ");
        assert!(e.contains(&want) && e.contains(said), "{e}");
    }
}

#[test]
fn the_largest_file_is_what_8192_cpus_take_with_every_record() {
    assert_eq!(MAX_STATS, 33_550_336);
    assert_eq!(MAX_BINARY_FILE_SIZE, 30 + (8 << 20) + 36 * 33_550_336);
    assert_eq!(MAX_BINARY_FILE_SIZE, 1_216_200_734);
}
