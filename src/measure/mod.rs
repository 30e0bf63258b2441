//! Core-to-core latency measurement with pinned busy-spin thread pairs.
//!
//! ```text
//! select_cpus ─► guard (idle enough?) ─► warm-up ─► passes over every pair ─► extra passes
//!   (online,       /proc/stat deltas      all CPUs    serial, or tournament      for pairs whose
//!    isolated,                            spinning    rounds of disjoint pairs   passes disagree
//!    allowed)                                              │                         │
//!                                         spin (pinned pair threads, batches) ◄──────┘
//!                                              │ valid batch figures
//!                                         estimator (p10, spread, stop rule)
//!                                              │
//!                        validity (steal, hypervisor, clock, discards) ─► LatencyMatrix
//!                                              │
//!                        repeat (a sample measured again: stable or unstable) ─► stability
//! ```
//!
//! Entry points: [`run`] / [`run_detailed`] for a full matrix (or a sparse one with
//! [`Mode::Sparse`]; its passes over the pairs are `passes`), [`sparse_real::run_sparse_real`] for a sparse one with the sysfs
//! prior, [`sparse::run_sparse`] for the algorithm over any [`sparse::PairMeasurer`]
//! (the spinner, or [`simulate::Simulated`]), [`probe_pairs`] for the daemon's cheap
//! drift check, [`select_cpus`] to turn `--cpus` into a checked set, and
//! [`Mode::default_for`] for the daemon's choice of mode, [`around`] for the CPUs a
//! daemon measurement stays off and the cells it keeps for them, and [`complete`] for
//! measuring a sparse matrix's inferred cells afterwards, a slice at a time (its rounds
//! on [`spin::crew`]: one spinner per CPU started once per slice and fed each round,
//! where the other modes start two threads per pair per round).
//! The threads are plain named `std::thread`s; callers on an async runtime run these
//! functions on a blocking thread.
//!
//! Must not touch: the daemon's state, files (the caller stores the matrix). Placement
//! only as its caller: sparse plan verification (`sparse/verify.rs`) asks the real
//! planner which CPUs a compact plan takes on the filled cells, so that the cells
//! those plans stand on are measured, not inferred; a planner of its own could choose
//! otherwise. Placement never calls back into measurement.

pub mod around;
pub mod complete;
pub mod drift_check;
pub mod estimator;
pub mod guard;
mod passes;
pub mod pinned;
pub mod plain;
pub mod repeat;
pub(crate) mod rng;
pub mod schedule;
pub mod simulate;
pub mod sparse;
pub mod sparse_real;
pub mod spin;
pub mod validity;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cpuset::CpuSet;
use crate::matrix::{Cells, LatencyMatrix};
use crate::sysroot::SysRoot;
use around::cpu_words;

pub use drift_check::{drift, probe_pairs, probe_sample, Drift, Probe};
pub use estimator::StopRule;
pub use guard::LoadGuard;
use passes::Passes;
pub use sparse::SPARSE_FROM_CPUS;
use validity::{assess, Assessed, Circumstances};

/// The cache-line primitive bounced between the two threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Primitive {
    /// Compare-and-swap on one line (what core-to-core-latency and the public datasets
    /// use).
    #[default]
    Cas,
    /// A store on one line answered by a store on another (c2clat's default). Its
    /// figures are not comparable with CAS figures (2.3× them on the build VM).
    LoadStore,
}

impl Primitive {
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Cas => "cas",
            Primitive::LoadStore => "load-store",
        }
    }
}

/// How pairs are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// One pair at a time: nothing else of ours runs while a pair is measured. `full`
    /// names it too (every pair, as opposed to `sparse`).
    #[default]
    #[value(alias = "full")]
    Serial,
    /// Disjoint pairs in parallel, a round-robin tournament (N−1 rounds of N/2 pairs),
    /// then a sample of pairs re-measured serially to report the disagreement.
    Rounds,
    /// The hierarchy from a few pairs, spot checks per block, full measurement only of
    /// blocks that disagree; the other cells are inferred (see `sparse`).
    Sparse,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Serial => "serial",
            Mode::Rounds => "rounds",
            Mode::Sparse => "sparse",
        }
    }
}

