//! The shell around [`State`]: takes the bus name, starts the sources, runs the loop on
//! the main thread and carries out the loop's [`Action`]s.
//!
//! Order at start: signal handlers (so an early SIGHUP cannot kill us), the bus name
//! (refused, not queued, when taken — before touching any process), the rules and the
//! stored matrix, then `READY=1`, then the kernel's process and hotplug events.
//!
//! Threads: the loop runs on the process's main thread, which is the one a realtime
//! class from the unit (`CPUSchedulingPolicy=`, with `CPUSchedulingResetOnFork=yes`)
//! applies to; the runtime's workers (D-Bus, signals, inotify), measurement threads and
//! the reader threads (`readers`: command lines and `numa_maps`, which can wait on a
//! process's locks) are created by it and so start in the normal class, whatever the
//! unit gives the loop.
//!
//! Nothing on the loop thread sleeps or waits for another thread: it pings systemd's
//! watchdog (`WATCHDOG=1`, from the state's tick) and answers the bus, so a step that
//! waited would look like a dead daemon. Work that can wait (systemd calls, command
//! lines, memory moves, measurements) runs on the threads above; every step is timed,
//! and one over a second is logged naming it (see `steps`). At exit the holder undoes
//! its units on its own thread while the loop goes on pinging and answering calls with
//! "stopping" ([`wind_down`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch};
use zbus::Connection;

use crate::api::{Signal, Snapshot};
use crate::dbus::{self, BusTarget};
use crate::memory::follow::{self, FollowJob, MoveQueue};

use crate::settings::Settings;

use super::readers::{Readers, READERS};
use super::schedule::Timing;
use super::state::event::{Event, ReloadCause};
use super::state::memory::MemoryRead;
use super::state::{Action, Config, State};
use super::steps::{StepName, Steps, LOOK_EVERY, STILL_RUNNING};
use super::watchers::{Doorbell, KernelSources};
use super::worker;
use crate::manager::cmdlines::{CmdlineRead, CmdlineWanted};
use crate::watch::{ProcFs, ProcSource};

/// How long the holder undoes holds at exit, one after another: what is not undone by
/// then stays in the journal for the next start (and the log says so).
const HOLDER_RELEASE: Duration = Duration::from_secs(10);
/// How long the exit waits for the holder at most: the hold being undone at
/// [`HOLDER_RELEASE`] may take a few seconds more (its systemd calls are bounded on
/// their own). Both stay well below the unit's `TimeoutStopSec=` (see the test), so that
/// a stop with many holds ends by itself, never in `Result=timeout`. The loop goes on
/// pinging the watchdog and answering meanwhile ([`wind_down`]).
const HOLDER_STOP: Duration = Duration::from_secs(13);

/// How many events may wait for the loop (commands, signals, reloads, measurement
/// results). Senders wait when it is full.
pub const EVENT_QUEUE: usize = 4096;

/// Everything `pinnerd daemon` needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: Config,
    /// Read (and checked) by the caller, so that a bad file stops the daemon before it
    /// takes the bus name.
    pub settings: Settings,
    pub bus: BusTarget,
}

/// How often the loop handles a `Tick` (periodic work is due-checked against it).
const TICK: Duration = Duration::from_secs(1);
/// How often process events may republish the snapshot (the D-Bus counters and their
/// PropertiesChanged signals) under a storm; every other event publishes at once.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Channel events handled in a row before the kernel sources are looked at again, so
/// that neither starves the other.
const CHANNEL_BURST: usize = 64;

