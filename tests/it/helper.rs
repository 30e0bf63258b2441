//! A child process that makes threads on request, for the affinity and watch tests.
//!
//! It is this test binary itself, re-executed through a symlink (so its comm is the
//! symlink's name, as for any exec) and told by an environment variable to run
//! [`serve`] instead of tests. Commands on stdin, one per line:
//! `spawn N [NAME]` → `tids T1 T2 …` (N new parked threads, named NAME);
//! `brief` → `tids T` (a thread that has already ended); `end T` → `tids T` (parked
//! thread T has ended); `rename T N NAME…` → `renamed` (task T took the names in turn,
//! N renames in all); `exit` → the process exits. At start it prints `ready PID`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use pinnerd::CpuSet;

const HELPER_ENV: &str = "PINNERD_IT_HELPER";

/// The test that is the helper's entry point. Run normally, it checks the helper
/// itself: a child starts, makes threads, reports their tids and exits.
#[test]
fn helper_entry() {
    if std::env::var_os(HELPER_ENV).is_some() {
        serve();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-helper-self");
    let tids = h.spawn_threads(3, Some("pt-worker"));
    assert_eq!(tids.len(), 3);
    for t in &tids {
        let comm = std::fs::read_to_string(format!("/proc/{}/task/{t}/comm", h.pid)).unwrap();
        assert_eq!(comm.trim(), "pt-worker");
    }
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", h.pid)).unwrap();
    assert_eq!(comm.trim(), "pt-helper-self");
    h.exit();
}

fn serve() -> ! {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", std::process::id()).unwrap();
    out.flush().unwrap();
    // Each parked thread by tid: its stop flag and handle (`end TID`).
    let mut parked: std::collections::HashMap<i32, (Arc<AtomicBool>, std::thread::JoinHandle<()>)> =
        std::collections::HashMap::new();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["spawn", n, rest @ ..] => {
                let n: usize = n.parse().unwrap();
                let (tx, rx) = mpsc::channel();
                let mut pending = Vec::new();
                for i in 0..n {
                    let tx = tx.clone();
                    let mut b = std::thread::Builder::new();
                    if let Some(name) = rest.first() {
                        b = b.name(name.to_string());
                    }
                    let stop = Arc::new(AtomicBool::new(false));
                    let stopped = Arc::clone(&stop);
                    let handle = b
                        .spawn(move || {
                            // SAFETY: gettid has no preconditions.
                            let tid = unsafe { libc::gettid() };
                            tx.send((i, tid)).unwrap();
                            while !stopped.load(Ordering::Acquire) {
                                std::thread::park();
                            }
                        })
                        .unwrap();
                    pending.push(Some((stop, handle)));
                }
                drop(tx);
                let mut tids = Vec::new();
                for (i, tid) in rx.iter().take(n) {
                    parked.insert(tid, pending[i].take().unwrap());
                    tids.push(tid.to_string());
                }
                writeln!(out, "tids {}", tids.join(" ")).unwrap();
                out.flush().unwrap();
            }
            ["churn", rate, secs, life_ms, name, cpus] => {
                let (rate, secs, life_ms): (u64, u64, u64) = (
                    rate.parse().unwrap(),
                    secs.parse().unwrap(),
                    life_ms.parse().unwrap(),
                );
                let want: pinnerd::CpuSet = cpus.parse().unwrap();
                let name = name.to_string();
                let (churned, missed) = churn(rate, secs, life_ms, &name, &want);
                writeln!(out, "churned {churned} missed {missed}").unwrap();
                out.flush().unwrap();
            }
            ["end", tid] => {
                // The thread ends; reported once it has exited.
                let tid: i32 = tid.parse().unwrap();
                let (stop, handle) = parked.remove(&tid).expect("a parked thread");
                stop.store(true, Ordering::Release);
                handle.thread().unpark();
                handle.join().unwrap();
                writeln!(out, "tids {tid}").unwrap();
                out.flush().unwrap();
            }
            ["brief"] => {
                // A thread that ends at once; its tid is reported after it has exited.
                let t = std::thread::spawn(|| {
                    // SAFETY: gettid has no preconditions.
                    unsafe { libc::gettid() }
                });
                let tid = t.join().unwrap();
                writeln!(out, "tids {tid}").unwrap();
                out.flush().unwrap();
            }
            ["rename", tid, n, names @ ..] if !names.is_empty() => {
                // Task TID (of this process) takes the names in turn, N renames in all.
                let path = format!("/proc/self/task/{tid}/comm");
                for i in 0..n.parse::<usize>().unwrap() {
                    std::fs::write(&path, names[i % names.len()]).unwrap();
                }
                writeln!(out, "renamed").unwrap();
                out.flush().unwrap();
            }
            ["exit"] => std::process::exit(0),
            _ => {}
        }
    }
    std::process::exit(0)
}

