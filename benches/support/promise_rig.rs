//! The promise rig: the real `pinnerd daemon` on a private, system-like `dbus-daemon`,
//! real workload processes and the real kernel, driven through the three situations the
//! README promises to survive:
//!
//! - **hotplug**: a workload pinned by a rule to the last CPU; that CPU goes offline (the
//!   kernel widens the masks) and comes back; the time from the `online` write returning
//!   to every thread being on the rule's CPU again;
//! - **crash**: the daemon is killed with SIGKILL, the rule is changed and a new matching
//!   process starts while no daemon runs, the daemon is started again; the time from its
//!   `READY=1` to every thread of both processes being where the rule says;
//! - **flood**: an unprivileged caller (uid 65534, via `setpriv`) sends every read method
//!   as fast as it can on several connections while root reads `State` every 5 ms; the
//!   latency of root's reads.
//!
//! One implementation for both users: `benches/promises.rs` measures with it and prints
//! the figures (recorded in benches/README.md); `tests/it/promises.rs` asserts the
//! outcomes with generous bounds. The rig re-executes the binary it runs in for the
//! workload and the flood client ([`serve_role_if_asked`] must be reached early in that
//! binary); `self_args` are the arguments that get there.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::daemon_rig::{system_like, Bus, Daemon};

const NAME: &str = "org.pinnerd.Pinnerd1";
const PATH: &str = "/org/pinnerd/Pinnerd1";
const IFACE: &str = "org.pinnerd.Pinnerd1";
const ROLE_ENV: &str = "PINNERD_RIG_ROLE";

/// The CPU the hotplug round takes offline: the last online one (never CPU 0, which
/// Linux on x86 does not offline).
pub fn hotplug_cpu() -> u32 {
    let online = online();
    let last = *online.last().expect("no online CPU");
    assert!(last > 0, "a single-CPU machine cannot offline a CPU");
    last
}

/// The online CPUs, from sysfs.
pub fn online() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("read online");
    parse_list(text.trim())
}

fn parse_list(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// Runs the role this process was started for, if any, and exits; returns otherwise.
pub fn serve_role_if_asked() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("workload") => workload_main(),
        Ok("flood") => flood_main(),
        _ => {}
    }
}

/// The directories and files of one daemon instance (kept across restarts).
pub struct Dirs {
    pub root: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["rules", "state", "runtime"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        std::fs::set_permissions(
            root.path().join("rules"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        // A short measurement that runs even on a busy machine; nothing periodic.
        std::fs::write(
            root.path().join("settings.toml"),
            "[measure]\nbudget = \"1s\"\nidle-threshold = 1.0\ndrift-probe = \"off\"\ninterval = \"off\"\n",
        )
        .unwrap();
        Dirs { root }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Writes the rule file `rig.toml`: threads of processes named `comm` on `cpus`.
    pub fn write_rule(&self, comm: &str, cpus: &str) {
        let tmp = self.path(".rig.toml.tmp");
        std::fs::write(
            &tmp,
            format!("[[rule]]\nname = \"rig\"\n[rule.match]\ncomm = \"{comm}\"\n[rule.place]\ncpus = \"{cpus}\"\n"),
        )
        .unwrap();
        std::fs::rename(&tmp, self.path("rules/rig.toml")).unwrap();
    }
}

/// A process named `comm` with threads that wake every 10 ms; it exits when its stdin closes.
pub struct Workload {
    pub pid: i32,
    child: Child,
    _stdin: ChildStdin,
    _link: PathBuf,
}

impl Workload {
    /// Starts `self_exe self_args` through a symlink named `comm` (so that is its comm),
    /// with `threads` threads besides the main one.
    pub fn spawn(dir: &Path, comm: &str, threads: usize, self_args: &[&str]) -> Workload {
        assert!(
            comm.len() <= 15,
            "comm {comm:?} longer than the kernel keeps"
        );
        let link = dir.join(comm);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &link).unwrap();
        let mut child = Command::new(&link)
            .args(self_args)
            .env(ROLE_ENV, "workload")
            .env("PINNERD_RIG_THREADS", threads.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn workload");
        let stdin = child.stdin.take().unwrap();
        let pid = read_tagged(child.stdout.take().unwrap(), "ready ")
            .parse()
            .unwrap();
        Workload {
            pid,
            child,
            _stdin: stdin,
            _link: link,
        }
    }

    /// The affinity of every thread, as the kernel reports it (threads that vanish
    /// while being read are left out).
    pub fn masks(&self) -> Vec<Vec<u32>> {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return Vec::new();
        };
        dir.filter_map(|e| {
            let tid = e.ok()?.file_name();
            let status = std::fs::read_to_string(format!(
                "/proc/{}/task/{}/status",
                self.pid,
                tid.to_str()?
            ))
            .ok()?;
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))?;
            Some(parse_list(line.split_once(':')?.1.trim()))
        })
        .collect()
    }

