//! The daemon's state and its synchronous handler.
//!
//! [`State::handle`] takes one [`Event`] and leaves [`Action`]s for the shell to carry
//! out (emit a signal, start a measurement job, tell systemd something, exit). Commands
//! are answered by [`State::call`], one typed answer per call, which unit tests call
//! directly.
//!
//! The state is a handful of parts, each owning what its name says; the loop owns the
//! state, the state owns the parts and hands values between them. A part's file imports
//! nothing of the state; what the state does with its parts is here and in the
//! `impl State` files named for the job: `commands.rs` (bus calls), `pinning.rs`
//! (run-time pins), `measuring.rs` and `completing.rs` (measurement jobs),
//! `sched_ext.rs` (a scheduler starting or stopping), `syncing.rs` (what follows a
//! manager change). Those files call the parts' methods (`self.measurement.start_fill()`,
//! `self.sharing.sync_irqs(..)`), handing each what it needs from the others; a part's
//! fields are its own, each part type declared in the file that implements it.
//!
//! ```text
//!   State ─┬─ loaded       settings and rules in force (reloads)                 (loaded.rs)
//!          ├─ machine      store, fingerprint, topology, matrix in use, domains  (machine.rs)
//!          ├─ managed      the manager, its plan's chooser, the affinity and
//!          │               process operations it acts through                    (managed.rs)
//!          ├─ measurement  timetable, what a job stays off, completion           (measurement.rs)
//!          ├─ timers       rescan, journal, hotplug recheck, fingerprint,
//!          │               watchdog                                              (timers.rs)
//!          ├─ sharing      IRQs moved, units held, sched_ext, memory following   (sharing.rs;
//!          │               irqs.rs, holds.rs, following.rs)
//!          └─ metrics, health, actions
//!   Event (event.rs) ─► State::handle ─► Action (action.rs) ─► the shell
//!   Call  (crate::api) ─► State::call ─► its own answer, now or after a read  (memory.rs)
//! ```
//!
//! Measurement lifecycle:
//! - at start, the stored matrix is used if its fingerprint matches; otherwise (none,
//!   corrupt, foreign: the store moves bad files aside) a full measurement starts;
//! - a changed fingerprint (BIOS, microcode, CPUs present) starts a full measurement;
//! - a CPU going offline or coming back (hotplug, SMT toggle) keeps the stored cells:
//!   only pairs the store has never measured are measured (`matrix::keep`);
//! - `Remeasure` starts one, or joins the one running (calls coalesce);
//! - periodically, when idle, a drift probe measures a few pairs, and only drift found
//!   there starts a full measurement; a full one also runs every `measure.interval`;
//! - until a matrix exists, placement uses the sysfs topology alone, and so it does on
//!   an unstable matrix (its repeat check failed, or drift was found within two probe
//!   periods of its measurement: the host moves vCPUs; `measure::repeat`);
//! - every measurement stays off the CPUs others hold (exclusive and latency-critical
//!   rules, `measure.never-cpus`, `nohz_full`) and keeps their earlier cells, saying so
//!   (`measure::around`; `state/measuring.rs`).
//!
//! Interrupts: rules with `irqs = "away"` get IRQs moved off their CPUs while they hold
//! them, journalled in `irqs.json` (`irq`; `state/irqs.rs`).
//!
//! Knobs: the CPUs `idle-limit-us` rules hold get their resume-latency limit, and
//! unbound workqueues and kernel threads keep off the CPUs owned `exclusive` rules
//! hold, journalled in `knobs.json` (`knobs`; `state/knobs.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::affinity::restore::Journal;
use crate::api::{Phase, Signal, Snapshot};
use crate::manager::{self, Manager};
use crate::matrix::store::MatrixStore;
use crate::matrix::LatencyMatrix;
use crate::metrics::{self, MetricsSnapshot};
use crate::plan::{Plan, Planned};
use crate::rules;
use crate::settings::Settings;
use crate::sysroot::SysRoot;

use super::schedule::{Due, Timing};
use event::{Event, ReloadCause};
use loaded::Loaded;
use managed::log_change;
use timers::Timers;

pub use action::Action;

