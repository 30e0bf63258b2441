//! Measurement jobs, run on a named OS thread (never on a tokio worker), with the result
//! sent back to the loop as an [`Event::Measured`](super::Event::Measured).
//!
//! Three kinds: a full matrix ([`measure::run`]), a light drift probe of a few pairs
//! ([`measure::probe_pairs`]) whose result the loop compares with the current matrix
//! ([`measure::drift`]) before paying for a full measurement, and a slice of the
//! background completion of a sparse matrix
//! ([`measure::sparse_real::complete_slice_real`]).
//!
//! Must not touch: daemon state. A job owns copies of what it needs.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::matrix::{LatencyMatrix, PairStats};
use crate::measure::{self, complete, MeasureConfig, MeasureError, Probe};

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
    /// A completion slice: these rounds of disjoint pairs, each figure checked against
    /// the inferred cell it replaces (`reference`, keyed `(a, b)`, `a < b`).
    Complete {
        rounds: Vec<Vec<(u32, u32)>>,
        reference: BTreeMap<(u32, u32), f64>,
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
pub enum Product {
    Matrix(Box<LatencyMatrix>),
    Probes(Vec<Probe>),
    /// A completion slice's figures and the statistics of the pairs that gave one.
    Completed {
        slice: complete::Slice,
        stats: BTreeMap<(u32, u32), PairStats>,
    },
}

/// Why a job produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("cannot start the measurement thread: {0}")]
    Spawn(std::io::Error),
    /// The daemon observes another machine's tree (`daemon --machine`): its CPUs are
    /// not this machine's, so no spinner is pinned to them.
    #[error("nothing is measured by a daemon that observes another machine (--machine)")]
    Observing,
}

/// A finished job.
#[derive(Debug)]
pub struct Finished {
    pub id: u64,
    pub result: Result<Product, JobError>,
}

/// Runs a job on the calling thread.
pub fn run_job(job: &Job) -> Finished {
    let result = match &job.kind {
        JobKind::Full => measure::run(&job.cfg, |_| {}).map(|m| Product::Matrix(Box::new(m))),
        JobKind::Drift { pairs, budget } => {
            measure::probe_pairs(&job.cfg, pairs, *budget).map(Product::Probes)
        }
        JobKind::Complete { rounds, reference } => {
            measure::sparse_real::complete_slice_real(&job.cfg, rounds, reference)
                .map(|(slice, stats)| Product::Completed { slice, stats })
        }
    };
    Finished {
        id: job.id,
        result: result.map_err(JobError::from),
    }
}

/// Starts a job on its own named thread; `done` receives what it produced.
pub fn spawn(job: Job, done: impl FnOnce(Finished) + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("pinnerd-job-{}", job.id))
        .spawn(move || done(run_job(&job)))
        .map(|_| ())
}
