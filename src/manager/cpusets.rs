//! The cgroup cpuset of each managed process, and reporting what a plan must be made in.
//!
//! Owns: what each managed process's cpuset is (its cgroup's effective CPUs, else its
//! allowed mask at first contact — never a mask pinnerd set since, nor a cpuset a hold
//! of its rule made), noticing that it changed (a rescan reads it again), reporting the
//! distinct cpusets, memory and slots taken ([`Seen`], [`Manager::wants_plan`]), and
//! taking the plan the daemon makes for them
//! ([`Input::Replanned`](super::Input::Replanned)).
//!
//! A rule's own hold never changes what the rule is planned on: a hold confines its
//! unit to the rule's CPUs (`AllowedCPUs=`, and an isolated partition takes them from
//! every other cgroup), so the cpuset read back is the plan's own output. Planned in,
//! it would shrink the plan (with `smt = "avoid"` and `exclusive`, to nothing: the
//! siblings are outside), the hold would let go and be made again, forever. So the
//! CPUs pinnerd asked its holds to set are kept per rule ([`Manager::note_hold`]), and
//! a cpuset read inside them (the unit confined), or one that differs from the cpuset
//! before only in them (another unit of the rule isolated), is the hold's doing: the
//! process stays planned in the cpuset it had before (all CPUs, when it was first seen
//! already held), and `explain` says so.
//! Must not touch: the choice of CPUs or the making of plans (the daemon's, through
//! `plan`), affinity calls (see `applying`).

use super::{Change, Manager, Source};
use crate::cpuset::CpuSet;
use crate::plan::{Cpusets, Demand, Plan, PlanState, Seen, UnitPlan};

/// What a plan gives threads, without what its slots units hold.
/// A memory read the manager waits for: process `pid` (started at `start_time`), per
/// node of `nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWanted {
    pub pid: i32,
    pub start_time: u64,
    pub nodes: Vec<u32>,
}

/// The rules whose units' CPUs differ between two plans (holding aside).
fn moved_rules(old: &Plan, new: &Plan) -> std::collections::BTreeSet<String> {
    let by_rule = |plan: &Plan| {
        let mut m: std::collections::BTreeMap<String, Vec<UnitPlan>> = Default::default();
        for u in targets(plan) {
            m.entry(u.rule.clone()).or_default().push(u);
        }
        m
    };
    let (a, b) = (by_rule(old), by_rule(new));
    a.keys()
        .chain(b.keys())
        .filter(|r| a.get(*r) != b.get(*r))
        .cloned()
        .collect()
}

fn targets(plan: &Plan) -> Vec<UnitPlan> {
    plan.units()
        .iter()
        .map(|u| {
            let mut u = u.clone();
            if let PlanState::Slots { held_slots, .. } = &mut u.state {
                *held_slots = 0;
            }
            u
        })
        .collect()
}

/// Where a managed process's cpuset came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Allowed {
    pub cpus: CpuSet,
    /// The cgroup file, or `None`: the allowed mask at first contact (or all CPUs, for
    /// a process first seen in a cpuset its rule's hold made).
    pub file: Option<std::path::PathBuf>,
    /// What the cgroup file reads while a hold of the process's rule confines it
    /// (not planned in: see the module doc).
    pub held: Option<CpuSet>,
}

impl Allowed {
    /// In words, for `explain` and `plan --live`.
    pub fn describe(&self) -> String {
        let mut s = match (&self.file, &self.held) {
            (Some(f), _) => format!("{} (from {})", self.cpus, f.display()),
            (None, Some(_)) => format!("{} (all CPUs: first seen already held)", self.cpus),
            (None, None) => format!("{} (its allowed mask at first contact)", self.cpus),
        };
        if let Some(h) = &self.held {
            s.push_str(&format!(
                "; it reads {h} while its rule's hold confines the unit: planned as without the hold"
            ));
        }
        s
    }
}

impl Manager {
    /// The cpuset of process `pid` of `source`, whose main thread's mask at first
    /// contact was `original`. A process first seen in a cpuset its rule's hold made
    /// (a held service's new process, a hold taken over from a previous run) is
    /// planned on all CPUs, as the rule's process was before the hold.
    pub(super) fn read_allowed(&self, pid: i32, original: &CpuSet, source: &Source) -> Allowed {
        match self.procs.cpuset(pid) {
            Some(c) if !c.cpus.is_empty() && self.own_hold(source, &c.cpus, None) => Allowed {
                cpus: self.plan.cpus().online.clone(),
                file: None,
                held: Some(c.cpus),
            },
            Some(c) if !c.cpus.is_empty() => Allowed {
                cpus: c.cpus,
                file: Some(c.file),
                held: None,
            },
            _ => Allowed {
                cpus: original.clone(),
                file: None,
                held: None,
            },
        }
    }

    /// Notes that a hold of `rule` was asked to set `cpus` on the unit of one of its
    /// processes (the daemon calls it for every hold it wants, before asking, and for
    /// the holds a previous run left): a cpuset read inside them is the hold's doing.
    pub fn note_hold(&mut self, rule: &str, cpus: &CpuSet) {
        let h = self.holding.entry(rule.to_string()).or_default();
        if !cpus.is_subset(h) {
            *h = h.union(cpus);
        }
    }

