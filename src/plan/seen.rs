//! What a plan is made in, as the manager reports it: the cgroup cpusets of each
//! rule's processes (with their memory) and the slots their threads take. Values only:
//! the manager fills them, the daemon's loop plans with them ([`super::Plan::again`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::cpuset::CpuSet;

/// What the manager saw of the processes it manages, for the plan to be made in: their
/// cgroup cpusets (with their memory) and the slots their threads take. The manager
/// reports it; the daemon's loop makes the plan ([`Plan::again`]) and hands it down.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub cpusets: Cpusets,
    pub demand: Demand,
}

/// The distinct cgroup cpusets each rule's processes live in, as the manager sees
/// them. `None` stands for all CPUs (a process whose cpuset holds every CPU a plan
/// may choose from).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpusets {
    by_rule: BTreeMap<String, BTreeSet<Option<String>>>,
    /// (rule, cpuset) → the resident memory per node of the processes it places there.
    pub(super) memory: BTreeMap<(String, Option<String>), crate::memory::NodeBytes>,
}

impl Cpusets {
    /// Notes that a process of `rule` lives in `cpuset` (`None`: all CPUs).
    pub fn add(&mut self, rule: &str, cpuset: Option<&CpuSet>) {
        self.by_rule
            .entry(rule.to_string())
            .or_default()
            .insert(cpuset.map(|c| c.to_string()));
    }

    /// Notes that a process of `rule` in `cpuset` has `bytes` per node.
    pub fn add_memory(
        &mut self,
        rule: &str,
        cpuset: Option<&CpuSet>,
        bytes: &crate::memory::NodeBytes,
    ) {
        let sum = self
            .memory
            .entry((rule.to_string(), cpuset.map(|c| c.to_string())))
            .or_default();
        for (n, b) in bytes {
            let e = sum.entry(*n).or_insert(0);
            *e = e.saturating_add(*b);
        }
    }

    /// The memory per node of `rule`'s processes in `cpuset`, if any was noted.
    pub fn memory_of(
        &self,
        rule: &str,
        cpuset: Option<&CpuSet>,
    ) -> Option<&crate::memory::NodeBytes> {
        self.memory
            .get(&(rule.to_string(), cpuset.map(|c| c.to_string())))
    }

    /// Each rule and the cpusets its processes live in, in words:
    /// `md-feed in 0-3, 4-7; pnl in all CPUs` (`no process` when there is none).
    pub fn describe(&self) -> String {
        let rules: Vec<String> = self
            .by_rule
            .iter()
            .map(|(rule, sets)| {
                let sets: Vec<&str> = sets
                    .iter()
                    .map(|c| c.as_deref().unwrap_or("all CPUs"))
                    .collect();
                format!("{rule} in {}", sets.join(", "))
            })
            .collect();
        if rules.is_empty() {
            "no process".into()
        } else {
            rules.join("; ")
        }
    }

    /// The cpusets `rule` is planned in: all CPUs when none is known.
    pub fn of(&self, rule: &str) -> Vec<Option<CpuSet>> {
        match self.by_rule.get(rule) {
            Some(set) if !set.is_empty() => set
                .iter()
                .map(|c| c.as_ref().map(|c| c.parse().expect("printed by CpuSet")))
                .collect(),
            _ => vec![None],
        }
    }
}

/// How many slots of each non-shared thread entry live threads take: the highest slot
/// taken plus one, over the rule's processes. Part of what the manager reports
/// ([`Seen`]); a plan made without it holds no slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    by_entry: BTreeMap<(String, usize), usize>,
}

impl Demand {
    /// Notes that a thread of `rule`'s entry `entry` takes slot `slot`.
    pub fn take(&mut self, rule: &str, entry: usize, slot: usize) {
        let n = self.by_entry.entry((rule.to_string(), entry)).or_default();
        *n = (*n).max(slot + 1);
    }

    /// This demand with every entry raised to at least `floor`'s.
    pub fn with_floor(&self, floor: &Demand) -> Demand {
        let mut out = self.clone();
        for (k, n) in &floor.by_entry {
            let m = out.by_entry.entry(k.clone()).or_default();
            *m = (*m).max(*n);
        }
        out
    }

    /// Slots taken of `rule`'s entry `entry`.
    pub fn of(&self, rule: &str, entry: usize) -> usize {
        self.by_entry
            .get(&(rule.to_string(), entry))
            .copied()
            .unwrap_or(0)
    }
}
