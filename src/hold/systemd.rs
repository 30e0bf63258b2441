//! pinnerd's client of systemd's manager (`org.freedesktop.systemd1` on the system bus):
//! which unit a process runs in, a unit's `AllowedCPUs=`/`AllowedMemoryNodes=` (set at
//! run time, as `systemctl set-property --runtime` does), adopting a process into a
//! transient scope (as `systemd-run --scope` does) and v261's `CPUSetPartition=`.
//!
//! Also the runtime drop-ins those calls leave (`/run/systemd/system.control/UNIT.d/
//! 50-PROPERTY.conf`, "created via systemctl set-property"; a transient unit's under
//! `/run/systemd/transient`): read before a hold and put back as they were when it lets
//! go, so that the unit follows its files again.
//!
//! Owns: the calls to systemd, the `ay` bitmask encoding and those drop-in files. Must
//! not touch: cgroupfs (that is `cgroup`), affinity, the daemon's bus object, any other
//! drop-in (`systemctl revert` would remove the administrator's too).
//!
//! ```text
//! caller (a plain thread) ──► Units ──► SystemdUnits ──► zbus Connection ──► systemd1
//!                                         (own current-thread runtime, block_on per call)
//! ```
//!
//! Synchronous: zbus 6 has no blocking API any more, so a [`SystemdUnits`] owns a
//! current-thread tokio runtime and runs each call to completion on it. The connection's
//! tasks run only inside those calls; signals that arrive in between wait in the socket.
//! Call it from a plain thread: from a tokio task it refuses ([`UnitError::Refused`]).
//!
//! Bounded: every D-Bus call gives up after the connection's method timeout (5 s), the
//! wait for a job systemd runs after [`JOB_WAIT_CALLS`] of those (30 s), and a whole
//! method of [`Units`] after [`OUTER_BOUND_CALLS`] timeouts (with the job's wait, for a
//! method that runs one), so a hung systemd never hangs the caller.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::message::Type as MessageType;
use zbus::{Connection, MatchRule, Message, MessageStream, OwnedObjectPath, OwnedVariant, Variant};

use crate::cpuset::{CpuSet, MAX_CPU_ID};

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

const SYSTEMD: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const SERVICE: &str = "org.freedesktop.systemd1.Service";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// The unit types that have a cgroup, and the interface their cgroup properties are on.
const CGROUP_UNIT_TYPES: [(&str, &str); 6] = [
    (".service", "org.freedesktop.systemd1.Service"),
    (".scope", "org.freedesktop.systemd1.Scope"),
    (".slice", "org.freedesktop.systemd1.Slice"),
    (".socket", "org.freedesktop.systemd1.Socket"),
    (".mount", "org.freedesktop.systemd1.Mount"),
    (".swap", "org.freedesktop.systemd1.Swap"),
];

/// Error names that mean the process or unit is not (any more) there.
const GONE_ERRORS: [&str; 4] = [
    "org.freedesktop.systemd1.NoSuchUnit",
    "org.freedesktop.systemd1.NoUnitForPID",
    "org.freedesktop.DBus.Error.UnixProcessIdUnknown",
    "org.freedesktop.DBus.Error.UnknownObject",
];

/// Error names that mean systemd is not on the bus.
const ABSENT_ERRORS: [&str; 2] = [
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
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

#[derive(Debug, thiserror::Error)]
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

/// Where systemd keeps the drop-ins of properties set at run time (`systemctl
/// set-property --runtime`, `SetUnitProperties(runtime = true)`) for the system manager.
pub const RUNTIME_CONTROL: &str = "/run/systemd/system.control";

/// Where systemd keeps transient units (`systemd-run`, scopes) with their drop-ins: a
/// property a transient unit is given at run time goes there, not to
/// [`RUNTIME_CONTROL`], and goes with the unit.
pub const RUNTIME_TRANSIENT: &str = "/run/systemd/transient";

/// The directory of `unit`'s runtime drop-ins: [`RUNTIME_TRANSIENT`] for a transient
/// unit (its unit file is there), else [`RUNTIME_CONTROL`].
pub fn runtime_dropin_dir(unit: &str) -> std::path::PathBuf {
    let transient = std::path::Path::new(RUNTIME_TRANSIENT);
    if !unit.contains('/') && transient.join(unit).is_file() {
        transient.to_path_buf()
    } else {
        std::path::PathBuf::from(RUNTIME_CONTROL)
    }
}

/// The properties whose runtime drop-ins a hold can leave.
pub const HELD_PROPERTIES: [&str; 3] = ["AllowedCPUs", "AllowedMemoryNodes", "CPUSetPartition"];

/// `DIR/UNIT.d/50-PROPERTY.conf`: the drop-in systemd writes for `property` of `unit`
/// set at run time. A unit name that could leave `dir` is refused.
pub fn runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
) -> Result<std::path::PathBuf, UnitError> {
    if unit.is_empty() || unit.starts_with('.') || unit.contains('/') || unit.contains('\0') {
        return Err(UnitError::Refused {
            what: format!("the runtime drop-in of unit {unit:?}"),
            reason: "not a unit name",
        });
    }
    Ok(dir
        .join(format!("{unit}.d"))
        .join(format!("50-{property}.conf")))
}

