//! Applying the plan to managed threads, and giving masks back: every mask is set
//! through `affinity::apply`, and every outcome counted.
//!
//! Must not touch: which processes are managed (see `tracking`), the plan itself.

use super::{Change, ForeignChange, ManagedThread, Manager, ManagerError, Source};
use crate::affinity::restore::RestoreError;
use crate::affinity::{outcome_of_error, Outcome, Tid};
use crate::cpuset::CpuSet;
use crate::rules::ThreadPlacement;
use crate::watch::ProcessSnapshot;

impl Manager {
    /// A child of a managed process that matches no rule gets its parent's original
    /// mask instead of the pinned one it inherited.
    pub(super) fn give_back_inherited(&mut self, snap: &ProcessSnapshot, parent: i32) {
        let Some(p) = self.managed.get(&parent) else {
            return;
        };
        let original = p.original.clone();
        let pinned: Vec<CpuSet> = p
            .threads
            .values()
            .filter_map(|t| t.outcome.effective().cloned())
            .collect();
        for t in &snap.info.threads {
            let tid = t.tid as Tid;
            if let Ok(cur) = self.ops.get_affinity(tid) {
                if pinned.contains(&cur) {
                    let back =
                        crate::affinity::apply(self.ops.as_ref(), tid, &original, self.online());
                    match back {
                        Outcome::Applied { .. } | Outcome::Narrowed { .. } | Outcome::Gone => {
                            tracing::debug!(
                                pid = snap.pid(),
                                tid,
                                outcome = back.label(),
                                "inherited mask given back"
                            )
                        }
                        other => self.count(&other, snap.pid(), tid, "(inherited)"),
                    }
                }
            }
        }
    }

    /// The CPUs thread `tid` of managed process `pid` should have, assigning a slot
    /// if its entry is non-shared. `None` when its unit is not placed.
    pub(super) fn target_for(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: &str,
    ) -> (ThreadPlacement, usize, Option<CpuSet>) {
        let Some(m) = self.managed.get_mut(&pid) else {
            return (ThreadPlacement::Process, 0, None);
        };
        match &m.source {
            Source::Runtime(cpus) => (ThreadPlacement::Process, 0, Some(cpus.clone())),
            Source::Rule(rule) => {
                let Some(placement) = rule.thread_placement(comm) else {
                    return (ThreadPlacement::Process, 0, None);
                };
                // Held only once the thread is recorded with it (`pin_thread`).
                let slot = match (placement, m.threads.get(&tid)) {
                    (p, Some(t)) if t.placement == p => t.slot,
                    (p, _) => m.free_slot(p),
                };
                let key = self.plan.cpuset_key(&m.allowed.cpus);
                let cpus = self
                    .plan
                    .get_in(&rule.name, unit_index(placement), key.as_ref())
                    .and_then(|p| p.cpus_for_slot(slot))
                    .cloned();
                (placement, slot, cpus)
            }
        }
    }

