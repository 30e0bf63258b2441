//! The NRI plugin against a fake runtime speaking the real multiplexed protocol over a
//! unix socket: registration, Configure, Synchronize (paged), CreateContainer with and
//! without a rule, a plan too slow to answer, the runtime going away and coming back,
//! UpdateContainers, and both event styles (NRI 0.6's StateChange, 0.12's one RPC per
//! event). The test plays the daemon's loop on the other side of the link.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use pinnerd::cpuset::CpuSet;
use pinnerd::nri::link::{Ask, Decision, Update};
use pinnerd::nri::proto::api;
use pinnerd::nri::ttrpc::{Message, Reassembly, TYPE_REQUEST, TYPE_RESPONSE};
use pinnerd::nri::{connect, mux, Enable, NriConfig, Registration};
use protobuf::{Message as _, MessageField};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

const PLUGIN: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME: &str = "nri.pkg.api.v1alpha1.Runtime";

/// The runtime's end of one connection.
struct FakeRuntime {
    stream: UnixStream,
    from_plugin_calls: Reassembly,
    from_plugin_answers: Reassembly,
    /// The plugin's calls to the runtime seen while waiting for something else.
    calls: VecDeque<(u32, String, Vec<u8>)>,
    next: u32,
}

impl FakeRuntime {
    async fn accept(listener: &UnixListener) -> FakeRuntime {
        let (stream, _) = listener.accept().await.unwrap();
        FakeRuntime {
            stream,
            from_plugin_calls: Reassembly::default(),
            from_plugin_answers: Reassembly::default(),
            calls: VecDeque::new(),
            next: 1,
        }
    }

    async fn read_frame(&mut self) {
        let frame = mux::read(&mut self.stream)
            .await
            .unwrap()
            .expect("plugin closed");
        match frame.conn {
            mux::RUNTIME_CONN => {
                self.from_plugin_calls.push(&frame.payload);
                while let Some(m) = self.from_plugin_calls.next_message().unwrap() {
                    assert_eq!(m.kind, TYPE_REQUEST);
                    let req = m.as_request().unwrap();
                    assert_eq!(req.service, RUNTIME);
                    self.calls.push_back((m.stream, req.method, req.payload));
                }
            }
            mux::PLUGIN_CONN => self.from_plugin_answers.push(&frame.payload),
            other => panic!("frame on connection {other}"),
        }
    }

    /// The plugin's next call to the runtime, answered with `answer`.
    async fn expect_call(&mut self, method: &str, answer: Vec<u8>) -> Vec<u8> {
        self.expect_call_answered(method, Ok(answer)).await
    }

    /// The plugin's next call to the runtime, answered with `answer` (an error status:
    /// `Err((code, message))`).
    async fn expect_call_answered(
        &mut self,
        method: &str,
        answer: Result<Vec<u8>, (i32, String)>,
    ) -> Vec<u8> {
        while self.calls.is_empty() {
            self.read_frame().await;
        }
        let (stream, got, payload) = self.calls.pop_front().unwrap();
        assert_eq!(got, method);
        self.send(mux::RUNTIME_CONN, Message::response(stream, answer))
            .await;
        payload
    }

    async fn send(&mut self, conn: u32, m: Message) {
        let frame = mux::encode(conn, &m.encode().unwrap()).unwrap();
        self.stream.write_all(&frame).await.unwrap();
    }

    /// Calls `method` on the plugin and waits for its answer.
    async fn call(
        &mut self,
        method: &str,
        req: &dyn protobuf::MessageDyn,
    ) -> Result<Vec<u8>, (i32, String)> {
        let stream = self.next;
        self.next += 2;
        let payload = req.write_to_bytes_dyn().unwrap();
        self.send(
            mux::PLUGIN_CONN,
            Message::request(stream, PLUGIN, method, payload),
        )
        .await;
        loop {
            if let Some(m) = self.from_plugin_answers.next_message().unwrap() {
                assert_eq!((m.kind, m.stream), (TYPE_RESPONSE, stream));
                return m.as_response().unwrap();
            }
            self.read_frame().await;
        }
    }

    async fn register(&mut self) -> api::RegisterPluginRequest {
        let payload = self.expect_call("RegisterPlugin", vec![]).await;
        api::RegisterPluginRequest::parse_from_bytes(&payload).unwrap()
    }