/// Which participant of a pair touches the shared page first (and so where its memory
/// lives on a NUMA machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FirstTouch {
    /// The lower-numbered CPU of the pair.
    #[default]
    Initiator,
    /// The higher-numbered CPU of the pair.
    Responder,
}

impl FirstTouch {
    /// The words stored in the matrix.
    pub fn describe(self) -> &'static str {
        match self {
            FirstTouch::Initiator => "initiator (the lower-numbered CPU of each pair)",
            FirstTouch::Responder => "responder (the higher-numbered CPU of each pair)",
        }
    }
}

/// A measurement that could not be made. Variants name the CPUs, file or thread.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// `--cpus` named no CPU.
    #[error("no CPUs to measure: the CPU list is empty")]
    EmptyCpuList,
    /// More CPUs than a matrix may have.
    #[error(transparent)]
    TooManyCpus(#[from] crate::matrix::TooManyCpus),
    /// Fewer than two CPUs: there is no pair.
    #[error("measuring needs at least two CPUs, got only {}", cpu_words(cpus))]
    TooFewCpus { cpus: CpuSet },
    /// CPUs that are not online here (offline, or not present at all).
    #[error("{} not online on this machine (online: {online})", are(cpus))]
    NotOnline { cpus: CpuSet, online: CpuSet },
    /// CPUs this process may not run on (a cpuset or an inherited affinity).
    #[error("{} outside the CPUs this process may use ({allowed}): a cpuset or an affinity mask excludes them", are(cpus))]
    NotAllowed { cpus: CpuSet, allowed: CpuSet },
    /// The load guard found a CPU too busy to measure.
    #[error("CPU {cpu} is busy: {idle_pct:.0}% idle, below the {threshold_pct:.0}% threshold, still after {waited:.1?} (lower {set_by}, or 0 to measure anyway)")]
    Busy {
        cpu: u32,
        idle_pct: f64,
        threshold_pct: f64,
        waited: Duration,
        /// The flag or setting that sets the threshold.
        set_by: &'static str,
    },
    /// A kernel file could not be read.
    #[error("{path}: {source}")]
    ReadProc {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A kernel file did not parse (line is 1-based).
    #[error("{path}:{line}: {message}")]
    ParseProc {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A spin thread could not be started.
    #[error("starting thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    /// A spin thread panicked.
    #[error("thread {name} panicked")]
    ThreadPanicked { name: String },
    /// The shared page could not be mapped.
    #[error("mapping the shared page: {0}")]
    Memory(std::io::Error),
    /// Not a single pair produced a figure.
    #[error("no pair could be measured: {reason}")]
    NothingMeasured { reason: String },
    /// A latency-critical thread woke on a CPU the measurement uses: it stopped there,
    /// keeping nothing of what it measured.
    #[error("measurement stopped: {reason}")]
    Woken { reason: String },
}

/// `CPU 3 is` or `CPUs 2-5 are`.
fn are(cpus: &CpuSet) -> String {
    if cpus.len() == 1 {
        format!("CPU {cpus} is")
    } else {
        format!("CPUs {cpus} are")
    }
}

/// Everything a measurement needs. [`MeasureConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct MeasureConfig {
    /// The CPUs to measure (checked by [`select_cpus`]); at least two.
    pub cpus: CpuSet,
    /// Time allowed for measuring (after the load guard let the run start); pairs not
    /// reached in time stay empty, with a warning.
    pub budget: Duration,
    pub primitive: Primitive,
    pub mode: Mode,
    pub first_touch: FirstTouch,
    pub guard: LoadGuard,
    /// All measured CPUs spin this long first, so their clocks ramp up.
    pub warmup: Duration,
    /// Unmeasured ping-pong of each pair before its first batch.
    pub pair_warm: Duration,
    /// Target length of one batch (K round trips are calibrated to it).
    pub batch: Duration,
    pub stop: StopRule,
    /// Passes over every pair (at least 2: the repeat that catches disagreement).
    pub passes: u32,
    /// Most passes a pair may get when its passes disagree.
    pub max_passes: u32,
    /// Passes disagreeing by more than this (relative) make a pair ambiguous.
    pub repeat_tolerance: f64,
    /// Pairs re-measured serially after a parallel run, to report the disagreement.
    pub serial_check: usize,
    /// Stored in the matrix (see `fingerprint`).
    pub fingerprint: Option<String>,
    pub root: SysRoot,
    /// Threads whose waking on a measured CPU stops the run ([`MeasureError::Woken`]);
    /// empty: none (see `around`).
    pub wake: around::WakeWatch,
    /// The scheduling priority of the spin and warm-up threads.
    pub priority: around::SpinPriority,
}

impl MeasureConfig {
    /// Defaults: CAS, serial, 300 s budget, 100 ms warm-up, 20 µs batches, two passes
    /// (up to four for ambiguous pairs), load guard at 75% idle.
    pub fn new(cpus: CpuSet) -> MeasureConfig {
        MeasureConfig {
            cpus,
            budget: Duration::from_secs(300),
            primitive: Primitive::Cas,
            mode: Mode::Serial,
            first_touch: FirstTouch::Initiator,
            guard: LoadGuard::default(),
            warmup: Duration::from_millis(100),
            pair_warm: Duration::from_millis(1),
            batch: Duration::from_micros(20),
            stop: StopRule::default(),
            passes: 2,
            max_passes: 4,
            repeat_tolerance: 0.10,
            serial_check: 16,
            fingerprint: None,
            root: SysRoot::default(),
            wake: around::WakeWatch::default(),
            priority: around::SpinPriority::Normal,
        }
    }
}

/// Where a running measurement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the CPUs to be idle.
    Guard,
    /// Spinning every CPU so its clock ramps up.
    Warmup,
    /// Pass `n` (1-based) over the pairs; passes beyond `passes` re-measure ambiguous
    /// pairs only.
    Pass(u32),
    /// Re-measuring a sample serially after a parallel run.
    SerialCheck,
}

