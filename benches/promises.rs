//! Promise harness (not criterion): the hotplug, crash and D-Bus flood promises of the
//! reliability page (docs/reliability.md), measured on the real daemon with
//! `benches/support/promise_rig.rs` — the same
//! rig `tests/it/promises.rs` asserts outcomes with.
//!
//! Run as root (it offlines a CPU and kills daemons):
//! `cargo bench --bench promises -- [--hotplug N] [--crash N] [--flood SECS] [--threads T]`
//! (defaults 20 rounds, 20 rounds, 20 s, 8 threads). Figures go in benches/README.md.

#[allow(dead_code)] // the promise harness uses part of the daemon rig
#[path = "support/daemon_rig.rs"]
mod daemon_rig;
#[path = "support/promise_rig.rs"]
mod rig;

use std::time::Duration;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn summary(name: &str, v: &[Duration]) {
    if v.is_empty() {
        println!("{name}: no samples");
        return;
    }
    let [p50, p90, p99, max] = rig::percentiles(v);
    println!(
        "{name}: n={} p50={p50:.1} ms p90={p90:.1} ms p99={p99:.1} ms max={max:.1} ms",
        v.len()
    );
}

fn main() {
    rig::serve_role_if_asked();
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench targets without `--bench`.
        println!("promise harness: run it with `cargo bench --bench promises`");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the promise harness needs root (it offlines a CPU); skipped");
        return;
    }
    // The role's arguments: none but what marks a bench run (ignored by the roles).
    let self_args: &[&str] = &["--bench"];
    let threads = arg("--threads", 8);

    let rounds = arg("--hotplug", 20);
    if rounds > 0 {
        println!(
            "hotplug: {rounds} rounds, CPU {} offline 500 ms each, {threads} threads; load {}",
            rig::hotplug_cpu(),
            loadavg()
        );
        let r = rig::hotplug(rounds, threads, Duration::from_millis(500), self_args);
        for (i, x) in r.iter().enumerate() {
            println!(
                "  round {i}: widened while offline {}, re-pinned after {}",
                x.widened,
                x.re_pinned.map(ms).unwrap_or_else(|| "NEVER (10 s)".into())
            );
        }
        let ok: Vec<Duration> = r.iter().filter_map(|x| x.re_pinned).collect();
        summary("hotplug: online write → every thread on its CPU", &ok);
        println!(
            "  missed (not re-pinned within 10 s): {}; load {}",
            r.len() - ok.len(),
            loadavg()
        );
    }

    let rounds = arg("--crash", 20);
    if rounds > 0 {
        println!("crash: {rounds} rounds of kill -9, rule moved, new process, restart; 2 × {} threads; load {}", threads + 1, loadavg());
        let r = rig::crash(rounds, threads, self_args);
        for (i, x) in r.iter().enumerate() {
            println!(
                "  round {i}: start → READY {}, READY → every task right {}",
                ms(x.start_to_ready),
                x.ready_to_right
                    .map(ms)
                    .unwrap_or_else(|| "NEVER (10 s)".into())
            );
        }
        summary(
            "crash: spawn → READY=1",
            &r.iter().map(|x| x.start_to_ready).collect::<Vec<_>>(),
        );
        let ok: Vec<Duration> = r.iter().filter_map(|x| x.ready_to_right).collect();
        summary("crash: READY=1 → every managed task right", &ok);
        println!(
            "  missed (not right within 10 s of READY): {}; load {}",
            r.len() - ok.len(),
            loadavg()
        );
    }

    let secs = arg("--flood", 20) as u64;
    if secs > 0 {
        println!("flood: {secs} s from uid 65534; load {}", loadavg());
        let f = rig::flood(secs, self_args);
        summary("flood: root's Get State", &f.root_reads);
        println!(
            "  root errors {}; flood calls answered {}, refused {} ({:.0} calls/s); daemon alive {}; load {}",
            f.root_errors,
            f.flood_ok,
            f.flood_refused,
            (f.flood_ok + f.flood_refused) as f64 / secs as f64,
            f.daemon_alive,
            loadavg()
        );
        println!("  answered/sent per method: {}", f.flood_per_method);
    }
}
