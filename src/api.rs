//! What the daemon and its clients say to each other, as types: [`Call`]s with typed
//! arguments, each with its own answer type or a [`CommandError`], the [`Snapshot`] the
//! loop publishes for property reads, the rows of `ListManaged` and the [`Signal`]s it
//! emits.
//!
//! Owns: these values. Must not touch: the bus, the loop or any state. `dbus` (the
//! transport) and `daemon` (the loop) both depend on this module and on neither other:
//!
//! ```text
//!   dbus ──Call::X { args, reply }──► daemon loop ──Result<X's answer, CommandError>──► dbus
//!   daemon loop ──Snapshot (watch), Signal──► dbus
//! ```

use tokio::sync::oneshot;

use crate::cpuset::CpuSet;
use crate::domains::SelectError;
use crate::placement::{PlacementError, Policy, SmtPolicy};
use crate::plan::PinError;
use crate::rules::PlacementRequest;

/// Where the answer to a call goes: its own type, or why it failed.
pub type ReplyTo<T> = oneshot::Sender<Result<T, CommandError>>;

/// Sends `answer` to `to`; a caller who gave up (a timeout) is not waiting any more:
/// nothing to do then.
pub fn send<T>(to: ReplyTo<T>, answer: Result<T, CommandError>) {
    let _ = to.send(answer);
}

/// A request from a client, already checked for size, privilege and known words by the
/// transport, with where its answer goes: each request has its own answer type.
#[derive(Debug)]
pub enum Call {
    /// Starts a measurement, or joins the one running: its job id.
    Remeasure(ReplyTo<u64>),
    Reload(ReplyTo<Reloaded>),
    /// The whole matrix, when it has at most [`WHOLE_MATRIX_CPUS`] CPUs.
    GetMatrix(ReplyTo<MatrixReply>),
    /// Rows `first..first + count` of the matrix (at most [`rows_per_reply`] of them).
    GetMatrixRows {
        first: u32,
        count: u32,
        reply: ReplyTo<MatrixReply>,
    },
    /// The daemon's numbers in the Prometheus text format (`crate::metrics`).
    Metrics(ReplyTo<String>),
    ListManaged {
        /// Who asks: root sees every row whole; anyone else their own processes whole
        /// and other users' by pid, rule and CPUs only (`comm` and `state` empty), as
        /// `Explain` shows them.
        caller_uid: u32,
        reply: ReplyTo<Vec<ManagedEntry>>,
    },
    Explain {
        pid: u32,
        /// Who asks: root, or the process's owner, gets the whole explanation; anyone
        /// else only the rule and the CPUs.
        caller_uid: u32,
        reply: ReplyTo<Explained>,
    },
    /// Where process `pid`'s memory is per NUMA node, for `ExplainJson` (`null` where
    /// the caller may not see its whole explanation).
    Memory {
        pid: u32,
        caller_uid: u32,
        reply: ReplyTo<Option<crate::memory::MemoryJson>>,
    },
    /// `Plan` and `PlanWith`: the CPUs [`Call::Pin`] would choose now; changes nothing.
    PlanWith {
        place: PlaceSpec,
        reply: ReplyTo<CpuSet>,
    },
    /// `PinProcess` and `PinProcessWith`: the CPUs chosen.
    Pin {
        pin: PinRequest,
        reply: ReplyTo<CpuSet>,
    },
    /// `ReleaseProcess`.
    Release {
        release: ReleaseRequest,
        reply: ReplyTo<()>,
    },
    /// Who owns process `pid` (its real uid): which polkit action a pin needs.
    Owner {
        pid: u32,
        reply: ReplyTo<u32>,
    },
    /// The container process `pid` runs in, for `ExplainJson` (`None` outside one, and
    /// where the caller may not see its whole explanation).
    Container {
        pid: u32,
        caller_uid: u32,
        reply: ReplyTo<Option<ContainerView>>,
    },
}

/// A container as readers see it: `ExplainJson`'s `container`, one line of the
/// `Containers` property.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerView {
    /// The runtime's id ("" when known only from containerd's files, by its cgroup).
    pub id: String,
    /// The CRI metadata name (`md-feed`).
    pub name: String,
    pub pod: String,
    pub namespace: String,
    /// The cpuset pinnerd gave it, in the kernel's list form; `None` when it gave none.
    pub cpuset: Option<String>,
    /// How it got its cpuset, or why it has none: `cpuset 4-7 set at creation by
    /// pinnerd (rule md-feed)`.
    pub how: String,
}