/// `rate` threads a second for `secs`, each named `name` and living `life_ms`, polling
/// its own mask every 5 ms. Returns how many ran and how many never saw `want` while
/// alive (missed: not late, never).
fn churn(rate: u64, secs: u64, life_ms: u64, name: &str, want: &pinnerd::CpuSet) -> (u64, u64) {
    use pinnerd::affinity::AffinityOps;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let missed = Arc::new(AtomicU64::new(0));
    let mut handles = std::collections::VecDeque::new();
    let start = Instant::now();
    let mut spawned = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while spawned < due {
            let (missed, want) = (missed.clone(), want.clone());
            let h = std::thread::Builder::new()
                .name(name.to_string())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let born = Instant::now();
                    let ops = pinnerd::affinity::SystemOps::default();
                    // SAFETY: gettid has no preconditions.
                    let me = unsafe { libc::gettid() };
                    let mut seen = false;
                    while born.elapsed() < Duration::from_millis(life_ms) {
                        let mine = ops.get_affinity(me).expect("our own mask");
                        if mine == want {
                            seen = true;
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    if !seen {
                        missed.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(
                        Duration::from_millis(life_ms).saturating_sub(born.elapsed()),
                    );
                })
                .unwrap();
            handles.push_back(h);
            spawned += 1;
        }
        while handles.front().is_some_and(|h| h.is_finished()) {
            handles.pop_front().unwrap().join().unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for h in handles {
        h.join().unwrap();
    }
    (spawned, missed.load(Ordering::Relaxed))
}

/// A running helper.
pub struct Helper {
    pub pid: i32,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _link: PathBuf,
}

impl Helper {
    /// Starts a helper whose comm is `comm` (at most 15 bytes), via a symlink in `dir`.
    pub fn spawn(dir: &std::path::Path, comm: &str) -> Helper {
        assert!(
            comm.len() <= 15,
            "comm {comm:?} is longer than the kernel keeps"
        );
        let link = dir.join(comm);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &link).unwrap();
        let mut child = Command::new(&link)
            .args([
                "--exact",
                "helper::helper_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let pid = loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "helper died before ready"
            );
            // libtest may have printed `test NAME ... ` on the same line.
            if let Some(i) = line.find("ready ") {
                break line[i + 6..].trim().parse().unwrap();
            }
        };
        Helper {
            pid,
            child,
            stdin,
            stdout,
            _link: link,
        }
    }

    /// Makes `n` new threads (named `name`) and returns their tids.
    pub fn spawn_threads(&mut self, n: usize, name: Option<&str>) -> Vec<i32> {
        writeln!(self.stdin, "spawn {n} {}", name.unwrap_or("")).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "helper died");
            if let Some(i) = line.find("tids") {
                return line[i + 4..]
                    .split_whitespace()
                    .map(|x| x.parse().unwrap())
                    .collect();
            }
        }
    }

    /// Starts thread churn in the helper (see [`churn`]); [`Helper::churn_result`]
    /// waits for its end.
    pub fn start_churn(&mut self, rate: u64, secs: u64, life_ms: u64, name: &str, want: &CpuSet) {
        writeln!(self.stdin, "churn {rate} {secs} {life_ms} {name} {want}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// `(threads run, threads never pinned)` of the churn started last.
    pub fn churn_result(&mut self) -> (u64, u64) {
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "helper died");
            if let Some(i) = line.find("churned ") {
                let w: Vec<u64> = line[i..]
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                return (w[0], w[1]);
            }
        }
    }

    /// Ends parked thread `tid` (from [`Helper::spawn_threads`]); returns once it has.
    pub fn end_thread(&mut self, tid: i32) {
        writeln!(self.stdin, "end {tid}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "helper died");
            if line.contains("tids") {
                return;
            }
        }
    }

    /// Makes a thread that ends at once and returns its (now free) tid.
    pub fn brief_thread(&mut self) -> i32 {
        writeln!(self.stdin, "brief").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "helper died");
            if let Some(i) = line.find("tids") {
                return line[i + 4..].trim().parse().unwrap();
            }
        }
    }

    /// Renames task `tid` of the helper `n` times, taking `names` in turn; returns once
    /// it has.
    pub fn rename(&mut self, tid: i32, n: usize, names: &[&str]) {
        writeln!(self.stdin, "rename {tid} {n} {}", names.join(" ")).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "helper died");
            if line.contains("renamed") {
                return;
            }
        }
    }

    /// Every thread id of the helper now.
    pub fn tids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        v.sort_unstable();
        v
    }

    /// Asks the helper to exit and reaps it.
    pub fn exit(mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }

    /// Kills and reaps the helper.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run of the pinnerd binary left: its status and its output as text.
#[derive(Debug)]
pub struct Run {
    pub status: std::process::ExitStatus,
    /// The exit code; -1 when a signal ended it.
    pub code: i32,
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// The pinnerd binary under test: the one place tests name it.
pub const PINNERD: &str = env!("CARGO_BIN_EXE_pinnerd");

/// The pinnerd binary as a `Command`, for a test that sets its environment, stdin or
/// arguments that are not text; [`pinnerd`] runs one and waits.
pub fn pinnerd_command() -> Command {
    Command::new(PINNERD)
}

/// Runs the pinnerd binary with `args` and waits for it.
pub fn pinnerd(args: &[&str]) -> Run {
    let out = pinnerd_command().args(args).output().expect("run pinnerd");
    Run {
        status: out.status,
        code: out.status.code().unwrap_or(-1),
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
