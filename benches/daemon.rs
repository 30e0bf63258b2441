//! Daemon harness (not criterion: it times a whole daemon on a private bus).
//!
//! 1. Startup to `READY=1` with a stored matrix: the daemon is started N times on a
//!    state directory that already holds this machine's matrix; the time from spawn to
//!    the `READY=1` datagram on our `NOTIFY_SOCKET` is recorded.
//! 2. Property reads while processes are exec'd: a rule matches `pb-exec`; a thread
//!    execs a copy of `true` under that name 100 times a second, while this process reads
//!    `State`, `ManagedProcesses` and `RuleErrors` over D-Bus (org.freedesktop.DBus.Properties
//!    Get, one round trip each) and records each read's latency.
//!
//! Run as root: `cargo bench --bench daemon` (`-- --reads 4000 --starts 20` to change the
//! sample sizes). Prints percentiles; the figures go in benches/README.md.

#[allow(dead_code)] // the harness uses part of the daemon rig
#[path = "support/daemon_rig.rs"]
mod daemon_rig;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_rig::{system_like, Bus, Daemon};

const NAME: &str = "org.pinnerd.Pinnerd1";
const PATH: &str = "/org/pinnerd/Pinnerd1";
/// The daemon's log level: warnings only, as in production.
const LOG: &str = "warn";
/// Longest wait for `READY=1`.
const READY_WITHIN: Duration = Duration::from_secs(60);

fn percentiles(name: &str, v: Vec<Duration>) {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| pinnerd::stats::percentile_sorted(&ms, q);
    println!(
        "{name}: n={} p50={:.3} ms p90={:.3} ms p99={:.3} ms max={:.3} ms",
        ms.len(),
        p(0.50),
        p(0.90),
        p(0.99),
        p(1.0)
    );
}

fn loadavg() -> String {
    std::fs::read_to_string(pinnerd::sysroot::SysRoot::default().proc_path("loadavg"))
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn get(conn: &zbus::Connection, prop: &str) -> zbus::Result<()> {
    let reply = conn
        .call_method(
            Some(NAME),
            PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(NAME, prop),
        )
        .await?;
    let _: zbus::OwnedVariant = reply.body().deserialize()?;
    Ok(())
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench targets without `--bench`: the harness
        // takes minutes, so it only runs under `cargo bench`.
        println!("daemon harness: run it with `cargo bench --bench daemon`");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the daemon harness needs root (it pins processes); skipped");
        return;
    }
    let starts = arg("--starts", 20);
    let reads = arg("--reads", 4000);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in ["rules", "state", "runtime"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    std::fs::write(
        dir.path().join("settings.toml"),
        "[measure]\nbudget = \"2s\"\nidle-threshold = 1.0\ndrift-probe = \"off\"\ninterval = \"off\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules/bench.toml"),
        "[[rule]]\nname = \"bench\"\n[rule.match]\ncomm = \"pb-exec\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    let bus = Bus::start(&system_like());

    // A stored matrix: let a first daemon measure and store it.
    let mut d = Daemon::spawn(&bus, dir.path(), LOG);
    d.wait_ready(READY_WITHIN);
    let end = Instant::now() + Duration::from_secs(120);
    while !dir.path().join("state/matrix.json").exists() {
        assert!(
            Instant::now() < end,
            "the first measurement did not finish; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    d.stop();

    // 1. Startup to READY with a stored matrix.
    let mut times = Vec::new();
    for _ in 0..starts {
        let t0 = Instant::now();
        let mut d = Daemon::spawn(&bus, dir.path(), LOG);
        times.push(d.wait_ready(READY_WITHIN) - t0);
        d.stop();
    }
    percentiles("startup to READY=1 (stored matrix)", times);

    // 2. Property reads: first without, then under 100 execs/s of a matching process.
    let mut d = Daemon::spawn(&bus, dir.path(), LOG);
    d.wait_ready(READY_WITHIN);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(async {
        zbus::connection::Builder::address(bus.address.as_str())
            .build()
            .await
            .unwrap()
    });
    let read_all = |n: usize| -> Vec<Duration> {
        rt.block_on(async {
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                let prop = ["State", "ManagedProcesses", "RuleErrors"][i % 3];
                let t = Instant::now();
                get(&conn, prop).await.unwrap();
                lat.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            lat
        })
    };
    println!("load average before: {}", loadavg());
    percentiles("property Get, no exec load", read_all(reads / 2));
    let exe = dir.path().join("pb-exec");
    std::fs::copy("/bin/true", &exe).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let execs = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, execs, exe) = (stop.clone(), execs.clone(), exe.clone());
        std::thread::spawn(move || {
            let period = Duration::from_millis(10);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let _ = Command::new(&exe).status();
                execs.fetch_add(1, Ordering::Relaxed);
                next += period;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
    };
    let t0 = Instant::now();
    let lat = read_all(reads);
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    println!(
        "exec load: {:.0} execs/s of a matching process over {secs:.1} s",
        execs.load(Ordering::Relaxed) as f64 / secs
    );
    percentiles("property Get under exec load", lat);
    println!("load average after: {}", loadavg());
    d.stop();
}
