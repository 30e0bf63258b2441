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
//! unit gives the loop. The workers (the reader threads, the memory mover, the holder)
//! are made once at start with the functions that start them and handed to the loop
//! (`shell/workers.rs`); the mover and the holder start at their first use.
//!
//! Nothing on the loop thread sleeps or waits for another thread: it pings systemd's
//! watchdog (`WATCHDOG=1`, from the state's tick) and answers the bus, so a step that
//! waited would look like a dead daemon. Work that can wait (systemd calls, command
//! lines, memory moves, measurements) runs on the threads above; every step is timed,
//! and one over a second is logged naming it (see `steps`). At exit the holder undoes
//! its units on its own thread while the loop goes on pinging and answering calls with
//! "stopping" ([`wind_down`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal as UnixSignal, SignalKind};
use tokio::sync::{mpsc, watch};
use zbus::Connection;

use crate::api::{Signal, Snapshot};
use crate::dbus::{self, BusTarget};
use crate::settings::Settings;

use super::schedule::Timing;
use super::state::event::{Event, ReloadCause};
use super::state::{Action, Config, State};
use super::steps::{StepName, Steps, LOOK_EVERY, STILL_RUNNING};
use super::watchers::{Doorbell, KernelSources};
use super::worker;
use workers::Workers;

mod workers;

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
    let Started {
        conn,
        mut shell,
        state,
        events,
    } = rt.block_on(start(opts))?;
    // The runtime's workers go on serving the bus while this thread runs the loop.
    let result = shell.run_loop(state, events);
    notify(&[sd_notify::NotifyState::Stopping]);
    rt.block_on(release(conn));
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

/// Everything that lives on the runtime: signals, the bus, rule directory watches; then
/// the state and the workers the loop hands work to.
async fn start(opts: Options) -> Result<Started, DaemonError> {
    // Before the bus name: an early SIGHUP must not kill us.
    let stops = StopSignals::new()?;
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let (snap_tx, snap_rx) = watch::channel(Snapshot::starting());
    let conn = serve_bus(&opts, &tx, snap_rx).await?;
    stop_on_fatal_signals(&tx)?;
    stops.forward(tx.clone());
    watch_rule_dirs(&opts, &tx);
    let emit = start_emitter(conn.clone());

    // Ping at half of systemd's WatchdogSec.
    let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
    let bell = Arc::new(Doorbell::new().map_err(DaemonError::Runtime)?);
    let timing = Timing::from_settings(&opts.settings, watchdog);
    let mut state = State::new(
        opts.config.clone(),
        opts.settings.clone(),
        timing,
        Instant::now(),
    );
    let cfg = &opts.config;
    let workers = if cfg.observe_only {
        Workers::observing(&cfg.sysroot, &tx)
    } else {
        start_nri(&opts.settings, &tx, &mut state);
        Workers::system(&cfg.sysroot, &cfg.runtime_dir, &tx, &bell)
    }
    .map_err(DaemonError::Runtime)?;
    let shell = Shell {
        steps: step_timer(),
        out: Outside {
            events: tx,
            snapshot: snap_tx,
            emit,
            workers,
            observe_only: cfg.observe_only,
            bell,
            watchdog,
        },
    };
    Ok(Started {
        conn,
        shell,
        state,
        events: rx,
    })
}

fn signal_err(e: std::io::Error) -> DaemonError {
    DaemonError::Runtime(e)
}

/// The signals that reload or stop the daemon, taken before anything else.
struct StopSignals {
    hup: UnixSignal,
    term: UnixSignal,
    int: UnixSignal,
}

impl StopSignals {
    fn new() -> Result<StopSignals, DaemonError> {
        Ok(StopSignals {
            hup: signal(SignalKind::hangup()).map_err(signal_err)?,
            term: signal(SignalKind::terminate()).map_err(signal_err)?,
            int: signal(SignalKind::interrupt()).map_err(signal_err)?,
        })
    }

