//! The measurement lifecycle of [`State`]: the stored matrix and the pairs it lacks,
//! `Remeasure`, fingerprint changes, full measurements and drift probes, and what their
//! results do. Split from `state/mod.rs` to keep each file readable; same state, same loop.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use crate::api::Signal;
use crate::cpuset::CpuSet;
use crate::matrix::keep;
use crate::matrix::{LatencyMatrix, Stability, Verdict};
use crate::measure::around::{self, Around, WakeWatch};
use crate::measure::{self, MeasureConfig};

use super::super::schedule::Remeasure;
use super::super::worker::{Finished, Job, JobKind, Product};
use super::machine::{MOVE_FLOOR_NS, MOVE_GAIN};
use super::{Action, State};
use crate::manager;
use crate::plan::Choose;

impl State {
    /// A new matrix: new domains for future plans, and the running processes moved only
    /// where the new plan improves on the one applied materially (no churn).
    pub(super) fn matrix_changed(&mut self) {
        self.machine.domains = None;
        if let Err(e) = self.machine.domains() {
            tracing::warn!(error = %e, "no latency domains: {e}");
            return;
        }
        let new = self.new_plan();
        let (Some(m), Some(d)) = (&self.managed.manager, &self.machine.domains) else {
            return;
        };
        let choose = new.choose.as_deref().map(|c| c as &dyn Choose);
        let better = m.plan().improvements(
            &new.plan.in_cpusets(m.plan().cpusets(), choose),
            d,
            MOVE_GAIN,
            MOVE_FLOOR_NS,
        );
        if better.is_empty() {
            tracing::info!("new matrix: current placements are as good; nothing moves");
            return;
        }
        for b in &better {
            tracing::info!(rule = %b.unit, now_ns = b.now_ns, then_ns = b.then_ns, "new matrix improves the placement of {}: {} ns now, {} ns before", b.unit, b.now_ns, b.then_ns);
        }
        self.hand_down(new, manager::Input::PlanChanged);
    }

    /// Measures only the pairs the stored matrix lacks, when that pays
    /// ([`keep::worth_filling`]) and nothing else runs; true when it started.
    pub(super) fn start_fill(&mut self, missing: Vec<(u32, u32)>) -> bool {
        let off = self.around().pairs_off(&missing);
        let missing: Vec<(u32, u32)> = missing.into_iter().filter(|p| !off.contains(p)).collect();
        let n = self.machine.usable().len();
        if self.measurement.busy() || !keep::worth_filling(missing.len(), n) {
            return false;
        }
        let budget = self.measurement.fill_budget(missing.len(), n);
        let cpus: CpuSet = missing.iter().flat_map(|&(a, b)| [a, b]).collect();
        let id = self.measurement.start_fill();
        tracing::info!(
            job = id,
            pairs = missing.len(),
            budget_s = budget.as_secs_f64(),
            "measuring the {} pairs the stored matrix lacks (job {id}, at most {:.1} s)",
            missing.len(),
            budget.as_secs_f64()
        );
        let cfg = self.measure_config(cpus, budget);
        self.actions.push(Action::Measure(Box::new(Job {
            id,
            kind: JobKind::Drift {
                pairs: missing,
                budget,
            },
            cfg,
        })));
        self.status();
        true
    }