impl ContainerView {
    /// `container api-0/md-feed (pod trading/api-0): cpuset 4-7 set at creation by
    /// pinnerd (rule md-feed)`: what root reads.
    pub fn line(&self) -> String {
        format!(
            "container {}/{} (pod {}/{}): {}",
            self.pod, self.name, self.namespace, self.pod, self.how
        )
    }

    /// The line as anyone else reads it: the container's and the pod's names left out,
    /// as `Explain` leaves out another user's process's `comm`.
    pub fn line_for_anyone(&self) -> String {
        format!("container (names shown to root only): {}", self.how)
    }
}

/// A run-time pin of every thread of `pid` with a placement in the rule vocabulary,
/// among the CPUs no exclusive rule holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinRequest {
    pub pid: u32,
    pub place: PlaceSpec,
    /// `memory = "follow"`: its memory is moved to the nodes of its CPUs
    /// (`memory::follow`), or not; `None` (`PinProcess`, which has no such argument):
    /// as it was for this process.
    pub follow: Option<bool>,
    /// Pin only while the process still belongs to this uid: checked in the same step
    /// as the pin, so a pid reused between the authorization and the pin cannot be
    /// another user's process. `None`: whoever owns it (root, `org.pinnerd.manage`).
    pub for_owner: Option<u32>,
    /// `sched-policy`, `sched-priority`, `nice`: the class every thread of the process
    /// gets while pinned (`None`: its own, or its rule's with `rule`).
    pub sched: Option<crate::affinity::sched::Sched>,
}

/// Gives process `pid`, pinned at run time, its original masks back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    pub pid: u32,
    /// As [`PinRequest::for_owner`].
    pub for_owner: Option<u32>,
}

/// What `Reload` answers: the rules loaded and the errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub rules: u32,
    pub errors: Vec<String>,
}

/// Most CPUs of a matrix `GetMatrix` answers whole: 1,024² cells are 8 MiB as `aad`,
/// a quarter of the 32 MiB message the system bus lets through (`max_message_size` of
/// dbus-daemon's system.conf). A larger matrix is read by rows (`GetMatrixRows`).
pub const WHOLE_MATRIX_CPUS: usize = 1024;

/// Rows of a matrix of `cpus` CPUs one `GetMatrixRows` reply holds: as many as keep it
/// within the cells of a whole 1,024-CPU reply (128 rows of 8,192 CPUs), at least one.
pub fn rows_per_reply(cpus: usize) -> usize {
    (WHOLE_MATRIX_CPUS * WHOLE_MATRIX_CPUS / cpus.max(1)).max(1)
}

/// What `GetMatrix` answers: CPU ids and one-way latency in ns (NaN = unknown); both
/// empty without a matrix. For `GetMatrixRows`, `cpus` is every CPU (the columns) and
/// `latency_ns` the rows asked for, in order from the first.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixReply {
    pub cpus: Vec<u32>,
    pub latency_ns: Vec<Vec<f64>>,
}

/// What `Explain` answers: its text; `full` when the caller may see all of it (root or
/// the process's owner), else it shows the rule and the CPUs only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    pub text: String,
    pub full: bool,
    /// The class set on each of its threads that has one (for `full` only).
    pub sched: Vec<ThreadSched>,
}

/// The object `ExplainJson` returns, as JSON text (its fields are documented in
/// `docs/dbus.md`): the managed row of `pid`, if any, the text, where its memory is
/// and the container it runs in. Unless the caller sees all of the process, the row is
/// its rule and CPUs only, as the text is: `comm`, `state`, `memory` and `container`
/// are null and `sched` empty.
///
/// The fields are in the order of their names: the object reads as it did when it was a
/// JSON map.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainJson {
    pub comm: Option<String>,
    pub container: Option<ContainerView>,
    /// CPU ids; `[]` when not managed.
    pub cpus: Vec<u32>,
    pub managed: bool,
    pub memory: Option<crate::memory::MemoryJson>,
    pub pid: u32,
    pub rule: Option<String>,
    pub sched: Vec<ThreadSched>,
    pub state: Option<String>,
    /// What `Explain` returns, with the same privacy.
    pub text: String,
}

