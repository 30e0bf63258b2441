//! The engine that pins: events in, affinity calls and reports out.
//!
//! Owns: which processes and threads are managed, which rule and CPUs each got, the
//! masks they had before (to give them back), exclusivity between rules, the restore
//! journal's contents, and the counters. A plain synchronous state machine: the
//! daemon's loop (or a test) feeds it events one at a time.
//!
//! Must not touch: sockets, timers or files directly. It reaches the system only
//! through its two seams — [`AffinityOps`] (set/get affinity, pidfds) and
//! [`ProcSource`] (procfs snapshots) — and the restore [`Journal`].
//!
//! ```text
//!   ProcMsg (connector) ─┐
//!   Rescan (timer/overrun)├─► Manager::handle(Event) ─► AffinityOps (set, read back)
//!   RulesChanged, Hotplug ┘        │   ▲                    │
//!                                  │   └── ProcSource ◄─────┘ (snapshots on demand)
//!                                  └─► Vec<Change>, counters(), list_managed(), explain()
//! ```
//!
//! How the loop drives it:
//! - at start: [`Manager::recover`] (restore what a crashed predecessor left), then
//!   `handle(Event::Rescan)`;
//! - every connector message: `handle(Event::Proc(msg))` (an `Overrun` rescans);
//! - the rescan timer: `handle(Event::Rescan)` (also checks managed masks for changes
//!   made by someone else);
//! - new rules: `handle(Event::RulesChanged(set))`; a CPU online/offline uevent:
//!   `handle(Event::Hotplug { online })` with the online set re-read from sysfs;
//! - after each batch of events: [`Manager::flush`] (writes the journal if it changed);
//! - on stop: [`Manager::shutdown`] (gives every managed task its mask back).
//!
//! Placement: every placement unit (a rule's `[rule.place]`, or one `[[rule.threads]]`
//! entry) is planned when rules or CPUs change, in precedence order (priority, then
//! explicit `cpus` before counts, then name). An exclusive unit may not take CPUs any
//! earlier unit holds; no unit may take CPUs an earlier exclusive unit holds. A unit
//! that would need such CPUs loses: it is not applied, and its plan says to whom it
//! lost ([`PlanState::Lost`]). A thread entry places within its `within` CPUs, else
//! within its rule's own CPUs when the rule has a placed `[rule.place]`; a non-shared
//! entry gives each matching thread its own `count` CPUs (slots), wrapping around when
//! the CPUs run out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::affinity::restore::{self, Journal, RestoreEntry, RestoreError, RestoreReport};
use crate::affinity::{AffinityOps, Outcome, ProcessHandle, Tid};
use crate::cpuset::CpuSet;
use crate::rules::{CpuTarget, PlacementRequest, Rule, RuleSet, ThreadPlacement};
use crate::sysroot::SysRoot;
use crate::watch::{ProcMsg, ProcSource, Snapshot};

/// Chooses CPUs for a count request among `available` (the placement engine):
/// `(cpus, reserved)`, where `reserved` (a superset of `cpus`) also holds the idle SMT
/// siblings an exclusive request keeps free.
pub type Placer =
    Box<dyn Fn(&PlacementRequest, &CpuSet) -> Result<(CpuSet, CpuSet), String> + Send>;

/// The placement engine over `domains` as a [`Placer`].
pub fn domains_placer(domains: crate::domains::Domains) -> Placer {
    Box::new(move |req: &PlacementRequest, available: &CpuSet| {
        let count = match &req.target {
            CpuTarget::Count(n) => *n as usize,
            CpuTarget::Cpus(c) => return Ok((c.clone(), c.clone())),
        };
        let r = crate::placement::Request {
            count,
            policy: req.policy,
            smt: req.smt,
            exclude: CpuSet::new(),
            exclusive: req.exclusive,
            cpus: None,
        };
        crate::placement::place(&domains, &r, available)
            .map(|p| {
                let reserved = p.reserved.union(&p.cpus);
                (p.cpus, reserved)
            })
            .map_err(|e| e.to_string())
    })
}

/// What to do when someone else changes the mask of a task we manage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForeignChange {
    /// Stop managing that task and leave it as they set it (and say so).
    #[default]
    Release,
    /// Put our mask back (once per check; logged each time).
    Reassert,
}

/// Manager settings.
#[derive(Debug, Clone, Default)]
pub struct ManagerConfig {
    pub on_foreign_change: ForeignChange,
    /// CPUs never chosen for count placements (housekeeping CPUs).
    pub reserved: CpuSet,
}

impl ManagerConfig {
    /// From the daemon's settings file (`[watch]`, `[placement]`).
    pub fn from_settings(s: &crate::settings::Settings) -> ManagerConfig {
        ManagerConfig {
            on_foreign_change: if s.watch.release_on_foreign_change {
                ForeignChange::Release
            } else {
                ForeignChange::Reassert
            },
            reserved: s.placement.housekeeping_cpus.clone(),
        }
    }
}

/// One input.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // moved once per event; a rule change is rare
pub enum Event {
    /// A proc connector message.
    Proc(ProcMsg),
    /// Periodic or forced full rescan of /proc.
    Rescan,
    /// A new rule set replaced the old one.
    RulesChanged(RuleSet),
    /// CPUs went online or offline; `online` is the new online set.
    Hotplug { online: CpuSet },
}

/// One thing that happened, for logs, D-Bus signals and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A task was given a mask (or the attempt was classified).
    Pinned {
        pid: i32,
        tid: Tid,
        rule: String,
        outcome: Outcome,
    },
    /// A process is no longer managed; `restored` tasks got their mask back.
    Released {
        pid: i32,
        rule: String,
        restored: usize,
        reason: String,
    },
    /// Someone else changed a managed task's mask.
    Foreign {
        pid: i32,
        tid: Tid,
        expected: CpuSet,
        found: CpuSet,
        released: bool,
    },
    /// A managed process exited.
    Exited { pid: i32 },
    /// A full rescan ran.
    Rescanned { processes: usize, took: Duration },
}

/// Counters since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub events: u64,
    pub rescans: u64,
    pub overruns: u64,
    pub applied: u64,
    pub narrowed: u64,
    pub refused: u64,
    pub gone: u64,
    pub kernel_threads: u64,
    pub permission: u64,
    pub failed: u64,
    pub foreign_changes: u64,
    pub restored: u64,
    pub pid_reuse: u64,
    pub last_rescan_us: u64,
}

/// How a placement unit fared in planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum PlanState {
    /// These CPUs.
    Placed { cpus: CpuSet },
    /// One set of `count` CPUs per matching thread, in order.
    Slots { slots: Vec<CpuSet> },
    /// Lost a conflict over `cpus` to a higher-precedence rule.
    Lost { to: String, cpus: CpuSet },
    /// Could not be placed.
    Unplaceable { reason: String },
}

impl PlanState {
    fn cpus_for_slot(&self, slot: usize) -> Option<&CpuSet> {
        match self {
            PlanState::Placed { cpus } => Some(cpus),
            PlanState::Slots { slots } if !slots.is_empty() => Some(&slots[slot % slots.len()]),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            PlanState::Placed { cpus } => format!("cpus {cpus}"),
            PlanState::Slots { slots } => format!(
                "one slot per thread: {}",
                slots
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
            PlanState::Lost { to, cpus } => format!("lost CPUs {cpus} to rule {to:?}"),
            PlanState::Unplaceable { reason } => format!("not placed: {reason}"),
        }
    }
}

/// The plan of one placement unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitPlan {
    pub rule: String,
    /// `None`: the rule's `[rule.place]`; `Some(i)`: its `[[rule.threads]]` entry `i`.
    pub thread_entry: Option<usize>,
    pub priority: i32,
    pub exclusive: bool,
    #[serde(flatten)]
    pub state: PlanState,
}

/// One row of `ListManaged`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManagedRow {
    pub pid: u32,
    pub comm: String,
    pub rule: String,
    pub cpus: String,
    pub state: String,
}

/// Errors of the runtime pin/release requests.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("pid {pid}: no such process")]
    NoProcess { pid: i32 },
    #[error("pid {pid}: is a kernel thread")]
    KernelThread { pid: i32 },
    #[error("pid {pid}: cannot place {request}: {reason}")]
    Unplaceable {
        pid: i32,
        request: String,
        reason: String,
    },
    #[error("pid {pid}: was not pinned at run time")]
    NotPinned { pid: i32 },
    #[error(transparent)]
    Journal(#[from] RestoreError),
}

