//! The answers to D-Bus calls ([`State::call`]): one plain synchronous function per
//! call, each returning its own answer type, called by the loop for each call and by
//! unit tests directly; an answer that waits for a memory read leaves the read to a
//! reader thread (`state/memory.rs`). Run-time pins are in `state/pinning.rs`. Same
//! state, same loop as `state/mod.rs`.

use std::time::Instant;

use crate::api::{send, Call, CommandError, Explained, Reloaded, ReplyTo};

use super::event::ReloadCause;
use super::memory::{self, MemoryRead};
use super::{Action, State};

impl State {
    /// Answers one call on its reply; a memory read it waits for (`Explain` and
    /// `ExplainJson` of a process on a machine of several nodes) is left to a reader
    /// thread ([`Action::ReadMemory`]), which answers it.
    pub fn call(&mut self, call: Call) {
        if let Some(read) = self.answer(call) {
            self.actions.push(Action::ReadMemory(Box::new(read)));
        }
    }

    /// [`State::call`], with the memory read made on the calling thread: for tests and
    /// callers off the loop.
    pub fn call_here(&mut self, call: Call) {
        if let Some(read) = self.answer(call) {
            read.run(|_| {});
        }
    }

    /// Answers `call` now, or returns the memory read its answer waits for.
    fn answer(&mut self, call: Call) -> Option<MemoryRead> {
        match call {
            Call::Remeasure(reply) => send(reply, Ok(self.remeasure(Instant::now()))),
            Call::Reload(reply) => send(reply, Ok(self.reload_by_bus())),
            Call::GetMatrix(reply) => send(reply, self.machine.matrix_reply()),
            Call::GetMatrixRows {
                first,
                count,
                reply,
            } => send(reply, self.machine.matrix_rows(first, count)),
            Call::Metrics(reply) => send(reply, Ok(self.metrics_text())),
            Call::ListManaged { caller_uid, reply } => {
                send(reply, Ok(self.managed.rows(caller_uid)))
            }
            Call::Explain {
                pid,
                caller_uid,
                reply,
            } => return self.explain(pid, caller_uid, reply),
            Call::Memory {
                pid,
                caller_uid,
                reply,
            } => return self.memory(pid, caller_uid, reply),
            Call::PlanWith { place, reply } => send(reply, self.plan_with(&place)),
            Call::Pin { pin, reply } => send(reply, self.pin(pin)),
            Call::Release { release, reply } => send(reply, self.release(release)),
            Call::Owner { pid, reply } => send(reply, self.owner(pid)),
            Call::Container {
                pid,
                caller_uid,
                reply,
            } => send(reply, self.container_of(pid, caller_uid)),
        }
        None
    }

    /// `Reload`: settings and rules read again.
    fn reload_by_bus(&mut self) -> Reloaded {
        self.reload(ReloadCause::Bus);
        Reloaded {
            rules: self.rules().len() as u32,
            errors: self.rule_errors(),
        }
    }

    /// The manager, for a call about process `pid` that exists.
    fn manager_for(&self, pid: u32) -> Result<&crate::manager::Manager, CommandError> {
        if pid == 0 || !self.root().proc_path(pid.to_string()).exists() {
            return Err(CommandError::NoSuchProcess(pid));
        }
        self.managed.manager().ok_or(CommandError::Starting)
    }

    /// `ExplainJson`'s memory: `null` for a caller who may not see it.
    fn memory(
        &self,
        pid: u32,
        caller_uid: u32,
        reply: ReplyTo<Option<crate::memory::MemoryJson>>,
    ) -> Option<MemoryRead> {
        match self.manager_for(pid) {
            Err(e) => send(reply, Err(e)),
            Ok(m) if !m.shows_memory(pid as i32, caller_uid) => send(reply, Ok(None)),
            Ok(_) => return self.json_memory(pid as i32, reply),
        }
        None
    }

    /// `Explain`: the text now; the memory line, for those who see it, after a read.
    fn explain(
        &self,
        pid: u32,
        caller_uid: u32,
        reply: ReplyTo<crate::api::Explained>,
    ) -> Option<MemoryRead> {
        let m = match self.manager_for(pid) {
            Ok(m) => m,
            Err(e) => {
                send(reply, Err(e));
                return None;
            }
        };
        let mut text = m.explain_for(pid as i32, caller_uid);
        let full = m.shows_all_to(pid as i32, caller_uid);
        if let (true, Some(line)) = (full, self.sharing.hold_line(pid)) {
            text.push_str(&format!("held: {line}\n"));
        }
        // What only the boot gives the CPUs it holds (public: /proc/cmdline, sysfs).
        let held = m.held_cpus(pid as i32);
        if let Some(line) = crate::boot_cpus::read(&self.cfg.sysroot).said(&held) {
            text.push_str(&format!("{line}\n"));
        }
        let sched = match full {
            true => m.thread_classes(pid as i32),
            false => Vec::new(),
        };
        if full {
            for line in self.sharing.knob_lines(&self.cfg.sysroot, &held) {
                text.push_str(&format!("{line}\n"));
            }
        }
        if !m.shows_memory(pid as i32, caller_uid) {
            send(reply, Ok(crate::api::Explained { text, full, sched }));
            return None;
        }
        self.explain_memory(pid as i32, Explained { text, full, sched }, reply)
    }

    /// What `Explain` answers when its text shows memory: the text (`before`) and the
    /// follow lines now, the memory line after a read when the machine has several
    /// nodes.
    fn explain_memory(
        &self,
        pid: i32,
        before: Explained,
        reply: ReplyTo<Explained>,
    ) -> Option<MemoryRead> {
        let after = self.follow_line(pid, Instant::now());
        let Some(nodes) = self.machine.node_ids() else {
            let text = format!(
                "{}memory: not seen yet (the topology is not read)\n{after}",
                before.text
            );
            send(reply, Ok(Explained { text, ..before }));
            return None;
        };
        let finish = memory::Finish::Explain {
            before,
            after,
            reply,
        };
        memory::answer(&self.cfg.sysroot, pid, nodes, finish)
    }

    /// The container process `pid` runs in, for a caller who sees all of it (root, its
    /// owner): as the runtime told it over NRI, else as containerd's files say.
    fn container_of(
        &self,
        pid: u32,
        caller_uid: u32,
    ) -> Result<Option<crate::api::ContainerView>, CommandError> {
        let m = self.manager_for(pid)?;
        if !m.shows_all_to(pid as i32, caller_uid) {
            return Ok(None);
        }
        Ok(m.container_of_process(pid as i32).map(|(id, info)| {
            self.containers
                .view(&id)
                .unwrap_or(crate::api::ContainerView {
                    id: String::new(),
                    name: info.name,
                    pod: info.pod,
                    namespace: info.namespace,
                    cpuset: None,
                    how: "no cpuset from pinnerd (not told by the runtime over NRI)".into(),
                })
        }))
    }

    /// What `ExplainJson`'s memory (`Call::Memory`) answers, for a caller who sees it.
    fn json_memory(
        &self,
        pid: i32,
        reply: ReplyTo<Option<crate::memory::MemoryJson>>,
    ) -> Option<MemoryRead> {
        match self.machine.node_ids() {
            Some(nodes) => {
                memory::answer(&self.cfg.sysroot, pid, nodes, memory::Finish::Json(reply))
            }
            None => {
                send(reply, Ok(None));
                None
            }
        }
    }
}
