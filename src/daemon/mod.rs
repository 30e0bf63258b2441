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
//! loop. Nothing on the loop thread sleeps or waits for another thread (the holder's
//! undoing at exit included, see [`shell`]); each step is timed, and one over a second
//! is logged naming it ([`steps`]).
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
pub mod steps;
pub mod watchers;
pub mod worker;

pub use shell::{run, DaemonError, Options};
pub use state::event::{Event, ReloadCause};
pub use state::State;
