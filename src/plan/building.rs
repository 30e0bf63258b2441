//! How a plan is made: every placement unit of the rules in precedence order, planned
//! once per cpuset its processes live in (counts) or once (explicit `cpus`), each
//! instance given CPUs or told why not, exclusivity kept between them.
//!
//! ```text
//!   Basis ─► instances (precedence order, × cpusets) ─► for each:
//!     blocked (by earlier holders) ─► explicit | counted (chooser, memory) ─► widened
//!     ─► Holders take its CPUs ─► UnitPlan pushed
//! ```
//!
//! Must not touch: anything but the values handed in (pure, as the whole `plan`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{memory, Choose, Cpus, Cpusets, Demand, MemoryPlanning, Plan};
use super::{PlanState, SlotsFrom, UnitPlan};
use crate::cpuset::CpuSet;
use crate::rules::{CpuTarget, PlacementRequest, Rule, RuleSet};

/// What a plan is made of: the rules, the CPUs, and what the manager saw and the
/// settings add (cpusets, slots taken, widening, memory). A plan keeps it, to be made
/// again with one part changed ([`Plan::again`], [`Plan::widened`],
/// [`Plan::with_memory`]).
#[derive(Clone, Default)]
pub(super) struct Basis {
    pub(super) rules: RuleSet,
    pub(super) cpus: Cpus,
    /// The cpusets it is planned in.
    pub(super) cpusets: Cpusets,
    /// The slots live threads take.
    pub(super) demand: Demand,
    /// Groups every placed mask is rounded up to (a sched_ext scheduler runs and the
    /// settings say `widen`); empty: masks as chosen.
    pub(super) widen: Vec<CpuSet>,
    /// The nodes and settings to weigh the memory in `cpusets` with.
    pub(super) memory: MemoryPlanning,
}

impl Basis {
    /// Plans every placement unit of the rules in precedence order. Without `choose`
    /// (no latency domains), only explicit `cpus` units are placed.
    pub(super) fn build(self, choose: Option<&dyn Choose>) -> Plan {
        let instances = instances(&self.rules, &self.cpusets);
        let mut holders = Holders::default();
        let mut plan = Plan {
            basis: self,
            units: Vec::new(),
            index: HashMap::new(),
        };
        for inst in instances {
            let blocked = inst.blocked(&plan, &holders);
            let got = match &inst.request.target {
                CpuTarget::Cpus(want) => Got::just(inst.explicit(want, &blocked, &holders)),
                CpuTarget::Count(n) => inst.counted(*n, &plan, &blocked, &holders, choose),
            };
            let state = inst.widened(got.state, &plan.basis, &blocked);
            let held = match &state {
                PlanState::Placed { cpus } => cpus.union(&got.also_held),
                other => other.held(),
            };
            holders.take(&held, &inst.rule.name, inst.request.exclusive);
            plan.index.insert(
                (inst.rule.name.clone(), inst.entry, inst.scope.clone()),
                plan.units.len(),
            );
            plan.units.push(UnitPlan {
                rule: inst.rule.name.clone(),
                thread_entry: inst.entry,
                priority: inst.rule.priority,
                exclusive: inst.request.exclusive,
                cpuset: inst.scope,
                slots_from: got.slots_from,
                state,
                memory: got.memory,
            });
        }
        plan
    }
}

/// Every placement unit of `rules` in precedence order (priority, explicit `cpus`
/// before counts, name, `[rule.place]` before thread entries), a count unit once per
/// cpuset its rule is planned in.
fn instances(rules: &RuleSet, cpusets: &Cpusets) -> Vec<Instance> {
    let mut units: Vec<(&Arc<Rule>, Option<usize>, &PlacementRequest)> = Vec::new();
    for r in rules.rules() {
        if let Some(p) = &r.place {
            units.push((r, None, p));
        }
        for (i, t) in r.threads.iter().enumerate() {
            units.push((r, Some(i), &t.request));
        }
    }
    units.sort_by(|a, b| {
        b.0.priority
            .cmp(&a.0.priority)
            .then_with(|| super::is_count(a.2).cmp(&super::is_count(b.2)))
            .then_with(|| a.0.name.cmp(&b.0.name))
            .then_with(|| a.1.cmp(&b.1))
    });
    units
        .into_iter()
        .flat_map(|(rule, entry, req)| {
            let scopes = if super::is_count(req) {
                cpusets.of(&rule.name)
            } else {
                vec![None]
            };
            scopes.into_iter().map(move |scope| Instance {
                rule: Arc::clone(rule),
                entry,
                request: req.clone(),
                scope,
            })
        })
        .collect()
}

