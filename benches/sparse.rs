//! Sparse measurement on every usable published matrix of at least 32 CPUs and on a
//! 512-CPU machine made from one, through the simulated measurer: pairs measured,
//! cells within 10%, domains, compact plans and the modelled time. Prints the table
//! `benches/README.md` records. `cargo bench --bench sparse [-- [--seeds A-B] NAME…]`
//! (release; NAME picks matrices by part of their name, `--seeds` other seeds than 1–3);
//! under `cargo test` it runs one small matrix only.

mod sparse_eval;

use sparse_eval::{score, tiled_512, usable};

const SEEDS: [u64; 3] = [1, 2, 3];
const NOISE: f64 = 0.02;

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    // `--each`: one line per seed as well, after the table's line.
    let each = std::env::args().any(|a| a == "--each");
    // `cargo bench --bench sparse -- NAME…`: only the matrices whose name holds one.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds: Vec<u64> = SEEDS.to_vec();
    if let Some(k) = args.iter().position(|a| a == "--seeds") {
        let range = args.get(k + 1).expect("--seeds A-B");
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b): (u64, u64) = (
            a.parse().expect("--seeds A-B: A a number"),
            b.parse().expect("--seeds A-B: B a number"),
        );
        seeds = (a..=b).collect();
    }
    let only: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(k, a)| !a.starts_with("--") && (*k == 0 || args[k - 1] != "--seeds"))
        .map(|(_, a)| a.clone())
        .collect();
    let mut files = usable(32);
    if quick {
        files.truncate(1);
    } else {
        files.push(("tiled 2×EPYC 7742 (2×128 cores, SMT)".into(), tiled_512()));
    }
    if !only.is_empty() {
        files.retain(|(name, _)| only.iter().any(|o| name.contains(o.as_str())));
    }
    println!("| matrix | CPUs | pairs measured (min–max of {} seeds) | cells within 10% (worst) | domains equal | compact K=2/4/8 worst ratio | modelled time (max) |", seeds.len());
    println!("|---|---|---|---|---|---|---|");
    for (name, m) in &files {
        let scores: Vec<_> = seeds.iter().map(|&s| score(m, NOISE, s)).collect();
        let share: Vec<f64> = scores.iter().map(|s| s.share()).collect();
        let lo = share.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = share.iter().copied().fold(0.0, f64::max);
        let within = scores
            .iter()
            .map(|s| s.within_10)
            .fold(f64::INFINITY, f64::min);
        let domains = scores.iter().filter(|s| s.domains_equal).count();
        let plans = scores.iter().map(|s| s.worst_plan()).fold(0.0, f64::max);
        let t = scores.iter().map(|s| s.modelled).max().unwrap_or_default();
        let pairs: Vec<String> = scores
            .iter()
            .map(|s| s.pairs_measured.to_string())
            .collect();
        println!(
            "| {} | {} | {} of {} ({:.1}–{:.1}%) | {:.1}% | {}/{} | {:.3} | {:.1} s |",
            name.trim_end_matches(".csv"),
            m.len(),
            pairs.join(", "),
            scores[0].pairs_total,
            lo * 100.0,
            hi * 100.0,
            within * 100.0,
            domains,
            scores.len(),
            plans,
            t.as_secs_f64()
        );
        if each {
            for (s, sc) in seeds.iter().zip(&scores) {
                println!(
                    "    seed {s}: {}, domains {}",
                    sc.summary(),
                    if sc.domains_equal { "equal" } else { "differ" }
                );
            }
        }
    }
}