    /// True when every thread is on exactly `want`.
    pub fn all_on(&self, want: &[u32]) -> bool {
        let m = self.masks();
        !m.is_empty() && m.iter().all(|x| x == want)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads lines until one contains `tag`; returns what follows it (libtest may have
/// printed its own words on the same line).
fn read_tagged(out: ChildStdout, tag: &str) -> String {
    let mut r = BufReader::new(out);
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "the child exited before printing {tag:?}"
        );
        if let Some(i) = line.find(tag) {
            // Keep the pipe open (and drained) for the child's lifetime.
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = r.read_to_end(&mut sink);
            });
            return line[i + tag.len()..].trim().to_string();
        }
    }
}

fn workload_main() -> ! {
    let n: usize = std::env::var("PINNERD_RIG_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..n {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("rig-worker".into())
            .spawn(move || {
                tx.send(()).unwrap();
                // Waking up now and then is what makes the kernel move a thread off
                // an offline CPU (a thread that never wakes keeps its mask).
                loop {
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
            .unwrap();
    }
    drop(tx);
    assert_eq!(rx.iter().take(n).count(), n);
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", std::process::id()).unwrap();
    out.flush().unwrap();
    // Until the rig goes away.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0)
}

/// Polls every millisecond until `done` holds; returns how long it took from `since`,
/// or None at `timeout`.
pub fn time_until(
    since: Instant,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Option<Duration> {
    loop {
        if done() {
            return Some(since.elapsed());
        }
        if since.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Each thread of `pid`: its comm and where it sleeps (`wchan`), for failure reports.
pub fn thread_states(pid: u32) -> String {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "gone".into();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let p = e.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        out.push(format!(
            "{} {} {}",
            e.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan").trim()
        ));
    }
    out.join(", ")
}

/// Sets a CPU online or offline through sysfs.
pub fn set_online(cpu: u32, on: bool) -> std::io::Result<()> {
    std::fs::write(
        format!("/sys/devices/system/cpu/cpu{cpu}/online"),
        if on { "1" } else { "0" },
    )
}

/// Brings the CPU back online when dropped — also when a round panics.
pub struct OnlineGuard(pub u32);

impl Drop for OnlineGuard {
    fn drop(&mut self) {
        for _ in 0..50 {
            if set_online(self.0, true).is_ok() && online().contains(&self.0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("CPU {} could not be brought back online", self.0);
    }
}

/// One hotplug round's outcome.
#[derive(Debug, Clone, Copy)]
pub struct HotplugRound {
    /// While the CPU was offline, the kernel moved threads off it (their masks no longer
    /// the rule's): the round tested something.
    pub widened: bool,
    /// From the `online` write returning to every thread on the rule's CPU again.
    pub re_pinned: Option<Duration>,
}

/// `rounds` hotplug rounds on one daemon; a workload with `threads` threads pinned to
/// [`hotplug_cpu`]. Each round: offline, wait `offline_for`, online, time the re-pin.
pub fn hotplug(
    rounds: usize,
    threads: usize,
    offline_for: Duration,
    self_args: &[&str],
) -> Vec<HotplugRound> {
    let cpu = hotplug_cpu();
    let bus = Bus::start(&system_like());
    let dirs = Dirs::new();
    dirs.write_rule("rig-hot", &cpu.to_string());
    let w = Workload::spawn(dirs.root.path(), "rig-hot", threads, self_args);
    let mut d = Daemon::spawn(&bus, dirs.root.path(), "pinnerd=info");
    d.wait_ready(Duration::from_secs(60));
    let want = vec![cpu];
    assert!(
        time_until(Instant::now(), Duration::from_secs(30), || w.all_on(&want)).is_some(),
        "the workload was never pinned; log:\n{}",
        d.log()
    );
    let mut out = Vec::new();
    for _ in 0..rounds {
        let guard = OnlineGuard(cpu);
        set_online(cpu, false).expect("offline the CPU");
        // The threads that wake are moved (their masks widened); the main thread,
        // asleep in a read, keeps its mask until it wakes.
        let widened = time_until(Instant::now(), Duration::from_secs(5), || {
            w.masks().iter().any(|x| *x != want)
        })
        .is_some();
        std::thread::sleep(offline_for);
        set_online(cpu, true).expect("online the CPU");
        let t0 = Instant::now();
        drop(guard);
        let re_pinned = time_until(t0, Duration::from_secs(10), || w.all_on(&want));
        if re_pinned.is_none() {
            eprintln!(
                "hotplug: not re-pinned; masks {:?}; daemon threads {}; daemon log:\n{}",
                w.masks(),
                thread_states(d.child.id()),
                d.log()
            );
        }
        out.push(HotplugRound { widened, re_pinned });
        // Let the daemon settle (it re-reads the machine after a hotplug).
        std::thread::sleep(Duration::from_millis(500));
    }
    d.stop();
    out
}

/// One crash round's outcome.
#[derive(Debug, Clone, Copy)]
pub struct CrashRound {
    /// Spawn of the new daemon to its `READY=1`.
    pub start_to_ready: Duration,
    /// `READY=1` to every thread of both workloads on the rule's (new) CPU.
    pub ready_to_right: Option<Duration>,
}

/// `rounds` crash rounds. A workload with `threads` threads is pinned by the rule; each
/// round kills the daemon with SIGKILL, moves the rule to the other CPU, starts a new
/// matching process (unpinned) and starts the daemon again.
pub fn crash(rounds: usize, threads: usize, self_args: &[&str]) -> Vec<CrashRound> {
    let cpus = online();
    let (a, b) = (cpus[0], *cpus.last().unwrap());
    assert_ne!(a, b, "needs two CPUs");
    let bus = Bus::start(&system_like());
    let dirs = Dirs::new();
    dirs.write_rule("rig-crash", &a.to_string());
    let old = Workload::spawn(dirs.root.path(), "rig-crash", threads, self_args);
    let mut d = Daemon::spawn(&bus, dirs.root.path(), "pinnerd=info");
    d.wait_ready(Duration::from_secs(60));
    assert!(
        time_until(Instant::now(), Duration::from_secs(30), || old.all_on(&[a])).is_some(),
        "the workload was never pinned; log:\n{}",
        d.log()
    );
    let mut out = Vec::new();
    let mut target = a;
    for _ in 0..rounds {
        // The journal is written at most every 50 ms after process events.
        std::thread::sleep(Duration::from_millis(200));
        d.kill9();
        target = if target == a { b } else { a };
        dirs.write_rule("rig-crash", &target.to_string());
        let new = Workload::spawn(dirs.root.path(), "rig-crash", threads, self_args);
        let t0 = Instant::now();
        d = Daemon::spawn(&bus, dirs.root.path(), "pinnerd=info");
        let ready = d.wait_ready(Duration::from_secs(60));
        let start_to_ready = ready - t0;
        let want = [target];
        let ready_to_right = time_until(ready, Duration::from_secs(10), || {
            old.all_on(&want) && new.all_on(&want)
        });
        out.push(CrashRound {
            start_to_ready,
            ready_to_right,
        });
    }
    d.stop();
    out
}

/// What a flood left behind.
#[derive(Debug, Clone)]
pub struct Flood {
    /// Root's `Get State` round trips during the flood.
    pub root_reads: Vec<Duration>,
    /// Root's reads that failed.
    pub root_errors: usize,
    /// Calls the flood client made that were answered, and that were refused (errors).
    pub flood_ok: u64,
    pub flood_refused: u64,
    /// Per method, `NAME:answered/sent`.
    pub flood_per_method: String,
    /// The daemon was still running after the flood.
    pub daemon_alive: bool,
}

/// An unprivileged flood (uid 65534 via `setpriv`) of `secs` seconds against a daemon
/// that manages one workload, while root reads `State` every 5 ms.
pub fn flood(secs: u64, self_args: &[&str]) -> Flood {
    let bus = Bus::start(&system_like());
    let dirs = Dirs::new();
    let cpu = *online().last().unwrap();
    dirs.write_rule("rig-flood", &cpu.to_string());
    let w = Workload::spawn(dirs.root.path(), "rig-flood", 2, self_args);
    let mut d = Daemon::spawn(&bus, dirs.root.path(), "pinnerd=info");
    d.wait_ready(Duration::from_secs(60));
    assert!(
        time_until(Instant::now(), Duration::from_secs(30), || w.all_on(&[cpu])).is_some(),
        "the workload was never pinned; log:\n{}",
        d.log()
    );
    let mut client = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(self_args)
        .env(ROLE_ENV, "flood")
        .env("PINNERD_RIG_ADDRESS", &bus.address)
        .env("PINNERD_RIG_SECS", secs.to_string())
        .env("PINNERD_RIG_PID", w.pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("setpriv the flood client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (root_reads, root_errors) = rt.block_on(async {
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .build()
            .await
            .expect("root connects");
        // Reads start once the flood is under way, and stop before it ends.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let end = Instant::now() + Duration::from_secs(secs.saturating_sub(1).max(1));
        let (mut lat, mut errors) = (Vec::new(), 0);
        while Instant::now() < end {
            let t = Instant::now();
            match get_state(&conn).await {
                Ok(()) => lat.push(t.elapsed()),
                Err(_) => errors += 1,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (lat, errors)
    });
    let mut text = String::new();
    client
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let st = client.wait().unwrap();
    assert!(st.success(), "flood client failed ({st}): {text}");
    let counts = text
        .lines()
        .find_map(|l| l.find("flood ").map(|i| l[i + 6..].to_string()))
        .unwrap_or_else(|| panic!("no counts from the flood client: {text}"));
    let field = |k: &str| -> u64 {
        counts
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {counts}"))
    };
    let daemon_alive = d.child.try_wait().unwrap().is_none();
    let result = Flood {
        root_reads,
        root_errors,
        flood_ok: field("ok"),
        flood_refused: field("refused"),
        flood_per_method: counts
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("answered/sent="))
            .unwrap_or_default()
            .to_string(),
        daemon_alive,
    };
    if daemon_alive {
        d.stop();
    }
    result
}

async fn get_state(conn: &zbus::Connection) -> zbus::Result<()> {
    let reply = conn
        .call_method(
            Some(NAME),
            PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(IFACE, "State"),
        )
        .await?;
    let _: zbus::OwnedVariant = reply.body().deserialize()?;
    Ok(())
}

/// What the flood client calls, in turn (the last is `Plan` with a 4 KiB string).
const FLOOD_METHODS: [&str; 7] = [
    "Get",
    "GetAll",
    "Explain",
    "Plan",
    "ListManaged",
    "GetMatrix",
    "PlanLong",
];

/// The flood client: `CONNS` connections, each with `IN_FLIGHT` callers looping over
/// every method a non-root user may call, until the time is up. Prints its counts.
fn flood_main() -> ! {
    const CONNS: usize = 4;
    const IN_FLIGHT: usize = 8;
    let address = std::env::var("PINNERD_RIG_ADDRESS").expect("address");
    let secs: u64 = std::env::var("PINNERD_RIG_SECS").unwrap().parse().unwrap();
    let pid: u32 = std::env::var("PINNERD_RIG_PID").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ok, refused) = rt.block_on(async move {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..CONNS {
            let conn = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .expect("the flood client connects");
            for k in 0..IN_FLIGHT {
                let conn = conn.clone();
                set.spawn(async move {
                    let (mut ok, mut refused) = ([0u64; 7], [0u64; 7]);
                    let mut i = k;
                    while Instant::now() < end {
                        let r = match i % 7 {
                            0 => {
                                conn.call_method(
                                    Some(NAME),
                                    PATH,
                                    Some("org.freedesktop.DBus.Properties"),
                                    "Get",
                                    &(IFACE, "State"),
                                )
                                .await
                            }
                            1 => {
                                conn.call_method(
                                    Some(NAME),
                                    PATH,
                                    Some("org.freedesktop.DBus.Properties"),
                                    "GetAll",
                                    &(IFACE,),
                                )
                                .await
                            }
                            2 => {
                                conn.call_method(Some(NAME), PATH, Some(IFACE), "Explain", &(pid,))
                                    .await
                            }
                            3 => {
                                conn.call_method(
                                    Some(NAME),
                                    PATH,
                                    Some(IFACE),
                                    "Plan",
                                    &(1u32, "compact", "allow"),
                                )
                                .await
                            }
                            4 => {
                                conn.call_method(Some(NAME), PATH, Some(IFACE), "ListManaged", &())
                                    .await
                            }
                            5 => {
                                conn.call_method(Some(NAME), PATH, Some(IFACE), "GetMatrix", &())
                                    .await
                            }
                            _ => {
                                // A long string, refused by its length.
                                let long = "x".repeat(4096);
                                conn.call_method(
                                    Some(NAME),
                                    PATH,
                                    Some(IFACE),
                                    "Plan",
                                    &(1u32, long.as_str(), "allow"),
                                )
                                .await
                            }
                        };
                        match r {
                            Ok(_) => ok[i % 7] += 1,
                            Err(_) => refused[i % 7] += 1,
                        }
                        i += 1;
                    }
                    (ok, refused)
                });
            }
        }
        let (mut ok, mut refused) = ([0u64; 7], [0u64; 7]);
        while let Some(r) = set.join_next().await {
            let (o, r) = r.expect("a flood task");
            for m in 0..7 {
                ok[m] += o[m];
                refused[m] += r[m];
            }
        }
        (ok, refused)
    });
    let per_method: Vec<String> = FLOOD_METHODS
        .iter()
        .enumerate()
        .map(|(m, name)| format!("{name}:{}/{}", ok[m], ok[m] + refused[m]))
        .collect();
    let (ok, refused): (u64, u64) = (ok.iter().sum(), refused.iter().sum());
    let mut out = std::io::stdout();
    writeln!(
        out,
        "flood ok={ok} refused={refused} answered/sent={}",
        per_method.join(",")
    )
    .unwrap();
    out.flush().unwrap();
    std::process::exit(0)
}

/// p50/p90/p99/max of `v`, in ms.
pub fn percentiles(v: &[Duration]) -> [f64; 4] {
    assert!(!v.is_empty(), "no samples");
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| pinnerd::stats::percentile_sorted(&ms, q);
    [p(0.5), p(0.9), p(0.99), ms[ms.len() - 1]]
}
