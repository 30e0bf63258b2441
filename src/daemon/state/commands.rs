//! The answers to D-Bus commands ([`State::answer`], [`State::command`]): plain
//! synchronous functions, called by the loop for each command and by unit tests
//! directly; an answer that waits for a memory read says so (`state/memory.rs`). Run-time pins are
//! in `state/pinning.rs`. Same state, same loop as `state/mod.rs`.

use std::time::Instant;

use crate::api::{Command, CommandError, ManagedEntry, Reply};

use super::memory::Answer;
use super::{ReloadCause, State};

impl State {
    /// Answers one command; a memory read it needs is made on the calling thread (tests,
    /// callers off the loop). The loop uses [`State::answer`], which leaves that read
    /// to a reader thread.
    pub fn command(&mut self, cmd: Command) -> Result<Reply, CommandError> {
        match self.answer(cmd) {
            Answer::Now(reply) => reply,
            Answer::AfterRead(pending) => pending.here(),
        }
    }

    /// Answers one command now, or says which memory read its answer waits for
    /// (`Explain` and `ExplainJson` of a process on a machine of several nodes).
    pub fn answer(&mut self, cmd: Command) -> Answer {
        match cmd {
            Command::Explain { pid, caller_uid } => self.explain(pid, caller_uid),
            Command::Memory { pid, caller_uid } => {
                if pid == 0 || !self.cfg.sysroot.proc_path(pid.to_string()).exists() {
                    return Answer::Now(Err(CommandError::NoSuchProcess(pid)));
                }
                let Some(m) = &self.managed.manager else {
                    return Answer::Now(Err(CommandError::Starting));
                };
                if !m.shows_memory(pid as i32, caller_uid) {
                    return Answer::Now(Ok(Reply::Json(serde_json::Value::Null)));
                }
                self.json_memory(pid as i32)
            }
            other => Answer::Now(self.reply(other)),
        }
    }

    /// `Explain`: the text now; the memory line, for those who see it, after a read.
    fn explain(&self, pid: u32, caller_uid: u32) -> Answer {
        if pid == 0 || !self.cfg.sysroot.proc_path(pid.to_string()).exists() {
            return Answer::Now(Err(CommandError::NoSuchProcess(pid)));
        }
        let Some(m) = &self.managed.manager else {
            return Answer::Now(Err(CommandError::Starting));
        };
        let mut text = m.explain_for(pid as i32, caller_uid);
        let full = m.shows_all_to(pid as i32, caller_uid);
        if let (true, Some(line)) = (full, self.hold_line(pid)) {
            text.push_str(&format!("held: {line}\n"));
        }
        if !m.shows_memory(pid as i32, caller_uid) {
            return Answer::Now(Ok(Reply::Explained { text, full }));
        }
        self.explain_memory(pid as i32, text, full)
    }

    /// Answers every command but `Explain` and `Memory`.
    fn reply(&mut self, cmd: Command) -> Result<Reply, CommandError> {
        match cmd {
            Command::Remeasure => Ok(Reply::Job(self.remeasure(Instant::now()))),
            Command::Reload => {
                self.reload(ReloadCause::Bus);
                Ok(Reply::Reloaded {
                    rules: self.loaded.rules.rules.len() as u32,
                    errors: self.rule_errors(),
                })
            }
            Command::GetMatrix => Ok(self.matrix_reply()),
            Command::Metrics => Ok(Reply::Text(self.metrics_text())),
            Command::ListManaged { caller_uid } => {
                Ok(Reply::Managed(self.managed_rows(caller_uid)))
            }
            // Answered by `answer` (they may wait for a memory read).
            cmd @ (Command::Explain { .. } | Command::Memory { .. }) => self.command(cmd),
            cmd @ (Command::PinWith { .. }
            | Command::PlanWith { .. }
            | Command::Owner { .. }
            | Command::AsOwner { .. }) => self.runtime_command(cmd),
            Command::Release { pid } => {
                let pid_i = i32::try_from(pid).map_err(|_| CommandError::NotManaged(pid))?;
                let m = self
                    .managed
                    .manager
                    .as_mut()
                    .ok_or(CommandError::Starting)?;
                match m.unpin(pid_i) {
                    Ok(mut changes) => {
                        changes.extend(self.managed.settle());
                        tracing::info!(pid, "released at run time");
                        self.after_manager(changes);
                        Ok(Reply::Done)
                    }
                    Err(e) => Err(CommandError::from_manager(pid, e)),
                }
            }
        }
    }

    pub(super) fn matrix_reply(&self) -> Reply {
        match &self.machine.current {
            Some(m) => Reply::Matrix {
                cpus: m.cpus.clone(),
                latency_ns: m
                    .latency_ns
                    .iter()
                    .map(|row| row.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
                    .collect(),
            },
            None => Reply::Matrix {
                cpus: Vec::new(),
                latency_ns: Vec::new(),
            },
        }
    }

    /// Every managed process as `caller_uid` may see it: root and a process's owner get
    /// its row whole; anyone else its pid, rule and CPUs only (`comm` and `state`
    /// empty), as `Explain` shows it.
    fn managed_rows(&self, caller_uid: u32) -> Vec<ManagedEntry> {
        let Some(m) = &self.managed.manager else {
            return Vec::new();
        };
        m.list_managed()
            .into_iter()
            .map(|r| {
                let full = m.shows_all_to(r.pid as i32, caller_uid);
                ManagedEntry {
                    pid: r.pid,
                    comm: if full { r.comm } else { String::new() },
                    rule: r.rule,
                    cpus: r.cpus,
                    state: if full { r.state } else { String::new() },
                }
            })
            .collect()
    }
}