    pub(super) fn pin_thread(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: Option<String>,
        verify: bool,
        out: &mut Vec<Change>,
    ) {
        if self.awaiting.contains(&pid) {
            // Pinned when the plan made for its cpuset comes (`Input::Replanned`).
            return;
        }
        let comm = match comm {
            Some(c) => c,
            None => {
                let needs_comm = self.managed.get(&pid).is_some_and(|m| match &m.source {
                    Source::Rule(r) => !r.threads.is_empty(),
                    Source::Runtime(_) => false,
                });
                if needs_comm {
                    match self.procs.thread_comm(pid, tid) {
                        Some(c) => c,
                        None => {
                            self.counters.gone += 1;
                            return;
                        }
                    }
                } else {
                    String::new()
                }
            }
        };
        if let Some(t) = self.managed.get(&pid).and_then(|m| m.threads.get(&tid)) {
            if t.released {
                return;
            }
        }
        // The process is held by its pidfd; a thread by being listed under it: a tid
        // whose thread exited may belong to another process now (never pin an impostor).
        if tid != pid && !self.procs.is_task_of(pid, tid) {
            if let Some(m) = self.managed.get_mut(&pid) {
                m.remove_thread(tid);
            }
            self.counters.gone += 1;
            tracing::debug!(pid, tid, "thread gone before it could be pinned");
            return;
        }
        let (placement, slot, target) = self.target_for(pid, tid, &comm);
        let overflow = match self.managed.get(&pid).map(|m| &m.source) {
            Some(Source::Rule(r)) => self.slots_outnumbered(&r.name, placement, slot),
            _ => None,
        };
        let online = self.online().clone();
        let on_foreign = self.config.on_foreign_change;
        let read = self.ops.get_affinity(tid);
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        let rule = m.source.name();
        let current = match read {
            Ok(c) => c,
            Err(e) => match outcome_of_error(e, target.as_ref().unwrap_or(&CpuSet::new())) {
                Outcome::Gone => {
                    m.remove_thread(tid);
                    self.counters.gone += 1;
                    tracing::debug!(pid, tid, "thread gone before it could be pinned");
                    return;
                }
                other => {
                    self.not_readable(pid, tid, comm, (placement, slot), other, out);
                    return;
                }
            },
        };
        let Some(target) = target else {
            // No entry takes it and the rule places nothing else, or its unit lost a
            // conflict or could not be placed: leave it alone, and say why.
            let why = left_alone_why(&self.plan, &m.source, &comm, placement, &m.allowed);
            match m.threads.get_mut(&tid) {
                None => {
                    if why.is_some() {
                        m.hold_slot(placement, slot);
                    }
                    m.threads.insert(
                        tid,
                        ManagedThread::new(
                            comm,
                            placement,
                            slot,
                            current.clone(),
                            Outcome::LeftAlone {
                                why: why.unwrap_or_else(|| NO_PLACEMENT.to_string()),
                            },
                        ),
                    );
                }
                Some(t) => {
                    t.comm = comm;
                    if t.outcome.effective().is_some() && !t.released {
                        // Renamed away from what placed it: it gets its own mask back.
                        let back =
                            crate::affinity::apply(self.ops.as_ref(), tid, &t.original, &online);
                        tracing::debug!(
                            pid,
                            tid,
                            outcome = back.label(),
                            "thread no unit takes any more: mask given back"
                        );
                        self.journal_dirty = true;
                    }
                    t.outcome = Outcome::LeftAlone {
                        why: why.clone().unwrap_or_else(|| NO_PLACEMENT.to_string()),
                    };
                    // Renamed out of its entry: its slot is free for the next thread.
                    let was = (t.placement, t.slot);
                    if was != (placement, slot) {
                        t.placement = placement;
                        t.slot = slot;
                        m.release_slot(was.0, was.1);
                        if why.is_some() {
                            m.hold_slot(placement, slot);
                        }
                    }
                }
            }
            return;
        };
        // A thread taking a slot beyond its entry's (first contact, or renamed into it).
        let newly_held = m
            .threads
            .get(&tid)
            .is_none_or(|t| (t.placement, t.slot) != (placement, slot));
        if let (true, Some(n)) = (newly_held, overflow) {
            warn_overflow(&mut self.overflows, (pid, tid), &rule, &comm, (slot, n));
        }
        let existing = m.threads.get_mut(&tid);
        let want_now = target.intersection(&online);
        if let Some(t) = existing {
            let same_target = t.placement == placement && t.slot == slot;
            t.comm = comm;
            // Refused and not permitted are final for a target: no retry loop.
            if same_target
                && !t.stale
                && matches!(t.outcome, Outcome::Refused { .. } | Outcome::Permission)
            {
                return;
            }
            if let (true, Some(eff)) = (same_target, t.outcome.effective().cloned()) {
                if current == eff && !t.stale {
                    return;
                }
                if verify && current != eff && !t.stale {
                    // Narrower than ours, within what we asked for: a cpuset or an
                    // offline CPU, not a person. Anything else is someone else's doing.
                    let kernel_widened = want_now.is_empty();
                    if !current.is_subset(&target) && !kernel_widened {
                        self.counters.foreign_changes += 1;
                        let released = on_foreign == ForeignChange::Release;
                        let change = (&eff, &current, released);
                        warn_foreign(&mut self.foreign, (pid, tid), &rule, change);
                        out.push(Change::Foreign {
                            pid,
                            tid,
                            expected: eff,
                            found: current.clone(),
                            released,
                        });
                        if released {
                            t.released = true;
                            return;
                        }
                    }
                }
            }
            let (was, was_slot) = (t.placement, t.slot);
            t.placement = placement;
            t.slot = slot;
            if (was, was_slot) != (placement, slot) {
                m.release_slot(was, was_slot);
                m.hold_slot(placement, slot);
            }
        } else {
            // First contact: remember what it had. A thread that inherited our mask
            // from its creator gets the process's original back later.
            // (Cheapest checks first: the main thread, whose mask most threads are
            // created with, before the scan of every thread of the process.)
            let original = if tid == pid
                || current == want_now
                || m.threads.get(&pid).and_then(|t| t.outcome.effective()) == Some(&current)
                || m.threads
                    .values()
                    .any(|t| t.outcome.effective() == Some(&current))
            {
                m.original.clone()
            } else {
                current.clone()
            };
            m.hold_slot(placement, slot);
            m.threads.insert(
                tid,
                ManagedThread::new(comm, placement, slot, original, Outcome::Gone),
            );
        }
        // Every requested CPU offline is refused (the CPU's return re-applies); a mask
        // already right is not written again.
        let outcome =
            crate::affinity::apply_over(self.ops.as_ref(), tid, &target, &online, Some(&current));
        self.count(&outcome, pid, tid, &rule);
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        if outcome == Outcome::Gone {
            m.remove_thread(tid);
            return;
        }
        if let Some(t) = m.threads.get_mut(&tid) {
            // The journal lists the main thread's masks and the threads with their own.
            if tid == pid || placement != ThreadPlacement::Process || t.original != m.original {
                self.journal_dirty = true;
            }
            t.outcome = outcome.clone();
            t.stale = false;
        }
        out.push(Change::Pinned {
            pid,
            tid,
            rule,
            outcome,
        });
    }

