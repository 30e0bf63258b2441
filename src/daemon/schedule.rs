//! When measurements run: job ids, the one running, the full measurement promised
//! behind a drift probe, `Remeasure` calls joining each other, and the periodic full
//! measurement and drift probe.
//!
//! Owns: that bookkeeping. Pure: the caller passes the time and starts what it is told
//! to start. Must not touch: measuring itself, matrices, actions.

use std::time::{Duration, Instant};

use crate::settings::Settings;

/// Periodic work and how often, from the settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Full re-measure period; `None` = only on fingerprint change, drift or request.
    pub full_every: Option<Duration>,
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
    /// Minimum idle share of every measured CPU (0 = measure regardless).
    pub min_idle: f64,
    /// `Remeasure` calls closer together than this join the previous call's job.
    pub remeasure_min_interval: Duration,
}

impl Timing {
    pub fn from_settings(s: &Settings, watchdog_every: Option<Duration>) -> Timing {
        let m = &s.measure;
        Timing {
            full_every: m.interval.period(),
            drift_every: m.drift_probe.period(),
            fingerprint_every: Duration::from_secs(60),
            watchdog_every,
            full_budget: m.budget.0,
            // A probe is a few pairs: a small slice of the full budget.
            probe_budget: (m.budget.0 / 20)
                .clamp(Duration::from_millis(100), Duration::from_secs(5)),
            probe_pairs: m.drift_pairs as usize,
            drift_tolerance: m.drift_threshold.0,
            min_idle: m.idle_threshold.share().clamp(0.0, 1.0),
            remeasure_min_interval: s.limits.remeasure_min_interval.0,
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing::from_settings(&Settings::default(), None)
    }
}

/// A measurement in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub id: u64,
    /// A full measurement (else a drift probe).
    pub full: bool,
    /// Measures the pairs the stored matrix lacks (its result is added to the store).
    pub fill: bool,
}

/// What a `Remeasure` call gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remeasure {
    /// The full measurement running or promised: its id.
    Joined(u64),
    /// The previous call's job, which ended a moment ago: tell this caller again how,
    /// and that it is that earlier job (asked for `asked_ago` before this call).
    Ended {
        job: u64,
        ok: bool,
        summary: String,
        asked_ago: Duration,
    },
    /// A full measurement promised after the running drift probe.
    Queued(u64),
    /// Start a full measurement with this id now.
    Start(u64),
}

impl Remeasure {
    pub fn job(&self) -> u64 {
        match self {
            Remeasure::Joined(id) | Remeasure::Queued(id) | Remeasure::Start(id) => *id,
            Remeasure::Ended { job, .. } => *job,
        }
    }
}

/// What periodic work is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Full,
    Drift,
}

/// The measurement schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    running: Option<Running>,
    /// A full measurement promised (id given out) while a drift probe runs.
    queued_full: Option<u64>,
    /// The last full measurement that ended: (job, ok, summary).
    last_finished: Option<(u64, bool, String)>,
    /// The last `Remeasure` call: when, and the job it got.
    last_remeasure: Option<(Instant, u64)>,
    /// The job the last `Remeasure` got, and when a call first got it.
    first_asked: Option<(u64, Instant)>,
    next_job: u64,
    next_full: Option<Instant>,
    next_drift: Option<Instant>,
}

impl Schedule {
    pub fn new(timing: &Timing, now: Instant) -> Schedule {
        Schedule {
            running: None,
            queued_full: None,
            last_finished: None,
            last_remeasure: None,
            first_asked: None,
            next_job: 1,
            next_full: timing.full_every.map(|d| now + d),
            next_drift: timing.drift_every.map(|d| now + d),
        }
    }

    pub fn running(&self) -> Option<Running> {
        self.running
    }

    /// A new job id.
    pub fn alloc(&mut self) -> u64 {
        let id = self.next_job;
        self.next_job += 1;
        id
    }

    /// Job `id` starts now.
    pub fn started(&mut self, id: u64, full: bool) {
        self.running = Some(Running {
            id,
            full,
            fill: false,
        });
    }

    /// Job `id`, measuring the pairs the stored matrix lacks, starts now.
    pub fn started_fill(&mut self, id: u64) {
        self.running = Some(Running {
            id,
            full: false,
            fill: true,
        });
    }

    /// `Remeasure` at `now`: joins a running or promised full measurement, or the
    /// previous call's job when it came less than `min_interval` ago; else a new one.
    pub fn remeasure(&mut self, now: Instant, min_interval: Duration) -> Remeasure {
        let r = self.full_needed(now, min_interval);
        self.last_remeasure = Some((now, r.job()));
        if self.first_asked.is_none_or(|(j, _)| j != r.job()) {
            self.first_asked = Some((r.job(), now));
        }
        r
    }

    /// A full measurement is needed (the fingerprint changed): as `Remeasure`, without
    /// counting as a call.
    pub fn full_wanted(&mut self, now: Instant, min_interval: Duration) -> Remeasure {
        self.full_needed(now, min_interval)
    }