    async fn configure(&mut self, request_timeout_ms: i64) -> api::ConfigureResponse {
        let mut req = api::ConfigureRequest::new();
        req.runtime_name = "containerd".into();
        req.runtime_version = "1.7.24".into();
        req.NRI_version = "v0.6.1".into();
        req.request_timeout = request_timeout_ms;
        req.registration_timeout = 5000;
        let bytes = self.call("Configure", &req).await.unwrap();
        api::ConfigureResponse::parse_from_bytes(&bytes).unwrap()
    }
}

fn pod() -> api::PodSandbox {
    let mut p = api::PodSandbox::new();
    p.id = "pod-1".into();
    p.name = "api-0".into();
    p.namespace = "trading".into();
    p.labels.insert("app".into(), "md-feed".into());
    p
}

fn container(id: &str, name: &str) -> api::Container {
    let mut c = api::Container::new();
    c.id = id.into();
    c.name = name.into();
    c.pod_sandbox_id = "pod-1".into();
    c
}

fn create(name: &str) -> api::CreateContainerRequest {
    let mut req = api::CreateContainerRequest::new();
    req.pod = MessageField::some(pod());
    req.container = MessageField::some(container(&format!("id-{name}"), name));
    req
}

fn cpus_of(r: &MessageField<api::LinuxResources>) -> (String, String) {
    let cpu = r.cpu.as_ref().unwrap();
    (cpu.cpus.clone(), cpu.mems.clone())
}

/// The test's stand-in for the daemon's loop: `md-feed` goes to 4-7 (memory node 0),
/// `slow` is never answered, anything else has no rule. Everything else it hears is
/// passed on to the test.
fn daemon(mut asks: mpsc::Receiver<Ask>) -> mpsc::UnboundedReceiver<Ask> {
    let (heard, hear) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut unanswered: Vec<oneshot::Sender<Decision>> = Vec::new();
        while let Some(ask) = asks.recv().await {
            match ask {
                Ask::Place {
                    container, reply, ..
                } => match container.name.as_str() {
                    "md-feed" => {
                        let _ = reply.send(Decision::Place {
                            rule: "md-feed".into(),
                            cpus: "4-7".parse().unwrap(),
                            mems: Some("0".parse().unwrap()),
                        });
                    }
                    "slow" => unanswered.push(reply),
                    _ => {
                        let _ = reply.send(Decision::NoRule);
                    }
                },
                other => {
                    let _ = heard.send(other);
                }
            }
        }
    });
    hear
}

struct Rig {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    listener: UnixListener,
    heard: mpsc::UnboundedReceiver<Ask>,
    updates: mpsc::Sender<Vec<Update>>,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (asks_tx, asks_rx) = mpsc::channel(64);
    let (updates, updates_rx) = mpsc::channel(8);
    let config = NriConfig {
        enable: Enable::Auto,
        socket: socket.clone(),
        registration: Registration {
            name: "pinnerd".into(),
            index: "10".into(),
        },
    };
    tokio::spawn(connect::run(config, asks_tx, updates_rx));
    Rig {
        heard: daemon(asks_rx),
        _dir: dir,
        socket,
        listener,
        updates,
    }
}

