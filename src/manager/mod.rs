//! The engine that pins: events in, affinity calls and reports out.
//!
//! Owns: which processes and threads are managed, which rule and CPUs each got, the
//! masks they had before (to give them back), exclusivity between rules, the restore
//! journal's contents, and the counters. A plain synchronous state machine: the
//! daemon's loop (or a test) feeds it events one at a time.
//!
//! Must not touch: sockets, timers or files directly. It reaches the system only
//! through its two seams — [`AffinityOps`] (set/get affinity, pidfds) and
//! [`ProcSource`] (procfs snapshots, never a command line) — and the restore [`Journal`].
//!
//! ```text
//!   ProcMsg (connector) ─┐
//!   Rescan (timer/overrun)├─► Manager::handle(Input) ─► AffinityOps (affinity::apply, read back)
//!   RulesChanged(Plan),   │        │   ▲                    │
//!   PlanChanged(Plan),    │        │   └── ProcSource ◄─────┘ (snapshots on demand)
//!   Replanned(Plan) ──────┘        ├─► Vec<Change>, counters(), list_managed(), explain()
//!                                  └─► wants_plan(): Seen (cpusets, memory, slots taken)
//! ```
//!
//! How the loop drives it:
//! - at start: [`Manager::recover`] (restore what a crashed predecessor left), then
//!   `handle(Input::RulesChanged(plan))`;
//! - every connector message: `handle(Input::Proc(msg))` (an `Overrun` rescans);
//! - the rescan timer: `handle(Input::Rescan)` (also checks managed masks for changes
//!   made by someone else);
//! - new rules: `handle(Input::RulesChanged(plan))` with the [`Plan`] of the new rules
//!   (every process is matched again); new CPUs or latency domains:
//!   `handle(Input::PlanChanged(plan))` (managed threads are re-applied);
//! - after every event, batch, pin or release: while [`Manager::wants_plan`] reports
//!   what it saw (processes in cgroup cpusets the plan was not made in, or whose memory
//!   weighs, cpusets that changed, slots their threads took), the loop makes the plan
//!   again for it and hands it down with `handle(Input::Replanned(plan))`; a process
//!   that waits for such a plan has no thread pinned until it comes;
//! - after every input: [`Manager::take_cmdline_reads`] and
//!   [`Manager::take_memory_reads`] (the command lines, and the memory of processes
//!   weighed at first contact, it waits for: read off the loop and handed back as
//!   `handle(Input::Cmdline(read))` and `handle(Input::Memory { .. })`; see `cmdlines`);
//! - once a second: [`Manager::release_slots`] (at most once per
//!   `daemon::state::SLOTS_KEPT`) and [`Manager::log_repeats`];
//! - after each batch of events: [`Manager::flush`] (writes the journal if it changed);
//! - on stop: [`Manager::shutdown`] (gives every managed task its mask back).
//!
//! It plans nothing: which CPUs each placement unit gets is the [`Plan`]'s (see
//! `plan`), made by the daemon's loop; the manager finds the threads each unit covers,
//! applies the plan to them, and reports what it saw for the next plan to be made in.
//!
//! Inside: `tracking` (events and rescans → who is managed, with which threads),
//! `applying` (the plan → masks, through `affinity::apply`), `scheduling` (the
//! scheduling classes rules ask for, given and given back), `pinning` (run-time pins),
//! `giving_back` (release and restore), `reports` (`ListManaged` rows, `explain`, the journal's contents),
//! `protect` (its own process, PID 1 and the bus daemon), `cmdlines` (command lines
//! known and asked for; never read here), `tests`.

mod applying;
pub mod cmdlines;
mod cpusets;
mod giving_back;
mod pinning;
pub mod protect;
pub use cpusets::MemoryWanted;
mod reports;
mod scheduling;
mod tracking;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::affinity::restore::{self, Journal, RestoreEntry, RestoreError, RestoreReport};
use crate::affinity::{AffinityOps, Outcome, ProcessHandle, Tid};
use crate::cpuset::CpuSet;
use crate::plan::{Cpus, Plan, PlanState};
use crate::rules::{Rule, RuleSet, ThreadPlacement};
use crate::sysroot::SysRoot;
use crate::watch::{ProcMsg, ProcSource, ProcessSnapshot};

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
}