    fn full_needed(&mut self, now: Instant, min_interval: Duration) -> Remeasure {
        if let Some(r) = self.running.filter(|r| r.full) {
            return Remeasure::Joined(r.id);
        }
        if let Some(id) = self.queued_full {
            return Remeasure::Joined(id);
        }
        if let Some((at, id)) = self.last_remeasure {
            if now.duration_since(at) < min_interval {
                if let Some((job, ok, summary)) = self.last_finished.clone().filter(|f| f.0 == id) {
                    let asked_ago = self
                        .first_asked
                        .filter(|(j, _)| *j == job)
                        .map_or(Duration::ZERO, |(_, t)| now.duration_since(t));
                    return Remeasure::Ended {
                        job,
                        ok,
                        summary,
                        asked_ago,
                    };
                }
            }
        }
        if self.running.is_some() {
            // A drift probe is running; the full measurement follows it.
            return Remeasure::Queued(self.queue_full());
        }
        Remeasure::Start(self.alloc())
    }

    /// Promises a full measurement after the one running (once): its id.
    pub fn queue_full(&mut self) -> u64 {
        match self.queued_full {
            Some(id) => id,
            None => {
                let id = self.alloc();
                self.queued_full = Some(id);
                id
            }
        }
    }

    /// Job `id` ended: the job it was, if it was the one running.
    pub fn finished(&mut self, id: u64) -> Option<Running> {
        let r = self.running.filter(|r| r.id == id)?;
        self.running = None;
        Some(r)
    }

    /// A full measurement ended with `ok` and `summary`.
    pub fn full_ended(&mut self, job: u64, ok: bool, summary: String) {
        self.last_finished = Some((job, ok, summary));
    }

    /// The full measurement promised, now that nothing runs.
    pub fn take_queued(&mut self) -> Option<u64> {
        self.queued_full.take()
    }

    /// What periodic measurement is due at `now`, when nothing runs.
    pub fn due(&mut self, now: Instant, timing: &Timing) -> Option<Due> {
        if self.running.is_some() {
            return None;
        }
        match (timing.full_every, self.next_full) {
            (Some(every), Some(due)) if now >= due => {
                self.next_full = Some(now + every);
                self.next_drift = timing.drift_every.map(|d| now + d);
                return Some(Due::Full);
            }
            (Some(every), None) => self.next_full = Some(now + every),
            (None, _) => self.next_full = None,
            _ => {}
        }
        match (timing.drift_every, self.next_drift) {
            (Some(every), Some(due)) if now >= due => {
                self.next_drift = Some(now + every);
                Some(Due::Drift)
            }
            (Some(every), None) => {
                self.next_drift = Some(now + every);
                None
            }
            (None, _) => {
                self.next_drift = None;
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            full_every: Some(Duration::from_secs(100)),
            drift_every: Some(Duration::from_secs(10)),
            remeasure_min_interval: Duration::from_secs(5),
            ..Timing::default()
        }
    }

    #[test]
    fn remeasure_calls_join_a_running_full_measurement_or_queue_behind_a_probe() {
        let t0 = Instant::now();
        let min = Duration::from_secs(5);
        let mut s = Schedule::new(&timing(), t0);
        let Remeasure::Start(a) = s.remeasure(t0, min) else {
            panic!("nothing runs: a new job")
        };
        s.started(a, true);
        assert_eq!(s.remeasure(t0, min), Remeasure::Joined(a));
        assert_eq!(
            s.finished(a),
            Some(Running {
                id: a,
                full: true,
                fill: false
            })
        );
        s.full_ended(a, true, "done".into());
        // Soon after, the same caller hears how it ended.
        assert_eq!(
            s.remeasure(t0 + Duration::from_secs(1), min),
            Remeasure::Ended {
                job: a,
                ok: true,
                summary: "done".into(),
                asked_ago: Duration::from_secs(1),
            }
        );
        // Behind a drift probe, one full measurement is promised, once.
        let p = s.alloc();
        s.started(p, false);
        let Remeasure::Queued(q) = s.remeasure(t0 + Duration::from_secs(60), min) else {
            panic!("a probe runs: queued")
        };
        assert_eq!(
            s.remeasure(t0 + Duration::from_secs(61), min),
            Remeasure::Joined(q)
        );
        assert_eq!(s.finished(999), None, "not the running job");
        assert!(s.finished(p).is_some());
        assert_eq!(s.take_queued(), Some(q));
        assert_eq!(s.take_queued(), None);
    }

    #[test]
    fn periodic_work_is_due_only_when_idle_and_a_full_measurement_resets_the_probe() {
        let t0 = Instant::now();
        let t = timing();
        let mut s = Schedule::new(&t, t0);
        assert_eq!(s.due(t0 + Duration::from_secs(1), &t), None);
        assert_eq!(s.due(t0 + Duration::from_secs(10), &t), Some(Due::Drift));
        let probe = s.alloc();
        s.started(probe, false);
        assert_eq!(s.due(t0 + Duration::from_secs(100), &t), None, "busy");
        s.running = None;
        assert_eq!(s.due(t0 + Duration::from_secs(100), &t), Some(Due::Full));
        assert_eq!(
            s.due(t0 + Duration::from_secs(105), &t),
            None,
            "the probe clock restarted with the full measurement"
        );
        assert_eq!(s.due(t0 + Duration::from_secs(110), &t), Some(Due::Drift));
    }
}