/// The next thing the loop heard that is not a NotConnected.
async fn next_heard(heard: &mut mpsc::UnboundedReceiver<Ask>) -> Ask {
    loop {
        match heard.recv().await.unwrap() {
            Ask::NotConnected { .. } => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn registers_configures_synchronizes_and_adjusts_a_container_a_rule_names() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    let reg = rt.register().await;
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("pinnerd", "10")
    );

    let conf = rt.configure(2000).await;
    // create (4), post-start (7), update (8), stop (10), remove (11): bit (event - 1)
    assert_eq!(
        conf.events,
        (1 << 3) | (1 << 6) | (1 << 7) | (1 << 9) | (1 << 10)
    );
    match next_heard(&mut rig.heard).await {
        Ask::Registered { runtime, version } => assert_eq!(
            (runtime.as_str(), version.as_str()),
            ("containerd", "1.7.24")
        ),
        other => panic!("heard {other:?}"),
    }

    // Synchronize in two pages: the first is only collected.
    let mut page = api::SynchronizeRequest::new();
    page.pods.push(pod());
    page.containers.push(container("old-feed", "md-feed"));
    page.more = true;
    let first =
        api::SynchronizeResponse::parse_from_bytes(&rt.call("Synchronize", &page).await.unwrap())
            .unwrap();
    assert!(first.more);
    assert!(first.update.is_empty());
    let mut last = api::SynchronizeRequest::new();
    last.containers.push(container("old-other", "sidecar"));
    let sync =
        api::SynchronizeResponse::parse_from_bytes(&rt.call("Synchronize", &last).await.unwrap())
            .unwrap();
    assert_eq!(sync.update.len(), 1, "{sync:?}");
    assert_eq!(sync.update[0].container_id, "old-feed");
    assert_eq!(
        cpus_of(&sync.update[0].linux.resources),
        ("4-7".into(), "0".into())
    );

    let made = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("md-feed"))
            .await
            .unwrap(),
    )
    .unwrap();
    let adjust = made.adjust.as_ref().expect("an adjustment");
    assert_eq!(cpus_of(&adjust.linux.resources), ("4-7".into(), "0".into()));

    let plain = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("sidecar"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(plain.adjust.is_none(), "no rule, no adjustment: {plain:?}");
    assert!(plain.update.is_empty() && plain.evict.is_empty());

    // The plan changed: the loop sends an update, the runtime gets UpdateContainers.
    rig.updates
        .send(vec![Update {
            id: "old-feed".into(),
            cpus: "2-3".parse::<CpuSet>().unwrap(),
            mems: None,
            title: "api-0/old-feed (pod trading/api-0)".into(),
        }])
        .await
        .unwrap();
    let payload = rt
        .expect_call(
            "UpdateContainers",
            api::UpdateContainersResponse::new()
                .write_to_bytes()
                .unwrap(),
        )
        .await;
    let req = api::UpdateContainersRequest::parse_from_bytes(&payload).unwrap();
    assert_eq!(req.update.len(), 1);
    assert_eq!(req.update[0].container_id, "old-feed");
    assert_eq!(
        cpus_of(&req.update[0].linux.resources),
        ("2-3".into(), String::new())
    );
}

/// The containers of one `UpdateContainers` request, with their CPUs.
fn updated(payload: &[u8]) -> Vec<(String, String)> {
    let req = api::UpdateContainersRequest::parse_from_bytes(payload).unwrap();
    req.update
        .iter()
        .map(|u| (u.container_id.clone(), cpus_of(&u.linux.resources).0))
        .collect()
}

fn update(id: &str, cpus: &str) -> Update {
    Update {
        id: id.into(),
        cpus: cpus.parse().unwrap(),
        mems: None,
        title: format!("api-0/{id} (pod trading/api-0)"),
    }
}