/// The text of `unit`'s runtime drop-in for `property` under `dir`; `None` when absent.
pub fn read_runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
) -> Result<Option<String>, UnitError> {
    let path = runtime_dropin(dir, unit, property)?;
    match crate::sysroot::read_bounded(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UnitError::Call {
            what: path.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// Puts `unit`'s runtime drop-in for `property` under `dir` back to `text`: removed for
/// `None` (and its `UNIT.d` with it once empty), written for a text it does not have.
pub fn restore_runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
    text: Option<&str>,
) -> Result<(), UnitError> {
    let path = runtime_dropin(dir, unit, property)?;
    let failed = |e: std::io::Error| UnitError::Call {
        what: path.display().to_string(),
        message: e.to_string(),
    };
    match text {
        None => match std::fs::remove_file(&path) {
            Ok(()) => {
                // Only an empty directory goes: anything else in it is not pinnerd's.
                if let Some(d) = path.parent() {
                    let _ = std::fs::remove_dir(d);
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed(e)),
        },
        Some(t) => {
            if read_runtime_dropin(dir, unit, property)?.as_deref() == Some(t) {
                return Ok(());
            }
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d).map_err(failed)?;
            }
            std::fs::write(&path, t).map_err(failed)
        }
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

/// systemd's manager on a bus, called synchronously (see the module doc).
pub struct SystemdUnits {
    /// Dropped before the runtime it runs on.
    conn: Connection,
    /// `None` only while being dropped.
    runtime: Option<tokio::runtime::Runtime>,
    timeout: Duration,
}

impl SystemdUnits {
    /// The system bus; [`UnitError::NoSystemd`] when it or systemd1 is absent.
    pub fn system() -> Result<SystemdUnits, UnitError> {
        SystemdUnits::connect(zbus::connection::Builder::system(), CALL_TIMEOUT)
    }

    /// A bus at `address` (tests: a private `dbus-daemon`).
    pub fn at_address(address: &str) -> Result<SystemdUnits, UnitError> {
        SystemdUnits::at_address_with_timeout(address, CALL_TIMEOUT)
    }

    /// [`SystemdUnits::at_address`] with another bound per call.
    pub fn at_address_with_timeout(
        address: &str,
        timeout: Duration,
    ) -> Result<SystemdUnits, UnitError> {
        SystemdUnits::connect(zbus::connection::Builder::address(address), timeout)
    }

    fn connect(
        builder: zbus::connection::Builder<'_>,
        timeout: Duration,
    ) -> Result<SystemdUnits, UnitError> {
        refuse_inside_runtime()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| UnitError::Call {
                what: "starting the runtime for the system bus".to_string(),
                message: e.to_string(),
            })?;
        let build = builder.method_timeout(timeout).build();
        // The timer is made inside the runtime: tokio's timers need one current.
        let conn = match runtime.block_on(async { tokio::time::timeout(timeout, build).await }) {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(UnitError::NoSystemd(e.to_string())),
            Err(_) => {
                return Err(UnitError::NoSystemd(format!(
                    "the bus did not answer within {timeout:?}"
                )))
            }
        };
        let units = SystemdUnits {
            conn,
            runtime: Some(runtime),
            timeout,
        };
        units.block(units.check_systemd_present())?;
        Ok(units)
    }

    /// Runs `work` to completion on this connection's runtime, cut off after
    /// [`OUTER_BOUND_CALLS`] timeouts.
    fn block<T>(&self, work: impl Future<Output = Result<T, UnitError>>) -> Result<T, UnitError> {
        self.block_for(self.timeout * OUTER_BOUND_CALLS, work)
    }

    /// [`block`](Self::block) for a method that waits for a job: the job's wait added.
    fn block_job<T>(
        &self,
        work: impl Future<Output = Result<T, UnitError>>,
    ) -> Result<T, UnitError> {
        self.block_for(self.timeout * (OUTER_BOUND_CALLS + JOB_WAIT_CALLS), work)
    }

    fn block_for<T>(
        &self,
        bound: Duration,
        work: impl Future<Output = Result<T, UnitError>>,
    ) -> Result<T, UnitError> {
        refuse_inside_runtime()?;
        let Some(runtime) = &self.runtime else {
            return Err(UnitError::NoSystemd(
                "the connection is closing".to_string(),
            ));
        };
        runtime
            .block_on(async { tokio::time::timeout(bound, work).await })
            .unwrap_or_else(|_| {
                Err(UnitError::Call {
                    what: "a call to systemd".to_string(),
                    message: format!("not finished within {bound:?}"),
                })
            })
    }

    async fn check_systemd_present(&self) -> Result<(), UnitError> {
        let what = "NameHasOwner(org.freedesktop.systemd1)";
        let reply = self
            .conn
            .call_method(
                Some("org.freedesktop.DBus"),
                "/org/freedesktop/DBus",
                Some("org.freedesktop.DBus"),
                "NameHasOwner",
                &SYSTEMD,
            )
            .await
            .map_err(|e| UnitError::NoSystemd(format!("{what}: {e}")))?;
        match body::<bool>(what, &reply)? {
            true => Ok(()),
            false => Err(UnitError::NoSystemd(format!("{SYSTEMD} has no owner"))),
        }
    }

    /// A method call to systemd, its error unmapped (for callers that expect one).
    async fn call_raw<B>(
        &self,
        path: &str,
        interface: &str,
        method: &str,
        args: &B,
    ) -> Result<Message, zbus::Error>
    where
        B: serde::Serialize + zbus::DynamicType,
    {
        self.conn
            .call_method(Some(SYSTEMD), path, Some(interface), method, args)
            .await
    }

    async fn call<B>(
        &self,
        what: &str,
        path: &str,
        interface: &str,
        method: &str,
        args: &B,
    ) -> Result<Message, UnitError>
    where
        B: serde::Serialize + zbus::DynamicType,
    {
        self.call_raw(path, interface, method, args)
            .await
            .map_err(|e| self.call_error(what, e))
    }

    /// `GetUnit(name)`: the unit's object path.
    async fn unit_path(&self, unit: &str) -> Result<OwnedObjectPath, UnitError> {
        let what = format!("GetUnit({unit})");
        let reply = self
            .call(&what, MANAGER_PATH, MANAGER, "GetUnit", &unit)
            .await?;
        body(&what, &reply)
    }

    /// `Properties.Get(interface, name)` on a unit's object.
    async fn property<T>(
        &self,
        unit: &str,
        path: &OwnedObjectPath,
        interface: &str,
        name: &str,
    ) -> Result<T, UnitError>
    where
        T: TryFrom<OwnedVariant>,
    {
        let what = format!("Get {name} of {unit}");
        let reply = self
            .call(&what, path.as_str(), PROPERTIES, "Get", &(interface, name))
            .await?;
        variant_as(&what, body::<OwnedVariant>(&what, &reply)?)
    }

    /// A pair of bitmask properties (`AllowedCPUs`/`AllowedMemoryNodes`, or the
    /// effective ones) of a unit.
    async fn masks(&self, unit: &str, names: [&str; 2]) -> Result<Allowed, UnitError> {
        let interface = unit_interface(unit)?;
        let path = self.unit_path(unit).await?;
        let mut sets = [CpuSet::new(), CpuSet::new()];
        for (set, name) in sets.iter_mut().zip(names) {
            let mask: Vec<u8> = self.property(unit, &path, interface, name).await?;
            *set = checked_mask(&format!("Get {name} of {unit}"), &mask)?;
        }
        let [cpus, mems] = sets;
        Ok(Allowed { cpus, mems })
    }

    async fn unit_info(&self, pid: u32) -> Result<UnitInfo, UnitError> {
        let what = format!("GetUnitByPID({pid})");
        let reply = self
            .call(&what, MANAGER_PATH, MANAGER, "GetUnitByPID", &pid)
            .await?;
        let path: OwnedObjectPath = body(&what, &reply)?;
        let name: String = self
            .property(&format!("the unit of pid {pid}"), &path, UNIT, "Id")
            .await?;
        let interface = unit_interface(&name)?;
        let cgroup = self
            .property(&name, &path, interface, "ControlGroup")
            .await?;
        let slice = self.property(&name, &path, interface, "Slice").await?;
        let delegate = self.property(&name, &path, interface, "Delegate").await?;
        let main_pid = if interface == SERVICE {
            let pid: u32 = self.property(&name, &path, interface, "MainPID").await?;
            (pid != 0).then_some(pid)
        } else {
            None
        };
        Ok(UnitInfo {
            name,
            cgroup,
            slice,
            delegate,
            main_pid,
        })
    }

    /// Whether a restart job of the unit of `pid` is in `ListJobs`.
    async fn restarting_unit(&self, pid: u32) -> Result<bool, UnitError> {
        let unit = self.unit_info(pid).await?.name;
        let what = "ListJobs".to_string();
        let reply = self
            .call(&what, MANAGER_PATH, MANAGER, "ListJobs", &())
            .await?;
        type Job = (
            u32,
            String,
            String,
            String,
            OwnedObjectPath,
            OwnedObjectPath,
        );
        let jobs: Vec<Job> = body(&what, &reply)?;
        Ok(jobs
            .iter()
            .any(|(_, u, kind, _, _, _)| *u == unit && kind.ends_with("restart")))
    }

    /// `GetUnitProcesses(unit)`: every process of the unit's cgroup and below.
    async fn unit_processes(&self, unit: &str) -> Result<Vec<u32>, UnitError> {
        let what = format!("GetUnitProcesses({unit})");
        let reply = self
            .call(&what, MANAGER_PATH, MANAGER, "GetUnitProcesses", &unit)
            .await?;
        let rows: Vec<(String, u32, String)> = body(&what, &reply)?;
        Ok(rows.into_iter().map(|(_, pid, _)| pid).collect())
    }

    async fn set_properties(
        &self,
        unit: &str,
        properties: Vec<(&str, Variant<'_>)>,
    ) -> Result<(), UnitError> {
        let names: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
        let what = format!("SetUnitProperties({unit}, {})", names.join(", "));
        self.call(
            &what,
            MANAGER_PATH,
            MANAGER,
            "SetUnitProperties",
            &(unit, true, properties),
        )
        .await
        .map(drop)
    }

    async fn partition(&self, unit: &str) -> Result<Option<String>, UnitError> {
        let interface = unit_interface(unit)?;
        let path = self.unit_path(unit).await?;
        let what = format!("Get CPUSetPartition of {unit}");
        let args = (interface, "CPUSetPartition");
        match self.call_raw(path.as_str(), PROPERTIES, "Get", &args).await {
            Ok(reply) => variant_as(&what, body::<OwnedVariant>(&what, &reply)?).map(Some),
            Err(e) if error_name(&e).as_deref() == Some(UNKNOWN_PROPERTY) => Ok(None),
            Err(e) => Err(self.call_error(&what, e)),
        }
    }

    /// Starts the scope and waits for its job.
    async fn start_scope(&self, request: ScopeRequest<'_>) -> Result<(), UnitError> {
        let what = format!("StartTransientUnit({})", request.scope);
        let aux: Vec<(&str, Vec<(&str, Variant<'_>)>)> = Vec::new();
        let args = (request.scope, "fail", request.properties(), aux);
        self.run_job(&what, "StartTransientUnit", &args).await
    }

    /// Calls the manager's `method`, which answers with a job, and waits for the job to
    /// end. The `JobRemoved` match is in place before the call, so a job that ends
    /// before the call's reply arrives is still seen.
    async fn run_job<B>(&self, what: &str, method: &str, args: &B) -> Result<(), UnitError>
    where
        B: serde::Serialize + zbus::DynamicType,
    {
        let what = what.to_string();
        let rule = MatchRule::builder()
            .msg_type(MessageType::Signal)
            .sender(SYSTEMD)
            .path(MANAGER_PATH)
            .interface(MANAGER)
            .member("JobRemoved")
            .build()
            .map_err(|e| self.call_error(&what, e))?;
        let mut signals = MessageStream::for_match_rule(rule, &self.conn, None)
            .await
            .map_err(|e| self.call_error(&format!("{what}: AddMatch(JobRemoved)"), e))?;
        let reply = self
            .call(&what, MANAGER_PATH, MANAGER, method, args)
            .await?;
        let job: OwnedObjectPath = body(&what, &reply)?;
        let bound = self.timeout * JOB_WAIT_CALLS;
        let result = tokio::time::timeout(bound, job_result(&mut signals, &job)).await;
        match result {
            Ok(Some(result)) if result == "done" => Ok(()),
            Ok(Some(result)) => Err(UnitError::Call {
                what,
                message: format!("job {} finished with result {result:?}", job.as_str()),
            }),
            Ok(None) => Err(UnitError::Call {
                what,
                message: "the bus connection closed before the job finished".to_string(),
            }),
            Err(_) => Err(UnitError::Call {
                what,
                // Without the job's path: a refusal that recurs reads the same, and is
                // logged once.
                message: format!("the job was not finished within {bound:?}"),
            }),
        }
    }

    /// A zbus error as a [`UnitError`] naming `what` was called.
    fn call_error(&self, what: &str, e: zbus::Error) -> UnitError {
        let what = what.to_string();
        if let zbus::Error::InputOutput(io) = &e {
            if io.kind() == std::io::ErrorKind::TimedOut {
                let message = format!("no reply within {:?}", self.timeout);
                return UnitError::Call { what, message };
            }
        }
        let Some(name) = error_name(&e) else {
            return UnitError::Call {
                what,
                message: e.to_string(),
            };
        };
        let message = format!("{name}: {}", error_description(&e).unwrap_or_default());
        if GONE_ERRORS.contains(&name.as_str()) {
            UnitError::Gone { what, message }
        } else if ABSENT_ERRORS.contains(&name.as_str()) {
            UnitError::NoSystemd(format!("{what}: {message}"))
        } else {
            UnitError::Call { what, message }
        }
    }
}

const UNKNOWN_PROPERTY: &str = "org.freedesktop.DBus.Error.UnknownProperty";

/// The D-Bus error name of an error reply, if `e` is one.
fn error_name(e: &zbus::Error) -> Option<String> {
    use zbus::DBusError;
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        zbus::Error::FDO(fdo) if !matches!(**fdo, zbus::fdo::Error::ZBus(_)) => {
            Some(fdo.name().to_string())
        }
        _ => None,
    }
}

fn error_description(e: &zbus::Error) -> Option<String> {
    use zbus::DBusError;
    match e {
        zbus::Error::MethodError(_, description, _) => description.clone(),
        zbus::Error::FDO(fdo) => fdo.description().map(str::to_string),
        _ => None,
    }
}

/// The result of the job at `job` from the `JobRemoved(u id, o job, s unit, s result)`
/// signals on `signals`; `None` when the stream ends first. Signals of other jobs and
/// malformed ones are skipped.
async fn job_result(signals: &mut MessageStream, job: &OwnedObjectPath) -> Option<String> {
    while let Some(message) = signals.next().await {
        let Ok(message) = message else { continue };
        let body = message.body();
        let Ok((_, path, _, result)) = body.deserialize::<(u32, OwnedObjectPath, String, String)>()
        else {
            continue;
        };
        if &path == job {
            return Some(result);
        }
    }
    None
}

/// What `StartTransientUnit` is given for [`Units::adopt`].
struct ScopeRequest<'a> {
    scope: &'a str,
    slice: &'a str,
    pid: u32,
    allowed: &'a Allowed,
    description: &'a str,
}

impl ScopeRequest<'_> {
    fn properties(&self) -> Vec<(&str, Variant<'_>)> {
        let mut properties = vec![
            ("PIDs", Variant::from(vec![self.pid])),
            ("Slice", Variant::from(self.slice)),
            ("Description", Variant::from(self.description)),
        ];
        let cpus = (!self.allowed.cpus.is_empty()).then_some(&self.allowed.cpus);
        let mems = (!self.allowed.mems.is_empty()).then_some(&self.allowed.mems);
        properties.extend(mask_properties(
            "AllowedCPUs",
            cpus,
            "AllowedMemoryNodes",
            mems,
        ));
        properties.push(("CollectMode", Variant::from("inactive-or-failed")));
        properties
    }
}

/// A reply's body as `T`; a reply of another signature is a [`UnitError::Call`].
fn body<T>(what: &str, reply: &Message) -> Result<T, UnitError>
where
    T: for<'d> zbus::wire::DynamicDeserialize<'d>,
{
    let body = reply.body();
    body.deserialize::<T>().map_err(|e| UnitError::Call {
        what: what.to_string(),
        message: format!(
            "malformed reply (signature {:?}): {e}",
            body.signature().to_string()
        ),
    })
}

/// A property's value as `T`; a value of another type is a [`UnitError::Call`].
fn variant_as<T: TryFrom<OwnedVariant>>(what: &str, value: OwnedVariant) -> Result<T, UnitError> {
    let signature = value.value_signature().to_string();
    T::try_from(value).map_err(|_| UnitError::Call {
        what: what.to_string(),
        message: format!("malformed reply: a value of type {signature:?}"),
    })
}

/// [`mask_to_cpus`], refusing a mask with CPUs past [`MAX_CPU_ID`].
fn checked_mask(what: &str, mask: &[u8]) -> Result<CpuSet, UnitError> {
    let set = mask_to_cpus(mask);
    match set.last() {
        Some(last) if last > MAX_CPU_ID => Err(UnitError::Call {
            what: what.to_string(),
            message: format!("malformed reply: CPU {last} in a {}-byte mask", mask.len()),
        }),
        _ => Ok(set),
    }
}

fn refuse_inside_runtime() -> Result<(), UnitError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(UnitError::Refused {
            what: "a systemd call from a tokio task".to_string(),
            reason: "SystemdUnits blocks; call it from a plain thread",
        });
    }
    Ok(())
}

