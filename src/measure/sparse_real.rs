//! Sparse measurement on real pairs: the spinner behind [`PairMeasurer`], with the
//! load guard, the warm-up and the validity warnings of a full run.
//!
//! Must not touch: the algorithm (see `sparse`), files.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::sparse::{run_sparse, PairMeasurer, SparseConfig};
use super::spin::crew::Crew;
use super::{estimator, guard, validity, warm_up, Engine, MeasureConfig, MeasureError};
use super::{Measurement, Phase, Progress, RunReport};
use crate::cpuset::CpuSet;
use crate::domains::Layout;
use crate::matrix::PairStats;
use crate::topology::Topology;

/// The spinner as a [`PairMeasurer`]: each round's disjoint pairs run at once, one pass,
/// within an even share of what is left of the budget.
pub struct EngineMeasurer<'a> {
    engine: Engine<'a>,
    deadline: Instant,
    /// Per pair: the stats of its last figure.
    pub stats: BTreeMap<(u32, u32), PairStats>,
    pub warnings: Vec<String>,
    pub rounds: usize,
    /// Rounds still to come when the caller knows (the repeat check): each gets an even
    /// share of what is left instead of a tenth.
    rounds_left: Option<usize>,
    /// Rounds run on one crew of spinners over `cfg.cpus` (started at the first round)
    /// instead of two threads started per pair per round.
    crew: Option<Option<Crew>>,
}

impl<'a> EngineMeasurer<'a> {
    pub fn new(cfg: &'a MeasureConfig, deadline: Instant) -> EngineMeasurer<'a> {
        EngineMeasurer {
            engine: Engine { cfg },
            deadline,
            stats: BTreeMap::new(),
            warnings: Vec::new(),
            rounds: 0,
            rounds_left: None,
            crew: None,
        }
    }

    /// Runs the rounds on one crew of spinners over the configuration's CPUs
    /// (`spin::crew`): what completion slices run on.
    pub fn on_crew(mut self) -> EngineMeasurer<'a> {
        self.crew = Some(None);
        self
    }

    /// Shares the time left evenly over `rounds` rounds (a known count of them).
    pub fn even_over(mut self, rounds: usize) -> EngineMeasurer<'a> {
        self.rounds_left = Some(rounds.max(1));
        self
    }
}

impl PairMeasurer for EngineMeasurer<'_> {
    fn measure_round(&mut self, round: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError> {
        let now = Instant::now();
        // Sparse runs are short: a round may take a tenth of what is left.
        let left = self.deadline.saturating_duration_since(now);
        let share = match self.rounds_left.as_mut() {
            Some(n) => {
                let share = left / (*n).max(1) as u32;
                *n = n.saturating_sub(1);
                share
            }
            None => left / 10,
        };
        let until = now + share.max(Duration::from_millis(5));
        if let Some(slot @ None) = self.crew.as_mut() {
            let ids: Vec<u32> = self.engine.cfg.cpus.iter().collect();
            *slot = Some(Crew::start(&ids, self.engine.cfg.priority)?);
        }
        let runs = match self.crew.as_ref().and_then(|c| c.as_ref()) {
            Some(crew) => self.engine.crew_group(crew, round, until)?,
            None => self.engine.group(round, until)?,
        };
        self.rounds += 1;
        let mut out = Vec::with_capacity(round.len());
        for (&(a, b), run) in round.iter().zip(runs) {
            if let Some(f) = &run.pin_failure {
                self.warnings.push(format!("{a}–{b}: {f}"));
            }
            let (lo, hi) = (a.min(b), a.max(b));
            let discarded = run.switched + run.migrated;
            if let Some(s) =
                estimator::measured_stats(lo, hi, &run.batches, discarded, run.round_trips)
            {
                self.stats.insert((lo, hi), s);
            }
            out.push(estimator::estimate(&run.batches));
        }
        Ok(out)
    }
}

/// The repeat check (`measure::repeat`) of `m` on the spinner engine, its answers spread
/// evenly over the time left until `until`.
pub fn repeat_check(
    m: &mut crate::matrix::LatencyMatrix,
    cfg: &MeasureConfig,
    until: Instant,
    vm: bool,
) -> Result<(), MeasureError> {
    let mut again = EngineMeasurer::new(cfg, until)
        .even_over(super::repeat::sample(m).len() * super::repeat::ANSWERS);
    super::repeat::record(m, &mut again, vm)
}

/// The sysfs grouping of `cfg.cpus` (SMT cores, clusters, LLCs, dies, nodes, packages)
/// as nested partitions, when the topology reads: the prior of a real sparse run.
pub fn sysfs_prior(cfg: &MeasureConfig) -> Option<Vec<Vec<CpuSet>>> {
    let topo = Topology::discover(&cfg.root).ok()?;
    let layout = Layout::from_topology(&topo).restricted(&cfg.cpus);
    Some(
        layout
            .levels
            .into_iter()
            .map(|(_, groups)| groups)
            .collect(),
    )
}

