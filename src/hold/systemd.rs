//! pinnerd's client of systemd's manager (`org.freedesktop.systemd1` on the system bus):
//! which unit a process runs in, a unit's `AllowedCPUs=`/`AllowedMemoryNodes=` (set at
//! run time, as `systemctl set-property --runtime` does), adopting a process into a
//! transient scope (as `systemd-run --scope` does) and v261's `CPUSetPartition=`.
//!
//! Also the runtime drop-ins those calls leave ([`dropin`]): read before a hold and put
//! back as they were when it lets go, so that the unit follows its files again.
//!
//! Owns: the [`Units`] seam, the calls to systemd behind it ([`client`], generated
//! `#[zbus::proxy]` traits), the `ay` bitmask encoding and those drop-in files. Must not
//! touch: cgroupfs (that is `cgroup`), affinity, the daemon's bus object, any other
//! drop-in (`systemctl revert` would remove the administrator's too).
//!
//! ```text
//! caller (a plain thread) ──► Units ──► SystemdUnits ──► zbus Connection ──► systemd1
//!                                         (own current-thread runtime, block_on per call)
//! ```
//!
//! Synchronous: zbus 6 has no blocking API any more, so a [`SystemdUnits`] owns a
//! current-thread tokio runtime and runs each call to completion on it (why not the
//! daemon's: see [`client`]). The connection's tasks run only inside those calls;
//! signals that arrive in between wait in the socket. Call it from a plain thread: from
//! a tokio task it refuses ([`UnitError::Refused`]).
//!
//! Bounded: every D-Bus call gives up after the connection's method timeout (5 s), the
//! wait for a job systemd runs after [`JOB_WAIT_CALLS`] of those (30 s), and a whole
//! method of [`Units`] after [`OUTER_BOUND_CALLS`] timeouts (with the job's wait, for a
//! method that runs one), so a hung systemd never hangs the caller.

mod client;
mod dropin;
#[cfg(test)]
mod tests;

use std::time::Duration;

use zbus::Variant;

use crate::cpuset::CpuSet;

#[cfg(test)]
use crate::cpuset::MAX_CPU_ID;
#[cfg(test)]
use client::checked_mask;
pub use client::SystemdUnits;
pub use dropin::{
    read_runtime_dropin, restore_runtime_dropin, runtime_dropin, runtime_dropin_dir,
    HELD_PROPERTIES, RUNTIME_CONTROL, RUNTIME_TRANSIENT,
};

/// How long one D-Bus call (and the wait for a job) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A method of [`Units`] makes at most this many bounded calls or waits in a row
/// (`adopt`: the match rule, the start, the job); the whole method is cut off after this
/// many timeouts (plus [`JOB_WAIT_CALLS`] for one that waits for a job), whatever zbus
/// does besides.
pub const OUTER_BOUND_CALLS: u32 = 4;

/// A job systemd runs for pinnerd (the partition helper unit, an adopted scope's start)
/// is waited for this many call timeouts: 30 s. The helper execs pinnerd once, which on
/// a loaded machine (an emulated VM beside other builds) did not finish within one call
/// timeout (5 s). The wait is on the holder's thread, never on the daemon's loop; a job
/// that takes longer counts as a refusal, tried again after the holder's backoff.
pub const JOB_WAIT_CALLS: u32 = 6;

/// systemd's `UNIT_NAME_MAX` less the terminating NUL.
pub const UNIT_NAME_MAX: usize = 255;

/// The unit types that have a cgroup, and the interface their cgroup properties are on.
const CGROUP_UNIT_TYPES: [(&str, &str); 6] = [
    (".service", "org.freedesktop.systemd1.Service"),
    (".scope", "org.freedesktop.systemd1.Scope"),
    (".slice", "org.freedesktop.systemd1.Slice"),
    (".socket", "org.freedesktop.systemd1.Socket"),
    (".mount", "org.freedesktop.systemd1.Mount"),
    (".swap", "org.freedesktop.systemd1.Swap"),
];

