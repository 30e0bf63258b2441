//! The daemon's state and its synchronous handler.
//!
//! [`State::handle`] takes one [`Event`] and leaves [`Action`]s for the shell to carry
//! out (emit a signal, start a measurement job, tell systemd something, exit). Commands
//! are answered by [`State::command`], which unit tests call directly.
//!
//! Measurement lifecycle:
//! - at start, the stored matrix is used if its fingerprint matches; otherwise a full
//!   measurement starts;
//! - a changed fingerprint (BIOS, microcode, SMT, hotplug) starts a full measurement;
//! - `Remeasure` starts one, or joins the one running (calls coalesce);
//! - periodically, when idle, a drift probe measures a few pairs, and only drift found
//!   there starts a full measurement;
//! - until a matrix exists, placement uses the sysfs topology alone.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cpuset::CpuSet;
use crate::dbus::Signal;
use crate::fingerprint::Fingerprint;
use crate::matrix::LatencyMatrix;
use crate::sysroot::SysRoot;
use crate::topology::Topology;

use super::worker::{self, Job, JobKind, Outcome};
use super::{Command, CommandError, Event, Phase, ReloadCause, Reply, Snapshot};

/// Where the daemon reads and writes.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings file; `None` = built-in defaults.
    pub settings: Option<PathBuf>,
    pub rule_dirs: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub runtime_dir: PathBuf,
    pub sysroot: SysRoot,
}

/// Something the shell must do for the loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Emit(Signal),
    Measure(Job),
    /// A `STATUS=` line for systemd.
    Status(String),
    /// `WATCHDOG=1`: the loop is alive.
    Watchdog,
    /// `RELOADING=1` … then `READY=1` once reloaded.
    Reloading,
    Ready,
    /// Masks are restored; stop.
    Exit,
}

/// Periodic work and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Drift probe period; `None` = never.
    pub drift_every: Option<Duration>,
    /// How often the hardware fingerprint is re-read.
    pub fingerprint_every: Duration,
    /// Watchdog ping period (half of systemd's `WatchdogSec`); `None` = no watchdog.
    pub watchdog_every: Option<Duration>,
    /// Budget of a full measurement.
    pub full_budget: Duration,
    /// Budget of a drift probe.
    pub probe_budget: Duration,
    /// Pairs in a drift probe.
    pub probe_pairs: usize,
    /// Relative change that counts as drift.
    pub drift_tolerance: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            drift_every: Some(Duration::from_secs(6 * 3600)),
            fingerprint_every: Duration::from_secs(60),
            watchdog_every: None,
            full_budget: Duration::from_secs(2),
            probe_budget: Duration::from_millis(200),
            probe_pairs: 3,
            drift_tolerance: 0.25,
        }
    }
}

/// A measurement in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Running {
    id: u64,
    full: bool,
}

/// The matrix in use.
#[derive(Debug, Clone, PartialEq)]
struct Current {
    matrix: LatencyMatrix,
    measured_at_us: u64,
}