/// [`run_sparse_real`] with the sysfs groups as the prior (spot checks catch where they
/// are wrong) and the default [`SparseConfig`]: what `--mode sparse` runs.
pub fn run_with_sysfs_prior(
    cfg: &MeasureConfig,
    progress: impl FnMut(Progress),
) -> Result<Measurement, MeasureError> {
    let prior = sysfs_prior(cfg);
    run_sparse_real(cfg, prior.as_deref(), &SparseConfig::default(), progress)
}

/// A sparse measurement of `cfg.cpus` on real pairs: guard, warm-up, [`run_sparse`]
/// with `prior` (nested sysfs groups, or none), then the run's warnings.
pub fn run_sparse_real(
    cfg: &MeasureConfig,
    prior: Option<&[Vec<CpuSet>]>,
    sparse: &SparseConfig,
    mut progress: impl FnMut(Progress),
) -> Result<Measurement, MeasureError> {
    let t0 = Instant::now();
    if cfg.cpus.len() < 2 {
        return Err(if cfg.cpus.is_empty() {
            MeasureError::EmptyCpuList
        } else {
            MeasureError::TooFewCpus {
                cpus: cfg.cpus.clone(),
            }
        });
    }
    let mut report = |phase| {
        progress(Progress {
            phase,
            done: 0,
            total: 1,
            elapsed: t0.elapsed(),
        })
    };
    report(Phase::Guard);
    cfg.guard.wait_idle(&cfg.root, &cfg.cpus)?;
    let stat_before = guard::read_stat(&cfg.root)?;
    let hypervisor = validity::hypervisor(&cfg.root);
    let started = Instant::now();
    // A tenth of the budget is kept for the repeat check.
    let deadline = started + cfg.budget - cfg.budget / super::repeat::BUDGET_SHARE;
    report(Phase::Warmup);
    warm_up(&cfg.cpus, cfg.warmup.min(cfg.budget / 4), cfg.priority)?;
    report(Phase::Pass(1));
    let ids: Vec<u32> = cfg.cpus.iter().collect();
    let mut meas = EngineMeasurer::new(cfg, deadline);
    let out = run_sparse(&ids, prior, &mut meas, sparse)?;
    let stat_after = guard::read_stat(&cfg.root)?;
    let mut m = out.to_matrix(&meas.stats, &sparse.costs);
    if m.latency_ns.is_empty() {
        return Err(MeasureError::NothingMeasured {
            reason: "no pair gave a figure".into(),
        });
    }
    if let Some(hv) = &hypervisor {
        m.warnings.push(format!(
            "running in a virtual machine ({hv}): the host may move vCPUs between physical cores at any time, so these figures describe where the vCPUs sat during this measurement, not a fixed property of the machine"
        ));
    }
    let steal = guard::steal_ticks(&stat_before, &stat_after, &cfg.cpus);
    if !steal.is_empty() {
        let list: Vec<String> = steal
            .iter()
            .map(|(c, t)| format!("CPU {c}: {t} ticks"))
            .collect();
        m.warnings.push(format!(
            "steal time during the measurement ({}): the hypervisor ran other work on these vCPUs",
            list.join(", ")
        ));
    }
    if !meas.warnings.is_empty() {
        m.warnings.push(format!(
            "pins did not hold, those samples were dropped: {}",
            meas.warnings.join("; ")
        ));
    }
    let missing = m.summary().missing;
    if missing > 0 {
        m.warnings.push(format!("{missing} pair(s) have no figure"));
    }
    repeat_check(&mut m, cfg, started + cfg.budget, hypervisor.is_some())?;
    m.primitive = Some(cfg.primitive.as_str().to_string());
    m.measured_at_us = Some(super::now_us());
    m.fingerprint = cfg.fingerprint.clone();
    m.first_touch = Some(cfg.first_touch.describe().to_string());
    Ok(Measurement {
        matrix: m,
        report: RunReport {
            elapsed: t0.elapsed(),
            units: meas.rounds,
            hypervisor,
            timer_granularity: validity::timer_granularity(),
            ..RunReport::default()
        },
    })
}

/// One completion slice on real pairs (the daemon's background completion): the load
/// guard on `cfg.cpus` (the slice's CPUs), then [`super::complete::measure_slice`]
/// within `cfg.budget` on one crew of spinners over those CPUs (`spin::crew`), each figure checked against `reference` (the cells it
/// replaces). The slice and the statistics of every pair that gave a figure.
pub fn complete_slice_real(
    cfg: &MeasureConfig,
    rounds: &[Vec<(u32, u32)>],
    reference: &BTreeMap<(u32, u32), f64>,
) -> Result<(super::complete::Slice, super::complete::SliceStats), MeasureError> {
    cfg.guard.wait_idle(&cfg.root, &cfg.cpus)?;
    let mut meas = EngineMeasurer::new(cfg, Instant::now() + cfg.budget).on_crew();
    let slice = super::complete::measure_slice(&mut meas, rounds, |a, b| {
        reference.get(&(a.min(b), a.max(b))).copied()
    })?;
    Ok((slice, meas.stats))
}
