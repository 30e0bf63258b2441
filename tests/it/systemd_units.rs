//! `hold::systemd::SystemdUnits` against a fake `org.freedesktop.systemd1`, served with
//! zbus on a private `dbus-daemon`: every test asserts on what the fake was sent (the
//! exact `ay` bytes, the properties of a transient scope) as well as on what came back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pinnerd::hold::systemd::{Allowed, SystemdUnits, UnitError, UnitInfo, Units};
use pinnerd::CpuSet;
use zbus::message::{Header, Type as MessageType};
use zbus::{Connection, Message, MessageStream, ObjectPath, OwnedVariant, Variant};

use crate::daemon::{Bus, Policy};

const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const UNIT: &str = "org.freedesktop.systemd1.Unit";

/// Long enough for a loaded test machine, short enough that a test that waits for it
/// stays quick.
const TIMEOUT: Duration = Duration::from_secs(3);
/// For the tests that wait for a timeout on purpose.
const SHORT: Duration = Duration::from_millis(300);

/// A property value as the fake keeps and records it.
#[derive(Debug, Clone, PartialEq)]
enum Prop {
    Str(String),
    Bool(bool),
    Bytes(Vec<u8>),
    U32s(Vec<u32>),
    U32(u32),
    /// A value of another type, by its signature.
    Other(String),
}

impl Prop {
    fn str(s: &str) -> Prop {
        Prop::Str(s.to_string())
    }

    fn from_variant(value: OwnedVariant) -> Prop {
        let signature = value.value_signature().to_string();
        let prop = match signature.as_str() {
            "s" => String::try_from(value).ok().map(Prop::Str),
            "b" => bool::try_from(value).ok().map(Prop::Bool),
            "ay" => Vec::<u8>::try_from(value).ok().map(Prop::Bytes),
            "au" => Vec::<u32>::try_from(value).ok().map(Prop::U32s),
            "u" => u32::try_from(value).ok().map(Prop::U32),
            _ => None,
        };
        prop.unwrap_or(Prop::Other(signature))
    }

    fn to_variant(&self) -> Variant<'static> {
        match self {
            Prop::Str(s) => Variant::from(s.clone()),
            Prop::Bool(b) => Variant::from(*b),
            Prop::Bytes(b) => Variant::from(b.clone()),
            Prop::U32s(u) => Variant::from(u.clone()),
            Prop::U32(u) => Variant::from(*u),
            Prop::Other(s) => Variant::from(s.clone()),
        }
    }
}

fn type_interface(unit: &str) -> &'static str {
    let suffix = unit.rsplit('.').next().unwrap();
    match suffix {
        "service" => "org.freedesktop.systemd1.Service",
        "scope" => "org.freedesktop.systemd1.Scope",
        "slice" => "org.freedesktop.systemd1.Slice",
        other => panic!("the fake has no .{other} units"),
    }
}

/// One unit: its object path and its properties by (interface, name).
struct FakeUnit {
    path: String,
    props: BTreeMap<(String, String), Prop>,
}

/// A `SetUnitProperties` call as the fake received it.
#[derive(Debug, Clone, PartialEq)]
struct SetCall {
    unit: String,
    runtime: bool,
    props: Vec<(String, Prop)>,
}

impl SetCall {
    fn runtime(unit: &str, props: &[(&str, Prop)]) -> SetCall {
        SetCall {
            unit: unit.to_string(),
            runtime: true,
            props: props
                .iter()
                .map(|(name, value)| (name.to_string(), value.clone()))
                .collect(),
        }
    }
}

/// A `StartTransientUnit` call as the fake received it.
#[derive(Debug, Clone, PartialEq)]
struct Started {
    name: String,
    mode: String,
    props: Vec<(String, Prop)>,
    aux: usize,
}

