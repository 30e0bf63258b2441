//! Where a process's memory is, for `Explain` and `ExplainJson` (`memory`). Read on
//! demand only, and never on the loop: `numa_maps` walks the process's page tables
//! under its memory-map lock, which the process can keep busy. The loop answers what it
//! knows and leaves the read, with what it will answer, to a reader thread
//! ([`MemoryRead`], run by `daemon::readers`), which sends the reply itself.
//!
//! ```text
//!   Explain ─► State::answer ─► Answer::Now(reply)          (one node, not shown, errors)
//!                    └────────► Answer::AfterRead(Pending) ─► Action::ReadMemory ─► reader
//!                                                                  └─ numa_maps ─► reply
//! ```

use tokio::sync::oneshot;

use crate::api::{CommandError, Reply};
use crate::daemon::readers::Read;
use crate::memory::{self, MemoryView, ReadError};
use crate::sysroot::SysRoot;

use super::State;

/// What a command gets: its reply now, or after a memory read.
#[derive(Debug)]
pub enum Answer {
    Now(Result<Reply, CommandError>),
    AfterRead(Pending),
}

/// The reply that waits for where process `pid`'s memory is.
#[derive(Debug)]
pub struct Pending {
    pid: i32,
    root: SysRoot,
    nodes: Vec<u32>,
    finish: Finish,
}

/// How the read completes the reply.
#[derive(Debug)]
enum Finish {
    /// `Explain`: its text, with the memory line between `before` and `after`.
    Explain {
        before: String,
        after: String,
        full: bool,
    },
    /// `ExplainJson`'s memory (`Command::Memory`).
    Json,
}

type Reply1 = oneshot::Sender<Result<Reply, CommandError>>;

impl Pending {
    /// Reads on the calling thread and answers: for tests and callers off the loop.
    pub fn here(self) -> Result<Reply, CommandError> {
        let view = memory::read(&self.root, self.pid, &self.nodes);
        self.finish.answer(self.pid, &view)
    }

    /// The read for a reader thread, answering on `reply`.
    pub fn with_reply(self, reply: Reply1) -> MemoryRead {
        MemoryRead {
            pid: self.pid,
            root: self.root,
            nodes: self.nodes,
            answers: vec![(self.finish, reply)],
            first_contact: None,
        }
    }
}

impl Finish {
    fn answer(self, pid: i32, view: &Result<MemoryView, ReadError>) -> Result<Reply, CommandError> {
        match self {
            Finish::Explain {
                before,
                after,
                full,
            } => Ok(Reply::Explained {
                text: format!("{before}{}{after}", memory_line(pid, view)),
                full,
            }),
            Finish::Json => match view {
                Ok(v) => Ok(Reply::Json(v.to_json())),
                Err(ReadError::Gone { .. }) => Err(CommandError::NoSuchProcess(pid as u32)),
                Err(e) => Ok(Reply::Json(serde_json::json!({ "error": e.to_string() }))),
            },
        }
    }
}

/// One read of where process `pid`'s memory is, and every caller waiting for it (asks
/// for a process that waits for its read join it: one read answers them all): callers
/// of `Explain`, and the manager, which weighs a process's memory at first contact.
#[derive(Debug)]
pub struct MemoryRead {
    pid: i32,
    root: SysRoot,
    nodes: Vec<u32>,
    answers: Vec<(Finish, Reply1)>,
    /// The manager waits for it: the process that started then.
    first_contact: Option<u64>,
}

/// What a read found for the manager: process `pid` (started at `start_time`), its
/// bytes per node (`None`: gone, another process, one node, unreadable).
pub type FirstContact = (i32, u64, Option<memory::NodeBytes>);

impl MemoryRead {
    /// The read the manager asked for at first contact (`manager::MemoryWanted`).
    pub fn first_contact(root: &SysRoot, w: crate::manager::MemoryWanted) -> MemoryRead {
        MemoryRead {
            pid: w.pid,
            root: root.clone(),
            nodes: w.nodes,
            answers: Vec::new(),
            first_contact: Some(w.start_time),
        }
    }

    /// Reads, answers every caller (one who gave up is skipped), and hands the manager's
    /// result to `back`.
    pub fn run(self, back: impl FnOnce(FirstContact)) {
        let started = || crate::affinity::read_start_time(&self.root, self.pid, self.pid);
        let before = started();
        let view = memory::read(&self.root, self.pid, &self.nodes);
        for (finish, reply) in self.answers {
            let _ = reply.send(finish.answer(self.pid, &view));
        }
        let Some(start_time) = self.first_contact else {
            return;
        };
        // The pid may have been reused while we read: the start time says.
        let same = before == Some(start_time) && started() == Some(start_time);
        let bytes = match view {
            Ok(MemoryView::Nodes { nodes, .. }) if same => Some(nodes),
            Ok(_) | Err(ReadError::Gone { .. }) => None,
            Err(e) => {
                tracing::warn!(pid = self.pid, error = %e, "cannot read where the process's memory is");
                None
            }
        };
        back((self.pid, start_time, bytes));
    }
}

impl Read for MemoryRead {
    fn pid(&self) -> i32 {
        self.pid
    }
    fn merge(&mut self, newer: Self) {
        self.answers.extend(newer.answers);
        self.first_contact = newer.first_contact.or(self.first_contact);
    }
}

/// The `memory:` line of `Explain`.
fn memory_line(pid: i32, view: &Result<MemoryView, ReadError>) -> String {
    match view {
        Ok(v) => format!("{v}\n"),
        Err(ReadError::Gone { .. }) => "memory: the process exited\n".to_string(),
        Err(e) => {
            tracing::warn!(pid, error = %e, "cannot read where a process's memory is");
            format!("memory: cannot be read: {e}\n")
        }
    }
}

impl State {
    /// The machine's node ids; `None` before the topology is known.
    fn node_ids(&self) -> Option<Vec<u32>> {
        Some(
            self.machine
                .topology
                .as_ref()?
                .nodes
                .iter()
                .map(|n| n.id)
                .collect(),
        )
    }

    /// What `Explain` answers when its text shows memory: the text (`before`) and the
    /// follow lines (`after`) now, the memory line after a read when the machine has
    /// several nodes.
    pub(super) fn explain_memory(&self, pid: i32, before: String, full: bool) -> Answer {
        let after = self.follow_line(pid, std::time::Instant::now());
        let Some(nodes) = self.node_ids() else {
            return Answer::Now(Ok(Reply::Explained {
                text: format!("{before}memory: not seen yet (the topology is not read)\n{after}"),
                full,
            }));
        };
        self.memory_answer(
            pid,
            nodes,
            Finish::Explain {
                before,
                after,
                full,
            },
        )
    }

    /// What `ExplainJson`'s memory (`Command::Memory`) answers, for a caller who sees it.
    pub(super) fn json_memory(&self, pid: i32) -> Answer {
        match self.node_ids() {
            Some(nodes) => self.memory_answer(pid, nodes, Finish::Json),
            None => Answer::Now(Ok(Reply::Json(serde_json::Value::Null))),
        }
    }

    /// On one node nothing is read: the answer is now. Else it waits for the read.
    fn memory_answer(&self, pid: i32, nodes: Vec<u32>, finish: Finish) -> Answer {
        let pending = Pending {
            pid,
            root: self.cfg.sysroot.clone(),
            nodes,
            finish,
        };
        if pending.nodes.len() <= 1 {
            return Answer::Now(pending.here());
        }
        Answer::AfterRead(pending)
    }
}
