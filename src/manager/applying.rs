//! Applying the plan to managed threads: every mask is set through `affinity::apply`,
//! and every outcome counted. Masks are given back in `giving_back`; scheduling
//! classes are set in `scheduling`, run-time pins taken in `pinning`.
//!
//! Must not touch: which processes are managed (see `tracking`), the plan itself.

use super::scheduling::give_back_set;
use super::{Change, ForeignChange, ManagedThread, Manager, Source};
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

    /// Pins thread `tid` of managed process `pid` to the CPUs the plan gives its unit
    /// and slot, or records why it is left alone. `comm` is its name when the caller
    /// knows it; `verify` checks a mask we set for changes made by someone else.
    ///
    /// ```text
    ///   name_of → is_released / still_its_task → target_for → read_mask
    ///     ├─ no target: leave_alone
    ///     └─ take_seat (first contact, or recheck) → apply_target
    /// ```
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
        let Some(comm) = self.name_of(pid, tid, comm) else {
            return;
        };
        if self.is_released(pid, tid) || !self.still_its_task(pid, tid) {
            return;
        }
        let (placement, slot, target) = self.target_for(pid, tid, &comm);
        let seat = (placement, slot);
        let Some(current) = self.read_mask(pid, tid, &comm, seat, target.as_ref(), out) else {
            return;
        };
        let found = Found {
            pid,
            tid,
            placement,
            slot,
            current,
        };
        let Some(target) = target else {
            self.leave_alone(&found, comm);
            return;
        };
        if self.take_seat(&found, comm, &target, verify, out) {
            self.apply_target(&found, &target, out);
        }
    }

    /// The name thread `tid` is placed by: the one given, else read when its rule places
    /// threads by name, else empty (nothing looks at it). `None` when it exited before
    /// its name could be read (counted as gone).
    pub(super) fn name_of(&mut self, pid: i32, tid: Tid, comm: Option<String>) -> Option<String> {
        if let Some(c) = comm {
            return Some(c);
        }
        if !self
            .managed
            .get(&pid)
            .is_some_and(|m| m.source.places_by_name())
        {
            return Some(String::new());
        }
        let read = self.procs.thread_comm(pid, tid);
        if read.is_none() {
            self.counters.gone += 1;
        }
        read
    }

    /// Whether thread `tid` of `pid` was handed over to whoever changed its mask: it is
    /// never touched again.
    pub(super) fn is_released(&self, pid: i32, tid: Tid) -> bool {
        self.managed
            .get(&pid)
            .and_then(|m| m.threads.get(&tid))
            .is_some_and(|t| t.released)
    }

    /// Whether `tid` is still a task of `pid`. The process is held by its pidfd; a
    /// thread by being listed under it: a tid whose thread exited may belong to another
    /// process now (never pin an impostor). One that is not is forgotten, counted gone.
    pub(super) fn still_its_task(&mut self, pid: i32, tid: Tid) -> bool {
        if tid == pid || self.procs.is_task_of(pid, tid) {
            return true;
        }
        if let Some(m) = self.managed.get_mut(&pid) {
            m.remove_thread(tid);
        }
        self.counters.gone += 1;
        tracing::debug!(pid, tid, "thread gone before it could be pinned");
        false
    }

    /// The mask thread `tid` runs with now, if it can be read and `pid` is managed. A
    /// thread that exited is forgotten and counted gone; one whose mask may not be read
    /// or fails is kept with that outcome (see `not_readable`).
    pub(super) fn read_mask(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: &str,
        seat: (ThreadPlacement, usize),
        target: Option<&CpuSet>,
        out: &mut Vec<Change>,
    ) -> Option<CpuSet> {
        let read = self.ops.get_affinity(tid);
        let m = self.managed.get_mut(&pid)?;
        let error = match read {
            Ok(current) => return Some(current),
            Err(e) => e,
        };
        match outcome_of_error(error, target.unwrap_or(&CpuSet::new())) {
            Outcome::Gone => {
                m.remove_thread(tid);
                self.counters.gone += 1;
                tracing::debug!(pid, tid, "thread gone before it could be pinned");
            }
            other => self.not_readable(pid, tid, comm.to_string(), seat, other, out),
        }
        None
    }

    /// Records a thread no applied unit takes as left alone, with why: no entry takes
    /// its name and the rule places nothing else, or its unit lost a conflict or could
    /// not be placed. Its slot is held only while a unit takes it. A thread renamed away
    /// from what placed it gets its own mask back, and its old slot is freed.
    pub(super) fn leave_alone(&mut self, found: &Found, comm: String) {
        let Found {
            pid,
            tid,
            placement,
            slot,
            ref current,
        } = *found;
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        let why = left_alone_why(&self.plan, &m.source, &comm, placement, &m.allowed);
        let unit_takes_it = why.is_some();
        let outcome = Outcome::LeftAlone {
            why: why.unwrap_or_else(|| NO_PLACEMENT.to_string()),
        };
        let Some(t) = m.threads.get_mut(&tid) else {
            if unit_takes_it {
                m.hold_slot(placement, slot);
            }
            let t = ManagedThread::new(comm, placement, slot, current.clone(), outcome);
            m.threads.insert(tid, t);
            return;
        };
        t.comm = comm;
        let reason = "renamed away from its entry";
        if give_back_set(self.ops.as_ref(), (pid, tid), t.sched.take(), reason) {
            self.journal_dirty = true;
        }
        if t.outcome.effective().is_some() && !t.released {
            // Renamed away from what placed it: it gets its own mask back.
            let online = &self.plan.cpus().online;
            let back = crate::affinity::apply(self.ops.as_ref(), tid, &t.original, online);
            tracing::debug!(
                pid,
                tid,
                outcome = back.label(),
                "thread no unit takes any more: mask given back"
            );
            self.journal_dirty = true;
        }
        t.outcome = outcome;
        // Renamed out of its entry: its slot is free for the next thread.
        m.move_thread(tid, (placement, slot), unit_takes_it);
    }

    /// Takes the thread into its unit and slot: `true` when its target is to be applied,
    /// `false` when it is left as it is (see [`recheck`]), or is someone else's now. A
    /// thread met for the first time is recorded with the mask to give it back later
    /// ([`Managed::original_for`]).
    pub(super) fn take_seat(
        &mut self,
        found: &Found,
        comm: String,
        target: &CpuSet,
        verify: bool,
        out: &mut Vec<Change>,
    ) -> bool {
        let Found {
            pid,
            tid,
            placement,
            slot,
            ref current,
        } = *found;
        self.warn_past_slots(found, &comm);
        let want_now = target.intersection(self.online());
        let on_foreign = self.config.on_foreign_change;
        let Some(m) = self.managed.get_mut(&pid) else {
            return false;
        };
        let Some(t) = m.threads.get_mut(&tid) else {
            let original = match m.recovered.remove(&tid) {
                Some(o) => o,
                None => m.original_for(pid, tid, current, &want_now),
            };
            m.hold_slot(placement, slot);
            let t = ManagedThread::new(comm, placement, slot, original, Outcome::Gone);
            m.threads.insert(tid, t);
            return true;
        };
        t.comm = comm;
        match recheck(t, (placement, slot), current, target, &want_now, verify) {
            Recheck::Settled => return false,
            Recheck::Apply => {}
            Recheck::Foreign { expected } => {
                self.counters.foreign_changes += 1;
                let released = on_foreign == ForeignChange::Release;
                let rule = m.source.name();
                let change = (&expected, current, released);
                warn_foreign(&mut self.foreign, (pid, tid), &rule, change);
                out.push(Change::Foreign {
                    pid,
                    tid,
                    expected,
                    found: current.clone(),
                    released,
                });
                if released {
                    t.released = true;
                    return false;
                }
            }
        }
        m.move_thread(tid, (placement, slot), true);
        true
    }

    /// Warns when the thread takes a slot past its entry's slots, at first contact or
    /// renamed into it (see [`warn_overflow`]).
    fn warn_past_slots(&mut self, found: &Found, comm: &str) {
        let Some(m) = self.managed.get(&found.pid) else {
            return;
        };
        let Source::Rule(rule) = &m.source else {
            return;
        };
        let seat = (found.placement, found.slot);
        let Some(slots) = self.slots_outnumbered(&rule.name, seat.0, seat.1) else {
            return;
        };
        if takes_new_seat(m.threads.get(&found.tid), seat) {
            let who = (found.pid, found.tid);
            warn_overflow(&mut self.overflows, who, &rule.name, comm, (seat.1, slots));
        }
    }

    /// Applies `target` to the thread taken into its seat, counts and records the
    /// outcome (a thread that exited meanwhile is forgotten). Every requested CPU
    /// offline is refused (the CPU's return re-applies); a mask already right is not
    /// written again.
    pub(super) fn apply_target(&mut self, found: &Found, target: &CpuSet, out: &mut Vec<Change>) {
        let Found {
            pid,
            tid,
            placement,
            ref current,
            ..
        } = *found;
        let Some(rule) = self.managed.get(&pid).map(|m| m.source.name()) else {
            return;
        };
        let outcome = crate::affinity::apply_over(
            self.ops.as_ref(),
            tid,
            target,
            self.online(),
            Some(current),
        );
        self.count(&outcome, pid, tid, &rule);
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        if outcome == Outcome::Gone {
            m.remove_thread(tid);
            return;
        }
        if let Some(t) = m.threads.get_mut(&tid) {
            if journal_lists(pid, tid, placement, &t.original, &m.original) {
                self.journal_dirty = true;
            }
            t.outcome = outcome.clone();
            t.stale = false;
        }
        if outcome.effective().is_some() {
            self.apply_sched(pid, tid, placement);
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
                t.comm = comm;
                t.outcome = outcome.clone();
                t.stale = false;
                m.move_thread(tid, (placement, slot), true);
            }
            None => {
                m.hold_slot(placement, slot);
                let original = m
                    .recovered
                    .remove(&tid)
                    .unwrap_or_else(|| m.original.clone());
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
                    "pid {pid}, thread {tid} (rule {rule}): not permitted to read the affinity of \
                     a thread of a managed process (CAP_SYS_NICE, or a security module?); \
                     its threads are left as they are"
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
                    "pid {pid}, thread {tid} (rule {rule}): its cpuset narrowed the mask \
                     from CPUs {requested} to {effective}");
            }
            Outcome::Refused { requested } => {
                c.refused += 1;
                tracing::warn!(pid, tid, rule, requested = %requested,
                    "pid {pid}, thread {tid} (rule {rule}): none of CPUs {requested} is allowed \
                     by the task's cpuset or online; not retrying");
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
                    "pid {pid}, thread {tid} (rule {rule}): not permitted to set its affinity \
                     (CAP_SYS_NICE?)"
                );
            }
            Outcome::Failed { message } => {
                c.failed += 1;
                tracing::warn!(pid, tid, rule, %message,
                    "pid {pid}, thread {tid} (rule {rule}): setting its affinity failed: {message}");
            }
            Outcome::LeftAlone { why } => {
                tracing::debug!(pid, tid, rule, %why, "thread left alone");
            }
        }
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