impl ManagerConfig {
    /// From the daemon's settings file (`[watch]`).
    pub fn from_settings(s: &crate::settings::Settings) -> ManagerConfig {
        ManagerConfig {
            on_foreign_change: if s.watch.release_on_foreign_change {
                ForeignChange::Release
            } else {
                ForeignChange::Reassert
            },
        }
    }
}

/// One input.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // moved once per event; a new plan is rare
pub enum Input {
    /// A proc connector message.
    Proc(ProcMsg),
    /// Periodic or forced full rescan of /proc.
    Rescan,
    /// New rules, with their plan: every process is matched again (a full rescan).
    RulesChanged(Plan),
    /// The same rules planned anew (CPUs went online or offline, new latency domains):
    /// every managed thread is applied again.
    PlanChanged(Plan),
    /// The plan in force made again for what [`Manager::wants_plan`] reported: the
    /// processes waiting for it are pinned, and every managed thread is applied again
    /// when it moved a unit's CPUs (or a process's cpuset changed). Not counted as an
    /// event.
    Replanned(Plan),
    /// A command line asked for with [`Manager::take_cmdline_reads`], read off the loop:
    /// its process is considered again. Not counted as an event.
    Cmdline(cmdlines::CmdlineRead),
    /// Where a process's memory is, asked for with [`Manager::take_memory_reads`] at
    /// first contact and read off the loop (`None`: gone, one node, unreadable): its
    /// threads wait for the plan made with it. Not counted as an event.
    Memory {
        pid: i32,
        start_time: u64,
        bytes: Option<crate::memory::NodeBytes>,
    },
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
    #[error("pid {pid}: was not pinned at run time")]
    NotPinned { pid: i32 },
    #[error("pid {pid}: {}; not pinned at run time", why.describe())]
    Protected { pid: i32, why: protect::Protected },
    #[error(transparent)]
    Journal(#[from] RestoreError),
}

impl crate::api::CommandError {
    /// A manager error about process `pid`, as the caller reads it and as which D-Bus
    /// error it is sent (here, so that `api` need not know the manager's error type).
    pub fn from_manager(pid: u32, e: ManagerError) -> crate::api::CommandError {
        use crate::api::{CommandError, ErrorKind};
        let kind = match &e {
            ManagerError::NoProcess { .. } => return CommandError::NoSuchProcess(pid),
            ManagerError::NotPinned { .. } => return CommandError::NotManaged(pid),
            ManagerError::KernelThread { .. } => ErrorKind::InvalidArgs,
            ManagerError::Protected { .. } => ErrorKind::NotPermitted,
            ManagerError::Journal(_) => ErrorKind::Failed,
        };
        CommandError::Manager {
            kind,
            error: Box::new(e),
        }
    }
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

    /// In words, after what it manages: `for rule md-feed`, `as pinned at run time`.
    fn words(&self) -> String {
        match self {
            Source::Rule(r) => format!("for rule {}", r.name),
            Source::Runtime(_) => "as pinned at run time".to_string(),
        }
    }

