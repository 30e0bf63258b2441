//! Measurement jobs as the state keeps them between events: their timetable, what the
//! running one stays off, the last failure and the background completion of a sparse
//! matrix. The state decides which jobs to start and what their results do
//! (`measuring.rs`, `completing.rs`); this part keeps their ids, timetable and budgets.

use std::time::{Duration, Instant};

use crate::matrix::{keep, LatencyMatrix};
use crate::measure::around::Around;
use crate::measure::{self, LoadGuard};

use super::super::schedule::{Remeasure, Running, Schedule, Timing};

/// Measurement jobs: when they run, what the running one stays off, why the last one
/// failed, and the background completion of a sparse matrix.
///
/// Owns: the timetable and the jobs' bookkeeping. Must not touch: the matrix in use
/// (kept by `Machine`; a finished job's matrix is handed to it by the state).
#[derive(Debug)]
pub(super) struct Measurement {
    pub(super) timing: Timing,
    pub(super) schedule: Schedule,
    /// The CPUs the running full measurement stays off (see `measure::around`).
    pub(super) measuring_around: Option<Around>,
    pub(super) last_failure: Option<String>,
    /// Background completion of a sparse matrix (see `state/completing.rs`).
    pub(super) completing: Completion,
}

impl Measurement {
    pub(super) fn new(timing: Timing, now: Instant) -> Measurement {
        Measurement {
            schedule: Schedule::new(&timing, now),
            timing,
            measuring_around: None,
            last_failure: None,
            completing: Completion::default(),
        }
    }

    /// Whether a full measurement (or the fill of a stored one) runs now.
    pub(super) fn measuring(&self) -> bool {
        self.schedule.running().is_some_and(|r| r.full || r.fill)
    }

    /// What the full measurement that ended stayed off, taken.
    pub(super) fn take_around(&mut self) -> Option<Around> {
        self.measuring_around.take()
    }

    /// Whether any job (full, fill, probe or completion slice) runs now.
    pub(super) fn busy(&self) -> bool {
        self.schedule.running().is_some()
    }

    /// The full measurement running now, if one does.
    pub(super) fn running_full(&self) -> Option<Running> {
        self.schedule.running().filter(|r| r.full)
    }

    /// The budget for measuring `pairs` pairs of a matrix of `cpus` CPUs.
    pub(super) fn fill_budget(&self, pairs: usize, cpus: usize) -> Duration {
        keep::fill_budget(
            self.timing.full_budget,
            pairs,
            cpus,
            self.timing.probe_budget,
        )
    }

    /// The budget of a full measurement.
    pub(super) fn full_budget(&self) -> Duration {
        self.timing.full_budget
    }

    /// The budget of a drift probe.
    pub(super) fn probe_budget(&self) -> Duration {
        self.timing.probe_budget
    }

    /// The pairs a drift probe of `matrix` measures.
    pub(super) fn probe_sample(&self, matrix: &LatencyMatrix) -> Vec<(u32, u32)> {
        measure::probe_sample(matrix, self.timing.probe_pairs)
    }

    /// The pairs `probes` found moved from `matrix` by more than the tolerance.
    pub(super) fn drift(
        &self,
        matrix: &LatencyMatrix,
        probes: &[measure::Probe],
    ) -> Vec<measure::Drift> {
        measure::drift(matrix, probes, self.timing.drift_tolerance)
    }

    /// The relative change that counts as drift.
    pub(super) fn drift_tolerance(&self) -> f64 {
        self.timing.drift_tolerance
    }

    /// Drift found this soon after a measurement says the host moves the vCPUs: two
    /// probe periods (an hour without periodic probes).
    pub(super) fn drift_soon(&self) -> Duration {
        self.timing.drift_every.unwrap_or(Duration::from_secs(1800)) * 2
    }

    /// How idle every measured CPU must be (`measure.idle-threshold`).
    pub(super) fn load_guard(&self) -> LoadGuard {
        LoadGuard {
            min_idle: self.timing.min_idle,
            set_by: "measure.idle-threshold",
            ..LoadGuard::default()
        }
    }

    /// `Remeasure` calls closer together than this join the previous call's job.
    pub(super) fn remeasure_min_interval(&self) -> Duration {
        self.timing.remeasure_min_interval
    }