mod action;
mod commands;
mod completing;
pub mod containers;
pub mod event;
mod following;
mod holds;
mod irqs;
mod knobs;
mod loaded;
mod machine;
pub mod managed;
mod measurement;
mod measuring;
pub mod memory;
mod pinning;
mod sched_ext;
mod shaping;
mod sharing;
mod syncing;
mod timers;

/// Where the daemon reads and writes.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings file; a missing file means the defaults.
    pub settings: PathBuf,
    /// `--rules` directories; `None` = the settings' `rule-dirs`.
    pub rule_dirs: Option<Vec<PathBuf>>,
    pub state_dir: PathBuf,
    pub runtime_dir: PathBuf,
    pub sysroot: SysRoot,
    /// The sysroot is another machine's (`daemon --machine`, for tests and benchmarks):
    /// its CPUs are not this machine's, so nothing is pinned, held, written or
    /// measured; the daemon only reads, plans and answers.
    pub observe_only: bool,
}

/// How long the restore journal may lag process events. A daemon that dies within it
/// leaves a task pinned in that window out of the journal: the next start re-pins it by
/// its rule, but cannot give back its original mask. Rule changes, PinProcess, rescans
/// and stopping write it at once.
pub const JOURNAL_DELAY: Duration = Duration::from_millis(50);

/// After a failed journal write, the next try comes this much later (and again, until
/// one succeeds), not only at the next change.
pub const JOURNAL_RETRY: Duration = Duration::from_secs(1);

/// How long after a hotplug the processes' cgroup cpusets are read again. The kernel
/// updates a cgroup's effective CPUs from a workqueue after the CPU event, so a CPU
/// that came back may be missing from what was read at the event, and its pinned
/// threads would wait for the periodic rescan.
pub const HOTPLUG_RECHECK: Duration = Duration::from_secs(1);

pub use machine::{MOVE_FLOOR_NS, MOVE_GAIN};

/// How long slots of thread entries that no live thread holds any more stay held, at
/// least: the loop lets them go ([`Manager::release_slots`]) once per this at most. A
/// thread renamed in and out of an entry (or made and ended) as fast as its owner likes
/// then causes two plans per this at most, not one per rename: its slot is kept, and
/// taken again.
pub const SLOTS_KEPT: Duration = Duration::from_secs(5);

/// All daemon state. Owned by one thread; each field is one part, owning what its name
/// says.
pub struct State {
    cfg: Config,
    /// The settings and rules in force.
    loaded: Loaded,
    /// The machine as last read, and the matrix in use (`state/machine.rs`).
    machine: machine::Machine,
    /// The manager, the chooser of its plan and the operations it acts through
    /// (`state/managed.rs`).
    managed: managed::Managed,
    /// Measurement jobs: their timetable, what they stay off, completion
    /// (`state/measurement.rs`; started and finished by `state/measuring.rs`).
    measurement: measurement::Measurement,
    /// When periodic work is due next.
    timers: Timers,
    /// What the daemon changes beside thread masks: IRQs, held units, sched_ext, memory
    /// (`state/sharing.rs`).
    sharing: sharing::Sharing,
    /// Containers the runtime told about over NRI, and the runtime (`state/containers.rs`).
    containers: containers::Containers,
    /// The event-to-pin histogram and the textfile's schedule.
    metrics: metrics::Kept,
    /// Whether the daemon has started, and why proc events are down.
    health: Health,
    actions: Vec<Action>,
}

/// Whether the daemon has started, and why the proc connector is not available
/// (rescans only), if it is not.
#[derive(Debug, Default)]
struct Health {
    started: bool,
    watch_down: Option<String>,
}

impl State {
    /// A state that has read nothing yet; [`State::start`] reads the machine. Threads
    /// are pinned through the real kernel, processes read from the configured sysroot.
    pub fn new(cfg: Config, settings: Settings, timing: Timing, now: Instant) -> State {
        let ops = if cfg.observe_only {
            managed::Ops::observing(&cfg.sysroot)
        } else {
            managed::Ops::system(&cfg.sysroot)
        };
        State::with_ops(cfg, settings, timing, now, ops)
    }