/// A thread `pin_thread` met: who it is, the unit and slot the plan puts it in, and
/// the mask it was found with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) pid: i32,
    pub(super) tid: Tid,
    pub(super) placement: ThreadPlacement,
    pub(super) slot: usize,
    pub(super) current: CpuSet,
}

impl super::Managed {
    /// The mask to give back to thread `tid`, met for the first time with `current`:
    /// its own, unless it inherited ours from its creator (the main thread's, or another
    /// managed thread's, or already `want_now`); then the process's original. The main
    /// thread's original is the process's.
    pub(super) fn original_for(
        &self,
        pid: i32,
        tid: Tid,
        current: &CpuSet,
        want_now: &CpuSet,
    ) -> CpuSet {
        // Cheapest checks first: the main thread, whose mask most threads are created
        // with, before the scan of every thread of the process.
        let inherited = tid == pid
            || current == want_now
            || self.threads.get(&pid).and_then(|t| t.outcome.effective()) == Some(current)
            || self
                .threads
                .values()
                .any(|t| t.outcome.effective() == Some(current));
        if inherited {
            self.original.clone()
        } else {
            current.clone()
        }
    }
}

/// What a managed thread met again needs, from [`recheck`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Recheck {
    /// Nothing: its outcome is final for this target (refused, not permitted: no retry
    /// loop), or it still has the mask we set.
    Settled,
    /// Someone else changed the mask we set (`expected`).
    Foreign { expected: CpuSet },
    /// Its target is applied (again): a new unit or slot, stale (CPUs or rules
    /// changed), not applied yet, or narrowed by the kernel.
    Apply,
}

