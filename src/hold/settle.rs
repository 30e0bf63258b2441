//! Partitions made and undone only while the kernel's view is settled, and undone
//! before their cgroup goes where that can be seen coming.
//!
//! ```text
//!   root cpuset.cpus.isolated ─┬─ baseline: isolated before pinnerd (isolcpus=, others)
//!                              ├─ live: partitions held whose cgroup is still there,
//!                              │  and any other cgroup that reads root or isolated
//!                              └─ the rest: pending — a removed partition the kernel
//!                                 has not let go of yet
//!   before every partition write (enable, disable, grant, ungrant):
//!     pending empty? ── no, after SETTLE_WAIT ─► new partition refused (one log line),
//!          │                                     undo put off, tried again
//!          ▼ yes: written
//!   after every release: the released CPUs gone from isolated? ── no ─► "CPUs … still
//!          isolated after the partition of … was released: the kernel kept them"
//!          (log, status), grants left in place until they go
//!   cgroup.events "populated 0" of a held partition (watched) ─► partition undone then,
//!          before systemd removes the cgroup
//! ```
//!
//! Why: a partition whose cgroup is removed is torn down by the kernel, and the 6.12
//! kernel crashed (list corruption in `update_prstate`) when a partition was written
//! while one was being torn down with its ancestors' grants taken back around it.
//! docs/sharing.md ("When a held unit ends") says what is and is not covered.
//!
//! Owns: the baseline, the undos put off, the watches. Must not touch: what is held
//! (the Holder's), cgroup files' details (see `partition`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use inotify::{WatchDescriptor, WatchMask, Watches};

use super::partition::{Cgroup2, Partition, Unable};
use super::{Holder, SETTLE_POLL, UNRELEASED_RETRY};
use crate::cpuset::CpuSet;

/// What the kernel isolates that is not pinnerd's, and the undos put off.
#[derive(Debug)]
pub(super) struct Settle {
    /// How long a partition write waits for pending CPUs to clear.
    pub(super) wait: Duration,
    /// Isolated before pinnerd made anything (`None`: not read yet).
    baseline: Option<CpuSet>,
    /// The pending CPUs last logged: said once, and once when they clear.
    said: Option<CpuSet>,
    unreleased: Vec<Unreleased>,
    retry_at: Option<Instant>,
}

/// A partition let go whose undo is not finished.
#[derive(Debug, Clone)]
struct Unreleased {
    p: Partition,
    /// `member` was written (or the cgroup was gone): only the grants are left, kept
    /// while the kernel still lists the CPUs.
    member_done: bool,
    /// What `status` and the log say about it.
    note: Option<String>,
}

impl Settle {
    pub(super) fn new(wait: Duration) -> Settle {
        Settle {
            wait,
            baseline: None,
            said: None,
            unreleased: Vec::new(),
            retry_at: None,
        }
    }

    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The undos put off, as holds for the journal: a crash or a stop that cannot
    /// finish them leaves them to the next start, which undoes them (nothing else is
    /// held for them: no `AllowedCPUs=` to give back).
    /// The cgroups and CPUs of the partitions whose undo is put off.
    pub(super) fn put_off_cpus(&self) -> Vec<(String, CpuSet)> {
        self.unreleased
            .iter()
            .map(|u| (u.p.cgroup.clone(), u.p.cpus.clone()))
            .collect()
    }

    /// Whether the undo of the partition of `cgroup` is put off (on record here).
    pub(super) fn tracks(&self, cgroup: &str) -> bool {
        self.unreleased.iter().any(|u| u.p.cgroup == cgroup)
    }

    pub(super) fn journal_holds(&self) -> Vec<super::Hold> {
        self.unreleased
            .iter()
            .map(|u| super::Hold {
                rule: "-".into(),
                unit: u
                    .p
                    .cgroup
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                cgroup: u.p.cgroup.clone(),
                pids: Vec::new(),
                adopted: false,
                cpus: u.p.cpus.clone(),
                mems: None,
                before_cpus: CpuSet::new(),
                before_mems: CpuSet::new(),
                confined: false,
                isolate: true,
                partition: Some(u.p.clone()),
                by_systemd: false,
                emptied: false,
                originals: Default::default(),
                dropins: Default::default(),
            })
            .collect()
    }
}

/// The `cgroup.events` files watched, by cgroup.
pub(super) struct Watch {
    watches: Watches,
    by_cgroup: HashMap<String, WatchDescriptor>,
}

impl Holder {
    /// The holder thread's inotify watches: each held partition's `cgroup.events` is
    /// watched, so that a unit left without processes is let go at once (the thread
    /// reading the events reconciles).
    pub fn watching(mut self, watches: Watches) -> Holder {
        self.watch = Some(Watch {
            watches,
            by_cgroup: HashMap::new(),
        });
        self
    }

