//! The churn soak: the real daemon on a private bus, two minutes of processes and
//! threads coming and going, and the promises that hold it: no task that matches a
//! rule goes unpinned for its whole life (missed: never pinned while alive for a
//! second and more, not "late"), and the daemon's RSS and open descriptors after
//! minute 1 stay where they were at minute 1. Timings of the same load are in
//! `benches/README.md` (pin_storm); this test asserts outcomes only. It runs about
//! 110 s, so `make check` (CI) leaves it out of the main run and runs it once by
//! name: `cargo test --test it soak::`.

use std::collections::VecDeque;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pinnerd::affinity::{AffinityOps, SystemOps};
use pinnerd::CpuSet;

use super::daemon::{Bus, Daemon, Dirs, Policy};
use super::helper::Helper;

/// Each half of the soak churns this long, then lets every task end.
const HALF: Duration = Duration::from_secs(50);
/// Processes exec'd per second; each lives [`PROCESS_LIFE`].
const PROCESSES_PER_S: u64 = 20;
const PROCESS_LIFE: &str = "3";
/// A process not yet seen pinned is checked until this age; past it, never pinned.
const PROCESS_WATCH: Duration = Duration::from_millis(2_800);
/// Threads made per second in the churning process; each lives [`THREAD_LIFE_MS`].
const THREADS_PER_S: u64 = 200;
const THREAD_LIFE_MS: u64 = 3_000;

/// What the daemon holds, read from /proc.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    rss_kib: u64,
    fds: usize,
}

fn footprint(pid: u32) -> Footprint {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    Footprint { rss_kib, fds }
}

/// The daemon's footprint once it has seen every exit: after 3 s, the first one whose
/// descriptor count has stayed the same for 2 s (a daemon behind on a loaded machine
/// still holds the pidfds of processes that are gone), within 30 s. A descriptor that
/// leaked stays open, so a leak still shows.
fn settled(pid: u32) -> Footprint {
    std::thread::sleep(Duration::from_secs(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = footprint(pid);
    let mut since = Instant::now();
    while Instant::now() < deadline && since.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(250));
        let now = footprint(pid);
        if now.fds != last.fds {
            since = Instant::now();
        }
        last = now;
    }
    last
}