/// Who holds each CPU so far, in precedence order: the first unit of any rule, and the
/// last exclusive one.
#[derive(Default)]
struct Holders {
    owner: BTreeMap<u32, String>,
    exclusive_owner: BTreeMap<u32, String>,
}

impl Holders {
    /// The CPUs other rules than `rule` hold: all of them for an `exclusive` unit, the
    /// exclusive ones for any other.
    fn others(&self, rule: &str, exclusive: bool) -> CpuSet {
        let map = if exclusive {
            &self.owner
        } else {
            &self.exclusive_owner
        };
        map.iter()
            .filter(|(_, r)| **r != rule)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Notes that a unit of `rule` holds `held`.
    fn take(&mut self, held: &CpuSet, rule: &str, exclusive: bool) {
        for c in held.iter() {
            self.owner.entry(c).or_insert_with(|| rule.to_string());
            if exclusive {
                self.exclusive_owner.insert(c, rule.to_string());
            }
        }
    }
}

/// One instance of a placement unit: a rule's `[rule.place]` (`entry` `None`) or
/// thread entry, in one cpuset (`scope`; `None`: all CPUs).
struct Instance {
    rule: Arc<Rule>,
    entry: Option<usize>,
    request: PlacementRequest,
    scope: Option<CpuSet>,
}

/// What an instance got: its state, where a thread entry's CPUs came from, how memory
/// weighed, and what it holds beyond its CPUs (an exclusive request's idle siblings).
struct Got {
    state: PlanState,
    slots_from: Option<SlotsFrom>,
    memory: Option<String>,
    also_held: CpuSet,
}

impl Got {
    fn just(state: PlanState) -> Got {
        Got {
            state,
            slots_from: None,
            memory: None,
            also_held: CpuSet::new(),
        }
    }
}

impl Instance {
    /// The CPUs it may not take: those held by other rules (see [`Holders::others`]),
    /// and, when exclusive, those the same unit holds in other cpusets.
    fn blocked(&self, plan: &Plan, holders: &Holders) -> CpuSet {
        let mut blocked = holders.others(&self.rule.name, self.request.exclusive);
        if self.request.exclusive {
            for u in plan.units.iter().filter(|u| {
                u.rule == self.rule.name && u.thread_entry == self.entry && u.cpuset != self.scope
            }) {
                blocked = blocked.union(&u.state.held());
            }
        }
        blocked
    }

    /// Explicit CPUs: placed, or lost to whoever holds the first one it may not take.
    fn explicit(&self, want: &CpuSet, blocked: &CpuSet, holders: &Holders) -> PlanState {
        let clash = want.intersection(blocked);
        match clash.first() {
            Some(c) => PlanState::Lost {
                to: holders
                    .owner
                    .get(&c)
                    .or_else(|| holders.exclusive_owner.get(&c))
                    .cloned()
                    .unwrap_or_default(),
                cpus: clash,
            },
            None => PlanState::Placed { cpus: want.clone() },
        }
    }

    /// Where a count's CPUs come from: `within` bounds the choice; without it a thread
    /// entry places within its rule's own CPUs when the rule has some.
    fn slots_from(&self, plan: &Plan) -> SlotsFrom {
        let cpus = &plan.basis.cpus;
        let mut general = cpus.online.difference(&cpus.reserved);
        if let Some(s) = &self.scope {
            general = general.intersection(s);
        }
        match (&self.request.within, self.entry) {
            (Some(w), _) => SlotsFrom::Within(general.intersection(w)),
            (None, Some(_)) => match plan.get_in(&self.rule.name, None, self.scope.as_ref()) {
                Some(PlanState::Placed { cpus }) => SlotsFrom::Place(cpus.clone()),
                _ => SlotsFrom::All(general),
            },
            (None, None) => SlotsFrom::All(general),
        }
    }

    /// `n` CPUs chosen among those it may take: one slot per thread for a non-shared
    /// thread entry, else one set.
    fn counted(
        &self,
        n: u32,
        plan: &Plan,
        blocked: &CpuSet,
        holders: &Holders,
        choose: Option<&dyn Choose>,
    ) -> Got {
        let from = self.slots_from(plan);
        let pool = match &from {
            SlotsFrom::Within(c) | SlotsFrom::Place(c) | SlotsFrom::All(c) => c.difference(blocked),
        };
        let shared_entry = self.entry.is_some_and(|i| self.rule.threads[i].shared);
        let slots_from = self.entry.is_some().then_some(from);
        let got = match choose {
            None => Got::just(PlanState::Unplaceable {
                reason: "no placement engine (only explicit cpus can be placed)".into(),
            }),
            Some(place) if self.entry.is_some() && !shared_entry => {
                Got::just(self.in_slots(n, place, &pool, slots_from.as_ref(), &plan.basis.demand))
            }
            Some(place) => self.chosen(place, &pool, blocked, holders, &plan.basis),
        };
        Got { slots_from, ..got }
    }