#[derive(Debug, Clone)]
enum Source {
    Rule(Arc<Rule>),
    Runtime(CpuSet),
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Rule(r) => r.name.clone(),
            Source::Runtime(_) => "(runtime)".to_string(),
        }
    }
}

#[derive(Debug)]
struct ManagedThread {
    comm: String,
    placement: ThreadPlacement,
    slot: usize,
    original: CpuSet,
    outcome: Outcome,
    /// Someone else changed its mask: hands off.
    released: bool,
    /// CPUs or rules changed: apply again even if the mask looks unchanged.
    stale: bool,
}

#[derive(Debug)]
struct Managed {
    handle: ProcessHandle,
    comm: String,
    source: Source,
    /// The main thread's mask at first contact: every thread's default original.
    original: CpuSet,
    threads: BTreeMap<Tid, ManagedThread>,
    /// Next free slot per non-shared thread entry.
    next_slot: HashMap<usize, usize>,
}

/// The engine. See the module doc for how to drive it.
pub struct Manager {
    ops: Arc<dyn AffinityOps + Send + Sync>,
    procs: Arc<dyn ProcSource + Send + Sync>,
    placer: Option<Placer>,
    config: ManagerConfig,
    rules: RuleSet,
    online: CpuSet,
    plans: HashMap<(String, Option<usize>), PlanState>,
    plan_order: Vec<UnitPlan>,
    managed: BTreeMap<i32, Managed>,
    /// comm → whether any rule's comm globs can match it (the cheap first pass).
    candidate_cache: HashMap<String, bool>,
    journal: Option<Journal>,
    journal_dirty: bool,
    counters: Counters,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("managed", &self.managed.len())
            .field("online", &self.online)
            .finish()
    }
}

impl Manager {
    /// A manager with no rules. `online` is the set of online CPUs; `placer` chooses
    /// CPUs for count requests (without one, only explicit `cpus` rules are placed).
    pub fn new(
        ops: Arc<dyn AffinityOps + Send + Sync>,
        procs: Arc<dyn ProcSource + Send + Sync>,
        placer: Option<Placer>,
        online: CpuSet,
        config: ManagerConfig,
    ) -> Manager {
        Manager {
            ops,
            procs,
            placer,
            config,
            rules: RuleSet::default(),
            online,
            plans: HashMap::new(),
            plan_order: Vec::new(),
            managed: BTreeMap::new(),
            candidate_cache: HashMap::new(),
            journal: None,
            journal_dirty: false,
            counters: Counters::default(),
        }
    }

    /// Keeps the restore journal at `journal` (under the runtime directory).
    pub fn with_journal(mut self, journal: Journal) -> Manager {
        self.journal = Some(journal);
        self
    }

