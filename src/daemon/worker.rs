//! Measurement jobs, run on a named OS thread (never on a tokio worker), with the result
//! sent back to the loop as an [`Event::Measured`](super::Event::Measured).
//!
//! Two kinds: a full matrix ([`measure::run`]), and a light drift probe of a few pairs
//! ([`measure::probe_pairs`]) whose result the loop compares with the current matrix
//! ([`measure::drift`]) before paying for a full measurement.
//!
//! Must not touch: daemon state. A job owns copies of what it needs.

use std::time::Duration;

use crate::matrix::LatencyMatrix;
use crate::measure::{self, MeasureConfig, Probe};

/// What to measure.
#[derive(Debug, Clone)]
pub enum JobKind {
    /// A full matrix of `cfg.cpus` within `cfg.budget`.
    Full,
    /// A few pairs, within `budget`.
    Drift {
        pairs: Vec<(u32, u32)>,
        budget: Duration,
    },
}

/// A measurement job.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: u64,
    pub kind: JobKind,
    pub cfg: MeasureConfig,
}

/// What a job produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Result {
    Matrix(LatencyMatrix),
    Probes(Vec<Probe>),
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
        JobKind::Full => measure::run(&job.cfg, |_| {})
            .map(Result::Matrix)
            .map_err(|e| e.to_string()),
        JobKind::Drift { pairs, budget } => measure::probe_pairs(&job.cfg, pairs, *budget)
            .map(Result::Probes)
            .map_err(|e| e.to_string()),
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