    /// Whether its threads are placed by their names: a rule with thread entries.
    fn places_by_name(&self) -> bool {
        match self {
            Source::Rule(r) => !r.threads.is_empty(),
            Source::Runtime(_) => false,
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
    /// The scheduling class its rule gave it, and the one it had before.
    sched: Option<crate::affinity::restore::SchedRestore>,
}

impl ManagedThread {
    /// A thread at first contact: neither released nor stale.
    fn new(
        comm: String,
        placement: ThreadPlacement,
        slot: usize,
        original: CpuSet,
        outcome: Outcome,
    ) -> ManagedThread {
        ManagedThread {
            comm,
            placement,
            slot,
            original,
            outcome,
            released: false,
            stale: false,
            sched: None,
        }
    }
}

#[derive(Debug)]
struct Managed {
    handle: ProcessHandle,
    comm: String,
    source: Source,
    /// The main thread's mask at first contact: every thread's default original.
    original: CpuSet,
    /// Its cgroup cpuset: count units are planned inside it (see `cpusets`).
    allowed: cpusets::Allowed,
    threads: BTreeMap<Tid, ManagedThread>,
    /// The slots of each thread entry, held by its live threads.
    slots: HashMap<usize, SlotPool>,
    /// Its resident memory per node at first contact, when its rule weighs memory and
    /// it is large enough to (see `plan::memory`).
    memory: Option<crate::memory::NodeBytes>,
    /// A thread's affinity could not be read for lack of permission, and that was
    /// warned about: once per process.
    warned_permission: bool,
    /// Tasks a previous run had changed, with the masks they had before it (see
    /// [`Manager::recover`]): their originals when met, whatever they read now.
    recovered: BTreeMap<Tid, CpuSet>,
    /// Pinned at run time with a class for every thread (`PinProcessWith`'s
    /// `sched-policy`, `pinnerd pin --sched-policy`).
    runtime_sched: Option<crate::affinity::sched::Sched>,
}

impl Managed {
    /// Records that a thread of `placement` holds `slot`.
    fn hold_slot(&mut self, placement: ThreadPlacement, slot: usize) {
        if let ThreadPlacement::Thread(i) = placement {
            self.slots.entry(i).or_default().hold(slot);
        }
    }

    /// Gives a thread's slot back for the next thread of its entry.
    fn release_slot(&mut self, placement: ThreadPlacement, slot: usize) {
        if let ThreadPlacement::Thread(i) = placement {
            if let Some(pool) = self.slots.get_mut(&i) {
                pool.give_back(slot);
            }
        }
    }

    /// The slot a new thread of `placement` would get: the lowest free one.
    fn free_slot(&self, placement: ThreadPlacement) -> usize {
        match placement {
            ThreadPlacement::Thread(i) => self.slots.get(&i).map_or(0, SlotPool::lowest_free),
            ThreadPlacement::Process => 0,
        }
    }

    /// Moves thread `tid` to `seat`, giving its old slot back and holding the new one
    /// when `hold`. Nothing when it is not tracked or already there.
    fn move_thread(&mut self, tid: Tid, (placement, slot): (ThreadPlacement, usize), hold: bool) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let was = (t.placement, t.slot);
        if was == (placement, slot) {
            return;
        }
        t.placement = placement;
        t.slot = slot;
        self.release_slot(was.0, was.1);
        if hold {
            self.hold_slot(placement, slot);
        }
    }

    /// Stops tracking a thread (it exited or vanished), freeing its slot.
    fn remove_thread(&mut self, tid: Tid) -> Option<ManagedThread> {
        let t = self.threads.remove(&tid)?;
        self.release_slot(t.placement, t.slot);
        Some(t)
    }

    /// Keeps only the threads `keep` accepts, freeing the others' slots.
    fn retain_threads(&mut self, keep: impl Fn(Tid) -> bool) {
        let gone: Vec<Tid> = self.threads.keys().copied().filter(|t| !keep(*t)).collect();
        for tid in gone {
            self.remove_thread(tid);
        }
    }
}

/// The slots of one `[[rule.threads]]` entry: a new thread takes the lowest slot no live
/// thread holds, so a thread that replaces one that exited lands on the CPUs it left
/// instead of on a live thread's. Slots past the plan's count wrap around (threads
/// outnumber slots, and share CPUs; `explain` and the log say so).
#[derive(Debug, Default)]
struct SlotPool {
    /// Every slot below this is held, except those in `free`.
    next: usize,
    free: BTreeSet<usize>,
}

impl SlotPool {
    /// The highest slot held, if any.
    fn highest(&self) -> Option<usize> {
        self.next.checked_sub(1)
    }

    fn lowest_free(&self) -> usize {
        self.free.first().copied().unwrap_or(self.next)
    }

    fn hold(&mut self, slot: usize) {
        if self.free.remove(&slot) || slot < self.next {
            return;
        }
        self.free.extend(self.next..slot);
        self.next = slot + 1;
    }

