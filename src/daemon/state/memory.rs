//! Where a process's memory is, for `Explain` and `ExplainJson` (`memory`). Read on
//! demand only, and never on the loop: `numa_maps` walks the process's page tables
//! under its memory-map lock, which the process can keep busy. The loop answers what it
//! knows and leaves the read, with what it will answer, to a reader thread
//! ([`MemoryRead`], run by `daemon::readers`), which sends the reply itself.
//!
//! ```text
//!   Explain ─► State::call ─► answered now                (one node, not shown, errors)
//!                  └────────► MemoryRead ─► Action::ReadMemory ─► reader
//!                                                                  └─ numa_maps ─► reply
//! ```

use crate::api::{send, CommandError, Explained, ReplyTo};
use crate::daemon::readers::Read;
use crate::memory::{self, MemoryJson, MemoryView, ReadError, UnreadableJson};
use crate::sysroot::SysRoot;

/// A caller waiting for a read, and how the read completes its answer.
#[derive(Debug)]
pub(super) enum Finish {
    /// `Explain`: its text, with the memory line between `before`'s text and `after`.
    Explain {
        before: Explained,
        after: String,
        reply: ReplyTo<Explained>,
    },
    /// `ExplainJson`'s memory (`Call::Memory`).
    Json(ReplyTo<Option<MemoryJson>>),
}

impl Finish {
    fn answer(self, pid: i32, view: &Result<MemoryView, ReadError>) {
        match self {
            Finish::Explain {
                before,
                after,
                reply,
            } => send(
                reply,
                Ok(Explained {
                    text: format!("{}{}{after}", before.text, memory_line(pid, view)),
                    ..before
                }),
            ),
            Finish::Json(reply) => send(
                reply,
                match view {
                    Ok(v) => Ok(Some(v.to_json())),
                    Err(ReadError::Gone { .. }) => Err(CommandError::NoSuchProcess(pid as u32)),
                    Err(e) => Ok(Some(MemoryJson::Unreadable(UnreadableJson {
                        error: e.to_string(),
                    }))),
                },
            ),
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
    answers: Vec<Finish>,
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
        for finish in self.answers {
            finish.answer(self.pid, &view);
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
                tracing::warn!(pid = self.pid, error = %e, "cannot read where the memory of pid {} is: {e}", self.pid);
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
            tracing::warn!(pid, error = %e, "cannot read where the memory of pid {pid} is: {e}");
            format!("memory: cannot be read: {e}\n")
        }
    }
}

/// On one node nothing is read: `finish` is answered now. Else the answer waits for
/// the read returned.
pub(super) fn answer(
    root: &SysRoot,
    pid: i32,
    nodes: Vec<u32>,
    finish: Finish,
) -> Option<MemoryRead> {
    if nodes.len() <= 1 {
        finish.answer(pid, &memory::read(root, pid, &nodes));
        return None;
    }
    Some(MemoryRead {
        pid,
        root: root.clone(),
        nodes,
        answers: vec![finish],
        first_contact: None,
    })
}