    /// Whether cpuset `read` of a process of `source` is what its rule's holds made: it
    /// lies inside the CPUs they were asked to set (its own unit confined), or it
    /// differs from `before` only in them (another unit of the rule isolated, or let go).
    fn own_hold(&self, source: &Source, read: &CpuSet, before: Option<&CpuSet>) -> bool {
        let Source::Rule(r) = source else {
            return false;
        };
        let Some(held) = self.holding.get(&r.name) else {
            return false;
        };
        read.is_subset(held) || before.is_some_and(|b| read.difference(held) == b.difference(held))
    }

    /// The nodes to weigh a process's memory on at first contact, for a rule whose
    /// placement weighs memory (`plan::memory::weighs`) on a machine of several nodes;
    /// `None` when it is not weighed.
    pub(super) fn weighs_memory(&self, source: &Source) -> Option<Vec<u32>> {
        let Source::Rule(r) = source else { return None };
        let mp = self.plan.memory_planning();
        if !mp.active() || !r.place.as_ref().is_some_and(crate::plan::memory::weighs) {
            return None;
        }
        Some(mp.node_ids())
    }

    /// Asks for where process `pid`'s memory is (read off the loop: `numa_maps` walks
    /// its page tables under its memory-map lock); its threads wait for it, and then for
    /// the plan made with it.
    pub(super) fn ask_memory(&mut self, pid: i32, start_time: u64, nodes: Vec<u32>) {
        self.memory_pending.insert(pid, start_time);
        self.memory_asked.push(MemoryWanted {
            pid,
            start_time,
            nodes,
        });
        self.awaiting.insert(pid);
    }

    /// The memory reads asked for since the last call: the daemon reads them off its
    /// loop and hands each back as [`Input::Memory`](super::Input::Memory).
    pub fn take_memory_reads(&mut self) -> Vec<MemoryWanted> {
        std::mem::take(&mut self.memory_asked)
    }

    /// A memory read's result: kept when it is the one pending for that process and it
    /// is large enough to weigh (the settings' minimum); its threads then wait only for
    /// the plan made with it.
    pub(super) fn memory_read(
        &mut self,
        pid: i32,
        start_time: u64,
        bytes: Option<crate::memory::NodeBytes>,
    ) {
        if self.memory_pending.get(&pid) != Some(&start_time) {
            return;
        }
        self.memory_pending.remove(&pid);
        let min = self.plan.memory_planning().min_bytes.max(1);
        if let Some(m) = self
            .managed
            .get_mut(&pid)
            .filter(|m| m.handle.start_time == start_time)
        {
            m.memory = bytes.filter(|b| b.values().sum::<u64>() >= min);
        }
    }

    /// Whether process `pid` waits for its memory to be read.
    pub(super) fn awaits_memory(&self, pid: i32) -> bool {
        self.memory_pending.contains_key(&pid)
    }

    /// The distinct cpusets of the processes each rule manages, and their memory. A
    /// rule whose processes all allow every CPU is left out (planned on all CPUs
    /// anyway).
    pub(super) fn current_cpusets(&self) -> Cpusets {
        let mut keys: std::collections::BTreeMap<&str, Vec<Option<CpuSet>>> = Default::default();
        let mut out = Cpusets::default();
        for m in self.managed.values() {
            if let Source::Rule(r) = &m.source {
                let key = self.plan.cpuset_key(&m.allowed.cpus);
                if let Some(bytes) = &m.memory {
                    out.add_memory(&r.name, key.as_ref(), bytes);
                }
                keys.entry(&r.name).or_default().push(key);
            }
        }
        for (rule, ks) in keys {
            if ks.iter().any(Option::is_some) {
                for k in ks {
                    out.add(rule, k.as_ref());
                }
            }
        }
        out
    }

    /// The slots the managed threads of each non-shared thread entry take.
    pub(super) fn current_demand(&self) -> Demand {
        let mut out = Demand::default();
        for m in self.managed.values() {
            if let Source::Rule(r) = &m.source {
                for (entry, pool) in &m.slots {
                    if let Some(top) = pool.highest() {
                        out.take(&r.name, *entry, top);
                    }
                }
            }
        }
        out
    }

    /// What the manager sees of its processes now: the plan for them must be made in
    /// these cpusets, holding these slots.
    pub fn seen(&self) -> Seen {
        Seen {
            cpusets: self.current_cpusets(),
            // Slots the plan holds stay held until released (see `release_slots`).
            demand: self.current_demand().with_floor(&self.kept),
        }
    }

    /// Lets the plan give up the slots no live thread holds: the next
    /// [`Manager::wants_plan`] reports the slots taken now. True when there are such
    /// slots (a plan is then wanted). The loop calls it at most once per
    /// `daemon::state::SLOTS_KEPT`, which bounds the plans a thread renamed in and out
    /// of an entry (or made and ended) can cause.
    pub fn release_slots(&mut self) -> bool {
        let live = self.current_demand();
        if live.with_floor(&self.kept) == live {
            return false;
        }
        self.kept = crate::plan::Demand::default();
        true
    }