#[derive(Default)]
struct State {
    units: BTreeMap<String, FakeUnit>,
    pids: BTreeMap<u32, String>,
    /// Every method call, as `Interface.Member(first string argument)`.
    calls: Vec<String>,
    set_properties: Vec<SetCall>,
    started: Vec<Started>,
    /// The result `JobRemoved` reports; `None`: the job never ends.
    job_result: Option<String>,
    /// How long the job runs after the reply to `StartTransientUnit`.
    job_runs: Duration,
    /// Jobs whose `JobRemoved` was sent.
    jobs_removed: u32,
    /// Members the fake never answers.
    never_answer: BTreeSet<String>,
    /// `ListJobs`: (unit, job type) of each job queued.
    jobs: Vec<(String, String)>,
}

/// A fake systemd manager on `bus`, served from a runtime of its own so that it answers
/// while the client blocks.
struct FakeSystemd {
    state: Arc<Mutex<State>>,
    _conn: Connection,
    _runtime: tokio::runtime::Runtime,
}

impl FakeSystemd {
    fn start(bus: &Bus) -> FakeSystemd {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(Mutex::new(State {
            job_result: Some("done".to_string()),
            ..State::default()
        }));
        let conn = runtime.block_on(async {
            let conn = zbus::connection::Builder::address(bus.address.as_str())
                .build()
                .await
                .unwrap();
            // The stream is in place before the name is: no call is lost.
            let calls = MessageStream::from(&conn);
            conn.request_name("org.freedesktop.systemd1").await.unwrap();
            tokio::spawn(serve(conn.clone(), calls, state.clone()));
            conn
        });
        FakeSystemd {
            state,
            _conn: conn,
            _runtime: runtime,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Adds a unit with `props` on its type's interface (and `Id` on `Unit`).
    fn add_unit(&self, name: &str, props: &[(&str, Prop)]) {
        let mut state = self.state();
        let path = format!("/org/freedesktop/systemd1/unit/u{}", state.units.len());
        let interface = type_interface(name);
        let mut map = BTreeMap::new();
        map.insert((UNIT.to_string(), "Id".to_string()), Prop::str(name));
        for (prop, value) in props {
            map.insert((interface.to_string(), prop.to_string()), value.clone());
        }
        state
            .units
            .insert(name.to_string(), FakeUnit { path, props: map });
    }

    fn prop(&self, unit: &str, name: &str) -> Option<Prop> {
        let state = self.state();
        let key = (type_interface(unit).to_string(), name.to_string());
        state.units.get(unit)?.props.get(&key).cloned()
    }
}

/// A unit's cgroup properties as systemd 257 has them: nothing allowed set, the whole
/// 2-CPU, 1-node machine effective; no `CPUSetPartition`; a service without a main
/// process (`MainPID` 0).
fn unit_props(cgroup: &str, slice: &str, delegate: bool) -> Vec<(&'static str, Prop)> {
    let mut props = vec![
        ("ControlGroup", Prop::str(cgroup)),
        ("Slice", Prop::str(slice)),
        ("Delegate", Prop::Bool(delegate)),
        ("AllowedCPUs", Prop::Bytes(vec![])),
        ("AllowedMemoryNodes", Prop::Bytes(vec![])),
        ("EffectiveCPUs", Prop::Bytes(vec![0b11])),
        ("EffectiveMemoryNodes", Prop::Bytes(vec![0b1])),
    ];
    if cgroup.ends_with(".service") {
        props.push(("MainPID", Prop::U32(0)));
    }
    props
}

async fn serve(conn: Connection, mut calls: MessageStream, state: Arc<Mutex<State>>) {
    while let Some(Ok(msg)) = calls.next().await {
        if msg.message_type() != MessageType::MethodCall {
            continue;
        }
        let conn = conn.clone();
        let state = state.clone();
        // One task per call: a job that runs a while holds up no other call.
        tokio::spawn(async move {
            let _ = answer(&conn, &state, &msg).await;
        });
    }
}

/// What the fake replies.
enum Answer {
    Nothing,
    Path(String),
    /// A property's value, sent as `v`.
    Value(Prop),
    /// An error reply: its name and message.
    Error(&'static str, String),
}

async fn answer(conn: &Connection, state: &Mutex<State>, msg: &Message) -> zbus::Result<()> {
    let header = msg.header();
    let interface = header
        .interface()
        .map(|i| i.to_string())
        .unwrap_or_default();
    let member = header.member().map(|m| m.to_string()).unwrap_or_default();
    {
        let mut state = state.lock().unwrap();
        state
            .calls
            .push(format!("{interface}.{member}({})", first_argument(msg)));
        if state.never_answer.contains(&member) {
            return Ok(());
        }
    }
    let reply = match (interface.as_str(), member.as_str()) {
        (MANAGER, "GetUnitByPID") => get_unit_by_pid(state, msg),
        (MANAGER, "GetUnit") => get_unit(state, &first_argument(msg)),
        (MANAGER, "ListJobs") => {
            type Job = (
                u32,
                String,
                String,
                String,
                ObjectPath<'static>,
                ObjectPath<'static>,
            );
            let jobs: Vec<Job> = state
                .lock()
                .unwrap()
                .jobs
                .iter()
                .enumerate()
                .map(|(i, (unit, kind))| {
                    (
                        i as u32 + 1,
                        unit.clone(),
                        kind.clone(),
                        "running".to_string(),
                        ObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{}", i + 1))
                            .unwrap(),
                        ObjectPath::try_from("/org/freedesktop/systemd1/unit/x").unwrap(),
                    )
                })
                .collect();
            return conn.reply(&header, &jobs).await;
        }
        (MANAGER, "GetUnitProcesses") => {
            return match unit_processes(state, &first_argument(msg)) {
                Ok(rows) => conn.reply(&header, &rows).await,
                Err(e) => {
                    conn.reply_error(&header, "org.freedesktop.systemd1.NoSuchUnit", &e)
                        .await
                }
            };
        }
        (MANAGER, "SetUnitProperties") => set_unit_properties(state, msg),
        (MANAGER, "StartTransientUnit") => return start_transient_unit(conn, state, msg).await,
        (PROPERTIES, "Get") => get_property(state, &header, msg),
        _ => Answer::Error("org.freedesktop.DBus.Error.UnknownMethod", member.clone()),
    };
    match reply {
        Answer::Nothing => conn.reply(&header, &()).await,
        Answer::Path(path) => conn.reply(&header, &ObjectPath::try_from(path)?).await,
        Answer::Value(prop) => conn.reply(&header, &prop.to_variant()).await,
        Answer::Error(name, message) => conn.reply_error(&header, name, &message).await,
    }
}

/// A call's first argument, where it is a string or a number.
fn first_argument(msg: &Message) -> String {
    let body = msg.body();
    let Ok(args) = body.deserialize::<zbus::wire::Structure<'_>>() else {
        return String::new();
    };
    match args.fields().first() {
        Some(Variant::Str(s)) => s.to_string(),
        Some(Variant::U32(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn get_unit_by_pid(state: &Mutex<State>, msg: &Message) -> Answer {
    let (pid,): (u32,) = msg.body().deserialize().unwrap();
    let state = state.lock().unwrap();
    match state.pids.get(&pid).and_then(|name| state.units.get(name)) {
        Some(unit) => Answer::Path(unit.path.clone()),
        None => Answer::Error(
            "org.freedesktop.systemd1.NoUnitForPID",
            format!("PID {pid} does not belong to any loaded unit."),
        ),
    }
}

/// `GetUnitProcesses`' rows (cgroup, pid, command line) for the pids added to `unit`.
fn unit_processes(state: &Mutex<State>, unit: &str) -> Result<Vec<(String, u32, String)>, String> {
    let state = state.lock().unwrap();
    let key = (type_interface(unit).to_string(), "ControlGroup".to_string());
    let cgroup = match state.units.get(unit).map(|u| u.props.get(&key)) {
        None => return Err(format!("Unit {unit} not loaded.")),
        Some(Some(Prop::Str(c))) => c.clone(),
        Some(_) => String::new(),
    };
    Ok(state
        .pids
        .iter()
        .filter(|(_, u)| *u == unit)
        .map(|(pid, _)| (cgroup.clone(), *pid, format!("pid-{pid}")))
        .collect())
}

fn get_unit(state: &Mutex<State>, name: &str) -> Answer {
    match state.lock().unwrap().units.get(name) {
        Some(unit) => Answer::Path(unit.path.clone()),
        None => Answer::Error(
            "org.freedesktop.systemd1.NoSuchUnit",
            format!("Unit {name} not loaded."),
        ),
    }
}

fn get_property(state: &Mutex<State>, header: &Header<'_>, msg: &Message) -> Answer {
    let (interface, name): (String, String) = msg.body().deserialize().unwrap();
    let path = header.path().map(|p| p.to_string()).unwrap_or_default();
    let state = state.lock().unwrap();
    let Some(unit) = state.units.values().find(|u| u.path == path) else {
        return Answer::Error("org.freedesktop.DBus.Error.UnknownObject", path);
    };
    match unit.props.get(&(interface, name)) {
        Some(value) => Answer::Value(value.clone()),
        None => Answer::Error(
            "org.freedesktop.DBus.Error.UnknownProperty",
            "Unknown property or interface.".to_string(),
        ),
    }
}

fn decode(props: Vec<(String, OwnedVariant)>) -> Vec<(String, Prop)> {
    props
        .into_iter()
        .map(|(name, value)| (name, Prop::from_variant(value)))
        .collect()
}

/// Records the call and applies it as systemd does: the allowed sets narrow the
/// effective ones, an empty one gives the whole machine back.
fn set_unit_properties(state: &Mutex<State>, msg: &Message) -> Answer {
    type Args = (String, bool, Vec<(String, OwnedVariant)>);
    let (name, runtime, props): Args = msg.body().deserialize().unwrap();
    let props = decode(props);
    let mut state = state.lock().unwrap();
    state.set_properties.push(SetCall {
        unit: name.clone(),
        runtime,
        props: props.clone(),
    });
    let Some(unit) = state.units.get_mut(&name) else {
        return Answer::Error(
            "org.freedesktop.systemd1.NoSuchUnit",
            format!("Unit {name} not loaded."),
        );
    };
    let interface = type_interface(&name).to_string();
    for (prop, value) in props {
        let key = (interface.clone(), prop.clone());
        if !unit.props.contains_key(&key) {
            return Answer::Error(
                "org.freedesktop.DBus.Error.PropertyReadOnly",
                format!("Cannot set property {prop}, or unknown property."),
            );
        }
        let effective = match prop.as_str() {
            "AllowedCPUs" => Some(("EffectiveCPUs", vec![0b11])),
            "AllowedMemoryNodes" => Some(("EffectiveMemoryNodes", vec![0b1])),
            _ => None,
        };
        if let (Some((effective, whole)), Prop::Bytes(bytes)) = (effective, &value) {
            let now = if bytes.is_empty() {
                whole
            } else {
                bytes.clone()
            };
            let key = (interface.clone(), effective.to_string());
            unit.props.insert(key, Prop::Bytes(now));
        }
        unit.props.insert(key, value);
    }
    Answer::Nothing
}

/// Records the call, replies with a job, and (unless the job never ends) sends another
/// job's `JobRemoved` and then this one's after `job_runs`.
async fn start_transient_unit(
    conn: &Connection,
    state: &Mutex<State>,
    msg: &Message,
) -> zbus::Result<()> {
    type Aux = Vec<(String, Vec<(String, OwnedVariant)>)>;
    type Args = (String, String, Vec<(String, OwnedVariant)>, Aux);
    let (name, mode, props, aux): Args = msg.body().deserialize().unwrap();
    let (result, runs) = {
        let mut state = state.lock().unwrap();
        state.started.push(Started {
            name: name.clone(),
            mode,
            props: decode(props),
            aux: aux.len(),
        });
        (state.job_result.clone(), state.job_runs)
    };
    let job = ObjectPath::try_from("/org/freedesktop/systemd1/job/7").unwrap();
    conn.reply(&msg.header(), &job).await?;
    let Some(result) = result else {
        return Ok(());
    };
    let other = ObjectPath::try_from("/org/freedesktop/systemd1/job/6").unwrap();
    let removed = |id: u32, job, result: &str| (id, job, name.clone(), result.to_string());
    let signal = removed(6, other, "failed");
    conn.emit_signal(None::<&str>, MANAGER_PATH, MANAGER, "JobRemoved", &signal)
        .await?;
    tokio::time::sleep(runs).await;
    state.lock().unwrap().jobs_removed += 1;
    let signal = removed(7, job, &result);
    conn.emit_signal(None::<&str>, MANAGER_PATH, MANAGER, "JobRemoved", &signal)
        .await
}

/// A private bus with a fake systemd on it, and a client with a bound of `timeout`.
fn setup(timeout: Duration) -> (Bus, FakeSystemd, SystemdUnits) {
    let bus = Bus::start(Policy::AllowAll);
    let fake = FakeSystemd::start(&bus);
    fake.add_unit(
        "md-feed.service",
        &unit_props("/system.slice/md-feed.service", "system.slice", false),
    );
    let client = SystemdUnits::at_address_with_timeout(&bus.address, timeout).unwrap();
    (bus, fake, client)
}

fn set(list: &str) -> CpuSet {
    list.parse().unwrap()
}

#[test]
fn the_unit_of_a_pid_has_its_id_cgroup_slice_and_delegate() {
    let (_bus, fake, client) = setup(TIMEOUT);
    fake.add_unit(
        "libpod-4f2a.scope",
        &unit_props("/machine.slice/libpod-4f2a.scope", "machine.slice", true),
    );
    fake.state()
        .pids
        .insert(4242, "md-feed.service".to_string());
    fake.state()
        .pids
        .insert(77, "libpod-4f2a.scope".to_string());

    let feed = client.unit_of_pid(4242).unwrap();
    assert_eq!(
        feed,
        UnitInfo {
            name: "md-feed.service".to_string(),
            cgroup: "/system.slice/md-feed.service".to_string(),
            slice: "system.slice".to_string(),
            delegate: false,
            main_pid: None,
        }
    );
    // A service's main process and every process of it, as systemd tells them.
    fake.state()
        .units
        .get_mut("md-feed.service")
        .unwrap()
        .props
        .insert(
            (
                "org.freedesktop.systemd1.Service".to_string(),
                "MainPID".to_string(),
            ),
            Prop::U32(4242),
        );
    fake.state()
        .pids
        .insert(4243, "md-feed.service".to_string());
    assert_eq!(client.unit_of_pid(4243).unwrap().main_pid, Some(4242));
    let mut all = client.processes("md-feed.service").unwrap();
    all.sort();
    assert_eq!(all, vec![4242, 4243]);
    assert!(
        client.unit_of_pid(77).unwrap().main_pid.is_none(),
        "a scope has none"
    );
    let container = client.unit_of_pid(77).unwrap();
    assert_eq!(container.name, "libpod-4f2a.scope");
    assert_eq!(container.slice, "machine.slice");
    assert!(container.delegate);
    // The properties were read from the unit's type interface, Id from Unit.
    let calls = fake.state().calls.clone();
    assert!(calls.contains(&"org.freedesktop.systemd1.Manager.GetUnitByPID(4242)".to_string()));
    assert!(calls.contains(&format!("{PROPERTIES}.Get({UNIT})")));
    assert!(calls.contains(&format!("{PROPERTIES}.Get(org.freedesktop.systemd1.Scope)")));

    match client.unit_of_pid(999) {
        Err(UnitError::Gone { what, message }) => {
            assert!(what.contains("GetUnitByPID(999)"), "{what}");
            assert!(message.contains("NoUnitForPID"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn allowed_cpus_and_nodes_go_over_as_ay_bitmasks_and_come_back() {
    let (_bus, fake, client) = setup(TIMEOUT);
    let unit = "md-feed.service";
    assert_eq!(client.allowed(unit).unwrap(), Allowed::default());

    client
        .set_allowed(unit, Some(&set("1")), Some(&set("0")))
        .unwrap();
    let sent = fake.state().set_properties.clone();
    assert_eq!(
        sent,
        [SetCall::runtime(
            unit,
            &[
                ("AllowedCPUs", Prop::Bytes(vec![0b10])),
                ("AllowedMemoryNodes", Prop::Bytes(vec![0b1])),
            ]
        )]
    );
    let want = Allowed {
        cpus: set("1"),
        mems: set("0"),
    };
    assert_eq!(client.allowed(unit).unwrap(), want);
    assert_eq!(client.effective(unit).unwrap(), want);

    // A CPU past the first byte, nodes left alone.
    client.set_allowed(unit, Some(&set("0,9")), None).unwrap();
    assert_eq!(
        fake.state().set_properties[1],
        SetCall::runtime(unit, &[("AllowedCPUs", Prop::Bytes(vec![0b1, 0b10]))])
    );
    assert_eq!(client.allowed(unit).unwrap().mems, set("0"));

    // An empty set resets: an empty array, the whole machine effective again.
    client
        .set_allowed(unit, Some(&CpuSet::new()), Some(&CpuSet::new()))
        .unwrap();
    assert_eq!(
        fake.state().set_properties[2],
        SetCall::runtime(
            unit,
            &[
                ("AllowedCPUs", Prop::Bytes(vec![])),
                ("AllowedMemoryNodes", Prop::Bytes(vec![])),
            ]
        )
    );
    assert_eq!(client.allowed(unit).unwrap(), Allowed::default());
    assert_eq!(client.effective(unit).unwrap().cpus, set("0-1"));

    // Nothing to set: no call.
    client.set_allowed(unit, None, None).unwrap();
    assert_eq!(fake.state().set_properties.len(), 3);
}

#[test]
fn a_unit_systemd_does_not_know_is_gone() {
    let (_bus, _fake, client) = setup(TIMEOUT);
    for result in [
        client.allowed("nothere.service").map(drop),
        client.set_allowed("nothere.service", Some(&set("0")), None),
    ] {
        match result {
            Err(UnitError::Gone { what, message }) => {
                assert!(what.contains("nothere.service"), "{what}");
                assert!(
                    message.contains("org.freedesktop.systemd1.NoSuchUnit"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn adopting_starts_a_scope_with_the_pid_and_waits_for_its_job() {
    let (_bus, fake, client) = setup(TIMEOUT);
    fake.state().job_runs = Duration::from_millis(300);
    let allowed = Allowed {
        cpus: set("1"),
        mems: CpuSet::new(),
    };
    let scope = pinnerd::hold::systemd::scope_name("md-feed", 4242);
    client
        .adopt(
            &scope,
            "pinnerd.slice",
            4242,
            &allowed,
            "md-feed held by pinnerd",
        )
        .unwrap();
    // It came back after the job's JobRemoved, not after the start's reply or the
    // other job's signal.
    assert_eq!(fake.state().jobs_removed, 1);
    let started = fake.state().started.clone();
    assert_eq!(
        started,
        vec![Started {
            name: r"pinnerd-md\x2dfeed-4242.scope".to_string(),
            mode: "fail".to_string(),
            props: vec![
                ("PIDs".to_string(), Prop::U32s(vec![4242])),
                ("Slice".to_string(), Prop::str("pinnerd.slice")),
                (
                    "Description".to_string(),
                    Prop::str("md-feed held by pinnerd")
                ),
                ("AllowedCPUs".to_string(), Prop::Bytes(vec![0b10])),
                ("CollectMode".to_string(), Prop::str("inactive-or-failed")),
            ],
            aux: 0,
        }]
    );
}

#[test]
fn adopting_fails_with_the_result_of_a_failed_job() {
    let (_bus, fake, client) = setup(TIMEOUT);
    fake.state().job_result = Some("failed".to_string());
    let err = client
        .adopt("x-1.scope", "pinnerd.slice", 1, &Allowed::default(), "x")
        .unwrap_err();
    match err {
        UnitError::Call { what, message } => {
            assert!(what.contains("StartTransientUnit(x-1.scope)"), "{what}");
            assert!(message.contains("\"failed\""), "{message}");
            assert!(
                message.contains("/org/freedesktop/systemd1/job/7"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No AllowedCPUs/AllowedMemoryNodes for empty sets.
    let names: Vec<String> = fake.state().started[0]
        .props
        .iter()
        .map(|(name, _)| name.clone())
        .collect();
    assert_eq!(names, ["PIDs", "Slice", "Description", "CollectMode"]);
}

#[test]
fn a_job_longer_than_a_call_is_waited_for_within_the_job_bound() {
    // A helper unit on a loaded machine: its job ends well after one call's timeout.
    let (_bus, fake, client) = setup(TIMEOUT);
    fake.state().job_runs = TIMEOUT * 2;
    client
        .adopt("x-1.scope", "pinnerd.slice", 1, &Allowed::default(), "x")
        .unwrap();
    assert_eq!(fake.state().jobs_removed, 1);
}

#[test]
fn a_job_that_never_ends_is_an_error_after_the_timeout() {
    let (_bus, fake, client) = setup(SHORT);
    fake.state().job_result = None;
    let start = Instant::now();
    let err = client
        .adopt("x-1.scope", "pinnerd.slice", 1, &Allowed::default(), "x")
        .unwrap_err();
    assert!(err.to_string().contains("not finished within"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "bounded, not hung"
    );
    assert_eq!(fake.state().started.len(), 1);
}

#[test]
fn the_partition_property_is_none_where_systemd_lacks_it() {
    let (_bus, fake, client) = setup(TIMEOUT);
    let mut props = unit_props("/pinnerd.slice/iso.scope", "pinnerd.slice", false);
    props.push(("CPUSetPartition", Prop::str("member")));
    fake.add_unit("iso.scope", &props);

    assert_eq!(client.partition_property("md-feed.service").unwrap(), None);
    assert_eq!(
        client.partition_property("iso.scope").unwrap().as_deref(),
        Some("member")
    );
    client.set_partition("iso.scope", "isolated").unwrap();
    assert_eq!(
        fake.state().set_properties,
        [SetCall::runtime(
            "iso.scope",
            &[("CPUSetPartition", Prop::str("isolated"))]
        )]
    );
    assert_eq!(
        fake.prop("iso.scope", "CPUSetPartition"),
        Some(Prop::str("isolated"))
    );
    // Where systemd lacks it, setting it is systemd's error, named.
    let err = client
        .set_partition("md-feed.service", "isolated")
        .unwrap_err();
    assert!(err.to_string().contains("PropertyReadOnly"), "{err}");
    assert!(err.to_string().contains("md-feed.service"), "{err}");
}

#[test]
fn a_bus_without_systemd_is_no_systemd() {
    let bus = Bus::start(Policy::AllowAll);
    match SystemdUnits::at_address_with_timeout(&bus.address, TIMEOUT) {
        Err(UnitError::NoSystemd(message)) => assert!(message.contains("systemd1"), "{message}"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a client without systemd"),
    }
    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix:path={}/no-bus", dir.path().display());
    assert!(matches!(
        SystemdUnits::at_address_with_timeout(&nowhere, TIMEOUT),
        Err(UnitError::NoSystemd(_))
    ));
}

#[test]
fn a_systemd_that_never_answers_is_an_error_within_the_timeout() {
    let (_bus, fake, client) = setup(SHORT);
    fake.state()
        .pids
        .insert(4242, "md-feed.service".to_string());
    fake.state().never_answer.insert("GetUnitByPID".to_string());
    fake.state()
        .never_answer
        .insert("SetUnitProperties".to_string());
    let start = Instant::now();
    let err = client.unit_of_pid(4242).unwrap_err();
    assert!(
        matches!(&err, UnitError::Call { what, message }
            if what.contains("GetUnitByPID(4242)") && message.contains("no reply within")),
        "{err:?}"
    );
    let err = client
        .set_allowed("md-feed.service", Some(&set("0")), None)
        .unwrap_err();
    assert!(err.to_string().contains("no reply within"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "bounded, not hung"
    );
    // Both calls reached the fake: the timeout is the client's, not a refusal.
    let calls = fake.state().calls.clone();
    assert!(
        calls.iter().any(|c| c.contains("GetUnitByPID")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.contains("SetUnitProperties(md-feed.service)")),
        "{calls:?}"
    );
}

#[test]
fn a_malformed_reply_is_an_error_naming_the_call() {
    let (_bus, fake, client) = setup(TIMEOUT);
    let mut props = unit_props("/system.slice/odd.service", "system.slice", false);
    props[3] = ("AllowedCPUs", Prop::str("0-1"));
    props[2] = ("Delegate", Prop::str("yes"));
    fake.add_unit("odd.service", &props);
    fake.state().pids.insert(5, "odd.service".to_string());

    let err = client.allowed("odd.service").unwrap_err();
    assert!(
        matches!(&err, UnitError::Call { what, message }
            if what == "Get AllowedCPUs of odd.service" && message.contains("malformed")),
        "{err:?}"
    );
    let err = client.unit_of_pid(5).unwrap_err();
    assert!(
        err.to_string().contains("Get Delegate of odd.service"),
        "{err}"
    );
}

#[test]
fn bad_names_never_reach_the_bus() {
    let (_bus, fake, client) = setup(TIMEOUT);
    let before = fake.state().calls.len();
    let refused = |r: Result<(), UnitError>| matches!(r, Err(UnitError::Refused { .. }));
    assert!(refused(client.allowed("../x.service").map(drop)));
    assert!(refused(client.effective("x.target").map(drop)));
    assert!(refused(client.set_allowed(
        "a/b.service",
        Some(&set("0")),
        None
    )));
    assert!(refused(client.set_partition("x", "isolated")));
    assert!(refused(client.partition_property("").map(drop)));
    let none = Allowed::default();
    assert!(refused(client.adopt("x.service", "s.slice", 1, &none, "x")));
    assert!(refused(client.adopt("x.scope", "s.service", 1, &none, "x")));
    assert!(refused(client.adopt("x.scope", "s.slice", 0, &none, "x")));
    assert!(refused(client.unit_of_pid(0).map(drop)));
    assert_eq!(fake.state().calls.len(), before, "{:?}", fake.state().calls);
}

/// At stop the daemon asks whether its own unit is being restarted: a `restart` job of
/// it (as `systemctl restart` or an upgrade queue) says yes, a `stop` job or none no.
#[test]
fn a_restart_job_of_the_daemons_unit_is_told_from_a_stop() {
    let (_bus, fake, client) = setup(TIMEOUT);
    fake.state()
        .pids
        .insert(4242, "md-feed.service".to_string());
    assert!(!client.restarting(4242).unwrap(), "no job");
    fake.state().jobs = vec![
        ("other.service".into(), "restart".into()),
        ("md-feed.service".into(), "stop".into()),
    ];
    assert!(
        !client.restarting(4242).unwrap(),
        "a stop, and another unit's restart"
    );
    fake.state().jobs = vec![("md-feed.service".into(), "restart".into())];
    assert!(client.restarting(4242).unwrap());
    fake.state().jobs = vec![("md-feed.service".into(), "try-restart".into())];
    assert!(client.restarting(4242).unwrap());
}