/// A managed thread's scheduling class, as its rule or pin set it, and the one it had
/// before: `ExplainJson`'s `sched`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadSched {
    pub tid: u32,
    pub comm: String,
    /// `fifo`, `rr`, `batch`, `idle`, `other`.
    pub policy: String,
    /// The real-time priority; 0 for the other policies.
    pub priority: u32,
    /// The nice value; 0 for the real-time policies.
    pub nice: i32,
    /// The class it had, in words (`other nice 5`), given back when it is let go.
    pub had: String,
}

/// A placement as `pinnerd run`, `pinnerd pin` and `PinProcessWith` give it: the keys
/// of a rule's `[rule.place]`, or the name of a loaded rule whose `[rule.place]` to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceSpec {
    Request(PlacementRequest),
    Rule(String),
}

impl PlaceSpec {
    /// `count` CPUs placed by `policy` and `smt`: what `Plan` and `PinProcess` ask for.
    pub fn count(count: u32, policy: Policy, smt: SmtPolicy) -> PlaceSpec {
        PlaceSpec::Request(PlacementRequest {
            target: crate::rules::CpuTarget::Count(count),
            within: None,
            policy,
            smt,
            exclusive: false,
            shape: crate::shape::Shape::default(),
        })
    }
}

/// The parts of a placement as a client gives them (`pinnerd run`/`pin` flags, the
/// `placement` dict of `PinProcessWith`/`PlanWith`), before they are checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaceParts {
    pub count: Option<u32>,
    pub policy: Option<Policy>,
    pub smt: Option<SmtPolicy>,
    pub cpus: Option<CpuSet>,
    pub within: Option<CpuSet>,
    pub rule: Option<String>,
    pub shape: crate::shape::Shape,
}

impl PlaceParts {
    /// The placement these parts ask for, checked as a rule's `[rule.place]` is. Without
    /// any part: one CPU. `key` prefixes each part's name in the messages: `"--"` for
    /// flags, `""` for dict keys.
    pub fn spec(&self, key: &str) -> Result<PlaceSpec, String> {
        use crate::rules::CpuTarget;
        let shape = self.shape.clone();
        if !shape.is_empty() && (self.rule.is_some() || self.cpus.is_some()) {
            let with = if self.rule.is_some() { "rule" } else { "cpus" };
            return Err(format!(
                "{key}core-type, {key}prefer and {key}near shape a {key}count; they cannot be used with {key}{with}"
            ));
        }
        if let Some(near) = &shape.near {
            if let Err(why) = crate::placement::check_device_name(near) {
                return Err(format!("{key}near {near:?}: {why}"));
            }
        }
        if let Some(name) = &self.rule {
            if name.is_empty() {
                return Err(format!("{key}rule: a rule name cannot be empty"));
            }
            return Ok(PlaceSpec::Rule(name.clone()));
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(format!("{key}cpus: the CPU list is empty"));
            }
            return Ok(PlaceSpec::Request(PlacementRequest {
                target: CpuTarget::Cpus(cpus.clone()),
                within: None,
                policy: Policy::default(),
                smt: SmtPolicy::default(),
                exclusive: false,
                shape: crate::shape::Shape::default(),
            }));
        }
        let count = self.count.unwrap_or(1);
        if count == 0 {
            return Err(format!("{key}count 0: at least one CPU is needed"));
        }
        if let Some(w) = &self.within {
            if w.is_empty() {
                return Err(format!("{key}within: the CPU list is empty"));
            }
            if count as usize > w.len() {
                return Err(format!(
                    "{key}count {count} is larger than {key}within {w} ({} CPUs)",
                    w.len()
                ));
            }
        }
        Ok(PlaceSpec::Request(PlacementRequest {
            target: CpuTarget::Count(count),
            within: self.within.clone(),
            policy: self.policy.unwrap_or_default(),
            smt: self.smt.unwrap_or_default(),
            exclusive: false,
            shape,
        }))
    }
}

