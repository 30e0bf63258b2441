//! Measurement benchmarks: time to a full matrix (criterion), and with `cargo bench`
//! a report of run-to-run agreement, agreement with an independent ping-pong, and the
//! time model for 128/256/512 CPUs. Figures are written up in `benches/README.md`.
//!
//! Run: `cargo bench --bench measure`. Under `cargo test` (no `--bench`) each
//! benchmark runs once and the report is skipped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use pinnerd::measure::{self, schedule, MeasureConfig, Mode, Primitive};
use pinnerd::CpuSet;

fn two_cpus() -> (u32, u32) {
    let ids: Vec<u32> = measure::allowed_cpus().unwrap().iter().collect();
    assert!(ids.len() >= 2, "the measurement benchmarks need two CPUs");
    (ids[0], ids[1])
}

/// The default configuration on two CPUs, with the load guard off: this shared build
/// machine is never idle, and the guard's job (refusing) is not what is timed here.
fn config(mode: Mode) -> MeasureConfig {
    let (a, b) = two_cpus();
    let mut cfg = MeasureConfig::new([a, b].into_iter().collect::<CpuSet>());
    cfg.guard.min_idle = 0.0;
    cfg.mode = mode;
    cfg
}

fn bench_matrix(c: &mut Criterion) {
    let mut g = c.benchmark_group("measure");
    g.sample_size(10);
    g.bench_function("2-cpu matrix, default settings (serial, cas)", |b| {
        let cfg = config(Mode::Serial);
        b.iter(|| measure::run(&cfg, |_| {}).expect("measure"))
    });
    g.bench_function("2-cpu matrix, parallel rounds + serial check", |b| {
        let cfg = config(Mode::Rounds);
        b.iter(|| measure::run(&cfg, |_| {}).expect("measure"))
    });
    g.finish();
}

/// An independent ping-pong, written the plain way (as core-to-core-latency and c2clat
/// do): `pinnerd::measure::plain`, one-way = minimum / round trips / 2.
fn independent_ping_pong(a: u32, b: u32, samples: usize, round_trips: u64) -> f64 {
    measure::plain::min_one_way_ns(a, b, samples, round_trips, Duration::from_secs(60))
        .expect("plain ping-pong")
}

fn report() {
    let (a, b) = two_cpus();
    println!("\n## measurement report (CPUs {a} and {b})\n");

    // 1. Interleaved: engine figure vs independent ping-pong, five times each.
    println!("### engine vs independent ping-pong, interleaved (one-way ns)\n");
    println!("| round | engine (p10 of batches) | independent (min of 1000 × 100 RT) | ratio |");
    println!("|---|---|---|---|");
    let mut engine_all = Vec::new();
    let mut indep_all = Vec::new();
    for round in 1..=5 {
        // The engine's thread pinning runs in child threads; the independent one pins
        // this thread, so run it in a thread of its own.
        let m = measure::run(&config(Mode::Serial), |_| {}).expect("measure");
        let e = m.between(a, b).expect("figure");
        let i = std::thread::spawn(move || independent_ping_pong(a, b, 1000, 100))
            .join()
            .expect("ping-pong");
        println!("| {round} | {e:.1} | {i:.1} | {:.2} |", e / i);
        engine_all.push(e);
        indep_all.push(i);
    }
    let emin = engine_all.iter().copied().fold(f64::INFINITY, f64::min);
    let imin = indep_all.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "\nmin-based: engine {emin:.1} ns, independent {imin:.1} ns, engine/independent = {:.3} ({:+.1}%)\n",
        emin / imin,
        (emin / imin - 1.0) * 100.0
    );

    // 2. Five consecutive full runs (default settings): per-pair spread and what the
    // runs said about their own stability.
    println!("### five consecutive default runs\n");
    let mut figures = Vec::new();
    let mut times = Vec::new();
    let mut units = Vec::new();
    for run in 1..=5 {
        let t0 = Instant::now();
        let m = measure::run_detailed(&config(Mode::Serial), |_| {}).expect("measure");
        let took = t0.elapsed();
        let v = m.matrix.between(a, b).expect("figure");
        let unstable = m
            .matrix
            .warnings
            .iter()
            .filter(|w| !w.contains("virtual machine"))
            .count();
        println!(
            "run {run}: {a}↔{b} {v:.1} ns in {:.3} s, passes {:?}, {unstable} warning(s) besides the VM one{}",
            took.as_secs_f64(),
            m.report.pass_estimates[&(a, b)]
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>(),
            m.matrix
                .warnings
                .iter()
                .filter(|w| !w.contains("virtual machine"))
                .map(|w| format!("\n    - {w}"))
                .collect::<String>()
        );
        figures.push(v);
        times.push(took);
        units.push(m.report.mean_unit);
    }
    let lo = figures.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "\nspread over five runs: {lo:.1}–{hi:.1} ns = {:.1}% (target ≤ 10% on a stable host)",
        (hi / lo - 1.0) * 100.0
    );
    let tmax = times.iter().max().expect("five runs");
    println!("slowest 2-CPU run: {:.3} s\n", tmax.as_secs_f64());

    // 3. The model, from this machine's per-pair cost (median of the five runs: one
    // preempted run should not set it) and thread overhead.
    units.sort();
    let per_pair = units[units.len() / 2];
    let gate_cost = {
        let reps = 50u32;
        let t0 = Instant::now();
        for _ in 0..reps {
            let gate = Arc::new(measure::spin::Gate::default());
            let plan = measure::spin::PairPlan {
                initiator: a,
                responder: b,
                primitive: Primitive::Cas,
                first_touch: measure::FirstTouch::Initiator,
                warm: Duration::ZERO,
                batch: Duration::from_micros(20),
                stop: measure::StopRule::default(),
                deadline: Instant::now(),
                priority: measure::around::SpinPriority::Normal,
            };
            let t = measure::spin::spawn_pair(plan, gate.clone()).expect("spawn");
            measure::spin::abort(&gate);
            t.join().expect("join");
        }
        t0.elapsed() / reps
    };
    let cfg = config(Mode::Serial);
    let costs = schedule::Costs {
        per_pair,
        per_round_pair: gate_cost,
        fixed: cfg.warmup + cfg.guard.sample,
        passes: cfg.passes,
        serial_check: cfg.serial_check,
    };
    println!(
        "### time model (per pair-pass {per_pair:.2?}, median of {:.2?}; thread start+join per pair {gate_cost:.2?}; {} passes)\n",
        units,
        cfg.passes
    );
    println!("| CPUs | pairs | serial | parallel rounds |");
    println!("|---|---|---|---|");
    for n in [2usize, 16, 128, 256, 512] {
        let s = schedule::model(n, false, &costs);
        let r = schedule::model(n, true, &costs);
        println!(
            "| {n} | {} | {} | {} |",
            n * (n - 1) / 2,
            human(s),
            human(r)
        );
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_matrix(&mut c);
    c.final_summary();
    if std::env::args().any(|a| a == "--bench") {
        report();
    } else {
        // Test mode: check the independent ping-pong works at all.
        let (a, b) = two_cpus();
        let v = std::thread::spawn(move || independent_ping_pong(a, b, 10, 10))
            .join()
            .expect("ping-pong");
        assert!(v > 0.0 && v.is_finite(), "{v}");
    }
}