    fn give_back(&mut self, slot: usize) {
        if slot >= self.next {
            return;
        }
        self.free.insert(slot);
        while self.next > 0 && self.free.remove(&(self.next - 1)) {
            self.next -= 1;
        }
    }
}

/// The engine. See the module doc for how to drive it.
pub struct Manager {
    ops: Arc<dyn AffinityOps + Send + Sync>,
    procs: Arc<dyn ProcSource + Send + Sync>,
    config: ManagerConfig,
    /// What each placement unit gets, for the rules it holds and the online CPUs.
    plan: Plan,
    managed: BTreeMap<i32, Managed>,
    /// comm → whether any rule's comm globs can match it (the cheap first pass).
    candidate_cache: HashMap<String, bool>,
    /// Containers the runtime told about (id → what container rules match), for the
    /// processes found in their cgroups (see [`Manager::set_containers`]).
    containers: Vec<(String, crate::rules::ContainerInfo)>,
    /// containerd's task directory, read for a container NRI did not tell about.
    container_tasks: Option<std::path::PathBuf>,
    journal: Option<Journal>,
    journal_dirty: bool,
    /// What the journal of a previous run (a crash) recorded of processes still
    /// running, by pid: the masks their tasks had before pinnerd first touched them,
    /// taken as their originals when they are managed again (see [`Manager::recover`]),
    /// and kept in the journal meanwhile.
    recovered: BTreeMap<i32, RestoreEntry>,
    counters: Counters,
    /// pinnerd's own pid: never managed (see `protect`).
    own_pid: i32,
    /// Processes a rule matched that `protect` kept out (a handful at most: pinnerd,
    /// PID 1, the bus daemon).
    protected: BTreeMap<i32, protect::ProtectedMatch>,
    /// Processes a rule matched whose affinity pinnerd may not read (EPERM: another
    /// user's task without CAP_SYS_NICE, or a security module), by pid, with their start
    /// time: not managed, counted and warned about once each (see `tracking`).
    denied: BTreeMap<i32, u64>,
    /// Kernel threads a rule's name fits, by pid, with their start time: counted once
    /// each (see `tracking`).
    kernel_seen: BTreeMap<i32, u64>,
    /// Managed processes whose threads wait for a plan made for what was seen (a new
    /// cpuset, memory to weigh, a cpuset that changed): none of their threads is pinned
    /// before [`Input::Replanned`].
    awaiting: BTreeSet<i32>,
    /// A managed process's cpuset changed: the next [`Input::Replanned`] applies every
    /// managed thread again, whether or not the plan moved.
    reapply: bool,
    /// Command lines known and asked for (see `cmdlines`): never read here.
    cmdlines: cmdlines::Cmdlines,
    /// Processes whose memory is being read (pid → start time): their threads wait.
    memory_pending: BTreeMap<i32, u64>,
    /// Memory reads asked for and not yet taken by the loop.
    memory_asked: Vec<MemoryWanted>,
    /// The slots the plan in force holds: what the manager reports never falls below
    /// them until [`Manager::release_slots`], so a thread that leaves its slot (renamed
    /// away, exited) and one that takes it again make no new plan each.
    kept: crate::plan::Demand,
    /// Per rule, every CPU its holds were asked to set on its units (see `cpusets`): a
    /// cpuset read inside them is the hold's doing, never planned in.
    holding: BTreeMap<String, CpuSet>,
    /// Threads beyond their entry's slots, counted per process and rule for the log.
    overflows: crate::repeats::Repeats<(i32, String)>,
    /// Threads whose masks someone else changed, counted per process for the log.
    foreign: crate::repeats::Repeats<i32>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("managed", &self.managed.len())
            .field("online", &self.plan.cpus().online)
            .finish()
    }
}

impl Manager {
    /// A manager with no rules, on the online CPUs of `cpus`.
    pub fn new(
        ops: Arc<dyn AffinityOps + Send + Sync>,
        procs: Arc<dyn ProcSource + Send + Sync>,
        cpus: Cpus,
        config: ManagerConfig,
    ) -> Manager {
        Manager {
            ops,
            procs,
            config,
            plan: Plan::empty(cpus),
            managed: BTreeMap::new(),
            candidate_cache: HashMap::new(),
            containers: Vec::new(),
            container_tasks: None,
            journal: None,
            journal_dirty: false,
            recovered: BTreeMap::new(),
            counters: Counters::default(),
            own_pid: std::process::id() as i32,
            protected: BTreeMap::new(),
            denied: BTreeMap::new(),
            kernel_seen: BTreeMap::new(),
            awaiting: BTreeSet::new(),
            reapply: false,
            cmdlines: cmdlines::Cmdlines::default(),
            overflows: crate::repeats::Repeats::default(),
            foreign: crate::repeats::Repeats::default(),
            kept: crate::plan::Demand::default(),
            memory_pending: BTreeMap::new(),
            memory_asked: Vec::new(),
            holding: BTreeMap::new(),
        }
    }

