//! A child process that makes threads on request, for the affinity and watch tests.
//!
//! It is this test binary itself, re-executed through a symlink (so its comm is the
//! symlink's name, as for any exec) and told by an environment variable to run
//! [`serve`] instead of tests. Commands on stdin, one per line:
//! `spawn N [NAME]` → `tids T1 T2 …` (N new parked threads, named NAME);
//! `exit` → the process exits. At start it prints `ready PID`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;

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
    let mut keep = Vec::new();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["spawn", n, rest @ ..] => {
                let n: usize = n.parse().unwrap();
                let (tx, rx) = mpsc::channel();
                for _ in 0..n {
                    let tx = tx.clone();
                    let mut b = std::thread::Builder::new();
                    if let Some(name) = rest.first() {
                        b = b.name(name.to_string());
                    }
                    keep.push(
                        b.spawn(move || {
                            // SAFETY: gettid has no preconditions.
                            let tid = unsafe { libc::gettid() };
                            tx.send(tid).unwrap();
                            loop {
                                std::thread::park();
                            }
                        })
                        .unwrap(),
                    );
                }
                drop(tx);
                let tids: Vec<String> = rx.iter().take(n).map(|t| t.to_string()).collect();
                writeln!(out, "tids {}", tids.join(" ")).unwrap();
                out.flush().unwrap();
            }
            ["exit"] => std::process::exit(0),
            _ => {}
        }
    }
    std::process::exit(0)
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

/// Runs the pinnerd binary with `args` and waits for it: the one way tests run it.
pub fn pinnerd(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_pinnerd"))
        .args(args)
        .output()
        .expect("run pinnerd");
    Run {
        status: out.status,
        code: out.status.code().unwrap_or(-1),
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
