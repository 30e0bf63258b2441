//! The plugin's side of the NRI `Plugin` service: one answer per method the runtime
//! calls on connection 1.
//!
//! ```text
//! Configure ──► the events pinnerd wants; the runtime's name and version go to the loop
//! Synchronize (pages, `more`) ──► every existing container asked about ──► updates
//! CreateContainer ──► the loop's decision ──► adjustment (cpus, mems) or none
//! UpdateContainer ──► the container keeps pinnerd's cpuset
//! StopContainer, RemoveContainer, StateChange (NRI 0.6) and the per-event methods
//! (NRI 0.12) ──► the loop hears that a container started or went away
//! ```
//!
//! Every answer is given within the runtime's request timeout and never fails a
//! container: a loop that does not answer within [`Deadline`] means no adjustment, and
//! the reason is logged and told to the loop (for `explain`).
//!
//! Owns: the mapping between NRI messages and [`link`](super::link) values. Must not
//! touch: the socket (`session`), the plan (the daemon's loop decides).

use std::sync::Mutex;
use std::time::Duration;

use protobuf::MessageField;
use tokio::sync::{mpsc, oneshot};

use super::link::{Ask, ContainerFacts, Deadline, Decision, Moment, PodFacts, Update};
use super::proto::api;
use super::ttrpc::code;
use crate::cpuset::CpuSet;

/// The service name on connection 1.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The service name on connection 2.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// The events pinnerd subscribes to: creation (the adjustment), start (the pid), update
/// (keep the cpuset), stop and removal (free the CPUs).
pub const EVENTS: [api::Event; 5] = [
    api::Event::CREATE_CONTAINER,
    api::Event::POST_START_CONTAINER,
    api::Event::UPDATE_CONTAINER,
    api::Event::STOP_CONTAINER,
    api::Event::REMOVE_CONTAINER,
];

/// The subscription mask: bit (event - 1) for each event.
pub fn event_mask(events: &[api::Event]) -> i32 {
    events
        .iter()
        .map(|e| 1i32 << ((*e as i32) - 1))
        .fold(0, |a, b| a | b)
}

/// The most pods, and the most containers, one `Synchronize` may bring, its pages
/// together: far past any node's (the kubelet allows 110 pods by default), so that a
/// runtime paging without end cannot make the daemon grow without end. The ones past it
/// are left as they are (no update), and said.
pub const MAX_SYNCHRONIZED: usize = 16_384;

/// A method's answer: the encoded result, or a ttrpc status code and message.
pub type Answer = Result<Vec<u8>, (i32, String)>;

/// The plugin service of one connection to the runtime.
pub struct Service {
    asks: mpsc::Sender<Ask>,
    deadline: Mutex<Deadline>,
    /// Synchronize pages collected until the last one.
    pages: Mutex<Option<api::SynchronizeRequest>>,
}

impl Service {
    pub fn new(asks: mpsc::Sender<Ask>) -> Service {
        Service {
            asks,
            deadline: Mutex::new(Deadline::for_request_timeout(None)),
            pages: Mutex::new(None),
        }
    }

    /// Where news for the daemon's loop goes.
    pub fn asks(&self) -> mpsc::Sender<Ask> {
        self.asks.clone()
    }

    fn deadline(&self) -> Duration {
        self.deadline.lock().expect("deadline lock").0
    }

