//! Load harness for the pinning pipeline: the real proc connector, the real manager and
//! the real kernel, driven by a loop shaped like the daemon's (one thread reads the
//! connector and hands each batch to the manager), or by the daemon itself.
//!
//! ```text
//! cargo build --release --example pin_storm
//! target/release/examples/pin_storm storm [SECS] [EXECS_PER_S] [THREADS_PER_S]
//! target/release/examples/pin_storm storm-external [SECS] [EXECS_PER_S] [THREADS_PER_S]
//! target/release/examples/pin_storm rules
//! target/release/examples/pin_storm idle [SECS]
//! target/release/examples/pin_storm rescan [PROCESSES]
//! ```
//!
//! `storm` (root, ≥ 2 CPUs): rule `storm-exec` pins processes named `storm-exec` to CPU
//! 0; rule `storm-threads` pins the process `storm-thr` to CPU 0 and its threads named
//! `storm-w` to CPU 1. The harness execs `storm-exec` (a symlink to `sleep`) at the
//! given rate, while one `storm-thr` child creates short-lived `storm-w` threads at the
//! given rate; every such thread starts on CPU 0 (inherited), names itself, so the
//! manager must move it. Latencies run from the kernel's EXEC/FORK event timestamp to
//! the end of the batch (`Manager::handle_batch`, as the daemon drives it) in which the
//! manager's set+read-back for that task was done: an upper bound. Missed pins: an
//! exec'd process (it sleeps 1 s) not on CPU 0 900 ms after spawn (checked at 100 ms,
//! then every millisecond: one moved only after 100 ms is late); a worker thread not on
//! CPU 1 5 s after it started running with its name (it checks itself 30 ms after that
//! and, when not yet moved, keeps checking every millisecond: a thread first seen on
//! CPU 1 after 30 ms is counted late, with the latest such time printed).
//!
//! `storm-external`: the same load and the same task-side checks, with no loop of its
//! own: a running daemon with the harness's rules (`pin_storm rules`) does the pinning.
//!
//! `idle`: the loop with the connector and a 30 s rescan, no load: CPU and RSS.
//!
//! `rescan`: starts PROCESSES sleeping processes and times full rescans: the cheap pass
//! (no rule matches) and the steady state with every one of them managed.

#![allow(
    clippy::too_many_lines,
    reason = "the limit is on the engine in src/; a harness reads as one scenario"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinnerd::affinity::{AffinityOps, Outcome, SystemOps};
use pinnerd::cpuset::CpuSet;
use pinnerd::manager::{Change, Input, Manager, ManagerConfig};
use pinnerd::plan::{Cpus, Plan};
use pinnerd::rules::{compile_text, LoadPolicy, RuleSet};
use pinnerd::sysroot::SysRoot;
use pinnerd::watch::{Connector, ProcFs, ProcMsg};

const RULES: &str = r#"
[[rule]]
name = "storm-exec"
[rule.match]
comm = "storm-exec"
[rule.place]
cpus = "0"

[[rule]]
name = "storm-threads"
[rule.match]
comm = "storm-thr"
[rule.place]
cpus = "0"
[[rule.threads]]
comm = "storm-w"
cpus = "1"
"#;

fn rules(text: &str) -> RuleSet {
    RuleSet::new(
        compile_text(
            std::path::Path::new("storm.toml"),
            text,
            &LoadPolicy::unchecked(),
        )
        .expect("harness rules"),
    )
}

/// A worker thread not on its CPU this long after it started running was missed (it
/// waits that long for the pin; one on its CPU only after 30 ms is late).
const NEVER: Duration = Duration::from_secs(5);

