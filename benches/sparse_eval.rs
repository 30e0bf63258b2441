//! How good a sparse reconstruction is against the matrix it was simulated from: the
//! share of pairs measured, cells within 10%, domains, and compact plans. Shared by
//! `benches/sparse.rs` (the table) and `tests/it/sparse.rs` (the CI checks).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pinnerd::domains::Domains;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::measure::simulate::Simulated;
use pinnerd::measure::sparse::{run_sparse, SparseConfig, SparseOutcome};
use pinnerd::placement::{place, Policy, Request};
use pinnerd::CpuSet;

/// `tests/fixtures/c2c-data/nviennot`.
pub fn data_dir() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot"
    ))
    .to_owned()
}

/// Files INDEX.md calls unusable (macOS ignores affinity; console text, not a CSV).
pub const EXCLUDED: &[&str] = &["m1.ultra.16pp4e.csv", "IBM_PPC970_2.2_at_1.8GHz_x2.txt"];

/// Every usable published matrix of at least `min` CPUs, by file name.
pub fn usable(min: usize) -> Vec<(String, LatencyMatrix)> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir())
        .expect("tests/fixtures/c2c-data/nviennot is part of the repository")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !EXCLUDED.contains(&n.as_str()))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let m = LatencyMatrix::load(&data_dir().join(&n)).unwrap_or_else(|e| panic!("{e}"));
            (n, m)
        })
        .filter(|(_, m)| m.len() >= min)
        .collect()
}

/// A 2-socket, 128-core-per-socket SMT machine (512 CPUs) made from the dual EPYC 7742
/// matrix (2 × 64 cores, 256 CPUs) used twice, as in `benches/placement.rs`: inside a
/// copy the real cells, across copies 300 ns plus a tenth of the file's cell. Numbered
/// as Linux numbers such a machine: the first threads of both copies (0–255), then
/// their SMT siblings (256–511), so CPU `x`'s sibling is `x + 256`.
pub fn tiled_512() -> LatencyMatrix {
    let base = LatencyMatrix::load(&data_dir().join("Dual_AMD_EPYC_7742_64-Core_Processor.csv"))
        .unwrap_or_else(|e| panic!("{e}"));
    let n = base.len();
    // (copy, CPU of the file) of a CPU of the 512-CPU machine.
    let orig = |x: usize| {
        let sibling = x >= n;
        let first = if sibling { x - n } else { x };
        (
            first / (n / 2),
            first % (n / 2) + if sibling { n / 2 } else { 0 },
        )
    };
    LatencyMatrix::from_fn((0..2 * n as u32).collect(), |i, j| {
        let ((ti, ci), (tj, cj)) = (orig(i), orig(j));
        let cell = base.at(ci, cj).unwrap_or(0.0);
        if ti == tj {
            cell
        } else {
            300.0 + cell / 10.0
        }
    })
}

/// What one sparse run achieved.
#[derive(Debug, Clone)]
pub struct Score {
    pub n: usize,
    pub pairs_measured: usize,
    pub pairs_total: usize,
    /// Share of cells within 10% of the file's value.
    pub within_10: f64,
    /// Domains from the reconstruction equal those from the file (groups per level).
    pub domains_equal: bool,
    /// Compact plans K = 2, 4, 8 from the reconstruction: their worst latency in the
    /// file divided by that of the plan made from the file (1.0 = as good).
    pub plan_ratio: [f64; 3],
    pub modelled: Duration,
    pub out: SparseOutcome,
}

impl Score {
    pub fn share(&self) -> f64 {
        self.pairs_measured as f64 / self.pairs_total as f64
    }

    /// Pairs, cells within 10%, plan ratios and modelled time, for assertion messages.
    pub fn summary(&self) -> String {
        format!(
            "{} of {} pairs, {:.1}% within 10%, plans {:?}, modelled {:?}",
            self.pairs_measured,
            self.pairs_total,
            self.within_10 * 100.0,
            self.plan_ratio,
            self.modelled
        )
    }

    pub fn worst_plan(&self) -> f64 {
        self.plan_ratio.iter().copied().fold(0.0, f64::max)
    }
}

/// The reconstruction as a matrix.
pub fn to_matrix(out: &SparseOutcome) -> LatencyMatrix {
    LatencyMatrix::from_fn(out.cpus.clone(), |i, j| out.at(i, j).unwrap_or(f64::NAN))
}

fn groups(d: &Domains) -> Vec<Vec<CpuSet>> {
    d.levels().iter().map(|l| l.groups.clone()).collect()
}

/// Worst file latency among a set of CPU ids.
fn worst(m: &LatencyMatrix, set: &CpuSet) -> f64 {
    let ids: Vec<u32> = set.iter().collect();
    let mut w = 0.0f64;
    for (a, &x) in ids.iter().enumerate() {
        for &y in &ids[..a] {
            w = w.max(m.between(x, y).unwrap_or(f64::INFINITY));
        }
    }
    w
}

/// Runs sparse measurement on `truth` through the simulated measurer and scores it.
pub fn score(truth: &LatencyMatrix, noise: f64, seed: u64) -> Score {
    let cfg = SparseConfig {
        seed,
        ..SparseConfig::default()
    };
    score_with(truth, noise, &cfg)
}

/// [`score`] with a given configuration (its seed seeds the noise too).
pub fn score_with(truth: &LatencyMatrix, noise: f64, cfg: &SparseConfig) -> Score {
    let mut sim = Simulated::new(truth, noise, cfg.seed);
    let out = run_sparse(&truth.cpus, None, &mut sim, cfg).expect("simulated run");
    let n = truth.len();
    let mut near = 0usize;
    let mut total = 0usize;
    for i in 0..n {
        for j in 0..i {
            let (Some(t), Some(r)) = (truth.at(i, j), out.at(i, j)) else {
                total += 1;
                continue;
            };
            total += 1;
            if (r - t).abs() <= 0.10 * t {
                near += 1;
            }
        }
    }
    let recon = to_matrix(&out);
    let dt = Domains::from_matrix(truth).expect("domains of the file");
    let dr = Domains::from_matrix(&recon).expect("domains of the reconstruction");
    let all: CpuSet = truth.cpus.iter().copied().collect();
    let mut plan_ratio = [0.0; 3];
    for (slot, k) in [2usize, 4, 8].into_iter().enumerate() {
        let req = Request {
            count: k,
            policy: Policy::Compact,
            ..Request::default()
        };
        let pt = place(&dt, &req, &all).expect("plan from the file");
        let pr = place(&dr, &req, &all).expect("plan from the reconstruction");
        plan_ratio[slot] = worst(truth, &pr.cpus) / worst(truth, &pt.cpus);
    }
    Score {
        n,
        pairs_measured: out.pairs_measured,
        pairs_total: out.pairs_total(),
        within_10: near as f64 / total as f64,
        domains_equal: groups(&dt) == groups(&dr),
        plan_ratio,
        modelled: out.modelled(&cfg.costs),
        out,
    }
}
