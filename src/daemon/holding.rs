//! The holder's thread: systemd calls can wait (up to their timeout), so units are
//! held off the loop, one reconcile at a time, the newest wants first.
//!
//! ```text
//!   loop ─Action::Hold(wants)─► HolderThread::want ─► (newest replaces waiting) ─►
//!        pinnerd-hold thread: Holder::reconcile ─► Event::Held(reports) ─► loop
//!   Holder::deadline ─► recovered holds expire; a refused hold due: the last wants
//!        reconciled again ─► Event::Held(reports) ─► loop
//!   exit ─► HolderThread::stop: holds undone until a deadline (the rest stay in the
//!        journal), then the thread ends; waited for at most a bound
//! ```
//!
//! The loop never waits on this thread but at exit: `want` only sends, the reports
//! come back as events.
//!
//! Must not touch: daemon state. The thread holds and reports, nothing else.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hold::{HoldReport, Holder, Want};

enum Msg {
    Wants(Vec<Want>),
    /// Undo everything held until this deadline, then end.
    Stop(Instant),
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
}

impl HolderThread {
    /// Starts the thread: it first recovers what a previous run left (see
    /// [`Holder::recover`]), then reconciles every want it is sent and hands the
    /// reports to `report`.
    pub fn start(
        make: impl FnOnce() -> Holder + Send + 'static,
        report: impl Fn(Vec<HoldReport>) + Send + 'static,
    ) -> std::io::Result<HolderThread> {
        let (tx, rx) = mpsc::channel::<Msg>();
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
                                report(holder.reconcile(wants));
                            }
                        }
                        Some(Msg::Stop(until)) => break until,
                        Some(Msg::Wants(mut wants)) => {
                            // Only the newest wants matter: skip those already replaced.
                            let mut stop = None;
                            while let Ok(m) = rx.try_recv() {
                                match m {
                                    Msg::Wants(w) => wants = w,
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
                            report(reports);
                        }
                    }
                };
                for line in holder.release_all(until) {
                    tracing::warn!("{line}");
                }
            })?;
        Ok(HolderThread {
            tx,
            join: Some(join),
        })
    }

    /// Asks for these units held (the newest ask wins).
    pub fn want(&self, wants: Vec<Want>) {
        let _ = self.tx.send(Msg::Wants(wants));
    }

    /// Undoes what is held, one hold after another for at most `release` (what is left
    /// stays in the journal for the next start), and waits for the thread, at most
    /// `limit` (a hold being undone at the deadline may take a few seconds more; cut
    /// off, it is still in the journal).
    pub fn stop(&mut self, release: Duration, limit: Duration) {
        let _ = self.tx.send(Msg::Stop(Instant::now() + release));
        let Some(join) = self.join.take() else { return };
        let until = Instant::now() + limit;
        while !join.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if join.is_finished() {
            let _ = join.join();
        } else {
            tracing::warn!(
                "the holder did not finish undoing in time; its journal is left for the next start"
            );
        }
    }
}