    /// [`State::new`] acting through `ops` (fakes in tests).
    pub fn with_ops(
        cfg: Config,
        settings: Settings,
        timing: Timing,
        now: Instant,
        ops: managed::Ops,
    ) -> State {
        State {
            cfg,
            loaded: Loaded::new(settings),
            machine: machine::Machine::default(),
            managed: managed::Managed::new(ops),
            timers: Timers::new(&timing, now),
            measurement: measurement::Measurement::new(timing, now),
            sharing: sharing::Sharing::default(),
            containers: containers::Containers::default(),
            metrics: metrics::Kept::default(),
            health: Health::default(),
            actions: Vec::new(),
        }
    }

    /// Reads the machine, the stored matrix and the rules; starts a measurement when no
    /// stored matrix fits.
    pub fn start(&mut self) -> Result<(), crate::matrix::store::StoreError> {
        self.machine.store = Some(MatrixStore::open(&self.cfg.state_dir)?);
        if let Some(words) = self.observing_words() {
            tracing::warn!("{words}");
        }
        self.machine.read(&self.cfg.sysroot);
        self.check_sched_ext();
        let missing = self.machine.load_stored_matrix();
        self.load_rules();
        self.machine.refresh_domains();
        self.start_manager();
        if self.machine.current.is_none() && !self.start_fill(missing) {
            self.start_full();
        }
        self.timers.next_rescan = self.loaded.rescan_every().map(|d| Instant::now() + d);
        self.health.started = true;
        self.status();
        Ok(())
    }

    /// Creates the manager, restores what a crashed predecessor left (from the journal
    /// in the runtime directory), then applies the rules to every running process.
    fn start_manager(&mut self) {
        let root = self.cfg.sysroot.clone();
        let mut m = self
            .managed
            .new_manager(self.machine.online(), &self.loaded.settings)
            .with_journal(Journal::new(&self.cfg.runtime_dir));
        // What containerd leaves on disk, on the live system only (not a fixture tree).
        if self.cfg.sysroot.proc == std::path::Path::new(crate::sysroot::LIVE_PROC) {
            m.set_container_tasks(Some(crate::nri::ondisk::CONTAINERD_TASKS.into()));
        }
        if self.cfg.observe_only {
            // Nothing of the machine observed was ever changed by this daemon.
            let planned = self.new_plan();
            let changes = self.managed.install(m, planned);
            self.after_manager(changes);
            return;
        }
        irqs::IrqsAway::recover(&self.cfg.sysroot, &self.cfg.runtime_dir);
        knobs::KnobsKept::recover(
            &self.cfg.sysroot,
            self.managed.affinity().as_ref(),
            &self.cfg.runtime_dir,
        );
        match m.recover(&root) {
            Ok(r) if r.restored + r.left_alone + r.gone + r.failed.len() > 0 => tracing::info!(
                restored = r.restored,
                left_alone = r.left_alone,
                gone = r.gone,
                failed = r.failed.len(),
                "masks left by a previous run: {} given back, {} left alone (changed since), \
                 {} processes gone, {} failed",
                r.restored,
                r.left_alone,
                r.gone,
                r.failed.len()
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "restore journal not used: {e}"),
        }
        // Holds a previous run left (its record is the holder's to recover): the cpusets
        // they made are theirs, not the processes' own, from the first rescan on.
        match crate::hold::Journal::new(&self.cfg.runtime_dir).load() {
            Ok(holds) => {
                for h in holds {
                    m.note_hold(&h.rule, &h.cpus);
                }
            }
            Err(e) => tracing::debug!(error = %e, "hold journal not read for planning: {e}"),
        }
        let planned = self.new_plan();
        let changes = self.managed.install(m, planned);
        self.after_manager(changes);
    }

    /// When the loop must handle a `Tick` next at the latest, besides its once-a-second
    /// clock: a deferred journal write.
    pub fn deadline(&self) -> Option<Instant> {
        self.timers.deadline()
    }

    /// The machine's facts and the rules' devices (and `extra`), for shaping requests.
    fn shaping_inputs(
        &self,
        extra: Option<&str>,
    ) -> (Option<crate::shape::Facts>, crate::shape::Devices) {
        shaping::inputs(
            self.machine.topology.as_ref(),
            &self.loaded.rules.rules,
            &self.cfg.sysroot,
            extra,
        )
    }

