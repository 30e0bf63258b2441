//! What follows every manager change, and the reports of the threads that act on it:
//! the restore journal written, running containers moved to the plan's CPUs, IRQs moved
//! away and back, units held, memory that follows its CPUs. The state hands each part what it needs from the others; the parts
//! (`sharing.rs`, `irqs.rs`, `holds.rs`, `following.rs`) import nothing of the state.

use std::time::Instant;

use crate::manager::{self, Change};

use super::{following, log_change, Action, State, JOURNAL_RETRY};

impl State {
    /// Logs what the manager did and writes its journal when it changed.
    pub(super) fn after_manager(&mut self, changes: Vec<Change>) {
        for c in &changes {
            log_change(c);
        }
        self.flush_journal();
        self.sync_containers();
        self.sync_irqs(false);
        self.sync_holds();
        self.sync_knobs(false);
        self.sync_memory(Instant::now());
    }

    /// Sets the idle limits of the CPUs `idle-limit-us` rules hold and keeps kernel work
    /// off the CPUs `exclusive` rules hold, giving back what is no longer held
    /// (`state/knobs.rs`); `recheck` looks at the kernel threads again.
    pub(super) fn sync_knobs(&mut self, recheck: bool) {
        if self.cfg.observe_only {
            return;
        }
        let held = (
            self.managed.idle_limits_held(),
            self.managed.kernel_work_away(),
        );
        let ops = self.managed.affinity();
        let (root, dir) = (&self.cfg.sysroot, &self.cfg.runtime_dir);
        self.sharing
            .sync_knobs(root, ops.as_ref(), dir, held, recheck);
    }

    /// Moves the running containers whose CPUs the plan in force no longer gives them
    /// (`state/containers.rs`): after every manager change, since the manager's own
    /// plans (made again for the cpusets and slots it saw) move CPUs as a new plan does.
    pub(super) fn sync_containers(&mut self) {
        if let Some(m) = &self.managed.manager {
            self.containers.replanned(m.plan(), self.machine.topology());
        }
    }

    /// Sends the holder what should be held, when that changed or a hold with a problem
    /// is due to be tried again (`state/holds.rs`).
    pub(super) fn sync_holds(&mut self) {
        if self.cfg.observe_only {
            return;
        }
        let wants = self.managed.holds_wanted(self.machine.topology());
        // Noted before it is asked for: the cpuset the hold makes is never planned in.
        if let Some(m) = &mut self.managed.manager {
            for w in &wants {
                m.note_hold(&w.rule, &w.cpus);
            }
        }
        if let Some(wants) = self.sharing.send_holds(wants, Instant::now()) {
            self.actions.push(Action::Hold(wants));
        }
    }

    /// What the holder did. When a unit's CPUs changed, every managed thread is applied
    /// again at once (systemd turning the cpuset controller on or off for a slice resets
    /// the masks of every task in the slice's other units, which a later look would take
    /// for someone else's change), then every process is looked at again (the held
    /// one's cpuset changed).
    pub(super) fn held(&mut self, reports: Vec<crate::hold::HoldReport>) {
        if !self.sharing.holds_reported(reports) {
            return;
        }
        self.sync_irqs(false);
        // A partition made or released: per-node kernel threads are looked at again.
        self.sync_knobs(true);
        if let Some(plan) = self.managed.plan().cloned() {
            self.manager_event(manager::Input::PlanChanged(plan));
        }
        self.manager_event(manager::Input::Rescan);
    }

    /// Starts a memory-follow job for every following process whose CPUs moved to other
    /// nodes, as its interval allows (`state/following.rs`). Called after every manager
    /// change and every tick.
    pub(super) fn sync_memory(&mut self, at: Instant) {
        if self.cfg.observe_only {
            return;
        }
        let unsettled = self.sharing.unsettled();
        let now = following::Now {
            at,
            unsettled: &unsettled,
            manager: self.managed.manager(),
            topology: self.machine.topology(),
            settings: &self.loaded.settings,
            root: &self.cfg.sysroot,
        };
        let jobs = self.sharing.sync_follow(now, &mut self.metrics.memory);
        for job in jobs {
            self.actions.push(Action::Follow(Box::new(job)));
        }
    }

    /// A memory-follow job ended; the next may start.
    pub(super) fn followed(&mut self, f: crate::memory::follow::Finished) {
        let at = f.at;
        self.sharing.followed(f, &mut self.metrics.memory);
        self.sync_memory(at);
    }

    /// The `memory follow:` line of `Explain` for `pid`.
    pub(super) fn follow_line(&self, pid: i32, now: Instant) -> String {
        let interval = self.loaded.follow_interval();
        self.sharing.follow_line(pid, now, interval)
    }

    /// Moves IRQs off the CPUs `irqs = "away"` rules hold now, and tells irqbalance to
    /// keep off those and the CPUs isolated for holds (`state/irqs.rs`); `recheck` looks
    /// for an irqbalance started since it was last told.
    pub(super) fn sync_irqs(&mut self, recheck: bool) {
        if self.cfg.observe_only {
            return;
        }
        let wanted = self.managed.irqs_wanted_away();
        let (root, dir) = (&self.cfg.sysroot, &self.cfg.runtime_dir);
        let online = self.machine.online();
        self.sharing.sync_irqs(root, dir, wanted, &online, recheck);
    }

    pub(super) fn flush_journal(&mut self) {
        self.timers.journal_due = None;
        if let Some(m) = &mut self.managed.manager {
            if let Err(e) = m.flush() {
                tracing::warn!(error = %e, retry_ms = JOURNAL_RETRY.as_millis() as u64, "cannot write the restore journal ({e}); trying again in {} ms", JOURNAL_RETRY.as_millis());
                self.timers.journal_due = Some(Instant::now() + JOURNAL_RETRY);
            }
        }
    }
}