    /// Restores what a previous instance left in the journal (after a crash), then
    /// empties it. Call once, before the first rescan. A corrupt journal is moved aside
    /// first ([`RestoreError::SetAside`]), never overwritten.
    pub fn recover(&mut self, root: &SysRoot) -> Result<RestoreReport, RestoreError> {
        let Some(journal) = &self.journal else {
            return Ok(RestoreReport::default());
        };
        let entries = journal.load_or_set_aside()?;
        let report = restore::restore_entries(self.ops.as_ref(), root, &entries, &self.online);
        if !entries.is_empty() {
            tracing::info!(
                restored = report.restored,
                left_alone = report.left_alone,
                gone = report.gone,
                "restored masks left by a previous run"
            );
        }
        journal.save(&[])?;
        Ok(report)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    pub fn online(&self) -> &CpuSet {
        &self.online
    }

    /// Every placement unit's plan, in precedence order.
    pub fn plans(&self) -> &[UnitPlan] {
        &self.plan_order
    }

    pub fn managed_processes(&self) -> usize {
        self.managed.len()
    }

    pub fn managed_threads(&self) -> usize {
        self.managed
            .values()
            .map(|m| m.threads.values().filter(|t| !t.released).count())
            .sum()
    }

    pub fn is_managed(&self, pid: i32) -> bool {
        self.managed.contains_key(&pid)
    }

    /// Handles one event.
    pub fn handle(&mut self, event: Event) -> Vec<Change> {
        self.counters.events += 1;
        let mut out = Vec::new();
        match event {
            Event::Proc(msg) => self.on_proc(msg, &mut out),
            Event::Rescan => self.rescan(&mut out),
            Event::RulesChanged(rules) => {
                self.rules = rules;
                self.candidate_cache.clear();
                self.replan();
                self.reevaluate_managed(&mut out);
                self.rescan(&mut out);
            }
            Event::Hotplug { online } => {
                tracing::info!(online = %online, "CPUs changed: re-planning and re-applying");
                self.online = online;
                self.replan();
                self.reevaluate_managed(&mut out);
            }
        }
        out
    }

    /// Handles a batch of proc connector messages in order, as [`Manager::handle`] would
    /// one by one, but with what the rest of the batch says about each task: a new
    /// thread that renames itself later in the batch is pinned once for its final name
    /// (no /proc read for its name), and a task that exits later in the batch is not
    /// pinned at all (counted as gone).
    pub fn handle_batch(&mut self, msgs: Vec<ProcMsg>) -> Vec<Change> {
        let ahead = lookahead(&msgs);
        let mut out = Vec::new();
        // New threads named from a later COMM event: that event is then done already.
        let mut named: HashSet<Tid> = HashSet::new();
        for (msg, ahead) in msgs.into_iter().zip(ahead) {
            self.counters.events += 1;
            match msg {
                ProcMsg::NewThread { pid, tid, parent } if self.managed.contains_key(&pid) => {
                    match ahead {
                        Ahead { exits: true, .. } => self.counters.gone += 1,
                        Ahead {
                            comm: Some(comm), ..
                        } => {
                            named.insert(tid);
                            self.on_new_thread_named(pid, tid, parent, Some(comm), &mut out);
                        }
                        Ahead { comm: None, .. } => self.on_new_thread(pid, tid, parent, &mut out),
                    }
                }
                ProcMsg::Comm { tid, .. } if named.contains(&tid) => {}
                ProcMsg::Exec { pid } | ProcMsg::NewProcess { pid, .. }
                    if ahead.exits && !self.managed.contains_key(&pid) =>
                {
                    self.counters.gone += 1
                }
                ProcMsg::Exit { pid, tid } => {
                    named.remove(&tid);
                    self.on_exit(pid, tid, &mut out);
                }
                other => self.on_proc(other, &mut out),
            }
        }
        out
    }

    fn on_proc(&mut self, msg: ProcMsg, out: &mut Vec<Change>) {
        match msg {
            ProcMsg::NewThread { pid, tid, parent } => self.on_new_thread(pid, tid, parent, out),
            ProcMsg::Exit { pid, tid } => self.on_exit(pid, tid, out),
            ProcMsg::Exec { pid } => self.consider(pid, None, out),
            ProcMsg::NewProcess { pid, parent } => {
                // A child inherits its parent's mask and image; only a managed parent's
                // child needs a look now (rescans catch the rest).
                if self.managed.contains_key(&parent) {
                    self.consider(pid, Some(parent), out);
                }
            }
            ProcMsg::Comm { pid, tid, comm } => {
                if tid == pid {
                    self.consider(pid, None, out);
                } else if self.managed.contains_key(&pid) {
                    self.on_thread_comm(pid, tid, comm, out);
                }
            }
            ProcMsg::Overrun => {
                self.counters.overruns += 1;
                tracing::warn!("proc connector overrun: events were lost, rescanning");
                self.rescan(out);
            }
        }
    }

    /// Whether any rule's comm globs (or a rule without comm) can match `comm`.
    fn may_match(&mut self, comm: &str) -> bool {
        if let Some(&hit) = self.candidate_cache.get(comm) {
            return hit;
        }
        let hit = self
            .rules
            .rules()
            .iter()
            .any(|r| r.matcher.comm.as_ref().is_none_or(|g| g.is_match(comm)));
        if self.candidate_cache.len() > 4096 {
            self.candidate_cache.clear();
        }
        self.candidate_cache.insert(comm.to_string(), hit);
        hit
    }

    /// Looks at process `pid` afresh (exec, rename, fork of a managed parent, rescan)
    /// and manages, re-applies, switches or releases it.
    fn consider(&mut self, pid: i32, parent: Option<i32>, out: &mut Vec<Change>) {
        let managed = self.managed.contains_key(&pid);
        if !managed && parent.is_none() {
            let Some(entry) = self.procs.entry(pid) else {
                return;
            };
            if entry.kernel_thread {
                self.counters.kernel_threads += 1;
                return;
            }
            if !self.may_match(&entry.comm) {
                return;
            }
        }
        let Some(snap) = self.procs.snapshot(pid) else {
            if managed {
                self.forget(pid, out);
            }
            return;
        };
        self.consider_snapshot(snap, parent, out);
    }

    fn consider_snapshot(&mut self, snap: Snapshot, parent: Option<i32>, out: &mut Vec<Change>) {
        let pid = snap.pid();
        if snap.kernel_thread {
            self.counters.kernel_threads += 1;
            return;
        }
        // A managed pid whose start time changed is another process now.
        if let Some(m) = self.managed.get(&pid) {
            if m.handle.start_time != snap.start_time || !self.ops.alive(&m.handle) {
                self.counters.pid_reuse += 1;
                self.forget(pid, out);
            }
        }
        if let Some(m) = self.managed.get(&pid) {
            if let Source::Runtime(_) = m.source {
                self.reconcile(snap, out);
                return;
            }
        }
        let matched = self.rules.match_process(&snap.info);
        match (matched, self.managed.get(&pid)) {
            (None, None) => {
                if let Some(parent) = parent {
                    self.give_back_inherited(&snap, parent);
                }
            }
            (None, Some(_)) => self.release(pid, "no rule matches any more", out),
            (Some(m), existing) => {
                let same = existing.is_some_and(|e| match &e.source {
                    Source::Rule(r) => r.name == m.rule.name,
                    Source::Runtime(_) => false,
                });
                if existing.is_some() && !same {
                    self.release(pid, &format!("rule {:?} matches now", m.rule.name), out);
                }
                if !same {
                    let original = parent
                        .and_then(|p| self.managed.get(&p))
                        .map(|p| p.original.clone());
                    if !self.start_managing(&snap, Source::Rule(m.rule.clone()), original) {
                        return;
                    }
                }
                self.reconcile(snap, out);
            }
        }
    }

    /// A child of a managed process that matches no rule gets its parent's original
    /// mask instead of the pinned one it inherited.
    fn give_back_inherited(&mut self, snap: &Snapshot, parent: i32) {
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
                    let _ = crate::affinity::apply(self.ops.as_ref(), tid, &original, &self.online);
                }
            }
        }
    }

    fn start_managing(
        &mut self,
        snap: &Snapshot,
        source: Source,
        original: Option<CpuSet>,
    ) -> bool {
        let pid = snap.pid();
        let handle = match self.ops.hold(pid, snap.start_time) {
            Ok(h) => h,
            Err(_) => {
                self.counters.gone += 1;
                tracing::debug!(pid, "process gone before it could be held");
                return false;
            }
        };
        let original = match original {
            Some(o) => o,
            None => match self.ops.get_affinity(pid) {
                Ok(m) => m,
                Err(_) => {
                    self.counters.gone += 1;
                    return false;
                }
            },
        };
        tracing::info!(pid, comm = %snap.info.comm, rule = %source.name(), "managing process");
        self.managed.insert(
            pid,
            Managed {
                handle,
                comm: snap.info.comm.clone(),
                source,
                original,
                threads: BTreeMap::new(),
                next_slot: HashMap::new(),
            },
        );
        self.journal_dirty = true;
        true
    }

    /// Brings a managed process's threads in line with its snapshot and plan: new
    /// threads are pinned, vanished ones dropped, changed assignments re-applied, and
    /// masks changed by someone else detected.
    fn reconcile(&mut self, snap: Snapshot, out: &mut Vec<Change>) {
        let pid = snap.pid();
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        m.comm = snap.info.comm.clone();
        let live: std::collections::HashSet<Tid> =
            snap.info.threads.iter().map(|t| t.tid as Tid).collect();
        m.threads.retain(|tid, _| live.contains(tid));
        for t in &snap.info.threads {
            self.pin_thread(pid, t.tid as Tid, Some(t.comm.clone()), true, out);
        }
    }

    /// The CPUs thread `tid` of managed process `pid` should have, assigning a slot
    /// if its entry is non-shared. `None` when its unit is not placed.
    fn target_for(
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
                let key = (rule.name.clone(), unit_index(placement));
                let slot = match (placement, m.threads.get(&tid)) {
                    (p, Some(t)) if t.placement == p => t.slot,
                    (ThreadPlacement::Thread(i), _) => {
                        let next = m.next_slot.entry(i).or_insert(0);
                        *next += 1;
                        *next - 1
                    }
                    _ => 0,
                };
                let cpus = self
                    .plans
                    .get(&key)
                    .and_then(|p| p.cpus_for_slot(slot))
                    .cloned();
                (placement, slot, cpus)
            }
        }
    }

    fn pin_thread(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: Option<String>,
        verify: bool,
        out: &mut Vec<Change>,
    ) {
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
                m.threads.remove(&tid);
            }
            self.counters.gone += 1;
            tracing::debug!(pid, tid, "thread gone before it could be pinned");
            return;
        }
        let (placement, slot, target) = self.target_for(pid, tid, &comm);
        let online = self.online.clone();
        let on_foreign = self.config.on_foreign_change;
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        let rule = m.source.name();
        let current = match self.ops.get_affinity(tid) {
            Ok(c) => c,
            Err(_) => {
                m.threads.remove(&tid);
                self.counters.gone += 1;
                tracing::debug!(pid, tid, "thread gone before it could be pinned");
                return;
            }
        };
        let existing = m.threads.get_mut(&tid);
        let Some(target) = target else {
            // Its unit lost a conflict or could not be placed: leave it alone.
            if existing.is_none() {
                m.threads.insert(
                    tid,
                    ManagedThread {
                        comm,
                        placement,
                        slot,
                        original: current.clone(),
                        outcome: Outcome::Failed {
                            message: "its placement unit is not placed".into(),
                        },
                        released: false,
                        stale: false,
                    },
                );
            }
            return;
        };
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
                        tracing::warn!(
                            pid, tid, rule = %rule, expected = %eff, found = %current,
                            "someone else changed the affinity of a managed thread; {}",
                            if released { "no longer managing it" } else { "re-asserting" }
                        );
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
            t.placement = placement;
            t.slot = slot;
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
            m.threads.insert(
                tid,
                ManagedThread {
                    comm,
                    placement,
                    slot,
                    original,
                    outcome: Outcome::Gone,
                    released: false,
                    stale: false,
                },
            );
        }
        let outcome = if want_now.is_empty() {
            // Every requested CPU is offline: the kernel would accept the mask and run
            // the task anywhere. Leave it; the CPU's return re-applies.
            Outcome::Refused {
                requested: target.clone(),
            }
        } else if current == want_now {
            Outcome::Applied { effective: current }
        } else {
            match self.ops.set_affinity(tid, &target) {
                Err(e) => crate::affinity::outcome_of_error(e, &target),
                Ok(()) => match self.ops.get_affinity(tid) {
                    Ok(eff) if eff == want_now => Outcome::Applied { effective: eff },
                    Ok(eff) if eff.is_subset(&target) => Outcome::Narrowed {
                        requested: target.clone(),
                        effective: eff,
                    },
                    Ok(eff) => Outcome::Failed {
                        message: format!("asked for CPUs {target}, read back {eff}"),
                    },
                    Err(e) => crate::affinity::outcome_of_error(e, &target),
                },
            }
        };
        self.count(&outcome, pid, tid, &rule);
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        if outcome == Outcome::Gone {
            m.threads.remove(&tid);
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

    fn count(&mut self, outcome: &Outcome, pid: i32, tid: Tid, rule: &str) {
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
        }
    }

    fn on_new_thread(&mut self, pid: i32, tid: Tid, parent: Tid, out: &mut Vec<Change>) {
        self.on_new_thread_named(pid, tid, parent, None, out)
    }

    /// A new thread: pinned straight from the FORK event (its mask read back, written
    /// only when it did not inherit the target). Its name is `comm` when the batch
    /// told it, else that of a known `parent` task; /proc is read for it only when
    /// the rule has thread entries and neither is known. (The kernel reports the
    /// process's parent as a thread's parent, so in practice the name comes from the
    /// batch or from /proc.)
    fn on_new_thread_named(
        &mut self,
        pid: i32,
        tid: Tid,
        parent: Tid,
        comm: Option<String>,
        out: &mut Vec<Change>,
    ) {
        let Some(m) = self.managed.get(&pid) else {
            return;
        };
        if !self.ops.alive(&m.handle) {
            self.forget(pid, out);
            return;
        }
        let comm = comm.or_else(|| m.threads.get(&parent).map(|t| t.comm.clone()));
        self.pin_thread(pid, tid, comm, false, out);
    }

    fn on_thread_comm(&mut self, pid: i32, tid: Tid, comm: String, out: &mut Vec<Change>) {
        let has_entries = self.managed.get(&pid).is_some_and(|m| match &m.source {
            Source::Rule(r) => !r.threads.is_empty(),
            Source::Runtime(_) => false,
        });
        if has_entries {
            self.pin_thread(pid, tid, Some(comm), false, out);
        } else if let Some(t) = self
            .managed
            .get_mut(&pid)
            .and_then(|m| m.threads.get_mut(&tid))
        {
            t.comm = comm;
        }
    }

    fn on_exit(&mut self, pid: i32, tid: Tid, out: &mut Vec<Change>) {
        if tid == pid {
            if self.managed.contains_key(&pid) {
                self.forget(pid, out);
            }
        } else if let Some(m) = self.managed.get_mut(&pid) {
            if let Some(t) = m.threads.remove(&tid) {
                if t.original != m.original || t.placement != ThreadPlacement::Process {
                    self.journal_dirty = true;
                }
            }
        }
    }

    /// Drops a process that exited (nothing to restore).
    fn forget(&mut self, pid: i32, out: &mut Vec<Change>) {
        if self.managed.remove(&pid).is_some() {
            tracing::debug!(pid, "managed process exited");
            self.journal_dirty = true;
            out.push(Change::Exited { pid });
        }
    }

    /// Stops managing `pid` and gives each of its tasks that still has our mask the
    /// mask it had at first contact.
    fn release(&mut self, pid: i32, reason: &str, out: &mut Vec<Change>) {
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
                    match crate::affinity::apply(self.ops.as_ref(), *tid, &t.original, &self.online)
                    {
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
                    left += 1;
                    tracing::info!(pid, tid, found = %cur, "not restoring: someone else changed the mask")
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

    /// Re-matches and re-applies every managed process (after new rules or CPUs).
    fn reevaluate_managed(&mut self, out: &mut Vec<Change>) {
        let pids: Vec<i32> = self.managed.keys().copied().collect();
        for pid in pids {
            match self.procs.snapshot(pid) {
                Some(snap) => {
                    if let Some(m) = self.managed.get_mut(&pid) {
                        // New CPUs: every thread is re-applied (the kernel widened
                        // masks of tasks whose CPUs went away).
                        for t in m.threads.values_mut() {
                            t.stale = true;
                        }
                    }
                    self.consider_snapshot(snap, None, out)
                }
                None => self.forget(pid, out),
            }
        }
    }

    /// Full /proc rescan: drops exited processes, finds matching ones the events
    /// missed, pins threads the events missed, and checks managed masks.
    fn rescan(&mut self, out: &mut Vec<Change>) {
        let started = Instant::now();
        let list = self.procs.list();
        let seen: HashMap<i32, u64> = list.iter().map(|e| (e.pid, e.start_time)).collect();
        let gone: Vec<i32> = self
            .managed
            .iter()
            .filter(|(pid, m)| {
                seen.get(pid) != Some(&m.handle.start_time) || !self.ops.alive(&m.handle)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in gone {
            self.forget(pid, out);
        }
        for e in &list {
            if e.kernel_thread {
                if !self.rules.is_empty() && self.may_match(&e.comm) {
                    // A rule's comm glob also fits a kernel thread: never pinned.
                    self.counters.kernel_threads += 1;
                }
                continue;
            }
            let unchanged = self
                .managed
                .get(&e.pid)
                .map(|m| m.handle.start_time == e.start_time && m.comm == e.comm);
            match unchanged {
                // Same process, same name: its task list and masks are all that can
                // have changed without an exec (which renames it).
                Some(true) => self.refresh_managed(e.pid, e.num_threads, out),
                Some(false) => {
                    if let Some(snap) = self.procs.snapshot(e.pid) {
                        self.consider_snapshot(snap, None, out);
                    }
                }
                None if self.may_match(&e.comm) => {
                    if let Some(snap) = self.procs.snapshot(e.pid) {
                        self.consider_snapshot(snap, None, out);
                    }
                }
                None => {}
            }
        }
        let took = started.elapsed();
        self.counters.rescans += 1;
        self.counters.last_rescan_us = took.as_micros() as u64;
        out.push(Change::Rescanned {
            processes: list.len(),
            took,
        });
    }

    /// The rescan's check of a managed process whose start time and name are what we
    /// hold: one listing of its tasks (and its threads' names when the rule has
    /// thread entries), then each thread's mask read back (someone
    /// else's change is noticed as in a full reconcile). New threads are pinned, gone
    /// ones dropped; no full snapshot.
    fn refresh_managed(&mut self, pid: i32, num_threads: u32, out: &mut Vec<Change>) {
        // A single-threaded process's only task is its main thread: no listing.
        let listed = if num_threads == 1 {
            Some(vec![pid])
        } else {
            self.procs.tasks(pid)
        };
        let Some(mut tids) = listed else {
            self.forget(pid, out);
            return;
        };
        tids.sort_unstable();
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        m.threads.retain(|tid, _| tids.binary_search(tid).is_ok());
        // Thread names choose thread entries: with entries, each name is read again
        // (a rename may have gone unreported); without, the names we hold suffice.
        let names_matter = match &m.source {
            Source::Rule(r) => !r.threads.is_empty(),
            Source::Runtime(_) => false,
        };
        for tid in tids {
            let known = if names_matter {
                None
            } else {
                self.managed
                    .get(&pid)
                    .and_then(|m| m.threads.get(&tid))
                    .map(|t| t.comm.clone())
            };
            let comm = match known {
                Some(c) => c,
                None => match self.procs.thread_comm(pid, tid) {
                    Some(c) => c,
                    None => continue,
                },
            };
            self.pin_thread(pid, tid, Some(comm), true, out);
        }
    }

    /// Plans every placement unit in precedence order.
    fn replan(&mut self) {
        let mut units: Vec<(Arc<Rule>, Option<usize>, PlacementRequest)> = Vec::new();
        for r in self.rules.rules() {
            if let Some(p) = &r.place {
                units.push((r.clone(), None, p.clone()));
            }
            for (i, t) in r.threads.iter().enumerate() {
                units.push((r.clone(), Some(i), t.request.clone()));
            }
        }
        // Precedence: priority, explicit CPUs before counts, name, the rule's own
        // place before its thread entries.
        units.sort_by(|a, b| {
            b.0.priority
                .cmp(&a.0.priority)
                .then_with(|| is_count(&a.2).cmp(&is_count(&b.2)))
                .then_with(|| a.0.name.cmp(&b.0.name))
                .then_with(|| a.1.cmp(&b.1))
        });
        let mut owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut exclusive_owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut plans = HashMap::new();
        let mut order = Vec::new();
        for (rule, entry, req) in units {
            // CPUs held by other rules, as seen by this unit.
            let others = |map: &BTreeMap<u32, String>| -> CpuSet {
                map.iter()
                    .filter(|(_, r)| **r != rule.name)
                    .map(|(c, _)| *c)
                    .collect()
            };
            let blocked = if req.exclusive {
                others(&owner)
            } else {
                others(&exclusive_owner)
            };
            let shared_entry = entry.is_some_and(|i| rule.threads[i].shared);
            let mut extra_held = CpuSet::new();
            let state = match &req.target {
                CpuTarget::Cpus(cpus) => {
                    let clash = cpus.intersection(&blocked);
                    match clash.first() {
                        Some(c) => PlanState::Lost {
                            to: owner
                                .get(&c)
                                .or_else(|| exclusive_owner.get(&c))
                                .cloned()
                                .unwrap_or_default(),
                            cpus: clash,
                        },
                        None => PlanState::Placed { cpus: cpus.clone() },
                    }
                }
                CpuTarget::Count(n) => {
                    // `within` bounds the choice; without it a thread entry places
                    // within its rule's own CPUs when the rule has some.
                    let general = self.online.difference(&self.config.reserved);
                    let pool = match (&req.within, entry) {
                        (Some(w), _) => general.intersection(w),
                        (None, Some(_)) => match plans.get(&(rule.name.clone(), None)) {
                            Some(PlanState::Placed { cpus }) => cpus.clone(),
                            _ => general,
                        },
                        (None, None) => general,
                    }
                    .difference(&blocked);
                    match &self.placer {
                        None => PlanState::Unplaceable {
                            reason: "no placement engine (only explicit cpus can be placed)".into(),
                        },
                        Some(place) if entry.is_some() && !shared_entry => {
                            let mut slots = Vec::new();
                            let mut left = pool.clone();
                            while left.len() >= *n as usize && slots.len() < 4096 {
                                match place(&req, &left) {
                                    Ok((s, held)) if !s.is_empty() => {
                                        left = left.difference(&held);
                                        slots.push(s);
                                    }
                                    _ => break,
                                }
                            }
                            if slots.is_empty() {
                                PlanState::Unplaceable {
                                    reason: format!("{n} CPUs per thread do not fit in {pool}"),
                                }
                            } else {
                                PlanState::Slots { slots }
                            }
                        }
                        Some(place) => match place(&req, &pool) {
                            Ok((cpus, held)) => {
                                extra_held = held;
                                PlanState::Placed { cpus }
                            }
                            Err(reason) => {
                                // Say who holds the CPUs it could not get.
                                let taken = self.online.intersection(&blocked);
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
                                    _ => PlanState::Unplaceable { reason },
                                }
                            }
                        },
                    }
                }
            };
            let held: CpuSet = match &state {
                PlanState::Placed { cpus } => cpus.union(&extra_held),
                PlanState::Slots { slots } => slots.iter().fold(CpuSet::new(), |a, s| a.union(s)),
                _ => CpuSet::new(),
            };
            for c in held.iter() {
                owner.entry(c).or_insert_with(|| rule.name.clone());
                if req.exclusive {
                    exclusive_owner.insert(c, rule.name.clone());
                }
            }
            match &state {
                PlanState::Lost { to, cpus } => tracing::info!(
                    rule = %rule.name, lost_to = %to, cpus = %cpus,
                    "rule lost a CPU conflict to a higher-precedence rule and is not applied"
                ),
                PlanState::Unplaceable { reason } => {
                    tracing::info!(rule = %rule.name, %reason, "rule could not be placed")
                }
                _ => {}
            }
            plans.insert((rule.name.clone(), entry), state.clone());
            order.push(UnitPlan {
                rule: rule.name.clone(),
                thread_entry: entry,
                priority: rule.priority,
                exclusive: req.exclusive,
                state,
            });
        }
        self.plans = plans;
        self.plan_order = order;
    }

    /// The plan of a rule's unit.
    pub fn plan_of(&self, rule: &str, thread_entry: Option<usize>) -> Option<&PlanState> {
        self.plans.get(&(rule.to_string(), thread_entry))
    }

    /// Pins process `pid` at run time, without a rule: `request` is placed now among
    /// the CPUs no exclusive rule holds. Returns the CPUs.
    pub fn pin(
        &mut self,
        pid: i32,
        request: &PlacementRequest,
    ) -> Result<(CpuSet, Vec<Change>), ManagerError> {
        let snap = self
            .procs
            .snapshot(pid)
            .ok_or(ManagerError::NoProcess { pid })?;
        if snap.kernel_thread {
            return Err(ManagerError::KernelThread { pid });
        }
        let exclusive: CpuSet =
            self.plan_order
                .iter()
                .filter(|p| p.exclusive)
                .fold(CpuSet::new(), |acc, p| match &p.state {
                    PlanState::Placed { cpus } => acc.union(cpus),
                    PlanState::Slots { slots } => slots.iter().fold(acc, |a, s| a.union(s)),
                    _ => acc,
                });
        let cpus = match &request.target {
            CpuTarget::Cpus(c) => c.clone(),
            CpuTarget::Count(_) => {
                let mut pool = self
                    .online
                    .difference(&self.config.reserved)
                    .difference(&exclusive);
                if let Some(w) = &request.within {
                    pool = pool.intersection(w);
                }
                let place = self
                    .placer
                    .as_ref()
                    .ok_or_else(|| ManagerError::Unplaceable {
                        pid,
                        request: describe_request(request),
                        reason: "no placement engine".into(),
                    })?;
                place(request, &pool)
                    .map_err(|reason| ManagerError::Unplaceable {
                        pid,
                        request: describe_request(request),
                        reason,
                    })?
                    .0
            }
        };
        let mut out = Vec::new();
        let original = self.managed.get(&pid).map(|m| m.original.clone());
        if self.managed.contains_key(&pid) {
            // Keep the original from first contact; drop the rule's claim.
            self.managed.remove(&pid);
        }
        if !self.start_managing(&snap, Source::Runtime(cpus.clone()), original) {
            return Err(ManagerError::NoProcess { pid });
        }
        self.reconcile(snap, &mut out);
        Ok((cpus, out))
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

    /// Rows for `ListManaged`, by pid.
    pub fn list_managed(&self) -> Vec<ManagedRow> {
        self.managed
            .iter()
            .map(|(pid, m)| {
                let mut cpus = CpuSet::new();
                let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
                for t in m.threads.values() {
                    if t.released {
                        *counts.entry("released").or_default() += 1;
                        continue;
                    }
                    if let Some(e) = t.outcome.effective() {
                        cpus = cpus.union(e);
                    }
                    *counts.entry(t.outcome.label()).or_default() += 1;
                }
                let state = if counts.len() == 1 {
                    counts
                        .keys()
                        .next()
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                } else {
                    counts
                        .iter()
                        .map(|(k, v)| format!("{v} {k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let state = match &m.source {
                    Source::Rule(r) => match self.plans.get(&(r.name.clone(), None)) {
                        Some(PlanState::Lost { to, .. }) if cpus.is_empty() => {
                            format!("conflict: lost to {to}")
                        }
                        _ => state,
                    },
                    Source::Runtime(_) => state,
                };
                ManagedRow {
                    pid: *pid as u32,
                    comm: m.comm.clone(),
                    rule: m.source.name(),
                    cpus: cpus.to_string(),
                    state,
                }
            })
            .collect()
    }

    /// Why process `pid` got (or did not get) what it has: the matcher's verdicts,
    /// the plan of the winning rule and each thread's outcome.
    pub fn explain(&self, pid: i32) -> String {
        use std::fmt::Write;
        let Some(snap) = self.procs.snapshot(pid) else {
            return format!("pid {pid}: no such process\n");
        };
        let mut s = String::new();
        if snap.kernel_thread {
            let _ = writeln!(
                s,
                "pid {pid} ({}): a kernel thread; never pinned",
                snap.info.comm
            );
            return s;
        }
        let _ = write!(s, "{}", self.rules.explain(&snap.info));
        match self.managed.get(&pid) {
            None => {
                let _ = writeln!(s, "not managed");
            }
            Some(m) => {
                let _ = writeln!(
                    s,
                    "managed by {} since first contact; original mask {}",
                    m.source.name(),
                    m.original
                );
                if let Source::Rule(r) = &m.source {
                    for p in self.plan_order.iter().filter(|p| p.rule == r.name) {
                        let unit = match p.thread_entry {
                            None => "place".to_string(),
                            Some(i) => format!("threads[{i}]"),
                        };
                        let _ = writeln!(s, "  plan {unit}: {}", p.state.describe());
                    }
                }
                for (tid, t) in &m.threads {
                    let what = if t.released {
                        "released (someone else changed its mask)".to_string()
                    } else {
                        match &t.outcome {
                            Outcome::Applied { effective } => format!("applied {effective}"),
                            Outcome::Narrowed {
                                requested,
                                effective,
                            } => format!(
                                "narrowed by a cpuset: asked {requested}, runs on {effective}"
                            ),
                            Outcome::Refused { requested } => {
                                format!("refused: its cpuset excludes all of {requested}")
                            }
                            other => other.label().to_string(),
                        }
                    };
                    let _ = writeln!(s, "  tid {tid} ({}): {what}", t.comm);
                }
            }
        }
        s
    }

    /// Whether the restore journal has changes not yet written ([`Manager::flush`]).
    pub fn journal_dirty(&self) -> bool {
        self.journal_dirty && self.journal.is_some()
    }

    /// Writes the restore journal if what must be restored changed. After a failed
    /// write the journal stays dirty, so the caller can try again.
    pub fn flush(&mut self) -> Result<(), RestoreError> {
        if !self.journal_dirty {
            return Ok(());
        }
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        journal.save(&self.journal_entries())?;
        self.journal_dirty = false;
        Ok(())
    }

    /// What the journal holds now.
    pub fn journal_entries(&self) -> Vec<RestoreEntry> {
        self.managed
            .values()
            .filter_map(|m| {
                let main = m.threads.get(&m.handle.pid)?;
                let applied = main.outcome.effective()?.clone();
                let threads = m
                    .threads
                    .iter()
                    .filter(|(_, t)| !t.released)
                    .filter_map(|(tid, t)| {
                        let eff = t.outcome.effective()?;
                        (t.original != m.original || *eff != applied).then(|| {
                            (
                                *tid,
                                restore::ThreadRestore {
                                    original: t.original.clone(),
                                    applied: eff.clone(),
                                },
                            )
                        })
                    })
                    .collect();
                Some(RestoreEntry {
                    pid: m.handle.pid,
                    start_time: m.handle.start_time,
                    comm: m.comm.clone(),
                    applied,
                    original: m.original.clone(),
                    threads,
                })
            })
            .collect()
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

/// What the rest of a batch says about the task of one message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Ahead {
    /// The task's last name in the rest of the batch (new threads only).
    comm: Option<String>,
    /// The task exits later in the batch.
    exits: bool,
}

/// For each message of a batch, what the messages after it say about its task: one
/// pass from the end. A task id met again before (a FORK for it) belongs to another
/// task, so a FORK ends what is known about its id.
fn lookahead(msgs: &[ProcMsg]) -> Vec<Ahead> {
    let mut later: HashMap<Tid, Ahead> = HashMap::new();
    let mut out = vec![Ahead::default(); msgs.len()];
    for (i, msg) in msgs.iter().enumerate().rev() {
        match msg {
            ProcMsg::Exit { tid, .. } => {
                later.insert(
                    *tid,
                    Ahead {
                        comm: None,
                        exits: true,
                    },
                );
            }
            ProcMsg::Comm { tid, comm, .. } => {
                let a = later.entry(*tid).or_default();
                if a.comm.is_none() {
                    a.comm = Some(comm.clone());
                }
            }
            ProcMsg::NewThread { tid, .. } => out[i] = later.remove(tid).unwrap_or_default(),
            ProcMsg::NewProcess { pid, .. } => {
                out[i] = later.remove(pid).unwrap_or_default();
                out[i].comm = None;
            }
            ProcMsg::Exec { pid } => {
                out[i].exits = later.get(pid).is_some_and(|a| a.exits);
            }
            ProcMsg::Overrun => later.clear(),
        }
    }
    out
}

fn is_count(r: &PlacementRequest) -> bool {
    matches!(r.target, CpuTarget::Count(_))
}

fn unit_index(p: ThreadPlacement) -> Option<usize> {
    match p {
        ThreadPlacement::Process => None,
        ThreadPlacement::Thread(i) => Some(i),
    }
}

fn describe_request(r: &PlacementRequest) -> String {
    match &r.target {
        CpuTarget::Cpus(c) => format!("cpus {c}"),
        CpuTarget::Count(n) => format!("{n} CPUs ({}, smt {})", r.policy, r.smt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::{Call, FakeOps};
    use crate::rules::{compile_text, LoadPolicy};
    use crate::watch::scan::FakeProcs;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn rules(text: &str) -> RuleSet {
        let r = compile_text(
            std::path::Path::new("t.toml"),
            text,
            &LoadPolicy::unchecked(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        RuleSet::new(r)
    }

    /// Lowest-numbered CPUs first: enough to test the manager, not a placement engine.
    fn lowest_first() -> Placer {
        Box::new(|req, avail| match &req.target {
            CpuTarget::Count(n) if avail.len() >= *n as usize => {
                let c: CpuSet = avail.iter().take(*n as usize).collect();
                Ok((c.clone(), c))
            }
            CpuTarget::Count(n) => Err(format!("{n} CPUs wanted, {avail} available")),
            CpuTarget::Cpus(c) => Ok((c.clone(), c.clone())),
        })
    }

    struct T {
        ops: Arc<FakeOps>,
        procs: Arc<FakeProcs>,
        mgr: Manager,
    }

    fn rig(config: ManagerConfig) -> T {
        let ops = Arc::new(FakeOps::new());
        let procs = Arc::new(FakeProcs::new());
        let mgr = Manager::new(
            ops.clone(),
            procs.clone(),
            Some(lowest_first()),
            set("0-7"),
            config,
        );
        T { ops, procs, mgr }
    }

    impl T {
        fn process(&self, pid: i32, comm: &str, start: u64, threads: &[(Tid, &str)]) {
            self.procs.put(pid, comm, start, threads);
            let tids: Vec<Tid> = threads.iter().map(|t| t.0).collect();
            self.ops.add_process(pid, start, &tids, &set("0-7"));
        }
        fn ev(&mut self, e: Event) -> Vec<Change> {
            self.mgr.handle(e)
        }
        fn msg(&mut self, m: ProcMsg) -> Vec<Change> {
            self.mgr.handle(Event::Proc(m))
        }
    }

    const FEED: &str = r#"
[[rule]]
name = "feed"
priority = 10
[rule.match]
comm = "feed*"
[rule.place]
cpus = "2-3"
"#;

    #[test]
    fn a_matched_process_has_every_thread_pinned_and_new_threads_follow() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx"), (102, "tx")]);
        t.process(200, "other", 1, &[]);
        t.ev(Event::RulesChanged(rules(FEED)));
        for tid in [100, 101, 102] {
            assert_eq!(t.ops.mask(tid), Some(set("2-3")), "tid {tid}");
        }
        assert_eq!(t.ops.mask(200), Some(set("0-7")));
        assert!(
            t.ops.sets().iter().all(|(tid, _)| *tid != 200),
            "unmatched untouched"
        );

        // A new thread inherits the pinned mask: it is checked, not written.
        t.procs.add_thread(100, 103, "worker");
        t.procs.add_thread(100, 103, "rx");
        t.ops.add_task(103, &set("2-3"));
        t.ops.clear_calls();
        let c = t.msg(ProcMsg::NewThread {
            pid: 100,
            tid: 103,
            parent: 100,
        });
        assert!(matches!(
            &c[..],
            [Change::Pinned {
                tid: 103,
                outcome: Outcome::Applied { .. },
                ..
            }]
        ));
        assert!(t.ops.sets().is_empty());
        // One created by a thread someone else had moved is written.
        t.procs.add_thread(100, 104, "rx");
        t.ops.add_task(104, &set("0-7"));
        t.msg(ProcMsg::NewThread {
            pid: 100,
            tid: 104,
            parent: 100,
        });
        assert_eq!(t.ops.mask(104), Some(set("2-3")));
        assert_eq!(t.mgr.managed_threads(), 5);

        t.msg(ProcMsg::Exit { pid: 100, tid: 104 });
        assert_eq!(t.mgr.managed_threads(), 4);
        let rows = t.mgr.list_managed();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].rule.as_str(),
                rows[0].cpus.as_str(),
                rows[0].state.as_str()
            ),
            ("feed", "2-3", "applied")
        );
    }

    #[test]
    fn a_new_thread_is_pinned_from_the_fork_event_without_reading_proc() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ev(Event::RulesChanged(rules(FEED)));
        // Inherited from a pinned creator: one read-back, no write, no /proc read.
        t.procs.add_thread(100, 102, "rx");
        t.ops.add_task(102, &set("2-3"));
        t.ops.clear_calls();
        let reads = t.procs.reads();
        t.msg(ProcMsg::NewThread {
            pid: 100,
            tid: 102,
            parent: 101,
        });
        assert_eq!(t.ops.calls(), vec![Call::Get(102)]);
        // Created by a task someone else had moved: written and read back.
        t.procs.add_thread(100, 103, "rx");
        t.ops.add_task(103, &set("0-7"));
        t.ops.clear_calls();
        t.msg(ProcMsg::NewThread {
            pid: 100,
            tid: 103,
            parent: 100,
        });
        assert_eq!(
            t.ops.calls(),
            vec![Call::Get(103), Call::Set(103, set("2-3")), Call::Get(103)]
        );
        assert_eq!(t.procs.reads(), reads, "the FORK path read /proc");
        // Its original mask is what it had, and comes back when the rule goes.
        t.ev(Event::RulesChanged(rules("")));
        assert_eq!(t.ops.mask(102), Some(set("0-7")));
        assert_eq!(t.ops.mask(103), Some(set("0-7")));
    }

    #[test]
    fn a_batch_names_new_threads_from_its_comm_events_and_skips_tasks_that_exit() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "dpdk", 1, &[]);
        t.ev(Event::RulesChanged(rules(
            r#"
[[rule]]
name = "dp"
[rule.match]
comm = "dpdk"
[rule.place]
cpus = "4-6"
[[rule.threads]]
comm = "lcore-*"
cpus = "6"
"#,
        )));
        // Thread 101 is born with its creator's name and renames itself; 102 is born
        // and gone within the batch; 103 keeps its inherited name (read from /proc).
        t.procs.add_thread(100, 101, "lcore-0");
        t.ops.add_task(101, &set("4-6"));
        t.ops.add_task(102, &set("4-6"));
        t.procs.add_thread(100, 103, "dpdk");
        t.ops.add_task(103, &set("4-6"));
        t.ops.clear_calls();
        let reads = t.procs.reads();
        let c = t.mgr.handle_batch(vec![
            ProcMsg::NewThread {
                pid: 100,
                tid: 101,
                parent: 1,
            },
            ProcMsg::NewThread {
                pid: 100,
                tid: 102,
                parent: 1,
            },
            ProcMsg::Comm {
                pid: 100,
                tid: 101,
                comm: "lcore-0".into(),
            },
            ProcMsg::Exit { pid: 100, tid: 102 },
        ]);
        assert_eq!(
            t.procs.reads(),
            reads,
            "a name known from the batch was read"
        );
        assert_eq!(
            t.ops.calls(),
            vec![Call::Get(101), Call::Set(101, set("6")), Call::Get(101)],
            "101 pinned once for its final name, 102 not at all"
        );
        assert!(matches!(&c[..], [Change::Pinned { tid: 101, .. }]));
        assert_eq!(t.mgr.counters().gone, 1);
        t.mgr.handle_batch(vec![ProcMsg::NewThread {
            pid: 100,
            tid: 103,
            parent: 1,
        }]);
        assert_eq!(t.procs.reads(), reads + 1);
        assert_eq!(t.ops.mask(103), Some(set("4-6")));
        // The same messages one at a time end in the same masks.
        let mut u = rig(ManagerConfig::default());
        u.process(100, "dpdk", 1, &[(101, "lcore-0")]);
        u.ev(Event::RulesChanged(rules(
            "[[rule]]\nname = \"dp\"\n[rule.match]\ncomm = \"dpdk\"\n[rule.place]\ncpus = \"4-6\"\n[[rule.threads]]\ncomm = \"lcore-*\"\ncpus = \"6\"\n",
        )));
        assert_eq!(u.ops.mask(101), t.ops.mask(101));
    }

    #[test]
    fn a_rescan_checks_an_unchanged_managed_process_without_a_full_snapshot() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ev(Event::RulesChanged(rules(FEED)));
        let snaps = t.procs.snapshots();
        // A thread the events missed, and one that left unseen.
        t.procs.add_thread(100, 102, "tx");
        t.ops.add_task(102, &set("0-7"));
        t.procs.remove(100, 101);
        t.ops.remove_task(101);
        t.ev(Event::Rescan);
        assert_eq!(t.procs.snapshots(), snaps, "a full snapshot was taken");
        assert_eq!(t.ops.mask(102), Some(set("2-3")));
        assert_eq!(t.mgr.managed_threads(), 2);
        // Someone else's change is still noticed.
        t.ops.external_set(102, &set("5"));
        let c = t.ev(Event::Rescan);
        assert!(c.iter().any(|c| matches!(
            c,
            Change::Foreign {
                tid: 102,
                released: true,
                ..
            }
        )));
        assert_eq!(t.procs.snapshots(), snaps);
        // A renamed process (an exec the events missed) gets a full look.
        t.procs.rename(100, 100, "other");
        t.ev(Event::Rescan);
        assert!(t.procs.snapshots() > snaps);
        assert_eq!(t.mgr.managed_processes(), 0);
    }

    #[test]
    fn removing_the_rule_gives_back_the_original_masks() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ops.external_set(101, &set("5"));
        t.ev(Event::RulesChanged(rules(FEED)));
        assert_eq!(t.ops.mask(101), Some(set("2-3")));
        let c = t.ev(Event::RulesChanged(RuleSet::default()));
        assert!(c.iter().any(|c| matches!(
            c,
            Change::Released {
                pid: 100,
                restored: 2,
                ..
            }
        )));
        assert_eq!(t.ops.mask(100), Some(set("0-7")));
        assert_eq!(
            t.ops.mask(101),
            Some(set("5")),
            "each thread gets its own original"
        );
        assert_eq!(t.mgr.managed_processes(), 0);
    }

    #[test]
    fn a_process_that_stops_matching_is_released_and_a_renamed_one_is_matched() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "bash", 1, &[]);
        t.ev(Event::RulesChanged(rules(FEED)));
        assert!(!t.mgr.is_managed(100));
        t.procs.rename(100, 100, "feed-a");
        t.msg(ProcMsg::Comm {
            pid: 100,
            tid: 100,
            comm: "feed-a".into(),
        });
        assert_eq!(t.ops.mask(100), Some(set("2-3")));
        t.procs.rename(100, 100, "bash");
        t.msg(ProcMsg::Exec { pid: 100 });
        assert!(!t.mgr.is_managed(100));
        assert_eq!(t.ops.mask(100), Some(set("0-7")));
    }

    #[test]
    fn a_reused_pid_is_never_acted_on_for_the_old_process() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[]);
        t.ev(Event::RulesChanged(rules(FEED)));
        assert!(t.mgr.is_managed(100));
        // The process exits unseen (events lost) and another takes its pid.
        t.ops.remove_task(100);
        t.procs.remove(100, 100);
        t.process(100, "other", 2, &[]);
        t.ops.clear_calls();
        t.ev(Event::Rescan);
        assert!(!t.mgr.is_managed(100));
        assert!(
            t.ops.sets().is_empty(),
            "the new process was touched: {:?}",
            t.ops.calls()
        );
        assert_eq!(t.ops.mask(100), Some(set("0-7")));
    }

    #[test]
    fn kernel_threads_are_skipped_quietly() {
        let mut t = rig(ManagerConfig::default());
        t.process(3, "feedworker", 1, &[]);
        t.procs.set_kernel_thread(3);
        t.ev(Event::RulesChanged(rules(FEED)));
        assert!(!t.mgr.is_managed(3));
        assert!(t.ops.sets().is_empty());
        assert!(t.mgr.counters().kernel_threads >= 1);
    }

    #[test]
    fn exclusive_rules_never_share_cpus_and_the_loser_is_visible() {
        let mut t = rig(ManagerConfig::default());
        t.ev(Event::RulesChanged(rules(
            r#"
[[rule]]
name = "hi"
priority = 50
[rule.match]
comm = "hi"
[rule.place]
cpus = "2-3"
exclusive = true

[[rule]]
name = "lo"
priority = 10
[rule.match]
comm = "lo"
[rule.place]
cpus = "3-4"

[[rule]]
name = "lo-excl"
priority = 5
[rule.match]
comm = "lox"
[rule.place]
cpus = "4-5"
exclusive = true

[[rule]]
name = "count"
priority = 1
[rule.match]
comm = "cnt"
[rule.place]
count = 2
"#,
        )));
        assert_eq!(
            t.mgr.plan_of("hi", None),
            Some(&PlanState::Placed { cpus: set("2-3") })
        );
        assert_eq!(
            t.mgr.plan_of("lo", None),
            Some(&PlanState::Lost {
                to: "hi".into(),
                cpus: set("3")
            })
        );
        // lo lost, so 4 is free for the exclusive rule below it.
        assert_eq!(
            t.mgr.plan_of("lo-excl", None),
            Some(&PlanState::Placed { cpus: set("4-5") })
        );
        // Count placement steers around every exclusive CPU.
        assert_eq!(
            t.mgr.plan_of("count", None),
            Some(&PlanState::Placed { cpus: set("0-1") })
        );

        t.process(100, "lo", 1, &[]);
        t.ev(Event::Rescan);
        assert_eq!(
            t.ops.mask(100),
            Some(set("0-7")),
            "a losing rule is not applied"
        );
        let rows = t.mgr.list_managed();
        assert_eq!(rows[0].state, "conflict: lost to hi");
        assert!(t.mgr.explain(100).contains("lost CPUs 3 to rule \"hi\""));
    }

    #[test]
    fn a_lower_priority_exclusive_rule_cannot_take_shared_cpus() {
        let mut t = rig(ManagerConfig::default());
        t.ev(Event::RulesChanged(rules(
            r#"
[[rule]]
name = "a"
priority = 9
[rule.match]
comm = "a"
[rule.place]
cpus = "1-2"

[[rule]]
name = "b"
priority = 1
[rule.match]
comm = "b"
[rule.place]
cpus = "2"
exclusive = true
"#,
        )));
        assert_eq!(
            t.mgr.plan_of("b", None),
            Some(&PlanState::Lost {
                to: "a".into(),
                cpus: set("2")
            })
        );
    }

    #[test]
    fn thread_entries_get_their_own_cpus_within_the_rule() {
        let mut t = rig(ManagerConfig::default());
        t.process(
            100,
            "dpdk",
            1,
            &[(101, "lcore-0"), (102, "lcore-1"), (103, "ctl")],
        );
        t.ev(Event::RulesChanged(rules(
            r#"
[[rule]]
name = "dp"
[rule.match]
comm = "dpdk"
[rule.place]
cpus = "4-6"
[[rule.threads]]
comm = "lcore-*"
count = 1
"#,
        )));
        assert_eq!(t.ops.mask(100), Some(set("4-6")));
        assert_eq!(t.ops.mask(103), Some(set("4-6")));
        assert_eq!(t.ops.mask(101), Some(set("4")));
        assert_eq!(t.ops.mask(102), Some(set("5")));
        // A thread renamed into an entry moves to the next slot.
        t.procs.rename(100, 103, "lcore-2");
        t.msg(ProcMsg::Comm {
            pid: 100,
            tid: 103,
            comm: "lcore-2".into(),
        });
        assert_eq!(t.ops.mask(103), Some(set("6")));
        // The journal records threads whose masks differ from the process's.
        let j = t.mgr.journal_entries();
        assert_eq!(j.len(), 1);
        assert_eq!(
            j[0].threads.keys().copied().collect::<Vec<_>>(),
            vec![101, 102, 103]
        );
    }

    #[test]
    fn within_bounds_thread_entries_instead_of_the_rule_cpus() {
        let mut t = rig(ManagerConfig::default());
        t.process(
            100,
            "l3fwd",
            1,
            &[(101, "lcore-1"), (102, "lcore-2"), (103, "eal-intr")],
        );
        t.ev(Event::RulesChanged(rules(
            r#"
[[rule]]
name = "dp"
[rule.match]
comm = "l3fwd"
[rule.place]
cpus = "0"
[[rule.threads]]
comm = "lcore-*"
count = 1
within = "4-5"
exclusive = true
"#,
        )));
        assert_eq!(t.ops.mask(103), Some(set("0")));
        assert_eq!(t.ops.mask(101), Some(set("4")));
        assert_eq!(t.ops.mask(102), Some(set("5")));
    }

    #[test]
    fn cpusets_narrow_or_refuse_and_refusals_are_not_retried() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ops.set_cpuset(100, &set("0-2"));
        t.ops.set_cpuset(101, &set("0-1"));
        let c = t.ev(Event::RulesChanged(rules(FEED)));
        let outcomes: Vec<(Tid, Outcome)> = c
            .into_iter()
            .filter_map(|c| match c {
                Change::Pinned { tid, outcome, .. } => Some((tid, outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(
            outcomes,
            vec![
                (
                    100,
                    Outcome::Narrowed {
                        requested: set("2-3"),
                        effective: set("2")
                    }
                ),
                (
                    101,
                    Outcome::Refused {
                        requested: set("2-3")
                    }
                ),
            ]
        );
        t.ops.clear_calls();
        t.ev(Event::Rescan);
        assert!(t.ops.sets().is_empty(), "retried: {:?}", t.ops.sets());
        assert_eq!(t.mgr.counters().refused, 1);
    }

    #[test]
    fn someone_elses_change_is_released_or_reasserted_as_configured() {
        for (policy, expect, after) in [
            (ForeignChange::Release, set("7"), set("7")),
            (ForeignChange::Reassert, set("2-3"), set("0-7")),
        ] {
            let mut t = rig(ManagerConfig {
                on_foreign_change: policy,
                ..ManagerConfig::default()
            });
            t.process(100, "feed", 1, &[(101, "rx")]);
            t.ev(Event::RulesChanged(rules(FEED)));
            t.ops.external_set(101, &set("7"));
            let c = t.ev(Event::Rescan);
            assert!(c
                .iter()
                .any(|c| matches!(c, Change::Foreign { tid: 101, .. })));
            assert_eq!(t.ops.mask(101), Some(expect.clone()), "{policy:?}");
            // A cpuset narrowing within our CPUs is not someone else's change.
            t.ops.set_cpuset(100, &set("3"));
            let c = t.ev(Event::Rescan);
            assert!(!c
                .iter()
                .any(|c| matches!(c, Change::Foreign { tid: 100, .. })));
            t.mgr.shutdown().unwrap();
            // Shutdown restores what is still ours and leaves a released thread alone.
            assert_eq!(t.ops.mask(101), Some(after), "{policy:?}");
        }
    }

    #[test]
    fn hotplug_replans_and_reapplies() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "cnt", 1, &[]);
        t.ev(Event::RulesChanged(rules(
            "[[rule]]\nname = \"c\"\n[rule.match]\ncomm = \"cnt\"\n[rule.place]\ncount = 2\n",
        )));
        assert_eq!(t.ops.mask(100), Some(set("0-1")));
        // CPU 1 goes away; the kernel widens nothing here but the plan moves.
        t.ev(Event::Hotplug {
            online: set("0,2-7"),
        });
        assert_eq!(
            t.mgr.plan_of("c", None),
            Some(&PlanState::Placed { cpus: set("0,2") })
        );
        assert_eq!(t.ops.mask(100), Some(set("0,2")));
        // The kernel widened a mask while the CPU was away; coming back re-applies.
        t.ops.external_set(100, &set("0-7"));
        t.ev(Event::Hotplug { online: set("0-7") });
        assert_eq!(t.ops.mask(100), Some(set("0-1")));
        assert_eq!(t.mgr.counters().foreign_changes, 0);
    }

    #[test]
    fn a_child_of_a_managed_process_that_matches_nothing_gets_the_original_back() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[]);
        t.ev(Event::RulesChanged(rules(FEED)));
        // The child inherits the pinned mask, then is seen with another name.
        t.procs.put(300, "helper", 5, &[]);
        t.ops.add_process(300, 5, &[], &set("2-3"));
        t.msg(ProcMsg::NewProcess {
            pid: 300,
            parent: 100,
        });
        assert!(!t.mgr.is_managed(300));
        assert_eq!(t.ops.mask(300), Some(set("0-7")));
        // A matching child keeps the parent's original for later.
        t.procs.put(301, "feed", 6, &[]);
        t.ops.add_process(301, 6, &[], &set("2-3"));
        t.msg(ProcMsg::NewProcess {
            pid: 301,
            parent: 100,
        });
        t.ev(Event::RulesChanged(RuleSet::default()));
        assert_eq!(t.ops.mask(301), Some(set("0-7")));
    }

    #[test]
    fn exits_and_vanishing_threads_are_outcomes_not_errors() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[(101, "rx")]);
        t.ev(Event::RulesChanged(rules(FEED)));
        // A thread reported by the connector that is already gone.
        let c = t.msg(ProcMsg::NewThread {
            pid: 100,
            tid: 555,
            parent: 100,
        });
        assert!(c.is_empty());
        assert!(t.mgr.counters().gone >= 1);
        t.ops.remove_task(100);
        t.ops.remove_task(101);
        t.procs.remove(100, 100);
        let c = t.msg(ProcMsg::Exit { pid: 100, tid: 100 });
        assert_eq!(c, vec![Change::Exited { pid: 100 }]);
        assert_eq!(t.mgr.managed_processes(), 0);
    }

    #[test]
    fn runtime_pins_override_rules_and_release_restores() {
        let mut t = rig(ManagerConfig::default());
        t.process(100, "feed", 1, &[]);
        t.process(200, "app", 1, &[]);
        t.ev(Event::RulesChanged(rules(FEED)));
        let req = PlacementRequest {
            target: CpuTarget::Count(2),
            within: None,
            policy: crate::placement::Policy::Compact,
            smt: crate::placement::SmtPolicy::Allow,
            exclusive: false,
        };
        let (cpus, _) = t.mgr.pin(200, &req).unwrap();
        assert_eq!(cpus, set("0-1"));
        assert_eq!(t.ops.mask(200), Some(set("0-1")));
        t.mgr.unpin(200).unwrap();
        assert_eq!(t.ops.mask(200), Some(set("0-7")));
        assert!(matches!(
            t.mgr.unpin(200),
            Err(ManagerError::NotPinned { pid: 200 })
        ));
        assert!(matches!(
            t.mgr.pin(999, &req),
            Err(ManagerError::NoProcess { pid: 999 })
        ));
    }
}
