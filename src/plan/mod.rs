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
//! Inside: `choose` (the [`Choose`] seam and the placement engine behind it), `seen`
//! (what a plan is made in: [`Cpusets`], [`Demand`]), `memory`, `making` (the plan of
//! the rules in force, made one way for the daemon and `plan --live`: chosen, memory
//! weighed, the `[sched-ext]` policy applied), `doubts`, `tests`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::placement::{self, PlacementError};
use crate::rules::{CpuTarget, PlacementRequest, Rule, RuleSet};

mod choose;
pub mod making;
pub mod memory;
mod seen;

pub use choose::{engine_request, Choose, Chosen, SharedChoose};
pub use making::{PlanInputs, Planned, SchedExtStep, UnderSchedExt};
pub use memory::MemoryPlanning;
pub use seen::{Cpusets, Demand, Seen};

/// Where a count thread entry's CPUs come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "from", content = "cpus")]
pub enum SlotsFrom {
    /// Its own `within`.
    Within(CpuSet),
    /// Carved out of the CPUs its rule's `[rule.place]` got.
    Place(CpuSet),
    /// Every usable CPU (no `within`, no placed `[rule.place]`).
    All(CpuSet),
}

impl SlotsFrom {
    /// In words: `carved from [rule.place] cpus 0`.
    pub fn describe(&self) -> String {
        match self {
            SlotsFrom::Within(c) => format!("within {c}"),
            SlotsFrom::Place(c) => format!("carved from [rule.place] cpus {c}"),
            SlotsFrom::All(c) => format!("from all usable CPUs {c}"),
        }
    }
}

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

/// How a placement unit fared in planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum PlanState {
    /// These CPUs.
    Placed { cpus: CpuSet },
    /// One set of `count` CPUs per matching thread, in order; the first `held_slots`
    /// are taken by live threads, and only they are held.
    Slots {
        slots: Vec<CpuSet>,
        held_slots: usize,
    },
    /// Lost a conflict over `cpus` to a higher-precedence rule.
    Lost { to: String, cpus: CpuSet },
    /// Could not be placed.
    Unplaceable { reason: String },
}

impl PlanState {
    /// The CPUs of the thread that got slot `slot` (slots wrap around).
    pub fn cpus_for_slot(&self, slot: usize) -> Option<&CpuSet> {
        match self {
            PlanState::Placed { cpus } => Some(cpus),
            PlanState::Slots { slots, .. } if !slots.is_empty() => Some(&slots[slot % slots.len()]),
            _ => None,
        }
    }

    /// Every CPU this unit holds: a slots unit, those of the slots live threads take.
    pub fn held(&self) -> CpuSet {
        match self {
            PlanState::Placed { cpus } => cpus.clone(),
            PlanState::Slots { slots, held_slots } => slots
                .iter()
                .take(*held_slots)
                .fold(CpuSet::new(), |a, s| a.union(s)),
            _ => CpuSet::new(),
        }
    }

    /// Explicit CPUs that are not online here, in words (`None`: all are, or the state
    /// names no CPUs): what `check` and `plan --live` say of a rule written for another
    /// machine.
    pub fn offline_note(&self, online: &CpuSet) -> Option<String> {
        let PlanState::Placed { cpus } = self else {
            return None;
        };
        let missing = cpus.difference(online);
        if missing.is_empty() {
            return None;
        }
        let have = cpus.intersection(online);
        Some(if have.is_empty() {
            format!("CPUs {missing} are not online on this machine (online: {online}): none of them can be used, its threads stay where they are")
        } else {
            let used = match have.len() {
                1 => format!("only CPU {have} is used"),
                _ => format!("only CPUs {have} are used"),
            };
            format!("CPUs {missing} are not online on this machine (online: {online}): {used}")
        })
    }

