//! Measurement jobs as the state keeps them between events: their timetable, what the
//! running one stays off, the last failure and the background completion of a sparse
//! matrix. The state starts and finishes jobs (`measuring.rs`, `completing.rs`); this
//! file only holds them.

use std::time::Instant;

use crate::measure::around::Around;

use super::super::schedule::{Schedule, Timing};

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