/// A progress report: `done` of `total` pair measurements of the current phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub phase: Phase,
    pub done: usize,
    pub total: usize,
    pub elapsed: Duration,
}

/// One pair of the serial cross-check of a parallel run.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossCheck {
    pub a: u32,
    pub b: u32,
    pub rounds_ns: f64,
    pub serial_ns: f64,
}

/// What a run saw beyond the matrix: for benchmarks, the model and the daemon's log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunReport {
    pub elapsed: Duration,
    /// Per measured pair `(a, b)`: its estimate in each pass.
    pub pass_estimates: BTreeMap<(u32, u32), Vec<f64>>,
    /// Pairs whose passes still disagree beyond the tolerance: (a, b, disagreement).
    pub unstable: Vec<(u32, u32, f64)>,
    /// The serial cross-check of a parallel run.
    pub cross_check: Vec<CrossCheck>,
    /// Mean wall time of one pair-pass (serial units) or one round (rounds).
    pub mean_unit: Duration,
    /// Units (pairs or rounds) timed for `mean_unit`.
    pub units: usize,
    pub timer_granularity: Duration,
    pub hypervisor: Option<String>,
}

impl RunReport {
    /// The warning when the serial cross-check disagrees with the parallel rounds by
    /// more than `tolerance` (median).
    pub fn cross_check_warning(&self, tolerance: f64) -> Option<String> {
        let (med, max) = self.cross_check_disagreement()?;
        (med > tolerance).then(|| {
            format!(
                "parallel rounds disagree with serial measurement on {} sampled pairs: median {:.0}%, max {:.0}%",
                self.cross_check.len(),
                med * 100.0,
                max * 100.0
            )
        })
    }

    /// Median and maximum disagreement of the serial cross-check.
    pub fn cross_check_disagreement(&self) -> Option<(f64, f64)> {
        let mut d: Vec<f64> = self
            .cross_check
            .iter()
            .map(|c| estimator::disagreement(c.rounds_ns, c.serial_ns))
            .collect();
        if d.is_empty() {
            return None;
        }
        d.sort_by(f64::total_cmp);
        Some((estimator::percentile(&d, 0.5), d[d.len() - 1]))
    }
}

/// A matrix and the report of how it was obtained.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub matrix: LatencyMatrix,
    pub report: RunReport,
}

