//! Bad input on the command line and in files: every case ends in a clear error naming
//! the flag or the file, with exit code 1 (or 3 for configuration), never a panic
//! (exit 101), never a hang, never more than [`RSS_LIMIT_KIB`] of memory. Each case runs
//! the real binary under GNU time for its peak RSS.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// "No input may use more than ~100 MiB."
const RSS_LIMIT_KIB: i64 = 100 * 1024;
/// Long enough for a debug build on a loaded machine; a hang is far longer.
const DEADLINE: Duration = Duration::from_secs(120);

struct Outcome {
    code: i32,
    stderr: String,
    max_rss_kib: i64,
}

/// Runs `pinnerd ARGS` under GNU time (for the peak RSS of pinnerd alone: `wait4` in
/// this process would also count the test binary's own memory, which `exec` carries
/// over into the child's high-water mark), with its output in files, and kills it
/// (failing the test) past [`DEADLINE`].
fn run(dir: &Path, args: &[&str]) -> Outcome {
    let out = File::create(dir.join("stdout")).unwrap();
    let err = File::create(dir.join("stderr")).unwrap();
    let rss = dir.join("maxrss");
    let mut child = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&rss)
        .args(["-f", "%M"])
        .arg(super::helper::PINNERD)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("run pinnerd under /usr/bin/time (Debian package `time`)");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("pinnerd {args:?} still running after {DEADLINE:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    File::open(dir.join("stderr"))
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    // GNU time reports a child killed by a signal on stderr and exits 128 + signal.
    assert!(
        !stderr.contains("Command terminated by signal"),
        "pinnerd {args:?} died of a signal: {stderr}"
    );
    let max_rss_kib = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("GNU time's %M");
    Outcome {
        code: status.code().expect("an exit code"),
        stderr,
        max_rss_kib,
    }
}

/// The outcome is an ordinary error: exit `code`, the message in `expected`, nothing
/// about a panic, and within the memory limit.
fn assert_clear_error(o: &Outcome, code: i32, expected: &str) {
    assert_eq!(o.code, code, "exit code; stderr:\n{}", o.stderr);
    assert!(
        !o.stderr.contains("panicked"),
        "a panic is not an error message:\n{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(expected),
        "stderr lacks {expected:?}:\n{}",
        o.stderr
    );
    assert!(
        o.max_rss_kib < RSS_LIMIT_KIB,
        "peak RSS {} KiB is over {RSS_LIMIT_KIB} KiB",
        o.max_rss_kib
    );
}

#[test]
fn huge_and_infinite_durations_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["measure", "--budget", "1e20"],
            "--budget must be a number of seconds from 0 to 86400, got 100000000000000000000",
        ),
        (
            &["measure", "--idle-wait", "1e20"],
            "--idle-wait must be a number of seconds from 0 to 3600",
        ),
        (&["measure", "--budget", "NaN"], "--budget must be"),
        (&["measure", "--idle-wait=-1"], "--idle-wait must be"),
        (
            &[
                "plan",
                "--count",
                "1",
                "--measure-budget",
                "inf",
                "--state-dir",
                state,
            ],
            "--measure-budget must be a number of seconds from 0 to 86400, got inf",
        ),
    ];
    for (args, expected) in cases {
        let o = run(dir.path(), args);
        assert_clear_error(&o, 1, expected);
    }
}

#[test]
fn matrix_with_a_huge_cpu_id_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    std::fs::write(
        &m,
        r#"{"cpus": [0, 4294967295], "latency_ns": [[null, 1], [1, null]]}"#,
    )
    .unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", m.to_str().unwrap()],
    );
    assert_clear_error(
        &o,
        1,
        "m.json:1: column 25: `cpus`: CPU 4294967295 is over the largest CPU id 8191",
    );
}