    /// The lacking pairs were measured: add them to the store and use the result, or
    /// measure everything when some could not be measured.
    pub(super) fn filled(&mut self, probes: &[measure::Probe]) {
        let cells: Vec<_> = probes.iter().map(|p| (p.a, p.b, p.estimate_ns)).collect();
        if let (Some(store), Some(fp)) = (&self.machine.store, &self.machine.fingerprint) {
            match store.fill(&fp.hex, &cells) {
                Ok(Some(m)) => {
                    if let Some(m) = keep::cover(&m, &self.machine.usable()).matrix {
                        tracing::info!(
                            pairs = cells.len(),
                            "stored matrix completed: {} pairs measured and stored",
                            cells.len()
                        );
                        self.machine.current = Some(m);
                        self.matrix_changed();
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot store the measured pairs: {e}"),
            }
        }
        tracing::info!("pairs still missing; measuring the full matrix");
        self.measurement.queue_full();
    }

    /// `Remeasure`: joins a running or promised full measurement, or the previous call's
    /// job when it came less than `remeasure_min_interval` ago; else starts one.
    pub(super) fn remeasure(&mut self, now: Instant) -> u64 {
        let r = self.measurement.remeasure(now);
        self.follow(r)
    }

    /// Does what the schedule said; the job id the caller gets.
    pub(super) fn follow(&mut self, r: Remeasure) -> u64 {
        match r {
            Remeasure::Joined(id) | Remeasure::Queued(id) => id,
            Remeasure::Ended {
                job,
                ok,
                summary,
                asked_ago,
            } => {
                // That job has ended (nothing runs): tell this caller how, again, and
                // that it is an earlier call's job, not one started for it.
                let summary = format!(
                    "{summary} (job {job}, asked for {} s ago by an earlier call: a new \
                     measurement starts at most every {} s, limits.remeasure-min-interval)",
                    asked_ago.as_secs(),
                    self.measurement.remeasure_min_interval().as_secs()
                );
                self.actions.push(Action::Emit(Signal::MeasurementFinished {
                    job,
                    ok,
                    summary,
                }));
                job
            }
            Remeasure::Start(id) => {
                self.launch_full(id);
                id
            }
        }
    }

    /// The matrix no longer describes this machine: use a stored one for the new
    /// fingerprint, or measure.
    pub(super) fn fingerprint_changed(&mut self, now: Instant) {
        self.machine.current = None;
        let missing = self.machine.load_stored_matrix();
        self.machine.refresh_domains();
        if self.matrix().is_none() && !self.start_fill(missing) {
            if let Some(r) = self.measurement.running_full() {
                // It measures the old CPUs; measure again once it ends.
                self.measurement.queue_full();
                tracing::info!(job = r.id, "measurement in flight (job {}) predates the change; measuring again once it ends", r.id);
            } else {
                let r = self.measurement.full_wanted(now);
                self.follow(r);
            }
        }
        self.status();
    }

    pub(super) fn measure_config(&self, cpus: CpuSet, budget: Duration) -> MeasureConfig {
        let mut cfg = MeasureConfig::new(cpus);
        cfg.budget = budget;
        cfg.guard = self.measurement.load_guard();
        cfg.fingerprint = self.machine.fingerprint_hex();
        cfg.root = self.root().clone();
        cfg.priority = self.loaded.measure().spin_priority;
        let threads = self
            .managed
            .manager()
            .map(|m| m.latency_critical_threads())
            .unwrap_or_default();
        cfg.wake = WakeWatch::new(
            self.root().clone(),
            threads.into_iter().map(|(w, _)| w).collect(),
        );
        cfg
    }

    /// The CPUs measurements stay off now, and why: those of exclusive units, those
    /// the managed threads of latency-critical rules hold, `measure.never-cpus` and the
    /// CPUs excluded from housekeeping (`nohz_full`). Isolated CPUs are not usable at
    /// all.
    pub(super) fn around(&self) -> Around {
        let mut a = Around::new();
        if let Some(m) = &self.managed.manager {
            for u in m.plan().units().iter().filter(|u| u.exclusive) {
                a.add(&u.state.held(), format!("exclusive rule {:?}", u.name()));
            }
            let mut critical: BTreeMap<String, CpuSet> = BTreeMap::new();
            for (w, cpus) in m.latency_critical_threads() {
                let held = critical.entry(w.rule).or_default();
                *held = held.union(&cpus);
            }
            for (rule, cpus) in critical {
                a.add(&cpus, format!("latency-critical rule {rule:?}"));
            }
        }
        a.add(&self.loaded.measure().never_cpus, "measure.never-cpus");
        let (nohz, err) = around::nohz_full(self.root());
        if let Some(e) = err {
            tracing::warn!(error = %e, "cannot read the CPUs excluded from housekeeping: {e}");
        }
        a.add(&nohz, "nohz_full (excluded from housekeeping)");
        a
    }

    /// A full measurement with fewer than two CPUs left to measure: it ends at once,
    /// keeping the earlier cells (if any) and saying so. Not a failure: nothing is
    /// wrong, there is only nothing to measure, and nothing asks again by itself.
    fn nothing_to_measure(&mut self, id: u64, measurable: &CpuSet, a: &Around) {
        self.measurement.finished(id);
        let usable = self.machine.usable();
        let off = usable.intersection(&a.cpus());
        let left = if measurable.is_empty() {
            "no CPU".to_string()
        } else {
            format!("only {}", around::cpu_words(measurable))
        };
        let mut summary = if off.is_empty() {
            format!("nothing measured: {left} is usable")
        } else {
            format!(
                "nothing measured: {left} may be measured ({})",
                a.reason(&off)
            )
        };
        match around::keep(None, self.machine.earlier_matrix().as_ref(), &usable, a) {
            Some(m) => {
                if let Some(k) = &m.kept {
                    summary.push_str(&format!("; {}", around::describe(k)));
                }
                self.machine.store_matrix(id, &m);
                self.machine.current = Some(m);
                self.matrix_changed();
            }
            None => summary.push_str("; no earlier cells to keep"),
        }
        tracing::info!(job = id, %summary, "measurement finished (job {id}): {summary}");
        self.measurement.last_failure = None;
        self.measurement.full_ended(id, true, summary.clone());
        self.actions.push(Action::Emit(Signal::MeasurementFinished {
            job: id,
            ok: true,
            summary,
        }));
        if let Some(next) = self.measurement.take_queued() {
            self.launch_full(next);
        }
    }

    pub(super) fn start_full(&mut self) -> u64 {
        let id = self.measurement.alloc();
        self.launch_full(id);
        id
    }

    pub(super) fn launch_full(&mut self, id: u64) {
        self.measurement.started_full(id);
        let a = self.around();
        let cpus = a.measurable(&self.machine.usable());
        if cpus.len() < 2 {
            self.nothing_to_measure(id, &cpus, &a);
            self.status();
            return;
        }
        if !a.is_empty() {
            tracing::info!(job = id, around = %a.reason(&self.machine.usable()), "measuring around CPUs others hold (job {id}): {}", a.reason(&self.machine.usable()));
        }
        self.measurement.measuring_around = Some(a);
        let budget = self.measurement.full_budget().as_secs_f64();
        tracing::info!(
            job = id, %cpus, budget_s = budget,
            "starting a full measurement (job {id}) of CPUs {cpus}, at most {budget:.1} s"
        );
        let mut cfg = self.measure_config(cpus, self.measurement.full_budget());
        // Sparse from `measure.sparse-from-cpus` CPUs on, also after drift; completed
        // in the background afterwards (see `completing.rs`).
        cfg.mode = measure::Mode::default_for(
            cfg.cpus.len(),
            self.loaded.measure().sparse_from_cpus as usize,
        );
        self.actions.push(Action::Measure(Box::new(Job {
            id,
            kind: JobKind::Full,
            cfg,
        })));
        self.status();
    }

    pub(super) fn start_drift_probe(&mut self) {
        let Some(cur) = &self.machine.current else {
            return;
        };
        if !measure::complete::pending(cur).is_empty() {
            // Completion measures the inferred cells anyway; probing them would see
            // inference error as drift.
            return;
        }
        let mut pairs = self.measurement.probe_sample(cur);
        let off = self.around().pairs_off(&pairs);
        pairs.retain(|p| !off.contains(p));
        if pairs.is_empty() {
            return;
        }
        let cpus: CpuSet = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let id = self.measurement.start_probe();
        tracing::debug!(job = id, pairs = pairs.len(), "drift probe");
        let budget = self.measurement.probe_budget();
        let cfg = self.measure_config(cpus, budget);
        self.actions.push(Action::Measure(Box::new(Job {
            id,
            kind: JobKind::Drift { pairs, budget },
            cfg,
        })));
    }

    pub(super) fn measured(&mut self, outcome: Finished) {
        let Some(running) = self.measurement.finished(outcome.id) else {
            tracing::warn!(
                job = outcome.id,
                "result of job {}, which is not running; ignored",
                outcome.id
            );
            return;
        };
        if self.measurement.is_slice(running.id) {
            self.slice_ended(running.id, outcome.result);
            if let Some(id) = self.measurement.take_queued() {
                self.launch_full(id);
            }
            self.status();
            return;
        }
        match (running.full, outcome.result) {
            (true, Ok(Product::Matrix(matrix))) => self.full_done(running.id, *matrix),
            (true, Ok(other)) => {
                self.full_failed(running.id, format!("unexpected result {other:?}"))
            }
            (true, Err(e)) => self.full_failed(running.id, e.to_string()),
            (false, Ok(Product::Probes(probes))) if running.fill => self.filled(&probes),
            (false, Ok(Product::Probes(probes))) => {
                let drift = self
                    .matrix()
                    .map(|m| self.measurement.drift(m, &probes))
                    .unwrap_or_default();
                if drift.is_empty() {
                    tracing::debug!(pairs = probes.len(), "drift probe: no drift");
                } else {
                    let moved: Vec<String> = drift
                        .iter()
                        .map(|d| {
                            format!("{}↔{} {:.0}→{:.0} ns", d.a, d.b, d.stored_ns, d.probed_ns)
                        })
                        .collect();
                    tracing::info!(moved = %moved.join(", "), "drift found ({}); measuring the full matrix", moved.join(", "));
                    self.unstable_after_drift(running.id, &probes, &drift);
                    self.measurement.queue_full();
                }
            }
            (false, Ok(_)) => {
                tracing::warn!(
                    job = running.id,
                    "job {}: a drift probe ended with a result of another kind; ignored",
                    running.id
                )
            }
            (false, Err(e)) => {
                tracing::warn!(job = running.id, error = %e, "drift probe failed (job {}): {e}", running.id)
            }
        }
        if let Some(id) = self.measurement.take_queued() {
            self.launch_full(id);
        }
        self.status();
    }

    /// Drift found soon after the matrix was measured (within two probe periods, an
    /// hour without periodic probes): the host moved the vCPUs since the repeat check
    /// passed. The matrix in use and the stored one are marked unstable, so placement
    /// uses the sysfs topology until a measurement replaces them.
    fn unstable_after_drift(
        &mut self,
        id: u64,
        probes: &[measure::Probe],
        drift: &[measure::Drift],
    ) {
        let soon = self.measurement.drift_soon();
        let now_us = measure::now_us();
        let Some(m) = self.machine.matrix_mut() else {
            return;
        };
        let Some(age) = m.measured_at_us.map(|at| now_us.saturating_sub(at)) else {
            return;
        };
        if age > soon.as_micros() as u64 {
            return;
        }
        let vm = match &m.stability {
            Some(s) => s.vm,
            None => measure::validity::hypervisor(&self.cfg.sysroot).is_some(),
        };
        m.stability = Some(Stability {
            repeated: probes.iter().filter(|p| p.estimate_ns.is_some()).count(),
            disagreeing: drift.len(),
            nearest_moved: 0,
            tolerance: self.measurement.drift_tolerance(),
            bound: 0.0,
            verdict: Verdict::Unstable,
            vm,
            why: Some(format!(
                "the drift probe found {} pair(s) moved {} s after the measurement",
                drift.len(),
                age / 1_000_000
            )),
        });
        let m = m.clone();
        tracing::warn!(
            job = id,
            line = m.latency_off().unwrap_or_default(),
            "the matrix in use did not hold (job {id}): {}",
            m.latency_off().unwrap_or_default()
        );
        self.machine.store_matrix(id, &m);
        self.matrix_changed();
    }

    pub(super) fn full_done(&mut self, id: u64, matrix: LatencyMatrix) {
        let matrix = match self.measurement.take_around() {
            Some(a) if !a.is_empty() => around::keep(
                Some(&matrix),
                self.machine.earlier_matrix().as_ref(),
                &self.machine.usable(),
                &a,
            )
            .unwrap_or(matrix),
            _ => matrix,
        };
        let s = matrix.summary();
        let mut summary = format!(
            "{} CPUs, {:.0}–{:.0} ns one-way, median {:.0} ns, {} levels",
            matrix.len(),
            s.min_ns,
            s.max_ns,
            s.median_ns,
            s.levels.len()
        );
        // Each warning in words: a count alone says nothing to do.
        for w in &matrix.warnings {
            summary.push_str(&format!("; warning: {w}"));
        }
        if let Some(k) = &matrix.kept {
            summary.push_str(&format!("; {}", around::describe(k)));
        }
        for w in &matrix.warnings {
            tracing::warn!(job = id, warning = %w, "measurement (job {id}): {w}");
        }
        tracing::info!(job = id, %summary, "measurement finished (job {id}): {summary}");
        self.machine.store_matrix(id, &matrix);
        self.measurement.last_failure = None;
        self.machine.current = Some(matrix);
        self.matrix_changed();
        self.measurement.full_ended(id, true, summary.clone());
        self.actions.push(Action::Emit(Signal::MeasurementFinished {
            job: id,
            ok: true,
            summary,
        }));
    }

    pub(super) fn full_failed(&mut self, id: u64, why: String) {
        self.measurement.measuring_around = None;
        tracing::warn!(job = id, error = %why, "measurement failed (job {id}): {why}");
        self.measurement.full_ended(id, false, why.clone());
        self.actions.push(Action::Emit(Signal::MeasurementFinished {
            job: id,
            ok: false,
            summary: why.clone(),
        }));
        self.measurement.last_failure = Some(why);
    }
}
