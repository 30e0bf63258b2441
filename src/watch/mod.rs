//! Process events (proc connector), /proc rescans and CPU hotplug (uevents).
//!
//! Owns: the netlink sockets ([`connector`], [`uevent`]) and reading process
//! snapshots from procfs ([`scan`]). Produces plain data for the `manager`.
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