    /// A `Remeasure` call at `now`: what the schedule says to do.
    pub(super) fn remeasure(&mut self, now: Instant) -> Remeasure {
        self.schedule
            .remeasure(now, self.timing.remeasure_min_interval)
    }

    /// A full measurement wanted at `now` (the fingerprint changed): what to do.
    pub(super) fn full_wanted(&mut self, now: Instant) -> Remeasure {
        self.schedule
            .full_wanted(now, self.timing.remeasure_min_interval)
    }

    /// A new job id, not started yet.
    pub(super) fn alloc(&mut self) -> u64 {
        self.schedule.alloc()
    }

    /// Job `id`, a full measurement, runs now.
    pub(super) fn started_full(&mut self, id: u64) {
        self.schedule.started(id, true);
    }

    /// A new fill of the pairs the stored matrix lacks runs now: its id.
    pub(super) fn start_fill(&mut self) -> u64 {
        let id = self.schedule.alloc();
        self.schedule.started_fill(id);
        id
    }

    /// A new drift probe runs now: its id.
    pub(super) fn start_probe(&mut self) -> u64 {
        let id = self.schedule.alloc();
        self.schedule.started(id, false);
        id
    }

    /// A new completion slice runs now: its id.
    pub(super) fn start_slice(&mut self) -> u64 {
        let id = self.start_probe();
        self.completing.job = Some(id);
        id
    }

    /// A full measurement once nothing runs.
    pub(super) fn queue_full(&mut self) {
        self.schedule.queue_full();
    }

    /// The full measurement promised, now that nothing runs.
    pub(super) fn take_queued(&mut self) -> Option<u64> {
        self.schedule.take_queued()
    }

    /// Job `id` ended: what ran, or `None` when it is not the job running.
    pub(super) fn finished(&mut self, id: u64) -> Option<Running> {
        self.schedule.finished(id)
    }

    /// Full measurement `id` ended with `ok` and `summary`.
    pub(super) fn full_ended(&mut self, id: u64, ok: bool, summary: String) {
        self.schedule.full_ended(id, ok, summary);
    }

    /// Whether job `id` is the completion slice in flight.
    pub(super) fn is_slice(&self, id: u64) -> bool {
        self.completing.is_slice(id)
    }

    /// Whether a completion slice may start at `now`: none is in flight, no other job
    /// runs and the pause after the last slice is over.
    pub(super) fn slice_may_start(&self, now: Instant) -> bool {
        !(self.completing.job.is_some()
            || self.busy()
            || self.completing.next.is_some_and(|t| now < t))
    }

    /// The next completion slice starts no earlier than `at`.
    pub(super) fn complete_after(&mut self, at: Instant) {
        self.completing.next = Some(at);
    }

    /// The slice in flight ended; the next starts no earlier than `next`.
    pub(super) fn slice_done(&mut self, next: Instant) {
        self.completing.job = None;
        self.completing.next = Some(next);
    }

    /// What the last slice that corrected cells corrected.
    pub(super) fn corrected(&mut self, finding: String) {
        self.completing.corrected = Some(finding);
    }

    /// Completion changed the hierarchy the sparse map gave.
    pub(super) fn contradicted(&mut self, finding: String) {
        self.completing.contradicted = Some(finding);
    }

    /// What completion found last: a contradiction before a correction.
    pub(super) fn completion_finding(&self) -> Option<&String> {
        self.completing
            .contradicted
            .as_ref()
            .or(self.completing.corrected.as_ref())
    }
}

/// What completion keeps between slices.
#[derive(Debug, Default)]
pub(super) struct Completion {
    /// The slice in flight: its job id.
    pub(super) job: Option<u64>,
    /// The next slice starts no earlier (the pause after the last one).
    pub(super) next: Option<Instant>,
    /// What the last slice that corrected cells corrected.
    pub(super) corrected: Option<String>,
    /// The last change of the hierarchy completion made (the sparse map's was wrong).
    pub(super) contradicted: Option<String>,
}

impl Completion {
    /// Whether job `id` is the slice in flight.
    pub(super) fn is_slice(&self, id: u64) -> bool {
        self.job == Some(id)
    }
}
