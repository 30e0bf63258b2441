//! One connection to the runtime's NRI socket, from registration to its end.
//!
//! ```text
//!            ┌─ reader: frames ─► conn 1: requests ─► a task each: Service::call ─┐
//! socket ◄──►│                   conn 2: responses ─► the caller waiting on them   │
//!            └─ writer: one task, frames from every sender ◄───────────────────────┘
//! RegisterPlugin (conn 2, within 5 s) first; UpdateContainers (conn 2) whenever the
//! loop sends updates.
//! ```
//!
//! Owns: the socket of one session, the stream ids of pinnerd's own calls. Must not
//! touch: the answers (`plugin`), reconnection (`connect`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protobuf::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::link::{Ask, Update};
use super::plugin::{container_update, Answer, Service, RUNTIME_SERVICE};
use super::proto::api;
use super::ttrpc::{Message, Reassembly, TYPE_REQUEST, TYPE_RESPONSE};
use super::{mux, Registration};

/// The runtime's registration timeout (NRI's default).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an `UpdateContainers` call may take.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a batch of updates is sent before the containers left unmoved are
/// given up on (until the plan gives them other CPUs), and the wait before the first
/// retry (doubled for each next one): 0.25 s, 0.5 s, 1 s.
pub const UPDATE_ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(250);

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionEnd {
    #[error("the runtime closed the connection")]
    Closed,
    #[error("the runtime refused the registration: {0}")]
    Refused(String),
    #[error("the runtime did not answer the registration within 5 s")]
    RegistrationTimeout,
    #[error("{0}")]
    Mux(#[from] mux::MuxError),
    #[error("{0}")]
    Ttrpc(#[from] super::ttrpc::TtrpcError),
}

/// pinnerd's own calls to the runtime, waiting for their answers.
#[derive(Clone)]
struct Caller {
    out: mpsc::UnboundedSender<Vec<u8>>,
    next: Arc<AtomicU32>,
    waiting: Arc<Mutex<HashMap<u32, oneshot::Sender<Answer>>>>,
}

impl Caller {
    async fn call(&self, method: &str, payload: Vec<u8>, timeout: Duration) -> Option<Answer> {
        let stream = self.next.fetch_add(2, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .expect("waiting lock")
            .insert(stream, tx);
        let msg = Message::request(stream, RUNTIME_SERVICE, method, payload);
        let sent = msg
            .encode()
            .ok()
            .and_then(|bytes| mux::encode(mux::RUNTIME_CONN, &bytes).ok())
            .map(|frame| self.out.send(frame).is_ok())
            .unwrap_or(false);
        let answer = if sent {
            tokio::time::timeout(timeout, rx)
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        self.waiting.lock().expect("waiting lock").remove(&stream);
        answer
    }

    fn answered(&self, msg: &Message) {
        let Some(tx) = self
            .waiting
            .lock()
            .expect("waiting lock")
            .remove(&msg.stream)
        else {
            return;
        };
        let answer = match msg.as_response() {
            Ok(a) => a,
            Err(e) => Err((super::ttrpc::code::INTERNAL, e.to_string())),
        };
        let _ = tx.send(answer);
    }
}

/// Runs one session on `socket` until the runtime goes away. `updates` are sent as
/// `UpdateContainers` while it lasts; what is left unsent stays in the channel.
pub async fn run(
    socket: UnixStream,
    who: &Registration,
    service: Arc<Service>,
    updates: &mut mpsc::Receiver<Vec<Update>>,
) -> SessionEnd {
    let (mut reader, mut writer) = socket.into_split();
    let (out, mut frames) = mpsc::unbounded_channel::<Vec<u8>>();
    let write_task = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    let caller = Caller {
        out: out.clone(),
        next: Arc::new(AtomicU32::new(1)),
        waiting: Arc::default(),
    };
    let (reg_tx, mut registration) = oneshot::channel();
    {
        let caller = caller.clone();
        let mut req = api::RegisterPluginRequest::new();
        req.plugin_name = who.name.clone();
        req.plugin_idx = who.index.clone();
        let payload = req.write_to_bytes().expect("encoding a request in memory");
        tokio::spawn(async move {
            let answer = caller
                .call("RegisterPlugin", payload, REGISTRATION_TIMEOUT)
                .await;
            let _ = reg_tx.send(answer);
        });
    }
    let mut incoming = Reassembly::default();
    let mut answers = Reassembly::default();
    let mut registered = false;
    let end = loop {
        tokio::select! {
            frame = mux::read(&mut reader) => {
                let frame = match frame {
                    Ok(Some(f)) => f,
                    Ok(None) => break SessionEnd::Closed,
                    Err(e) => break e.into(),
                };
                let result = match frame.conn {
                    mux::PLUGIN_CONN => {
                        incoming.push(&frame.payload);
                        serve(&mut incoming, &service, &out)
                    }
                    mux::RUNTIME_CONN => {
                        answers.push(&frame.payload);
                        take_answers(&mut answers, &caller)
                    }
                    _ => Ok(()),
                };
                if let Err(e) = result {
                    break e;
                }
            }
            answer = &mut registration, if !registered => {
                registered = true;
                match answer {
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err((_, message)))) => break SessionEnd::Refused(message),
                    _ => break SessionEnd::RegistrationTimeout,
                }
            }
            batch = updates.recv(), if registered => {
                let Some(batch) = batch else { continue };
                send_updates(&caller, batch, service.asks());
            }
        }
    };
    write_task.abort();
    end
}

/// Answers every whole request that has arrived on connection 1, each on a task of its
/// own so that a slow answer holds up no other.
fn serve(
    incoming: &mut Reassembly,
    service: &Arc<Service>,
    out: &mpsc::UnboundedSender<Vec<u8>>,
) -> Result<(), SessionEnd> {
    while let Some(msg) = incoming.next_message()? {
        if msg.kind != TYPE_REQUEST {
            continue;
        }
        let req = msg.as_request()?;
        let service = Arc::clone(service);
        let out = out.clone();
        tokio::spawn(async move {
            let answer = if req.service == super::plugin::PLUGIN_SERVICE {
                service.call(&req.method, &req.payload).await
            } else {
                Err((
                    super::ttrpc::code::UNIMPLEMENTED,
                    format!("no service {}", req.service),
                ))
            };
            let reply = Message::response(msg.stream, answer);
            if let Ok(frame) = reply
                .encode()
                .map_err(SessionEnd::from)
                .and_then(|b| mux::encode(mux::PLUGIN_CONN, &b).map_err(SessionEnd::from))
            {
                let _ = out.send(frame);
            }
        });
    }
    Ok(())
}

fn take_answers(answers: &mut Reassembly, caller: &Caller) -> Result<(), SessionEnd> {
    while let Some(msg) = answers.next_message()? {
        if msg.kind == TYPE_RESPONSE {
            caller.answered(&msg);
        }
    }
    Ok(())
}

/// `UpdateContainers` for `batch`, on a task of its own. The containers the runtime
/// did not move (it listed them as failed, refused the call, or did not answer) are sent
/// again after a wait that doubles, `UPDATE_ATTEMPTS` times in all; each failure is said
/// in the journal with the container, its CPUs and the runtime's reason, and those still
/// unmoved at the end are told to the loop (`Ask::NotMoved`) for `explain` and `status`.
fn send_updates(caller: &Caller, batch: Vec<Update>, asks: mpsc::Sender<Ask>) {
    if batch.is_empty() {
        return;
    }
    let caller = caller.clone();
    tokio::spawn(async move {
        let mut pending = batch;
        let mut wait = FIRST_RETRY;
        for attempt in 1..=UPDATE_ATTEMPTS {
            let (moved, unmoved) = update_once(&caller, pending).await;
            for u in &moved {
                tracing::info!(container = %u.title, cpus = %u.cpus,
                    "nri: container {} moved to cpuset {}", u.title, u.cpus);
            }
            if unmoved.is_empty() {
                return;
            }
            let last = attempt == UPDATE_ATTEMPTS;
            for (u, reason) in &unmoved {
                if last {
                    tracing::warn!(container = %u.title, cpus = %u.cpus,
                        "nri: the runtime did not move container {} to CPUs {}: {reason}; given up after {attempt} attempts: it keeps its cpuset until the plan gives it other CPUs",
                        u.title, u.cpus);
                } else {
                    tracing::warn!(container = %u.title, cpus = %u.cpus,
                        "nri: the runtime did not move container {} to CPUs {}: {reason}; trying again in {} ms (attempt {} of {UPDATE_ATTEMPTS})",
                        u.title, u.cpus, wait.as_millis(), attempt + 1);
                }
            }
            if last {
                for (u, reason) in unmoved {
                    let _ = asks
                        .send(Ask::NotMoved {
                            id: u.id,
                            cpus: u.cpus,
                            reason: format!("{reason} ({UPDATE_ATTEMPTS} attempts)"),
                        })
                        .await;
                }
                return;
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
            pending = unmoved.into_iter().map(|(u, _)| u).collect();
        }
    });
}

/// One `UpdateContainers` call: the updates the runtime made, and those it did not, each
/// with the reason in words.
async fn update_once(caller: &Caller, batch: Vec<Update>) -> (Vec<Update>, Vec<(Update, String)>) {
    let mut req = api::UpdateContainersRequest::new();
    req.update = batch.iter().map(container_update).collect();
    let payload = req.write_to_bytes().expect("encoding a request in memory");
    let all = |batch: Vec<Update>, reason: String| {
        let unmoved = batch.into_iter().map(|u| (u, reason.clone())).collect();
        (Vec::new(), unmoved)
    };
    match caller
        .call("UpdateContainers", payload, UPDATE_TIMEOUT)
        .await
    {
        Some(Ok(bytes)) => {
            let failed: Vec<String> = match api::UpdateContainersResponse::parse_from_bytes(&bytes)
            {
                Ok(r) => r.failed.into_iter().map(|f| f.container_id).collect(),
                Err(e) => {
                    return all(batch, format!("its answer does not decode: {e}"));
                }
            };
            let (unmoved, moved): (Vec<Update>, Vec<Update>) =
                batch.into_iter().partition(|u| failed.contains(&u.id));
            let reason = "the runtime listed it among the failed updates (NRI gives no reason for those; containerd's log may)";
            (
                moved,
                unmoved
                    .into_iter()
                    .map(|u| (u, reason.to_string()))
                    .collect(),
            )
        }
        Some(Err((code, message))) => all(
            batch,
            format!(
                "the runtime refused the call ({}): {message}",
                super::ttrpc::code::name(code)
            ),
        ),
        None => all(
            batch,
            format!(
                "no answer within {} s (or the connection ended)",
                UPDATE_TIMEOUT.as_secs()
            ),
        ),
    }
}
