//! When the periodic work of [`State`](super::State) is due next.
//!
//! Owns: the instants the tick compares with. Must not touch: the work itself, which
//! the state's tick does when these say it is due.

use std::time::Instant;

use super::super::schedule::Timing;

/// When periodic work is due next; `None` = not due.
#[derive(Debug)]
pub(super) struct Timers {
    pub(super) next_rescan: Option<Instant>,
    /// A journal write deferred after process events (see
    /// [`JOURNAL_DELAY`](super::JOURNAL_DELAY)).
    pub(super) journal_due: Option<Instant>,
    /// A rescan after a hotplug, for the cgroup cpusets (see
    /// [`HOTPLUG_RECHECK`](super::HOTPLUG_RECHECK)).
    pub(super) hotplug_recheck: Option<Instant>,
    pub(super) next_fingerprint: Instant,
    pub(super) next_watchdog: Option<Instant>,
    /// When slots no thread holds may be let go next (see
    /// [`SLOTS_KEPT`](super::SLOTS_KEPT)).
    pub(super) next_slot_release: Instant,
}

impl Timers {
    pub(super) fn new(timing: &Timing, now: Instant) -> Timers {
        Timers {
            next_rescan: None,
            journal_due: None,
            hotplug_recheck: None,
            next_fingerprint: now + timing.fingerprint_every,
            next_watchdog: timing.watchdog_every.map(|d| now + d),
            next_slot_release: now,
        }
    }

    /// The earliest of the deferred journal write and the hotplug recheck.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match (self.journal_due, self.hotplug_recheck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The periodic work a tick at `now` does, in words: what can take long, not every
    /// check.
    pub(super) fn due_at(&self, now: Instant) -> Vec<&'static str> {
        let due = |at: Option<Instant>| at.is_some_and(|t| now >= t);
        let mut work = Vec::new();
        if due(self.journal_due) {
            work.push("restore journal write");
        }
        if due(self.hotplug_recheck) {
            work.push("rescan after a hotplug");
        }
        if now >= self.next_fingerprint {
            work.push("fingerprint check");
        }
        if due(self.next_rescan) {
            work.push("rescan");
        }
        work
    }
}
