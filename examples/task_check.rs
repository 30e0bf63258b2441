//! The cost of the PID-reuse guard on threads: "is task TID a thread of process PID
//! now?", asked before each new thread is pinned. Compares the kernel's answer
//! (`tgkill(PID, TID, 0)`, what `ProcFs::is_task_of` uses on the live system) with the
//! procfs lookup (`lstat /proc/PID/task/TID`, what it uses on any other root).
//!
//! `cargo run --release --example task_check [N]` (N checks per round, default 200,000).

use std::time::Instant;

use pinnerd::sysroot::SysRoot;
use pinnerd::watch::{ProcFs, ProcSource};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let pid = std::process::id() as i32;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let live = ProcFs::default();
    // The same /proc under another name, so the procfs lookup is taken.
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink("/proc", dir.path().join("proc")).expect("symlink");
    let lookup = ProcFs::new(SysRoot::machine(dir.path()));
    assert!(live.is_task_of(pid, tid) && lookup.is_task_of(pid, tid));
    for round in 1..=3 {
        let t0 = Instant::now();
        for _ in 0..n {
            std::hint::black_box(live.is_task_of(pid, std::hint::black_box(tid)));
        }
        let kernel = t0.elapsed().as_nanos() as f64 / n as f64;
        let t0 = Instant::now();
        for _ in 0..n {
            std::hint::black_box(lookup.is_task_of(pid, std::hint::black_box(tid)));
        }
        let procfs = t0.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: tgkill {kernel:.0} ns/check, procfs lookup {procfs:.0} ns/check");
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average: {}", load.trim());
}
