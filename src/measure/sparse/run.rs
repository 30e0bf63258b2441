//! The run's state: every figure so far and the rounds that gave them.

use std::collections::BTreeSet;

use super::{MeasureError, PairMeasurer};

/// The run's state: the measurer, every figure so far, the rounds.
pub(super) struct Run<'a, M: PairMeasurer> {
    pub(super) ids: &'a [u32],
    pub(super) meas: &'a mut M,
    pub(super) cells: Vec<f64>,
    pub(super) measured: Vec<bool>,
    pub(super) measurements: usize,
    pub(super) rounds: Vec<usize>,
}

impl<'a, M: PairMeasurer> Run<'a, M> {
    /// A run over `ids` with nothing measured yet.
    pub(super) fn new(ids: &'a [u32], meas: &'a mut M) -> Run<'a, M> {
        let n = ids.len();
        Run {
            ids,
            meas,
            cells: vec![f64::NAN; n * n],
            measured: vec![false; n * n],
            measurements: 0,
            rounds: Vec::new(),
        }
    }

    pub(super) fn n(&self) -> usize {
        self.ids.len()
    }

    /// Distinct pairs measured so far.
    pub(super) fn distinct(&self) -> usize {
        self.measured.iter().filter(|&&m| m).count() / 2
    }

    pub(super) fn get(&self, i: usize, j: usize) -> Option<f64> {
        let v = self.cells[i * self.n() + j];
        (!v.is_nan()).then_some(v)
    }

    pub(super) fn set(&mut self, i: usize, j: usize, v: f64) {
        let n = self.n();
        self.cells[i * n + j] = v;
        self.cells[j * n + i] = v;
        self.measured[i * n + j] = true;
        self.measured[j * n + i] = true;
    }

    /// Measures `pairs` (indices) in rounds of disjoint pairs. A pair measured before
    /// keeps the lower of its figures when `again` (preemption only inflates).
    pub(super) fn measure(
        &mut self,
        pairs: &[(usize, usize)],
        again: bool,
    ) -> Result<(), MeasureError> {
        let mut todo: Vec<(usize, usize)> = pairs
            .iter()
            .map(|&(i, j)| (i.min(j), i.max(j)))
            .filter(|&(i, j)| i != j && (again || !self.measured[i * self.n() + j]))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        while !todo.is_empty() {
            let mut busy = vec![false; self.n()];
            let mut round = Vec::new();
            let mut rest = Vec::new();
            for (i, j) in todo {
                if busy[i] || busy[j] {
                    rest.push((i, j));
                } else {
                    busy[i] = true;
                    busy[j] = true;
                    round.push((i, j));
                }
            }
            let ids: Vec<(u32, u32)> = round
                .iter()
                .map(|&(i, j)| (self.ids[i], self.ids[j]))
                .collect();
            let figures = self.meas.measure_round(&ids)?;
            self.rounds.push(round.len());
            self.measurements += round.len();
            for (&(i, j), f) in round.iter().zip(figures) {
                if let Some(v) = f.filter(|v| v.is_finite() && *v >= 0.0) {
                    let keep = self.get(i, j).map_or(v, |old| old.min(v));
                    self.set(i, j, keep);
                }
            }
            todo = rest;
        }
        Ok(())
    }

    pub(super) fn figure(&mut self, i: usize, j: usize) -> Result<Option<f64>, MeasureError> {
        if self.get(i, j).is_none() {
            self.measure(&[(i, j)], false)?;
        }
        Ok(self.get(i, j))
    }
}