/// All daemon state. Owned by one thread.
pub struct State {
    cfg: Config,
    timing: Timing,
    fingerprint: Option<Fingerprint>,
    topology: Option<Topology>,
    current: Option<Current>,
    running: Option<Running>,
    /// A full measurement promised (id given out) while a drift probe runs.
    queued_full: Option<u64>,
    last_failure: Option<String>,
    next_job: u64,
    next_drift: Option<Instant>,
    next_fingerprint: Instant,
    next_watchdog: Option<Instant>,
    rule_count: u32,
    rule_errors: Vec<String>,
    started: bool,
    actions: Vec<Action>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl State {
    /// A state that has read nothing yet; [`State::start`] reads the machine.
    pub fn new(cfg: Config, timing: Timing, now: Instant) -> State {
        State {
            cfg,
            next_watchdog: timing.watchdog_every.map(|d| now + d),
            next_drift: timing.drift_every.map(|d| now + d),
            next_fingerprint: now + timing.fingerprint_every,
            timing,
            fingerprint: None,
            topology: None,
            current: None,
            running: None,
            queued_full: None,
            last_failure: None,
            next_job: 1,
            rule_count: 0,
            rule_errors: Vec::new(),
            started: false,
            actions: Vec::new(),
        }
    }

    /// Reads the machine, the stored matrix and the rules; starts a measurement when no
    /// stored matrix fits.
    pub fn start(&mut self, now: Instant) {
        self.read_machine();
        self.load_stored_matrix();
        self.reload(ReloadCause::Signal);
        if self.current.is_none() {
            self.start_full(now);
        }
        self.started = true;
        self.status();
    }

    /// The actions left for the shell, oldest first.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// What readers see now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            version: env!("CARGO_PKG_VERSION").to_string(),
            state: self.phase(),
            measured_at_us: self.current.as_ref().map_or(0, |c| c.measured_at_us),
            fingerprint: self
                .fingerprint
                .as_ref()
                .map(|f| f.hex.clone())
                .unwrap_or_default(),
            cpu_count: self.online().len() as u32,
            rule_count: self.rule_count,
            managed_processes: 0,
            managed_threads: 0,
            rule_errors: self.rule_errors.clone(),
        }
    }

    fn phase(&self) -> Phase {
        if !self.started {
            Phase::Starting
        } else if self.running.is_some_and(|r| r.full) {
            Phase::Measuring
        } else if self.current.is_none() && self.last_failure.is_some() {
            Phase::Degraded
        } else {
            Phase::Ready
        }
    }

    /// Handles one event.
    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Command(cmd, reply) => {
                let answer = self.command(cmd);
                // The caller may have given up (timeout); nothing to do then.
                let _ = reply.send(answer);
            }
            Event::Reload(cause) => {
                self.actions.push(Action::Reloading);
                self.reload(cause);
                self.actions.push(Action::Ready);
            }
            Event::Terminate => {
                tracing::info!("terminating: restoring masks");
                self.actions
                    .push(Action::Status("stopping: restoring masks".into()));
                self.actions.push(Action::Exit);
            }
            Event::Tick(now) => self.tick(now),
            Event::Measured(outcome) => self.measured(outcome),
        }
    }

    /// Answers one command.
    pub fn command(&mut self, cmd: Command) -> Result<Reply, CommandError> {
        match cmd {
            Command::Remeasure => Ok(Reply::Job(self.remeasure(Instant::now()))),
            Command::Reload => {
                self.reload(ReloadCause::Bus);
                Ok(Reply::Reloaded {
                    rules: self.rule_count,
                    errors: self.rule_errors.clone(),
                })
            }
            Command::GetMatrix => Ok(self.matrix_reply()),
            Command::ListManaged => Ok(Reply::Managed(Vec::new())),
            Command::Explain { pid } => Err(CommandError::NoSuchProcess(pid)),
            Command::Plan { .. } => Err(CommandError::Failed(
                "placement is not part of this build".into(),
            )),
            Command::Pin { .. } => Err(CommandError::Failed(
                "placement is not part of this build".into(),
            )),
            Command::Release { pid } => Err(CommandError::NotManaged(pid)),
        }
    }

    fn matrix_reply(&self) -> Reply {
        match &self.current {
            Some(c) => Reply::Matrix {
                cpus: c.matrix.cpus.clone(),
                latency_ns: c
                    .matrix
                    .latency_ns
                    .iter()
                    .map(|row| row.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
                    .collect(),
            },
            None => Reply::Matrix {
                cpus: Vec::new(),
                latency_ns: Vec::new(),
            },
        }
    }

    /// Online CPUs as last read; empty before the first read.
    fn online(&self) -> CpuSet {
        self.topology
            .as_ref()
            .map(|t| t.online.clone())
            .unwrap_or_default()
    }

    /// CPUs a measurement may use: online and not isolated.
    fn usable(&self) -> CpuSet {
        self.topology
            .as_ref()
            .map(Topology::usable)
            .unwrap_or_default()
    }

    /// Re-reads the topology and the fingerprint; true when the fingerprint changed
    /// (or was read for the first time).
    fn read_machine(&mut self) -> bool {
        match Topology::discover(&self.cfg.sysroot) {
            Ok(t) => {
                for w in &t.warnings {
                    tracing::debug!(warning = %w, "topology");
                }
                self.topology = Some(t);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the CPU topology; keeping the last one")
            }
        }
        match Fingerprint::read(&self.cfg.sysroot) {
            Ok(fp) => {
                let changed = match &self.fingerprint {
                    Some(old) if old.matches(&fp) => false,
                    Some(old) => {
                        for d in old.differences(&fp) {
                            tracing::info!(change = %d, "hardware fingerprint changed");
                        }
                        true
                    }
                    None => true,
                };
                self.fingerprint = Some(fp);
                changed
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the hardware fingerprint");
                false
            }
        }
    }

    fn load_stored_matrix(&mut self) {}

    fn reload(&mut self, cause: ReloadCause) {
        tracing::info!(?cause, "reloading rules");
        self.actions.push(Action::Emit(Signal::RulesReloaded {
            rules: self.rule_count,
            errors: self.rule_errors.clone(),
        }));
        self.status();
    }

    fn alloc_job(&mut self) -> u64 {
        let id = self.next_job;
        self.next_job += 1;
        id
    }

    /// `Remeasure`: joins a running or promised full measurement, else starts one.
    fn remeasure(&mut self, now: Instant) -> u64 {
        if let Some(r) = self.running.filter(|r| r.full) {
            return r.id;
        }
        if let Some(id) = self.queued_full {
            return id;
        }
        if self.running.is_some() {
            // A drift probe is running; the full measurement follows it.
            let id = self.alloc_job();
            self.queued_full = Some(id);
            return id;
        }
        self.start_full(now)
    }

    /// The matrix no longer describes this machine: use a stored one for the new
    /// fingerprint, or measure.
    fn fingerprint_changed(&mut self, now: Instant) {
        self.current = None;
        self.load_stored_matrix();
        if self.current.is_none() {
            self.remeasure(now);
        }
        self.status();
    }

    fn start_full(&mut self, _now: Instant) -> u64 {
        let id = self.alloc_job();
        self.launch_full(id);
        id
    }

    fn launch_full(&mut self, id: u64) {
        self.running = Some(Running { id, full: true });
        let cpus = self.usable();
        tracing::info!(job = id, %cpus, "starting a full measurement");
        self.actions.push(Action::Measure(Job {
            id,
            kind: JobKind::Full {
                cpus,
                budget: self.timing.full_budget,
            },
            sysroot: self.cfg.sysroot.clone(),
        }));
        self.status();
    }

    fn start_drift_probe(&mut self) {
        let Some(cur) = &self.current else { return };
        let pairs = worker::probe_pairs(&cur.matrix, self.timing.probe_pairs);
        if pairs.is_empty() {
            return;
        }
        let id = self.alloc_job();
        self.running = Some(Running { id, full: false });
        tracing::debug!(job = id, pairs = pairs.len(), "drift probe");
        self.actions.push(Action::Measure(Job {
            id,
            kind: JobKind::Drift {
                pairs,
                budget: self.timing.probe_budget,
            },
            sysroot: self.cfg.sysroot.clone(),
        }));
    }

    fn measured(&mut self, outcome: Outcome) {
        let Some(running) = self.running.filter(|r| r.id == outcome.id) else {
            tracing::warn!(
                job = outcome.id,
                "result of a job that is not running; ignored"
            );
            return;
        };
        self.running = None;
        match (running.full, outcome.result) {
            (true, Ok(worker::Result::Matrix(matrix))) => {
                let summary = summarize(&matrix);
                tracing::info!(job = running.id, %summary, "measurement finished");
                self.last_failure = None;
                self.current = Some(Current {
                    matrix,
                    measured_at_us: now_us(),
                });
                self.actions.push(Action::Emit(Signal::MeasurementFinished {
                    job: running.id,
                    ok: true,
                    summary,
                }));
            }
            (true, Ok(other)) => {
                self.full_failed(running.id, format!("unexpected result {other:?}"))
            }
            (true, Err(e)) => self.full_failed(running.id, e),
            (false, Ok(worker::Result::Pairs(got))) => {
                let expected = self
                    .current
                    .as_ref()
                    .map(|c| worker::probe_pairs(&c.matrix, self.timing.probe_pairs))
                    .unwrap_or_default();
                if let Some(moved) =
                    worker::drift(&got, &expected, self.timing.drift_tolerance, 5.0)
                {
                    tracing::info!(%moved, "drift found; measuring the full matrix");
                    if self.queued_full.is_none() {
                        let id = self.alloc_job();
                        self.queued_full = Some(id);
                    }
                } else {
                    tracing::debug!("drift probe: no drift");
                }
            }
            (false, Ok(other)) => {
                tracing::warn!(job = running.id, "unexpected probe result {other:?}")
            }
            (false, Err(e)) => tracing::warn!(job = running.id, error = %e, "drift probe failed"),
        }
        if let Some(id) = self.queued_full.take() {
            self.launch_full(id);
        }
        self.status();
    }

    fn full_failed(&mut self, id: u64, why: String) {
        tracing::warn!(job = id, error = %why, "measurement failed");
        self.actions.push(Action::Emit(Signal::MeasurementFinished {
            job: id,
            ok: false,
            summary: why.clone(),
        }));
        self.last_failure = Some(why);
    }

    fn tick(&mut self, now: Instant) {
        if let (Some(every), Some(due)) = (self.timing.watchdog_every, self.next_watchdog) {
            if now >= due {
                self.actions.push(Action::Watchdog);
                self.next_watchdog = Some(now + every);
            }
        }
        if now >= self.next_fingerprint {
            self.next_fingerprint = now + self.timing.fingerprint_every;
            if self.read_machine() {
                self.fingerprint_changed(now);
            }
        }
        if let (Some(every), Some(due)) = (self.timing.drift_every, self.next_drift) {
            if now >= due && self.running.is_none() {
                self.next_drift = Some(now + every);
                self.start_drift_probe();
            }
        }
    }

    fn status(&mut self) {
        let s = self.snapshot();
        let matrix = match &self.current {
            Some(c) => format!("matrix of {} CPUs", c.matrix.len()),
            None => "no matrix (sysfs topology)".to_string(),
        };
        self.actions.push(Action::Status(format!(
            "{}: {} rules, {} errors, {} processes managed, {matrix}",
            s.state.as_str(),
            s.rule_count,
            s.rule_errors.len(),
            s.managed_processes
        )));
    }
}

