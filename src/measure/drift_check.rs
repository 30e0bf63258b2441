//! The daemon's drift check, pure: which pairs to probe, and which probes moved away
//! from the stored matrix. The probing itself is [`super::probe_pairs`].

use super::{estimator, schedule, Probe};
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