    /// What the kernel kept after a release, one line each (for the log and `status`).
    pub fn notes(&self) -> Vec<String> {
        self.settle
            .borrow()
            .unreleased
            .iter()
            .filter_map(|u| u.note.clone())
            .collect()
    }

    /// At start: what is isolated now and is none of `left`'s partitions was isolated
    /// before pinnerd (isolcpus=, another tool's partitions) and is never pending.
    pub(super) fn note_baseline(&self, left: &[super::Hold]) {
        let Ok(cg2) = &self.cg2 else { return };
        let Ok(now) = cg2.isolated() else { return };
        let ours = left
            .iter()
            .filter_map(|h| h.partition.as_ref())
            .fold(CpuSet::new(), |a, p| a.union(&p.cpus));
        self.settle.borrow_mut().baseline = Some(now.difference(&ours));
    }

    /// CPUs of partitions held whose cgroup is still there (and `own`'s, the one being
    /// undone, while its cgroup is).
    fn live_cpus(&self, cg2: &Cgroup2, own: Option<&Partition>) -> CpuSet {
        let settle = self.settle.borrow();
        let held = self
            .held
            .iter()
            .chain(self.recovered.iter())
            .filter_map(|h| h.partition.as_ref());
        let put_off = settle
            .unreleased
            .iter()
            .filter(|u| !u.member_done)
            .map(|u| &u.p);
        held.chain(put_off)
            .chain(own)
            .filter(|p| cg2.dir(&p.cgroup).is_dir())
            .fold(CpuSet::new(), |a, p| a.union(&p.cpus))
    }

    /// The CPUs isolated now that are neither the baseline nor a live partition's:
    /// `None` when the root's list cannot be read (nothing to compare with).
    fn pending(&self, cg2: &Cgroup2, own: Option<&Partition>) -> Option<CpuSet> {
        let now = cg2.isolated().ok()?;
        let live = self.live_cpus(cg2, own);
        let baseline = self
            .settle
            .borrow_mut()
            .baseline
            .get_or_insert_with(|| now.difference(&live))
            .clone();
        let pending = now.difference(&baseline.union(&live));
        if pending.is_empty() {
            return Some(pending);
        }
        // Partitions made since by others (another tool, an administrator) are live too:
        // only CPUs no cgroup claims are a removed partition's.
        Some(pending.difference(&cg2.partitions_live()))
    }

    /// Waits, at most the settle wait, until no removed partition is pending; the
    /// pending CPUs if they stay (logged once while they do).
    pub(super) fn settled(&self, own: Option<&Partition>) -> Result<(), Unable> {
        let Ok(cg2) = &self.cg2 else { return Ok(()) };
        let until = Instant::now() + self.settle.borrow().wait;
        loop {
            let pending = self.pending(cg2, own).unwrap_or_default();
            if pending.is_empty() {
                if let Some(was) = self.settle.borrow_mut().said.take() {
                    tracing::info!(cpus = %was, "the kernel let go of CPUs {was} of a removed partition: partitions are made again");
                }
                return Ok(());
            }
            let now = Instant::now();
            if now >= until {
                let mut settle = self.settle.borrow_mut();
                if settle.said.as_ref() != Some(&pending) {
                    tracing::warn!(cpus = %pending, "{}", Unable::Pending { cpus: pending.clone() });
                    settle.said = Some(pending.clone());
                }
                return Err(Unable::Pending { cpus: pending });
            }
            std::thread::sleep(SETTLE_POLL.min(until - now));
        }
    }

    /// Whether the kernel let go of `p`'s CPUs (waiting at most `wait`): the line that
    /// says it kept them, if it did.
    fn released_within(&self, p: &Partition, wait: Duration) -> Result<(), String> {
        let Ok(cg2) = &self.cg2 else { return Ok(()) };
        let until = Instant::now() + wait;
        loop {
            let kept = self
                .pending(cg2, None)
                .map(|pending| pending.intersection(&p.cpus))
                .unwrap_or_default();
            if kept.is_empty() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= until {
                return Err(format!(
                    "CPUs {kept} still isolated after the partition of {} was released: the kernel kept them",
                    p.cgroup
                ));
            }
            std::thread::sleep(SETTLE_POLL.min(until - now));
        }
    }

    /// After `member` was written (or the cgroup went): the kernel let go of the CPUs?
    pub(super) fn released(&self, p: &Partition) -> Result<(), String> {
        let wait = self.settle.borrow().wait;
        let r = self.released_within(p, wait);
        if let Err(kept) = &r {
            tracing::warn!(cgroup = %p.cgroup, cpus = %p.cpus, "{kept}");
        }
        r
    }

