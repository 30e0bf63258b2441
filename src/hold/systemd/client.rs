//! [`SystemdUnits`]: the real [`Units`], systemd's manager through generated
//! `#[zbus::proxy]` traits ([`ManagerProxy`], [`UnitProxy`], [`CgroupUnitProxy`]).
//!
//! ```text
//! holder thread ──► Units ──► SystemdUnits::block ──► *Proxy ──► zbus Connection ──► systemd1
//!                              (own current-thread runtime, block_on per call)
//! ```
//!
//! Why a runtime of its own, not the daemon's: the holder is a plain thread that makes
//! its calls one after another and waits up to [`JOB_WAIT_CALLS`] call timeouts for a
//! job; blocking it is the point, and blocking a task of the daemon's runtime would stall
//! the loop. A current-thread runtime runs the connection's tasks only inside those
//! calls, so a systemd that floods or hangs never takes a worker of the daemon's, and the
//! seam stays synchronous for the holder's tests on a fake [`Units`].
//!
//! Properties are read uncached, one `Properties.Get` each, as `systemctl show -p` does:
//! the cache's `GetAll` and `PropertiesChanged` match would be a second connection's worth
//! of traffic for the three or four values a hold reads once.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::proxy::CacheProperties;
use zbus::{Connection, OwnedObjectPath, Variant};

use super::{
    check_pid, check_slice, mask_properties, mask_to_cpus, read_runtime_dropin,
    restore_runtime_dropin, runtime_dropin_dir, unit_interface, Allowed, UnitError, UnitInfo,
    Units, CALL_TIMEOUT, JOB_WAIT_CALLS, OUTER_BOUND_CALLS,
};
use crate::cpuset::{CpuSet, MAX_CPU_ID};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const SERVICE: &str = "org.freedesktop.systemd1.Service";

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

const UNKNOWN_PROPERTY: &str = "org.freedesktop.DBus.Error.UnknownProperty";

/// A row of `ListJobs`: id, unit, job type, state, job path, unit path.
type Job = (
    u32,
    String,
    String,
    String,
    OwnedObjectPath,
    OwnedObjectPath,
);

/// A `SetUnitProperties`/`StartTransientUnit` property list, `a(sv)`.
type Properties<'a> = [(&'a str, Variant<'a>)];

