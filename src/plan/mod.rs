//! The planner: rules, latency domains and CPUs in, a [`Plan`] out.
//!
//! Owns: which CPUs every placement unit gets (a rule's `[rule.place]`, or one
//! `[[rule.threads]]` entry) or why it gets none, exclusivity between rules, the CPUs
//! of a run-time pin, and whether a new plan is better enough to move threads for.
//!
//! Must not touch: processes, affinity calls, files, the clock or logs. Pure: the daemon
//! computes a plan whenever rules, domains or CPUs change and hands it to the
//! `manager`, which applies it.
//!
//! ```text
//!   RuleSet ─┐
//!   Cpus ────┼─► Plan::new ─► Plan (units in precedence order) ─► manager
//!   Choose ──┘   (Domains, or a stand-in in tests)                  │
//!   Plan + Seen (reported by the manager) + Choose ─► Plan::again ◄─┘ (by the daemon)
//!   old Plan + new Plan + Domains ─► Plan::improvements ─► move or not
//! ```
//!
//! Precedence: priority, then explicit `cpus` before counts, then name, then the rule's
//! own `[rule.place]` before its thread entries. An exclusive unit may not take CPUs any
//! earlier unit holds; no unit may take CPUs an earlier exclusive unit holds. A unit
//! that would need such CPUs loses: it is not applied, and its plan says to whom it
//! lost ([`PlanState::Lost`]). A thread entry places within its `within` CPUs, else
//! within its rule's own CPUs when the rule has a placed `[rule.place]` ("carved from
//! [rule.place]", [`SlotsFrom`]), else among all usable CPUs; a non-shared entry gives
//! each matching thread its own `count` CPUs (slots), planned together
//! (`placement::slots`), wrapping around when the CPUs run out. A slots unit holds
//! (for exclusivity, measurements and interrupts) only the slots its live threads take
//! ([`Demand`], handed in by the manager; none until a thread appears), never every
//! slot it could fill.
//!
//! Cgroup cpusets: a count unit is planned once per distinct cpuset its rule's processes
//! live in ([`Cpusets`]: what the manager reports it saw, [`Seen`]; the daemon's loop
//! plans again with it through [`Plan::again`] and hands the plan down),
//! each instance choosing only inside its cpuset, like a template; exclusivity is checked
//! per CPU across all instances. A rule the cpusets do not name is planned on all CPUs.
//! Explicit `cpus` are planned once, whatever the cpusets (the kernel classifies them).
//!
//! Inside: `building` (the units in precedence order, each instance given CPUs or
//! told why not: how every plan is made), `unit` (one unit's plan, [`PlanState`], and
//! its words), `choose` (the [`Choose`] seam and the placement engine behind it), `seen`
//! (what a plan is made in: [`Cpusets`], [`Demand`]), `memory`, `making` (the plan of
//! the rules in force, made one way for the daemon and `plan --live`: chosen, memory
//! weighed, the `[sched-ext]` policy applied), `doubts`, `tests`.

use std::collections::HashMap;

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::placement::{self, PlacementError};
use crate::rules::{CpuTarget, PlacementRequest, RuleSet};

mod building;
mod choose;
pub mod making;
pub mod memory;
mod seen;
mod unit;

use building::Basis;
pub use choose::{engine_request, Choose, Chosen, SharedChoose};
pub use making::{PlanInputs, Planned, SchedExtStep, UnderSchedExt};
pub use memory::MemoryPlanning;
pub use seen::{Cpusets, Demand, Seen};
pub use unit::{slots_in_words, PlanState, SlotsFrom, UnitPlan};

/// The CPUs a plan is made for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpus {
    /// Online CPUs: explicit `cpus` apply within them.
    pub online: CpuSet,
    /// CPUs never chosen for count placements (housekeeping CPUs).
    pub reserved: CpuSet,
}

impl Cpus {
    /// The daemon's: `online`, with the settings' housekeeping CPUs reserved.
    pub fn from_settings(online: CpuSet, settings: &crate::settings::Settings) -> Cpus {
        Cpus {
            online,
            reserved: settings.placement.housekeeping_cpus.clone(),
        }
    }
}

