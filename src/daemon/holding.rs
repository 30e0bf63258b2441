//! The holder's thread: systemd calls can wait (up to their timeout), so units are
//! held off the loop, one reconcile at a time, the newest wants first.
//!
//! ```text
//!   loop ─Action::Hold(wants)─► HolderThread::want ─► (newest replaces waiting) ─►
//!        pinnerd-hold thread: Holder::reconcile ─► Event::Held(reports) ─► loop
//!   exit ─► HolderThread::stop (returns at once): everything held is undone on the
//!           thread, which then calls `ended` (the loop's doorbell) and ends; the loop
//!           goes on answering until `HolderThread::ended` says so, or its bound passes
//! ```
//!
//! Nothing here waits on the caller's thread: the loop that owns a `HolderThread` is
//! the thread that pings systemd's watchdog and answers the bus.
//!
//! Must not touch: daemon state. The thread holds and reports, nothing else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::hold::{HoldReport, Holder, Want};

enum Msg {
    Wants(Vec<Want>),
    Stop,
}

/// The holder of a daemon: systemd on the system bus, the cgroup v2 hierarchy under
/// `root`, the journal in `runtime_dir`.
pub fn system_holder(root: &crate::sysroot::SysRoot, runtime_dir: &std::path::Path) -> Holder {
    let connect = || {
        crate::hold::systemd::SystemdUnits::system()
            .map(|u| Box::new(u) as Box<dyn crate::hold::systemd::Units>)
            .map_err(|e| e.to_string())
    };
    Holder::new(
        connect(),
        crate::hold::partition::Cgroup2::find(root),
        crate::hold::Journal::new(runtime_dir),
        Box::new(crate::hold::give_back_masks),
    )
    .reconnecting(Box::new(connect))
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
    /// reports to `report`. Once stopped and everything is undone it calls `ended`
    /// (which wakes the loop) and ends.
    pub fn start(
        make: impl FnOnce() -> Holder + Send + 'static,
        report: impl Fn(Vec<HoldReport>) + Send + 'static,
        ended: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<HolderThread> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let done = Arc::new(AtomicBool::new(false));
        let done_here = done.clone();
        let join = std::thread::Builder::new()
            .name("pinnerd-hold".into())
            .spawn(move || {
                // Connecting to systemd can wait too: on this thread, not the loop.
                let mut holder = make();
                for line in holder.recover(Instant::now()) {
                    tracing::info!("{line}");
                }
                if let Some(why) = holder.cannot_isolate() {
                    tracing::info!(reason = %why, "isolate = true cannot isolate on this machine");
                }
                loop {
                    let msg = match holder.deadline() {
                        Some(at) => {
                            match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                                Ok(m) => Some(m),
                                Err(mpsc::RecvTimeoutError::Timeout) => None,
                                Err(mpsc::RecvTimeoutError::Disconnected) => Some(Msg::Stop),
                            }
                        }
                        None => Some(rx.recv().unwrap_or(Msg::Stop)),
                    };
                    match msg {
                        None => {
                            for line in holder.expire(Instant::now()) {
                                tracing::info!("{line}");
                            }
                        }
                        Some(Msg::Stop) => break,
                        Some(Msg::Wants(mut wants)) => {
                            // Only the newest wants matter: skip those already replaced.
                            let mut stop = false;
                            while let Ok(m) = rx.try_recv() {
                                match m {
                                    Msg::Wants(w) => wants = w,
                                    Msg::Stop => stop = true,
                                }
                            }
                            if stop {
                                break;
                            }
                            let reports = holder.reconcile(&wants);
                            for line in holder.expire(Instant::now()) {
                                tracing::info!("{line}");
                            }
                            report(reports);
                        }
                    }
                }
                holder.release_all();
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

    /// Asks the thread to undo everything held and end; returns at once (the undoing
    /// calls systemd, which can wait). [`HolderThread::ended`] says when it is done.
    pub fn stop(&self) {
        let _ = self.tx.send(Msg::Stop);
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
