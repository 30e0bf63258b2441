//! One placement unit's plan: what it got ([`PlanState`]), where a count thread entry's
//! CPUs come from ([`SlotsFrom`]), and the words `explain`, `check` and `plan --live`
//! say them in. Values only: made in `building`, read by everyone.

use serde::Serialize;

use crate::cpuset::CpuSet;

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