    /// A thread whose mask cannot be read, for another reason than having exited: not
    /// permitted (EPERM) or failed. It is not gone: it is kept with that outcome (so
    /// `explain` and `ListManaged` show it), counted once until its target changes, and
    /// a permission problem is warned about once per process.
    fn not_readable(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: String,
        (placement, slot): (ThreadPlacement, usize),
        outcome: Outcome,
        out: &mut Vec<Change>,
    ) {
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        let rule = m.source.name();
        match m.threads.get_mut(&tid) {
            Some(t) if t.outcome == outcome && (t.placement, t.slot) == (placement, slot) => {
                if !t.stale {
                    return;
                }
                t.stale = false;
            }
            Some(t) => {
                let was = (t.placement, t.slot);
                t.comm = comm;
                t.outcome = outcome.clone();
                t.stale = false;
                t.placement = placement;
                t.slot = slot;
                if was != (placement, slot) {
                    m.release_slot(was.0, was.1);
                    m.hold_slot(placement, slot);
                }
            }
            None => {
                m.hold_slot(placement, slot);
                let original = m.original.clone();
                m.threads.insert(
                    tid,
                    ManagedThread::new(comm, placement, slot, original, outcome.clone()),
                );
            }
        }
        if outcome == Outcome::Permission {
            self.counters.permission += 1;
            if !std::mem::replace(&mut m.warned_permission, true) {
                tracing::warn!(
                    pid,
                    tid,
                    rule,
                    "not permitted to read the affinity of a thread of a managed process (CAP_SYS_NICE, or a security module?); its threads are left as they are"
                );
            } else {
                tracing::debug!(pid, tid, rule, "not permitted to read its affinity");
            }
        } else {
            self.count(&outcome, pid, tid, &rule);
        }
        out.push(Change::Pinned {
            pid,
            tid,
            rule,
            outcome,
        });
    }

