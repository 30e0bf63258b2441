//! The D-Bus face of the daemon: `org.pinnerd.Pinnerd1` at `/org/pinnerd/Pinnerd1`.
//!
//! Data flow: a method call → caller checks (argument sizes, rate limit; for the
//! mutating methods root, or polkit's answer for a non-root caller, see `polkit`) → a
//! [`Command`] sent to the daemon loop with a oneshot → its reply.
//! Property reads come from the [`Snapshot`] the loop publishes; a publisher task turns
//! every change of that snapshot into one `PropertiesChanged` signal.
//!
//! It speaks the types of `api` and knows nothing of the daemon: it sends a [`Call`]
//! into whatever channel it is given, whose events can carry one.
//!
//! Property reads pass the same uid and rate checks as methods (one token per message).
//! Callers' uids are asked of the bus once per connection and forgotten when it leaves.
//!
//! Must not touch: daemon state. This object holds no state of its own beyond the
//! per-caller rate limiter and the uid cache; it never blocks the loop and the loop
//! never waits on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use zbus::fdo::{self, DBusProxy};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection};

use crate::api::{Call, Command, CommandError, ErrorKind, ManagedEntry, Reply, Signal, Snapshot};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, SmtPolicy};
use crate::polkit::{self, Action, Verdict};

mod placement;
mod properties;
pub use placement::{place_spec, placement_dict, placement_dict_with, PLACEMENT_KEYS};
use properties::sched_ext_pair;
pub use properties::{changed_properties, properties_changed, publish_properties};

/// The well-known bus name.
pub const BUS_NAME: &str = "org.pinnerd.Pinnerd1";
/// The object path.
pub const OBJECT_PATH: &str = "/org/pinnerd/Pinnerd1";
/// The interface name.
pub const INTERFACE: &str = "org.pinnerd.Pinnerd1";

/// The longest string a method accepts, in bytes. Longer strings are refused before any
/// other work, so a caller cannot make the daemon parse or log unbounded input.
pub const MAX_STRING: usize = 64;

/// The largest message body any method or property read accepts, in bytes: the largest
/// legitimate one (`PinProcess` with two strings of [`MAX_STRING`]) is under 200. zbus
/// reads a message whole (up to the D-Bus limit of 128 MiB, which the bus daemon lowers)
/// and lends its strings to the method without copying them; this bound, checked from
/// the header before anything else, keeps a large message from costing more than that
/// read: no uid lookup, no parsing, no log of its content.
pub const MAX_BODY: u32 = 512;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    /// The bus name is owned by another connection (another instance is running).
    #[error("the bus name {BUS_NAME} is already taken on {bus}: another pinnerd is running")]
    NameTaken { bus: String },
    /// Connecting to the bus failed.
    #[error("cannot connect to the {bus} bus: {source}")]
    Connect {
        bus: String,
        #[source]
        source: zbus::Error,
    },
}

/// Errors a method replies with, named `org.pinnerd.Pinnerd1.Error.*`. Their messages
/// reach the caller (busctl prints them), unlike the bus's own `AccessDenied`.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.pinnerd.Pinnerd1.Error")]
pub enum MethodError {
    #[zbus(error)]
    ZBus(zbus::Error),
    /// The method needs root.
    NotPermitted(String),
    /// An argument is malformed, too long or out of range.
    InvalidArgs(String),
    /// The caller is over its rate limit.
    RateLimited(String),
    /// No such process.
    NoSuchProcess(String),
    /// The process is not pinned by `PinProcess`.
    NotManaged(String),
    /// The daemon could not do it.
    Failed(String),
}

type Result<T, E = MethodError> = std::result::Result<T, E>;

/// Which bus to use: the system bus, the session bus, or an explicit address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusTarget {
    System,
    Session,
    Address(String),
}

impl std::str::FromStr for BusTarget {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "system" => BusTarget::System,
            "session" => BusTarget::Session,
            other => BusTarget::Address(other.to_string()),
        })
    }
}