/// Errors that stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The settings file is invalid (maps to the config-error exit code); it names the
    /// file, line and column.
    #[error(transparent)]
    Config(#[from] crate::settings::SettingsError),
    /// The matrix store in the state directory could not be opened; it names the path.
    #[error(transparent)]
    Store(#[from] crate::matrix::store::StoreError),
    #[error(transparent)]
    Bus(#[from] crate::dbus::DbusError),
    /// A directory the daemon needs could not be created or used.
    #[error("{path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs the daemon until SIGTERM; returns after masks are restored.
pub fn run(opts: Options) -> Result<(), DaemonError> {
    for dir in [&opts.config.state_dir, &opts.config.runtime_dir] {
        ensure_dir(dir)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pinnerd-rt")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let started = rt.block_on(start(opts))?;
    // The runtime's workers go on serving the bus while this thread runs the loop.
    let result = started.shell.run_loop(started.state, started.events);
    notify(&[sd_notify::NotifyState::Stopping]);
    rt.block_on(release(started.conn));
    result
}

fn ensure_dir(dir: &PathBuf) -> Result<(), DaemonError> {
    std::fs::create_dir_all(dir).map_err(|source| DaemonError::Dir {
        path: dir.clone(),
        source,
    })
}

/// What [`start`] hands to the loop.
struct Started {
    conn: Connection,
    shell: Shell,
    state: State,
    events: mpsc::Receiver<Event>,
}

/// Everything that lives on the runtime: signals, the bus, rule directory watches.
#[expect(
    clippy::too_many_lines,
    reason = "the daemon's start, still over the limit: to be split when its room is reworked (see clippy.toml)"
)]
async fn start(opts: Options) -> Result<Started, DaemonError> {
    let signal_err = |e: std::io::Error| DaemonError::Runtime(e);
    let mut hup = signal(SignalKind::hangup()).map_err(signal_err)?;
    let mut term = signal(SignalKind::terminate()).map_err(signal_err)?;
    let mut int = signal(SignalKind::interrupt()).map_err(signal_err)?;

    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let (snap_tx, snap_rx) = watch::channel(Snapshot::starting());
    let limits = &opts.settings.limits;
    let limiter = dbus::RateLimiter::new(limits.dbus_burst, limits.dbus_calls_per_second);
    let conn = dbus::serve(&opts.bus, tx.clone(), snap_rx.clone(), limiter).await?;
    tracing::info!(bus = %opts.bus, name = dbus::BUS_NAME, "bus name {} acquired on the {} bus", dbus::BUS_NAME, opts.bus);
    tokio::spawn(dbus::publish_properties(conn.clone(), snap_rx));

    // Every other signal whose default action would end the daemon without giving the
    // masks back ends it the way SIGTERM does.
    for (raw, name) in [
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
    ] {
        let mut stream = signal(SignalKind::from_raw(raw)).map_err(signal_err)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                tracing::warn!(
                    signal = name,
                    "{name}: stopping, as on SIGTERM: masks are given back"
                );
                if tx.send(Event::Terminate).await.is_err() {
                    return;
                }
            }
        });
    }
    let sig_tx = tx.clone();
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                _ = hup.recv() => Event::Reload(ReloadCause::Signal),
                _ = term.recv() => Event::Terminate,
                _ = int.recv() => Event::Terminate,
            };
            tracing::debug!(?ev, "signal");
            if sig_tx.send(ev).await.is_err() {
                return;
            }
        }
    });
    let rule_dirs = opts
        .config
        .rule_dirs
        .clone()
        .unwrap_or_else(|| opts.settings.rule_dirs.clone());
    match super::sources::rule_watcher(&rule_dirs) {
        Ok(inotify) => {
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Err(e) = super::sources::rule_changes(inotify, tx).await {
                    tracing::warn!(error = %e, "the rule directory watch stopped ({e}); SIGHUP still reloads");
                }
            });
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the rule directories ({e}); SIGHUP still reloads")
        }
    }

    let (emit_tx, mut emit_rx) = mpsc::unbounded_channel::<Signal>();
    let emit_conn = conn.clone();
    tokio::spawn(async move {
        // One task, so signals leave in the order the loop produced them.
        while let Some(sig) = emit_rx.recv().await {
            if let Err(e) = dbus::emit(&emit_conn, &sig).await {
                let name = match &sig {
                    crate::api::Signal::MeasurementFinished { job, .. } => {
                        format!("MeasurementFinished of job {job}")
                    }
                    crate::api::Signal::RulesReloaded { rules, .. } => {
                        format!("RulesReloaded ({rules} rules)")
                    }
                };
                tracing::warn!(error = %e, signal = %name, "cannot emit the signal {name}: {e}");
            }
        }
    });

    // Ping at half of systemd's WatchdogSec.
    let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
    let bell = Arc::new(Doorbell::new().map_err(DaemonError::Runtime)?);
    let timing = Timing::from_settings(&opts.settings, watchdog);
    let state = State::new(
        opts.config.clone(),
        opts.settings.clone(),
        timing,
        Instant::now(),
    );
    let mut state = state;
    if !opts.config.observe_only {
        start_nri(&opts.settings, &tx, &mut state);
    }
    let (readers, memory) =
        start_readers(&opts.config.sysroot, &tx).map_err(DaemonError::Runtime)?;
    let shell = Shell {
        events: tx,
        snapshot: snap_tx,
        emit: emit_tx,
        moves: std::cell::OnceCell::new(),
        readers,
        memory,
        holder: std::cell::RefCell::new(None),
        hold_at: (opts.config.sysroot.clone(), opts.config.runtime_dir.clone()),
        observe_only: opts.config.observe_only,
        bell,
        steps: step_timer(),
        watchdog,
    };
    Ok(Started {
        conn,
        shell,
        state,
        events: rx,
    })
}