/// Messages handed to the manager at once, at most (the daemon's reader uses 1024 too).
const BATCH: usize = 1024;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: zeroed rusage is a valid out-value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string(SysRoot::default().proc_path("self/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn on_cpus(online: CpuSet) -> Cpus {
    Cpus {
        online,
        reserved: CpuSet::new(),
    }
}

/// New rules, planned on the online CPUs without latency domains (explicit `cpus` only).
fn new_rules(rules: RuleSet) -> Input {
    Input::RulesChanged(Plan::new(&rules, &on_cpus(online()), None))
}

fn online() -> CpuSet {
    std::fs::read_to_string(SysRoot::default().sys_path("devices/system/cpu/online"))
        .expect("online CPUs")
        .trim()
        .parse()
        .expect("online CPU list")
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1e6
}

#[derive(Default)]
struct LoopStats {
    exec_lat: Vec<u64>,
    thread_lat: Vec<u64>,
    /// From the worker's COMM event (its rename, which makes it match) to its pin.
    rename_lat: Vec<u64>,
    events: u64,
    overruns: u64,
    rescans: u64,
    rescan_max: Duration,
    /// The longest thread pin in each second of the run.
    worst_by_second: Vec<u64>,
    loop_cpu: Duration,
    max_rss_kib: u64,
}

/// The daemon's loop, minus D-Bus: events → manager, a periodic rescan.
fn run_loop(stop: Arc<AtomicBool>, rules: RuleSet, rescan_every: Duration) -> LoopStats {
    let mut conn = Connector::open(Duration::from_secs(5), 64 << 20).expect("proc connector");
    conn.set_nonblocking().unwrap();
    let mut mgr = Manager::new(
        Arc::new(SystemOps::default()),
        Arc::new(ProcFs::default()),
        on_cpus(online()),
        ManagerConfig::default(),
    );
    mgr.handle(new_rules(rules));
    if std::env::var_os("PIN_STORM_FIFO").is_some() {
        // What systemd/pinnerd.service gives the daemon's loop: CPUSchedulingPolicy=fifo,
        // CPUSchedulingPriority=1, CPUSchedulingResetOnFork=yes.
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: valid sched_param; 0 is the calling thread.
        let rc = unsafe {
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &p)
        };
        assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
    }
    if let Some(n) = std::env::var("PIN_STORM_NICE")
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    {
        // What `Nice=` would give the daemon (per thread on Linux).
        // SAFETY: plain setpriority on the calling thread's tid.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, n) };
        assert_eq!(rc, 0, "setpriority: {}", std::io::Error::last_os_error());
    }
    let cpu0 = cpu_time(libc::RUSAGE_THREAD);
    let started = Instant::now();
    let mut stats = LoopStats::default();
    let mut exec_ts: HashMap<i32, u64> = HashMap::new();
    let mut fork_ts: HashMap<i32, u64> = HashMap::new();
    let mut comm_ts: HashMap<i32, u64> = HashMap::new();
    let mut buf = Vec::with_capacity(BATCH);
    let mut exited: Vec<(i32, i32)> = Vec::new();
    let mut next_rescan = Instant::now() + rescan_every;
    let mut last_rss = Instant::now();
    let one: CpuSet = "1".parse().unwrap();
    let zero: CpuSet = "0".parse().unwrap();
    while !stop.load(Ordering::Relaxed) {
        let timeout = next_rescan
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        if conn.wait(timeout) {
            // Drain what is queued (up to a batch), as the daemon's reader thread does,
            // then hand the batch to the manager at once.
            buf.clear();
            while buf.len() < BATCH {
                match conn.read_timed(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            let mut msgs = Vec::with_capacity(buf.len());
            for (msg, ts) in buf.drain(..) {
                stats.events += 1;
                match &msg {
                    ProcMsg::Exec { pid } => {
                        exec_ts.insert(*pid, ts);
                    }
                    ProcMsg::NewThread { tid, .. } => {
                        fork_ts.insert(*tid, ts);
                    }
                    ProcMsg::Comm { pid, tid, .. } if pid != tid => {
                        comm_ts.insert(*tid, ts);
                    }
                    ProcMsg::Exit { pid, tid } => {
                        // Kept until the batch is handled: the pin may come first.
                        exited.push((*pid, *tid));
                    }
                    ProcMsg::Overrun => stats.overruns += 1,
                    _ => {}
                }
                msgs.push(msg);
            }
            for c in mgr.handle_batch(msgs) {
                if let Change::Pinned {
                    pid,
                    tid,
                    outcome: Outcome::Applied { effective },
                    ..
                } = c
                {
                    let now = monotonic_ns();
                    if tid == pid && effective == zero {
                        if let Some(t0) = exec_ts.remove(&pid) {
                            stats.exec_lat.push(now.saturating_sub(t0));
                        }
                    } else if effective == one {
                        if let Some(t0) = fork_ts.remove(&tid) {
                            let lat = now.saturating_sub(t0);
                            stats.thread_lat.push(lat);
                            if let Some(t1) = comm_ts.remove(&tid) {
                                stats.rename_lat.push(now.saturating_sub(t1));
                            }
                            let sec = started.elapsed().as_secs() as usize;
                            if stats.worst_by_second.len() <= sec {
                                stats.worst_by_second.resize(sec + 1, 0);
                            }
                            stats.worst_by_second[sec] = stats.worst_by_second[sec].max(lat);
                        }
                    }
                }
            }
            for (pid, tid) in exited.drain(..) {
                fork_ts.remove(&tid);
                comm_ts.remove(&tid);
                if pid == tid {
                    exec_ts.remove(&pid);
                }
            }
            let _ = mgr.flush();
        }
        if Instant::now() >= next_rescan {
            let t = Instant::now();
            mgr.handle(Input::Rescan);
            stats.rescan_max = stats.rescan_max.max(t.elapsed());
            stats.rescans += 1;
            next_rescan = Instant::now() + rescan_every;
        }
        if last_rss.elapsed() >= Duration::from_secs(1) {
            stats.max_rss_kib = stats.max_rss_kib.max(rss_kib());
            last_rss = Instant::now();
        }
    }
    stats.max_rss_kib = stats.max_rss_kib.max(rss_kib());
    stats.loop_cpu = cpu_time(libc::RUSAGE_THREAD) - cpu0;
    let _ = mgr.shutdown();
    stats
}

/// `storm-thr` child: makes `rate` threads per second for `secs`; each checks that it
/// was moved to CPU 1 within 30 ms of its birth.
fn child_threads(rate: u64, secs: u64) {
    let missed = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let late_max_ms = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let ops = SystemOps::default();
    // Wait until the manager has the process on CPU 0.
    let zero: CpuSet = "0".parse().unwrap();
    let me = pinnerd::affinity::own_tid();
    let t0 = Instant::now();
    while ops.get_affinity(me).ok() != Some(zero.clone()) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    let start = Instant::now();
    let mut spawned = 0u64;
    let per_tick = (rate / 1000).max(1);
    while start.elapsed() < Duration::from_secs(secs) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while spawned < due {
            for _ in 0..per_tick.min(due - spawned) {
                let missed = missed.clone();
                let late = late.clone();
                let late_max_ms = late_max_ms.clone();
                let done = done.clone();
                let r = std::thread::Builder::new()
                    .name("storm-w".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        // Running, with its name set (std names a thread before running
                        // its closure): from here the daemon can tell it is a worker.
                        let born = Instant::now();
                        std::thread::sleep(
                            Duration::from_millis(30).saturating_sub(born.elapsed()),
                        );
                        let me = pinnerd::affinity::own_tid();
                        let one: CpuSet = "1".parse().unwrap();
                        let ops = SystemOps::default();
                        if ops.get_affinity(me).ok() != Some(one.clone()) {
                            // Late: keep living (so the pin can still happen) and
                            // time how late; never pinned after NEVER = missed.
                            late.fetch_add(1, Ordering::Relaxed);
                            let mut pinned = false;
                            while born.elapsed() < NEVER {
                                std::thread::sleep(Duration::from_millis(1));
                                if ops.get_affinity(me).ok() == Some(one.clone()) {
                                    pinned = true;
                                    break;
                                }
                            }
                            let ms = born.elapsed().as_millis() as u64;
                            late_max_ms.fetch_max(ms, Ordering::Relaxed);
                            if !pinned {
                                missed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                if r.is_ok() {
                    spawned += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    while done.load(Ordering::Relaxed) < spawned {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "spawned {spawned} missed {} late {} latest {}",
        missed.load(Ordering::Relaxed),
        late.load(Ordering::Relaxed),
        late_max_ms.load(Ordering::Relaxed)
    );
}

fn symlink(dir: &std::path::Path, name: &str, target: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    std::os::unix::fs::symlink(target, &p).unwrap();
    p
}

/// `external`: a running daemon does the pinning (with [`RULES`] installed); only what
/// the tasks see of it is reported.
fn storm(secs: u64, execs: u64, threads: u64, external: bool) {
    let dir = std::env::temp_dir().join(format!("pin-storm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sleep_bin = which("sleep");
    let exec_link = symlink(&dir, "storm-exec", &sleep_bin);
    let thr_link = symlink(&dir, "storm-thr", &std::env::current_exe().unwrap());

    let stop = Arc::new(AtomicBool::new(false));
    let loop_stop = stop.clone();
    let lp = (!external).then(|| {
        std::thread::Builder::new()
            .name("pinnerd-loop".into())
            .spawn(move || run_loop(loop_stop, rules(RULES), Duration::from_secs(30)))
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(500));

    let mut thr = Command::new(&thr_link)
        .args(["child-threads", &threads.to_string(), &secs.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut thr_out = BufReader::new(thr.stdout.take().unwrap());
    let mut line = String::new();
    thr_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "thread child did not start");

    let zero: CpuSet = "0".parse().unwrap();
    let ops = SystemOps::default();
    let start = Instant::now();
    let mut spawned = 0u64;
    let mut exec_missed = 0u64;
    let mut exec_late = 0u64;
    let mut exec_latest = Duration::ZERO;
    let mut pending: std::collections::VecDeque<(Instant, Child)> = Default::default();
    let mut late: Vec<(Instant, Child)> = Vec::new();
    let mut reap: Vec<Child> = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) || !pending.is_empty() || !late.is_empty() {
        let due = (start.elapsed().as_secs_f64() * execs as f64) as u64;
        if start.elapsed() < Duration::from_secs(secs) && spawned < due {
            let c = Command::new(&exec_link).arg("1").spawn().unwrap();
            pending.push_back((Instant::now(), c));
            spawned += 1;
        }
        while let Some((t, _)) = pending.front() {
            if t.elapsed() < Duration::from_millis(100) {
                break;
            }
            let (t, c) = pending.pop_front().unwrap();
            if ops.get_affinity(c.id() as i32).ok() == Some(zero.clone()) {
                reap.push(c);
            } else {
                exec_late += 1;
                late.push((t, c));
            }
        }
        // A late one still alive (it sleeps 1 s) may yet be pinned; after 900 ms it
        // was missed.
        let mut i = 0;
        while i < late.len() {
            let (t, c) = &late[i];
            let pinned = ops.get_affinity(c.id() as i32).ok() == Some(zero.clone());
            if pinned || t.elapsed() >= Duration::from_millis(900) {
                if pinned {
                    exec_latest = exec_latest.max(t.elapsed());
                } else {
                    exec_missed += 1;
                }
                reap.push(late.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        reap.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        std::thread::sleep(Duration::from_millis(1));
    }
    for mut c in reap {
        let _ = c.wait();
    }
    line.clear();
    thr_out.read_line(&mut line).unwrap();
    let _ = thr.wait();
    stop.store(true, Ordering::Relaxed);
    let mut st = lp.map(|lp| lp.join().unwrap()).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);

    let words: Vec<&str> = line.split_whitespace().collect();
    let n = |w: &str| w.parse::<u64>().unwrap();
    let (t_spawned, t_missed, t_late, t_latest) = match words.as_slice() {
        ["spawned", s, "missed", m, "late", l, "latest", x] => (n(s), n(m), n(l), n(x)),
        _ => panic!("thread child said {line:?}"),
    };
    println!(
        "storm {secs} s, {execs} execs/s, {threads} threads/s on {} CPUs{}",
        online().len(),
        if external {
            ", pinned by a running daemon"
        } else {
            ""
        }
    );
    if external {
        println!(
            "  execs: {spawned} spawned, late (>100 ms) {exec_late} (latest pinned at {} ms), missed {exec_missed}",
            exec_latest.as_millis()
        );
        println!(
            "  threads: {t_spawned} spawned ({:.0}/s), late (>30 ms) {t_late} (latest pinned at {t_latest} ms), missed {t_missed}",
            t_spawned as f64 / secs as f64
        );
        return;
    }
    println!(
        "  execs: {spawned} spawned, {} pins timed, late (>100 ms) {exec_late} (latest pinned at {} ms), missed {exec_missed}; exec->pinned p50 {:.3} ms p99 {:.3} ms max {:.3} ms",
        st.exec_lat.len(),
        exec_latest.as_millis(),
        pct(&mut st.exec_lat, 0.5),
        pct(&mut st.exec_lat, 0.99),
        pct(&mut st.exec_lat, 1.0)
    );
    println!(
        "  threads: {t_spawned} spawned ({:.0}/s), {} pins timed, late (>30 ms) {t_late} (latest pinned at {t_latest} ms), missed {t_missed}; thread->pinned p50 {:.3} ms p99 {:.3} ms max {:.3} ms",
        t_spawned as f64 / secs as f64,
        st.thread_lat.len(),
        pct(&mut st.thread_lat, 0.5),
        pct(&mut st.thread_lat, 0.99),
        pct(&mut st.thread_lat, 1.0)
    );
    println!(
        "  of which rename->pinned (the thread named itself, then was moved): {} timed; p50 {:.3} ms p99 {:.3} ms max {:.3} ms",
        st.rename_lat.len(),
        pct(&mut st.rename_lat, 0.5),
        pct(&mut st.rename_lat, 0.99),
        pct(&mut st.rename_lat, 1.0)
    );
    let slow: Vec<String> = st
        .worst_by_second
        .iter()
        .enumerate()
        .filter(|(_, &ns)| ns > 30_000_000)
        .map(|(s, &ns)| format!("{s}s:{:.0}ms", ns as f64 / 1e6))
        .collect();
    if !slow.is_empty() {
        println!("  seconds with a thread pin over 30 ms: {}", slow.join(" "));
    }
    println!(
        "  loop: {} events, {} overruns, {} rescans (longest {:.1} ms), CPU {:.1} s ({:.1}% of a core), max RSS {:.1} MiB",
        st.events,
        st.overruns,
        st.rescans,
        st.rescan_max.as_secs_f64() * 1e3,
        st.loop_cpu.as_secs_f64(),
        100.0 * st.loop_cpu.as_secs_f64() / secs as f64,
        st.max_rss_kib as f64 / 1024.0
    );
}

fn idle(secs: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let loop_stop = stop.clone();
    let lp = std::thread::Builder::new()
        .name("pinnerd-loop".into())
        .spawn(move || run_loop(loop_stop, rules(RULES), Duration::from_secs(30)))
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let cpu0 = cpu_time(libc::RUSAGE_SELF);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = cpu_time(libc::RUSAGE_SELF) - cpu0;
    let wall = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let st = lp.join().unwrap();
    println!(
        "idle {:.0} s: process CPU {:.3} s = {:.3}% of a core; {} events seen, {} rescans; max RSS {:.1} MiB",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        st.events,
        st.rescans,
        st.max_rss_kib as f64 / 1024.0
    );
}

fn rescan(n: usize) {
    let sleep_bin = which("sleep");
    let mut kids = Vec::with_capacity(n);
    for _ in 0..n {
        kids.push(
            Command::new(&sleep_bin)
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawning sleepers"),
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let total = std::fs::read_dir(SysRoot::default().proc.clone())
        .unwrap()
        .filter(|e| {
            e.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|s| s.parse::<u32>().is_ok())
            })
        })
        .count();
    let mut mgr = Manager::new(
        Arc::new(SystemOps::default()),
        Arc::new(ProcFs::default()),
        on_cpus(online()),
        ManagerConfig::default(),
    );
    let time = |mgr: &mut Manager, runs: usize| -> Vec<u64> {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                mgr.handle(Input::Rescan);
                t.elapsed().as_micros() as u64
            })
            .collect()
    };
    mgr.handle(new_rules(rules(
        "[[rule]]\nname = \"none\"\n[rule.match]\ncomm = \"no-such-comm\"\n[rule.place]\ncpus = \"0\"\n",
    )));
    let mut cheap = time(&mut mgr, 5);
    let cpus = online().to_string();
    let t = Instant::now();
    mgr.handle(new_rules(rules(&format!(
        "[[rule]]\nname = \"all\"\n[rule.match]\ncomm = \"sleep\"\n[rule.place]\ncpus = \"{cpus}\"\n"
    ))));
    let first = t.elapsed();
    let managed = mgr.managed_processes();
    let mut steady = time(&mut mgr, 5);
    let _ = mgr.shutdown();
    for mut k in kids {
        let _ = k.kill();
        let _ = k.wait();
    }
    cheap.sort_unstable();
    steady.sort_unstable();
    println!("rescan with {total} processes in /proc ({n} sleepers started)");
    println!(
        "  no rule matches: median {:.1} ms (min {:.1}, max {:.1}) over 5 rescans",
        cheap[2] as f64 / 1e3,
        cheap[0] as f64 / 1e3,
        cheap[4] as f64 / 1e3
    );
    println!(
        "  a rule matching the {managed} sleepers: first contact (match + pin all) {:.1} ms; steady rescan median {:.1} ms (min {:.1}, max {:.1})",
        first.as_secs_f64() * 1e3,
        steady[2] as f64 / 1e3,
        steady[0] as f64 / 1e3,
        steady[4] as f64 / 1e3
    );
}

fn which(name: &str) -> std::path::PathBuf {
    for d in ["/usr/bin", "/bin"] {
        let p = std::path::Path::new(d).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} not found");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("storm") => storm(num(1, 120), num(2, 100), num(3, 10_000), false),
        Some("storm-external") => storm(num(1, 120), num(2, 100), num(3, 10_000), true),
        Some("rules") => print!("{RULES}"),
        Some("idle") => idle(num(1, 60)),
        Some("rescan") => rescan(num(1, 10_000) as usize),
        Some("child-threads") => child_threads(num(1, 10_000), num(2, 120)),
        _ => {
            eprintln!(
                "usage: pin_storm storm|storm-external [SECS] [EXECS/S] [THREADS/S] | rules | idle [SECS] | rescan [N]"
            );
            std::process::exit(2);
        }
    }
}