    /// The manager as the daemon runs it: configured by `settings`, on `online` CPUs
    /// with the settings' housekeeping CPUs kept free. `plan --live` builds it the same
    /// way over affinity calls that only record.
    pub fn from_settings(
        ops: Arc<dyn AffinityOps + Send + Sync>,
        procs: Arc<dyn ProcSource + Send + Sync>,
        online: CpuSet,
        settings: &crate::settings::Settings,
    ) -> Manager {
        Manager::new(
            ops,
            procs,
            Cpus::from_settings(online, settings),
            ManagerConfig::from_settings(settings),
        )
    }

    /// Keeps the restore journal at `journal` (under the runtime directory).
    pub fn with_journal(mut self, journal: Journal) -> Manager {
        self.journal = Some(journal);
        self
    }

    /// Restores what a previous instance left in the journal (after a crash). Call once,
    /// before the first rescan. A corrupt journal is moved aside first
    /// ([`RestoreError::SetAside`]), never overwritten. The masks from before pinnerd
    /// first touched the processes still running are kept (in the journal too): the
    /// restore may have been narrowed by a unit's cpuset still held, and what a task
    /// reads then is not what it is to get back when it is let go.
    pub fn recover(&mut self, root: &SysRoot) -> Result<RestoreReport, RestoreError> {
        let Some(journal) = self.journal.clone() else {
            return Ok(RestoreReport::default());
        };
        let entries = journal.load_or_set_aside()?;
        let mut report = restore::restore_entries(self.ops.as_ref(), root, &entries, self.online());
        self.recovered = std::mem::take(&mut report.alive)
            .into_iter()
            .map(|e| (e.pid, e))
            .collect();
        if !entries.is_empty() {
            tracing::info!(
                restored = report.restored,
                restored_sched = report.restored_sched,
                left_alone = report.left_alone,
                gone = report.gone,
                "restored masks left by a previous run: {} given back, {} scheduling classes \
                 given back, {} left alone (changed since), {} processes gone",
                report.restored,
                report.restored_sched,
                report.left_alone,
                report.gone
            );
        }
        journal.save(&self.journal_entries())?;
        Ok(report)
    }

