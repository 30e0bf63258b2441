//! Giving masks back: a process released (it exited, its rule or run-time pin ended)
//! and every managed process at shutdown. Each task that still has our mask gets the
//! one it had at first contact, through `affinity::apply`; a task whose mask someone
//! else changed is left alone.
//!
//! Must not touch: which processes are managed (see `tracking`), the plan itself.

use super::scheduling::give_back_sched;
use super::{Change, Manager};
use crate::affinity::restore::RestoreError;
use crate::affinity::Outcome;

impl Manager {
    /// Stops managing `pid` and gives each of its tasks that still has our mask the
    /// mask it had at first contact.
    pub(super) fn release(&mut self, pid: i32, reason: &str, out: &mut Vec<Change>) {
        self.awaiting.remove(&pid);
        self.memory_pending.remove(&pid);
        let Some(m) = self.managed.remove(&pid) else {
            return;
        };
        self.journal_dirty = true;
        let rule = m.source.name();
        if !self.ops.alive(&m.handle) {
            out.push(Change::Exited { pid });
            return;
        }
        let mut restored = 0;
        let mut left = 0;
        for (tid, t) in &m.threads {
            if *tid != pid && !self.procs.is_task_of(pid, *tid) {
                continue;
            }
            if let Some(sched) = &t.sched {
                give_back_sched(self.ops.as_ref(), (pid, *tid), sched, reason);
            }
            if t.released {
                continue;
            }
            let Some(ours) = t.outcome.effective() else {
                continue;
            };
            match self.ops.get_affinity(*tid) {
                Ok(cur) if cur == *ours => {
                    match crate::affinity::apply(
                        self.ops.as_ref(),
                        *tid,
                        &t.original,
                        self.online(),
                    ) {
                        Outcome::Applied { .. } | Outcome::Narrowed { .. } => restored += 1,
                        Outcome::Gone => {}
                        other => {
                            tracing::warn!(
                                pid,
                                tid,
                                outcome = other.label(),
                                "pid {pid}, thread {tid} (rule {rule}): giving back its mask {} \
                                 failed: {}",
                                t.original,
                                other.words()
                            )
                        }
                    }
                }
                Ok(cur) => {
                    // Counted in the one line below (its owner may have moved 10,000).
                    left += 1;
                    tracing::debug!(pid, tid, found = %cur, "not restoring: someone else changed the mask")
                }
                Err(_) => {}
            }
        }
        self.counters.restored += restored as u64;
        tracing::info!(
            pid, rule = %rule, restored, left_alone = left, reason,
            "released pid {pid} ({}), managed {}: {reason}; {} given their masks back, \
             {} left alone (someone else changed their masks)",
            m.comm,
            m.source.words(),
            crate::words::count(restored, "thread"),
            crate::words::count(left, "thread")
        );
        out.push(Change::Released {
            pid,
            rule,
            restored,
            reason: reason.to_string(),
        });
    }

    /// Gives every managed task its original mask back and empties the journal.
    pub fn shutdown(&mut self) -> Result<Vec<Change>, RestoreError> {
        let mut out = Vec::new();
        let pids: Vec<i32> = self.managed.keys().copied().collect();
        for pid in pids {
            self.release(pid, "daemon stopping", &mut out);
        }
        self.journal_dirty = false;
        if let Some(j) = &self.journal {
            j.save(&[])?;
        }
        Ok(out)
    }
}