/// A systemd unit a process runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitInfo {
    /// The unit's `Id`, e.g. `md-feed.service`, `session-3.scope`.
    pub name: String,
    /// `ControlGroup`, e.g. `/system.slice/md-feed.service`.
    pub cgroup: String,
    /// `Slice`, e.g. `system.slice`.
    pub slice: String,
    /// `Delegate`: the unit's subtree is its own (containers' scopes have it).
    pub delegate: bool,
    /// A service's `MainPID` (none for other units, or a service without one now).
    pub main_pid: Option<u32>,
}

/// `AllowedCPUs`/`AllowedMemoryNodes` (or the `Effective*` ones): empty = not set / none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    pub cpus: CpuSet,
    pub mems: CpuSet,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum UnitError {
    /// No systemd on the bus (no system bus, or org.freedesktop.systemd1 not there).
    #[error("systemd is not on the system bus: {0}")]
    NoSystemd(String),
    /// A call failed; names the unit (or pid) and the call, and systemd's error name+message.
    #[error("{what}: {message}")]
    Call { what: String, message: String },
    /// The process or unit the call named is not (any more) there: a race, not a fault.
    #[error("{what}: gone ({message})")]
    Gone { what: String, message: String },
    /// An argument refused before anything was put on the bus.
    #[error("{what} refused: {reason}")]
    Refused { what: String, reason: &'static str },
}

/// systemd's manager, as pinnerd uses it: the real one is [`SystemdUnits`].
pub trait Units: Send {
    /// `GetUnitByPID`, then the unit's `Id`, `ControlGroup`, `Slice` and `Delegate`.
    fn unit_of_pid(&self, pid: u32) -> Result<UnitInfo, UnitError>;
    /// The unit's `AllowedCPUs` / `AllowedMemoryNodes`.
    fn allowed(&self, unit: &str) -> Result<Allowed, UnitError>;
    /// The unit's `EffectiveCPUs` / `EffectiveMemoryNodes`.
    fn effective(&self, unit: &str) -> Result<Allowed, UnitError>;
    /// `SetUnitProperties(unit, runtime = true, …)`; `None` leaves a property alone,
    /// `Some(empty set)` resets it.
    fn set_allowed(
        &self,
        unit: &str,
        cpus: Option<&CpuSet>,
        mems: Option<&CpuSet>,
    ) -> Result<(), UnitError>;
    /// `StartTransientUnit(scope, "fail", …)` with `PIDs=[pid]`, and waits (bounded) for
    /// the job: `JobRemoved`'s result `done` is success, any other result an error.
    fn adopt(
        &self,
        scope: &str,
        slice: &str,
        pid: u32,
        allowed: &Allowed,
        description: &str,
    ) -> Result<(), UnitError>;
    /// The unit's `CPUSetPartition` where this systemd has it (v261+), else `None`.
    fn partition_property(&self, unit: &str) -> Result<Option<String>, UnitError>;
    /// `SetUnitProperties(unit, runtime = true, CPUSetPartition = value)`.
    fn set_partition(&self, unit: &str, value: &str) -> Result<(), UnitError>;
    /// `StartUnit(unit, "replace")` of a oneshot service, waiting (bounded) for its job:
    /// `done` is success, any other result an error.
    fn run_oneshot(&self, unit: &str) -> Result<(), UnitError>;
    /// Every process of the unit (`GetUnitProcesses`), its sub-cgroups' too.
    fn processes(&self, unit: &str) -> Result<Vec<u32>, UnitError>;
    /// Whether the unit of process `pid` is being restarted: a `restart` (or
    /// `try-restart`, `reload-or-restart`) job of it is queued or running, as during
    /// `systemctl restart` or a package upgrade.
    fn restarting(&self, pid: u32) -> Result<bool, UnitError> {
        let _ = pid;
        Ok(false)
    }
    /// The runtime drop-in `SetUnitProperties(unit, runtime = true, property = …)`
    /// writes (see [`runtime_dropin`]): its text, `None` when there is none.
    fn runtime_dropin(&self, unit: &str, property: &str) -> Result<Option<String>, UnitError> {
        let _ = (unit, property);
        Ok(None)
    }
    /// Puts that drop-in back as it was: `text`, or none at all. systemd already runs
    /// the unit with the values given back; the file decides what a `daemon-reload`
    /// gives it.
    fn restore_runtime_dropin(
        &self,
        unit: &str,
        property: &str,
        text: Option<&str>,
    ) -> Result<(), UnitError> {
        let _ = (unit, property, text);
        Ok(())
    }
}

/// The `ay` bitmask systemd uses for CPU and node sets: byte `i` bit `b` is CPU `8i + b`.
/// The empty set is the empty array ("not set").
pub fn cpus_to_mask(set: &CpuSet) -> Vec<u8> {
    let mut mask: Vec<u8> = set
        .as_words()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    while mask.last() == Some(&0) {
        mask.pop();
    }
    mask
}

/// The set an `ay` bitmask holds (see [`cpus_to_mask`]); trailing zero bytes are allowed.
pub fn mask_to_cpus(mask: &[u8]) -> CpuSet {
    let words = mask
        .chunks(8)
        .map(|chunk| {
            let mut bytes = [0u8; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(bytes)
        })
        .collect();
    CpuSet::from_words(words)
}

/// Checks `name` as systemd's `unit_name_is_valid` does, for the unit types that have a
/// cgroup; returns the interface the unit's cgroup properties are on.
pub fn unit_interface(name: &str) -> Result<&'static str, UnitError> {
    let refused = |reason| UnitError::Refused {
        what: format!("unit name {name:?}"),
        reason,
    };
    if name.len() > UNIT_NAME_MAX {
        return Err(refused("longer than 255 bytes"));
    }
    let Some(&(suffix, interface)) = CGROUP_UNIT_TYPES.iter().find(|(s, _)| name.ends_with(s))
    else {
        return Err(refused(
            "not a .service, .scope, .slice, .socket, .mount or .swap unit",
        ));
    };
    let prefix = &name[..name.len() - suffix.len()];
    if prefix.is_empty() || prefix.starts_with('@') {
        return Err(refused("no name before the type suffix"));
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c);
    if !prefix.chars().all(valid) {
        return Err(refused(
            "characters other than A-Z a-z 0-9 : - _ . \\ @ (a '/' among them)",
        ));
    }
    Ok(interface)
}

pub use super::names::{
    escape_path, partition_helper_unit, scope_name, unescape_path, PARTITION_HELPER,
};

/// A slice name for [`Units::adopt`]: a valid unit name ending in `.slice`.
fn check_slice(slice: &str) -> Result<(), UnitError> {
    match unit_interface(slice)? {
        "org.freedesktop.systemd1.Slice" => Ok(()),
        _ => Err(UnitError::Refused {
            what: format!("slice {slice:?}"),
            reason: "not a .slice unit",
        }),
    }
}

fn check_pid(pid: u32) -> Result<(), UnitError> {
    if pid == 0 {
        return Err(UnitError::Refused {
            what: "pid 0".to_string(),
            reason: "it names the caller, not a process",
        });
    }
    Ok(())
}

/// `Allowed`'s pair of masks as `SetUnitProperties` properties.
fn mask_properties(
    cpus_name: &'static str,
    cpus: Option<&CpuSet>,
    mems_name: &'static str,
    mems: Option<&CpuSet>,
) -> Vec<(&'static str, Variant<'static>)> {
    [(cpus_name, cpus), (mems_name, mems)]
        .into_iter()
        .filter_map(|(name, set)| Some((name, Variant::from(cpus_to_mask(set?)))))
        .collect()
}