    /// In words, for `explain`.
    pub fn describe(&self) -> String {
        match self {
            PlanState::Placed { cpus } => format!("cpus {cpus}"),
            PlanState::Slots { slots, held_slots } => format!(
                "one slot per thread, slot 0 first: {}",
                slots_in_words(slots, *held_slots)
            ),
            PlanState::Lost { to, cpus } => format!("lost CPUs {cpus} to rule {to:?}"),
            PlanState::Unplaceable { reason } => format!("not placed: {reason}"),
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

/// A slots unit's CPUs in order and how many are taken:
/// `4 | 5 | 6 (2 held by live threads)`.
pub fn slots_in_words(slots: &[CpuSet], held_slots: usize) -> String {
    let list: Vec<String> = slots.iter().map(CpuSet::to_string).collect();
    format!("{} ({held_slots} held by live threads)", list.join(" | "))
}

/// The plan of one placement unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitPlan {
    pub rule: String,
    /// `None`: the rule's `[rule.place]`; `Some(i)`: its `[[rule.threads]]` entry `i`.
    pub thread_entry: Option<usize>,
    pub priority: i32,
    pub exclusive: bool,
    /// The cgroup cpuset this instance is planned in; `None`: all CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpuset: Option<CpuSet>,
    /// A count thread entry's: where its CPUs come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots_from: Option<SlotsFrom>,
    #[serde(flatten)]
    pub state: PlanState,
    /// How the memory of its processes weighed in the choice, in words
    /// ("node 1 chosen: holds 93% of its 3.1 GiB"); `None` when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

impl UnitPlan {
    /// Where a slots unit's slots come from and whom they are for, e.g.
    /// `threads[0]: 1 slot carved from [rule.place] cpus 0 for 4 threads; threads past
    /// slot 0 share the CPUs of slot 0`; `None` for other units.
    pub fn slots_line(&self, threads: usize) -> Option<String> {
        let (PlanState::Slots { slots, .. }, Some(from), Some(i)) =
            (&self.state, &self.slots_from, self.thread_entry)
        else {
            return None;
        };
        let n = slots.len();
        let plural = |k: usize, w: &str| format!("{k} {w}{}", if k == 1 { "" } else { "s" });
        let mut line = format!(
            "threads[{i}]: {} {} for {}",
            plural(n, "slot"),
            from.describe(),
            plural(threads, "thread")
        );
        if threads > n {
            line.push_str(&format!(
                "; threads past slot {} share CPUs (slot k takes the CPUs of slot k mod {n})",
                n - 1
            ));
        }
        Some(line)
    }

    /// `rule` or `rule.threads[i]`.
    pub fn name(&self) -> String {
        match self.thread_entry {
            None => self.rule.clone(),
            Some(i) => format!("{}.threads[{i}]", self.rule),
        }
    }
}

/// Every unit's CPUs, or why it has none, for one set of rules on one set of CPUs.
#[derive(Clone, Default)]
pub struct Plan {
    rules: RuleSet,
    cpus: Cpus,
    /// The cpusets it was planned in.
    cpusets: Cpusets,
    /// The slots live threads take.
    demand: Demand,
    /// Groups every placed mask is rounded up to (a sched_ext scheduler runs and the
    /// settings say `widen`); empty: masks as chosen.
    widen: Vec<CpuSet>,
    /// The nodes and settings to weigh the memory in `cpusets` with.
    memory: MemoryPlanning,
    /// In precedence order.
    units: Vec<UnitPlan>,
    /// (rule, thread entry, cpuset) → index in `units`.
    index: HashMap<(String, Option<usize>, Option<CpuSet>), usize>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("cpus", &self.cpus)
            .field("cpusets", &self.cpusets)
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
            cpus,
            ..Plan::default()
        }
    }

    /// Plans every placement unit of `rules` in precedence order. Without `choose`
    /// (no latency domains), only explicit `cpus` units are placed.
    pub fn new(rules: &RuleSet, cpus: &Cpus, choose: Option<&dyn Choose>) -> Plan {
        Plan::build(
            rules,
            cpus,
            &Cpusets::default(),
            &Demand::default(),
            &[],
            &MemoryPlanning::default(),
            choose,
        )
    }

    /// The same plan, weighing the memory of the processes each count unit places
    /// (noted in its [`Cpusets`]) with `memory`'s nodes and settings, chosen again with
    /// `choose`. Kept through [`Plan::again`] and [`Plan::widened`].
    pub fn with_memory(self, memory: MemoryPlanning, choose: Option<&dyn Choose>) -> Plan {
        if memory == self.memory {
            return self;
        }
        if self.cpusets.memory.is_empty() {
            // Nothing to weigh yet: the same units.
            let mut plan = self;
            plan.memory = memory;
            return plan;
        }
        Plan::build(
            &self.rules,
            &self.cpus,
            &self.cpusets,
            &self.demand,
            &self.widen,
            &memory,
            choose,
        )
    }

    /// The nodes and settings memory is weighed with.
    pub fn memory_planning(&self) -> &MemoryPlanning {
        &self.memory
    }

    /// The same plan with every placed mask rounded up to the whole `groups` it
    /// touches (LLC groups or nodes, for a sched_ext scheduler that treats partial masks
    /// as second-class), within the CPUs the unit may use: never into housekeeping CPUs,
    /// outside its cpuset, or onto CPUs an exclusive unit holds. Empty `groups`: as
    /// chosen. Kept through [`Plan::again`].
    pub fn widened(&self, groups: Vec<CpuSet>, choose: Option<&dyn Choose>) -> Plan {
        Plan::build(
            &self.rules,
            &self.cpus,
            &self.cpusets,
            &self.demand,
            &groups,
            &self.memory,
            choose,
        )
    }

    /// The groups masks are rounded up to; empty when they are not.
    pub fn widen_groups(&self) -> &[CpuSet] {
        &self.widen
    }

    /// The same rules on the same CPUs, planned in `cpusets` with this plan's demand.
    pub fn in_cpusets(&self, cpusets: &Cpusets, choose: Option<&dyn Choose>) -> Plan {
        self.again(
            &Seen {
                cpusets: cpusets.clone(),
                demand: self.demand.clone(),
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
        if choose.is_none() && seen.cpusets == self.cpusets {
            let mut plan = self.clone();
            plan.demand = seen.demand.clone();
            for u in &mut plan.units {
                if let (PlanState::Slots { slots, held_slots }, Some(i)) =
                    (&mut u.state, u.thread_entry)
                {
                    *held_slots = seen.demand.of(&u.rule, i).min(slots.len());
                }
            }
            return plan;
        }
        Plan::build(
            &self.rules,
            &self.cpus,
            &seen.cpusets,
            &seen.demand,
            &self.widen,
            &self.memory,
            choose,
        )
    }

    /// The slots live threads take, as this plan was made with.
    pub fn demand(&self) -> &Demand {
        &self.demand
    }

    /// The cpusets this plan was made in.
    pub fn cpusets(&self) -> &Cpusets {
        &self.cpusets
    }

    /// The cpuset key of a process allowed on `allowed` (its cgroup cpuset): `None`
    /// when it allows every CPU a count unit may choose from (or none of the online
    /// ones, which says nothing), else the online CPUs it allows.
    pub fn cpuset_key(&self, allowed: &CpuSet) -> Option<CpuSet> {
        let general = self.cpus.online.difference(&self.cpus.reserved);
        let inside = allowed.intersection(&self.cpus.online);
        if inside.is_empty() || general.difference(allowed).is_empty() {
            None
        } else {
            Some(inside)
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "Plan::build, still over the limit: to be split when its room is reworked (see clippy.toml)"
    )]
    fn build(
        rules: &RuleSet,
        cpus: &Cpus,
        cpusets: &Cpusets,
        demand: &Demand,
        widen: &[CpuSet],
        memory: &MemoryPlanning,
        choose: Option<&dyn Choose>,
    ) -> Plan {
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
                .then_with(|| is_count(a.2).cmp(&is_count(b.2)))
                .then_with(|| a.0.name.cmp(&b.0.name))
                .then_with(|| a.1.cmp(&b.1))
        });
        let mut owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut exclusive_owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut plan = Plan::empty(cpus.clone());
        plan.rules = rules.clone();
        plan.cpusets = cpusets.clone();
        plan.demand = demand.clone();
        plan.widen = widen.to_vec();
        plan.memory = memory.clone();
        let instances = units.into_iter().flat_map(|(rule, entry, req)| {
            let scopes = if is_count(req) {
                cpusets.of(&rule.name)
            } else {
                vec![None]
            };
            scopes.into_iter().map(move |s| (rule, entry, req, s))
        });
        for (rule, entry, req, scope) in instances {
            // CPUs held by other rules, as seen by this unit.
            let others = |map: &BTreeMap<u32, String>| -> CpuSet {
                map.iter()
                    .filter(|(_, r)| **r != rule.name)
                    .map(|(c, _)| *c)
                    .collect()
            };
            let mut blocked = if req.exclusive {
                others(&owner)
            } else {
                others(&exclusive_owner)
            };
            if req.exclusive {
                // The same unit in another cpuset holds its CPUs too.
                for u in plan
                    .units
                    .iter()
                    .filter(|u| u.rule == rule.name && u.thread_entry == entry && u.cpuset != scope)
                {
                    blocked = blocked.union(&u.state.held());
                }
            }
            let shared_entry = entry.is_some_and(|i| rule.threads[i].shared);
            let mut extra_held = CpuSet::new();
            let mut slots_from = None;
            let mut memory_note = None;
            let state = match &req.target {
                CpuTarget::Cpus(want) => {
                    let clash = want.intersection(&blocked);
                    match clash.first() {
                        Some(c) => PlanState::Lost {
                            to: owner
                                .get(&c)
                                .or_else(|| exclusive_owner.get(&c))
                                .cloned()
                                .unwrap_or_default(),
                            cpus: clash,
                        },
                        None => PlanState::Placed { cpus: want.clone() },
                    }
                }
                CpuTarget::Count(n) => {
                    // `within` bounds the choice; without it a thread entry places
                    // within its rule's own CPUs when the rule has some.
                    let mut general = cpus.online.difference(&cpus.reserved);
                    if let Some(s) = &scope {
                        general = general.intersection(s);
                    }
                    let from = match (&req.within, entry) {
                        (Some(w), _) => SlotsFrom::Within(general.intersection(w)),
                        (None, Some(_)) => match plan.get_in(&rule.name, None, scope.as_ref()) {
                            Some(PlanState::Placed { cpus }) => SlotsFrom::Place(cpus.clone()),
                            _ => SlotsFrom::All(general),
                        },
                        (None, None) => SlotsFrom::All(general),
                    };
                    let pool = match &from {
                        SlotsFrom::Within(c) | SlotsFrom::Place(c) | SlotsFrom::All(c) => {
                            c.difference(&blocked)
                        }
                    };
                    if entry.is_some() {
                        slots_from = Some(from);
                    }
                    match choose {
                        None => PlanState::Unplaceable {
                            reason: "no placement engine (only explicit cpus can be placed)".into(),
                        },
                        Some(place) if entry.is_some() && !shared_entry => {
                            match place.slots(req, &pool) {
                                Ok(s) if !s.is_empty() => PlanState::Slots {
                                    held_slots: demand
                                        .of(&rule.name, entry.unwrap_or(0))
                                        .min(s.len()),
                                    slots: s.into_iter().map(|c| c.cpus).collect(),
                                },
                                Ok(_) => PlanState::Unplaceable {
                                    reason: format!(
                                        "{n} CPUs per thread do not fit {}",
                                        pool_words(&pool, slots_from.as_ref(), scope.as_ref())
                                    ),
                                },
                                Err(e) => PlanState::Unplaceable {
                                    reason: format!(
                                        "{n} CPUs per thread do not fit {}: {e}",
                                        pool_words(&pool, slots_from.as_ref(), scope.as_ref())
                                    ),
                                },
                            }
                        }
                        Some(place) => match place.choose(req, &pool) {
                            Ok(c) => {
                                let c = match cpusets.memory_of(&rule.name, scope.as_ref()) {
                                    Some(bytes) if entry.is_none() => {
                                        let (c, why) = memory::prefer_memory(
                                            place, req, &pool, c, bytes, memory,
                                        );
                                        memory_note = why;
                                        c
                                    }
                                    _ => c,
                                };
                                extra_held = c.held;
                                PlanState::Placed { cpus: c.cpus }
                            }
                            Err(e) => {
                                // Say who holds the CPUs it could not get.
                                let mut taken = cpus.online.intersection(&blocked);
                                if let Some(s) = &scope {
                                    taken = taken.intersection(s);
                                }
                                match taken
                                    .first()
                                    .and_then(|c| exclusive_owner.get(&c).or_else(|| owner.get(&c)))
                                {
                                    Some(to) if req.exclusive || !exclusive_owner.is_empty() => {
                                        PlanState::Lost {
                                            to: to.clone(),
                                            cpus: taken,
                                        }
                                    }
                                    _ => PlanState::Unplaceable {
                                        reason: e.to_string(),
                                    },
                                }
                            }
                        },
                    }
                }
            };
            let state = if widen.is_empty() {
                state
            } else {
                let mut limit = cpus.online.difference(&cpus.reserved).difference(&blocked);
                if let Some(s) = &scope {
                    limit = limit.intersection(s);
                }
                let w = |c: &CpuSet| crate::sched_ext::widen(c, widen, &limit);
                match state {
                    PlanState::Placed { cpus } => PlanState::Placed { cpus: w(&cpus) },
                    PlanState::Slots { slots, held_slots } => PlanState::Slots {
                        slots: slots.iter().map(w).collect(),
                        held_slots,
                    },
                    other => other,
                }
            };
            let held = match &state {
                PlanState::Placed { cpus } => cpus.union(&extra_held),
                other => other.held(),
            };
            for c in held.iter() {
                owner.entry(c).or_insert_with(|| rule.name.clone());
                if req.exclusive {
                    exclusive_owner.insert(c, rule.name.clone());
                }
            }
            plan.index
                .insert((rule.name.clone(), entry, scope.clone()), plan.units.len());
            plan.units.push(UnitPlan {
                rule: rule.name.clone(),
                thread_entry: entry,
                priority: rule.priority,
                exclusive: req.exclusive,
                cpuset: scope,
                slots_from,
                state,
                memory: memory_note,
            });
        }
        plan
    }

    /// The rules this plan places.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// The CPUs it was made for.
    pub fn cpus(&self) -> &Cpus {
        &self.cpus
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
        let Some(r) = self.rules.get(rule) else {
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
        let mut pool = self
            .cpus
            .online
            .difference(&self.cpus.reserved)
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
        let Some(rule) = self.rules.get(&u.rule) else {
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