/// What managed thread `t`, now in `seat` and found with mask `current`, needs for
/// `target` (`want_now`: its online CPUs). A change by someone else is only looked for
/// when `verify`.
pub(super) fn recheck(
    t: &ManagedThread,
    seat: (ThreadPlacement, usize),
    current: &CpuSet,
    target: &CpuSet,
    want_now: &CpuSet,
    verify: bool,
) -> Recheck {
    if (t.placement, t.slot) != seat || t.stale {
        return Recheck::Apply;
    }
    if matches!(t.outcome, Outcome::Refused { .. } | Outcome::Permission) {
        return Recheck::Settled;
    }
    let Some(ours) = t.outcome.effective() else {
        return Recheck::Apply;
    };
    if current == ours {
        return Recheck::Settled;
    }
    // Narrower than ours, within what we asked for: a cpuset or an offline CPU, not a
    // person. Anything else is someone else's doing.
    let kernel_widened = want_now.is_empty();
    if verify && !current.is_subset(target) && !kernel_widened {
        return Recheck::Foreign {
            expected: ours.clone(),
        };
    }
    Recheck::Apply
}

/// Whether a thread in `seat` takes it anew: met for the first time (`t` is `None`), or
/// renamed into another unit or slot.
pub(super) fn takes_new_seat(t: Option<&ManagedThread>, seat: (ThreadPlacement, usize)) -> bool {
    t.is_none_or(|t| (t.placement, t.slot) != seat)
}

/// Whether the journal lists pinned thread `tid` of `pid`: it lists the main thread's
/// masks and the threads with their own (a thread entry, or an `original` that is not
/// the process's).
pub(super) fn journal_lists(
    pid: i32,
    tid: Tid,
    placement: ThreadPlacement,
    original: &CpuSet,
    process_original: &CpuSet,
) -> bool {
    tid == pid || placement != ThreadPlacement::Process || original != process_original
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
            "pid {pid} ({comm}), thread {tid}: more threads than slots ({slots}) of rule {rule}: \
             this thread shares the CPUs of slot {}; \
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
            "pid {pid}, thread {tid} (rule {rule}): someone else changed the affinity of \
             a managed thread from CPUs {expected} to {found}; {}; \
             further such threads of this process are counted, one line each {} s",
            if released { "no longer managing it" } else { "re-asserting" },
            crate::repeats::REPEATS_EVERY.as_secs()
        );
    }
}