/// systemd's manager object: only the calls pinnerd makes.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    #[zbus(name = "GetUnitByPID")]
    fn get_unit_by_pid(&self, pid: u32) -> zbus::Result<OwnedObjectPath>;
    fn get_unit_processes(&self, name: &str) -> zbus::Result<Vec<(String, u32, String)>>;
    fn list_jobs(&self) -> zbus::Result<Vec<Job>>;
    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &Properties<'_>,
    ) -> zbus::Result<()>;
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &Properties<'_>,
        aux: &[(&str, Vec<(&str, Variant<'_>)>)],
    ) -> zbus::Result<OwnedObjectPath>;
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: zbus::ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// Any unit's `org.freedesktop.systemd1.Unit` interface.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
trait Unit {
    #[zbus(property)]
    fn id(&self) -> zbus::Result<String>;
}

/// The cgroup properties of a unit's type interface. The interface named here is the
/// service's; [`SystemdUnits::cgroup_unit`] sets the one of the unit's type
/// ([`unit_interface`]): scopes, slices, sockets, mounts and swaps have the same
/// properties. `MainPID` is a service's only.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
trait CgroupUnit {
    #[zbus(property)]
    fn control_group(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn slice(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn delegate(&self) -> zbus::Result<bool>;
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;
    #[zbus(property, name = "AllowedCPUs")]
    fn allowed_cpus(&self) -> zbus::Result<Vec<u8>>;
    #[zbus(property, name = "AllowedMemoryNodes")]
    fn allowed_memory_nodes(&self) -> zbus::Result<Vec<u8>>;
    #[zbus(property, name = "EffectiveCPUs")]
    fn effective_cpus(&self) -> zbus::Result<Vec<u8>>;
    #[zbus(property, name = "EffectiveMemoryNodes")]
    fn effective_memory_nodes(&self) -> zbus::Result<Vec<u8>>;
    #[zbus(property, name = "CPUSetPartition")]
    fn cpuset_partition(&self) -> zbus::Result<String>;
}

/// Which pair of bitmask properties [`SystemdUnits::masks`] reads.
#[derive(Clone, Copy)]
enum MaskPair {
    Allowed,
    Effective,
}

/// systemd's manager on a bus, called synchronously (see the module doc).
pub struct SystemdUnits {
    /// Dropped before the runtime it runs on.
    conn: Connection,
    manager: ManagerProxy<'static>,
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
        let manager = runtime
            .block_on(
                ManagerProxy::builder(&conn)
                    .cache_properties(CacheProperties::No)
                    .build(),
            )
            .map_err(|e| UnitError::NoSystemd(e.to_string()))?;
        let units = SystemdUnits {
            conn,
            manager,
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
        let absent = |e: &dyn std::fmt::Display| UnitError::NoSystemd(format!("{what}: {e}"));
        let bus = zbus::fdo::DBusProxy::new(&self.conn)
            .await
            .map_err(|e| absent(&e))?;
        let name = zbus::names::BusName::try_from(SYSTEMD).map_err(|e| absent(&e))?;
        match bus.name_has_owner(name).await.map_err(|e| absent(&e))? {
            true => Ok(()),
            false => Err(UnitError::NoSystemd(format!("{SYSTEMD} has no owner"))),
        }
    }

    /// `unit`'s object (its path from `GetUnit` or `GetUnitByPID`) as a proxy of
    /// `interface`.
    async fn cgroup_unit(
        &self,
        what: &str,
        path: OwnedObjectPath,
        interface: &'static str,
    ) -> Result<CgroupUnitProxy<'static>, UnitError> {
        CgroupUnitProxy::builder(&self.conn)
            .path(path)
            .interface(interface)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| self.call_error(what, e))
    }

    /// `GetUnit(name)`: the unit's object path.
    async fn unit_path(&self, unit: &str) -> Result<OwnedObjectPath, UnitError> {
        let what = format!("GetUnit({unit})");
        self.manager
            .get_unit(unit)
            .await
            .map_err(|e| self.call_error(&what, e))
    }

    /// A pair of bitmask properties (`AllowedCPUs`/`AllowedMemoryNodes`, or the
    /// effective ones) of a unit.
    async fn masks(&self, unit: &str, pair: MaskPair) -> Result<Allowed, UnitError> {
        let interface = unit_interface(unit)?;
        let path = self.unit_path(unit).await?;
        let proxy = self
            .cgroup_unit(&format!("GetUnit({unit})"), path, interface)
            .await?;
        let (cpus_name, mems_name) = match pair {
            MaskPair::Allowed => ("AllowedCPUs", "AllowedMemoryNodes"),
            MaskPair::Effective => ("EffectiveCPUs", "EffectiveMemoryNodes"),
        };
        let cpus = match pair {
            MaskPair::Allowed => proxy.allowed_cpus().await,
            MaskPair::Effective => proxy.effective_cpus().await,
        };
        let cpus = self.mask(&format!("Get {cpus_name} of {unit}"), cpus)?;
        let mems = match pair {
            MaskPair::Allowed => proxy.allowed_memory_nodes().await,
            MaskPair::Effective => proxy.effective_memory_nodes().await,
        };
        let mems = self.mask(&format!("Get {mems_name} of {unit}"), mems)?;
        Ok(Allowed { cpus, mems })
    }

    /// A bitmask property's value as a set, refusing CPUs past [`MAX_CPU_ID`].
    fn mask(&self, what: &str, value: zbus::Result<Vec<u8>>) -> Result<CpuSet, UnitError> {
        checked_mask(what, &value.map_err(|e| self.call_error(what, e))?)
    }

    async fn unit_info(&self, pid: u32) -> Result<UnitInfo, UnitError> {
        let what = format!("GetUnitByPID({pid})");
        let path = self
            .manager
            .get_unit_by_pid(pid)
            .await
            .map_err(|e| self.call_error(&what, e))?;
        let unit = UnitProxy::builder(&self.conn)
            .path(path.clone())
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| self.call_error(&what, e))?;
        let name = unit
            .id()
            .await
            .map_err(|e| self.call_error(&format!("Get Id of the unit of pid {pid}"), e))?;
        let interface = unit_interface(&name)?;
        let proxy = self.cgroup_unit(&what, path, interface).await?;
        let get = |property: &str| format!("Get {property} of {name}");
        let cgroup = proxy
            .control_group()
            .await
            .map_err(|e| self.call_error(&get("ControlGroup"), e))?;
        let slice = proxy
            .slice()
            .await
            .map_err(|e| self.call_error(&get("Slice"), e))?;
        let delegate = proxy
            .delegate()
            .await
            .map_err(|e| self.call_error(&get("Delegate"), e))?;
        let main_pid = if interface == SERVICE {
            let pid = proxy
                .main_pid()
                .await
                .map_err(|e| self.call_error(&get("MainPID"), e))?;
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
        let jobs = self
            .manager
            .list_jobs()
            .await
            .map_err(|e| self.call_error("ListJobs", e))?;
        Ok(jobs
            .iter()
            .any(|(_, u, kind, _, _, _)| *u == unit && kind.ends_with("restart")))
    }

    /// `GetUnitProcesses(unit)`: every process of the unit's cgroup and below.
    async fn unit_processes(&self, unit: &str) -> Result<Vec<u32>, UnitError> {
        let what = format!("GetUnitProcesses({unit})");
        let rows = self
            .manager
            .get_unit_processes(unit)
            .await
            .map_err(|e| self.call_error(&what, e))?;
        Ok(rows.into_iter().map(|(_, pid, _)| pid).collect())
    }

    async fn set_properties(
        &self,
        unit: &str,
        properties: Vec<(&str, Variant<'_>)>,
    ) -> Result<(), UnitError> {
        let names: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
        let what = format!("SetUnitProperties({unit}, {})", names.join(", "));
        self.manager
            .set_unit_properties(unit, true, &properties)
            .await
            .map_err(|e| self.call_error(&what, e))
    }

    async fn partition(&self, unit: &str) -> Result<Option<String>, UnitError> {
        let interface = unit_interface(unit)?;
        let path = self.unit_path(unit).await?;
        let what = format!("Get CPUSetPartition of {unit}");
        let proxy = self.cgroup_unit(&what, path, interface).await?;
        match proxy.cpuset_partition().await {
            Ok(value) => Ok(Some(value)),
            Err(e) if error_name(&e).as_deref() == Some(UNKNOWN_PROPERTY) => Ok(None),
            Err(e) => Err(self.call_error(&what, e)),
        }
    }

    /// Starts the scope and waits for its job.
    async fn start_scope(&self, request: ScopeRequest<'_>) -> Result<(), UnitError> {
        let what = format!("StartTransientUnit({})", request.scope);
        let properties = request.properties();
        let start = self
            .manager
            .start_transient_unit(request.scope, "fail", &properties, &[]);
        self.run_job(&what, start).await
    }

    /// Waits for the job `start` (a manager call that answers with one) to end. The
    /// `JobRemoved` match is in place before the call, so a job that ends before the
    /// call's reply arrives is still seen.
    async fn run_job(
        &self,
        what: &str,
        start: impl Future<Output = zbus::Result<OwnedObjectPath>>,
    ) -> Result<(), UnitError> {
        let what = what.to_string();
        let mut signals = self
            .manager
            .receive_job_removed()
            .await
            .map_err(|e| self.call_error(&format!("{what}: AddMatch(JobRemoved)"), e))?;
        let job = start.await.map_err(|e| self.call_error(&what, e))?;
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
        let e = unwrap_fdo(e);
        match &e {
            zbus::Error::InputOutput(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                let message = format!("no reply within {:?}", self.timeout);
                return UnitError::Call { what, message };
            }
            zbus::Error::Failure(_)
            | zbus::Error::IncorrectType
            | zbus::Error::SignatureMismatch(..)
            | zbus::Error::ExcessData
            | zbus::Error::OutOfBounds
            | zbus::Error::Utf8(_) => {
                let message = format!("malformed reply: {e}");
                return UnitError::Call { what, message };
            }
            _ => {}
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

/// The zbus error inside an `fdo::Error::ZBus` (a property's `Get` wraps its errors so).
fn unwrap_fdo(e: zbus::Error) -> zbus::Error {
    match e {
        zbus::Error::FDO(fdo) => match *fdo {
            zbus::fdo::Error::ZBus(inner) => unwrap_fdo(inner),
            other => zbus::Error::FDO(Box::new(other)),
        },
        e => e,
    }
}

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
async fn job_result(signals: &mut JobRemovedStream, job: &OwnedObjectPath) -> Option<String> {
    while let Some(signal) = signals.next().await {
        let Ok(args) = signal.args() else { continue };
        if args.job().as_str() == job.as_str() {
            return Some(args.result().to_string());
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

/// [`mask_to_cpus`], refusing a mask with CPUs past [`MAX_CPU_ID`].
pub(super) fn checked_mask(what: &str, mask: &[u8]) -> Result<CpuSet, UnitError> {
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
        self.block(self.masks(unit, MaskPair::Allowed))
    }

    fn effective(&self, unit: &str) -> Result<Allowed, UnitError> {
        unit_interface(unit)?;
        self.block(self.masks(unit, MaskPair::Effective))
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
        if unit_interface(unit)? != SERVICE {
            return Err(UnitError::Refused {
                what: format!("unit {unit:?}"),
                reason: "not a .service unit",
            });
        }
        let what = format!("StartUnit({unit})");
        self.block_job(self.run_job(&what, self.manager.start_unit(unit, "replace")))
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
