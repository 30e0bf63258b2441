//! What a sparse run produced, its modelled time and its matrix.

use std::collections::BTreeMap;
use std::time::Duration;

use super::super::schedule::Costs;
use crate::cpuset::CpuSet;
use crate::matrix::{LatencyMatrix, PairStats, SparseCounts};

/// What a sparse run produced: every cell, which were measured, and how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseOutcome {
    /// CPU ids, in row order.
    pub cpus: Vec<u32>,
    /// Row-major n×n cells (NaN on the diagonal and where nothing is known).
    pub cells: Vec<f64>,
    /// Row-major n×n: the cell was measured (else inferred from its block).
    pub measured: Vec<bool>,
    /// Distinct pairs measured at least once.
    pub pairs_measured: usize,
    /// Measurements taken (a re-measured pair counts again).
    pub measurements: usize,
    /// Sizes of the rounds run, in order (a serial measurement is a round of one).
    pub rounds: Vec<usize>,
    /// The groups of the tree, finest level first (each level a partition of the CPUs).
    pub levels: Vec<Vec<CpuSet>>,
    /// Blocks accepted from spot checks, and blocks measured fully.
    pub blocks_filled: usize,
    pub blocks_measured: usize,
    /// Whether the tree came from the prior.
    pub used_prior: bool,
    /// Whether the cells came from the mesh model (`sparse/mesh.rs`), not a tree.
    pub mesh: bool,
}

impl SparseOutcome {
    pub fn n(&self) -> usize {
        self.cpus.len()
    }

    /// All pairs of the matrix.
    pub fn pairs_total(&self) -> usize {
        self.n() * self.n().saturating_sub(1) / 2
    }

    /// The cell between two row indices.
    pub fn at(&self, i: usize, j: usize) -> Option<f64> {
        let v = self.cells[i * self.n() + j];
        (!v.is_nan()).then_some(v)
    }

    /// What the run would take on real hardware: the fixed cost, then every round as
    /// long as one pair plus the thread overhead of each pair in it.
    pub fn modelled(&self, c: &Costs) -> Duration {
        let mut t = c.fixed;
        for &r in &self.rounds {
            t += c.per_pair
                + if r > 1 {
                    c.per_round_pair * r as u32
                } else {
                    Duration::ZERO
                };
        }
        t
    }

    /// The matrix: every known cell, `mode` sparse, `pairs_measured`, `pairs_total`
    /// and `modelled_seconds`; `stats` from `measured_stats` for measured pairs (a
    /// single figure when it has none); every filled pair marked inferred
    /// ([`LatencyMatrix::inferred`]).
    pub fn to_matrix(
        &self,
        measured_stats: &BTreeMap<(u32, u32), PairStats>,
        costs: &Costs,
    ) -> LatencyMatrix {
        let n = self.n();
        let mut m = LatencyMatrix::from_fn(self.cpus.clone(), |i, j| self.cells[i * n + j]);
        for i in 0..n {
            for j in 0..i {
                if self.cells[i * n + j].is_nan() {
                    m.latency_ns.set(i, j, None);
                }
            }
        }
        for j in 0..n {
            for i in j + 1..n {
                let Some(v) = self.at(i, j) else { continue };
                let (a, b) = (
                    self.cpus[i].min(self.cpus[j]),
                    self.cpus[i].max(self.cpus[j]),
                );
                if !self.measured[i * n + j] {
                    m.set_inferred(j, i, true);
                    continue;
                }
                // A measured pair without statistics: one figure.
                let s = measured_stats
                    .get(&(a, b))
                    .cloned()
                    .unwrap_or_else(|| PairStats::single_figure(a, b, v));
                m.stats.push(s);
            }
        }
        m.mode = Some("sparse".into());
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: self.pairs_measured,
            pairs_total: self.pairs_total(),
            modelled_seconds: self.modelled(costs).as_secs_f64(),
        }));
        m
    }
}