    pub(super) fn count(&mut self, outcome: &Outcome, pid: i32, tid: Tid, rule: &str) {
        let c = &mut self.counters;
        match outcome {
            Outcome::Applied { .. } => c.applied += 1,
            Outcome::Narrowed {
                requested,
                effective,
            } => {
                c.narrowed += 1;
                tracing::info!(pid, tid, rule, requested = %requested, effective = %effective,
                    "a cpuset narrowed the mask");
            }
            Outcome::Refused { requested } => {
                c.refused += 1;
                tracing::warn!(pid, tid, rule, requested = %requested,
                    "no requested CPU is allowed by the task's cpuset or online; not retrying");
            }
            Outcome::Gone => {
                c.gone += 1;
                tracing::debug!(pid, tid, "thread gone");
            }
            Outcome::KernelThread => c.kernel_threads += 1,
            Outcome::Permission => {
                c.permission += 1;
                tracing::warn!(
                    pid,
                    tid,
                    rule,
                    "not permitted to set affinity (CAP_SYS_NICE?)"
                );
            }
            Outcome::Failed { message } => {
                c.failed += 1;
                tracing::warn!(pid, tid, rule, %message, "setting affinity failed");
            }
            Outcome::LeftAlone { why } => {
                tracing::debug!(pid, tid, rule, %why, "thread left alone");
            }
        }
    }

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
            if t.released || (*tid != pid && !self.procs.is_task_of(pid, *tid)) {
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
                                "restoring the mask failed"
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
        tracing::info!(pid, rule = %rule, restored, left_alone = left, reason, "released process");
        out.push(Change::Released {
            pid,
            rule,
            restored,
            reason: reason.to_string(),
        });
    }

    /// Pins process `pid` at run time, without a rule, to `cpus` (see
    /// [`Plan::pin`](crate::plan::Plan::pin) for choosing them).
    pub fn pin(&mut self, pid: i32, cpus: &CpuSet) -> Result<Vec<Change>, ManagerError> {
        let snap = self.process(pid).ok_or(ManagerError::NoProcess { pid })?;
        if snap.kernel_thread {
            return Err(ManagerError::KernelThread { pid });
        }
        if let Some(why) = super::protect::protected_at_runtime(pid, &snap.info.comm, self.own_pid)
        {
            return Err(ManagerError::Protected { pid, why });
        }
        let mut out = Vec::new();
        // An earlier pin or rule of this same process: its claim goes, but every mask it
        // remembered from first contact stays (the masks now on the threads are ours).
        let earlier = self
            .managed
            .remove(&pid)
            .filter(|m| m.handle.start_time == snap.start_time);
        let original = earlier.as_ref().map(|m| m.original.clone());
        if !self.start_managing(&snap, Source::Runtime(cpus.clone()), original) {
            return Err(ManagerError::NoProcess { pid });
        }
        if let (Some(earlier), Some(m)) = (earlier, self.managed.get_mut(&pid)) {
            for (tid, t) in earlier.threads {
                if t.released {
                    // Someone else's mask now: first contact again, like a new thread.
                    continue;
                }
                m.threads.insert(
                    tid,
                    ManagedThread {
                        placement: ThreadPlacement::Process,
                        slot: 0,
                        stale: true,
                        ..t
                    },
                );
            }
        }
        self.reconcile(snap, &mut out);
        Ok(out)
    }