    /// A non-shared thread entry's slots, holding those live threads take.
    fn in_slots(
        &self,
        n: u32,
        place: &dyn Choose,
        pool: &CpuSet,
        from: Option<&SlotsFrom>,
        demand: &Demand,
    ) -> PlanState {
        let scope = self.scope.as_ref();
        match place.slots(&self.request, pool) {
            Ok(s) if !s.is_empty() => PlanState::Slots {
                held_slots: demand
                    .of(&self.rule.name, self.entry.unwrap_or(0))
                    .min(s.len()),
                slots: s.into_iter().map(|c| c.cpus).collect(),
            },
            Ok(_) => PlanState::Unplaceable {
                reason: format!(
                    "{n} CPUs per thread do not fit {}",
                    pool_words(pool, from, scope)
                ),
            },
            Err(e) => PlanState::Unplaceable {
                reason: format!(
                    "{n} CPUs per thread do not fit {}: {e}",
                    pool_words(pool, from, scope)
                ),
            },
        }
    }

    /// One set of CPUs, memory weighed for a `[rule.place]` whose processes' memory is
    /// known; when none fits, lost to whoever holds what it could not get.
    fn chosen(
        &self,
        place: &dyn Choose,
        pool: &CpuSet,
        blocked: &CpuSet,
        holders: &Holders,
        basis: &Basis,
    ) -> Got {
        let req = &self.request;
        let e = match place.choose(req, pool) {
            Ok(c) => {
                let bytes = basis
                    .cpusets
                    .memory_of(&self.rule.name, self.scope.as_ref());
                let (c, memory) = match bytes {
                    Some(bytes) if self.entry.is_none() => {
                        memory::prefer_memory(place, req, pool, c, bytes, &basis.memory)
                    }
                    _ => (c, None),
                };
                return Got {
                    state: PlanState::Placed { cpus: c.cpus },
                    slots_from: None,
                    memory,
                    also_held: c.held,
                };
            }
            Err(e) => e,
        };
        // Say who holds the CPUs it could not get.
        let mut taken = basis.cpus.online.intersection(blocked);
        if let Some(s) = &self.scope {
            taken = taken.intersection(s);
        }
        let to = taken.first().and_then(|c| {
            holders
                .exclusive_owner
                .get(&c)
                .or_else(|| holders.owner.get(&c))
        });
        Got::just(match to {
            Some(to) if req.exclusive || !holders.exclusive_owner.is_empty() => PlanState::Lost {
                to: to.clone(),
                cpus: taken,
            },
            _ => PlanState::Unplaceable {
                reason: e.to_string(),
            },
        })
    }

    /// `state` with every mask rounded up to the basis's widening groups, within the
    /// CPUs it may use; as it is when there are none.
    fn widened(&self, state: PlanState, basis: &Basis, blocked: &CpuSet) -> PlanState {
        if basis.widen.is_empty() {
            return state;
        }
        let cpus = &basis.cpus;
        let mut limit = cpus.online.difference(&cpus.reserved).difference(blocked);
        if let Some(s) = &self.scope {
            limit = limit.intersection(s);
        }
        let w = |c: &CpuSet| crate::sched_ext::widen(c, &basis.widen, &limit);
        match state {
            PlanState::Placed { cpus } => PlanState::Placed { cpus: w(&cpus) },
            PlanState::Slots { slots, held_slots } => PlanState::Slots {
                slots: slots.iter().map(w).collect(),
                held_slots,
            },
            other => other,
        }
    }
}

/// Where a thread entry's slots were sought, in words: `in 2-7`, or, when no CPU was
/// left to seek them in, why (never an empty list).
fn pool_words(pool: &CpuSet, from: Option<&SlotsFrom>, scope: Option<&CpuSet>) -> String {
    if !pool.is_empty() {
        return format!("in {pool}");
    }
    let cpuset = scope.map_or(String::new(), |s| format!(" (in cpuset {s})"));
    match from {
        Some(SlotsFrom::Within(c) | SlotsFrom::Place(c) | SlotsFrom::All(c)) if !c.is_empty() => {
            let from = from.map(SlotsFrom::describe).unwrap_or_default();
            format!("anywhere: every CPU {from}{cpuset} is held by another rule")
        }
        Some(SlotsFrom::Within(_)) => {
            format!("anywhere: none of its `within` CPUs is one a count may be given{cpuset}")
        }
        _ => format!("anywhere: no CPU is left to choose from{cpuset}"),
    }
}