    /// The answer to one call of `method` with the encoded argument `payload`.
    pub async fn call(&self, method: &str, payload: &[u8]) -> Answer {
        match method {
            "Configure" => self.configure(decode(payload)?).await,
            "Synchronize" => self.synchronize(decode(payload)?).await,
            "Shutdown" => empty(),
            "CreateContainer" => self.create(decode(payload)?).await,
            "UpdateContainer" => self.update(decode(payload)?).await,
            "StopContainer" => {
                let req: api::StopContainerRequest = decode(payload)?;
                self.tell(Ask::Gone {
                    id: req.container.id.clone(),
                })
                .await;
                encode(&api::StopContainerResponse::new())
            }
            "StateChange" => self.state_change(decode(payload)?).await,
            "StartContainer" | "PostStartContainer" => {
                let ev: api::PodContainerEvent = decode(payload)?;
                let container = facts(ev.pod.as_ref(), &ev.container);
                self.tell(Ask::Started { container }).await;
                empty()
            }
            "RemoveContainer" => {
                let ev: api::PodContainerEvent = decode(payload)?;
                self.tell(Ask::Gone {
                    id: ev.container.id.clone(),
                })
                .await;
                empty()
            }
            // Events pinnerd does not subscribe to; answered empty should a runtime
            // send them anyway.
            "RunPodSandbox"
            | "StopPodSandbox"
            | "RemovePodSandbox"
            | "UpdatePodSandbox"
            | "PostUpdatePodSandbox"
            | "PostCreateContainer"
            | "PostUpdateContainer" => empty(),
            // Unknown and unwanted methods (ValidateContainerAdjustment, newer ones):
            // Unimplemented is the protocol's own answer for them.
            other => Err((
                code::UNIMPLEMENTED,
                format!("pinnerd does not implement {other}"),
            )),
        }
    }

    async fn configure(&self, req: api::ConfigureRequest) -> Answer {
        let timeout = u64::try_from(req.request_timeout)
            .ok()
            .map(Duration::from_millis);
        *self.deadline.lock().expect("deadline lock") = Deadline::for_request_timeout(timeout);
        tracing::info!(
            runtime = %req.runtime_name,
            version = %req.runtime_version,
            nri = %req.NRI_version,
            "nri: registered with the container runtime {} {}",
            req.runtime_name,
            req.runtime_version
        );
        self.tell(Ask::Registered {
            runtime: req.runtime_name.clone(),
            version: req.runtime_version.clone(),
        })
        .await;
        let mut resp = api::ConfigureResponse::new();
        resp.events = event_mask(&EVENTS);
        encode(&resp)
    }

    async fn synchronize(&self, req: api::SynchronizeRequest) -> Answer {
        let more = req.more;
        let all = {
            let mut pages = self.pages.lock().expect("pages lock");
            let mut all = pages.take().unwrap_or_default();
            let left = (req.pods.len() + req.containers.len())
                .saturating_sub(MAX_SYNCHRONIZED * 2 - all.pods.len() - all.containers.len());
            let room = MAX_SYNCHRONIZED - all.pods.len();
            all.pods.extend(req.pods.into_iter().take(room));
            let room = MAX_SYNCHRONIZED - all.containers.len();
            all.containers.extend(req.containers.into_iter().take(room));
            if left > 0 {
                tracing::warn!(
                    "nri: Synchronize brought more than {MAX_SYNCHRONIZED} pods or containers; the rest are left as they are"
                );
            }
            if more {
                *pages = Some(all);
                None
            } else {
                Some(all)
            }
        };
        let mut resp = api::SynchronizeResponse::new();
        resp.more = more;
        if let Some(all) = all {
            for c in &all.containers {
                let pod = all.pods.iter().find(|p| p.id == c.pod_sandbox_id);
                let container = facts(pod, &MessageField::some(c.clone()));
                if let Some(update) = self.placed(container, Moment::Synchronize).await {
                    resp.update.push(container_update(&update));
                }
            }
        }
        encode(&resp)
    }

    async fn create(&self, req: api::CreateContainerRequest) -> Answer {
        let container = facts(req.pod.as_ref(), &req.container);
        let mut resp = api::CreateContainerResponse::new();
        if let Some(u) = self.placed(container, Moment::Creation).await {
            let mut adjust = api::ContainerAdjustment::new();
            let mut linux = api::LinuxContainerAdjustment::new();
            linux.resources = MessageField::some(resources(&u));
            adjust.linux = MessageField::some(linux);
            resp.adjust = MessageField::some(adjust);
        }
        encode(&resp)
    }

    async fn update(&self, req: api::UpdateContainerRequest) -> Answer {
        let container = facts(req.pod.as_ref(), &req.container);
        let mut resp = api::UpdateContainerResponse::new();
        if let Some(u) = self.placed(container, Moment::Update).await {
            resp.update.push(container_update(&u));
        }
        encode(&resp)
    }

