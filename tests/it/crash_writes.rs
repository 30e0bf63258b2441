//! `kill -9` during restore-journal and matrix-store writes never leaves a torn file.
//!
//! A writer process (this test binary, re-executed with [`WRITER_ENV`] set) rewrites
//! the journal or the matrix store in a loop, with contents of varying size; the test
//! kills it with SIGKILL at a random moment, many times over, and after each kill reads
//! back what is on disk: the current file must load whole (and the store must not
//! have moved anything aside), whatever the writer was doing when it died.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pinnerd::affinity::restore::{Journal, RestoreEntry, ThreadRestore};
use pinnerd::matrix::store::MatrixStore;
use pinnerd::LatencyMatrix;

const WRITER_ENV: &str = "PINNERD_IT_WRITER";
const FINGERPRINT: &str = "crash-writes";
/// Kills per file kind. Each round costs a process start and a few milliseconds.
const ROUNDS: usize = 60;

/// The journal of write `i`: up to 400 processes, so a write spans many pages; the
/// first entry's start time says which write it is.
fn journal_entries(i: usize) -> Vec<RestoreEntry> {
    (0..1 + (i * 37) % 400)
        .map(|k| RestoreEntry {
            pid: 1000 + k as i32,
            start_time: (i * 1000 + k) as u64,
            comm: format!("writer-{i}-{k}"),
            applied: "1".parse().unwrap(),
            original: "0-1".parse().unwrap(),
            threads: BTreeMap::from([(
                2000 + k as i32,
                ThreadRestore {
                    original: "0".parse().unwrap(),
                    applied: "1".parse().unwrap(),
                    sched: None,
                },
            )]),
        })
        .collect()
}

/// The matrix of write `i`: 2 to 64 CPUs; the cell (1, 0) says which write it is.
fn matrix(i: usize) -> LatencyMatrix {
    let n = 2 + (i * 13) % 63;
    let mut m = LatencyMatrix::from_fn((0..n as u32).collect(), |a, b| match (a, b) {
        (1, 0) => 1000.0 + i as f64,
        _ => 10.0 + ((a * 7 + b * 3) % 90) as f64,
    });
    m.fingerprint = Some(FINGERPRINT.into());
    m
}

/// The writer: rewrites forever, saying `ready` after the first complete write.
fn write_forever(kind: &str, dir: &Path) -> ! {
    let store = MatrixStore::open(dir).unwrap().with_history(3);
    let journal = Journal::new(dir);
    for i in 0.. {
        match kind {
            "journal" => journal.save(&journal_entries(i)).unwrap(),
            "matrix" => drop(store.save(&matrix(i)).unwrap()),
            other => panic!("unknown writer {other}"),
        }
        if i == 0 {
            println!("ready");
        }
    }
    unreachable!()
}

/// A small xorshift: the kill moments differ from run to run, and the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Starts a writer, lets it run for a random moment after its first write, kills it
/// with SIGKILL and reaps it.
fn kill_a_writer(kind: &str, dir: &Path, rng: &mut Rng) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_writes::kill_9_during_writes_never_leaves_a_torn_file",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_ENV, format!("{kind}:{}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the {kind} writer died before its first write"
        );
        if line.contains("ready") {
            break;
        }
    }
    std::thread::sleep(Duration::from_micros(rng.below(20_000)));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the {kind} writer was not killed");
}

#[test]
fn kill_9_during_writes_never_leaves_a_torn_file() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        let (kind, dir) = spec.split_once(':').unwrap();
        write_forever(kind, Path::new(dir));
    }
    let seed = Instant::now().elapsed().as_nanos() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
        | 1;
    println!("kill moments seeded with {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();

    let journal_dir = dir.path().join("runtime");
    std::fs::create_dir(&journal_dir).unwrap();
    let journal = Journal::new(&journal_dir);
    for round in 0..ROUNDS {
        kill_a_writer("journal", &journal_dir, &mut rng);
        let entries = journal
            .load()
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        let i = entries[0].start_time as usize / 1000;
        assert!(
            entries == journal_entries(i),
            "round {round} (seed {seed}): the journal is not one the writer wrote"
        );
    }

    let store_dir = dir.path().join("state");
    let store = MatrixStore::open(&store_dir).unwrap().with_history(3);
    for round in 0..ROUNDS {
        kill_a_writer("matrix", &store_dir, &mut rng);
        let loaded = store.load_current(FINGERPRINT).unwrap();
        assert_eq!(
            loaded.set_aside, None,
            "round {round} (seed {seed}): the current matrix was unusable"
        );
        let current = loaded.matrix.expect("a current matrix");
        let i = (current.at(1, 0).unwrap() - 1000.0) as usize;
        assert!(
            current == matrix(i),
            "round {round} (seed {seed}): a matrix never written"
        );
        for old in store.history().unwrap() {
            let m = LatencyMatrix::load(&old)
                .unwrap_or_else(|e| panic!("round {round} (seed {seed}): history {e}"));
            m.validate().unwrap();
        }
    }
    // A killed writer leaves its temp file; opening the store clears the stale ones.
    let leftovers = |d: &Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.contains(".tmp"))
            .collect::<Vec<_>>()
    };
    MatrixStore::open(&store_dir).unwrap();
    assert_eq!(leftovers(&store_dir), Vec::<String>::new());
}