    /// What the manager saw, when the plan in force was not made for it (or processes
    /// wait for a plan, or a cpuset changed): the loop makes the plan again for it
    /// ([`Plan::again`]) and hands it down ([`Input::Replanned`](super::Input::Replanned)).
    /// `None`: the plan in force fits.
    pub fn wants_plan(&self) -> Option<Seen> {
        let seen = self.seen();
        // Processes waiting for their memory to be read want no plan yet.
        let fits = self.awaiting.iter().all(|p| self.awaits_memory(*p))
            && !self.reapply
            && seen.cpusets == *self.plan.cpusets()
            && seen.demand == *self.plan.demand();
        (!fits).then_some(seen)
    }

    /// Takes the plan made again for what was seen: the processes that waited for it
    /// are pinned; when it moves any unit's CPUs (or a cpuset changed), every managed
    /// thread is applied again.
    pub(super) fn replanned(&mut self, plan: Plan, out: &mut Vec<Change>) {
        // Rules of explicit CPUs only come out the same, and so do slots whose holding
        // alone changed: nothing to re-apply. Only the processes of rules whose units
        // moved are applied again.
        let moved = moved_rules(&self.plan, &plan);
        if !moved.is_empty() {
            let rules = moved.iter().cloned().collect::<Vec<_>>().join(", ");
            let cpusets = plan.cpusets().describe();
            let cpus: Vec<String> = targets(&plan)
                .iter()
                .filter(|u| moved.contains(&u.rule))
                .map(|u| match &u.cpuset {
                    Some(c) => format!("{} in cpuset {c}: {}", u.name(), u.state.describe()),
                    None => format!("{} on all CPUs: {}", u.name(), u.state.describe()),
                })
                .collect();
            tracing::info!(
                %rules, %cpusets,
                "planned again for the processes' cgroup cpusets ({cpusets}): {}; \
                 the threads of {} {rules} are applied again",
                cpus.join("; "),
                crate::words::plural(moved.len(), "rule")
            );
        }
        self.kept = plan.demand().clone();
        self.plan = plan;
        let (still, mut awaiting): (std::collections::BTreeSet<i32>, _) =
            std::mem::take(&mut self.awaiting)
                .into_iter()
                .partition(|p| self.awaits_memory(*p));
        self.awaiting = still;
        if std::mem::take(&mut self.reapply) {
            self.reevaluate_managed(out);
            return;
        }
        if !moved.is_empty() {
            let of_moved: Vec<i32> = self
                .managed
                .iter()
                .filter(|(_, m)| matches!(&m.source, Source::Rule(r) if moved.contains(&r.name)))
                .map(|(pid, _)| *pid)
                .collect();
            for pid in &of_moved {
                awaiting.remove(pid);
            }
            self.reevaluate(of_moved, out);
        }
        for pid in awaiting {
            match self.process(pid) {
                Some(snap) => self.consider_snapshot(snap, None, out),
                None => self.forget(pid, out),
            }
        }
    }

    /// Reads a managed process's cpuset again (the rescan's check): a process moved
    /// to another cgroup, or its cgroup's CPUs edited, has its threads applied again in
    /// the new cpuset.
    pub(super) fn recheck_cpuset(&mut self, pid: i32) {
        let Some(c) = self.procs.cpuset(pid) else {
            return;
        };
        if c.cpus.is_empty() {
            return;
        }
        let Some(m) = self.managed.get(&pid) else {
            return;
        };
        if m.allowed.cpus == c.cpus && m.allowed.held.is_none() {
            return;
        }
        if self.own_hold(&m.source, &c.cpus, Some(&m.allowed.cpus)) {
            // The hold's doing: planned as before it; only what explain says changes.
            let held = (c.cpus != m.allowed.cpus).then_some(c.cpus);
            if let Some(m) = self.managed.get_mut(&pid) {
                m.allowed.held = held;
            }
            return;
        }
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        tracing::info!(
            pid, comm = %m.comm, from = %m.allowed.cpus, to = %c.cpus, file = %c.file.display(),
            "pid {pid} ({}): its cpuset changed from {} to {} ({}): planning again",
            m.comm, m.allowed.cpus, c.cpus, c.file.display()
        );
        m.allowed = Allowed {
            cpus: c.cpus,
            file: Some(c.file),
            held: None,
        };
        for t in m.threads.values_mut() {
            t.stale = true;
        }
        // Its threads wait for the plan made in the new cpuset.
        self.awaiting.insert(pid);
        self.reapply = true;
    }

    /// The cpuset managed process `pid` is planned in: `None` when it allows every CPU
    /// (or is not managed).
    pub fn cpuset_key_of(&self, pid: i32) -> Option<CpuSet> {
        self.managed
            .get(&pid)
            .and_then(|m| self.plan.cpuset_key(&m.allowed.cpus))
    }

    /// The cpuset a managed process is planned in, in words (`None`: not managed).
    pub fn cpuset_of(&self, pid: i32) -> Option<String> {
        self.managed.get(&pid).map(|m| m.allowed.describe())
    }
}
