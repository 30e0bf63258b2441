//! The shell around [`State`]: takes the bus name, starts the sources, runs the loop on
//! its own OS thread and carries out the loop's [`Action`]s.
//!
//! Order at start: signal handlers (so an early SIGHUP cannot kill us), the bus name
//! (refused, not queued, when taken — before touching any process), the rules and the
//! stored matrix, then `READY=1`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};
use zbus::Connection;

use crate::dbus::{self, BusTarget, Signal};

use crate::settings::Settings;

use super::state::{Action, Config, State, Timing};
use super::{worker, DaemonError, Event, ReloadCause, Snapshot};

/// How many events may wait for the loop. Senders wait when it is full; the proc
/// watcher then falls behind and rescans, which is the safe answer to a storm.
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
    rt.block_on(run_async(opts))
}

fn ensure_dir(dir: &PathBuf) -> Result<(), DaemonError> {
    std::fs::create_dir_all(dir).map_err(|source| DaemonError::Dir {
        path: dir.clone(),
        source,
    })
}

async fn run_async(opts: Options) -> Result<(), DaemonError> {
    let signal_err = |e: std::io::Error| DaemonError::Runtime(e);
    let mut hup = signal(SignalKind::hangup()).map_err(signal_err)?;
    let mut term = signal(SignalKind::terminate()).map_err(signal_err)?;
    let mut int = signal(SignalKind::interrupt()).map_err(signal_err)?;

    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let (snap_tx, snap_rx) = watch::channel(Snapshot::starting());
    let limits = &opts.settings.limits;
    let limiter = dbus::RateLimiter::new(limits.dbus_burst, limits.dbus_calls_per_second);
    let conn = dbus::serve(&opts.bus, tx.clone(), snap_rx.clone(), limiter).await?;
    tracing::info!(bus = %opts.bus, name = dbus::BUS_NAME, "bus name acquired");
    tokio::spawn(dbus::publish_properties(conn.clone(), snap_rx));

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
                    tracing::warn!(error = %e, "rule directory watch stopped; SIGHUP still reloads");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot watch rule directories; SIGHUP still reloads"),
    }
    tokio::spawn(super::sources::ticker(tx.clone(), Duration::from_secs(1)));
    if let Err(e) = super::watchers::spawn_proc_watcher(tx.clone()) {
        tracing::warn!(error = %e, "cannot start the proc connector thread");
    }
    if let Err(e) = super::watchers::spawn_hotplug_watcher(tx.clone()) {
        tracing::warn!(error = %e, "cannot start the hotplug thread");
    }

    let (emit_tx, mut emit_rx) = mpsc::unbounded_channel::<Signal>();
    let emit_conn = conn.clone();
    tokio::spawn(async move {
        // One task, so signals leave in the order the loop produced them.
        while let Some(sig) = emit_rx.recv().await {
            if let Err(e) = dbus::emit(&emit_conn, &sig).await {
                tracing::warn!(error = %e, ?sig, "cannot emit signal");
            }
        }
    });

    let (done_tx, done_rx) = oneshot::channel();
    // Ping at half of systemd's WatchdogSec.
    let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
    let timing = Timing::from_settings(&opts.settings, watchdog);
    let state = State::new(
        opts.config.clone(),
        opts.settings.clone(),
        timing,
        Instant::now(),
    );
    let shell = Shell {
        events: tx,
        snapshot: snap_tx,
        emit: emit_tx,
    };
    std::thread::Builder::new()
        .name("pinnerd-loop".into())
        .spawn(move || {
            let _ = done_tx.send(shell.run_loop(state, rx));
        })
        .map_err(DaemonError::Runtime)?;
    let result = done_rx.await.unwrap_or(Err(DaemonError::LoopDied));
    notify(&[sd_notify::NotifyState::Stopping]);
    release(conn).await;
    result
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
}

impl Shell {
    fn run_loop(&self, mut state: State, mut rx: mpsc::Receiver<Event>) -> Result<(), DaemonError> {
        state.start()?;
        self.perform(&mut state);
        self.publish(&state);
        notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!("ready");
        while let Some(ev) = rx.blocking_recv() {
            state.handle(ev);
            let exit = self.perform(&mut state);
            self.publish(&state);
            if exit {
                return Ok(());
            }
        }
        Ok(())
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
                        let _ = self.emit.send(sig);
                    }
                    Action::Measure(job) => {
                        let id = job.id;
                        let tx = self.events.clone();
                        let spawned = worker::spawn(*job, move |outcome| {
                            let _ = tx.blocking_send(Event::Measured(outcome));
                        });
                        if let Err(e) = spawned {
                            tracing::error!(job = id, error = %e, "cannot start the measurement thread");
                            state.handle(Event::Measured(worker::Outcome {
                                id,
                                result: Err(format!("cannot start the measurement thread: {e}")),
                            }));
                        }
                    }
                    Action::Status(line) => notify(&[sd_notify::NotifyState::Status(&line)]),
                    Action::Watchdog => notify(&[sd_notify::NotifyState::Watchdog]),
                    Action::Reloading => match sd_notify::NotifyState::monotonic_usec_now() {
                        Ok(now) => notify(&[sd_notify::NotifyState::Reloading, now]),
                        Err(_) => notify(&[sd_notify::NotifyState::Reloading]),
                    },
                    Action::Ready => notify(&[sd_notify::NotifyState::Ready]),
                    Action::Exit => exit = true,
                }
            }
        }
    }
}

fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify");
    }
}