/// The NRI plugin (unless `[nri] enable = "off"`): its own task, its questions passed
/// to the loop as [`Event::Nri`], the loop's updates taken from the state.
fn start_nri(settings: &crate::settings::Settings, tx: &mpsc::Sender<Event>, state: &mut State) {
    let config = settings.nri.config();
    if config.enable == crate::nri::Enable::Off {
        return;
    }
    let (asks_tx, mut asks_rx) = mpsc::channel(64);
    let (updates_tx, updates_rx) = mpsc::channel(16);
    state.connect_nri(updates_tx);
    tokio::spawn(crate::nri::connect::run(config, asks_tx, updates_rx));
    let tx = tx.clone();
    tokio::spawn(async move {
        while let Some(ask) = asks_rx.recv().await {
            if tx.send(Event::Nri(ask)).await.is_err() {
                return;
            }
        }
    });
}

/// The loop's step timer, with its watch thread (a step that does not end is named
/// while it runs) when that thread can start.
fn step_timer() -> Steps {
    let steps = Steps::default();
    if let Err(e) = steps.watch(STILL_RUNNING, LOOK_EVERY) {
        tracing::warn!(error = %e, "cannot start the step watch thread ({e}): slow steps are said once they end");
    }
    steps
}

/// The reader threads: command lines, and memory; each sends what it read to the loop
/// (a memory read also answers its callers).
fn start_readers(
    root: &crate::sysroot::SysRoot,
    tx: &mpsc::Sender<Event>,
) -> std::io::Result<(Readers<CmdlineWanted>, Readers<MemoryRead>)> {
    let procs = ProcFs::new(root.clone());
    let read_tx = tx.clone();
    let cmdlines = Readers::start("cmdline", READERS, move |wanted: CmdlineWanted| {
        let read = CmdlineRead {
            wanted,
            args: procs.cmdline(wanted.pid, wanted.start_time),
        };
        let _ = read_tx.blocking_send(Event::Cmdline(read));
    })?;
    let memory_tx = tx.clone();
    let memory = Readers::start("memory", READERS, move |read: MemoryRead| {
        read.run(|found| {
            let _ = memory_tx.blocking_send(Event::Memory(found));
        })
    })?;
    Ok((cmdlines, memory))
}

async fn release(conn: Connection) {
    if let Err(e) = conn.release_name(dbus::BUS_NAME).await {
        tracing::debug!(error = %e, "releasing the bus name");
    }
}