impl std::fmt::Display for BusTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusTarget::System => f.write_str("system"),
            BusTarget::Session => f.write_str("session"),
            BusTarget::Address(a) => write!(f, "address {a}"),
        }
    }
}

impl BusTarget {
    /// A connection builder for this bus.
    pub fn builder(&self) -> zbus::connection::Builder<'static> {
        match self {
            BusTarget::System => zbus::connection::Builder::system(),
            BusTarget::Session => zbus::connection::Builder::session(),
            BusTarget::Address(a) => zbus::connection::Builder::address(a.as_str()),
        }
    }

    /// A plain client connection (no name, no object).
    pub async fn connect(&self) -> Result<Connection, DbusError> {
        self.builder()
            .build()
            .await
            .map_err(|source| DbusError::Connect {
                bus: self.to_string(),
                source,
            })
    }
}

/// A token bucket per caller uid: `burst` calls at once, then `per_second`.
#[derive(Debug)]
pub struct RateLimiter {
    burst: f64,
    per_second: f64,
    buckets: Mutex<HashMap<u32, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(burst: u32, per_second: u32) -> Self {
        RateLimiter {
            burst: f64::from(burst),
            per_second: f64::from(per_second),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `uid` at `now`; false when the caller is over its limit.
    pub fn allow(&self, uid: u32, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // Forget idle callers so the map cannot grow without bound.
        if buckets.len() > 4096 {
            let horizon = Duration::from_secs_f64(self.burst / self.per_second.max(1e-9));
            buckets.retain(|_, (_, last)| now.duration_since(*last) < horizon);
        }
        let (tokens, last) = buckets.entry(uid).or_insert((self.burst, now));
        let refill = now.duration_since(*last).as_secs_f64() * self.per_second;
        *tokens = (*tokens + refill).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The exported object. It forwards every method to the daemon loop, whose channel
/// carries events of type `E`.
pub struct Pinnerd1<E> {
    events: mpsc::Sender<E>,
    snapshot: watch::Receiver<Snapshot>,
    limiter: RateLimiter,
    callers: std::sync::Arc<Callers>,
    /// How many properties the interface has: the reads one `GetAll` makes.
    properties: usize,
}

/// Callers by unique bus name: the uid the bus vouched for (asked once per connection)
/// and the last message charged to the rate limiter. An entry goes when its connection
/// does (`NameOwnerChanged`); the map is bounded besides.
#[derive(Debug, Default)]
pub struct Callers {
    map: Mutex<HashMap<String, Caller>>,
}

#[derive(Debug, Clone, Copy)]
struct Caller {
    uid: u32,
    /// The last `GetAll` charged: its serial, how many more property reads it may make
    /// without paying, and whether it was admitted. `GetAll` reads every property with
    /// one message and pays once; a client chooses its serials, so a reused serial buys
    /// no more than one `GetAll`'s reads, and any other message always pays.
    charged: Option<(std::num::NonZeroU32, usize, bool)>,
}

/// Most connections whose uids are remembered at once.
const MAX_CALLERS: usize = 4096;

impl Callers {
    fn uid(&self, name: &str) -> Option<u32> {
        self.lock().get(name).map(|c| c.uid)
    }

    fn remember(&self, name: &str, uid: u32) {
        let mut map = self.lock();
        if map.len() >= MAX_CALLERS {
            map.clear();
        }
        map.insert(name.to_string(), Caller { uid, charged: None });
    }

    /// Forgets a connection that left the bus.
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// How many connections are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Charges a message of `name`: `charge` runs for every message, except for the
    /// property reads of one `GetAll` (`get_all`, with serial `serial`), which read
    /// `properties` properties and pay once.
    fn charge_once(
        &self,
        name: &str,
        serial: std::num::NonZeroU32,
        get_all: bool,
        properties: usize,
        charge: impl FnOnce() -> bool,
    ) -> bool {
        let mut map = self.lock();
        let Some(c) = map.get_mut(name) else {
            return charge();
        };
        if !get_all {
            c.charged = None;
            return charge();
        }
        match &mut c.charged {
            Some((s, left, admitted)) if *s == serial && *left > 0 => {
                *left -= 1;
                *admitted
            }
            _ => {
                let admitted = charge();
                c.charged = Some((serial, properties.saturating_sub(1), admitted));
                admitted
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Caller>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
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
            limiter,
            callers: std::sync::Arc::new(Callers::default()),
            properties: 0,
        };
        object.properties = object.property_count();
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
        self.callers.clone()
    }

    fn snap(&self) -> watch::Ref<'_, Snapshot> {
        self.snapshot.borrow()
    }

    /// Who called, from the bus (never from a pid, which can be reused): asked once per
    /// connection, then remembered until it leaves the bus.
    async fn caller_uid(&self, conn: &Connection, header: &Header<'_>) -> Result<u32> {
        let sender = header
            .sender()
            .ok_or_else(|| MethodError::NotPermitted("the call carries no sender".into()))?;
        if let Some(uid) = self.callers.uid(sender.as_str()) {
            return Ok(uid);
        }
        let proxy = DBusProxy::new(conn).await?;
        let uid = proxy
            .get_connection_unix_user(sender.clone().into())
            .await
            .map_err(|e| MethodError::NotPermitted(format!("cannot identify the caller: {e}")))?;
        self.callers.remember(sender.as_str(), uid);
        Ok(uid)
    }

    /// The checks every method and property read makes: the uid, then the rate limit
    /// (one token per message, however many properties it reads).
    async fn admit(&self, conn: &Connection, header: &Header<'_>, method: &str) -> Result<u32> {
        check_body(header, method)?;
        let uid = self.caller_uid(conn, header).await?;
        if uid == 0 {
            return Ok(uid);
        }
        let sender = header.sender().map(|s| s.as_str()).unwrap_or_default();
        let serial = header.primary().serial_num();
        let get_all = header.member().is_some_and(|m| m.as_str() == "GetAll")
            && header
                .interface()
                .is_some_and(|i| i.as_str() == "org.freedesktop.DBus.Properties");
        let admitted = self
            .callers
            .charge_once(sender, serial, get_all, self.properties, || {
                self.limiter.allow(uid, Instant::now())
            });
        if !admitted {
            tracing::warn!(uid, method, "caller over its rate limit");
            return Err(MethodError::RateLimited(format!(
                "{method}: too many calls from uid {uid}; slow down"
            )));
        }
        Ok(uid)
    }

    /// [`Self::admit`] for a property read; reads the daemon makes itself (no header)
    /// pass.
    async fn admit_read(
        &self,
        conn: &Connection,
        header: Option<Header<'_>>,
        property: &str,
    ) -> fdo::Result<()> {
        let Some(header) = header else {
            return Ok(());
        };
        match self.admit(conn, &header, property).await {
            Ok(_) => Ok(()),
            Err(MethodError::RateLimited(m)) => Err(fdo::Error::LimitsExceeded(m)),
            Err(e) => Err(fdo::Error::AccessDenied(e.to_string())),
        }
    }

    /// As [`Self::admit`], and only root or a caller polkit authorizes for
    /// `org.pinnerd.manage` may pass.
    async fn admit_root(&self, conn: &Connection, header: &Header<'_>, method: &str) -> Result<()> {
        let uid = self.admit(conn, header, method).await?;
        self.authorize(conn, header, method, uid, Action::Manage, None)
            .await
    }

    /// As [`Self::admit`] for a pin or release of one process (`cmd`): root passes;
    /// anyone else needs polkit's `org.pinnerd.pin-own-process` for a process of their
    /// own, `org.pinnerd.manage` for anyone else's. Returns the command to forward: for
    /// one's own process, wrapped so that the loop checks the owner again in the step
    /// that pins.
    async fn admit_pin(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        cmd: Command,
    ) -> Result<Command> {
        let uid = self.admit(conn, header, method).await?;
        if uid == 0 {
            return Ok(cmd);
        }
        let pid = cmd.target_pid().unwrap_or_default();
        let owner = match self.forward(Command::Owner { pid }).await? {
            Reply::Owner(owner) => owner,
            other => return Err(unexpected(other)),
        };
        let action = Action::for_target(uid, owner);
        self.authorize(conn, header, method, uid, action, Some(pid))
            .await?;
        Ok(match action {
            Action::PinOwnProcess => Command::AsOwner {
                uid,
                command: Box::new(cmd),
            },
            Action::Manage => cmd,
        })
    }

    /// Root passes; anyone else as polkit decides for `action`; without polkit, root
    /// only.
    async fn authorize(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        uid: u32,
        action: Action,
        pid: Option<u32>,
    ) -> Result<()> {
        let sender = header.sender().map(|s| s.as_str()).unwrap_or_default();
        let interactive = header
            .primary()
            .flags()
            .contains(zbus::message::Flags::ALLOW_INTERACTIVE_AUTH);
        let verdict = polkit::check(conn, sender, uid, action, interactive).await;
        let what = match pid {
            Some(pid) => format!("{method} of pid {pid}"),
            None => method.to_string(),
        };
        match verdict {
            Verdict::Root | Verdict::Authorized => {
                if uid != 0 {
                    tracing::info!(
                        uid,
                        method,
                        pid,
                        action = action.id(),
                        "authorized by polkit"
                    );
                }
                Ok(())
            }
            Verdict::Refused { challenge } => {
                tracing::warn!(uid, method, pid, action = action.id(), "refused by polkit");
                let how = if challenge {
                    "; it needs authentication (run it with an authentication agent, e.g. pkttyagent, and allow interactive authorization)"
                } else {
                    ""
                };
                Err(MethodError::NotPermitted(format!(
                    "{what}: not authorized for {} (caller uid {uid}){how}",
                    action.id()
                )))
            }
            Verdict::Unavailable(why) => {
                tracing::warn!(uid, method, pid, why, "refused a privileged method");
                Err(MethodError::NotPermitted(format!(
                    "{method} requires root (caller uid {uid}): polkit cannot authorize {}: {why}",
                    action.id()
                )))
            }
        }
    }

    async fn forward(&self, cmd: Command) -> Result<Reply> {
        let (tx, rx) = oneshot::channel();
        self.events
            .send(E::from(Call {
                command: cmd,
                reply: tx,
            }))
            .await
            .map_err(|_| MethodError::Failed("the daemon is shutting down".into()))?;
        match rx.await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(command_error(e)),
            Err(_) => Err(MethodError::Failed("the daemon is shutting down".into())),
        }
    }
}

fn command_error(e: CommandError) -> MethodError {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::InvalidArgs => MethodError::InvalidArgs(msg),
        ErrorKind::NoSuchProcess => MethodError::NoSuchProcess(msg),
        ErrorKind::NotManaged => MethodError::NotManaged(msg),
        ErrorKind::Failed => MethodError::Failed(msg),
        ErrorKind::NotPermitted => MethodError::NotPermitted(msg),
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

/// The object `ExplainJson` returns: the managed row of `pid`, if any, the text and
/// where its memory is (`memory`, see `crate::memory::MemoryView::to_json`). Unless the
/// caller sees all of the process (`full`), the row is its rule and CPUs only, as the
/// text is: `comm` and `state` are null.
fn explain_json(
    pid: u32,
    entry: Option<ManagedEntry>,
    text: String,
    memory: serde_json::Value,
    full: bool,
) -> Result<serde_json::Value> {
    let value = match entry {
        Some(e) => {
            let (pid, comm, rule, cpus, state) = managed_with_cpu_ids(e)?;
            let (comm, state) = if full {
                (Some(comm), Some(state))
            } else {
                (None, None)
            };
            serde_json::json!({
                "pid": pid,
                "managed": true,
                "rule": rule,
                "comm": comm,
                "cpus": cpus,
                "state": state,
                "text": text,
                "memory": memory,
            })
        }
        None => serde_json::json!({
            "pid": pid,
            "managed": false,
            "rule": null,
            "comm": null,
            "cpus": [],
            "state": null,
            "text": text,
            "memory": memory,
        }),
    };
    Ok(value)
}

/// Refuses a message whose body is over [`MAX_BODY`], from its header alone.
fn check_body(header: &Header<'_>, method: &str) -> Result<()> {
    let len = header.primary().body_len();
    if len > MAX_BODY {
        return Err(MethodError::InvalidArgs(format!(
            "{method}: a message body of {len} bytes; at most {MAX_BODY} are accepted"
        )));
    }
    Ok(())
}

fn check_len(what: &str, s: &str) -> Result<()> {
    if s.len() > MAX_STRING {
        return Err(MethodError::InvalidArgs(format!(
            "{what}: longer than {MAX_STRING} bytes"
        )));
    }
    Ok(())
}

fn unexpected(reply: Reply) -> MethodError {
    MethodError::Failed(format!("internal error: unexpected reply {reply:?}"))
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
        self.admit_read(conn, header, "Version").await?;
        Ok(self.snap().version.clone())
    }

    /// starting | measuring | ready | degraded.
    #[zbus(property)]
    async fn state(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.admit_read(conn, header, "State").await?;
        Ok(self.snap().state.as_str().to_string())
    }

    /// When the current matrix was measured, in µs since the epoch; 0 = never.
    #[zbus(property)]
    async fn measured_at(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u64> {
        self.admit_read(conn, header, "MeasuredAt").await?;
        Ok(self.snap().measured_at_us)
    }

    /// The hardware fingerprint the matrix belongs to.
    #[zbus(property)]
    async fn fingerprint(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<String> {
        self.admit_read(conn, header, "Fingerprint").await?;
        Ok(self.snap().fingerprint.clone())
    }

    /// Online CPUs.
    #[zbus(property)]
    async fn cpu_count(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.admit_read(conn, header, "CpuCount").await?;
        Ok(self.snap().cpu_count)
    }

    /// Rules loaded.
    #[zbus(property)]
    async fn rule_count(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.admit_read(conn, header, "RuleCount").await?;
        Ok(self.snap().rule_count)
    }

    /// Processes currently managed.
    #[zbus(property)]
    async fn managed_processes(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.admit_read(conn, header, "ManagedProcesses").await?;
        Ok(self.snap().managed_processes)
    }

    /// Threads currently managed.
    #[zbus(property)]
    async fn managed_threads(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.admit_read(conn, header, "ManagedThreads").await?;
        Ok(self.snap().managed_threads)
    }

    /// Problems in the rule files, as `FILE:LINE:COL: message`.
    #[zbus(property)]
    async fn rule_errors(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<Vec<String>> {
        self.admit_read(conn, header, "RuleErrors").await?;
        Ok(self.snap().rule_errors.clone())
    }

    /// The sched_ext scheduler running: its state (`enabled`, …) and name; two empty
    /// strings when none runs.
    #[zbus(property)]
    async fn sched_ext(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<(String, String)> {
        self.admit_read(conn, header, "SchedExt").await?;
        Ok(sched_ext_pair(&self.snap().sched_ext))
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
        self.admit_read(conn, header, "PairsMeasured").await?;
        Ok(self.snap().matrix_measured.0)
    }

    /// All pairs of the matrix in use (0 without a matrix).
    #[zbus(property)]
    async fn pairs_total(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Option<Header<'_>>,
    ) -> fdo::Result<u32> {
        self.admit_read(conn, header, "PairsTotal").await?;
        Ok(self.snap().matrix_measured.1)
    }

    /// Starts a measurement in the background and returns its job id at once. Calls made
    /// while a measurement runs join it and get its id.
    #[zbus(out_args("job"))]
    async fn remeasure(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<u64> {
        self.admit_root(conn, &header, "Remeasure").await?;
        match self.forward(Command::Remeasure).await? {
            Reply::Job(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }

    /// Reloads settings and rules; returns the number of rules and the errors.
    #[zbus(out_args("rules_loaded", "errors"))]
    async fn reload(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(u32, Vec<String>)> {
        self.admit_root(conn, &header, "Reload").await?;
        match self.forward(Command::Reload).await? {
            Reply::Reloaded { rules, errors } => Ok((rules, errors)),
            other => Err(unexpected(other)),
        }
    }

    /// The current latency matrix: CPU ids and one-way latency in ns (NaN = unknown).
    #[zbus(out_args("cpus", "latency_ns"))]
    async fn get_matrix(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
        self.admit(conn, &header, "GetMatrix").await?;
        match self.forward(Command::GetMatrix).await? {
            Reply::Matrix { cpus, latency_ns } => Ok((cpus, latency_ns)),
            other => Err(unexpected(other)),
        }
    }

    /// pid, comm, rule, cpus, state of every managed process.
    #[zbus(out_args("processes"))]
    async fn list_managed(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(u32, String, String, String, String)>> {
        self.admit(conn, &header, "ListManaged").await?;
        match self.forward(Command::ListManaged).await? {
            Reply::Managed(list) => Ok(list.into_iter().map(ManagedEntry::into_tuple).collect()),
            other => Err(unexpected(other)),
        }
    }

    /// Which rule placed a process, and why.
    #[zbus(out_args("explanation"))]
    async fn explain(
        &self,
        pid: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        let caller_uid = self.admit(conn, &header, "Explain").await?;
        match self.forward(Command::Explain { pid, caller_uid }).await? {
            Reply::Explained { text, .. } => Ok(text),
            other => Err(unexpected(other)),
        }
    }

    /// The daemon's numbers in the Prometheus text format (what `pinnerd metrics`
    /// prints and the textfile for node_exporter holds).
    #[zbus(out_args("text"))]
    async fn metrics(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        self.admit(conn, &header, "Metrics").await?;
        match self.forward(Command::Metrics).await? {
            Reply::Text(s) => Ok(s),
            other => Err(unexpected(other)),
        }
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
        self.admit(conn, &header, "Plan").await?;
        let (policy, smt) = words(policy, smt)?;
        let cmd = Command::Plan { count, policy, smt };
        match self.forward(cmd).await? {
            Reply::Cpus(set) => Ok(set.iter().collect()),
            other => Err(unexpected(other)),
        }
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
        let cmd = Command::Pin {
            pid,
            count,
            policy,
            smt,
        };
        let cmd = self.admit_pin(conn, &header, "PinProcess", cmd).await?;
        match self.forward(cmd).await? {
            Reply::Cpus(set) => Ok(set.to_string()),
            other => Err(unexpected(other)),
        }
    }

    /// Gives a process pinned by `PinProcess` its original masks back.
    async fn release_process(
        &self,
        pid: u32,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<()> {
        let cmd = Command::Release { pid };
        let cmd = self.admit_pin(conn, &header, "ReleaseProcess", cmd).await?;
        match self.forward(cmd).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// `ListManaged` with each process's CPUs as a list of CPU ids instead of kernel
    /// list text: pid, comm, rule, cpus, state.
    #[zbus(out_args("processes"))]
    async fn list_managed_cpus(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(u32, String, String, Vec<u32>, String)>> {
        self.admit(conn, &header, "ListManagedCpus").await?;
        match self.forward(Command::ListManaged).await? {
            Reply::Managed(list) => list.into_iter().map(managed_with_cpu_ids).collect(),
            other => Err(unexpected(other)),
        }
    }

    /// `PinProcess` in the whole vocabulary of a rule's `[rule.place]`: `placement` holds
    /// `count` (u), `policy`, `smt`, `within`, `cpus` (s, CPU lists in the kernel's
    /// format) or `rule` (s, a loaded rule whose `[rule.place]` to use), and `memory`
    /// (s, `follow` or `leave`: move its memory to the nodes of its CPUs). Pins every
    /// thread of `pid` among the CPUs no exclusive rule holds; returns the CPUs.
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
        let follow = placement::memory_follow(&placement)?;
        let cmd = Command::PinWith { pid, place, follow };
        let cmd = self.admit_pin(conn, &header, "PinProcessWith", cmd).await?;
        match self.forward(cmd).await? {
            Reply::Cpus(set) => Ok(set.to_string()),
            other => Err(unexpected(other)),
        }
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
        let caller_uid = self.admit(conn, &header, "ExplainJson").await?;
        let (text, full) = match self.forward(Command::Explain { pid, caller_uid }).await? {
            Reply::Explained { text, full } => (text, full),
            other => return Err(unexpected(other)),
        };
        let entry = match self.forward(Command::ListManaged).await? {
            Reply::Managed(list) => list.into_iter().find(|e| e.pid == pid),
            other => return Err(unexpected(other)),
        };
        let memory = match self.forward(Command::Memory { pid, caller_uid }).await? {
            Reply::Json(v) => v,
            other => return Err(unexpected(other)),
        };
        Ok(explain_json(pid, entry, text, memory, full)?.to_string())
    }

    /// The CPUs `PinProcessWith` would choose now for `placement`; changes nothing.
    #[zbus(out_args("cpus"))]
    async fn plan_with(
        &self,
        placement: HashMap<String, zbus::OwnedVariant>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<String> {
        check_body(&header, "PlanWith")?;
        let place = place_spec(&placement)?;
        self.admit(conn, &header, "PlanWith").await?;
        match self.forward(Command::PlanWith { place }).await? {
            Reply::Cpus(set) => Ok(set.to_string()),
            other => Err(unexpected(other)),
        }
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

/// Connects to `bus`, serves the object and takes the bus name — refusing, not queueing
/// or stealing, when another instance holds it.
pub async fn serve<E: From<Call> + Send + Sync + 'static>(
    bus: &BusTarget,
    events: mpsc::Sender<E>,
    snapshot: watch::Receiver<Snapshot>,
    limiter: RateLimiter,
) -> Result<Connection, DbusError> {
    let object = Pinnerd1::new(events, snapshot, limiter);
    let callers = object.callers();
    let conn = bus
        .builder()
        .serve_at(OBJECT_PATH, object)
        .name(BUS_NAME)
        .allow_name_replacements(false)
        .replace_existing_names(false)
        .build()
        .await
        .map_err(|source| match source {
            zbus::Error::NameTaken => DbusError::NameTaken {
                bus: bus.to_string(),
            },
            source => DbusError::Connect {
                bus: bus.to_string(),
                source,
            },
        })?;
    forget_departed_callers(&conn, callers)
        .await
        .map_err(|source| DbusError::Connect {
            bus: bus.to_string(),
            source,
        })?;
    Ok(conn)
}

/// Drops a caller's remembered uid when its connection leaves the bus.
async fn forget_departed_callers(
    conn: &Connection,
    callers: std::sync::Arc<Callers>,
) -> zbus::Result<()> {
    use futures_util::StreamExt;
    let proxy = DBusProxy::new(conn).await?;
    let mut changes = proxy.receive_name_owner_changed().await?;
    tokio::spawn(async move {
        while let Some(signal) = changes.next().await {
            let Ok(args) = signal.args() else { continue };
            if args.new_owner().is_none() {
                callers.forget(args.name().as_str());
            }
        }
    });
    Ok(())
}

/// Emits one signal from the object.
pub async fn emit(conn: &Connection, signal: &Signal) -> zbus::Result<()> {
    let emitter = SignalEmitter::new(conn, OBJECT_PATH)?;
    match signal {
        Signal::MeasurementFinished { job, ok, summary } => {
            Pinnerd1::<Call>::measurement_finished(&emitter, *job, *ok, summary).await
        }
        Signal::RulesReloaded { rules, errors } => {
            Pinnerd1::<Call>::rules_reloaded(&emitter, *rules, errors.clone()).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_allows_a_burst_then_refills() {
        let l = RateLimiter::new(3, 10);
        let t0 = Instant::now();
        assert!(l.allow(1000, t0));
        assert!(l.allow(1000, t0));
        assert!(l.allow(1000, t0));
        assert!(!l.allow(1000, t0), "fourth call in the same instant");
        assert!(l.allow(1001, t0), "another caller has its own bucket");
        assert!(
            l.allow(1000, t0 + Duration::from_millis(100)),
            "one token back"
        );
        assert!(!l.allow(1000, t0 + Duration::from_millis(100)));
    }

    #[test]
    fn bus_target_words() {
        assert_eq!("system".parse::<BusTarget>().unwrap(), BusTarget::System);
        assert_eq!("session".parse::<BusTarget>().unwrap(), BusTarget::Session);
        assert_eq!(
            "unix:path=/run/x".parse::<BusTarget>().unwrap(),
            BusTarget::Address("unix:path=/run/x".into())
        );
    }

    #[test]
    fn policy_and_smt_words_are_checked_before_the_loop_sees_them() {
        assert_eq!(
            words("spread", "avoid").unwrap(),
            (Policy::Spread, SmtPolicy::Avoid)
        );
        for (policy, smt, want) in [
            ("tight", "allow", "unknown policy \"tight\""),
            ("compact", "sometimes", "unknown smt policy \"sometimes\""),
        ] {
            match words(policy, smt) {
                Err(MethodError::InvalidArgs(m)) => assert!(m.contains(want), "{m}"),
                other => panic!("{policy} {smt}: {other:?}"),
            }
        }
    }

    fn entry(cpus: &str) -> ManagedEntry {
        ManagedEntry {
            pid: 42,
            comm: "feed".into(),
            rule: "md".into(),
            cpus: cpus.into(),
            state: "applied".into(),
        }
    }

    #[test]
    fn managed_rows_carry_cpu_ids() {
        let row = managed_with_cpu_ids(entry("0-2,8")).unwrap();
        assert_eq!(row.3, vec![0, 1, 2, 8]);
        assert_eq!(
            (row.0, row.1.as_str(), row.4.as_str()),
            (42, "feed", "applied")
        );
        assert_eq!(
            managed_with_cpu_ids(entry("")).unwrap().3,
            Vec::<u32>::new()
        );
        match managed_with_cpu_ids(entry("0-x")) {
            Err(MethodError::Failed(m)) => assert!(m.contains("pid 42: CPU list"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn explain_json_has_the_row_or_nulls() {
        let memory = serde_json::json!({"one_node": true, "nodes": []});
        let v = explain_json(42, Some(entry("3")), "why\n".into(), memory.clone(), true).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"pid": 42, "managed": true, "rule": "md", "comm": "feed",
                               "cpus": [3], "state": "applied", "text": "why\n",
                               "memory": memory})
        );
        // Another user's process: its rule and CPUs only, as the text says.
        let v = explain_json(
            42,
            Some(entry("3")),
            "shown: its rule and CPUs only\n".into(),
            serde_json::Value::Null,
            false,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"pid": 42, "managed": true, "rule": "md", "comm": null,
                               "cpus": [3], "state": null,
                               "text": "shown: its rule and CPUs only\n", "memory": null})
        );
        let v = explain_json(
            7,
            None,
            "not managed\n".into(),
            serde_json::Value::Null,
            false,
        )
        .unwrap();
        assert!(v["memory"].is_null());
        assert_eq!(v["managed"], false);
        assert_eq!(v["cpus"], serde_json::json!([]));
        assert!(v["rule"].is_null() && v["comm"].is_null() && v["state"].is_null());
        assert_eq!(v["text"], "not managed\n");
    }

    #[test]
    fn long_strings_are_refused() {
        assert!(check_len("policy", "compact").is_ok());
        let e = check_len("policy", &"x".repeat(65)).unwrap_err();
        assert!(e.to_string().contains("longer than 64 bytes"), "{e}");
    }
}
