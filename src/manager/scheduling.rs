//! Scheduling classes: a thread gets the class its rule's table asks for
//! (`sched-policy`, `sched-priority`, `nice`), or a run-time pin's, with the class it
//! had before recorded; it gets that one back when no table asks for one any more, or
//! when it is released (`giving_back`). A class someone else set since is left alone.
//!
//! Must not touch: masks (see `applying`), which processes are managed (see
//! `tracking`), the plan.

use super::{Manager, Source};
use crate::affinity::Tid;
use crate::rules::ThreadPlacement;

impl Manager {
    /// Gives thread `tid` the scheduling class its rule's table asks for
    /// (`sched-policy`, `sched-priority`, `nice`), recording the class it had before; a
    /// thread whose table no longer asks for one gets its own back. A thread someone
    /// else gave another class since is left as it is.
    pub(super) fn apply_sched(&mut self, pid: i32, tid: Tid, placement: ThreadPlacement) {
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        let (rule, want) = match &m.source {
            Source::Rule(r) => (r.name.clone(), r.sched_for(placement)),
            Source::Runtime(_) => (m.source.name(), m.runtime_sched),
        };
        let Some(t) = m.threads.get_mut(&tid) else {
            return;
        };
        let Some(want) = want else {
            let reason = "its entry asks for none";
            if give_back_set(self.ops.as_ref(), (pid, tid), t.sched.take(), reason) {
                self.journal_dirty = true;
            }
            return;
        };
        let attr = want.attr();
        let current = match self.ops.get_sched(tid) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(pid, tid, rule, error = %e, "cannot read its scheduling class");
                return;
            }
        };
        if let Some(had) = t.sched {
            if had.applied == attr && current.has(&attr) {
                return;
            }
            if !current.has(&had.applied) {
                tracing::debug!(pid, tid, rule, found = %current.words(),
                    "not setting its scheduling class: someone else changed it");
                return;
            }
        }
        let original = t.sched.map_or(current, |had| had.original);
        match self.ops.set_sched(tid, &attr) {
            Ok(()) => {
                t.sched = Some(crate::affinity::restore::SchedRestore {
                    original,
                    applied: attr,
                });
                self.journal_dirty = true;
                tracing::debug!(pid, tid, rule, sched = %want.words(), was = %original.words(),
                    "scheduling class set");
            }
            Err(crate::affinity::AffinityError::Gone { .. }) => {}
            Err(e) => {
                self.counters.failed += 1;
                tracing::warn!(pid, tid, rule, sched = %want.words(), error = %e,
                    "pid {pid}, thread {tid} (rule {rule}): setting its scheduling class to {} \
                     failed: {e} (a real-time policy needs CAP_SYS_NICE or a priority within \
                     RLIMIT_RTPRIO, and no RestrictRealtime= in the daemon's unit)",
                    want.words());
            }
        }
    }
}

/// Gives `tid` its own scheduling class back if it still has the one we set.
pub(super) fn give_back_sched(
    ops: &dyn crate::affinity::AffinityOps,
    (pid, tid): (i32, Tid),
    sched: &crate::affinity::restore::SchedRestore,
    reason: &str,
) {
    match sched.give_back(ops, tid) {
        Ok(true) => tracing::debug!(pid, tid, was = %sched.original.words(), reason,
            "scheduling class given back"),
        Ok(false) => tracing::debug!(
            pid,
            tid,
            reason,
            "scheduling class not given back: someone else changed it"
        ),
        Err(crate::affinity::AffinityError::Gone { .. }) => {}
        Err(e) => tracing::warn!(pid, tid, error = %e,
            "pid {pid}, thread {tid}: giving back its scheduling class {} failed: {e}",
            sched.original.words()),
    }
}

/// Gives `tid` its own scheduling class back if we set one (`set`, taken off its
/// thread; see [`give_back_sched`]): `true` when we had, so the journal changed.
pub(super) fn give_back_set(
    ops: &dyn crate::affinity::AffinityOps,
    (pid, tid): (i32, Tid),
    set: Option<crate::affinity::restore::SchedRestore>,
    reason: &str,
) -> bool {
    let Some(sched) = set else {
        return false;
    };
    give_back_sched(ops, (pid, tid), &sched, reason);
    true
}