impl Drop for SystemdUnits {
    fn drop(&mut self) {
        // Dropping a runtime waits for its blocking work, which panics on a runtime
        // thread; there it is let go in the background instead.
        if let Some(runtime) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            }
        }
    }
}

impl Units for SystemdUnits {
    fn unit_of_pid(&self, pid: u32) -> Result<UnitInfo, UnitError> {
        check_pid(pid)?;
        self.block(self.unit_info(pid))
    }

    fn allowed(&self, unit: &str) -> Result<Allowed, UnitError> {
        unit_interface(unit)?;
        self.block(self.masks(unit, ["AllowedCPUs", "AllowedMemoryNodes"]))
    }

    fn effective(&self, unit: &str) -> Result<Allowed, UnitError> {
        unit_interface(unit)?;
        self.block(self.masks(unit, ["EffectiveCPUs", "EffectiveMemoryNodes"]))
    }

    fn set_allowed(
        &self,
        unit: &str,
        cpus: Option<&CpuSet>,
        mems: Option<&CpuSet>,
    ) -> Result<(), UnitError> {
        unit_interface(unit)?;
        let properties = mask_properties("AllowedCPUs", cpus, "AllowedMemoryNodes", mems);
        if properties.is_empty() {
            return Ok(());
        }
        self.block(self.set_properties(unit, properties))
    }

