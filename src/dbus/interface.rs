//! The object `org.pinnerd.Pinnerd1`: properties read from the [`Snapshot`] the loop
//! publishes, methods checked (see `admission`) and forwarded to the loop as a
//! [`Call`] with a oneshot for its own answer type, and the signals.
//!
//! Must not touch: daemon state. It sends a [`Call`] into whatever channel it is given,
//! never blocks the loop, and the loop never waits on it.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot, watch};
use zbus::fdo;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection};

use super::admission::{check_body, check_len, Admission, Callers, RateLimiter};
use super::error::{command_error, MethodError, Result};
use super::placement::{memory_follow, place_spec, sched_of};
use crate::api::{
    Call, ContainerView, ExplainJson, Explained, ManagedEntry, MatrixReply, PinRequest, PlaceSpec,
    ReleaseRequest, Reloaded, ReplyTo, Snapshot,
};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, SmtPolicy};

/// The exported object. It forwards every method to the daemon loop, whose channel
/// carries events of type `E`.
pub struct Pinnerd1<E> {
    events: mpsc::Sender<E>,
    snapshot: watch::Receiver<Snapshot>,
    admission: Admission,
}

impl<E: From<Call> + Send + Sync + 'static> Pinnerd1<E> {
    /// `events` is the loop's channel; `snapshot` what the loop publishes.
    pub fn new(
        events: mpsc::Sender<E>,
        snapshot: watch::Receiver<Snapshot>,
        limiter: RateLimiter,
    ) -> Self {
        let mut object = Pinnerd1 {
            events,
            snapshot,
            admission: Admission::new(limiter, 0),
        };
        object.admission.properties = object.property_count();
        object
    }

    /// The properties the interface declares, from its own introspection.
    fn property_count(&self) -> usize {
        let mut xml = String::new();
        zbus::object_server::Interface::introspect_to_writer(self, &mut xml, 0);
        xml.matches("<property ").count()
    }

    /// The callers this object remembers (shared with the `NameOwnerChanged` watcher).
    pub fn callers(&self) -> std::sync::Arc<Callers> {
        self.admission.callers()
    }

    /// The object's rate limiter (its refusals' counts are logged by a task of their own).
    pub fn limiter(&self) -> std::sync::Arc<RateLimiter> {
        self.admission.limiter()
    }

    /// A property's value: the read is admitted as a method call is (reads the daemon
    /// makes itself, without a header, pass), then `value` takes it from the snapshot.
    async fn read<T>(
        &self,
        conn: &Connection,
        header: Option<Header<'_>>,
        property: &str,
        value: impl FnOnce(&Snapshot) -> T,
    ) -> fdo::Result<T> {
        self.admission.admit_read(conn, header, property).await?;
        let v = value(&self.snapshot.borrow());
        Ok(v)
    }

    /// As `Admission::admit` for a pin or release of process `pid`: root passes; anyone
    /// else needs polkit's `org.pinnerd.pin-own-process` for a process of their own,
    /// `org.pinnerd.manage` for anyone else's (`Admission::authorize_pin`). Returns the
    /// uid the loop checks the owner against again as it acts (`for_owner`).
    async fn admit_pin(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        pid: u32,
    ) -> Result<Option<u32>> {
        let uid = self.admission.admit(conn, header, method).await?;
        if uid == 0 {
            return Ok(None);
        }
        let owner = self.forward(|reply| Call::Owner { pid, reply }).await?;
        self.admission
            .authorize_pin(conn, header, method, uid, owner, pid)
            .await
    }

    /// `PinProcess` and `PinProcessWith`, one path: admitted (`pin.for_owner` is set
    /// here), then pinned by the loop; the CPUs chosen.
    async fn pin(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        mut pin: PinRequest,
    ) -> Result<String> {
        let pid = pin.pid;
        let for_owner = self.admit_pin(conn, header, method, pid).await?;
        if let (Some(uid), Some(s)) = (for_owner, &pin.sched) {
            if s.privileged() {
                // A real-time class or a raised priority is not the owner's to give
                // through the daemon: only a caller allowed to pin others may.
                self.admission
                    .authorize_manage(conn, header, method, uid, pid)
                    .await?;
            }
        }
        pin.for_owner = for_owner;
        let cpus = self.forward(|reply| Call::Pin { pin, reply }).await?;
        Ok(cpus.to_string())
    }

    /// Sends the call `call` makes of a reply channel to the loop, and waits for its
    /// answer.
    async fn forward<T>(&self, call: impl FnOnce(ReplyTo<T>) -> Call) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.events
            .send(E::from(call(tx)))
            .await
            .map_err(|_| MethodError::Failed("the daemon is shutting down".into()))?;
        match rx.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(command_error(e)),
            Err(_) => Err(MethodError::Failed("the daemon is shutting down".into())),
        }
    }
}

