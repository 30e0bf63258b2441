//! Why a hold is not made, or not made whole: one [`HoldError`] for the room, the
//! errors of systemd ([`UnitError`]), of the cgroup files ([`Unable`]) and of a
//! process's owner ([`OwnerError`]) kept as they are until a report, the journal or
//! the log says them.
//!
//! Owns: the kinds and their words. Must not touch: what is done about them (`apply`).

use std::sync::Arc;

use crate::cpuset::CpuSet;

use super::partition::Unable;
use super::systemd::UnitError;

/// Why a process's hold is not made (or falls short of its rule): its `Display` is the
/// one line its report carries.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HoldError {
    /// A call to systemd failed, or systemd is not there.
    #[error(transparent)]
    Unit(#[from] UnitError),
    /// The cgroup files refuse the partition (or cannot isolate at all).
    #[error(transparent)]
    Partition(#[from] Unable),
    /// The process's owner cannot be told.
    #[error(transparent)]
    Owner(#[from] OwnerError),
    /// The rule does not vouch for the process (see `vouch`), in its words.
    #[error("{0}")]
    Unvouched(String),
    /// The process runs where pinnerd confines nothing (`init.scope`, the root).
    #[error("pid {pid} runs in {unit} (cgroup {cgroup:?}), which pinnerd does not confine")]
    NotConfinable {
        pid: u32,
        unit: String,
        cgroup: String,
    },
    /// The process runs in a unit that is neither a service nor a scope.
    #[error("pid {pid} runs in {unit}, not in a service or a scope")]
    NotAServiceOrScope { pid: u32, unit: String },
    /// Another rule holds the unit.
    #[error("unit {unit} is already held for rule {rule}")]
    HeldForAnother { unit: String, rule: String },
    /// Another unit holds some of the CPUs, and one of the two isolates them.
    #[error(
        "CPUs {cpus} are held for {unit} (rule {rule}){}: a CPU is held for one unit at a time where one of them isolates it",
        if *.isolating { " as an isolated partition" } else { "" }
    )]
    Clash {
        cpus: CpuSet,
        unit: String,
        rule: String,
        /// The other unit's hold is (or is to be) an isolated partition.
        isolating: bool,
    },
    /// Some of the CPUs are a partition whose undo waits for the kernel.
    #[error("CPUs {cpus} are still a partition of {cgroup} being undone")]
    BeingUndone { cpus: CpuSet, cgroup: String },
    /// systemd confined the unit to other CPUs than asked.
    #[error("systemd gives unit {unit} CPUs {got} instead of {want}")]
    NotGiven {
        unit: String,
        got: CpuSet,
        want: CpuSet,
    },
    /// The unit's cgroup emptied and its partition was undone then.
    #[error("unit {unit} has no process left: its partition was undone before its cgroup goes")]
    Emptied { unit: String },
    /// The unit is held, its partition refused when the hold was made.
    #[error("the partition was refused earlier")]
    RefusedEarlier,
}

/// Why a process's owner cannot be told (see `vouch::owner_of`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum OwnerError {
    /// The process is gone: a race, not a fault.
    #[error("pid {pid} has exited")]
    Exited { pid: u32 },
    /// Its status file cannot be read.
    #[error("pid {pid}: cannot read {path}: {error}")]
    Unreadable {
        pid: u32,
        path: String,
        error: Arc<std::io::Error>,
    },
    /// Its status file has no `Uid:` line.
    #[error("pid {pid}: no Uid line in {path}")]
    NoUid { pid: u32, path: String },
}