    /// The plan of the rules in force on the current CPUs, latency domains and machine
    /// facts, memory weighed and the `[sched-ext]` policy applied: made by
    /// [`crate::rules_plan::make`], as `plan --live` makes it.
    fn new_plan(&mut self) -> Planned {
        if let Err(e) = self.machine.domains() {
            tracing::debug!(error = %e, "planning without latency domains");
        }
        let (_, devices) = self.shaping_inputs(None);
        let planned = crate::rules_plan::make(
            &self.loaded.rules.rules,
            &self.loaded.settings,
            crate::rules_plan::MachineRead {
                topology: self.machine.topology.as_ref(),
                online: self.machine.online(),
                domains: self.machine.domains.clone(),
                devices,
                sched_ext: self.sharing.sched_ext.now.clone(),
            },
        );
        self.sharing.sched_ext.say_step(&planned.sched_ext);
        planned
    }

    /// Hands a new plan down (`make`: rules or CPUs changed); its chooser is kept for
    /// what the manager reports next.
    fn hand_down(&mut self, planned: Planned, make: fn(Plan) -> manager::Input) {
        if let Some(changes) = self.managed.hand_down(planned, make) {
            self.after_manager(changes);
        }
    }

    /// Where the NRI plugin takes the containers' updates from.
    pub fn connect_nri(
        &mut self,
        updates: tokio::sync::mpsc::Sender<Vec<crate::nri::link::Update>>,
    ) {
        self.containers.connect(updates);
    }

    /// One question or piece of news from the NRI plugin, answered from the plan in force.
    fn nri(&mut self, ask: crate::nri::link::Ask) {
        let plan = self.managed.manager.as_ref().map(|m| m.plan());
        self.containers
            .hear(ask, plan, self.machine.topology.as_ref());
        if let Some(m) = &mut self.managed.manager {
            m.set_containers(self.containers.seen());
        }
        if self.containers.take_rescan() {
            self.manager_event(manager::Input::Rescan);
        }
    }

    /// One input to the manager, and the plans made again for what it then reports.
    fn manager_event(&mut self, ev: manager::Input) {
        if let Some(changes) = self.managed.input(ev) {
            self.after_manager(changes);
        }
    }

    /// The actions left for the shell, oldest first; the command lines and memory the
    /// manager waits for last.
    pub fn take_actions(&mut self) -> Vec<Action> {
        if let Some(m) = &mut self.managed.manager {
            let wanted = m.take_cmdline_reads();
            if !wanted.is_empty() {
                self.actions.push(Action::ReadCmdlines(wanted));
            }
            for w in m.take_memory_reads() {
                let read = memory::MemoryRead::first_contact(&self.cfg.sysroot, w);
                self.actions.push(Action::ReadMemory(Box::new(read)));
            }
        }
        std::mem::take(&mut self.actions)
    }