    fn run_oneshot(&self, unit: &str) -> Result<(), UnitError> {
        if unit_interface(unit)? != "org.freedesktop.systemd1.Service" {
            return Err(UnitError::Refused {
                what: format!("unit {unit:?}"),
                reason: "not a .service unit",
            });
        }
        let what = format!("StartUnit({unit})");
        self.block_job(self.run_job(&what, "StartUnit", &(unit, "replace")))
    }

    fn adopt(
        &self,
        scope: &str,
        slice: &str,
        pid: u32,
        allowed: &Allowed,
        description: &str,
    ) -> Result<(), UnitError> {
        if unit_interface(scope)? != "org.freedesktop.systemd1.Scope" {
            return Err(UnitError::Refused {
                what: format!("scope {scope:?}"),
                reason: "not a .scope unit",
            });
        }
        check_slice(slice)?;
        check_pid(pid)?;
        self.block_job(self.start_scope(ScopeRequest {
            scope,
            slice,
            pid,
            allowed,
            description,
        }))
    }

    fn partition_property(&self, unit: &str) -> Result<Option<String>, UnitError> {
        unit_interface(unit)?;
        self.block(self.partition(unit))
    }

    fn set_partition(&self, unit: &str, value: &str) -> Result<(), UnitError> {
        unit_interface(unit)?;
        self.block(self.set_properties(unit, vec![("CPUSetPartition", Variant::from(value))]))
    }