/// The CPUs to measure. Without a request: every online CPU except the isolated ones
/// (a note says which were skipped). With one: exactly those, which must be online and
/// usable by this process; isolated CPUs are measured when named. Errors for an empty
/// list, a single CPU, or CPUs offline/unknown/excluded.
pub fn select_cpus(
    requested: Option<&CpuSet>,
    online: &CpuSet,
    isolated: &CpuSet,
    allowed: &CpuSet,
) -> Result<(CpuSet, Vec<String>), MeasureError> {
    let mut notes = Vec::new();
    let cpus = match requested {
        Some(req) => {
            if req.is_empty() {
                return Err(MeasureError::EmptyCpuList);
            }
            let offline = req.difference(online);
            if !offline.is_empty() {
                return Err(MeasureError::NotOnline {
                    cpus: offline,
                    online: online.clone(),
                });
            }
            req.clone()
        }
        None => {
            let skipped = online.intersection(isolated);
            if !skipped.is_empty() {
                notes.push(format!(
                    "isolated CPUs {skipped} skipped (name them with --cpus to measure them)"
                ));
            }
            online.difference(isolated)
        }
    };
    if cpus.len() < 2 {
        return Err(MeasureError::TooFewCpus { cpus });
    }
    let excluded = cpus.difference(allowed);
    if !excluded.is_empty() {
        return Err(MeasureError::NotAllowed {
            cpus: excluded,
            allowed: allowed.clone(),
        });
    }
    Ok((cpus, notes))
}

/// The CPUs the calling thread may run on (its affinity mask), read as the affinity
/// module reads any task's: a mask of any size, and an error said, not an empty set.
pub fn allowed_cpus() -> Result<CpuSet, crate::affinity::AffinityError> {
    use crate::affinity::AffinityOps as _;
    crate::affinity::SystemOps::default().get_affinity(crate::affinity::own_tid())
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Spins one pinned thread per CPU for `d` so the clocks ramp up.
fn warm_up(cpus: &CpuSet, d: Duration, priority: around::SpinPriority) -> Result<(), MeasureError> {
    if d.is_zero() {
        return Ok(());
    }
    let until = Instant::now() + d;
    let mut handles = Vec::new();
    for cpu in cpus.iter() {
        let name = format!("pinnerd-warm-{cpu}");
        let h = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                // A pin that fails only makes the warm-up less useful: the pairs
                // verify their own pins.
                spin::lower_priority(priority);
                let _ = pinned::pin_current(cpu);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            })
            .map_err(|source| MeasureError::Spawn { name, source })?;
        handles.push((format!("pinnerd-warm-{cpu}"), h));
    }
    for (name, h) in handles {
        h.join()
            .map_err(|_| MeasureError::ThreadPanicked { name })?;
    }
    Ok(())
}

/// The engine shared by [`run_detailed`] and [`probe_pairs`]: runs groups of disjoint
/// pairs (one group = one round; serial = groups of one).
struct Engine<'a> {
    cfg: &'a MeasureConfig,
}

