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
//! [`state::State`] is the only owner of daemon state. Its handler is a plain synchronous
//! function, so unit tests drive it without a bus, a runtime or timers. [`shell`] wires
//! the real sources to it: the kernel sockets are read on the loop thread itself (see
//! [`watchers`]), so a process event reaches the manager without a thread hop; a tokio
//! runtime on worker threads serves D-Bus, signals and inotify; measurements run on
//! named OS threads.
//!
//! Must not touch: the bus (see `dbus`), spin pairs (see `measure`), per-thread syscalls
//! (see `affinity`), rule syntax (see `rules`).

pub mod shell;
pub mod sources;
pub mod state;
pub mod watchers;
pub mod worker;

use std::path::PathBuf;

use tokio::sync::oneshot;

use crate::cpuset::CpuSet;

pub use shell::{run, Options};
pub use state::State;

/// The daemon's phase, as the `State` property shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Phase {
    /// Not ready yet: the rules or the bus name are not in place.
    #[default]
    Starting,
    /// A full measurement is running.
    Measuring,
    /// Rules are applied with the best information available.
    Ready,
    /// Working, with less than it should have: no proc events (rescans only), or no
    /// matrix because measuring failed.
    Degraded,
}

impl Phase {
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Measuring => "measuring",
            Phase::Ready => "ready",
            Phase::Degraded => "degraded",
        }
    }
}

/// What the loop publishes for readers (the D-Bus properties). Reading it never waits for
/// the loop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub version: String,
    pub state: Phase,
    /// µs since the epoch; 0 = never.
    pub measured_at_us: u64,
    pub fingerprint: String,
    pub cpu_count: u32,
    pub rule_count: u32,
    pub managed_processes: u32,
    pub managed_threads: u32,
    pub rule_errors: Vec<String>,
}

impl Snapshot {
    /// What readers see before the loop has published anything.
    pub fn starting() -> Self {
        Snapshot {
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..Snapshot::default()
        }
    }
}

/// One managed process, as `ListManaged` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEntry {
    pub pid: u32,
    pub comm: String,
    pub rule: String,
    pub cpus: String,
    pub state: String,
}

impl ManagedEntry {
    pub fn into_tuple(self) -> (u32, String, String, String, String) {
        (self.pid, self.comm, self.rule, self.cpus, self.state)
    }
}

/// A request from a client, already checked for size and privilege by `dbus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Remeasure,
    Reload,
    GetMatrix,
    ListManaged,
    Explain {
        pid: u32,
    },
    Plan {
        count: u32,
        policy: String,
        smt: String,
    },
    Pin {
        pid: u32,
        count: u32,
        policy: String,
        smt: String,
    },
    Release {
        pid: u32,
    },
}

/// The answer to a [`Command`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Job(u64),
    Reloaded {
        rules: u32,
        errors: Vec<String>,
    },
    Matrix {
        cpus: Vec<u32>,
        latency_ns: Vec<Vec<f64>>,
    },
    Managed(Vec<ManagedEntry>),
    Text(String),
    Cpus(CpuSet),
    Done,
}

/// Why a command failed, in words for the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("{0}")]
    InvalidArgs(String),
    #[error("pid {0}: no such process")]
    NoSuchProcess(u32),
    #[error("pid {0}: not pinned by PinProcess")]
    NotManaged(u32),
    #[error("{0}")]
    Failed(String),
}

/// Why rules are being reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadCause {
    Signal,
    Inotify,
    Bus,
}

/// Everything the loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// A D-Bus command; the reply goes back on the oneshot.
    Command(Command, oneshot::Sender<Result<Reply, CommandError>>),
    /// SIGHUP or a change in a rule directory.
    Reload(ReloadCause),
    /// SIGTERM or SIGINT: restore masks and exit.
    Terminate,
    /// The loop's once-a-second clock; periodic work is due-checked against it.
    Tick(std::time::Instant),
    /// A measurement job ended.
    Measured(worker::Outcome),
    /// Messages from the proc connector, in order.
    Proc(Vec<crate::watch::ProcMsg>),
    /// A CPU went online or offline (the online set is re-read from sysfs).
    Hotplug,
    /// The proc connector is subscribed (`Ok`), or cannot be (`Err`: rescans only).
    Watch(Result<(), String>),
}

/// Errors that stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The settings file is invalid (maps to the config-error exit code).
    #[error("{0}")]
    Config(String),
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
