//! The holder's thread: systemd calls can wait (up to their timeout), so units are
//! held off the loop, one reconcile at a time, the newest wants first.
//!
//! ```text
//!   loop ─Action::Hold(wants)─► HolderThread::want ─► (newest replaces waiting) ─►
//!        pinnerd-hold thread: Holder::reconcile ─► Event::Held(reports, notes) ─► loop
//!   Holder::deadline ─► recovered holds expire, undos put off tried again; a refused
//!        hold due: the last wants reconciled again ─► Event::Held(reports) ─► loop
//!   pinnerd-hold-watch thread: a held partition's cgroup.events changed (inotify) ─►
//!        the hold thread reconciles the last wants again (a unit left without
//!        processes has its partition undone before systemd removes its cgroup)
//!   exit ─► HolderThread::stop (returns at once): holds undone on the thread until a
//!           deadline (the rest stay in the journal), which then calls `ended` (the
//!           loop's doorbell) and ends; the loop goes on answering until
//!           `HolderThread::ended` says so, or its bound passes
//! ```
//!
//! Nothing here waits on the caller's thread: `want` and `stop` only send, the reports
//! come back as events; the loop that owns a `HolderThread` is the thread that pings
//! systemd's watchdog and answers the bus.
//!
//! Must not touch: daemon state. The thread holds and reports, nothing else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hold::{HoldReport, Holder, Want};

enum Msg {
    Wants(Vec<Want>),
    /// A watched `cgroup.events` changed.
    Events,
    /// Undo everything held until this deadline, then end.
    Stop(Instant),
}

/// The holder of a daemon: systemd on the system bus, the cgroup v2 hierarchy under
/// `root`, the journal in `runtime_dir`.
pub fn system_holder(root: &crate::sysroot::SysRoot, runtime_dir: &std::path::Path) -> Holder {
    let connect = || {
        crate::hold::systemd::SystemdUnits::system()
            .map(|u| Box::new(u) as Box<dyn crate::hold::systemd::Units>)
    };
    Holder::new(
        connect(),
        crate::hold::partition::Cgroup2::find(root),
        crate::hold::Journal::new(runtime_dir),
        crate::hold::give_back_masks(root.clone()),
    )
    .reconnecting(Box::new(connect))
}

/// Starts the thread that reads the holder's inotify events (the `cgroup.events` of
/// held partitions) and tells the hold thread; the watches it is given are the
/// holder's. `None` (logged) when inotify cannot be had: units are then let go at the
/// daemon's next reconcile. The thread ends at the first event after the hold thread
/// has ended (its channel gone); until then it sleeps in `read`.
fn watch_events(tx: mpsc::Sender<Msg>) -> Option<inotify::Watches> {
    let mut inotify = match inotify::Inotify::init() {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, "no inotify for held partitions' cgroup.events ({e}): an emptied unit is let go at the next reconcile");
            return None;
        }
    };
    let watches = inotify.watches();
    let spawned = std::thread::Builder::new()
        .name("pinnerd-hold-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match inotify.read_events_blocking(&mut buf) {
                    Ok(events) => {
                        if events.count() > 0 && tx.send(Msg::Events).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the held partitions' cgroup.events stopped: {e}");
                        return;
                    }
                }
            }
        });
    match spawned {
        Ok(_) => Some(watches),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the cgroup.events watch thread: {e}");
            None
        }
    }
}

/// The running holder thread.
pub struct HolderThread {
    tx: mpsc::Sender<Msg>,
    join: Option<JoinHandle<()>>,
    /// Set by the thread once it has undone everything, just before it ends.
    done: Arc<AtomicBool>,
}