fn online_cpus() -> CpuSet {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[derive(Default, Debug)]
struct ProcessTally {
    spawned: u64,
    missed: u64,
}

/// Execs `soak-proc` (a `sleep`) at [`PROCESSES_PER_S`] for `dur` and checks each one
/// until it is seen on `want` or [`PROCESS_WATCH`] passes.
fn churn_processes(link: &std::path::Path, dur: Duration, want: &CpuSet) -> ProcessTally {
    let ops = SystemOps::default();
    let mut tally = ProcessTally::default();
    let mut watching: VecDeque<(Instant, Child)> = VecDeque::new();
    let mut done: Vec<Child> = Vec::new();
    let start = Instant::now();
    while start.elapsed() < dur || !watching.is_empty() {
        let due = (start.elapsed().as_secs_f64() * PROCESSES_PER_S as f64) as u64;
        while start.elapsed() < dur && tally.spawned < due {
            let c = Command::new(link).arg(PROCESS_LIFE).spawn().unwrap();
            watching.push_back((Instant::now(), c));
            tally.spawned += 1;
        }
        let mut still = VecDeque::new();
        for (born, c) in watching.drain(..) {
            if ops.get_affinity(c.id() as i32).ok().as_ref() == Some(want) {
                done.push(c);
            } else if born.elapsed() > PROCESS_WATCH {
                tally.missed += 1;
                done.push(c);
            } else {
                still.push_back((born, c));
            }
        }
        watching = still;
        done.retain_mut(|c| c.try_wait().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(10));
    }
    for mut c in done {
        c.wait().unwrap();
    }
    tally
}

/// About 110 s, so `make check` (what CI runs) keeps it out of the main run
/// (`-- --skip soak::`) and runs it once on its own, after the rest
/// (`cargo test --test it soak::`).
#[test]
fn churn_soak_misses_no_pin_and_keeps_rss_and_fds_flat() {
    let _cpus = super::cpus_stay_online();
    // No busy-spin test at the same time: the churn would throw their batches away.
    let _turn = super::one_spinner_at_a_time();
    let online = online_cpus();
    let first: CpuSet = std::iter::once(online.first().unwrap()).collect();
    let last: CpuSet = std::iter::once(online.last().unwrap()).collect();
    assert_ne!(first, last, "the soak needs two CPUs");

    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_rule(
        "10-soak.toml",
        &format!(
            "[[rule]]\nname = \"soak-proc\"\n[rule.match]\ncomm = \"soak-proc\"\n\
             [rule.place]\ncpus = \"{last}\"\n\n\
             [[rule]]\nname = \"soak-thr\"\n[rule.match]\ncomm = \"soak-thr\"\n\
             [rule.place]\ncpus = \"{first}\"\n[[rule.threads]]\ncomm = \"soak-w\"\ncpus = \"{last}\"\n"
        ),
    );
    let d = Daemon::start(&bus, &dirs);
    bus.wait_for("the connector subscribed", Duration::from_secs(30), || {
        d.log().contains("proc connector subscribed")
    });
    bus.wait_for("State ready", Duration::from_secs(120), || {
        bus.get("State") == "s \"ready\""
    });
    let pid = d.child.id();
    let link = dirs.root.path().join("soak-proc");
    std::os::unix::fs::symlink(
        std::path::Path::new("/bin/sleep").canonicalize().unwrap(),
        &link,
    )
    .unwrap();
    let mut thr = Helper::spawn(dirs.root.path(), "soak-thr");
    bus.wait_for(
        "the churning process pinned",
        Duration::from_secs(30),
        || SystemOps::default().get_affinity(thr.pid).ok().as_ref() == Some(&first),
    );

    // The peak while churning, for the record (pidfds come and go with the tasks).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let online = online.clone();
        std::thread::spawn(move || {
            let mut peak = footprint(pid);
            let mut layout_changed = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let f = footprint(pid);
                peak.rss_kib = peak.rss_kib.max(f.rss_kib);
                peak.fds = peak.fds.max(f.fds);
                // Tests in this binary that take a CPU offline wait for the soak, but
                // another process on the machine may not.
                let now = online_cpus();
                if now != online && layout_changed.is_none() {
                    layout_changed = Some(now);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (peak, layout_changed)
        })
    };
    let started = Instant::now();
    let mut quiet = Vec::new();
    let (mut processes, mut threads) = (ProcessTally::default(), (0u64, 0u64));
    for _half in 0..2 {
        thr.start_churn(
            THREADS_PER_S,
            HALF.as_secs(),
            THREAD_LIFE_MS,
            "soak-w",
            &last,
        );
        let p = churn_processes(&link, HALF, &last);
        let t = thr.churn_result();
        processes.spawned += p.spawned;
        processes.missed += p.missed;
        threads = (threads.0 + t.0, threads.1 + t.1);
        // Every churned task has ended; let the daemon see the exits.
        quiet.push(settled(pid));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (peak, layout_changed) = sampler.join().unwrap();
    let (minute_1, end) = (quiet[0], quiet[1]);
    eprintln!(
        "churn soak: {} processes ({} missed), {} threads ({} missed) in {:?}; \
         daemon at minute 1 {minute_1:?}, at the end {end:?}, peak while churning {peak:?}",
        processes.spawned,
        processes.missed,
        threads.0,
        threads.1,
        started.elapsed()
    );
    if let Some(now) = layout_changed {
        panic!(
            "the online CPUs changed from {online} to {now} during the soak: another \
             process took a CPU offline, so pins to it could not hold; run the soak alone"
        );
    }
    assert!(
        processes.spawned >= 2 * HALF.as_secs() * PROCESSES_PER_S * 9 / 10,
        "{processes:?}"
    );
    assert!(
        threads.0 >= 2 * HALF.as_secs() * THREADS_PER_S * 9 / 10,
        "{threads:?}"
    );
    assert_eq!(
        processes.missed,
        0,
        "processes never pinned; log:\n{}",
        d.log()
    );
    assert_eq!(threads.1, 0, "threads never pinned; log:\n{}", d.log());
    // Descriptors: one pidfd per managed process, so with every churned task gone the
    // count is back where it was.
    assert!(
        end.fds <= minute_1.fds + 1,
        "descriptors grew from {} to {}",
        minute_1.fds,
        end.fds
    );
    // Memory: flat within 10% (or 2 MiB, for a small daemon) from minute 1 to the end.
    let margin = (minute_1.rss_kib / 10).max(2048);
    assert!(
        end.rss_kib <= minute_1.rss_kib + margin,
        "RSS grew from {} KiB to {} KiB",
        minute_1.rss_kib,
        end.rss_kib
    );
    thr.exit();
    assert!(d.stop().success());
}