/// Every unit's CPUs, or why it has none, for one set of rules on one set of CPUs.
#[derive(Clone, Default)]
pub struct Plan {
    /// What it was made of.
    basis: Basis,
    /// In precedence order.
    units: Vec<UnitPlan>,
    /// (rule, thread entry, cpuset) → index in `units`.
    index: HashMap<(String, Option<usize>, Option<CpuSet>), usize>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("cpus", &self.basis.cpus)
            .field("cpusets", &self.basis.cpusets)
            .field("units", &self.units)
            .finish()
    }
}

/// A unit that a new plan would place materially better: its name and its worst
/// pairwise latency now and after.
#[derive(Debug, Clone, PartialEq)]
pub struct Better {
    pub unit: String,
    pub now_ns: f64,
    pub then_ns: f64,
}

/// Why a run-time pin has no CPUs.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// There are no latency domains to choose with.
    #[error("cannot place {request}: no placement engine")]
    NoEngine { request: String },
    #[error("cannot place {request}: {source}")]
    Unplaceable {
        request: String,
        source: PlacementError,
    },
    /// Explicit CPUs of which an exclusive rule holds some: a run-time pin takes only
    /// CPUs no exclusive rule holds.
    #[error("cpus {cpus}: CPUs {held} are held exclusively by rule {rule:?}; a run-time pin takes only CPUs no exclusive rule holds")]
    Exclusive {
        cpus: CpuSet,
        rule: String,
        held: CpuSet,
    },
}

impl Plan {
    /// No rules: nothing placed, on `cpus`.
    pub fn empty(cpus: Cpus) -> Plan {
        Plan {
            basis: Basis {
                cpus,
                ..Basis::default()
            },
            ..Plan::default()
        }
    }

    /// Plans every placement unit of `rules` in precedence order. Without `choose`
    /// (no latency domains), only explicit `cpus` units are placed.
    pub fn new(rules: &RuleSet, cpus: &Cpus, choose: Option<&dyn Choose>) -> Plan {
        Basis {
            rules: rules.clone(),
            cpus: cpus.clone(),
            ..Basis::default()
        }
        .build(choose)
    }

    /// The same plan, weighing the memory of the processes each count unit places
    /// (noted in its [`Cpusets`]) with `memory`'s nodes and settings, chosen again with
    /// `choose`. Kept through [`Plan::again`] and [`Plan::widened`].
    pub fn with_memory(self, memory: MemoryPlanning, choose: Option<&dyn Choose>) -> Plan {
        if memory == self.basis.memory {
            return self;
        }
        if self.basis.cpusets.memory.is_empty() {
            // Nothing to weigh yet: the same units.
            let mut plan = self;
            plan.basis.memory = memory;
            return plan;
        }
        Basis {
            memory,
            ..self.basis
        }
        .build(choose)
    }

    /// The nodes and settings memory is weighed with.
    pub fn memory_planning(&self) -> &MemoryPlanning {
        &self.basis.memory
    }

    /// The same plan with every placed mask rounded up to the whole `groups` it
    /// touches (LLC groups or nodes, for a sched_ext scheduler that treats partial masks
    /// as second-class), within the CPUs the unit may use: never into housekeeping CPUs,
    /// outside its cpuset, or onto CPUs an exclusive unit holds. Empty `groups`: as
    /// chosen. Kept through [`Plan::again`].
    pub fn widened(&self, groups: Vec<CpuSet>, choose: Option<&dyn Choose>) -> Plan {
        Basis {
            widen: groups,
            ..self.basis.clone()
        }
        .build(choose)
    }

    /// The groups masks are rounded up to; empty when they are not.
    pub fn widen_groups(&self) -> &[CpuSet] {
        &self.basis.widen
    }

    /// The same rules on the same CPUs, planned in `cpusets` with this plan's demand.
    pub fn in_cpusets(&self, cpusets: &Cpusets, choose: Option<&dyn Choose>) -> Plan {
        self.again(
            &Seen {
                cpusets: cpusets.clone(),
                demand: self.basis.demand.clone(),
            },
            choose,
        )
    }