    /// Ends a run-time pin: the process gets its original masks back (and rules apply
    /// again at the next look).
    pub fn unpin(&mut self, pid: i32) -> Result<Vec<Change>, ManagerError> {
        match self.managed.get(&pid) {
            Some(m) if matches!(m.source, Source::Runtime(_)) => {}
            _ => return Err(ManagerError::NotPinned { pid }),
        }
        let mut out = Vec::new();
        self.release(pid, "released at run time", &mut out);
        self.consider(pid, None, &mut out);
        Ok(out)
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

impl Manager {
    /// For a thread of a per-thread entry whose slot is past the plan's slots (more
    /// threads than slots): how many slots there are. Such a thread shares the CPUs of
    /// slot `slot % slots`.
    pub(super) fn slots_outnumbered(
        &self,
        rule: &str,
        placement: ThreadPlacement,
        slot: usize,
    ) -> Option<usize> {
        let ThreadPlacement::Thread(i) = placement else {
            return None;
        };
        match self.plan.get(rule, Some(i))? {
            crate::plan::PlanState::Slots { slots, .. } if slot >= slots.len() => Some(slots.len()),
            _ => None,
        }
    }
}

/// Why a thread its rule places nowhere is left alone.
const NO_PLACEMENT: &str =
    "no [[rule.threads]] entry takes its name and the rule has no [rule.place]";

/// Why a thread with no target is left alone: `None` when no unit takes it at all
/// ([`NO_PLACEMENT`]), else its unit's plan in words.
fn left_alone_why(
    plan: &crate::plan::Plan,
    source: &Source,
    comm: &str,
    placement: ThreadPlacement,
    allowed: &super::cpusets::Allowed,
) -> Option<String> {
    let Source::Rule(rule) = source else {
        return None;
    };
    rule.thread_placement(comm)?;
    let unit = match placement {
        ThreadPlacement::Process => "[rule.place]".to_string(),
        ThreadPlacement::Thread(i) => format!("threads[{i}]"),
    };
    let key = plan.cpuset_key(&allowed.cpus);
    let state = plan
        .get_in(&rule.name, unit_index(placement), key.as_ref())
        .map_or_else(|| "not planned".to_string(), |s| s.describe());
    Some(format!("its unit {unit} is not applied: {state}"))
}

pub(super) fn unit_index(p: ThreadPlacement) -> Option<usize> {
    match p {
        ThreadPlacement::Process => None,
        ThreadPlacement::Thread(i) => Some(i),
    }
}

/// Warns that thread `tid` of `pid` takes a slot past the last of `slots` (`(slot,
/// slots)`): for the first such thread of the process, the others are counted in
/// `overflows` (`Manager::log_repeats`), so 10,000 threads make a few lines.
fn warn_overflow(
    overflows: &mut crate::repeats::Repeats<(i32, String)>,
    (pid, tid): (i32, Tid),
    rule: &str,
    comm: &str,
    (slot, slots): (usize, usize),
) {
    if overflows.note((pid, rule.to_string()), std::time::Instant::now()) {
        tracing::warn!(
            pid, tid, rule = %rule, comm = %comm, slot, slots,
            "more threads than slots ({slots}): this thread shares the CPUs of slot {}; \
             further such threads of this process are counted, one line each {} s",
            slot % slots,
            crate::repeats::REPEATS_EVERY.as_secs()
        );
    }
}

/// Warns that someone else changed a managed thread's mask (`(expected, found,
/// released)`): for the first such thread of the process, the others are counted in
/// `foreign` (`Manager::log_repeats`), since its owner may move 10,000.
fn warn_foreign(
    foreign: &mut crate::repeats::Repeats<i32>,
    (pid, tid): (i32, Tid),
    rule: &str,
    (expected, found, released): (&CpuSet, &CpuSet, bool),
) {
    if foreign.note(pid, std::time::Instant::now()) {
        tracing::warn!(
            pid, tid, rule = %rule, %expected, %found,
            "someone else changed the affinity of a managed thread; {}; \
             further such threads of this process are counted, one line each {} s",
            if released { "no longer managing it" } else { "re-asserting" },
            crate::repeats::REPEATS_EVERY.as_secs()
        );
    }
}
