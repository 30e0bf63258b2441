//! Measurement jobs, run on a named OS thread (never on a tokio worker), with the result
//! sent back to the loop as an [`Event::Measured`](super::Event::Measured).
//!
//! Two kinds: a full matrix, and a light drift probe of a few pairs whose result the loop
//! compares with the stored matrix ([`drift`]) before paying for a full measurement.
//!
//! Must not touch: daemon state. A job owns copies of what it needs.

use std::time::Duration;

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::sysroot::SysRoot;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub enum JobKind {
    /// A full matrix over `cpus`, within `budget`.
    Full { cpus: CpuSet, budget: Duration },
    /// A few pairs, each with the latency the current matrix holds for it.
    Drift {
        pairs: Vec<(u32, u32, f64)>,
        budget: Duration,
    },
}

/// A measurement job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: u64,
    pub kind: JobKind,
    pub sysroot: SysRoot,
}

/// What a job produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Result {
    Matrix(LatencyMatrix),
    /// Measured one-way latency per probed pair, in the order asked.
    Pairs(Vec<(u32, u32, f64)>),
}

/// A finished job.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub id: u64,
    pub result: std::result::Result<Result, String>,
}

/// Runs a job on the calling thread.
pub fn run_job(job: &Job) -> Outcome {
    let result = match &job.kind {
        JobKind::Full { cpus, budget } => {
            measure_full(&job.sysroot, cpus, *budget).map(Result::Matrix)
        }
        JobKind::Drift { pairs, budget } => {
            measure_pairs(&job.sysroot, pairs, *budget).map(Result::Pairs)
        }
    };
    Outcome { id: job.id, result }
}

/// Starts a job on its own named thread; `done` receives the outcome.
pub fn spawn(job: Job, done: impl FnOnce(Outcome) + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("pinnerd-job-{}", job.id))
        .spawn(move || done(run_job(&job)))
        .map(|_| ())
}

fn measure_full(
    _sysroot: &SysRoot,
    _cpus: &CpuSet,
    _budget: Duration,
) -> std::result::Result<LatencyMatrix, String> {
    Err("the measurement engine is not part of this build".into())
}

fn measure_pairs(
    _sysroot: &SysRoot,
    _pairs: &[(u32, u32, f64)],
    _budget: Duration,
) -> std::result::Result<Vec<(u32, u32, f64)>, String> {
    Err("the measurement engine is not part of this build".into())
}

/// A handful of pairs that represent the matrix: the closest, the farthest and the
/// median pair, plus evenly spaced ones up to `k`. Deterministic.
pub fn probe_pairs(m: &LatencyMatrix, k: usize) -> Vec<(u32, u32, f64)> {
    let mut cells: Vec<(f64, u32, u32)> = Vec::new();
    for i in 0..m.len() {
        for j in 0..i {
            if let Some(v) = m.at(i, j) {
                cells.push((v, m.cpus[j], m.cpus[i]));
            }
        }
    }
    if cells.is_empty() || k == 0 {
        return Vec::new();
    }
    cells.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let k = k.min(cells.len());
    let mut picked: Vec<usize> = if k == 1 {
        vec![0]
    } else {
        (0..k).map(|n| n * (cells.len() - 1) / (k - 1)).collect()
    };
    picked.dedup();
    picked
        .into_iter()
        .map(|n| (cells[n].1, cells[n].2, cells[n].0))
        .collect()
}

/// Says how the probe differs from the matrix, when a pair moved by more than
/// `tolerance` (relative) and by more than `floor_ns` (absolute, so that 4 ns → 5 ns on
/// siblings is not called drift).
pub fn drift(
    probe: &[(u32, u32, f64)],
    expected: &[(u32, u32, f64)],
    tolerance: f64,
    floor_ns: f64,
) -> Option<String> {
    let mut moved = Vec::new();
    for ((a, b, got), (_, _, want)) in probe.iter().zip(expected) {
        let diff = (got - want).abs();
        if diff > floor_ns && diff > tolerance * want.abs() {
            moved.push(format!("{a}↔{b} {want:.0} → {got:.0} ns"));
        }
    }
    (!moved.is_empty()).then(|| moved.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_level() -> LatencyMatrix {
        // 0-1 and 2-3 close (10 ns), across 100 ns.
        LatencyMatrix::from_fn(
            vec![0, 1, 2, 3],
            |i, j| if i / 2 == j / 2 { 10.0 } else { 100.0 },
        )
    }

    #[test]
    fn probe_takes_closest_and_farthest() {
        let p = probe_pairs(&two_level(), 3);
        assert_eq!(p.first().unwrap().2, 10.0);
        assert_eq!(p.last().unwrap().2, 100.0);
        assert!(p.len() <= 3);
        assert_eq!(p, probe_pairs(&two_level(), 3), "deterministic");
    }

    #[test]
    fn drift_needs_both_relative_and_absolute_change() {
        let want = vec![(0, 1, 10.0), (0, 2, 100.0)];
        assert_eq!(
            drift(&[(0, 1, 12.0), (0, 2, 104.0)], &want, 0.25, 5.0),
            None
        );
        assert_eq!(
            drift(&[(0, 1, 14.0), (0, 2, 100.0)], &want, 0.25, 5.0),
            None,
            "4 ns is under the floor"
        );
        let d = drift(&[(0, 1, 10.0), (0, 2, 180.0)], &want, 0.25, 5.0).unwrap();
        assert!(d.contains("0↔2"), "{d}");
    }
}