    /// The same rules on the same CPUs (and with the same memory and widening), planned
    /// for what the manager `seen`: in its processes' cpusets, holding the slots their
    /// threads take. `choose` should be the chooser this plan was made with. Without
    /// one, in the same cpusets, nothing is chosen again: the same slots, holding what
    /// is taken now.
    pub fn again(&self, seen: &Seen, choose: Option<&dyn Choose>) -> Plan {
        if choose.is_none() && seen.cpusets == self.basis.cpusets {
            let mut plan = self.clone();
            plan.basis.demand = seen.demand.clone();
            for u in &mut plan.units {
                if let (PlanState::Slots { slots, held_slots }, Some(i)) =
                    (&mut u.state, u.thread_entry)
                {
                    *held_slots = seen.demand.of(&u.rule, i).min(slots.len());
                }
            }
            return plan;
        }
        Basis {
            cpusets: seen.cpusets.clone(),
            demand: seen.demand.clone(),
            ..self.basis.clone()
        }
        .build(choose)
    }

    /// The slots live threads take, as this plan was made with.
    pub fn demand(&self) -> &Demand {
        &self.basis.demand
    }

    /// The cpusets this plan was made in.
    pub fn cpusets(&self) -> &Cpusets {
        &self.basis.cpusets
    }

    /// The cpuset key of a process allowed on `allowed` (its cgroup cpuset): `None`
    /// when it allows every CPU a count unit may choose from (or none of the online
    /// ones, which says nothing), else the online CPUs it allows.
    pub fn cpuset_key(&self, allowed: &CpuSet) -> Option<CpuSet> {
        let cpus = &self.basis.cpus;
        let general = cpus.online.difference(&cpus.reserved);
        let inside = allowed.intersection(&cpus.online);
        if inside.is_empty() || general.difference(allowed).is_empty() {
            None
        } else {
            Some(inside)
        }
    }
    /// The rules this plan places.
    pub fn rules(&self) -> &RuleSet {
        &self.basis.rules
    }

    /// The CPUs it was made for.
    pub fn cpus(&self) -> &Cpus {
        &self.basis.cpus
    }

    /// Every unit, in precedence order.
    pub fn units(&self) -> &[UnitPlan] {
        &self.units
    }

    /// The plan of a rule's `[rule.place]` (`None`) or thread entry, on all CPUs, else
    /// its first instance in a cpuset.
    pub fn get(&self, rule: &str, thread_entry: Option<usize>) -> Option<&PlanState> {
        self.get_in(rule, thread_entry, None).or_else(|| {
            self.units
                .iter()
                .find(|u| u.rule == rule && u.thread_entry == thread_entry)
                .map(|u| &u.state)
        })
    }

    /// The plan of a rule's unit for a process in `cpuset` (a key from
    /// [`Plan::cpuset_key`]): its instance in that cpuset, else the one on all CPUs
    /// (explicit `cpus`, or a cpuset this plan was not made in).
    pub fn get_in(
        &self,
        rule: &str,
        thread_entry: Option<usize>,
        cpuset: Option<&CpuSet>,
    ) -> Option<&PlanState> {
        let at = |c: Option<&CpuSet>| {
            self.index
                .get(&(rule.to_string(), thread_entry, c.cloned()))
                .map(|&i| &self.units[i].state)
        };
        match cpuset {
            Some(c) => at(Some(c)).or_else(|| at(None)),
            None => at(None),
        }
    }

    /// Whether this plan has an instance of `rule`'s count units in `cpuset` (`None`:
    /// on all CPUs), or needs none (the rule has no count unit).
    pub fn has_cpuset(&self, rule: &str, cpuset: Option<&CpuSet>) -> bool {
        let Some(r) = self.basis.rules.get(rule) else {
            return true;
        };
        let counts = r.place.iter().any(is_count) || r.threads.iter().any(|t| is_count(&t.request));
        !counts
            || self
                .units
                .iter()
                .any(|u| u.rule == rule && u.cpuset.as_ref() == cpuset)
    }

    /// The first exclusive unit (in precedence order) holding any of `cpus`: its rule and
    /// the CPUs of `cpus` it holds.
    fn exclusive_holder(&self, cpus: &CpuSet) -> Option<(String, CpuSet)> {
        self.units.iter().filter(|u| u.exclusive).find_map(|u| {
            let held = u.state.held().intersection(cpus);
            (!held.is_empty()).then(|| (u.rule.clone(), held))
        })
    }