/// A complete 10,000-CPU matrix (about 200 MB of JSON): refused while parsing, before
/// its cells are allocated.
#[test]
fn matrix_of_ten_thousand_cpus_is_refused_within_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("big.json");
    let n = 10_000;
    let mut w = BufWriter::new(File::create(&m).unwrap());
    let cpus: Vec<String> = (0..n).map(|c| c.to_string()).collect();
    write!(w, "{{\"cpus\": [{}], \"latency_ns\": [", cpus.join(",")).unwrap();
    let row = vec!["1"; n].join(",");
    for i in 0..n {
        write!(w, "{}[{row}]", if i == 0 { "" } else { "," }).unwrap();
    }
    write!(w, "]}}").unwrap();
    w.into_inner().unwrap().sync_all().unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", m.to_str().unwrap()],
    );
    assert_clear_error(&o, 1, "`cpus`: more than 8192 entries, the most accepted");
    // The same CPUs as core-to-core-latency CSV: refused by size before reading.
    let csv = dir.path().join("big.csv");
    let mut w = BufWriter::new(File::create(&csv).unwrap());
    let row = ",".repeat(n - 1);
    for _ in 0..4_000 {
        writeln!(w, "{row}").unwrap();
    }
    drop(w);
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", csv.to_str().unwrap()],
    );
    assert_clear_error(&o, 1, "over the 33554432-byte limit for a CSV matrix");
    // A short CSV with 10,000 cells in its first row: refused before allocating.
    std::fs::write(&csv, format!("{row}\n{row}\n")).unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", csv.to_str().unwrap()],
    );
    assert_clear_error(
        &o,
        1,
        "big.csv:1: the first row has 10000 cells: more than the 8192 CPUs a matrix may have",
    );
}

/// A matrix of 1024 CPUs, every pair (the largest before the bound became 8,192; what
/// larger ones cost is in benches/README.md), loads and plans within the memory limit.
#[test]
fn largest_accepted_matrix_plans_within_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("max.csv");
    write_largest_csv(&csv);
    let o = run(
        dir.path(),
        &["plan", "--count", "2", "--matrix", csv.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.max_rss_kib < RSS_LIMIT_KIB,
        "peak RSS {} KiB is over {RSS_LIMIT_KIB} KiB",
        o.max_rss_kib
    );
}

/// `fleet` holds at most 3 Mi cells: a fourth 1024-CPU matrix is refused, naming it,
/// within the memory limit; 257 files are refused before any is read.
#[test]
fn fleet_is_bounded_in_files_and_cells() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("max.csv");
    write_largest_csv(&csv);
    let path = csv.to_str().unwrap();
    let mut args = vec!["fleet"];
    args.extend([path; 6]);
    let o = run(dir.path(), &args);
    assert_clear_error(
        &o,
        1,
        &format!("{path}: with it the matrices hold 4194304 cells, over the 3145728"),
    );
    let mut args = vec!["fleet"];
    args.extend(["/nonexistent/m.csv"; 257]);
    let o = run(dir.path(), &args);
    assert_clear_error(&o, 1, "257 matrices: fleet compares at most 256 at once");
}

/// A matrix of 1024 CPUs, every pair, as core-to-core-latency's CSV.
fn write_largest_csv(csv: &Path) {
    let mut w = BufWriter::new(File::create(csv).unwrap());
    let n = 1024;
    for i in 0..n {
        let cells: Vec<String> = (0..n)
            .map(|j| {
                if j < i {
                    format!("{:.6}", 20.0 + ((i * 31 + j * 17) % 97) as f64 * 1.013)
                } else {
                    String::new()
                }
            })
            .collect();
        writeln!(w, "{}", cells.join(",")).unwrap();
    }
}

#[test]
fn matrix_that_is_a_fifo_or_a_device_is_refused_without_reading() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", fifo.to_str().unwrap()],
    );
    assert_clear_error(&o, 1, "fifo: refused: not a regular file but a FIFO");
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", "/dev/zero"],
    );
    assert_clear_error(
        &o,
        1,
        "/dev/zero: refused: not a regular file but a character device",
    );
    let o = run(dir.path(), &["topology", "--matrix", "/dev/zero"]);
    assert_clear_error(&o, 1, "/dev/zero: refused");
}