    async fn state_change(&self, ev: api::StateChangeEvent) -> Answer {
        let event = ev.event.enum_value_or(api::Event::UNKNOWN);
        match event {
            api::Event::START_CONTAINER | api::Event::POST_START_CONTAINER => {
                let container = facts(ev.pod.as_ref(), &ev.container);
                self.tell(Ask::Started { container }).await;
            }
            api::Event::REMOVE_CONTAINER | api::Event::STOP_CONTAINER => {
                self.tell(Ask::Gone {
                    id: ev.container.id.clone(),
                })
                .await;
            }
            _ => {}
        }
        empty()
    }

    /// The loop's cpuset for `container`, or `None` (no rule, undecided, or no answer in
    /// time: each said).
    async fn placed(&self, container: ContainerFacts, moment: Moment) -> Option<Update> {
        let (reply, answer) = oneshot::channel();
        let title = container.title();
        let id = container.id.clone();
        let kept = container.clone();
        let asked = async {
            self.asks
                .send(Ask::Place {
                    container,
                    moment,
                    reply,
                })
                .await
                .ok()?;
            answer.await.ok()
        };
        let deadline = self.deadline();
        let reason = match tokio::time::timeout(deadline, asked).await {
            Ok(Some(Decision::Place { rule, cpus, mems })) => {
                tracing::info!(container = %title, rule = %rule, cpus = %cpus,
                    "nri: container {title}: cpuset {cpus} by rule {rule}");
                return Some(Update {
                    id,
                    cpus,
                    mems,
                    title,
                });
            }
            Ok(Some(Decision::NoRule)) => return None,
            Ok(Some(Decision::Undecided { rule, reason })) => {
                tracing::warn!(container = %title, rule = %rule,
                    "nri: container {title}: no adjustment: {reason}");
                return None;
            }
            Ok(None) => "the daemon's loop is not taking questions".to_string(),
            Err(_) => format!("the plan did not answer within {} ms", deadline.as_millis()),
        };
        tracing::warn!(container = %title, "nri: container {title}: no adjustment: {reason}");
        // Told without waiting: a loop too busy to answer is too busy to wait on.
        let _ = self.asks.try_send(Ask::Unanswered {
            container: kept,
            reason,
        });
        None
    }

    /// News for the loop, dropped rather than waited on past the deadline.
    async fn tell(&self, ask: Ask) {
        let _ = tokio::time::timeout(self.deadline(), self.asks.send(ask)).await;
    }
}

/// The facts of `c` in `pod`.
pub fn facts(pod: Option<&api::PodSandbox>, c: &MessageField<api::Container>) -> ContainerFacts {
    let c = c.as_ref().cloned().unwrap_or_default();
    let pod = pod
        .map(|p| PodFacts {
            id: p.id.clone(),
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            uid: p.uid.clone(),
            labels: p
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
        .unwrap_or_default();
    let linux = c.linux.as_ref();
    let cpus = linux
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|cpu| cpu.cpus.trim())
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse::<CpuSet>().ok());
    ContainerFacts {
        id: c.id.clone(),
        name: c.name.clone(),
        pod,
        cpus,
        pid: (c.pid != 0).then_some(c.pid),
        cgroups_path: linux.map(|l| l.cgroups_path.clone()).unwrap_or_default(),
    }
}

/// `linux.resources.cpu.{cpus,mems}` for `u`.
pub fn resources(u: &Update) -> api::LinuxResources {
    let mut cpu = api::LinuxCPU::new();
    cpu.cpus = u.cpus.to_string();
    if let Some(mems) = &u.mems {
        cpu.mems = mems.to_string();
    }
    let mut r = api::LinuxResources::new();
    r.cpu = MessageField::some(cpu);
    r
}

/// A `ContainerUpdate` setting `u`'s cpuset.
pub fn container_update(u: &Update) -> api::ContainerUpdate {
    let mut linux = api::LinuxContainerUpdate::new();
    linux.resources = MessageField::some(resources(u));
    let mut update = api::ContainerUpdate::new();
    update.container_id = u.id.clone();
    update.linux = MessageField::some(linux);
    update
}

fn decode<M: protobuf::Message>(payload: &[u8]) -> Result<M, (i32, String)> {
    M::parse_from_bytes(payload)
        .map_err(|e| (code::INTERNAL, format!("{} does not decode: {e}", M::NAME)))
}

fn encode<M: protobuf::Message>(m: &M) -> Answer {
    m.write_to_bytes()
        .map_err(|e| (code::INTERNAL, format!("{} does not encode: {e}", M::NAME)))
}