    /// Sends each to the loop as it comes: SIGHUP reloads, SIGTERM and SIGINT stop.
    fn forward(mut self, tx: mpsc::Sender<Event>) {
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    _ = self.hup.recv() => Event::Reload(ReloadCause::Signal),
                    _ = self.term.recv() => Event::Terminate,
                    _ = self.int.recv() => Event::Terminate,
                };
                tracing::debug!(?ev, "signal");
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Takes the bus name and serves the interface, its properties published from the
/// snapshots the loop sends.
async fn serve_bus(
    opts: &Options,
    tx: &mpsc::Sender<Event>,
    snap_rx: watch::Receiver<Snapshot>,
) -> Result<Connection, DaemonError> {
    let limits = &opts.settings.limits;
    let limiter = dbus::RateLimiter::new(limits.dbus_burst, limits.dbus_calls_per_second);
    let conn = dbus::serve(&opts.bus, tx.clone(), snap_rx.clone(), limiter).await?;
    tracing::info!(bus = %opts.bus, name = dbus::BUS_NAME, "bus name {} acquired on the {} bus", dbus::BUS_NAME, opts.bus);
    tokio::spawn(dbus::publish_properties(conn.clone(), snap_rx));
    Ok(conn)
}

/// Every other signal whose default action would end the daemon without giving the
/// masks back ends it the way SIGTERM does.
fn stop_on_fatal_signals(tx: &mpsc::Sender<Event>) -> Result<(), DaemonError> {
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
    Ok(())
}

/// Reloads when a rule directory changes; SIGHUP still does when it cannot be watched.
fn watch_rule_dirs(opts: &Options, tx: &mpsc::Sender<Event>) {
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
}

/// The task that emits the loop's signals on the bus: one task, so signals leave in the
/// order the loop produced them.
fn start_emitter(conn: Connection) -> mpsc::UnboundedSender<Signal> {
    let (emit_tx, mut emit_rx) = mpsc::unbounded_channel::<Signal>();
    tokio::spawn(async move {
        while let Some(sig) = emit_rx.recv().await {
            if let Err(e) = dbus::emit(&conn, &sig).await {
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
    emit_tx
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

async fn release(conn: Connection) {
    if let Err(e) = conn.release_name(dbus::BUS_NAME).await {
        tracing::debug!(error = %e, "releasing the bus name");
    }
}

/// The loop thread's shell: its step timer, and what it carries actions out with.
struct Shell {
    /// Times every step and warns about a slow one.
    steps: Steps,
    out: Outside,
}

/// What the loop thread holds to talk to the outside.
struct Outside {
    events: mpsc::Sender<Event>,
    snapshot: watch::Sender<Snapshot>,
    emit: mpsc::UnboundedSender<Signal>,
    /// The threads work that can wait is handed to.
    workers: Workers,
    /// `daemon --machine`: no measurement thread is ever started (the state asks for
    /// none; this is the last guard), nor a holder or a mover (see
    /// [`Workers::observing`]).
    observe_only: bool,
    /// Wakes the loop's `poll`: rung by the channel's receiver, and by the holder when
    /// it has ended.
    bell: Arc<Doorbell>,
    /// How often to ping systemd's watchdog, if it watches.
    watchdog: Option<Duration>,
}

impl Shell {
    /// Runs the loop until it must stop, then lets the holder undo its units while
    /// still answering ([`wind_down`]).
    fn run_loop(
        &mut self,
        mut state: State,
        mut rx: mpsc::Receiver<Event>,
    ) -> Result<(), DaemonError> {
        let waker = Waker::from(self.out.bell.clone());
        let mut cx = Context::from_waker(&waker);
        // A daemon that could not start leaves what it recovered to the next start.
        self.serve(&mut state, &mut rx, &mut cx)?;
        self.wind_down(&mut rx, &mut cx);
        Ok(())
    }

    /// Recovers what a previous run held, reads the machine and the rules, then
    /// `READY=1`.
    fn start_up(&mut self, state: &mut State) -> Result<(), DaemonError> {
        // What a previous run held and did not undo (killed) is recovered at once.
        let workers = &mut self.out.workers;
        if workers.hold_journal.as_deref().is_some_and(Path::exists) {
            if let Err(e) = workers.holder.get() {
                tracing::error!(error = %e, "the holds a previous run left not recovered: {e}");
            }
        }
        self.steps
            .timed(StepName::Start, || -> Result<(), DaemonError> {
                state.start()?;
                self.out.perform(state);
                self.out.publish(state);
                Ok(())
            })?;
        notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(scheduling = %scheduling(), "ready: the event loop runs {}", scheduling());
        Ok(())
    }

    /// The loop proper, until it must stop.
    fn serve(
        &mut self,
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
        let bell = self.out.bell.clone();
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
                    self.out.publish(state);
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
            let ready = kernel.wait(&bell, timeout);
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
                        self.out.perform(state)
                    });
                    if exit {
                        return Ok(());
                    }
                    if publish_due.is_none() {
                        if last_publish.elapsed() >= PUBLISH_EVERY {
                            self.out.publish(state);
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
    fn wind_down(&mut self, rx: &mut mpsc::Receiver<Event>, cx: &mut Context<'_>) {
        let out = &mut self.out;
        let Some(holder) = out.workers.holder.running() else {
            return;
        };
        // Already asked at `Action::Exit`, but not when every sender went away.
        holder.stop(HOLDER_RELEASE);
        let ended = wind_down(
            rx,
            cx,
            &out.bell,
            || holder.ended(),
            Instant::now() + HOLDER_STOP,
            out.watchdog,
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
    fn step(&mut self, state: &mut State, ev: Event) -> bool {
        let name = StepName::of(&ev, |now| state.due_at_tick(now));
        self.steps.timed(name, || {
            state.handle(ev);
            let exit = self.out.perform(state);
            self.out.publish(state);
            exit
        })
    }
}

impl Outside {
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
    fn perform(&mut self, state: &mut State) -> bool {
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
                        if let Err(why) = self.workers.queue_move(*job) {
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
                    Action::ReadCmdlines(wanted) => self.workers.cmdlines.ask(wanted),
                    Action::ReadMemory(read) => self.workers.memory.ask([*read]),
                    Action::Status(line) => notify(&[sd_notify::NotifyState::Status(&line)]),
                    Action::Watchdog => notify(&[sd_notify::NotifyState::Watchdog]),
                    Action::Reloading => match sd_notify::NotifyState::monotonic_usec_now() {
                        Ok(now) => notify(&[sd_notify::NotifyState::Reloading, now]),
                        Err(_) => notify(&[sd_notify::NotifyState::Reloading]),
                    },
                    Action::Ready => notify(&[sd_notify::NotifyState::Ready]),
                    Action::Hold(wants) => match self.workers.holder.get() {
                        Ok(h) => h.want(wants),
                        Err(e) => tracing::error!(error = %e, "units not held: {e}"),
                    },
                    Action::Exit => {
                        // Asked now, waited for by `wind_down`, never here.
                        if let Some(h) = self.workers.holder.running() {
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
mod tests;
