//! The daemon's drift check: which pairs to probe ([`probe_sample`], pure), the probe
//! itself ([`probe_pairs`]: one cheap pass over each pair on the measurement engine),
//! and which probes moved away from the stored matrix ([`drift`], pure).

use std::time::{Duration, Instant};

use super::{estimator, schedule, Engine, MeasureConfig, MeasureError};
use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;

/// Pairs worth probing for drift: `k` pairs spread over the matrix's latency range (the
/// cells sorted by value, sampled evenly), so every level is represented.
pub fn probe_sample(matrix: &LatencyMatrix, k: usize) -> Vec<(u32, u32)> {
    let mut cells: Vec<(f64, u32, u32)> = (0..matrix.len())
        .flat_map(|i| {
            (0..i).filter_map(move |j| Some((matrix.at(i, j)?, matrix.cpus[j], matrix.cpus[i])))
        })
        .collect();
    cells.sort_by(|x, y| x.0.total_cmp(&y.0));
    schedule::sample(&cells, k)
        .into_iter()
        .map(|(_, a, b)| (a, b))
        .collect()
}

/// A probed pair that moved away from the stored figure by more than the tolerance.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub a: u32,
    pub b: u32,
    pub stored_ns: f64,
    pub probed_ns: f64,
    pub relative: f64,
}

/// The probes that disagree with `matrix` by more than `tolerance` (relative). Probes
/// without an estimate, or of pairs the matrix lacks, are not drift.
pub fn drift(matrix: &LatencyMatrix, probes: &[Probe], tolerance: f64) -> Vec<Drift> {
    probes
        .iter()
        .filter_map(|p| {
            let stored = matrix.between(p.a, p.b)?;
            let probed = p.estimate_ns?;
            let relative = estimator::disagreement(stored, probed);
            (relative > tolerance).then_some(Drift {
                a: p.a,
                b: p.b,
                stored_ns: stored,
                probed_ns: probed,
                relative,
            })
        })
        .collect()
}

/// One pair re-measured by [`probe_pairs`].
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub a: u32,
    pub b: u32,
    /// `None` when every batch was discarded or the pin did not hold.
    pub estimate_ns: Option<f64>,
    pub samples: usize,
    pub discarded: u32,
}

/// A cheap re-measurement of a few pairs (one pass each, serially) for the daemon's
/// drift check. Uses `cfg`'s primitive, batch, stop rule and guard; `budget` bounds the
/// whole probe. CPUs must be online and distinct within each pair.
pub fn probe_pairs(
    cfg: &MeasureConfig,
    pairs: &[(u32, u32)],
    budget: Duration,
) -> Result<Vec<Probe>, MeasureError> {
    let t0 = Instant::now();
    let cpus: CpuSet = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
    if let Some(&(a, _)) = pairs.iter().find(|(a, b)| a == b) {
        return Err(MeasureError::TooFewCpus {
            cpus: std::iter::once(a).collect(),
        });
    }
    cfg.guard.wait_idle(&cfg.root, &cpus)?;
    let engine = Engine { cfg };
    let mut out = Vec::with_capacity(pairs.len());
    for (k, &(a, b)) in pairs.iter().enumerate() {
        let left = budget.saturating_sub(t0.elapsed()) / (pairs.len() - k) as u32;
        let runs = engine.group(&[(a, b)], Instant::now() + left)?;
        let run = runs.into_iter().next().unwrap_or_default();
        out.push(Probe {
            a,
            b,
            estimate_ns: estimator::estimate(&run.batches),
            samples: run.batches.len(),
            discarded: run.switched + run.migrated,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_sample_covers_the_range_and_drift_flags_moves() {
        let m = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |i, j| {
            if i / 2 == j / 2 {
                10.0
            } else {
                100.0 + (i + j) as f64
            }
        });
        let sample = probe_sample(&m, 3);
        assert_eq!(sample.len(), 3);
        assert_eq!(m.between(sample[0].0, sample[0].1), Some(10.0));
        assert!(m.between(sample[2].0, sample[2].1).unwrap() > 100.0);
        let probes = vec![
            Probe {
                a: 0,
                b: 1,
                estimate_ns: Some(10.5),
                samples: 20,
                discarded: 0,
            },
            Probe {
                a: 3,
                b: 0,
                estimate_ns: Some(30.0),
                samples: 20,
                discarded: 0,
            },
            Probe {
                a: 2,
                b: 3,
                estimate_ns: None,
                samples: 0,
                discarded: 50,
            },
        ];
        let d = drift(&m, &probes, 0.10);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].a, d[0].b, d[0].stored_ns), (3, 0, 103.0));
    }
}
