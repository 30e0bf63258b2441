//! Process events (proc connector), /proc rescans and CPU hotplug (uevents).
//!
//! Owns: the netlink sockets ([`connector`], [`uevent`]) and reading process
//! snapshots from procfs ([`scan`]). Produces plain data for the `manager`. Also which
//! directory a rule-directory path leads to ([`rule_dirs`]), for the rule watcher.
//!
//! Must not touch: affinity (see `affinity`), rule decisions (see `rules`, `manager`).
//!
//! ```text
//! kernel ──FORK/EXEC/COMM/EXIT──► connector ──ProcMsg──►┐
//! /proc ──────── scan (cheap stat pass, then snapshots) ─►├─► manager
//! kernel ──online/offline uevent──► uevent ──CpuChange──►┘
//! ```
//!
//! The connector can be missing (containers, `PrivateNetwork=yes`, non-initial
//! namespaces): then the daemon lives on periodic rescans alone, and says so.

pub mod connector;
pub mod rule_dirs;
pub mod scan;
pub mod uevent;

pub use connector::{Connector, ProcMsg};
pub use scan::{ProcEntry, ProcFs, ProcSource, ProcessSnapshot};
pub use uevent::{CpuChange, UeventSocket};

use std::path::PathBuf;
use std::time::Duration;

/// Errors of the event sources and the procfs reader; each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("proc connector: {what} failed: {source}")]
    Connector {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "proc connector: the kernel did not acknowledge the subscription within {timeout:?} \
         (it ignores subscribers outside the initial namespaces); falling back to rescans"
    )]
    ConnectorSilent { timeout: Duration },
    #[error("uevent socket: {what} failed: {source}")]
    Uevent {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot parse: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// Whether `fd` has something to read within `timeout` (`poll` for `POLLIN`).
fn readable_within(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd, for the length of the call.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}