    /// CPUs held by exclusive units.
    pub fn exclusive_cpus(&self) -> CpuSet {
        self.units
            .iter()
            .filter(|u| u.exclusive)
            .fold(CpuSet::new(), |acc, u| acc.union(&u.state.held()))
    }

    /// The CPUs of a run-time pin (`PinProcess`): `request` placed among the CPUs that
    /// are online, not reserved and held by no exclusive unit; explicit CPUs are refused,
    /// naming the rule, when an exclusive unit holds any of them.
    pub fn pin(
        &self,
        request: &PlacementRequest,
        choose: Option<&dyn Choose>,
    ) -> Result<CpuSet, PinError> {
        if let CpuTarget::Cpus(c) = &request.target {
            return match self.exclusive_holder(c) {
                Some((rule, held)) => Err(PinError::Exclusive {
                    cpus: c.clone(),
                    rule,
                    held,
                }),
                None => Ok(c.clone()),
            };
        }
        let cpus = &self.basis.cpus;
        let mut pool = cpus
            .online
            .difference(&cpus.reserved)
            .difference(&self.exclusive_cpus());
        if let Some(w) = &request.within {
            pool = pool.intersection(w);
        }
        let choose = choose.ok_or_else(|| PinError::NoEngine {
            request: describe_request(request),
        })?;
        choose
            .choose(request, &pool)
            .map(|c| c.cpus)
            .map_err(|source| PinError::Unplaceable {
                request: describe_request(request),
                source,
            })
    }

    /// The count units that `new` (a plan of the same rules) would place better than
    /// this plan does, judged on `d`: their worst pairwise latency falls by more than
    /// `threshold` (relative, e.g. 0.10) and by more than `floor_ns` (absolute, so that
    /// noise between near-equal sets moves nothing). Empty when `d` has no latencies
    /// (sysfs only). Units placed in one plan only are not compared.
    pub fn improvements(
        &self,
        new: &Plan,
        d: &Domains,
        threshold: f64,
        floor_ns: f64,
    ) -> Vec<Better> {
        self.units
            .iter()
            .filter(|u| self.is_count_unit(u))
            .filter_map(|u| {
                let PlanState::Placed { cpus: now } = &u.state else {
                    return None;
                };
                let Some(PlanState::Placed { cpus: then }) =
                    new.get_in(&u.rule, u.thread_entry, u.cpuset.as_ref())
                else {
                    return None;
                };
                let now_ns = worst_ns(d, now)?;
                let then_ns = worst_ns(d, then)?;
                let gain = now_ns - then_ns;
                (gain > floor_ns && gain > threshold * now_ns).then(|| Better {
                    unit: u.name(),
                    now_ns,
                    then_ns,
                })
            })
            .collect()
    }

    fn is_count_unit(&self, u: &UnitPlan) -> bool {
        let Some(rule) = self.basis.rules.get(&u.rule) else {
            return false;
        };
        let req = match u.thread_entry {
            None => rule.place.as_ref(),
            Some(i) => rule.threads.get(i).map(|t| &t.request),
        };
        req.is_some_and(is_count)
    }
}

/// The worst pairwise latency of `cpus` on `d`, in ns; `None` when `d` has no
/// latencies (sysfs only) or a CPU is not in `d`.
fn worst_ns(d: &Domains, cpus: &CpuSet) -> Option<f64> {
    let idx: Option<Vec<usize>> = cpus.iter().map(|c| d.index_of(c)).collect();
    placement::set_cost(d, &idx?).worst_ns
}

fn is_count(r: &PlacementRequest) -> bool {
    matches!(r.target, CpuTarget::Count(_))
}

/// A request in words, for errors.
pub fn describe_request(r: &PlacementRequest) -> String {
    match &r.target {
        CpuTarget::Cpus(c) => format!("cpus {c}"),
        CpuTarget::Count(n) => format!("{n} CPUs ({}, smt {})", r.policy, r.smt),
    }
}

pub mod doubts;
#[cfg(test)]
pub(crate) mod tests;
