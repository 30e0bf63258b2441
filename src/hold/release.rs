//! Letting go: what a previous run left (recovered, expired), what is no longer wanted,
//! a partition undone (waiting for the kernel where it must, see `settle`), a hold not
//! fully undone kept on record, and the stop — undoing until a deadline, or keeping
//! everything for the next start when the daemon restarts.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::cpuset::CpuSet;

use super::partition::{Cgroup2, Partition};
use super::{Hold, Holder, Target, RECOVERY_GRACE, UNRELEASED_RETRY};

impl Holder {
    /// At start: reads what a previous run left. Holds whose unit still has processes
    /// are kept (isolation is never left for nobody, nor dropped under a running
    /// process) until the daemon wants them again or `RECOVERY_GRACE` passes; the rest
    /// are undone now. Returns lines for the log.
    pub fn recover(&mut self, now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        let left = match self.journal.load() {
            Ok(left) => left,
            Err(e) => {
                self.note_baseline(&[]);
                return vec![format!("hold journal not used: {e}")];
            }
        };
        // What is isolated now and none of the journal's partitions: not pinnerd's.
        self.note_baseline(&left);
        let (alive, dead): (Vec<Hold>, Vec<Hold>) = left
            .into_iter()
            .partition(|h| self.cg2.as_ref().is_ok_and(|c| c.populated(&h.cgroup)));
        for h in alive {
            lines.push(format!(
                "kept what a previous run held for rule {} in {} until it is wanted again",
                h.rule, h.unit
            ));
            self.recovered.push(h);
        }
        for h in dead {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            lines.push(if problems.is_empty() {
                format!("undid what a previous run held for rule {rule} in {unit}")
            } else {
                format!(
                    "could not fully undo what a previous run held for rule {rule} in {unit} ({}); kept in the journal",
                    problems.join("; ")
                )
            });
        }
        if !self.recovered.is_empty() {
            self.grace_until = Some(now + RECOVERY_GRACE);
        }
        self.save();
        lines
    }

