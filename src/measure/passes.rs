//! The passes of a full run over every pair: `cfg.passes` regular passes (serially or
//! in tournament rounds, each unit in an equal share of the time left), extra passes
//! for the pairs whose passes disagree, and the serial cross-check of a parallel run.
//!
//! ```text
//! every_pair ──────────► ambiguous_again ──────────► cross_check
//! (pass 1 forwards,      (serially, while passes      (rounds only: a sample
//!  pass 2 backwards, …)   disagree and time lasts)     measured again serially)
//!        └──── one PairAcc per pair, units timed, budget_ran_out ────┘
//! ```
//!
//! Must not touch: the guard, the warm-up and the assessment
//! ([`run_detailed`](super::run_detailed) does them around the passes), files.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::validity::PairAcc;
use super::{
    estimator, schedule, share_of, CrossCheck, Engine, MeasureConfig, MeasureError, Mode, Phase,
};

/// The passes of a full run: every pair's results as they come in, and what the
/// passes cost.
pub(super) struct Passes<'a> {
    engine: Engine<'a>,
    pub(super) ids: Vec<u32>,
    /// When measuring stops (the repeat check's share kept).
    deadline: Instant,
    pairs: Vec<(usize, usize)>,
    pub(super) acc: BTreeMap<(usize, usize), PairAcc>,
    /// Units (pairs or rounds) of the regular passes measured, and their time.
    pub(super) units_done: usize,
    unit_time: Duration,
    pub(super) budget_ran_out: bool,
}

impl<'a> Passes<'a> {
    pub(super) fn new(cfg: &'a MeasureConfig, deadline: Instant) -> Passes<'a> {
        let ids: Vec<u32> = cfg.cpus.iter().collect();
        let pairs = schedule::all_pairs(ids.len());
        Passes {
            engine: Engine { cfg },
            acc: pairs.iter().map(|&p| (p, PairAcc::default())).collect(),
            ids,
            deadline,
            pairs,
            units_done: 0,
            unit_time: Duration::ZERO,
            budget_ran_out: false,
        }
    }

    /// `cfg.passes` passes over every pair, serially or in tournament rounds, each
    /// unit in an equal share of the time left.
    pub(super) fn every_pair(
        &mut self,
        report: &mut impl FnMut(Phase, usize, usize),
    ) -> Result<(), MeasureError> {
        let cfg = self.engine.cfg;
        let n = self.ids.len();
        let groups: Vec<Vec<(usize, usize)>> = match cfg.mode {
            Mode::Serial | Mode::Sparse => self.pairs.iter().map(|&p| vec![p]).collect(),
            Mode::Rounds => schedule::tournament(n),
        };
        let passes = cfg.passes.max(1);
        let total_units = groups.len() * passes as usize;
        for pass in 1..=passes {
            // Even passes go backwards, so a pair's two passes are far apart in time.
            let order: Vec<&Vec<(usize, usize)>> = if pass % 2 == 0 {
                groups.iter().rev().collect()
            } else {
                groups.iter().collect()
            };
            for (k, group) in order.into_iter().enumerate() {
                let now = Instant::now();
                let left = (total_units - self.units_done).max(1) as u32;
                let Some(unit_deadline) = share_of(now, self.deadline, left) else {
                    self.budget_ran_out = true;
                    break;
                };
                let cpus: Vec<(u32, u32)> = group
                    .iter()
                    .map(|&(i, j)| (self.ids[i], self.ids[j]))
                    .collect();
                let runs = self.engine.group(&cpus, unit_deadline)?;
                self.unit_time += now.elapsed();
                self.units_done += 1;
                for (p, run) in group.iter().zip(runs) {
                    self.acc
                        .get_mut(p)
                        .expect("every pair has an entry")
                        .add(run);
                }
                report(Phase::Pass(pass), k + 1, groups.len());
            }
        }
        Ok(())
    }

    /// Extra passes, serially, for pairs whose passes disagree (or that have no figure
    /// yet without a pin failure), while the budget lasts.
    pub(super) fn ambiguous_again(
        &mut self,
        report: &mut impl FnMut(Phase, usize, usize),
    ) -> Result<(), MeasureError> {
        let cfg = self.engine.cfg;
        let passes = cfg.passes.max(1);
        for pass in passes + 1..=cfg.max_passes.max(passes) {
            let ambiguous: Vec<(usize, usize)> = self
                .acc
                .iter()
                .filter(|(_, a)| {
                    a.pin_failure.is_none()
                        && (a.batches.is_empty() || a.pass_disagreement() > cfg.repeat_tolerance)
                })
                .map(|(&p, _)| p)
                .collect();
            if ambiguous.is_empty() {
                break;
            }
            let acc = &mut self.acc;
            let finished =
                self.engine
                    .one_by_one(&ambiguous, &self.ids, self.deadline, |k, p, runs| {
                        for run in runs {
                            acc.get_mut(&p).expect("every pair has an entry").add(run);
                        }
                        report(Phase::Pass(pass), k + 1, ambiguous.len());
                    })?;
            self.budget_ran_out |= !finished;
        }
        Ok(())
    }

    /// The serial cross-check of a parallel run: a sample of pairs measured again one
    /// at a time, beside their figures from the rounds.
    pub(super) fn cross_check(
        &mut self,
        report: &mut impl FnMut(Phase, usize, usize),
    ) -> Result<Vec<CrossCheck>, MeasureError> {
        let cfg = self.engine.cfg;
        let mut cross_check = Vec::new();
        if cfg.mode == Mode::Rounds && cfg.serial_check > 0 {
            let sample = schedule::sample(&self.pairs, cfg.serial_check);
            let (acc, ids) = (&self.acc, &self.ids);
            let finished = self
                .engine
                .one_by_one(&sample, ids, self.deadline, |k, p, runs| {
                    let rounds_ns = estimator::estimate(&acc[&p].batches);
                    let serial_ns = runs.first().and_then(|r| estimator::estimate(&r.batches));
                    if let (Some(rounds_ns), Some(serial_ns)) = (rounds_ns, serial_ns) {
                        cross_check.push(CrossCheck {
                            a: ids[p.0],
                            b: ids[p.1],
                            rounds_ns,
                            serial_ns,
                        });
                    }
                    report(Phase::SerialCheck, k + 1, sample.len());
                })?;
            self.budget_ran_out |= !finished;
        }
        Ok(cross_check)
    }

    /// Mean wall time of one unit of the regular passes.
    pub(super) fn mean_unit(&self) -> Duration {
        if self.units_done > 0 {
            self.unit_time / self.units_done as u32
        } else {
            Duration::ZERO
        }
    }
}