/// What the loop thread holds to talk to the outside.
struct Shell {
    events: mpsc::Sender<Event>,
    snapshot: watch::Sender<Snapshot>,
    emit: mpsc::UnboundedSender<Signal>,
    /// Memory moves, one at a time on one thread, started at the first move.
    moves: std::cell::OnceCell<MoveQueue>,
    /// Reads that can wait on a process's locks, off the loop: command lines…
    readers: Readers<CmdlineWanted>,
    /// …and where a process's memory is (`Explain`), answered by the reader.
    memory: Readers<MemoryRead>,
    /// Units held for `isolate` and `unit-cpuset` rules, on a thread of its own,
    /// started at the first want or at start when a previous run left holds.
    holder: std::cell::RefCell<Option<super::holding::HolderThread>>,
    /// Where the holder works: the sysfs root (cgroups) and the runtime directory.
    hold_at: (crate::sysroot::SysRoot, std::path::PathBuf),
    /// `daemon --machine`: no holder, mover or measurement thread is ever started (the
    /// state asks for none; this is the last guard).
    observe_only: bool,
    /// Wakes the loop's `poll`: rung by the channel's receiver, and by the holder when
    /// it has ended.
    bell: Arc<Doorbell>,
    /// Times every step and warns about a slow one.
    steps: Steps,
    /// How often to ping systemd's watchdog, if it watches.
    watchdog: Option<Duration>,
}

impl Shell {
    /// Queues `job` for the mover thread, started the first time; why not, if not.
    fn queue_move(&self, job: FollowJob) -> Result<(), String> {
        if self.observe_only {
            return Err(
                "a daemon that observes another machine (--machine) moves no memory".into(),
            );
        }
        let queue = match self.moves.get() {
            Some(q) => q,
            None => {
                let tx = self.events.clone();
                let q = MoveQueue::start(follow::Kernel, move |done| {
                    let _ = tx.blocking_send(Event::Followed(Box::new(done)));
                })
                .map_err(|e| format!("cannot start the memory mover thread: {e}"))?;
                self.moves.get_or_init(|| q)
            }
        };
        queue.push(job).map_err(|e| e.to_string())
    }