/// A 900 KB rule name is shown once, cut to its first characters and its length, in
/// every message that names the rule.
#[test]
fn a_huge_rule_name_is_not_echoed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let name = "n".repeat(900_000);
    std::fs::write(
        rules.join("big.toml"),
        format!("[[rule]]\nname = \"{name}\"\n[rule.match]\n"),
    )
    .unwrap();
    let o = run(dir.path(), &["check", rules.to_str().unwrap()]);
    let shown = format!("{}…[900000 bytes in all]", "n".repeat(80));
    assert_clear_error(&o, 3, &format!("big.toml:2:8: rule name \"{shown}\""));
    // Three messages name the rule (bad name, empty match, nothing placed).
    assert_eq!(o.stderr.matches(&shown).count(), 3, "{}", o.stderr);
    assert!(o.stderr.len() < 2_000, "{} bytes of errors", o.stderr.len());
}

/// Footgun settings stop the daemon before it starts, with the configuration exit code
/// and the file, line and column.
#[test]
fn footgun_settings_stop_the_daemon_with_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("pinnerd.toml");
    let cases = [
        (
            "[measure]\ninterval = \"1ms\"\n",
            "pinnerd.toml:2:12: 1ms is out of range: expected \"1h\" to \"365d\", or \"off\"",
        ),
        (
            "[limits]\ndbus-burst = 0\n",
            "pinnerd.toml:2:14: 0 is out of range: expected 1 to 100000",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&settings, text).unwrap();
        let o = run(
            dir.path(),
            &[
                "daemon",
                "--config",
                settings.to_str().unwrap(),
                "--bus",
                "unix:path=/nonexistent/bus",
            ],
        );
        assert_clear_error(&o, 3, expected);
    }
}

/// A rule file at the size limit full of rules naming the highest CPU id: every set is
/// a bitmap up to that id, so the id limit is what keeps this small (with ids up to
/// 1048575 this file took 3.6 GB).
/// `cmdline` regexes are bounded for the whole rule set, not only one by one: three
/// files of 15 rules of `\w{20}` (350 KB compiled each), each of which fits alone, are
/// refused from the second on, with the position of the first regex that does not
/// fit, within the memory limit; the first file stays loaded.
#[test]
fn cmdline_regexes_are_bounded_for_the_whole_rule_set() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    for f in 0..3 {
        let text: String = (0..15)
            .map(|n| {
                format!(
                    "[[rule]]\nname=\"r{f}-{n}\"\n[rule.match]\ncmdline=\"\\\\w{{20}}\"\n[rule.place]\ncpus=\"0\"\n"
                )
            })
            .collect();
        std::fs::write(rules.join(format!("many-{f}.toml")), text).unwrap();
    }
    let o = run(dir.path(), &["check", rules.to_str().unwrap()]);
    assert_clear_error(&o, 3, "cmdline: regex \"\\\\w{20}\" would take");
    assert!(!o.stderr.contains("many-0.toml:"), "{}", o.stderr);
    for f in ["many-1.toml:", "many-2.toml:"] {
        assert!(o.stderr.contains(f), "{f} {}", o.stderr);
    }
    assert!(o
        .stderr
        .contains("bytes the rule set's cmdline regexes may take together"));
}

/// A captured machine's tree is untrusted input: `devices/system/cpu/online` as a
/// symlink to `/dev/zero`, as a FIFO or as a 5 MiB file is refused by `topology` and
/// `export nfd` with the file named, without hanging or filling memory.
#[test]
fn a_sysfs_tree_with_a_device_a_fifo_or_a_huge_file_is_refused() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/xeon-e5620"
    );
    type Plant = fn(&Path);
    let cases: [(&str, Plant, &str); 3] = [
        (
            "/dev/zero",
            |p| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
            "not a regular file but a character device",
        ),
        (
            "FIFO",
            |p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRUSR).unwrap(),
            "not a regular file but a FIFO",
        ),
        (
            "5 MiB",
            |p| std::fs::write(p, "0,".repeat(5 << 19)).unwrap(),
            "-byte limit",
        ),
    ];
    for (what, plant, said) in cases {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        super::topology::copy_tree(Path::new(fixture), &tree);
        let online = tree.join("sys/devices/system/cpu/online");
        std::fs::remove_file(&online).unwrap();
        plant(&online);
        for cmd in [&["topology"][..], &["export", "nfd"]] {
            let mut args = cmd.to_vec();
            args.extend(["--sysfs", tree.to_str().unwrap()]);
            let o = run(dir.path(), &args);
            assert_ne!(o.code, 0, "{what} {cmd:?}: {}", o.stderr);
            assert_clear_error(&o, o.code, said);
            assert!(
                o.stderr.contains("devices/system/cpu/online"),
                "{what} {cmd:?}: {}",
                o.stderr
            );
        }
    }
}

