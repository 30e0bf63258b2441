//! Every fuzz target's kept corpus and crash reproducers, replayed through the same
//! checks the targets run (`fuzz_checks`), plus property tests of the same promises
//! on generated input. Corpora: `tests/fuzz_corpus/TARGET/` (seeds, inputs a campaign
//! found interesting, and `crash-*` reproducers of fixed bugs); the rule loader's is
//! `tests/rules_corpus/` and the shipped examples.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::fuzz_checks;
use pinnerd::affinity::restore::{Journal, RestoreEntry, ThreadRestore};
use pinnerd::matrix::LatencyMatrix;
use pinnerd::settings::{Every, Fraction, HumanDuration, Settings};
use pinnerd::CpuSet;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dirs` (recursively), sorted; at least `min` of them.
fn inputs(dirs: &[PathBuf], min: usize) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        walk(d, &mut out);
    }
    out.sort();
    assert!(
        out.len() >= min,
        "only {} corpus files under {dirs:?}",
        out.len()
    );
    out
}

fn corpus(target: &str) -> PathBuf {
    root().join("tests/fuzz_corpus").join(target)
}

/// Runs `check` on each input, naming the input that failed.
fn replay(files: &[PathBuf], mut check: impl FnMut(&[u8])) {
    for f in files {
        let data = std::fs::read(f).unwrap();
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
        assert!(ok.is_ok(), "corpus file {} fails its check", f.display());
    }
}

#[test]
fn matrix_csv_corpus_replays() {
    replay(
        &inputs(
            &[corpus("matrix_csv"), root().join("tests/fixtures/c2c")],
            5,
        ),
        fuzz_checks::matrix_csv,
    );
}

#[test]
fn matrix_file_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    replay(&inputs(&[corpus("matrix_file")], 4), |d| {
        fuzz_checks::matrix_file(dir.path(), d)
    });
}

#[test]
fn settings_corpus_replays() {
    replay(&inputs(&[corpus("settings")], 3), fuzz_checks::settings);
}

#[test]
fn restore_journal_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    replay(&inputs(&[corpus("restore_journal")], 2), |d| {
        fuzz_checks::restore_journal(dir.path(), d)
    });
}

#[test]
fn nri_stream_corpus_replays() {
    replay(&inputs(&[corpus("nri_stream")], 4), fuzz_checks::nri_stream);
}

#[test]
fn rules_load_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    // The rules corpus holds each case's `.expected` output beside it.
    let examples = inputs(
        &[
            root().join("tests/rules_corpus"),
            root().join("config/pinnerd.d"),
        ],
        100,
    )
    .into_iter()
    .filter(|p| p.extension().is_some_and(|e| e == "toml"));
    let files: Vec<PathBuf> = inputs(&[corpus("rules_load")], 100)
        .into_iter()
        .chain(examples)
        .collect();
    replay(&files, |d| fuzz_checks::rules_load(dir.path(), d));
}

/// A symmetric matrix over 2 to 9 distinct CPU ids with finite cells, some missing.
/// (One CPU has no pair: its CSV is a blank line, which core-to-core-latency's format
/// cannot tell from an empty file.)
fn matrix() -> impl Strategy<Value = LatencyMatrix> {
    (2usize..10)
        .prop_flat_map(|n| {
            (
                proptest::collection::btree_set(0u32..=pinnerd::cpuset::MAX_CPU_ID, n),
                proptest::collection::vec(proptest::option::weighted(0.9, 0.0f64..1e6), n * n),
            )
        })
        .prop_map(|(ids, cells)| {
            let cpus: Vec<u32> = ids.into_iter().collect();
            let n = cpus.len();
            let mut m = LatencyMatrix::from_fn(cpus, |_, _| 0.0);
            for i in 0..n {
                for j in 0..i {
                    m.latency_ns.set(i, j, cells[i * n + j]);
                }
            }
            m
        })
}

fn duration_ms(lo: u64, hi: u64) -> impl Strategy<Value = HumanDuration> {
    (lo..=hi).prop_map(|ms| HumanDuration(std::time::Duration::from_millis(ms)))
}

/// Settings with every value inside its documented range.
fn settings() -> impl Strategy<Value = Settings> {
    const S: u64 = 1_000;
    const H: u64 = 3_600 * S;
    const D: u64 = 24 * H;
    (
        proptest::option::of(duration_ms(H, 365 * D)),
        proptest::option::of(duration_ms(60 * S, 365 * D)),
        1u32..=4096,
        0.0f64..=1.0,
        duration_ms(S, D),
        proptest::option::of(duration_ms(S, D)),
        (1u32..=100_000, 1u32..=100_000, duration_ms(S, 365 * D)),
        proptest::collection::btree_set(0u32..64, 0..8),
    )
        .prop_map(
            |(interval, probe, pairs, frac, budget, rescan, (rate, burst, remeasure), hk)| {
                let every = |d: Option<HumanDuration>| d.map_or(Every::Off, Every::Every);
                let mut s = Settings::default();
                s.measure.interval = every(interval);
                s.measure.drift_probe = every(probe);
                s.measure.drift_pairs = pairs;
                s.measure.drift_threshold = Fraction(frac);
                s.measure.budget = budget;
                s.watch.rescan_interval = every(rescan);
                s.limits.dbus_calls_per_second = rate;
                s.limits.dbus_burst = burst;
                s.limits.remeasure_min_interval = remeasure;
                s.placement.housekeeping_cpus = hk.into_iter().collect::<CpuSet>();
                s
            },
        )
}

fn cpuset() -> impl Strategy<Value = CpuSet> {
    proptest::collection::btree_set(0u32..=pinnerd::cpuset::MAX_CPU_ID, 0..6)
        .prop_map(|s| s.into_iter().collect())
}

fn journal_entries() -> impl Strategy<Value = Vec<RestoreEntry>> {
    proptest::collection::vec(
        (
            1i32..i32::MAX,
            any::<u64>(),
            "[ -~]{0,15}",
            cpuset(),
            cpuset(),
            proptest::collection::btree_map(1i32..i32::MAX, (cpuset(), cpuset()), 0..3),
        )
            .prop_map(
                |(pid, start_time, comm, applied, original, threads)| RestoreEntry {
                    pid,
                    start_time,
                    comm,
                    applied,
                    original,
                    threads: threads
                        .into_iter()
                        .map(|(t, (original, applied))| {
                            (
                                t,
                                ThreadRestore {
                                    original,
                                    applied,
                                    sched: None,
                                },
                            )
                        })
                        .collect(),
                },
            ),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes as a runtime's NRI stream, and the seeds with bytes changed.
    #[test]
    fn nri_streams_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        seed in 0usize..4,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        fuzz_checks::nri_stream(&data);
        let seeds = inputs(&[corpus("nri_stream")], 4);
        let mut seeded = std::fs::read(&seeds[seed]).unwrap();
        for (at, b) in flips {
            let at = at % seeded.len();
            seeded[at] = b;
        }
        fuzz_checks::nri_stream(&seeded);
    }

    /// Any valid matrix survives our JSON through the bounded reader, and the CSV
    /// layout (which keeps cells, not CPU ids).
    #[test]
    fn matrices_round_trip_through_json_and_csv(m in matrix()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
        let back = LatencyMatrix::load(&path).unwrap();
        prop_assert_eq!(&back.cpus, &m.cpus);
        prop_assert_eq!(&back.latency_ns, &m.latency_ns);
        let csv = LatencyMatrix::from_csv(&m.to_csv(), &path).unwrap();
        prop_assert_eq!(&csv.latency_ns, &m.latency_ns);
        fuzz_checks::matrix_file(dir.path(), m.to_csv().as_bytes());
    }

    /// Any bytes never panic the matrix readers.
    #[test]
    fn arbitrary_bytes_never_panic_the_matrix_readers(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let dir = tempfile::tempdir().unwrap();
        fuzz_checks::matrix_csv(&data);
        fuzz_checks::matrix_file(dir.path(), &data);
    }

    /// Settings inside every range print and parse back unchanged.
    #[test]
    fn settings_in_range_round_trip(s in settings()) {
        let text = s.to_toml();
        prop_assert_eq!(Settings::parse(Path::new("s.toml"), &text).unwrap(), s);
        fuzz_checks::settings(text.as_bytes());
    }

    /// A D-Bus burst or rate of 0 and a re-measure interval under an hour are refused.
    #[test]
    fn settings_out_of_range_are_refused(ms in 1u64..3_600_000, zero_key in 0usize..2) {
        let text = format!("[measure]\ninterval = \"{ms}ms\"\n");
        let e = Settings::parse(Path::new("s.toml"), &text).unwrap_err().to_string();
        prop_assert!(e.starts_with("s.toml:2:12: ") && e.contains("out of range"), "{}", e);
        let key = ["dbus-burst", "dbus-calls-per-second"][zero_key];
        let e = Settings::parse(Path::new("s.toml"), &format!("[limits]\n{key} = 0\n"))
            .unwrap_err()
            .to_string();
        prop_assert!(e.contains("0 is out of range: expected 1 to 100000"), "{}", e);
    }

    /// Whatever the journal holds is read back as written.
    #[test]
    fn journals_round_trip(entries in journal_entries()) {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        j.save(&entries).unwrap();
        prop_assert_eq!(j.load().unwrap(), entries);
        let text = std::fs::read(j.path()).unwrap();
        fuzz_checks::restore_journal(dir.path(), &text);
    }

    /// Any number of seconds on the command line is a duration or an error, never a
    /// panic: accepted exactly when finite and from 0 to the maximum.
    #[test]
    fn cli_seconds_never_panic(v in prop_oneof![
        any::<f64>(),
        Just(f64::INFINITY),
        Just(f64::NAN),
        Just(1e20),
        0.0f64..100_000.0,
    ]) {
        let r = pinnerd::cli::seconds("--budget", v, pinnerd::cli::MAX_BUDGET_SECS);
        prop_assert_eq!(r.is_ok(), v.is_finite() && (0.0..=pinnerd::cli::MAX_BUDGET_SECS).contains(&v));
    }
}

#[test]
fn hwloc_xml_corpus_replays() {
    replay(&inputs(&[corpus("hwloc_xml")], 4), fuzz_checks::hwloc_xml);
}

#[test]
fn sysfs_tree_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    replay(&inputs(&[corpus("sysfs_tree")], 4), |d| {
        fuzz_checks::sysfs_tree(dir.path(), d)
    });
}