    /// The rest of `p`'s undo is tried again later.
    pub(super) fn put_off(&self, p: &Partition, member_done: bool) {
        let note = if member_done {
            self.released_within(p, Duration::ZERO).err()
        } else {
            None
        };
        let mut settle = self.settle.borrow_mut();
        settle.unreleased.retain(|u| u.p.cgroup != p.cgroup);
        settle.unreleased.push(Unreleased {
            p: p.clone(),
            member_done,
            note,
        });
        settle.retry_at = Some(Instant::now() + UNRELEASED_RETRY);
    }

    /// Undos put off, tried again once due: grants taken back from CPUs the kernel let
    /// go of since, the rest of an undo that waited for another partition.
    /// Whether any was due.
    pub(super) fn retry_unreleased(&self, now: Instant) -> bool {
        let Ok(cg2) = &self.cg2 else { return false };
        let due = {
            let mut settle = self.settle.borrow_mut();
            if settle.retry_at.is_none_or(|t| now < t) {
                return false;
            }
            settle.retry_at = None;
            settle.unreleased.clone()
        };
        // One at a time, the others still on record (live or pending as before).
        for u in due {
            let kept = u.member_done && self.released_within(&u.p, Duration::ZERO).is_err();
            if kept {
                continue;
            }
            self.settle
                .borrow_mut()
                .unreleased
                .retain(|e| e.p.cgroup != u.p.cgroup);
            if u.member_done {
                for e in cg2.ungrant(&u.p) {
                    tracing::warn!(cgroup = %u.p.cgroup, problem = %e, "the grant of CPUs {} for {} not taken back: {e}", u.p.cpus, u.p.cgroup);
                }
                tracing::info!(cgroup = %u.p.cgroup, cpus = %u.p.cpus, "the kernel let go of CPUs {} of the released partition of {}: its grants taken back", u.p.cpus, u.p.cgroup);
            } else {
                for e in self.undo_partition(cg2, &u.p) {
                    tracing::warn!(cgroup = %u.p.cgroup, problem = %e, "the partition of {} not fully undone: {e}", u.p.cgroup);
                }
            }
        }
        let mut settle = self.settle.borrow_mut();
        if !settle.unreleased.is_empty() && settle.retry_at.is_none() {
            settle.retry_at = Some(now + UNRELEASED_RETRY);
        }
        true
    }

    /// Held partitions whose unit has no process left: undone now, before systemd
    /// removes the cgroup (the hold itself stays until the daemon lets the unit go).
    pub(super) fn release_emptied(&mut self) {
        let Ok(cg2) = self.cg2.clone() else { return };
        let emptied: Vec<usize> = (0..self.held.len())
            .filter(|&i| {
                let h = &self.held[i];
                h.partition.is_some()
                    && !h.emptied
                    && cg2.populated_events(&h.cgroup) == Some(false)
            })
            .collect();
        for i in emptied {
            let Some(p) = self.held[i].partition.take() else {
                continue;
            };
            self.held[i].emptied = true;
            let h = self.held[i].clone();
            if h.by_systemd {
                if let Ok(u) = &self.units {
                    let _ = u.set_partition(&h.unit, "member");
                }
            }
            let problems = self.undo_partition(&cg2, &p);
            tracing::info!(rule = %h.rule, unit = %h.unit, cpus = %p.cpus, "rule {}: no process left in {}: its partition of CPUs {} undone before its cgroup goes", h.rule, h.unit, p.cpus);
            for e in problems {
                tracing::warn!(rule = %h.rule, unit = %h.unit, problem = %e, "rule {}: the partition of {} not fully undone: {e}", h.rule, h.unit);
            }
            self.save();
        }
    }

    /// Watches the `cgroup.events` of every held partition, and no other.
    pub(super) fn sync_watches(&mut self) {
        let Some(w) = &mut self.watch else { return };
        let Ok(cg2) = &self.cg2 else { return };
        let wanted: Vec<&str> = self
            .held
            .iter()
            .filter(|h| h.partition.is_some() && !h.emptied)
            .map(|h| h.cgroup.as_str())
            .collect();
        let stale: Vec<String> = w
            .by_cgroup
            .keys()
            .filter(|c| !wanted.contains(&c.as_str()))
            .cloned()
            .collect();
        for c in stale {
            if let Some(wd) = w.by_cgroup.remove(&c) {
                // A watch on a removed file is gone already.
                let _ = w.watches.remove(wd);
            }
        }
        for c in wanted {
            if w.by_cgroup.contains_key(c) {
                continue;
            }
            match w.watches.add(cg2.events_file(c), WatchMask::MODIFY) {
                Ok(wd) => {
                    w.by_cgroup.insert(c.to_string(), wd);
                }
                Err(e) => {
                    tracing::debug!(cgroup = %c, error = %e, "cgroup.events not watched (let go at the next reconcile)")
                }
            }
        }
    }
}