/// Four rule files of high CPU ids, each of which alone fits the per-file limit and
/// the memory limit: together they would not, so the second is refused (before it is
/// read) naming the set's bound, and so are the others; the first stays loaded.
#[test]
fn rule_files_of_high_cpu_ids_are_bounded_for_the_whole_rule_set() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    for f in 0..4 {
        let mut text = String::new();
        for n in 0.. {
            let rule = format!(
                "[[rule]]\nname=\"r{f}-{n}\"\n[rule.match]\ncomm=\"x\"\n[rule.place]\ncpus=\"8191\"\n"
            );
            if text.len() + rule.len() > pinnerd::rules::MAX_FILE_SIZE as usize * 3 / 4 {
                break;
            }
            text.push_str(&rule);
        }
        std::fs::write(rules.join(format!("many-{f}.toml")), text).unwrap();
    }
    let o = run(dir.path(), &["check", rules.to_str().unwrap()]);
    assert_clear_error(&o, 3, "bytes the rule set's files may take together");
    assert!(!o.stderr.contains("many-0.toml:"), "{}", o.stderr);
    for f in 1..4 {
        let refused = format!("many-{f}.toml: refused: its ");
        assert!(o.stderr.contains(&refused), "{refused} {}", o.stderr);
    }
}

#[test]
fn a_rule_file_of_high_cpu_ids_stays_within_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let mut text = String::new();
    let mut n = 0;
    loop {
        let rule = format!(
            "[[rule]]\nname=\"r{n}\"\n[rule.match]\ncomm=\"x\"\n[rule.place]\ncpus=\"8191\"\n"
        );
        if text.len() + rule.len() > pinnerd::rules::MAX_FILE_SIZE as usize {
            break;
        }
        text.push_str(&rule);
        n += 1;
    }
    std::fs::write(rules.join("many.toml"), text).unwrap();
    let o = run(dir.path(), &["check", rules.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.max_rss_kib < RSS_LIMIT_KIB,
        "{n} rules: peak RSS {} KiB is over {RSS_LIMIT_KIB} KiB",
        o.max_rss_kib
    );
    std::fs::write(
        rules.join("many.toml"),
        "[[rule]]\nname=\"r\"\n[rule.match]\ncomm=\"x\"\n[rule.place]\ncpus=\"8192\"\n",
    )
    .unwrap();
    let o = run(dir.path(), &["check", rules.to_str().unwrap()]);
    assert_clear_error(
        &o,
        3,
        "many.toml:6:6: invalid CPU list token \"8192\": CPU id too large",
    );
}

#[test]
fn an_error_says_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().unwrap();
    for args in [
        vec!["plan", "--matrix", missing, "--count", "2"],
        vec!["fleet", missing, missing, missing],
    ] {
        let o = run(dir.path(), &args);
        assert_clear_error(&o, 1, missing);
        assert_eq!(
            o.stderr.matches("No such file or directory").count(),
            1,
            "pinnerd {args:?} says its cause more than once: {}",
            o.stderr
        );
    }
}

/// An 8-CPU matrix in the binary form with one statistics record (its last 32 bytes),
/// and where its cells start.
fn small_binary() -> (Vec<u8>, usize) {
    let mut m =
        pinnerd::matrix::LatencyMatrix::from_fn((0..8).collect(), |i, j| 10.0 + (i + j) as f64);
    m.stats.push(pinnerd::matrix::PairStats {
        a: 0,
        b: 1,
        p10_ns: 10.0,
        median_ns: 11.0,
        p90_ns: 12.0,
        samples: 3,
        discarded: 0,
        round_trips: 100,
        inferred: false,
    });
    let mut bytes = Vec::new();
    m.write_binary(&mut bytes).unwrap();
    let cells_at = bytes.len() - 4 * 28 - 32;
    (bytes, cells_at)
}

/// A binary matrix file with the magic line and `header` (JSON) and `rest` after it.
fn binary_with_header(header: &str, rest: &[u8]) -> Vec<u8> {
    let mut bytes = format!("pinnerd-matrix-bin 1\n{header}\n").into_bytes();
    bytes.extend_from_slice(rest);
    bytes
}