impl Engine<'_> {
    fn plan(&self, a: u32, b: u32, deadline: Instant) -> spin::PairPlan {
        spin::PairPlan {
            initiator: a.min(b),
            responder: a.max(b),
            primitive: self.cfg.primitive,
            first_touch: self.cfg.first_touch,
            warm: self.cfg.pair_warm,
            batch: self.cfg.batch,
            stop: self.cfg.stop,
            deadline,
            priority: self.cfg.priority,
        }
    }

    /// Runs the disjoint pairs of `group` together and returns their runs in order.
    fn group(
        &self,
        group: &[(u32, u32)],
        deadline: Instant,
    ) -> Result<Vec<spin::PairRun>, MeasureError> {
        if let Some(reason) = self.cfg.wake.woke(&self.cfg.cpus) {
            return Err(MeasureError::Woken { reason });
        }
        let gate = Arc::new(spin::Gate::default());
        let mut started = Vec::with_capacity(group.len());
        for &(a, b) in group {
            match spin::spawn_pair(self.plan(a, b, deadline), gate.clone()) {
                Ok(t) => started.push(t),
                Err(e) => {
                    spin::abort(&gate);
                    for t in started {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        spin::open(&gate, 2 * started.len());
        started.into_iter().map(|t| t.join()).collect()
    }

    /// [`Engine::group`] on the threads of `crew` (started once, fed this round); on
    /// threads of their own when the round is not disjoint pairs of the crew's CPUs.
    fn crew_group(
        &self,
        crew: &spin::crew::Crew,
        group: &[(u32, u32)],
        deadline: Instant,
    ) -> Result<Vec<spin::PairRun>, MeasureError> {
        if let Some(reason) = self.cfg.wake.woke(&self.cfg.cpus) {
            return Err(MeasureError::Woken { reason });
        }
        let plans: Vec<spin::PairPlan> = group
            .iter()
            .map(|&(a, b)| self.plan(a, b, deadline))
            .collect();
        if !crew.covers(&plans) {
            return self.group(group, deadline);
        }
        crew.round(&plans)
    }

    /// Measures `pairs` (indices into `ids`) one at a time, each in an equal share of
    /// the time left before `deadline`, and hands each pair's runs to `take` with its
    /// place in the list. `Ok(false)`: the budget ran out before the last pair.
    fn one_by_one(
        &self,
        pairs: &[(usize, usize)],
        ids: &[u32],
        deadline: Instant,
        mut take: impl FnMut(usize, (usize, usize), Vec<spin::PairRun>),
    ) -> Result<bool, MeasureError> {
        for (k, &(i, j)) in pairs.iter().enumerate() {
            let left = (pairs.len() - k) as u32;
            let Some(until) = share_of(Instant::now(), deadline, left) else {
                return Ok(false);
            };
            take(k, (i, j), self.group(&[(ids[i], ids[j])], until)?);
        }
        Ok(true)
    }
}

/// Measures the matrix of `cfg.cpus`. See [`run_detailed`] for the report.
pub fn run(
    cfg: &MeasureConfig,
    progress: impl FnMut(Progress),
) -> Result<LatencyMatrix, MeasureError> {
    run_detailed(cfg, progress).map(|m| m.matrix)
}

/// Measures the matrix of `cfg.cpus`: guard, warm-up, `passes` passes over every pair
/// (serially or in tournament rounds), extra passes for pairs whose passes disagree
/// while the budget lasts, the serial cross-check of a parallel run, then the validity
/// warnings.
pub fn run_detailed(
    cfg: &MeasureConfig,
    mut progress: impl FnMut(Progress),
) -> Result<Measurement, MeasureError> {
    let t0 = Instant::now();
    if cfg.cpus.is_empty() {
        return Err(MeasureError::EmptyCpuList);
    }
    if cfg.cpus.len() < 2 {
        return Err(MeasureError::TooFewCpus {
            cpus: cfg.cpus.clone(),
        });
    }
    crate::matrix::check_cpu_count(cfg.cpus.len())?;
    if cfg.mode == Mode::Sparse {
        return sparse_real::run_with_sysfs_prior(cfg, progress);
    }
    let mut report = |phase, done, total| {
        progress(Progress {
            phase,
            done,
            total,
            elapsed: t0.elapsed(),
        })
    };
    let before = get_ready(cfg, &mut report)?;
    // A tenth of the budget is kept for the repeat check at the end.
    let deadline = before.measuring_since + cfg.budget - cfg.budget / repeat::BUDGET_SHARE;
    let mut passes = Passes::new(cfg, deadline);
    passes.every_pair(&mut report)?;
    passes.ambiguous_again(&mut report)?;
    let cross_check = passes.cross_check(&mut report)?;
    let stat_after = guard::read_stat(&cfg.root)?;
    conclude(cfg, t0, before, passes, cross_check, &stat_after)
}

/// What a run saw before its first pass.
struct Before {
    guard_pass: guard::GuardPass,
    /// The CPUs' counters, for the steal during the run.
    stat: guard::StatSnapshot,
    hypervisor: Option<String>,
    granularity: Duration,
    /// When the guard let the run in: the budget is for measuring.
    measuring_since: Instant,
}

/// Waits for the guard, reads what the run is compared with afterwards, and warms the
/// CPUs up (for at most a quarter of the budget).
fn get_ready(
    cfg: &MeasureConfig,
    report: &mut impl FnMut(Phase, usize, usize),
) -> Result<Before, MeasureError> {
    report(Phase::Guard, 0, 1);
    let guard_pass = cfg
        .guard
        .wait_idle_reporting(&cfg.root, &cfg.cpus, |_, _| report(Phase::Guard, 0, 1))?;
    let stat = guard::read_stat(&cfg.root)?;
    let hypervisor = validity::hypervisor(&cfg.root);
    let granularity = validity::timer_granularity();
    // The budget is for measuring: it starts once the guard let us in, and the warm-up
    // takes at most a quarter of it.
    let measuring_since = Instant::now();
    report(Phase::Warmup, 0, 1);
    warm_up(&cfg.cpus, cfg.warmup.min(cfg.budget / 4), cfg.priority)?;
    Ok(Before {
        guard_pass,
        stat,
        hypervisor,
        granularity,
        measuring_since,
    })
}

/// The matrix and report of a run whose passes are over: the validity assessment, the
/// cross-check's warning, and the repeat check; an error when no pair has a figure.
fn conclude(
    cfg: &MeasureConfig,
    t0: Instant,
    before: Before,
    passes: Passes<'_>,
    cross_check: Vec<CrossCheck>,
    stat_after: &guard::StatSnapshot,
) -> Result<Measurement, MeasureError> {
    let steal = guard::steal_ticks(&before.stat, stat_after, &cfg.cpus);
    let Assessed {
        latency,
        stats,
        mut warnings,
        pass_estimates,
        unstable,
    } = assess(
        &passes.ids,
        &passes.acc,
        &Circumstances {
            hypervisor: before.hypervisor.as_deref(),
            steal: &steal,
            budget_ran_out: passes.budget_ran_out,
            budget: cfg.budget,
            repeat_tolerance: cfg.repeat_tolerance,
            granularity: before.granularity,
        },
    );
    let report_out = RunReport {
        elapsed: t0.elapsed(),
        pass_estimates,
        unstable,
        cross_check,
        mean_unit: passes.mean_unit(),
        units: passes.units_done,
        timer_granularity: before.granularity,
        hypervisor: before.hypervisor,
    };
    warnings.extend(report_out.cross_check_warning(cfg.repeat_tolerance));
    if stats.is_empty() {
        return Err(MeasureError::NothingMeasured {
            reason: if warnings.is_empty() {
                "every batch was discarded".into()
            } else {
                warnings.join("; ")
            },
        });
    }
    if let Some((cpu, share)) = before.guard_pass.least_idle {
        tracing::info!(
            cpu,
            idle_pct = share * 100.0,
            "load guard passed: the least idle CPU, {cpu}, is {:.0}% idle",
            share * 100.0
        );
    }
    let mut matrix = LatencyMatrix::new(passes.ids, Cells::from_rows(&latency));
    matrix.primitive = Some(cfg.primitive.as_str().to_string());
    matrix.measured_at_us = Some(now_us());
    matrix.measure_seconds = Some(before.measuring_since.elapsed().as_secs_f64());
    matrix.fingerprint = cfg.fingerprint.clone();
    matrix.first_touch = Some(cfg.first_touch.describe().to_string());
    matrix.mode = Some(cfg.mode.as_str().to_string());
    matrix.stats = stats;
    matrix.warnings = warnings;
    let vm = report_out.hypervisor.is_some();
    sparse_real::repeat_check(&mut matrix, cfg, before.measuring_since + cfg.budget, vm)?;
    Ok(Measurement {
        matrix,
        report: report_out,
    })
}

/// The end of the first of `left` equal shares of the time from `now` to `deadline`;
/// `None` once the deadline has passed (the budget ran out).
fn share_of(now: Instant, deadline: Instant, left: u32) -> Option<Instant> {
    (now < deadline).then(|| now + (deadline - now) / left)
}

/// Busy-spin pairs need both CPUs of a small machine to themselves: unit tests that spin
/// take turns, or two of them would preempt each other and starve.
#[cfg(test)]
pub(crate) fn one_spinner_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SPINNERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SPINNERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