/// One line about a matrix: size and latency range.
pub fn summarize(m: &LatencyMatrix) -> String {
    let mut vals: Vec<f64> = Vec::new();
    for i in 0..m.len() {
        for j in 0..i {
            if let Some(v) = m.at(i, j) {
                vals.push(v);
            }
        }
    }
    vals.sort_by(f64::total_cmp);
    match (vals.first(), vals.last()) {
        (Some(lo), Some(hi)) => format!(
            "{} CPUs, {lo:.0}–{hi:.0} ns one-way, median {:.0} ns",
            m.len(),
            vals[vals.len() / 2]
        ),
        _ => format!("{} CPUs, no pairs", m.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(timing: Timing) -> (State, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            settings: None,
            rule_dirs: vec![dir.path().join("rules")],
            state_dir: dir.path().join("state"),
            runtime_dir: dir.path().join("runtime"),
            sysroot: SysRoot::default(),
        };
        std::fs::create_dir_all(&cfg.rule_dirs[0]).unwrap();
        std::fs::create_dir_all(&cfg.state_dir).unwrap();
        std::fs::create_dir_all(&cfg.runtime_dir).unwrap();
        (State::new(cfg, timing, Instant::now()), dir)
    }

    fn jobs(actions: &[Action]) -> Vec<Job> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Measure(j) => Some(j.clone()),
                _ => None,
            })
            .collect()
    }

    fn finished(actions: &[Action]) -> Vec<(u64, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Emit(Signal::MeasurementFinished { job, ok, .. }) => Some((*job, *ok)),
                _ => None,
            })
            .collect()
    }

    fn matrix() -> LatencyMatrix {
        LatencyMatrix::from_fn(vec![0, 1], |_, _| 40.0)
    }

    fn ok_matrix(id: u64) -> Event {
        Event::Measured(Outcome {
            id,
            result: Ok(worker::Result::Matrix(matrix())),
        })
    }

    #[test]
    fn without_a_stored_matrix_start_measures_and_remeasure_joins_it() {
        let (mut s, _d) = state(Timing::default());
        s.start(Instant::now());
        let a = s.take_actions();
        let started = jobs(&a);
        assert_eq!(started.len(), 1, "{a:?}");
        assert!(matches!(started[0].kind, JobKind::Full { .. }));
        assert_eq!(s.snapshot().state, Phase::Measuring);
        assert_eq!(s.snapshot().measured_at_us, 0);
        // Concurrent Remeasure calls coalesce into the running job.
        let id = started[0].id;
        assert_eq!(s.command(Command::Remeasure), Ok(Reply::Job(id)));
        assert_eq!(s.command(Command::Remeasure), Ok(Reply::Job(id)));
        assert!(jobs(&s.take_actions()).is_empty());

        s.handle(ok_matrix(id));
        let a = s.take_actions();
        assert_eq!(finished(&a), vec![(id, true)]);
        let snap = s.snapshot();
        assert_eq!(snap.state, Phase::Ready);
        assert!(snap.measured_at_us > 0);
        match s.command(Command::GetMatrix).unwrap() {
            Reply::Matrix { cpus, latency_ns } => {
                assert_eq!(cpus, vec![0, 1]);
                assert!(latency_ns[0][0].is_nan());
                assert_eq!(latency_ns[0][1], 40.0);
            }
            other => panic!("{other:?}"),
        }
        // A later Remeasure is a new job.
        let Ok(Reply::Job(next)) = s.command(Command::Remeasure) else {
            panic!()
        };
        assert!(next > id);
        assert_eq!(jobs(&s.take_actions()).len(), 1);
    }

    #[test]
    fn a_failed_first_measurement_degrades() {
        let (mut s, _d) = state(Timing::default());
        s.start(Instant::now());
        let id = jobs(&s.take_actions())[0].id;
        s.handle(Event::Measured(Outcome {
            id,
            result: Err("CPUs busy".into()),
        }));
        assert_eq!(finished(&s.take_actions()), vec![(id, false)]);
        assert_eq!(s.snapshot().state, Phase::Degraded);
    }

    #[test]
    fn a_stale_result_is_ignored() {
        let (mut s, _d) = state(Timing::default());
        s.start(Instant::now());
        let id = jobs(&s.take_actions())[0].id;
        s.handle(ok_matrix(id + 100));
        assert!(finished(&s.take_actions()).is_empty());
        assert_eq!(s.snapshot().state, Phase::Measuring);
    }

    #[test]
    fn drift_probe_runs_when_due_and_only_drift_triggers_a_full_measurement() {
        let t0 = Instant::now();
        let timing = Timing {
            drift_every: Some(Duration::from_secs(10)),
            ..Timing::default()
        };
        let (mut s, _d) = state(timing);
        s.start(t0);
        let id = jobs(&s.take_actions())[0].id;
        s.handle(ok_matrix(id));
        s.take_actions();

        // Not due yet.
        s.handle(Event::Tick(t0 + Duration::from_secs(5)));
        assert!(jobs(&s.take_actions()).is_empty());
        // Due: a probe, not a full measurement; the phase stays ready.
        s.handle(Event::Tick(t0 + Duration::from_secs(11)));
        let probe = jobs(&s.take_actions());
        assert_eq!(probe.len(), 1);
        let JobKind::Drift { pairs, .. } = &probe[0].kind else {
            panic!("{probe:?}")
        };
        assert_eq!(pairs, &vec![(0, 1, 40.0)]);
        assert_eq!(s.snapshot().state, Phase::Ready);
        // Same latency: no full measurement.
        s.handle(Event::Measured(Outcome {
            id: probe[0].id,
            result: Ok(worker::Result::Pairs(vec![(0, 1, 42.0)])),
        }));
        assert!(jobs(&s.take_actions()).is_empty());

        // Next probe finds drift: a full measurement follows.
        s.handle(Event::Tick(t0 + Duration::from_secs(22)));
        let probe = jobs(&s.take_actions());
        assert_eq!(probe.len(), 1);
        s.handle(Event::Measured(Outcome {
            id: probe[0].id,
            result: Ok(worker::Result::Pairs(vec![(0, 1, 120.0)])),
        }));
        let full = jobs(&s.take_actions());
        assert_eq!(full.len(), 1);
        assert!(matches!(full[0].kind, JobKind::Full { .. }));
        assert_eq!(s.snapshot().state, Phase::Measuring);
    }

    #[test]
    fn remeasure_during_a_probe_is_promised_and_runs_after_it() {
        let t0 = Instant::now();
        let timing = Timing {
            drift_every: Some(Duration::from_secs(1)),
            ..Timing::default()
        };
        let (mut s, _d) = state(timing);
        s.start(t0);
        let id = jobs(&s.take_actions())[0].id;
        s.handle(ok_matrix(id));
        s.take_actions();
        s.handle(Event::Tick(t0 + Duration::from_secs(2)));
        let probe = jobs(&s.take_actions())[0].id;
        let Ok(Reply::Job(promised)) = s.command(Command::Remeasure) else {
            panic!()
        };
        assert_eq!(
            s.command(Command::Remeasure),
            Ok(Reply::Job(promised)),
            "coalesced"
        );
        assert!(jobs(&s.take_actions()).is_empty(), "waits for the probe");
        s.handle(Event::Measured(Outcome {
            id: probe,
            result: Err("busy".into()),
        }));
        let full = jobs(&s.take_actions());
        assert_eq!(full.len(), 1);
        assert_eq!(full[0].id, promised);
    }

    #[test]
    fn watchdog_pings_come_from_ticks() {
        let t0 = Instant::now();
        let timing = Timing {
            watchdog_every: Some(Duration::from_secs(5)),
            ..Timing::default()
        };
        let (mut s, _d) = state(timing);
        s.start(t0);
        s.take_actions();
        s.handle(Event::Tick(t0 + Duration::from_secs(1)));
        assert!(!s.take_actions().contains(&Action::Watchdog));
        s.handle(Event::Tick(t0 + Duration::from_secs(6)));
        assert!(s.take_actions().contains(&Action::Watchdog));
    }

    #[test]
    fn terminate_exits() {
        let (mut s, _d) = state(Timing::default());
        s.start(Instant::now());
        s.take_actions();
        s.handle(Event::Terminate);
        assert_eq!(s.take_actions().last(), Some(&Action::Exit));
    }
}