    /// What readers see now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            version: env!("CARGO_PKG_VERSION").to_string(),
            state: self.phase(),
            measured_at_us: self.machine.measured_at_us(),
            fingerprint: self.machine.fingerprint_hex().unwrap_or_default(),
            cpu_count: self.machine.online().len() as u32,
            rule_count: self.loaded.rules.rules.len() as u32,
            managed_processes: self
                .managed
                .manager
                .as_ref()
                .map_or(0, |m| m.managed_processes() as u32),
            managed_threads: self
                .managed
                .manager
                .as_ref()
                .map_or(0, |m| m.managed_threads() as u32),
            rule_errors: self.rule_errors(),
            sched_ext: self.sharing.sched_ext.now.clone(),
            holds: self.sharing.holds.summary().unwrap_or_default(),
            holds_view: self.sharing.holds.view(),
            nri: self.containers.runtime.clone(),
            containers: self.containers.views(),
            state_reason: self.state_reason(),
            latency_off: self.machine.latency_off(),
            matrix_measured: self.machine.pairs_measured(),
        }
    }

    fn rule_errors(&self) -> Vec<String> {
        self.loaded.rule_errors()
    }

    /// Why the state is degraded, and that this daemon only observes (`--machine`).
    fn state_reason(&self) -> String {
        let observing = self.observing_words();
        match (self.degraded_reason(), observing) {
            (Some(why), Some(o)) => format!("{why}; {o}"),
            (Some(why), None) => why,
            (None, Some(o)) => o,
            (None, None) => String::new(),
        }
    }

    /// What a daemon started with `--machine` says in its status and log.
    fn observing_words(&self) -> Option<String> {
        self.cfg.observe_only.then(|| {
            format!(
                "observe only: the CPUs are those of the machine under {} (--machine), not this one's; nothing is pinned, held, written or measured",
                self.cfg.sysroot.sys.parent().unwrap_or(&self.cfg.sysroot.sys).display()
            )
        })
    }

    /// Why the daemon is degraded, and what to do, in words (`None` when it is not).
    fn degraded_reason(&self) -> Option<String> {
        let mut why = Vec::new();
        if let (None, Some(failed)) = (&self.machine.current, &self.measurement.last_failure) {
            why.push(format!(
                "no latency matrix: the measurement failed ({failed}); placement uses the sysfs topology until one succeeds — `pinnerd remeasure --wait` tries again and says why it fails"
            ));
        }
        if let Some(down) = &self.health.watch_down {
            why.push(format!(
                "no process events ({down}): new processes are found only by rescans, late — the proc connector needs the initial network namespace and, on older kernels, CAP_NET_ADMIN (the shipped unit runs so); restart the daemon once it has them"
            ));
        }
        (!why.is_empty() && self.phase() == Phase::Degraded).then(|| why.join("; "))
    }

    fn phase(&self) -> Phase {
        if !self.health.started {
            Phase::Starting
        } else if self.measurement.measuring() {
            Phase::Measuring
        } else if (self.machine.current.is_none() && self.measurement.last_failure.is_some())
            || self.health.watch_down.is_some()
        {
            Phase::Degraded
        } else {
            Phase::Ready
        }
    }

    /// The matrix in use, if any (placement falls back to sysfs without one).
    /// The root the daemon reads `/proc` and `/sys` under.
    fn root(&self) -> &SysRoot {
        &self.cfg.sysroot
    }

    pub fn matrix(&self) -> Option<&LatencyMatrix> {
        self.machine.current.as_ref()
    }

    /// The rules in force.
    pub fn rules(&self) -> &rules::RuleSet {
        &self.loaded.rules.rules
    }

    /// Handles one event.
    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Command(call) => self.call(call),
            Event::Nri(ask) => self.nri(ask),
            Event::Reload(cause) => {
                self.actions.push(Action::Reloading);
                self.reload(cause);
                self.actions.push(Action::Ready);
            }
            Event::Terminate => {
                tracing::info!("terminating: restoring masks");
                self.actions
                    .push(Action::Status("stopping: restoring masks".into()));
                // Threads made since the last event we read inherited a pinned mask from
                // their creator: a last look finds them, so that they are given back too.
                self.manager_event(manager::Input::Rescan);
                if let Some(m) = &mut self.managed.manager {
                    match m.shutdown() {
                        Ok(changes) => {
                            for c in &changes {
                                log_change(c);
                            }
                            tracing::info!(
                                processes = changes.len(),
                                "masks restored: {} processes released",
                                changes.len()
                            );
                        }
                        Err(e) => tracing::warn!(error = %e, "restoring masks failed: {e}"),
                    }
                }
                self.sharing
                    .irqs
                    .release(&self.cfg.sysroot, &self.cfg.runtime_dir);
                self.sharing.knobs.release(
                    &self.cfg.sysroot,
                    self.managed.affinity().as_ref(),
                    &self.cfg.runtime_dir,
                );
                self.actions.push(Action::Exit);
            }
            Event::Tick(now) => self.tick(now),
            Event::Measured(outcome) => self.measured(*outcome),
            Event::Followed(f) => self.followed(*f),
            Event::Held(reports) => self.held(reports),
            Event::HoldNotes(notes) => self.sharing.holds.noted(notes),
            Event::Cmdline(read) => {
                self.manager_event(manager::Input::Cmdline(read));
            }
            Event::Memory((pid, start_time, bytes)) => {
                self.manager_event(manager::Input::Memory {
                    pid,
                    start_time,
                    bytes,
                });
            }
            Event::Proc(msgs) => {
                let read_at = Instant::now();
                let Some(changes) = self.managed.proc_batch(msgs) else {
                    return;
                };
                self.metrics.pins_after(read_at, &changes);
                for c in &changes {
                    log_change(c);
                }
                if !changes.is_empty() {
                    self.sync_irqs(false);
                    self.sync_holds();
                    self.sync_knobs(false);
                }
                // Under a storm every batch changes the journal: it is written once per
                // JOURNAL_DELAY at most (by `tick`), not once per batch.
                if self
                    .managed
                    .manager
                    .as_ref()
                    .is_some_and(|m| m.journal_dirty())
                {
                    self.timers
                        .journal_due
                        .get_or_insert_with(|| Instant::now() + JOURNAL_DELAY);
                }
            }
            Event::Hotplug => self.hotplug(Instant::now()),
            Event::Watch(Ok(())) => {
                self.health.watch_down = None;
                // Events between the first rescan and the subscription are lost: look again.
                self.manager_event(manager::Input::Rescan);
                tracing::info!("proc connector subscribed");
                self.status();
            }
            Event::Watch(Err(why)) => {
                tracing::warn!(error = %why, "no proc events ({why}): new processes are found by rescans only");
                self.health.watch_down = Some(why);
                if self.timers.next_rescan.is_none() {
                    // Without events, rescans are the only way; never let them be off.
                    self.timers.next_rescan = Some(Instant::now() + Duration::from_secs(60));
                }
                self.status();
            }
        }
    }

    fn load_rules(&mut self) {
        let dirs = self.loaded.rule_dirs(self.cfg.rule_dirs.as_ref());
        self.loaded.load_rules(&dirs);
    }

    /// Re-reads the settings (keeping the old ones when the file is bad) and the rules
    /// (keeping each bad file's last good rules).
    fn reload(&mut self, cause: ReloadCause) {
        tracing::info!(%cause, "reloading settings and rules: {cause}");
        if let Some(s) = self.loaded.reload_settings(&self.cfg.settings) {
            self.measurement.timing =
                Timing::from_settings(s, self.measurement.timing.watchdog_every);
        }
        self.check_sched_ext();
        self.load_rules();
        let planned = self.new_plan();
        self.hand_down(planned, manager::Input::RulesChanged);
        self.actions.push(Action::Emit(Signal::RulesReloaded {
            rules: self.loaded.rules.rules.len() as u32,
            errors: self.rule_errors(),
        }));
        self.status();
    }

    /// The periodic work a tick at `now` does, in words, for the loop's slow-step
    /// warning (`daemon::steps`): what can take long, not every check.
    pub fn due_at_tick(&self, now: Instant) -> Vec<&'static str> {
        self.timers.due_at(now)
    }

    fn tick(&mut self, now: Instant) {
        if self.timers.journal_due.is_some_and(|due| now >= due) {
            self.flush_journal();
        }
        if let Some(m) = &mut self.managed.manager {
            m.log_repeats(now);
        }
        self.release_slots(now);
        if self.timers.hotplug_recheck.is_some_and(|due| now >= due) {
            self.timers.hotplug_recheck = None;
            self.manager_event(manager::Input::Rescan);
        }
        self.sync_memory(now);
        if let (Some(every), Some(due)) = (
            self.measurement.timing.watchdog_every,
            self.timers.next_watchdog,
        ) {
            if now >= due {
                self.actions.push(Action::Watchdog);
                self.timers.next_watchdog = Some(now + every);
            }
        }
        if now >= self.timers.next_fingerprint {
            self.timers.next_fingerprint = now + self.measurement.timing.fingerprint_every;
            // An irqbalance (re)started since is told what to keep off; kernel threads
            // started since keep off the CPUs held exclusive.
            self.sync_irqs(true);
            self.sync_knobs(true);
            let (online, usable) = (self.machine.online(), self.machine.usable());
            let fp_changed = self.machine.read(&self.cfg.sysroot);
            if fp_changed || self.machine.usable() != usable {
                self.fingerprint_changed(now);
            }
            if self.machine.online() != online {
                // A hotplug the uevent socket did not report.
                let planned = self.new_plan();
                self.hand_down(planned, manager::Input::PlanChanged);
                self.timers.hotplug_recheck = Some(now + HOTPLUG_RECHECK);
            }
        }
        if let Some(dir) = self
            .metrics
            .textfile_due(now, &self.loaded.settings.metrics)
        {
            metrics::textfile::write_logged(&dir, &self.metrics_text());
        }
        if let Some(due) = self.timers.next_rescan {
            if now >= due {
                let every = self
                    .loaded
                    .rescan_every()
                    .unwrap_or(Duration::from_secs(60));
                self.timers.next_rescan = Some(now + every);
                // sched_ext is polled on the rescan cadence (no event says it changed).
                self.check_sched_ext();
                self.manager_event(manager::Input::Rescan);
            }
        }
        match self.measurement.schedule.due(now, &self.measurement.timing) {
            Some(Due::Full) => {
                tracing::info!("periodic full measurement");
                self.start_full();
            }
            Some(Due::Drift) => self.start_drift_probe(),
            None => {}
        }
        self.complete_due(now);
    }

    /// CPUs went online or offline: re-read the machine, re-plan, re-apply, and read the
    /// processes' cgroup cpusets again [`HOTPLUG_RECHECK`] later. The matrix
    /// follows the usable CPUs from the store's cells (see `matrix::keep`).
    pub(super) fn hotplug(&mut self, now: Instant) {
        let usable = self.machine.usable();
        let fp_changed = self.machine.read(&self.cfg.sysroot);
        // The matrix (and so the domains) for the new CPUs first, then the re-plan.
        if fp_changed || self.machine.usable() != usable {
            self.fingerprint_changed(now);
        } else {
            self.machine.refresh_domains();
        }
        tracing::info!(
            online = %self.machine.online(),
            "CPU hotplug: CPUs {} online; planning again",
            self.machine.online()
        );
        let planned = self.new_plan();
        self.hand_down(planned, manager::Input::PlanChanged);
        self.timers.hotplug_recheck = Some(now + HOTPLUG_RECHECK);
        self.status();
    }

    /// Lets the plan give up the slots no live thread holds, once per [`SLOTS_KEPT`] at
    /// most.
    fn release_slots(&mut self, now: Instant) {
        if now < self.timers.next_slot_release {
            return;
        }
        let Some(m) = &mut self.managed.manager else {
            return;
        };
        if !m.release_slots() {
            return;
        }
        self.timers.next_slot_release = now + SLOTS_KEPT;
        let changes = self.managed.settle();
        self.after_manager(changes);
    }

    /// What `pinnerd metrics` prints and the textfile holds.
    fn metrics_text(&mut self) -> String {
        let _ = self.machine.domains(); // the levels; without domains the rest still shows
        let (d, m) = (self.machine.domains.as_ref(), self.machine.current.as_ref());
        let c = self.managed.manager.as_ref().map(Manager::counters);
        let mut snapshot = MetricsSnapshot::of_daemon(self.snapshot(), d, m, c, &self.metrics);
        snapshot.counters.nri_adjusted = self.containers.adjusted;
        snapshot.counters.nri_skipped = self.containers.skipped;
        metrics::render(&snapshot)
    }

    fn status(&mut self) {
        let s = self.snapshot();
        let matrix = self.machine.matrix_words();
        let mut matrix = format!("{matrix}{}", self.completion_words());
        if let Some(h) = self.sharing.holds.summary() {
            matrix.push_str(&format!(", {h}"));
        }
        let off = match s.latency_off.as_str() {
            "" => String::new(),
            line => format!("{line}, "),
        };
        let off = match self.cfg.observe_only {
            true => format!("observe only, {off}"),
            false => off,
        };
        self.actions.push(Action::Status(format!(
            "{}: {off}{}, {}, {} managed, {matrix}",
            s.state.as_str(),
            crate::words::count(s.rule_count as usize, "rule"),
            crate::words::count(s.rule_errors.len(), "error"),
            crate::words::count(s.managed_processes as usize, "process")
        )));
    }
}

#[cfg(test)]
mod tests;