/// The `policy` and `smt` words of `Plan` and `PinProcess`.
fn words(policy: &str, smt: &str) -> Result<(Policy, SmtPolicy)> {
    let invalid = |e: crate::placement::UnknownWord| MethodError::InvalidArgs(e.to_string());
    Ok((
        policy.parse().map_err(invalid)?,
        smt.parse().map_err(invalid)?,
    ))
}

/// A `ListManaged` row with its CPU list as CPU ids.
fn managed_with_cpu_ids(e: ManagedEntry) -> Result<(u32, String, String, Vec<u32>, String)> {
    let cpus: CpuSet = e.cpus.parse().map_err(|err| {
        MethodError::Failed(format!("internal error: pid {}: CPU list: {err}", e.pid))
    })?;
    Ok((e.pid, e.comm, e.rule, cpus.iter().collect(), e.state))
}

/// The `HoldsJson` property's text: the [`HoldsView`](crate::api::HoldsView) as JSON
/// (strings, numbers and lists, which serde_json always writes: never the empty
/// fallback).
pub(super) fn holds_json(v: &crate::api::HoldsView) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// What `ExplainJson` gathered from the loop, for [`explain_json`].
struct ExplainParts {
    pid: u32,
    entry: Option<ManagedEntry>,
    explained: Explained,
    memory: Option<crate::memory::MemoryJson>,
    container: Option<ContainerView>,
}

fn explain_json(parts: ExplainParts) -> Result<ExplainJson> {
    let ExplainParts {
        pid,
        entry,
        explained: Explained { text, full, sched },
        memory,
        container,
    } = parts;
    let container = container.filter(|_| full);
    let sched = if full { sched } else { Vec::new() };
    Ok(match entry {
        Some(e) => {
            let (pid, comm, rule, cpus, state) = managed_with_cpu_ids(e)?;
            ExplainJson {
                pid,
                managed: true,
                rule: Some(rule),
                comm: full.then_some(comm),
                cpus,
                state: full.then_some(state),
                sched,
                text,
                memory,
                container,
            }
        }
        None => ExplainJson {
            pid,
            managed: false,
            rule: None,
            comm: None,
            cpus: Vec::new(),
            state: None,
            sched,
            text,
            memory,
            container,
        },
    })
}

/// The `Containers` property's lines: whole for root (`names`), else without the
/// container's and the pod's names.
pub(super) fn container_lines(s: &Snapshot, names: bool) -> Vec<String> {
    s.containers
        .iter()
        .map(|c| match names {
            true => c.line(),
            false => c.line_for_anyone(),
        })
        .collect()
}

/// The `SchedExt` property's value: (state, scheduler), empty when none runs.
pub(super) fn sched_ext_pair(s: &Option<crate::sched_ext::SchedExt>) -> (String, String) {
    s.as_ref()
        .map(|s| (s.state.clone(), s.ops.clone()))
        .unwrap_or_default()
}