/// Every flaw of a binary matrix file is refused with the file and the byte where it
/// is, the way a text file's errors name its line and column.
#[test]
fn a_bad_binary_matrix_file_is_refused_naming_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.bin");
    let (good, cells_at) = small_binary();
    let len = good.len();
    let record_at = len - 32;
    let truncated = good[..len - 10].to_vec();
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"\n\n\n");
    let mut stranger = good.clone();
    stranger[record_at..record_at + 2].copy_from_slice(&42u16.to_le_bytes());
    let mut version = good.clone();
    version[19] = b'2';
    let mut magic = good.clone();
    magic[17] = b'm';
    let cpus: Vec<String> = (0..8193).map(|c| c.to_string()).collect();
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            truncated,
            format!(
                "m.bin: byte {cells_at}: the file is {} bytes; its header (8 CPUs: 28 cells, \
                 1 records) says {len}",
                len - 10
            ),
        ),
        (
            trailing,
            format!(
                "m.bin: byte {cells_at}: the file is {} bytes; its header (8 CPUs: 28 cells, \
                 1 records) says {len}",
                len + 3
            ),
        ),
        (
            stranger,
            format!(
                "m.bin: byte {record_at}: statistics record 0: the pair (42, 1) is not a pair \
                 of `cpus`"
            ),
        ),
        (
            binary_with_header(r#"{"cpus":[0,1,1],"records":0}"#, &[0; 12]),
            "m.bin: byte 21: header: CPU 1 is listed twice in `cpus`".into(),
        ),
        (
            binary_with_header(
                &format!(r#"{{"cpus":[{}],"records":0}}"#, cpus.join(",")),
                &[],
            ),
            "header: `cpus`: more than 8192 entries, the most accepted".into(),
        ),
        (
            binary_with_header(r#"{"cpus":[0,9000],"records":0}"#, &[0; 4]),
            "header: `cpus`: CPU 9000 is over the largest CPU id 8191".into(),
        ),
        (
            binary_with_header(r#"{"cpus":[0,1],"records":2}"#, &[0; 4]),
            "m.bin: byte 21: header: 2 statistics records for 2 CPUs, which have 1 pairs".into(),
        ),
        (
            version,
            "m.bin: byte 19: version \"2\" is not one this pinnerd reads (it reads version 1)"
                .into(),
        ),
        // No magic: read as CSV, which the cells' bytes are not.
        (magic, "m.bin: refused: not valid UTF-8".into()),
    ];
    std::fs::write(&m, &good).unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "2", "--matrix", m.to_str().unwrap()],
    );
    assert_eq!(o.code, 0, "the file unharmed plans: {}", o.stderr);
    for (bytes, said) in cases {
        std::fs::write(&m, &bytes).unwrap();
        let o = run(
            dir.path(),
            &["plan", "--count", "1", "--matrix", m.to_str().unwrap()],
        );
        assert_clear_error(&o, 1, &said);
    }
}

/// A header claiming 8,192 CPUs (33.5 M cells, 134 MB) in a file of a few kilobytes is
/// refused by the size its header implies, before a cell is allocated (the cells in
/// memory would take 1 GiB, ten times the memory limit).
#[test]
fn a_binary_header_claiming_8192_cpus_in_a_tiny_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.bin");
    let cpus: Vec<String> = (0..8192).map(|c| c.to_string()).collect();
    let header = format!(r#"{{"cpus":[{}],"records":0}}"#, cpus.join(","));
    let bytes = binary_with_header(&header, &[0; 4096]);
    std::fs::write(&m, &bytes).unwrap();
    let o = run(
        dir.path(),
        &["plan", "--count", "1", "--matrix", m.to_str().unwrap()],
    );
    let cells_at = bytes.len() - 4096;
    let expected = cells_at + 4 * 33_550_336;
    assert_clear_error(
        &o,
        1,
        &format!(
            "m.bin: byte {cells_at}: the file is {} bytes; its header (8192 CPUs: 33550336 \
             cells, 0 records) says {expected}",
            bytes.len()
        ),
    );
}