/// Why a command failed. The message is what the caller reads.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// An argument is out of range.
    #[error("{0}")]
    InvalidArgs(String),
    #[error("pid {0}: no such process")]
    NoSuchProcess(u32),
    #[error("pid {0}: not pinned by PinProcess")]
    NotManaged(u32),
    /// The loop has not built its manager yet.
    #[error("the daemon is starting")]
    Starting,
    #[error("no latency domains: {0}")]
    NoDomains(#[from] SelectError),
    /// `Plan` could not place the request.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// `PinProcess` could not place the request.
    #[error("pid {pid}: {source}")]
    Pin {
        pid: u32,
        #[source]
        source: PinError,
    },
    /// The manager refused or failed (see `CommandError::from_manager`, beside the
    /// manager's error type, which this module does not name); sent as `kind`.
    #[error("{error}")]
    Manager {
        kind: ErrorKind,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A pin or release for an owner: the process no longer belongs to them.
    #[error("pid {pid}: not a process of uid {uid}")]
    NotOwner { pid: u32, uid: u32 },
    /// `--rule NAME`: no loaded rule has that name, or it has no `[rule.place]`.
    #[error("{0}")]
    NoRule(String),
}

/// Which D-Bus error a [`CommandError`] is sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgs,
    NoSuchProcess,
    NotManaged,
    Failed,
    NotPermitted,
}

impl CommandError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            CommandError::InvalidArgs(_)
            | CommandError::Placement(_)
            | CommandError::Pin { .. }
            | CommandError::NoRule(_) => ErrorKind::InvalidArgs,
            CommandError::NotOwner { .. } => ErrorKind::NotPermitted,
            CommandError::NoSuchProcess(_) => ErrorKind::NoSuchProcess,
            CommandError::NotManaged(_) => ErrorKind::NotManaged,
            CommandError::Starting | CommandError::NoDomains(_) => ErrorKind::Failed,
            CommandError::Manager { kind, .. } => *kind,
        }
    }
}

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
    /// The sched_ext scheduler running, if one does.
    pub sched_ext: Option<crate::sched_ext::SchedExt>,
    /// Pairs of the matrix in use that are measured, and all its pairs (0, 0 without a
    /// matrix); fewer measured: the rest are inferred and background completion runs.
    pub matrix_measured: (u32, u32),
    /// Units held for `isolate` and `unit-cpuset` rules, in one line: how many are
    /// confined, which CPUs are isolated, and why a hold could not be made ("" when
    /// nothing is held). Counts and reasons by rule, no list of processes: every caller
    /// may read it.
    pub holds: String,
    /// The same as fields, for the `HoldsJson` property.
    pub holds_view: HoldsView,
    /// `registered with containerd 1.7.24` or `not connected (why)`; "" when NRI is off.
    pub nri: String,
    /// Every container a rule names: its cpuset and how it got it, or why it has none.
    /// Root reads their lines whole; anyone else without the names
    /// ([`ContainerView::line_for_anyone`]).
    pub containers: Vec<ContainerView>,
    /// `the host moves vCPUs: latency placement off` (or, without the `hypervisor`
    /// flag, `repeated measurements disagree: latency placement off`) while the matrix
    /// in use is unstable and placement uses the sysfs topology; "" otherwise.
    pub latency_off: String,
    /// Why the state is `degraded` and what to do about it, in words; "" otherwise.
    pub state_reason: String,
}

/// What `isolate` and `unit-cpuset` rules hold, as fields: the `HoldsJson` property's
/// object (docs/dbus.md), the `Holds` line's parts. Counts and reasons by rule, no list
/// of processes: every caller may read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldsView {
    /// Units whose `AllowedCPUs=` pinnerd set.
    pub units_confined: u32,
    /// The CPUs isolated for holds, in the kernel's list form (`""`: none).
    pub cpus_isolated: CpuSet,
    /// Each rule's hold that could not be made as the rule asks, once per rule and
    /// line, in the order `Holds` says them.
    pub refused: Vec<HoldRefused>,
    /// What the kernel kept isolated after a partition was released.
    pub notes: Vec<String>,
}

/// A rule's hold not made as it asks: the rule, and its hold's line (what is held and
/// how, then why not), as `explain` prints it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldRefused {
    pub rule: String,
    pub line: String,
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

/// One managed process, as `ListManaged` returns it (`comm` and `state` empty in a row
/// the caller may see only by rule and CPUs).
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