    fn processes(&self, unit: &str) -> Result<Vec<u32>, UnitError> {
        unit_interface(unit)?;
        self.block(self.unit_processes(unit))
    }

    fn runtime_dropin(&self, unit: &str, property: &str) -> Result<Option<String>, UnitError> {
        read_runtime_dropin(&runtime_dropin_dir(unit), unit, property)
    }

    fn restore_runtime_dropin(
        &self,
        unit: &str,
        property: &str,
        text: Option<&str>,
    ) -> Result<(), UnitError> {
        restore_runtime_dropin(&runtime_dropin_dir(unit), unit, property, text)
    }

    fn restarting(&self, pid: u32) -> Result<bool, UnitError> {
        check_pid(pid)?;
        // Asked at stop: one call's bound for all of it, so that a systemd that does
        // not answer leaves the stop its time to undo (the answer is then "no").
        self.block_for(self.timeout, self.restarting_unit(pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &str) -> CpuSet {
        list.parse().unwrap()
    }

    #[test]
    fn a_mask_puts_cpu_0_in_bit_0_of_byte_0() {
        assert_eq!(cpus_to_mask(&set("0")), vec![0b0000_0001]);
        assert_eq!(cpus_to_mask(&set("1")), vec![0b0000_0010]);
        assert_eq!(cpus_to_mask(&set("6-7")), vec![0b1100_0000]);
        assert_eq!(cpus_to_mask(&set("8")), vec![0, 1]);
        assert_eq!(cpus_to_mask(&set("0,9,63,64")), {
            let mut m = vec![0u8; 9];
            m[0] = 1;
            m[1] = 0b10;
            m[7] = 0x80;
            m[8] = 1;
            m
        });
    }

    #[test]
    fn the_empty_set_is_the_empty_mask() {
        assert_eq!(cpus_to_mask(&CpuSet::new()), Vec::<u8>::new());
        assert_eq!(mask_to_cpus(&[]), CpuSet::new());
        assert_eq!(mask_to_cpus(&[0, 0, 0]), CpuSet::new());
    }

    #[test]
    fn masks_decode_with_trailing_zero_bytes() {
        assert_eq!(mask_to_cpus(&[0b1100_0000]), set("6-7"));
        assert_eq!(mask_to_cpus(&[0b11, 0, 0, 0, 0, 0, 0, 0]), set("0-1"));
        assert_eq!(mask_to_cpus(&[0, 0, 0, 0, 0, 0, 0, 0, 0b101]), set("64,66"));
    }

    #[test]
    fn masks_round_trip() {
        for list in ["0", "0-3,8", "1,7-9,15-16,100", "4095", "0-8191"] {
            let cpus = set(list);
            let mask = cpus_to_mask(&cpus);
            assert_ne!(mask.last(), Some(&0), "{list}: no trailing zero byte");
            assert_eq!(mask_to_cpus(&mask), cpus, "{list}");
        }
    }

    #[test]
    fn a_mask_past_the_largest_cpu_id_is_malformed() {
        let mut mask = vec![0u8; (MAX_CPU_ID as usize + 1) / 8 + 1];
        assert!(checked_mask("Get AllowedCPUs of x.service", &mask).is_ok());
        mask[(MAX_CPU_ID as usize + 1) / 8] = 1;
        let err = checked_mask("Get AllowedCPUs of x.service", &mask).unwrap_err();
        assert!(
            err.to_string().contains("Get AllowedCPUs of x.service"),
            "{err}"
        );
    }

    #[test]
    fn unit_names_pick_their_interface() {
        for (name, interface) in [
            ("md-feed.service", "org.freedesktop.systemd1.Service"),
            ("session-3.scope", "org.freedesktop.systemd1.Scope"),
            ("system.slice", "org.freedesktop.systemd1.Slice"),
            ("-.slice", "org.freedesktop.systemd1.Slice"),
            ("getty@tty1.service", "org.freedesktop.systemd1.Service"),
            ("dbus.socket", "org.freedesktop.systemd1.Socket"),
            ("home.mount", "org.freedesktop.systemd1.Mount"),
            ("dev-sda2.swap", "org.freedesktop.systemd1.Swap"),
            (r"pinnerd-a\x2fb-1.scope", "org.freedesktop.systemd1.Scope"),
        ] {
            assert_eq!(unit_interface(name).unwrap(), interface, "{name}");
        }
    }

    #[test]
    fn bad_unit_names_are_refused() {
        let long = format!("{}.service", "a".repeat(UNIT_NAME_MAX));
        for name in [
            "",
            ".service",
            "@x.service",
            "a/b.service",
            "../../x.service",
            "x.target",
            "x.timer",
            "x",
            "x service",
            "x.service\n",
            "é.service",
            long.as_str(),
        ] {
            match unit_interface(name) {
                Err(UnitError::Refused { what, .. }) => assert!(what.contains("unit name")),
                other => panic!("{name:?}: {other:?}"),
            }
        }
        let longest = format!("{}.service", "a".repeat(UNIT_NAME_MAX - ".service".len()));
        assert!(unit_interface(&longest).is_ok());
    }

    #[test]
    fn scope_names_escape_as_systemd_escape_does() {
        assert_eq!(scope_name("md-feed", 42), r"pinnerd-md\x2dfeed-42.scope");
        assert_eq!(scope_name("a/b c", 7), r"pinnerd-a-b\x20c-7.scope");
        assert_eq!(scope_name(".dot.x", 1), r"pinnerd-\x2edot.x-1.scope");
        assert_eq!(scope_name("a:b_c.d9", 1), "pinnerd-a:b_c.d9-1.scope");
        assert_eq!(scope_name("é", 1), r"pinnerd-\xc3\xa9-1.scope");
        assert_eq!(
            scope_name("back\\slash", 1),
            r"pinnerd-back\x5cslash-1.scope"
        );
        assert_eq!(scope_name("", 1), "pinnerd--1.scope");
    }

    #[test]
    fn scope_names_are_valid_units_however_long_the_rule() {
        for rule in [
            "x".repeat(1000),
            "-".repeat(1000),
            "é".repeat(300),
            "a-".repeat(200),
        ] {
            for pid in [1, u32::MAX] {
                let name = scope_name(&rule, pid);
                assert!(name.len() <= UNIT_NAME_MAX, "{} bytes", name.len());
                assert!(name.ends_with(&format!("-{pid}.scope")), "{name}");
                assert_eq!(
                    unit_interface(&name).unwrap(),
                    "org.freedesktop.systemd1.Scope",
                    "{name}"
                );
                // Cut between escapes, never inside one.
                for (i, _) in name.match_indices('\\') {
                    let escape = name.as_bytes().get(i + 1..i + 4).unwrap_or_default();
                    assert!(
                        escape.len() == 3
                            && escape[0] == b'x'
                            && escape[1..].iter().all(u8::is_ascii_hexdigit),
                        "{name}"
                    );
                }
            }
        }
    }

    #[test]
    fn pid_0_and_non_slices_are_refused_before_the_bus() {
        assert!(matches!(check_pid(0), Err(UnitError::Refused { .. })));
        assert!(check_pid(1).is_ok());
        assert!(check_slice("system.slice").is_ok());
        assert!(matches!(
            check_slice("system.service"),
            Err(UnitError::Refused { .. })
        ));
    }

    #[test]
    fn an_unset_property_is_left_out_and_an_empty_set_resets() {
        let cpus = set("1");
        let props = mask_properties("AllowedCPUs", Some(&cpus), "AllowedMemoryNodes", None);
        assert_eq!(props.len(), 1);
        assert_eq!(props[0].0, "AllowedCPUs");
        assert_eq!(props[0].1, Variant::from(vec![0b10u8]));
        let empty = CpuSet::new();
        let props = mask_properties("AllowedCPUs", None, "AllowedMemoryNodes", Some(&empty));
        assert_eq!(props.len(), 1);
        assert_eq!(props[0].1.value_signature().to_string(), "ay");
        assert_eq!(props[0].1, Variant::from(Vec::<u8>::new()));
    }

    #[test]
    fn paths_escape_as_systemd_escape_path_does_and_come_back() {
        for (path, escaped) in [
            (
                "/system.slice/vmwork-iso.service",
                "system.slice-vmwork\\x2diso.service",
            ),
            (
                "/user.slice/user-1000.slice/pinnerd-feed-20.scope",
                "user.slice-user\\x2d1000.slice-pinnerd\\x2dfeed\\x2d20.scope",
            ),
        ] {
            assert_eq!(escape_path(path), escaped);
            assert_eq!(unescape_path(escaped).as_deref(), Some(path));
        }
        assert_eq!(unescape_path("a\\xZZ"), None);
        assert_eq!(unescape_path("a\\x4"), None);
        assert_eq!(
            partition_helper_unit("isolated", "/system.slice/md.service").as_deref(),
            Some("pinnerd-partition@isolated:system.slice-md.service.service")
        );
        assert_eq!(
            partition_helper_unit("member", &format!("/{}", "a".repeat(300))),
            None
        );
    }
}