impl HolderThread {
    /// Starts the thread: it first recovers what a previous run left (see
    /// [`Holder::recover`]), then reconciles every want it is sent and hands the
    /// reports to `report`.
    pub fn start(
        make: impl FnOnce() -> Holder + Send + 'static,
        report: impl Fn(Vec<HoldReport>, Vec<String>) + Send + 'static,
        ended: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<HolderThread> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let done = Arc::new(AtomicBool::new(false));
        let done_here = done.clone();
        let watches = watch_events(tx.clone());
        let join = std::thread::Builder::new()
            .name("pinnerd-hold".into())
            .spawn(move || {
                // Connecting to systemd can wait too: on this thread, not the loop.
                let mut holder = make();
                if let Some(w) = watches {
                    holder = holder.watching(w);
                }
                for line in holder.recover(Instant::now()) {
                    tracing::info!("{line}");
                }
                if let Some(why) = holder.cannot_isolate() {
                    tracing::info!(reason = %why, "isolate = true cannot isolate on this machine: {why}; such rules stay merely exclusive");
                }
                // The wants last reconciled: reconciled again when a refused hold is due.
                let mut last: Option<Vec<Want>> = None;
                // A channel closed without a stop (the daemon gone): undone without a
                // deadline of its own, as far as the process lives.
                let unbounded = || Instant::now() + Duration::from_secs(3600);
                let until = loop {
                    let msg = match holder.deadline() {
                        Some(at) => {
                            match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                                Ok(m) => Some(m),
                                Err(mpsc::RecvTimeoutError::Timeout) => None,
                                Err(mpsc::RecvTimeoutError::Disconnected) => {
                                    Some(Msg::Stop(unbounded()))
                                }
                            }
                        }
                        None => Some(rx.recv().unwrap_or_else(|_| Msg::Stop(unbounded()))),
                    };
                    match msg {
                        None => {
                            for line in holder.expire(Instant::now()) {
                                tracing::info!("{line}");
                            }
                            if let (true, Some(wants)) = (holder.retry_due(), &last) {
                                let reports = holder.reconcile(wants);
                                report(reports, holder.notes());
                            }
                        }
                        Some(Msg::Stop(until)) => break until,
                        Some(first @ (Msg::Wants(_) | Msg::Events)) => {
                            // Only the newest wants matter: skip those already replaced.
                            // A watched cgroup changed: the last wants again (a watch
                            // exists only for a hold some wants made).
                            let mut wants = match (first, &last) {
                                (Msg::Wants(w), _) => w,
                                (_, Some(l)) => l.clone(),
                                (_, None) => continue,
                            };
                            let mut stop = None;
                            while let Ok(m) = rx.try_recv() {
                                match m {
                                    Msg::Wants(w) => wants = w,
                                    Msg::Events => {}
                                    Msg::Stop(until) => stop = Some(until),
                                }
                            }
                            if let Some(until) = stop {
                                break until;
                            }
                            let reports = holder.reconcile(&wants);
                            last = Some(wants);
                            for line in holder.expire(Instant::now()) {
                                tracing::info!("{line}");
                            }
                            report(reports, holder.notes());
                        }
                    }
                };
                match holder.keep_for_restart() {
                    Some(lines) => lines.iter().for_each(|l| tracing::info!("{l}")),
                    None => {
                        for line in holder.release_all(until) {
                            tracing::warn!("{line}");
                        }
                    }
                }
                done_here.store(true, Ordering::Release);
                ended();
            })?;
        Ok(HolderThread {
            tx,
            join: Some(join),
            done,
        })
    }

    /// Asks for these units held (the newest ask wins).
    pub fn want(&self, wants: Vec<Want>) {
        let _ = self.tx.send(Msg::Wants(wants));
    }

    /// Asks the thread to undo what is held, one hold after another for at most
    /// `release` (what is left stays in the journal for the next start), and end;
    /// returns at once (the undoing calls systemd, which can wait).
    /// [`HolderThread::ended`] says when it is done.
    pub fn stop(&self, release: Duration) {
        let _ = self.tx.send(Msg::Stop(Instant::now() + release));
    }

    /// Whether the thread has undone everything and ended (it is then joined).
    pub fn ended(&mut self) -> bool {
        // A thread that panicked has ended too, without saying so.
        let finished = self.join.as_ref().is_none_or(JoinHandle::is_finished);
        if !self.done.load(Ordering::Acquire) && !finished {
            return false;
        }
        // It has nothing left to do but return: the join is immediate.
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
        true
    }
}