/// A signal the loop asks to be emitted.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    MeasurementFinished { job: u64, ok: bool, summary: String },
    RulesReloaded { rules: u32, errors: Vec<String> },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::memory::{MemoryJson, NodeJson, NodesJson, SourceName, UnreadableJson};

    fn dbus_md() -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dbus.md"),
        )
        .unwrap()
    }

    /// docs/dbus.md's `ExplainJson` section, from its heading to the next method's.
    fn explain_json_section(doc: &str) -> &str {
        let section = doc
            .split("### `ExplainJson`")
            .nth(1)
            .expect("docs/dbus.md has no `ExplainJson` section");
        section.split("\n### ").next().unwrap()
    }

    /// Every `ExplainJson` reply docs/dbus.md shows, as the JSON text on the bus: the
    /// busctl lines (`s "…"`) and the gdbus lines (`('…',)`).
    fn shown_replies(doc: &str) -> Vec<String> {
        let mut shown = Vec::new();
        let mut lines = doc.lines();
        while let Some(l) = lines.next() {
            if l.starts_with("$ busctl … ExplainJson u ") {
                let reply = lines.next().unwrap();
                let quoted = reply.strip_prefix("s ").expect(reply);
                shown.push(serde_json::from_str::<String>(quoted).expect(reply));
            } else if l.starts_with("$ gdbus … org.pinnerd.Pinnerd1.ExplainJson ") {
                let reply = lines.next().unwrap();
                let quoted = reply
                    .strip_prefix("('")
                    .and_then(|r| r.strip_suffix("',)"))
                    .expect(reply);
                // gdbus doubles a backslash; the JSON text holds one.
                shown.push(quoted.replace("\\\\", "\\"));
            }
        }
        shown
    }

    /// A thread a rule made `fifo` 50, which had `other nice 5`.
    pub(crate) fn rx_thread() -> ThreadSched {
        ThreadSched {
            tid: 43,
            comm: "rx-0".into(),
            policy: "fifo".into(),
            priority: 50,
            nice: 0,
            had: "other nice 5".into(),
        }
    }

    /// A reply with every field filled in, each object and each form of `memory`.
    fn every_field() -> Vec<ExplainJson> {
        let full = ExplainJson {
            comm: Some("feed".into()),
            container: Some(ContainerView {
                cpuset: Some("4-7".into()),
                ..ContainerView::default()
            }),
            cpus: vec![4],
            managed: true,
            memory: Some(MemoryJson::Read(NodesJson {
                nodes: vec![NodeJson {
                    bytes: 4096,
                    node: 0,
                    share: 1.0,
                }],
                one_node: false,
                source: Some(SourceName::NumaMaps),
                total_bytes: Some(4096),
            })),
            pid: 42,
            rule: Some("md".into()),
            sched: vec![rx_thread()],
            state: Some("applied".into()),
            text: "why\n".into(),
        };
        let unreadable = ExplainJson {
            memory: Some(MemoryJson::Unreadable(UnreadableJson {
                error: "pid 42: …".into(),
            })),
            ..full.clone()
        };
        vec![full, unreadable]
    }

    /// Every key of `v`, at any depth.
    fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }

    /// The replies docs/dbus.md shows are `ExplainJson`s, with no field it lacks, and
    /// read back they are the same text: the order of the keys is the struct's.
    #[test]
    fn the_explain_json_replies_in_docs_dbus_md_are_the_struct() {
        let shown = shown_replies(&dbus_md());
        assert!(shown.len() >= 2, "{shown:?}");
        for text in &shown {
            let reply: ExplainJson = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("docs/dbus.md's reply {text}: {e}"));
            assert_eq!(&serde_json::to_string(&reply).unwrap(), text);
        }
    }

    /// Every field of the `ExplainJson` reply, and every word `source` takes, is named
    /// in its section of docs/dbus.md.
    #[test]
    fn docs_dbus_md_names_every_field_of_the_explain_json_reply() {
        let doc = dbus_md();
        let doc = explain_json_section(&doc);
        let mut names = std::collections::BTreeSet::new();
        for reply in every_field() {
            keys(&serde_json::to_value(reply).unwrap(), &mut names);
        }
        for source in [SourceName::NumaStat, SourceName::NumaMaps] {
            names.insert(
                serde_json::to_value(source)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .into(),
            );
        }
        let missing: Vec<_> = names
            .iter()
            .filter(|n| !doc.contains(&format!("\"{n}\"")) && !doc.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/dbus.md's ExplainJson lacks {missing:?}"
        );
        assert!(names.len() > 20, "{names:?}");
    }
}