fn empty() -> Answer {
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::Message as _;

    /// A loop that answers every question with no rule, counting the questions.
    fn no_rule_loop() -> (Service, tokio::task::JoinHandle<usize>) {
        let (asks, mut rx) = mpsc::channel(16);
        let answering = tokio::spawn(async move {
            let mut asked = 0;
            while let Some(ask) = rx.recv().await {
                if let Ask::Place { reply, .. } = ask {
                    asked += 1;
                    let _ = reply.send(Decision::NoRule);
                }
            }
            asked
        });
        (Service::new(asks), answering)
    }

    /// Every method the runtime may call, and one it may not.
    const METHODS: [&str; 18] = [
        "Configure",
        "Synchronize",
        "Shutdown",
        "CreateContainer",
        "UpdateContainer",
        "StopContainer",
        "StateChange",
        "StartContainer",
        "PostStartContainer",
        "RemoveContainer",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "UpdatePodSandbox",
        "PostUpdatePodSandbox",
        "PostCreateContainer",
        "PostUpdateContainer",
        "ValidateContainerAdjustment",
    ];

    /// Arguments as a broken runtime might send them: random bytes, and well-formed
    /// messages with cpusets no machine has. Each method answers (a result or a
    /// status), never panics, and a cpuset it cannot read is taken as none given.
    #[tokio::test]
    async fn every_method_answers_random_and_absurd_arguments() {
        let (service, _answering) = no_rule_loop();
        let mut rng = crate::measure::rng::Rng::new(49);
        let mut decoded = 0;
        for _ in 0..200 {
            for method in METHODS {
                let len = rng.below(120);
                let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                decoded += usize::from(service.call(method, &payload).await.is_ok());
            }
        }
        assert!(
            decoded > 0,
            "some random arguments decode (as empty messages)"
        );
        for cpus in ["0-4294967295", "18446744073709551616", "4-2", "0-3,x", ""] {
            let mut cpu = api::LinuxCPU::new();
            cpu.cpus = cpus.into();
            let mut r = api::LinuxResources::new();
            r.cpu = MessageField::some(cpu);
            let mut linux = api::LinuxContainer::new();
            linux.resources = MessageField::some(r);
            let mut c = api::Container::new();
            c.id = "c".into();
            c.linux = MessageField::some(linux);
            let facts = facts(None, &MessageField::some(c.clone()));
            assert_eq!(facts.cpus, None, "{cpus}");
            let mut req = api::CreateContainerRequest::new();
            req.container = MessageField::some(c);
            let answer = service
                .call("CreateContainer", &req.write_to_bytes().unwrap())
                .await;
            assert!(answer.is_ok(), "{cpus}: {answer:?}");
        }
    }

    /// A runtime that pages on past any node's size: the daemon keeps
    /// [`MAX_SYNCHRONIZED`] containers and asks about those only.
    #[tokio::test]
    async fn synchronize_keeps_no_more_than_its_bound() {
        let (service, answering) = no_rule_loop();
        let page = MAX_SYNCHRONIZED / 2 + 1;
        for more in [true, true, false] {
            let mut req = api::SynchronizeRequest::new();
            req.more = more;
            req.containers = (0..page)
                .map(|i| {
                    let mut c = api::Container::new();
                    c.id = format!("c{i}");
                    c
                })
                .collect();
            let bytes = req.write_to_bytes().unwrap();
            assert!(service.call("Synchronize", &bytes).await.is_ok());
            if more {
                let kept = service.pages.lock().unwrap();
                assert!(kept.as_ref().unwrap().containers.len() <= MAX_SYNCHRONIZED);
            }
        }
        drop(service);
        assert_eq!(answering.await.unwrap(), MAX_SYNCHRONIZED);
    }

    #[test]
    fn the_mask_sets_bit_event_minus_one() {
        assert_eq!(event_mask(&[api::Event::RUN_POD_SANDBOX]), 1);
        assert_eq!(event_mask(&[api::Event::CREATE_CONTAINER]), 1 << 3);
        // create, post-start, update, stop, remove
        assert_eq!(event_mask(&EVENTS), 0b110_1100_1000);
    }
}
