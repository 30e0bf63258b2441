//! The daemon: one event loop owning all state.
//!
//! ```text
//!                              ┌─ main thread ──────────────────────────────┐
//!  proc connector ────────────►│ poll(2): connector, uevent, doorbell,      │  actions  ┌─ signals (dbus::emit)
//!  uevent hotplug ────────────►│          1 s tick                          │─────────►├─ measurement job thread
//!  inotify, debounced ──┐      │                                            │          ├─ sd_notify STATUS/WATCHDOG/…
//!  SIGHUP / SIGTERM ────┼─────►│ bounded channel (rings the doorbell)       │          └─ exit
//!  D-Bus calls ─────────┤      │   └► State::handle(ev): sync, drives the   │
//!  measurement results ─┘      │      manager                               │
//!                              └────────────────────────────────────────────┘
//!                                                    │ Snapshot (watch) ──► D-Bus properties, PropertiesChanged
//! ```
//!
//! [`state::State`] is the only owner of daemon state; [`schedule::Schedule`] is its
//! measurement timetable (job ids, joins, periodic full measurements and drift probes). Its handler is a plain synchronous
//! function, so unit tests drive it without a bus, a runtime or timers. [`shell`] wires
//! the real sources to it: the kernel sockets are read on the loop thread itself (see
//! [`watchers`]), so a process event reaches the manager without a thread hop; a tokio
//! runtime on worker threads serves D-Bus, signals and inotify; measurements run on
//! named OS threads; reads that can wait on a process's locks (command lines,
//! `numa_maps`) run on [`readers`], so nothing a process does to itself can hold the
//! loop.
//!
//! Must not touch: the bus (see `dbus`), spin pairs (see `measure`), per-thread syscalls
//! (see `affinity`), rule syntax (see `rules`).

pub mod holding;
pub mod readers;
pub mod replan;
pub mod schedule;
pub mod shell;
pub mod sources;
pub mod state;
pub mod watchers;
pub mod worker;

use std::path::PathBuf;

pub use shell::{run, Options};
pub use state::event::{Event, ReloadCause};
pub use state::State;

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