    /// Recovered holds nobody wanted within the grace: undone. Undos put off are tried
    /// again.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        if self.retry_unreleased(now) {
            self.save();
        }
        let Some(until) = self.grace_until else {
            return Vec::new();
        };
        if now < until {
            return Vec::new();
        }
        self.grace_until = None;
        let mut lines = Vec::new();
        while let Some(h) = self.recovered.pop() {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            lines.push(format!(
                "undid what a previous run held for rule {rule} in {unit}: not wanted again{}",
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(" ({}; kept in the journal)", problems.join("; "))
                }
            ));
        }
        self.save();
        lines
    }

    /// Lets go of what is no longer wanted as it is held, or whose unit emptied and has
    /// processes again (a new start of it: held anew). The holds kept stay on record
    /// while the others are undone: their partitions are live ones.
    pub(super) fn release_unwanted(&mut self, targets: &BTreeMap<String, Target>) {
        let cg2 = self.cg2.as_ref().ok();
        let (mut kept, gone): (Vec<Hold>, Vec<Hold>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| {
                let refilled =
                    h.emptied && cg2.and_then(|c| c.populated_events(&h.cgroup)) == Some(true);
                targets
                    .get(&h.unit)
                    .is_some_and(|t| h.same_target(t) && !refilled)
            });
        // The masks to give back follow the daemon's: tasks come and go.
        for h in &mut kept {
            if let Some(t) = targets.get(&h.unit) {
                h.originals.clone_from(&t.originals);
            }
        }
        self.held = kept;
        for h in gone {
            let (rule, unit, cpus) = (h.rule.clone(), h.unit.clone(), h.cpus.clone());
            for p in self.undo_or_keep(h) {
                tracing::warn!(rule = %rule, unit = %unit, problem = %p, "rule {rule}: the hold of {unit} not fully undone ({p}); kept in the journal");
            }
            tracing::info!(rule = %rule, unit = %unit, cpus = %cpus, "rule {rule}: unit {unit} let go, CPUs {cpus} given back and its own AllowedCPUs= with them");
        }
    }

    /// Holds a previous run left that are wanted as they are: taken over, untouched;
    /// wanted otherwise: undone; not wanted (yet): kept until the grace ends.
    pub(super) fn take_over_recovered(&mut self, targets: &BTreeMap<String, Target>) {
        let mut undo = Vec::new();
        for h in std::mem::take(&mut self.recovered) {
            match targets.get(&h.unit) {
                Some(t) if h.same_target(t) && !self.held.iter().any(|k| k.unit == h.unit) => {
                    tracing::info!(rule = %h.rule, unit = %h.unit, "rule {}: the hold of {} left by a previous run taken over", h.rule, h.unit);
                    self.held.push(h);
                }
                Some(_) => undo.push(h),
                None => self.recovered.push(h),
            }
        }
        for h in undo {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            for p in self.undo_or_keep(h) {
                tracing::warn!(rule = %rule, unit = %unit, problem = %p, "rule {rule}: the hold of {unit} left by a previous run not fully undone ({p}); kept in the journal");
            }
        }
        if self.recovered.is_empty() {
            self.grace_until = None;
        }
    }

    /// Takes a partition back: `member` again (by the helper where the daemon may
    /// not; never the state read before, which may be a leftover of pinnerd's), then —
    /// once the kernel no longer lists its CPUs as isolated — the granted CPUs out of
    /// the ancestors. Nothing is written while another removed partition is pending,
    /// and the grants stay while the kernel keeps the CPUs: either way the rest is put
    /// off and tried again (see `settle`). Returns what was not undone.
    pub(super) fn undo_partition(&self, cg2: &Cgroup2, p: &Partition) -> Vec<String> {
        if let Err(e) = self.settled(Some(p)) {
            self.put_off(p, false);
            return vec![format!(
                "undo of the partition of {} put off: {e}",
                p.cgroup
            )];
        }
        let mut problems = Vec::new();
        if let Err(e) = cg2.unpartition_by(p, &self.partition_writer()) {
            problems.push(e.to_string());
        }
        if !problems.is_empty() {
            problems.extend(cg2.ungrant(p).into_iter().map(|e| e.to_string()));
            return problems;
        }
        if let Err(kept) = self.released(p) {
            self.put_off(p, true);
            return vec![kept];
        }
        problems.extend(cg2.ungrant(p).into_iter().map(|e| e.to_string()));
        problems
    }

    /// Undoes a hold: partition, then the unit's own values, then masks systemd left.
    /// Returns what could not be undone of the partition and of the unit, apart.
    pub(super) fn undo_parts(&self, h: &Hold) -> (Vec<String>, Vec<String>) {
        let mut partition = Vec::new();
        if let (Some(p), Ok(cg2)) = (&h.partition, &self.cg2) {
            if h.by_systemd {
                if let Ok(u) = &self.units {
                    if let Err(e) = u.set_partition(&h.unit, "member") {
                        partition.push(e.to_string());
                    }
                }
            }
            partition.extend(self.undo_partition(cg2, p));
        }
        let mut problems = Vec::new();
        if h.confined {
            let gone = || !self.cg2.as_ref().is_ok_and(|c| c.dir(&h.cgroup).is_dir());
            match &self.units {
                Ok(u) => {
                    let mems = h.mems.as_ref().map(|_| &h.before_mems);
                    match u.set_allowed(&h.unit, Some(&h.before_cpus), mems) {
                        Ok(()) => {
                            // The unit follows its files again, not what set-property
                            // wrote for the hold.
                            for (property, text) in &h.dropins {
                                if let Err(e) =
                                    u.restore_runtime_dropin(&h.unit, property, text.as_deref())
                                {
                                    tracing::warn!(unit = %h.unit, property = %property, error = %e, "unit {}: the runtime drop-in for {property} not put back as it was before the hold: {e}", h.unit);
                                }
                            }
                        }
                        // A unit that is gone holds nothing any more.
                        Err(e) if gone() => {
                            tracing::debug!(unit = %h.unit, error = %e, "unit gone before it was let go");
                        }
                        Err(e) => problems.push(e.to_string()),
                    }
                }
                Err(_) if gone() => {}
                Err(e) => problems.push(format!("AllowedCPUs= not given back: {e}")),
            }
            if let Ok(cg2) = &self.cg2 {
                // The unit's own CPUs were none: its cgroup's are its parent's again,
                // whatever systemd left there.
                // Those widened short before this one: widened again after it.
                let earlier = std::mem::take(&mut *self.widened.borrow_mut());
                if h.before_cpus.is_empty() && problems.is_empty() {
                    self.widen(cg2, &h.unit, &h.cgroup, &h.cpus, &h.originals);
                }
                self.widen_again(cg2, earlier);
                if cg2.dir(&h.cgroup).is_dir() {
                    self.give_back_on(cg2, &h.unit, &h.cgroup, &h.cpus, &h.originals);
                }
            }
        }
        (partition, problems)
    }

    /// Gives the tasks of `cgroup` their masks back where they are `cpus` (or their
    /// originals narrowed to it), and says how many.
    fn give_back_on(
        &self,
        cg2: &Cgroup2,
        unit: &str,
        cgroup: &str,
        cpus: &CpuSet,
        originals: &BTreeMap<u32, CpuSet>,
    ) {
        let n = (self.give_back)(cg2, cgroup, cpus, originals);
        if n > 0 {
            tracing::info!(unit = %unit, tasks = n, "unit {unit}: the masks systemd left on CPUs {cpus} given back to {n} tasks");
        }
    }

    /// Widens the `cpuset.cpus` systemd left on `cgroup` (see
    /// [`Cgroup2::widen_left_cpus`]); one that could not have every CPU yet (a sibling
    /// still holds some) is widened again after each later undo.
    fn widen(
        &self,
        cg2: &Cgroup2,
        unit: &str,
        cgroup: &str,
        was: &CpuSet,
        originals: &BTreeMap<u32, CpuSet>,
    ) {
        match cg2.widen_left_cpus(cgroup, was) {
            Ok(Some((now, every))) => {
                if &now != was {
                    tracing::info!(unit = %unit, cpus = %now, "unit {unit}: cpuset.cpus {was} that systemd left with AllowedCPUs= reset widened to {now}");
                }
                let mut w = self.widened.borrow_mut();
                if every {
                    w.remove(cgroup);
                } else {
                    let widened = super::Widened {
                        unit: unit.to_string(),
                        cpus: now,
                        originals: originals.clone(),
                    };
                    w.insert(cgroup.to_string(), widened);
                }
            }
            Ok(None) => {}
            Err(_) if !cg2.dir(cgroup).is_dir() => {}
            // systemd turned the cpuset controller off for it: its parent's CPUs bind it.
            Err(_) if !cg2.dir(cgroup).join("cpuset.cpus").exists() => {}
            Err(e) => {
                tracing::warn!(unit = %unit, cpus = %was, error = %e, "unit {unit}: cpuset.cpus {was} that systemd left with AllowedCPUs= reset not widened: {e}");
            }
        }
    }

    /// The cgroups widened short of every CPU, widened again now that a hold let go,
    /// and their tasks left on the narrower CPUs given their masks back (on Debian
    /// 13's 6.12 they stayed there once systemd turned the unit's cpuset off: VM check
    /// `isolate-two-rules-let-go`).
    fn widen_again(&self, cg2: &Cgroup2, todo: BTreeMap<String, super::Widened>) {
        for (cgroup, w) in todo {
            if cg2.dir(&cgroup).is_dir() {
                self.widen(cg2, &w.unit, &cgroup, &w.cpus, &w.originals);
                self.give_back_on(cg2, &w.unit, &cgroup, &w.cpus, &w.originals);
            }
        }
    }

    /// Undoes a hold; one not fully undone is kept as a leftover (in the journal),
    /// less a partition whose undo waits for the kernel: that one is on record with
    /// `settle`, which tries it again. Returns what could not be undone.
    pub(super) fn undo_or_keep(&mut self, mut h: Hold) -> Vec<String> {
        let (mut problems, unit) = self.undo_parts(&h);
        let put_off = h
            .partition
            .as_ref()
            .is_some_and(|p| self.settle.borrow().tracks(&p.cgroup));
        if !unit.is_empty() || (!problems.is_empty() && !put_off) {
            if put_off {
                h.partition = None;
            }
            self.leftover.push(h);
        }
        problems.extend(unit);
        problems
    }

    /// At stop: everything held (and every leftover) is undone, partitions first, one
    /// hold after another until `until`; the journal is rewritten after each, so what is
    /// not undone by then — or could not be — stays in it for the next start. Returns
    /// lines for the log (warnings), one per hold left.
    pub fn release_all(&mut self, until: Instant) -> Vec<String> {
        let mut todo: Vec<Hold> = std::mem::take(&mut self.held)
            .into_iter()
            .chain(std::mem::take(&mut self.recovered))
            .chain(std::mem::take(&mut self.leftover))
            .collect();
        // CPUs isolated for nobody are the costliest leftover: partitions first.
        todo.sort_by_key(|h| h.partition.is_none());
        self.grace_until = None;
        let mut lines = Vec::new();
        let mut todo = std::collections::VecDeque::from(todo);
        while let Some(h) = todo.pop_front() {
            if (self.clock)() >= until {
                todo.push_front(h);
                lines.extend(todo.iter().map(|h| {
                    format!(
                        "hold for rule {} in {} not undone before the stop's deadline; left in the journal for the next start",
                        h.rule, h.unit
                    )
                }));
                break;
            }
            // Still in the journal while it is undone.
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            if !problems.is_empty() {
                lines.push(format!(
                    "hold for rule {rule} in {unit} not fully undone at stop ({}); left in the journal for the next start",
                    problems.join("; ")
                ));
            }
            let left: Vec<Hold> = self
                .leftover
                .iter()
                .chain(&todo)
                .cloned()
                .chain(self.settle.borrow().journal_holds())
                .collect();
            if let Err(e) = self.journal.save(&left) {
                tracing::warn!(error = %e, "cannot write the hold journal: {e}");
            }
        }
        self.leftover.extend(todo);
        // Undos put off for the kernel: tried once more while the deadline allows.
        if (self.clock)() < until {
            self.retry_unreleased(Instant::now() + UNRELEASED_RETRY);
        }
        self.save();
        lines
    }

    /// At stop, when systemd is restarting the daemon's own unit (`systemctl restart`,
    /// a package upgrade): everything held stays as it is and on record, for the next
    /// start to take over untouched as after a crash, so that isolation does not lapse
    /// across the restart. `None` when it is no restart (or systemd cannot say): then
    /// the stop undoes what is held ([`release_all`](Self::release_all)). Returns lines
    /// for the log.
    pub fn keep_for_restart(&mut self) -> Option<Vec<String>> {
        let units = self.units.as_ref().ok()?;
        let held = self.held.len() + self.recovered.len();
        if held == 0 || !units.restarting(std::process::id()).unwrap_or(false) {
            return None;
        }
        self.save();
        Some(vec![format!(
            "the daemon restarts: {} kept for the next start to take over",
            crate::words::count(held, "hold")
        )])
    }
}