    /// Logs the counts of repeated warnings due at `now` (threads beyond their slots,
    /// masks changed by someone else): one line per process (and rule) each
    /// `repeats::REPEATS_EVERY`.
    pub fn log_repeats(&mut self, now: std::time::Instant) {
        for ((pid, rule), more) in self.overflows.due(now) {
            tracing::warn!(
                pid, rule = %rule, more,
                "{more} more threads of pid {pid} than slots of rule {rule}: each shares the CPUs of a slot"
            );
        }
        for (pid, more) in self.foreign.due(now) {
            tracing::warn!(
                pid,
                more,
                "{more} more threads of pid {pid} had their managed affinity changed by someone else"
            );
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn rules(&self) -> &RuleSet {
        self.plan.rules()
    }

    pub fn online(&self) -> &CpuSet {
        &self.plan.cpus().online
    }

    /// The plan being applied.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A full snapshot of process `pid`, with its command line when one is known (see
    /// `cmdlines`): reading one takes the process's memory-map lock, and the loop must
    /// not wait on a process whose map is busy (its pages being moved, say).
    fn process(&self, pid: i32) -> Option<ProcessSnapshot> {
        let mut snap = self.procs.snapshot(pid)?;
        if let Some(args) = self.cmdlines.known(pid, snap.start_time) {
            snap.info.cmdline = args.to_vec();
        }
        Some(snap)
    }

    /// Whether `snap` waits for its command line: a rule's `cmdline` key can decide it
    /// and it is not known. The read is asked for (once per process at a time; see
    /// [`Manager::take_cmdline_reads`]).
    fn awaits_cmdline(&mut self, snap: &ProcessSnapshot, parent: Option<i32>) -> bool {
        let pid = snap.pid();
        if !self.plan.rules().cmdline_matters(&snap.info.comm)
            || self.cmdlines.known(pid, snap.start_time).is_some()
        {
            return false;
        }
        self.cmdlines.ask(pid, snap.start_time, parent);
        true
    }

    /// The command lines the manager waits for, asked since the last call: the daemon
    /// reads them off its loop and hands each back as [`Input::Cmdline`].
    pub fn take_cmdline_reads(&mut self) -> Vec<cmdlines::CmdlineWanted> {
        self.cmdlines.take_asked()
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
    pub fn handle(&mut self, event: Input) -> Vec<Change> {
        if !matches!(
            event,
            Input::Replanned(_) | Input::Cmdline(_) | Input::Memory { .. }
        ) {
            self.counters.events += 1;
        }
        let mut out = Vec::new();
        match event {
            Input::Proc(msg) => self.on_proc(msg, &mut out),
            Input::Rescan => self.rescan(&mut out),
            Input::RulesChanged(plan) => {
                self.set_plan(plan);
                self.candidate_cache.clear();
                self.cmdlines.forget_known();
                self.reevaluate_managed(&mut out);
                self.rescan(&mut out);
            }
            Input::PlanChanged(plan) => {
                if plan.cpus().online != *self.online() {
                    tracing::info!(online = %plan.cpus().online, "CPUs changed: CPUs {} online; re-applying", plan.cpus().online);
                }
                self.set_plan(plan);
                self.reevaluate_managed(&mut out);
            }
            Input::Replanned(plan) => self.replanned(plan, &mut out),
            Input::Cmdline(read) => self.cmdline_read(read, &mut out),
            Input::Memory {
                pid,
                start_time,
                bytes,
            } => self.memory_read(pid, start_time, bytes),
        }
        out
    }

    /// Takes a new plan, saying which units are not applied and why.
    fn set_plan(&mut self, plan: Plan) {
        for u in plan.units() {
            match &u.state {
                PlanState::Lost { to, cpus } => tracing::info!(
                    rule = %u.rule, lost_to = %to, cpus = %cpus,
                    "rule {}{} lost CPUs {cpus} to rule {to}, which takes precedence: \
                     not applied",
                    u.name(), in_cpuset(u)
                ),
                PlanState::Unplaceable { reason } => tracing::info!(
                    rule = %u.rule, %reason,
                    "rule {}{} could not be placed: {reason}",
                    u.name(), in_cpuset(u)
                ),
                _ => {}
            }
        }
        self.kept = plan.demand().clone();
        self.plan = plan;
    }

    /// The plan of a rule's unit.
    pub fn plan_of(&self, rule: &str, thread_entry: Option<usize>) -> Option<&PlanState> {
        self.plan.get(rule, thread_entry)
    }

    /// The plan of a rule's unit for managed process `pid`: in its cpuset.
    pub fn plan_for(
        &self,
        pid: i32,
        rule: &str,
        thread_entry: Option<usize>,
    ) -> Option<&PlanState> {
        self.plan
            .get_in(rule, thread_entry, self.cpuset_key_of(pid).as_ref())
    }
}

/// ` (in cpuset 4-7)` for a unit planned in a cgroup cpuset; empty on all CPUs.
fn in_cpuset(u: &crate::plan::UnitPlan) -> String {
    match &u.cpuset {
        Some(c) => format!(" (in cpuset {c})"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