#[tokio::test]
async fn updates_the_runtime_refuses_are_sent_again_a_bounded_number_of_times_and_said() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    rt.register().await;
    rt.configure(2000).await;
    let none_failed = api::UpdateContainersResponse::new()
        .write_to_bytes()
        .unwrap();
    let b_failed = {
        let mut r = api::UpdateContainersResponse::new();
        let mut f = api::ContainerUpdate::new();
        f.container_id = "b".into();
        r.failed.push(f);
        r.write_to_bytes().unwrap()
    };
    // One container moved, one listed as failed; that one is sent again, alone, and
    // the runtime refuses the call, then takes it: no word to the loop.
    rig.updates
        .send(vec![update("a", "2-3"), update("b", "4-5")])
        .await
        .unwrap();
    let first = rt.expect_call("UpdateContainers", b_failed.clone()).await;
    assert_eq!(
        updated(&first),
        [("a".into(), "2-3".into()), ("b".into(), "4-5".into())]
    );
    let refused = (2, "failed to update container b: cgroup busy".to_string());
    let second = rt
        .expect_call_answered("UpdateContainers", Err(refused.clone()))
        .await;
    assert_eq!(updated(&second), [("b".into(), "4-5".into())]);
    let third = rt
        .expect_call("UpdateContainers", none_failed.clone())
        .await;
    assert_eq!(updated(&third), [("b".into(), "4-5".into())]);

    // A container the runtime never moves: tried 4 times in all, then the loop is told
    // why, and no more is sent for it.
    let c_failed = {
        let mut r = api::UpdateContainersResponse::new();
        let mut f = api::ContainerUpdate::new();
        f.container_id = "c".into();
        r.failed.push(f);
        r.write_to_bytes().unwrap()
    };
    rig.updates.send(vec![update("c", "6")]).await.unwrap();
    for attempt in 1..=4 {
        // Listed as failed, then refused, in turn; the last answer is the refusal.
        let answer = if attempt % 2 == 1 {
            Ok(c_failed.clone())
        } else {
            Err(refused.clone())
        };
        let got = rt.expect_call_answered("UpdateContainers", answer).await;
        assert_eq!(
            updated(&got),
            [("c".into(), "6".into())],
            "attempt {attempt}"
        );
    }
    let mut heard = next_heard(&mut rig.heard).await;
    if matches!(heard, Ask::Registered { .. }) {
        heard = next_heard(&mut rig.heard).await;
    }
    match heard {
        Ask::NotMoved { id, cpus, reason } => {
            assert_eq!((id.as_str(), cpus.to_string().as_str()), ("c", "6"));
            assert!(
                reason.contains("cgroup busy") && reason.contains("4 attempts"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The next call the runtime sees is the next batch, not a fifth attempt.
    rig.updates.send(vec![update("d", "7")]).await.unwrap();
    let next = rt.expect_call("UpdateContainers", none_failed).await;
    assert_eq!(updated(&next), [("d".into(), "7".into())]);
}

#[tokio::test]
async fn a_plan_that_does_not_answer_gives_no_adjustment_and_says_why() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    rt.register().await;
    rt.configure(200).await;
    let made = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("slow")).await.unwrap(),
    )
    .unwrap();
    assert!(made.adjust.is_none(), "{made:?}");
    loop {
        match next_heard(&mut rig.heard).await {
            Ask::Unanswered { container, reason } => {
                assert_eq!(container.name, "slow");
                assert_eq!(container.title(), "api-0/slow (pod trading/api-0)");
                assert!(reason.contains("did not answer"), "{reason}");
                break;
            }
            Ask::Registered { .. } => continue,
            other => panic!("heard {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_runtime_that_goes_away_and_returns_is_registered_with_again() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    rt.register().await;
    rt.configure(2000).await;
    drop(rt);
    drop(rig.listener);
    std::fs::remove_file(&rig.socket).unwrap();
    loop {
        if let Ask::NotConnected { reason } = rig.heard.recv().await.unwrap() {
            assert!(reason.contains("closed"), "{reason}");
            break;
        }
    }
    // The runtime restarts: a new socket at the same path.
    let listener = UnixListener::bind(&rig.socket).unwrap();
    let mut rt = FakeRuntime::accept(&listener).await;
    assert_eq!(rt.register().await.plugin_name, "pinnerd");
    rt.configure(2000).await;
    let made = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("md-feed"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(cpus_of(&made.adjust.linux.resources).0, "4-7");
}

async fn gone_id(heard: &mut mpsc::UnboundedReceiver<Ask>) -> String {
    loop {
        match next_heard(heard).await {
            Ask::Gone { id } => return id,
            Ask::Registered { .. } => continue,
            other => panic!("heard {other:?}"),
        }
    }
}

async fn started_pid(heard: &mut mpsc::UnboundedReceiver<Ask>) -> Option<u32> {
    loop {
        match next_heard(heard).await {
            Ask::Started { container } => return container.pid,
            Ask::Registered { .. } => continue,
            other => panic!("heard {other:?}"),
        }
    }
}

#[tokio::test]
async fn events_arrive_through_state_change_as_in_nri_0_6() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    rt.register().await;
    rt.configure(2000).await;
    let mut ev = api::StateChangeEvent::new();
    ev.event = api::Event::POST_START_CONTAINER.into();
    ev.pod = MessageField::some(pod());
    let mut c = container("c1", "md-feed");
    c.pid = 4242;
    ev.container = MessageField::some(c);
    assert_eq!(rt.call("StateChange", &ev).await, Ok(vec![]));
    assert_eq!(started_pid(&mut rig.heard).await, Some(4242));
    ev.event = api::Event::REMOVE_CONTAINER.into();
    assert_eq!(rt.call("StateChange", &ev).await, Ok(vec![]));
    assert_eq!(gone_id(&mut rig.heard).await, "c1");
}

#[tokio::test]
async fn events_arrive_one_rpc_each_as_in_nri_0_12() {
    let mut rig = rig();
    let mut rt = FakeRuntime::accept(&rig.listener).await;
    rt.register().await;
    rt.configure(2000).await;
    let mut ev = api::PodContainerEvent::new();
    ev.pod = MessageField::some(pod());
    let mut c = container("c2", "md-feed");
    c.pid = 77;
    ev.container = MessageField::some(c);
    assert_eq!(rt.call("PostStartContainer", &ev).await, Ok(vec![]));
    assert_eq!(started_pid(&mut rig.heard).await, Some(77));
    assert_eq!(rt.call("RemoveContainer", &ev).await, Ok(vec![]));
    assert_eq!(gone_id(&mut rig.heard).await, "c2");
    let mut stop = api::StopContainerRequest::new();
    stop.container = MessageField::some(container("c3", "x"));
    assert_eq!(rt.call("StopContainer", &stop).await, Ok(vec![]));
    assert_eq!(gone_id(&mut rig.heard).await, "c3");
    // What pinnerd does not implement is Unimplemented (12): the runtime's cue to fall
    // back, as a 0.12 runtime does to StateChange.
    let refused = rt
        .call("ValidateContainerAdjustment", &api::Empty::new())
        .await;
    assert_eq!(refused.unwrap_err().0, 12);
}

/// The registration as bytes on the socket, read without the crate's decoder.
#[tokio::test]
async fn the_registration_frame_is_the_bytes_the_protocol_says() {
    let rig = rig();
    let (mut s, _) = rig.listener.accept().await.unwrap();
    let mut head = [0u8; 18];
    s.read_exact(&mut head).await.unwrap();
    let frame_len = u32::from_be_bytes(head[4..8].try_into().unwrap());
    let msg_len = u32::from_be_bytes(head[8..12].try_into().unwrap());
    assert_eq!(
        &head[0..4],
        &[0, 0, 0, 2],
        "connection 2: the plugin calls the runtime"
    );
    assert_eq!(frame_len, msg_len + 10, "one whole ttrpc message per frame");
    assert_eq!(
        &head[12..18],
        &[0, 0, 0, 1, 1, 0],
        "stream 1, a request, no flags"
    );
    let mut body = vec![0u8; msg_len as usize];
    s.read_exact(&mut body).await.unwrap();
    // ttrpc.Request: field 1 the service, field 2 the method.
    let mut want = vec![0x0a, RUNTIME.len() as u8];
    want.extend_from_slice(RUNTIME.as_bytes());
    want.extend_from_slice(&[0x12, 14]);
    want.extend_from_slice(b"RegisterPlugin");
    assert_eq!(&body[..want.len()], &want[..]);
    // field 3, the RegisterPluginRequest: plugin_name = 1, plugin_idx = 2
    let rest = &body[want.len()..];
    assert_eq!(rest[0], 0x1a);
    assert_eq!(
        &rest[2..],
        &[0x0a, 7, b'p', b'i', b'n', b'n', b'e', b'r', b'd', 0x12, 2, b'1', b'0']
    );
}

#[tokio::test]
async fn no_socket_is_said_and_nothing_is_dialled() {
    let dir = tempfile::tempdir().unwrap();
    let (asks_tx, mut asks_rx) = mpsc::channel(4);
    let (_updates, updates_rx) = mpsc::channel(1);
    let config = NriConfig {
        enable: Enable::Auto,
        socket: dir.path().join("absent.sock"),
        registration: Registration {
            name: "pinnerd".into(),
            index: "10".into(),
        },
    };
    tokio::spawn(connect::run(config, asks_tx, updates_rx));
    match asks_rx.recv().await.unwrap() {
        Ask::NotConnected { reason } => assert!(reason.contains("no socket at"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let _: &Path = dir.path();
}

/// Whatever a socket at the configured path says is trusted only from a runtime that
/// runs as root: a process of another user listening there (a path a user could
/// create, a runtime run rootless) is dialled and left, and said; nothing it would say
/// reaches the loop.
#[tokio::test]
async fn a_socket_served_by_another_user_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("nri.sock");
    // A real listener of uid 65534: a bus daemon of its own.
    let mut nobody = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "dbus-daemon",
        ])
        .args(["--session", "--nofork", "--print-address"])
        .arg(format!("--address=unix:path={}", socket.display()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Listening once it prints its address.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(nobody.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("unix:path="), "{line}");
    let (asks_tx, mut asks_rx) = mpsc::channel(4);
    let (_updates, updates_rx) = mpsc::channel(1);
    let config = NriConfig {
        enable: Enable::On,
        socket: socket.clone(),
        registration: Registration {
            name: "pinnerd".into(),
            index: "10".into(),
        },
    };
    tokio::spawn(connect::run(config, asks_tx, updates_rx));
    let said = asks_rx.recv().await.unwrap();
    let _ = nobody.kill();
    let _ = nobody.wait();
    match said {
        Ask::NotConnected { reason } => {
            assert!(reason.contains("uid 65534, not root"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// The real daemon, registered with the fake runtime: the loop answers from its plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_gives_a_named_container_its_rules_cpus_at_creation() {
    use crate::daemon::{Bus, Daemon, Dirs, Policy};
    use std::time::Duration;

    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let socket = dirs.root.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    dirs.write_settings(&format!("[nri]\nsocket = \"{}\"\n", socket.display()));
    dirs.write_rule(
        "10-feed.toml",
        "[[rule]]\nname = \"md-feed\"\n[rule.match]\ncontainer = \"md-feed\"\npod-namespace = \"trading\"\n\
         [rule.place]\ncpus = \"0\"\n",
    );
    let d = Daemon::start(&bus, &dirs);
    let mut rt = FakeRuntime::accept(&listener).await;
    let reg = rt.register().await;
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("pinnerd", "10")
    );
    rt.configure(2000).await;

    let made = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("md-feed"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(cpus_of(&made.adjust.linux.resources).0, "0", "{made:?}");
    let plain = api::CreateContainerResponse::parse_from_bytes(
        &rt.call("CreateContainer", &create("sidecar"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(plain.adjust.is_none(), "{plain:?}");

    // The snapshot is published after the step that answered.
    bus.wait_for("the Nri property", Duration::from_secs(30), || {
        bus.get("Nri") == "s \"registered with containerd 1.7.24\""
    });
    let line = "container api-0/md-feed (pod trading/api-0): cpuset 0 set at creation by pinnerd (rule md-feed)";
    bus.wait_for("the Containers property", Duration::from_secs(30), || {
        bus.get("Containers").contains(line)
    });
    assert!(!bus.get("Containers").contains("sidecar"));
    // `pinnerd status` says which runtime the daemon is registered with, and the
    // container.
    let status = crate::helper::pinnerd_command()
        .args(["status", "--bus", &bus.address])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{status:?}");
    assert!(
        said.contains("\nnri: registered with containerd 1.7.24\n") && said.contains(line),
        "{said}"
    );
    // Another user reads the cpuset and the rule, not the container's or the pod's names,
    // as `Explain` shows another user's process.
    use crate::daemon::{IFACE, NAME, PATH};
    let out = bus.busctl_as_nobody(&["get-property", NAME, PATH, IFACE, "Containers"]);
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        seen.contains(
            "container (names shown to root only): cpuset 0 set at creation by pinnerd (rule md-feed)"
        ),
        "{seen}"
    );
    for name in ["api-0", "trading"] {
        assert!(!seen.contains(name), "{name} in {seen}");
    }

    // The report of this machine shows them too (to root, as root reads them).
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    crate::report::this_machines_flat_matrix(&m);
    let out = dir.path().join("r");
    let made = crate::helper::pinnerd_command()
        .args(["report", "--bus", &bus.address, "--out"])
        .arg(&out)
        .arg("--matrix")
        .arg(&m)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["daemon"]["nri"], "registered with containerd 1.7.24");
    assert_eq!(json["daemon"]["containers"], serde_json::json!([line]));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(&format!("<li>{line}</li>")),
        "the page's containers section"
    );
    assert!(d
        .log()
        .contains("registered with the container runtime containerd 1.7.24"));
    d.stop();
}