    /// Starts the holder thread if it is not running; why not, if it cannot start.
    fn holder(&self) -> Result<std::cell::RefMut<'_, super::holding::HolderThread>, String> {
        if self.observe_only {
            return Err("a daemon that observes another machine (--machine) holds no unit".into());
        }
        let mut slot = self.holder.borrow_mut();
        if slot.is_none() {
            let (root, runtime) = self.hold_at.clone();
            let tx = self.events.clone();
            let bell = self.bell.clone();
            let t = super::holding::HolderThread::start(
                move || super::holding::system_holder(&root, &runtime),
                move |reports, notes| {
                    let _ = tx.blocking_send(Event::Held(reports));
                    let _ = tx.blocking_send(Event::HoldNotes(notes));
                },
                move || bell.ring(),
            )
            .map_err(|e| format!("cannot start the holder thread: {e}"))?;
            *slot = Some(t);
        }
        Ok(std::cell::RefMut::map(slot, |s| {
            s.as_mut().expect("started above")
        }))
    }

    /// Runs the loop until it must stop, then lets the holder undo its units while
    /// still answering ([`wind_down`]).
    fn run_loop(&self, mut state: State, mut rx: mpsc::Receiver<Event>) -> Result<(), DaemonError> {
        let waker = Waker::from(self.bell.clone());
        let mut cx = Context::from_waker(&waker);
        // A daemon that could not start leaves what it recovered to the next start.
        self.serve(&mut state, &mut rx, &mut cx)?;
        self.wind_down(&mut rx, &mut cx);
        Ok(())
    }

    /// Recovers what a previous run held, reads the machine and the rules, then
    /// `READY=1`.
    fn start_up(&self, state: &mut State) -> Result<(), DaemonError> {
        // What a previous run held and did not undo (killed) is recovered at once.
        if !self.observe_only && self.hold_at.1.join(crate::hold::JOURNAL_FILE).exists() {
            if let Err(e) = self.holder() {
                tracing::error!(error = %e, "the holds a previous run left not recovered: {e}");
            }
        }
        self.steps
            .timed(StepName::Start, || -> Result<(), DaemonError> {
                state.start()?;
                self.perform(state);
                self.publish(state);
                Ok(())
            })?;
        notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(scheduling = %scheduling(), "ready: the event loop runs {}", scheduling());
        Ok(())
    }

    /// The loop proper, until it must stop.
    fn serve(
        &self,
        state: &mut State,
        rx: &mut mpsc::Receiver<Event>,
        cx: &mut Context<'_>,
    ) -> Result<(), DaemonError> {
        self.start_up(state)?;
        let (mut kernel, first) = KernelSources::open();
        for ev in first {
            if self.step(state, ev) {
                return Ok(());
            }
        }
        let bell = &*self.bell;
        let mut next_tick = Instant::now() + TICK;
        let mut last_publish = Instant::now();
        let mut publish_due: Option<Instant> = None;
        let mut batch = Vec::with_capacity(super::watchers::BATCH);
        loop {
            // The channel first (commands, signals, reloads), a burst at a time. When it
            // is empty, its receiver has registered the doorbell to ring on the next send.
            let mut drained = false;
            for _ in 0..CHANNEL_BURST {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(ev)) => {
                        if self.step(state, ev) {
                            return Ok(());
                        }
                    }
                    // Every sender is gone: nothing can stop us cleanly any more.
                    Poll::Ready(None) => return Ok(()),
                    Poll::Pending => {
                        drained = true;
                        break;
                    }
                }
            }
            if let Some(at) = publish_due {
                if Instant::now() >= at {
                    publish_due = None;
                    self.publish(state);
                    last_publish = Instant::now();
                }
            }
            // The clock, or sooner when the state has something due (a deferred journal
            // write) or the snapshot is; every periodic job is due-checked, so an early
            // tick is harmless.
            let due = |state: &State, tick: Instant, publish: Option<Instant>| {
                [state.deadline(), publish]
                    .into_iter()
                    .flatten()
                    .fold(tick, Instant::min)
            };
            let now = Instant::now();
            if now >= due(state, next_tick, None) {
                if now >= next_tick {
                    next_tick = now + TICK;
                }
                if self.step(state, Event::Tick(now)) {
                    return Ok(());
                }
            }
            let timeout = if drained {
                due(state, next_tick, publish_due).saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            let ready = kernel.wait(bell, timeout);
            if ready.bell {
                bell.clear();
            }
            if ready.proc {
                let failed = kernel.read_proc(&mut batch);
                if !batch.is_empty() {
                    // Not `step`: the snapshot (counters only, for process events) is
                    // published at most every PUBLISH_EVERY under a storm.
                    let name = StepName::Proc(batch.len());
                    let exit = self.steps.timed(name, || {
                        state.handle(Event::Proc(std::mem::take(&mut batch)));
                        self.perform(state)
                    });
                    if exit {
                        return Ok(());
                    }
                    if publish_due.is_none() {
                        if last_publish.elapsed() >= PUBLISH_EVERY {
                            self.publish(state);
                            last_publish = Instant::now();
                        } else {
                            publish_due = Some(last_publish + PUBLISH_EVERY);
                        }
                    }
                }
                if let Some(ev) = failed {
                    if self.step(state, ev) {
                        return Ok(());
                    }
                }
            }
            if ready.hotplug {
                if let Some(ev) = kernel.read_hotplug() {
                    if self.step(state, ev) {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The holder, if one runs, undoes what it held on its own thread; meanwhile the
    /// loop pings the watchdog and refuses calls at once ([`wind_down`]).
    fn wind_down(&self, rx: &mut mpsc::Receiver<Event>, cx: &mut Context<'_>) {
        let mut slot = self.holder.borrow_mut();
        let Some(holder) = slot.as_mut() else {
            return;
        };
        // Already asked at `Action::Exit`, but not when every sender went away.
        holder.stop(HOLDER_RELEASE);
        let ended = wind_down(
            rx,
            cx,
            &self.bell,
            || holder.ended(),
            Instant::now() + HOLDER_STOP,
            self.watchdog,
            || notify(&[sd_notify::NotifyState::Watchdog]),
        );
        if !ended {
            tracing::warn!(
                limit_s = HOLDER_STOP.as_secs(),
                "the holder did not finish undoing within {} s; its journal is left for the next start",
                HOLDER_STOP.as_secs()
            );
        }
    }

    /// Handles one event and what it asked for, timed; true when the loop must stop.
    fn step(&self, state: &mut State, ev: Event) -> bool {
        let name = StepName::of(&ev, |now| state.due_at_tick(now));
        self.steps.timed(name, || {
            state.handle(ev);
            let exit = self.perform(state);
            self.publish(state);
            exit
        })
    }

    fn publish(&self, state: &State) {
        let new = state.snapshot();
        self.snapshot.send_if_modified(|cur| {
            if *cur == new {
                false
            } else {
                *cur = new;
                true
            }
        });
    }

    /// Carries out the loop's actions; true when the loop must stop.
    fn perform(&self, state: &mut State) -> bool {
        let mut exit = false;
        loop {
            let actions = state.take_actions();
            if actions.is_empty() {
                return exit;
            }
            for action in actions {
                match action {
                    Action::Emit(sig) => {
                        // The snapshot first: a client that reads a property when the
                        // signal arrives (`MeasuredAt` on `MeasurementFinished`) sees
                        // what the signal announces, not the value before it.
                        self.publish(state);
                        let _ = self.emit.send(sig);
                    }
                    Action::Measure(job) if self.observe_only => {
                        let id = job.id;
                        tracing::info!(
                            job = id,
                            "job {id} not run: {}",
                            worker::JobError::Observing
                        );
                        state.handle(Event::Measured(Box::new(worker::Finished {
                            id,
                            result: Err(worker::JobError::Observing),
                        })));
                    }
                    Action::Measure(job) => {
                        let id = job.id;
                        let tx = self.events.clone();
                        let spawned = worker::spawn(*job, move |outcome| {
                            let _ = tx.blocking_send(Event::Measured(Box::new(outcome)));
                        });
                        if let Err(e) = spawned {
                            tracing::error!(job = id, error = %e, "cannot start the measurement thread of job {id}: {e}");
                            state.handle(Event::Measured(Box::new(worker::Finished {
                                id,
                                result: Err(worker::JobError::Spawn(e)),
                            })));
                        }
                    }
                    Action::Follow(job) => {
                        let (pid, target) = (job.pid, job.target.clone());
                        if let Err(why) = self.queue_move(*job) {
                            tracing::error!(pid, error = %why, "cannot queue the memory move of pid {pid}: {why}");
                            state.handle(Event::Followed(Box::new(
                                crate::memory::follow::Finished {
                                    pid,
                                    target,
                                    outcome: crate::memory::follow::Outcome::Failed(why),
                                    at: std::time::Instant::now(),
                                },
                            )));
                        }
                    }
                    Action::ReadCmdlines(wanted) => self.readers.ask(wanted),
                    Action::ReadMemory(read) => self.memory.ask([*read]),
                    Action::Status(line) => notify(&[sd_notify::NotifyState::Status(&line)]),
                    Action::Watchdog => notify(&[sd_notify::NotifyState::Watchdog]),
                    Action::Reloading => match sd_notify::NotifyState::monotonic_usec_now() {
                        Ok(now) => notify(&[sd_notify::NotifyState::Reloading, now]),
                        Err(_) => notify(&[sd_notify::NotifyState::Reloading]),
                    },
                    Action::Ready => notify(&[sd_notify::NotifyState::Ready]),
                    Action::Hold(wants) => match self.holder() {
                        Ok(h) => h.want(wants),
                        Err(e) => tracing::error!(error = %e, "units not held: {e}"),
                    },
                    Action::Exit => {
                        // Asked now, waited for by `wind_down`, never here.
                        if let Some(h) = self.holder.borrow().as_ref() {
                            h.stop(HOLDER_RELEASE);
                        }
                        exit = true;
                    }
                }
            }
        }
    }
}

/// The loop's last phase, after the masks are given back: waits for `ended` (the
/// holder undoing its units on its own thread, which rings `bell` when done) until
/// `until`, without ever sleeping past a watchdog ping: `ping` is called every
/// `watchdog` (and at once). Events that come meanwhile are dropped: a bus call's
/// dropped reply answers its caller at once that the daemon is shutting down. True when
/// `ended` said so in time.
fn wind_down(
    rx: &mut mpsc::Receiver<Event>,
    cx: &mut Context<'_>,
    bell: &Doorbell,
    mut ended: impl FnMut() -> bool,
    until: Instant,
    watchdog: Option<Duration>,
    mut ping: impl FnMut(),
) -> bool {
    // No kernel sources: only the doorbell wakes this wait.
    let sources = KernelSources::default();
    let mut next_ping = Instant::now();
    loop {
        // Until it is empty (its receiver then registers the doorbell), or closed.
        while let Poll::Ready(Some(ev)) = rx.poll_recv(cx) {
            drop(ev);
        }
        if ended() {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        let mut wake = until;
        if let Some(every) = watchdog {
            if now >= next_ping {
                ping();
                next_ping = now + every;
            }
            wake = wake.min(next_ping);
        }
        if sources.wait(bell, wake.saturating_duration_since(now)).bell {
            bell.clear();
        }
    }
}

fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify");
    }
}

/// The calling thread's scheduling class, in words for the log.
fn scheduling() -> String {
    // SAFETY: plain queries about the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::sched_getparam(0, &mut param) };
    // SAFETY: as above; getpriority can return -1 legitimately, which is fine here.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let reset = policy >= 0 && policy & libc::SCHED_RESET_ON_FORK != 0;
    let class = match policy & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_FIFO => format!("SCHED_FIFO priority {}", param.sched_priority),
        libc::SCHED_RR => format!("SCHED_RR priority {}", param.sched_priority),
        libc::SCHED_OTHER => format!("SCHED_OTHER nice {nice}"),
        libc::SCHED_BATCH => format!("SCHED_BATCH nice {nice}"),
        libc::SCHED_IDLE => "SCHED_IDLE".to_string(),
        p => format!("policy {p}"),
    };
    if reset {
        format!("{class}, reset on fork")
    } else {
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Call;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use tokio::sync::oneshot::error::TryRecvError;

    /// Generous bound for what must happen while the other side is stuck: a liveness
    /// check, not a timing goal.
    const LIVENESS: Duration = Duration::from_secs(60);

    /// Makes a `ListManaged` call as the bus would and waits for its answer: `Err` is
    /// the refusal a dropped reply gives the caller ("the daemon is shutting down").
    fn call_list_managed(tx: &mpsc::Sender<Event>) -> Result<(), &'static str> {
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        tx.blocking_send(Event::Command(Call::ListManaged {
            caller_uid: 0,
            reply,
        }))
        .unwrap();
        let until = Instant::now() + LIVENESS;
        loop {
            match answer.try_recv() {
                Ok(_) => return Ok(()),
                Err(TryRecvError::Closed) => return Err("refused: stopping"),
                Err(TryRecvError::Empty) => {
                    assert!(Instant::now() < until, "the call was not answered");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// Waits until `f` holds, at most [`LIVENESS`]; panics naming `what`.
    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let until = Instant::now() + LIVENESS;
        while !f() {
            assert!(Instant::now() < until, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The loop's last phase on its own thread, as `Shell::wind_down` runs it.
    fn winding_down(
        mut rx: mpsc::Receiver<Event>,
        bell: Arc<Doorbell>,
        ended: impl FnMut() -> bool + Send + 'static,
        until: Duration,
        pings: Arc<AtomicUsize>,
    ) -> std::thread::JoinHandle<bool> {
        std::thread::spawn(move || {
            let waker = Waker::from(bell.clone());
            let mut cx = Context::from_waker(&waker);
            wind_down(
                &mut rx,
                &mut cx,
                &bell,
                ended,
                Instant::now() + until,
                Some(Duration::from_millis(10)),
                || {
                    pings.fetch_add(1, Ordering::Relaxed);
                },
            )
        })
    }

    /// While the holder undoes its units (here: stuck until the test lets it go), the
    /// loop answers a call at once and keeps pinging the watchdog; it ends when the
    /// holder says it ended, woken by the doorbell.
    #[test]
    fn while_the_holder_undoes_the_loop_answers_and_pings_the_watchdog() {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let bell = Arc::new(Doorbell::new().unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let pings = Arc::new(AtomicUsize::new(0));
        let flag = done.clone();
        let looping = winding_down(
            rx,
            bell.clone(),
            move || flag.load(Ordering::Acquire),
            Duration::from_secs(3600),
            pings.clone(),
        );
        assert_eq!(call_list_managed(&tx), Err("refused: stopping"));
        let seen = pings.load(Ordering::Relaxed);
        wait_until("no watchdog ping while the holder undid", || {
            pings.load(Ordering::Relaxed) >= seen + 3
        });
        assert!(!looping.is_finished(), "the loop waits for the holder");
        done.store(true, Ordering::Release);
        bell.ring();
        assert!(looping.join().unwrap(), "it ended when the holder did");
    }

    /// The real holder thread, stuck connecting to systemd when the daemon stops:
    /// `stop` returns at once, the loop answers meanwhile, and the thread's end wakes
    /// it once it has undone everything.
    #[test]
    fn a_holder_stuck_in_a_systemd_call_does_not_hold_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().to_path_buf();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let bell = Arc::new(Doorbell::new().unwrap());
        let ring = bell.clone();
        let holder = super::super::holding::HolderThread::start(
            move || {
                // A systemd that does not answer, until the test says.
                let _ = gate_rx.recv();
                crate::hold::Holder::new(
                    Err(crate::hold::systemd::UnitError::NoSystemd(
                        "not reachable".into(),
                    )),
                    Err(crate::hold::partition::Unable::NoCgroup2),
                    crate::hold::Journal::new(&runtime),
                    Box::new(|_, _, _, _| 0),
                )
            },
            |_, _| {},
            move || ring.ring(),
        )
        .unwrap();
        holder.stop(Duration::from_secs(5));
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let pings = Arc::new(AtomicUsize::new(0));
        let holder = std::sync::Mutex::new(holder);
        let looping = winding_down(
            rx,
            bell,
            move || holder.lock().unwrap().ended(),
            Duration::from_secs(3600),
            pings.clone(),
        );
        assert_eq!(call_list_managed(&tx), Err("refused: stopping"));
        wait_until("no watchdog ping while the holder was stuck", || {
            pings.load(Ordering::Relaxed) >= 2
        });
        assert!(!looping.is_finished(), "the loop waits for the holder");
        gate_tx.send(()).unwrap();
        assert!(looping.join().unwrap(), "the holder's end woke the loop");
    }

    /// A holder that never ends: the loop gives up at its bound and says so.
    #[test]
    fn a_holder_that_never_ends_is_given_up_at_the_bound() {
        let (_tx, rx) = mpsc::channel(EVENT_QUEUE);
        let bell = Arc::new(Doorbell::new().unwrap());
        let pings = Arc::new(AtomicUsize::new(0));
        let looping = winding_down(rx, bell, || false, Duration::from_millis(50), pings.clone());
        assert!(!looping.join().unwrap());
        assert!(pings.load(Ordering::Relaxed) >= 1, "pinged at once");
    }

    #[test]
    fn the_holder_is_stopped_well_within_the_units_stop_timeout() {
        let unit = include_str!("../../systemd/pinnerd.service");
        let timeout: u64 = unit
            .lines()
            .find_map(|l| l.strip_prefix("TimeoutStopSec="))
            .and_then(|v| v.trim().strip_suffix('s'))
            .and_then(|v| v.parse().ok())
            .expect("the unit sets TimeoutStopSec= in seconds");
        assert!(HOLDER_RELEASE < HOLDER_STOP);
        // Restoring the masks before it and the exit after it keep 5 s of the timeout.
        assert!(
            HOLDER_STOP + Duration::from_secs(5) <= Duration::from_secs(timeout),
            "the holder may take {HOLDER_STOP:?} of TimeoutStopSec={timeout}s"
        );
    }
}