#[interface(name = "org.pinnerd.Pinnerd1")]
impl<E: From<Call> + Send + Sync + 'static> Pinnerd1<E> {
    /// The daemon's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "Version", |s| s.version.clone())
            .await
    }

    /// starting | measuring | ready | degraded.
    #[zbus(property)]
    async fn state(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "State", |s| s.state.as_str().to_string())
            .await
    }

    /// When the current matrix was measured, in µs since the epoch; 0 = never.
    #[zbus(property)]
    async fn measured_at(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u64> {
        self.read(conn, header, "MeasuredAt", |s| s.measured_at_us)
            .await
    }

    /// The hardware fingerprint the matrix belongs to.
    #[zbus(property)]
    async fn fingerprint(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "Fingerprint", |s| s.fingerprint.clone())
            .await
    }

    /// Online CPUs.
    #[zbus(property)]
    async fn cpu_count(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "CpuCount", |s| s.cpu_count).await
    }

    /// Rules loaded.
    #[zbus(property)]
    async fn rule_count(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "RuleCount", |s| s.rule_count).await
    }

    /// Processes currently managed.
    #[zbus(property)]
    async fn managed_processes(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "ManagedProcesses", |s| s.managed_processes)
            .await
    }

    /// Threads currently managed.
    #[zbus(property)]
    async fn managed_threads(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "ManagedThreads", |s| s.managed_threads)
            .await
    }

    /// Problems in the rule files, as `FILE:LINE:COL: message`.
    #[zbus(property)]
    async fn rule_errors(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<Vec<String>> {
        self.read(conn, header, "RuleErrors", |s| s.rule_errors.clone())
            .await
    }

    /// The sched_ext scheduler running: its state (`enabled`, …) and name; two empty
    /// strings when none runs.
    #[zbus(property)]
    async fn sched_ext(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<(String, String)> {
        self.read(conn, header, "SchedExt", |s| sched_ext_pair(&s.sched_ext))
            .await
    }

    /// Units held for `isolate` and `unit-cpuset` rules, in one line (units confined,
    /// CPUs isolated, why a hold could not be made); empty when none is.
    #[zbus(property)]
    async fn holds(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "Holds", |s| s.holds.clone()).await
    }

    /// `Holds` for programs: a JSON object `{"units_confined", "cpus_isolated",
    /// "refused": [{"rule", "line"}], "notes"}` (docs/dbus.md).
    #[zbus(property)]
    async fn holds_json(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "HoldsJson", |s| holds_json(&s.holds_view))
            .await
    }

    /// The NRI plugin: `registered with containerd 1.7.24`, or `not connected (why)`;
    /// empty when `[nri] enable = "off"`.
    #[zbus(property)]
    async fn nri(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "Nri", |s| s.nri.clone()).await
    }

    /// One line per container a rule names: `container POD/NAME (pod NAMESPACE/POD):
    /// cpuset 4-7 set at creation by pinnerd (rule R)`, or why it has no cpuset. Only
    /// root reads the names; anyone else `container (names shown to root only): …`,
    /// as `Explain` shows another user's process (the signal carries that form too).
    #[zbus(property)]
    async fn containers(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<Vec<String>> {
        let uid = self
            .admission
            .admit_read(conn, header, "Containers")
            .await?;
        Ok(container_lines(&self.snapshot.borrow(), uid == Some(0)))
    }

    /// Why `State` is `degraded`, and what to do about it, in words; empty otherwise.
    #[zbus(property)]
    async fn state_reason(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "StateReason", |s| s.state_reason.clone())
            .await
    }

    /// `the host moves vCPUs: latency placement off` while the matrix in use did not
    /// hold when measured again and placement uses the sysfs topology (without the
    /// `hypervisor` CPU flag: `repeated measurements disagree: latency placement off`);
    /// empty otherwise.
    #[zbus(property)]
    async fn latency_off(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.read(conn, header, "LatencyOff", |s| s.latency_off.clone())
            .await
    }

    /// Pairs of the matrix in use that are measured (0 without a matrix). Fewer than
    /// `PairsTotal`: the rest are inferred from a sparse measurement and background
    /// completion is measuring them.
    #[zbus(property)]
    async fn pairs_measured(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "PairsMeasured", |s| s.matrix_measured.0)
            .await
    }

    /// All pairs of the matrix in use (0 without a matrix).
    #[zbus(property)]
    async fn pairs_total(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.read(conn, header, "PairsTotal", |s| s.matrix_measured.1)
            .await
    }

    /// Starts a measurement in the background and returns its job id at once. Calls made
    /// while a measurement runs join it and get its id.
    #[zbus(out_args("job"))]
    async fn remeasure(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<u64> {
        self.admission
            .admit_root(conn, &header, "Remeasure")
            .await?;
        self.forward(Call::Remeasure).await
    }

    /// Reloads settings and rules; returns the number of rules and the errors.
    #[zbus(out_args("rules_loaded", "errors"))]
    async fn reload(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(u32, Vec<String>)> {
        self.admission.admit_root(conn, &header, "Reload").await?;
        let Reloaded { rules, errors } = self.forward(Call::Reload).await?;
        Ok((rules, errors))
    }

    /// The current latency matrix: CPU ids and one-way latency in ns (NaN = unknown).
    /// Refused (InvalidArgs) for a matrix of more than 1,024 CPUs: see `GetMatrixRows`.
    #[zbus(out_args("cpus", "latency_ns"))]
    async fn get_matrix(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
        self.admission.admit(conn, &header, "GetMatrix").await?;
        let MatrixReply { cpus, latency_ns } = self.forward(Call::GetMatrix).await?;
        Ok((cpus, latency_ns))
    }

    /// Rows `first` to `first + count - 1` of the current latency matrix (fewer at its
    /// end, and at most as many as keep the reply within 1 Mi cells: 128 rows of 8,192
    /// CPUs): every CPU id (the columns) and those rows, in ns (NaN = unknown). How a
    /// matrix of more than 1,024 CPUs, which `GetMatrix` refuses, is read.
    #[zbus(out_args("cpus", "latency_ns"))]
    async fn get_matrix_rows(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
        first: u32,
        count: u32,
    ) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
        self.admission.admit(conn, &header, "GetMatrixRows").await?;
        let MatrixReply { cpus, latency_ns } = self
            .forward(|reply| Call::GetMatrixRows {
                first,
                count,
                reply,
            })
            .await?;
        Ok((cpus, latency_ns))
    }

    /// pid, comm, rule, cpus, state of every managed process; another user's process,
    /// for a caller other than root, by pid, rule and cpus only (comm and state empty),
    /// as `Explain` shows it.
    #[zbus(out_args("processes"))]
    async fn list_managed(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(u32, String, String, String, String)>> {
        let caller_uid = self.admission.admit(conn, &header, "ListManaged").await?;
        let list = self
            .forward(|reply| Call::ListManaged { caller_uid, reply })
            .await?;
        Ok(list.into_iter().map(ManagedEntry::into_tuple).collect())
    }

    /// Which rule placed a process, and why.
    #[zbus(out_args("explanation"))]
    async fn explain(
        &self,
        pid: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        let caller_uid = self.admission.admit(conn, &header, "Explain").await?;
        let explained = self
            .forward(|reply| Call::Explain {
                pid,
                caller_uid,
                reply,
            })
            .await?;
        Ok(explained.text)
    }

    /// The daemon's numbers in the Prometheus text format (what `pinnerd metrics`
    /// prints and the textfile for node_exporter holds).
    #[zbus(out_args("text"))]
    async fn metrics(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        self.admission.admit(conn, &header, "Metrics").await?;
        self.forward(Call::Metrics).await
    }

    /// Placement advice for applications that pin themselves; changes nothing.
    #[zbus(out_args("cpus"))]
    async fn plan(
        &self,
        count: u32,
        policy: &str,
        smt: &str,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<u32>> {
        check_body(&header, "Plan")?;
        check_len("policy", policy)?;
        check_len("smt", smt)?;
        self.admission.admit(conn, &header, "Plan").await?;
        let (policy, smt) = words(policy, smt)?;
        let place = PlaceSpec::count(count, policy, smt);
        let set = self
            .forward(|reply| Call::PlanWith { place, reply })
            .await?;
        Ok(set.iter().collect())
    }

    /// Pins every thread of a process without a rule file; returns the CPUs chosen.
    #[zbus(out_args("cpus"))]
    async fn pin_process(
        &self,
        pid: u32,
        count: u32,
        policy: &str,
        smt: &str,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        check_body(&header, "PinProcess")?;
        check_len("policy", policy)?;
        check_len("smt", smt)?;
        let (policy, smt) = words(policy, smt)?;
        let place = PlaceSpec::count(count, policy, smt);
        let pin = PinRequest {
            pid,
            place,
            follow: None,
            for_owner: None,
            sched: None,
        };
        self.pin(conn, &header, "PinProcess", pin).await
    }

    /// Gives a process pinned by `PinProcess` its original masks back.
    async fn release_process(
        &self,
        pid: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<()> {
        let for_owner = self.admit_pin(conn, &header, "ReleaseProcess", pid).await?;
        let release = ReleaseRequest { pid, for_owner };
        self.forward(|reply| Call::Release { release, reply }).await
    }

    /// `ListManaged` with each process's CPUs as a list of CPU ids instead of kernel
    /// list text: pid, comm, rule, cpus, state (comm and state empty as there).
    #[zbus(out_args("processes"))]
    async fn list_managed_cpus(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(u32, String, String, Vec<u32>, String)>> {
        let caller_uid = self
            .admission
            .admit(conn, &header, "ListManagedCpus")
            .await?;
        let list = self
            .forward(|reply| Call::ListManaged { caller_uid, reply })
            .await?;
        list.into_iter().map(managed_with_cpu_ids).collect()
    }

    /// `PinProcess` in the whole vocabulary of a rule's `[rule.place]`: `placement` holds
    /// `count` (u), `policy`, `smt`, `within`, `cpus` (s, CPU lists in the kernel's
    /// format) or `rule` (s, a loaded rule whose `[rule.place]` to use), and `memory`
    /// (s, `follow` or `leave`: move its memory to the nodes of its CPUs), and
    /// `sched-policy` (s), `sched-priority` and `nice` (x): the class of every thread
    /// while pinned, a real-time one or a negative nice value only for a caller allowed
    /// to pin others. Pins every thread of `pid` among the CPUs no exclusive rule holds;
    /// returns the CPUs.
    #[zbus(out_args("cpus"))]
    async fn pin_process_with(
        &self,
        pid: u32,
        placement: HashMap<String, zbus::OwnedVariant>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        check_body(&header, "PinProcessWith")?;
        let place = place_spec(&placement)?;
        let follow = memory_follow(&placement)?;
        let sched = sched_of(&placement)?;
        let pin = PinRequest {
            pid,
            place,
            follow: Some(follow),
            for_owner: None,
            sched,
        };
        self.pin(conn, &header, "PinProcessWith", pin).await
    }

    /// `Explain` for programs: a JSON object with `pid`, `managed`, `rule`, `comm`,
    /// `cpus` (CPU ids), `state` (as `ListManaged` has them; `rule`, `comm` and `state`
    /// are null when not managed), `text` (what `Explain` returns, with the same
    /// privacy: another user's process is shown by rule and CPUs only, its `comm` and
    /// `state` null) and `memory`:
    /// its resident bytes per NUMA node (`one_node`, `source`, `total_bytes`, `nodes`:
    /// `node`, `bytes`, `share`), null for a caller shown rule and CPUs only.
    #[zbus(out_args("json"))]
    async fn explain_json(
        &self,
        pid: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        let caller_uid = self.admission.admit(conn, &header, "ExplainJson").await?;
        let explained = self
            .forward(|reply| Call::Explain {
                pid,
                caller_uid,
                reply,
            })
            .await?;
        let list = self
            .forward(|reply| Call::ListManaged { caller_uid, reply })
            .await?;
        let entry = list.into_iter().find(|e| e.pid == pid);
        let memory = self
            .forward(|reply| Call::Memory {
                pid,
                caller_uid,
                reply,
            })
            .await?;
        let container = self
            .forward(|reply| Call::Container {
                pid,
                caller_uid,
                reply,
            })
            .await?;
        let json = explain_json(ExplainParts {
            pid,
            entry,
            explained,
            memory,
            container,
        })?;
        serde_json::to_string(&json)
            .map_err(|e| MethodError::Failed(format!("internal error: ExplainJson: {e}")))
    }

    /// The CPUs `PinProcessWith` would choose now for `placement`; changes nothing. Its
    /// scheduling keys are checked as `PinProcessWith` checks them (a class it would
    /// refuse is refused here), though only a pin sets a class.
    #[zbus(out_args("cpus"))]
    async fn plan_with(
        &self,
        placement: HashMap<String, zbus::OwnedVariant>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        check_body(&header, "PlanWith")?;
        let place = place_spec(&placement)?;
        sched_of(&placement)?;
        self.admission.admit(conn, &header, "PlanWith").await?;
        let set = self
            .forward(|reply| Call::PlanWith { place, reply })
            .await?;
        Ok(set.to_string())
    }

    /// A measurement ended.
    #[zbus(signal)]
    pub async fn measurement_finished(
        emitter: &SignalEmitter<'_>,
        job: u64,
        ok: bool,
        summary: &str,
    ) -> zbus::Result<()>;

    /// Rules were reloaded: how many loaded, and the errors.
    #[zbus(signal)]
    pub async fn rules_reloaded(
        emitter: &SignalEmitter<'_>,
        rules: u32,
        errors: Vec<String>,
    ) -> zbus::Result<()>;
}

#[cfg(test)]
mod tests;
