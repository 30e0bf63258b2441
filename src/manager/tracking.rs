//! Which processes and threads are managed: events, rescans and matching decide who is
//! in, who is out and which threads each managed process has.
//!
//! Must not touch: affinity calls (see `applying`) or what is reported (see `reports`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::{Change, Managed, Manager, Source};
use crate::affinity::{outcome_of_error, AffinityError, Outcome, Tid};
use crate::cpuset::CpuSet;
use crate::rules::ThreadPlacement;
use crate::watch::{ProcMsg, ProcessSnapshot};

impl Manager {
    /// Handles a batch of proc connector messages in order, as [`Manager::handle`] would
    /// one by one, but with what the rest of the batch says about each task: a new
    /// thread that renames itself later in the batch is pinned once for its final name
    /// (no /proc read for its name), a task that exits later in the batch is not
    /// pinned at all (counted as gone), and a process whose main thread renames itself
    /// again later in the batch is looked at once, at the last rename.
    pub fn handle_batch(&mut self, msgs: Vec<ProcMsg>) -> Vec<Change> {
        let ahead = lookahead(&msgs);
        let mut out = Vec::new();
        // New threads named from a later COMM event: that event is then done already.
        let mut named: HashSet<Tid> = HashSet::new();
        for (msg, ahead) in msgs.into_iter().zip(ahead) {
            self.counters.events += 1;
            match msg {
                ProcMsg::NewThread { pid, tid, parent } if self.managed.contains_key(&pid) => {
                    match ahead {
                        Ahead { exits: true, .. } => self.counters.gone += 1,
                        Ahead {
                            comm: Some(comm), ..
                        } => {
                            named.insert(tid);
                            self.on_new_thread_named(pid, tid, parent, Some(comm), &mut out);
                        }
                        Ahead { comm: None, .. } => self.on_new_thread(pid, tid, parent, &mut out),
                    }
                }
                ProcMsg::Comm { tid, .. } if named.contains(&tid) => {}
                // Looked at once, at its last rename (or not at all: it exits).
                ProcMsg::Comm { .. } if ahead.renamed_again => {}
                ProcMsg::Exec { pid } | ProcMsg::NewProcess { pid, .. }
                    if ahead.exits && !self.managed.contains_key(&pid) =>
                {
                    self.counters.gone += 1
                }
                ProcMsg::Exit { pid, tid } => {
                    named.remove(&tid);
                    self.on_exit(pid, tid, &mut out);
                }
                other => self.on_proc(other, &mut out),
            }
        }
        out
    }

    pub(super) fn on_proc(&mut self, msg: ProcMsg, out: &mut Vec<Change>) {
        match msg {
            ProcMsg::NewThread { pid, tid, parent } => self.on_new_thread(pid, tid, parent, out),
            ProcMsg::Exit { pid, tid } => self.on_exit(pid, tid, out),
            ProcMsg::Exec { pid } => {
                // A new image, new arguments.
                self.cmdlines.forget(pid);
                self.consider(pid, None, out)
            }
            ProcMsg::NewProcess { pid, parent } => {
                // A child inherits its parent's mask and image; only a managed parent's
                // child needs a look now (rescans catch the rest).
                if self.managed.contains_key(&parent) {
                    self.consider(pid, Some(parent), out);
                }
            }
            ProcMsg::Comm { pid, tid, comm } => {
                if tid == pid {
                    self.consider(pid, None, out);
                } else if self.managed.contains_key(&pid) {
                    self.on_thread_comm(pid, tid, comm, out);
                }
            }
            ProcMsg::Overrun => {
                self.counters.overruns += 1;
                tracing::warn!("proc connector overrun: events were lost, rescanning");
                self.rescan(out);
            }
        }
    }

    /// The containers the runtime told about (id, what container rules match). A
    /// process is in one when its cgroup is that container's level of the kubelet's
    /// `kubepods` tree (`cri-containerd-ID.scope`, `crio-ID.scope`, `ID`; see
    /// `nri::ondisk::container_id`): never a cgroup delegated to a user or a container,
    /// who may name what they make there as they like.
    pub fn set_containers(&mut self, containers: Vec<(String, crate::rules::ContainerInfo)>) {
        if containers.is_empty() != self.containers.is_empty() {
            self.candidate_cache.clear();
        }
        self.containers = containers;
    }

    /// Where containerd's task directory is (see `nri::ondisk`): a process in a
    /// container NRI did not tell about is looked up there.
    pub fn set_container_tasks(&mut self, tasks: Option<std::path::PathBuf>) {
        self.container_tasks = tasks;
        self.candidate_cache.clear();
    }

    /// The container process `pid` runs in: its id and what container rules match.
    pub fn container_of_process(&self, pid: i32) -> Option<(String, crate::rules::ContainerInfo)> {
        let snap = self.process(pid)?;
        let cgroup = snap.info.cgroup.as_deref()?;
        let id = crate::nri::ondisk::container_id(cgroup)?.to_string();
        let info = (snap.info.container.clone()).or_else(|| self.container_of(Some(cgroup)))?;
        Some((id, info))
    }

    pub(super) fn container_of(&self, cgroup: Option<&str>) -> Option<crate::rules::ContainerInfo> {
        let id = crate::nri::ondisk::container_id(cgroup?)?;
        let told = self
            .containers
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, info)| info.clone());
        told.or_else(|| crate::nri::ondisk::read(self.container_tasks.as_ref()?, id))
    }

    /// Whether any rule's comm globs (or a rule without comm) can match `comm`.
    pub(super) fn may_match(&mut self, comm: &str) -> bool {
        if let Some(&hit) = self.candidate_cache.get(comm) {
            return hit;
        }
        // A rule of container keys only can match a process only in a known container.
        let in_containers = !self.containers.is_empty() || self.container_tasks.is_some();
        let hit = self.plan.rules().rules().iter().any(|r| {
            (in_containers || !r.matcher.container_only())
                && r.matcher.comm.as_ref().is_none_or(|g| g.is_match(comm))
        });
        if self.candidate_cache.len() > 4096 {
            self.candidate_cache.clear();
        }
        self.candidate_cache.insert(comm.to_string(), hit);
        hit
    }

    /// A kernel thread looked at: never pinned. Counted (`kernel-thread` outcome) once
    /// per thread whose name a rule's `comm` glob fits, not at every look at it, which
    /// would grow the count by every kernel thread at each rescan.
    fn kernel_thread_seen(&mut self, pid: i32, start_time: u64, comm: &str) {
        if self.plan.rules().is_empty() || !self.may_match(comm) {
            return;
        }
        if self.kernel_seen.insert(pid, start_time) != Some(start_time) {
            self.counters.kernel_threads += 1;
        }
    }

    /// Looks at process `pid` afresh (exec, rename, fork of a managed parent, rescan)
    /// and manages, re-applies, switches or releases it.
    pub(super) fn consider(&mut self, pid: i32, parent: Option<i32>, out: &mut Vec<Change>) {
        let managed = self.managed.contains_key(&pid);
        if !managed && parent.is_none() {
            let Some(entry) = self.procs.entry(pid) else {
                return;
            };
            if entry.kernel_thread {
                self.kernel_thread_seen(pid, entry.start_time, &entry.comm);
                return;
            }
            if !self.may_match(&entry.comm) {
                return;
            }
        }
        let Some(snap) = self.process(pid) else {
            if managed {
                self.forget(pid, out);
            }
            return;
        };
        self.consider_snapshot(snap, parent, out);
    }

    pub(super) fn consider_snapshot(
        &mut self,
        mut snap: ProcessSnapshot,
        parent: Option<i32>,
        out: &mut Vec<Change>,
    ) {
        if snap.info.container.is_none() {
            snap.info.container = self.container_of(snap.info.cgroup.as_deref());
        }
        let pid = snap.pid();
        if snap.kernel_thread {
            self.kernel_thread_seen(pid, snap.start_time, &snap.info.comm);
            return;
        }
        // A managed pid whose start time changed is another process now.
        if let Some(m) = self.managed.get(&pid) {
            if m.handle.start_time != snap.start_time || !self.ops.alive(&m.handle) {
                self.counters.pid_reuse += 1;
                self.forget(pid, out);
            }
        }
        if let Some(m) = self.managed.get(&pid) {
            if let Source::Runtime(_) = m.source {
                self.reconcile(snap, out);
                return;
            }
        }
        if self.awaits_cmdline(&snap, parent) {
            // Decided when its command line comes; until then it stays as it is.
            return;
        }
        let mut matched = self.plan.rules().match_process(&snap.info);
        self.protected.remove(&pid);
        if let Some(m) = &matched {
            if let Some(why) =
                super::protect::protected(pid, &snap.info.comm, self.own_pid, &m.rule)
            {
                tracing::debug!(pid, comm = %snap.info.comm, rule = %m.rule.name, "not managed: {}", why.describe());
                self.protected.insert(
                    pid,
                    super::protect::ProtectedMatch {
                        pid,
                        comm: snap.info.comm.clone(),
                        rule: m.rule.name.clone(),
                        why,
                    },
                );
                matched = None;
            }
        }
        match (matched, self.managed.get(&pid)) {
            (None, None) => {
                if let Some(parent) = parent {
                    self.give_back_inherited(&snap, parent);
                }
            }
            (None, Some(_)) => self.release(pid, "no rule matches any more", out),
            (Some(m), existing) => {
                let same = existing.is_some_and(|e| match &e.source {
                    Source::Rule(r) => r.name == m.rule.name,
                    Source::Runtime(_) => false,
                });
                if existing.is_some() && !same {
                    self.release(pid, &format!("rule {:?} matches now", m.rule.name), out);
                }
                if same {
                    // The same rule, perhaps edited: its threads follow the new text.
                    if let Some(e) = self.managed.get_mut(&pid) {
                        e.source = Source::Rule(m.rule.clone());
                    }
                }
                if !same {
                    let original = parent
                        .and_then(|p| self.managed.get(&p))
                        .map(|p| p.original.clone());
                    if !self.start_managing(&snap, Source::Rule(m.rule.clone()), original) {
                        return;
                    }
                }
                self.reconcile(snap, out);
            }
        }
    }

    pub(super) fn start_managing(
        &mut self,
        snap: &ProcessSnapshot,
        source: Source,
        original: Option<CpuSet>,
    ) -> bool {
        let pid = snap.pid();
        let handle = match self.ops.hold(pid, snap.start_time) {
            Ok(h) => h,
            Err(_) => {
                self.counters.gone += 1;
                tracing::debug!(pid, "process gone before it could be held");
                return false;
            }
        };
        // A process a previous run had changed: what it had before that run.
        let recovered = self
            .recovered
            .remove(&pid)
            .filter(|e| e.start_time == snap.start_time);
        if recovered.is_some() {
            self.journal_dirty = true;
        }
        let original = match (original, &recovered) {
            (Some(o), _) => o,
            (None, Some(e)) => e.original.clone(),
            (None, None) => match self.ops.get_affinity(pid) {
                Ok(m) => m,
                Err(e) => {
                    self.not_read(snap, &source, e);
                    return false;
                }
            },
        };
        self.denied.remove(&pid);
        let allowed = self.read_allowed(pid, &original, &source);
        // A cpuset the plan has no instance for (of this rule) needs a new plan.
        let new_cpuset = match &source {
            Source::Rule(r) => !self
                .plan
                .has_cpuset(&r.name, self.plan.cpuset_key(&allowed.cpus).as_ref()),
            Source::Runtime(_) => false,
        };
        let weigh = self.weighs_memory(&source);
        tracing::info!(
            pid, comm = %snap.info.comm, rule = %source.name(), cpuset = %allowed.describe(),
            "managing pid {pid} ({}) {}, in cpuset {}",
            snap.info.comm, source.words(), allowed.describe()
        );
        self.managed.insert(
            pid,
            Managed {
                runtime_sched: None,
                handle,
                comm: snap.info.comm.clone(),
                source,
                original,
                allowed,
                threads: BTreeMap::new(),
                slots: HashMap::new(),
                memory: None,
                warned_permission: false,
                recovered: recovered
                    .map(|e| {
                        e.threads
                            .into_iter()
                            .map(|(tid, t)| (tid, t.original))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        );
        self.awaiting.remove(&pid);
        self.memory_pending.remove(&pid);
        if new_cpuset {
            // Its threads wait for a plan made in its cpuset…
            self.awaiting.insert(pid);
        }
        if let Some(nodes) = weigh {
            // …or for its memory, then the plan made with it.
            self.ask_memory(pid, snap.start_time, nodes);
        }
        self.journal_dirty = true;
        true
    }

    /// A process whose mask at first contact could not be read is not managed: without
    /// it there is nothing to give back. Gone (ESRCH) is a race, counted and logged at
    /// debug; not permitted (EPERM) is not gone: counted as `permission` and warned
    /// about once per process (`explain` says why); anything else counts as failed.
    fn not_read(&mut self, snap: &ProcessSnapshot, source: &Source, e: AffinityError) {
        let pid = snap.pid();
        match outcome_of_error(e, &CpuSet::new()) {
            Outcome::Gone => {
                self.counters.gone += 1;
                tracing::debug!(pid, "process gone before its mask could be read");
            }
            Outcome::Permission => {
                if self.denied.insert(pid, snap.start_time) != Some(snap.start_time) {
                    self.counters.permission += 1;
                    tracing::warn!(pid, comm = %snap.info.comm, rule = %source.name(),
                        "pid {pid} ({}) not managed {}: not permitted to read its affinity \
                         (CAP_SYS_NICE, or a security module?)",
                        snap.info.comm, source.words());
                }
            }
            other => self.count(&other, pid, pid, &source.name()),
        }
    }

    /// Brings a managed process's threads in line with its snapshot and plan: new
    /// threads are pinned, vanished ones dropped, changed assignments re-applied, and
    /// masks changed by someone else detected.
    pub(super) fn reconcile(&mut self, snap: ProcessSnapshot, out: &mut Vec<Change>) {
        let pid = snap.pid();
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        m.comm = snap.info.comm.clone();
        let live: std::collections::HashSet<Tid> =
            snap.info.threads.iter().map(|t| t.tid as Tid).collect();
        m.retain_threads(|tid| live.contains(&tid));
        for t in &snap.info.threads {
            self.pin_thread(pid, t.tid as Tid, Some(t.comm.clone()), true, out);
        }
    }

    pub(super) fn on_new_thread(&mut self, pid: i32, tid: Tid, parent: Tid, out: &mut Vec<Change>) {
        self.on_new_thread_named(pid, tid, parent, None, out)
    }

    /// A new thread: pinned straight from the FORK event (its mask read back, written
    /// only when it did not inherit the target). Its name is `comm` when the batch
    /// told it, else that of a known `parent` task; /proc is read for it only when
    /// the rule has thread entries and neither is known. (The kernel reports the
    /// process's parent as a thread's parent, so in practice the name comes from the
    /// batch or from /proc.)
    pub(super) fn on_new_thread_named(
        &mut self,
        pid: i32,
        tid: Tid,
        parent: Tid,
        comm: Option<String>,
        out: &mut Vec<Change>,
    ) {
        let Some(m) = self.managed.get(&pid) else {
            return;
        };
        if !self.ops.alive(&m.handle) {
            self.forget(pid, out);
            return;
        }
        let comm = comm.or_else(|| m.threads.get(&parent).map(|t| t.comm.clone()));
        self.pin_thread(pid, tid, comm, false, out);
    }

    pub(super) fn on_thread_comm(
        &mut self,
        pid: i32,
        tid: Tid,
        comm: String,
        out: &mut Vec<Change>,
    ) {
        let has_entries = self.managed.get(&pid).is_some_and(|m| match &m.source {
            Source::Rule(r) => !r.threads.is_empty(),
            Source::Runtime(_) => false,
        });
        if has_entries {
            self.pin_thread(pid, tid, Some(comm), false, out);
        } else if let Some(t) = self
            .managed
            .get_mut(&pid)
            .and_then(|m| m.threads.get_mut(&tid))
        {
            t.comm = comm;
        }
    }

    /// A command line read off the loop: its process is considered with it, when it was
    /// the read pending for that process and says something new.
    pub(super) fn cmdline_read(
        &mut self,
        read: super::cmdlines::CmdlineRead,
        out: &mut Vec<Change>,
    ) {
        let pid = read.wanted.pid;
        let found = read.args.is_some();
        match self.cmdlines.arrived(read) {
            Some(parent) => self.consider(pid, parent, out),
            // Gone (or another process) by the time it was read: a managed one is
            // looked at again, which forgets it or finds the new process.
            None if !found && self.managed.contains_key(&pid) => self.consider(pid, None, out),
            None => {}
        }
    }

    pub(super) fn on_exit(&mut self, pid: i32, tid: Tid, out: &mut Vec<Change>) {
        if tid == pid {
            self.cmdlines.forget(pid);
            self.protected.remove(&pid);
            self.denied.remove(&pid);
            if self.recovered.remove(&pid).is_some() {
                self.journal_dirty = true;
            }
            if self.managed.contains_key(&pid) {
                self.forget(pid, out);
            }
        } else if let Some(m) = self.managed.get_mut(&pid) {
            if let Some(t) = m.remove_thread(tid) {
                if t.original != m.original || t.placement != ThreadPlacement::Process {
                    self.journal_dirty = true;
                }
            }
        }
    }

    /// Drops a process that exited (nothing to restore).
    pub(super) fn forget(&mut self, pid: i32, out: &mut Vec<Change>) {
        self.awaiting.remove(&pid);
        self.memory_pending.remove(&pid);
        self.denied.remove(&pid);
        if self.managed.remove(&pid).is_some() {
            tracing::debug!(pid, "managed process exited");
            self.journal_dirty = true;
            out.push(Change::Exited { pid });
        }
    }

    /// Re-matches and re-applies every managed process (after new rules or CPUs).
    pub(super) fn reevaluate_managed(&mut self, out: &mut Vec<Change>) {
        let pids: Vec<i32> = self.managed.keys().copied().collect();
        self.reevaluate(pids, out);
    }

    /// Re-matches and re-applies the managed processes `pids`.
    pub(super) fn reevaluate(&mut self, pids: Vec<i32>, out: &mut Vec<Change>) {
        for pid in pids {
            match self.process(pid) {
                Some(snap) => {
                    if let Some(m) = self.managed.get_mut(&pid) {
                        // New CPUs: every thread is re-applied (the kernel widened
                        // masks of tasks whose CPUs went away).
                        for t in m.threads.values_mut() {
                            t.stale = true;
                        }
                    }
                    self.consider_snapshot(snap, None, out)
                }
                None => self.forget(pid, out),
            }
        }
    }

    /// Full /proc rescan: drops exited processes, finds matching ones the events
    /// missed, pins threads the events missed, and checks managed masks.
    pub(super) fn rescan(&mut self, out: &mut Vec<Change>) {
        let started = Instant::now();
        let list = self.procs.list();
        let seen: HashMap<i32, u64> = list.iter().map(|e| (e.pid, e.start_time)).collect();
        let gone: Vec<i32> = self
            .managed
            .iter()
            .filter(|(pid, m)| {
                seen.get(pid) != Some(&m.handle.start_time) || !self.ops.alive(&m.handle)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in gone {
            self.forget(pid, out);
        }
        self.denied
            .retain(|pid, start| seen.get(pid) == Some(start));
        self.kernel_seen
            .retain(|pid, start| seen.get(pid) == Some(start));
        self.cmdlines
            .retain(|pid, start| seen.get(&pid) == Some(&start));
        self.memory_pending
            .retain(|pid, start| seen.get(pid) == Some(start));
        for e in &list {
            if e.kernel_thread {
                self.kernel_thread_seen(e.pid, e.start_time, &e.comm);
                continue;
            }
            let unchanged = self
                .managed
                .get(&e.pid)
                .map(|m| m.handle.start_time == e.start_time && m.comm == e.comm);
            match unchanged {
                // Same process, same name: its task list and masks are all that can
                // have changed without an exec (which renames it).
                Some(true) => self.refresh_managed(e.pid, e.num_threads, out),
                Some(false) => {
                    if let Some(snap) = self.process(e.pid) {
                        self.consider_snapshot(snap, None, out);
                    }
                }
                None if self.may_match(&e.comm) => {
                    if let Some(snap) = self.process(e.pid) {
                        // Arguments rewritten in place give no event: a rescan reads
                        // them again, deciding meanwhile with the ones known.
                        if self.plan.rules().cmdline_matters(&e.comm)
                            && self.cmdlines.known(e.pid, e.start_time).is_some()
                        {
                            self.cmdlines.ask(e.pid, e.start_time, None);
                        }
                        self.consider_snapshot(snap, None, out);
                    }
                }
                None => {}
            }
        }
        let took = started.elapsed();
        self.counters.rescans += 1;
        self.counters.last_rescan_us = took.as_micros() as u64;
        out.push(Change::Rescanned {
            processes: list.len(),
            took,
        });
    }

    /// The rescan's check of a managed process whose start time and name are what we
    /// hold: one listing of its tasks (and its threads' names when the rule has
    /// thread entries), then each thread's mask read back (someone
    /// else's change is noticed as in a full reconcile). New threads are pinned, gone
    /// ones dropped; no full snapshot.
    pub(super) fn refresh_managed(&mut self, pid: i32, num_threads: u32, out: &mut Vec<Change>) {
        self.recheck_cpuset(pid);
        // A single-threaded process's only task is its main thread: no listing.
        let listed = if num_threads == 1 {
            Some(vec![pid])
        } else {
            self.procs.tasks(pid)
        };
        let Some(mut tids) = listed else {
            self.forget(pid, out);
            return;
        };
        tids.sort_unstable();
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        m.retain_threads(|tid| tids.binary_search(&tid).is_ok());
        // Thread names choose thread entries: with entries, each name is read again
        // (a rename may have gone unreported); without, the names we hold suffice.
        let names_matter = match &m.source {
            Source::Rule(r) => !r.threads.is_empty(),
            Source::Runtime(_) => false,
        };
        for tid in tids {
            let known = if names_matter {
                None
            } else {
                self.managed
                    .get(&pid)
                    .and_then(|m| m.threads.get(&tid))
                    .map(|t| t.comm.clone())
            };
            let comm = match known {
                Some(c) => c,
                None => match self.procs.thread_comm(pid, tid) {
                    Some(c) => c,
                    None => continue,
                },
            };
            self.pin_thread(pid, tid, Some(comm), true, out);
        }
    }
}

/// What the rest of a batch says about the task of one message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Ahead {
    /// The task's last name in the rest of the batch (new threads only).
    comm: Option<String>,
    /// The task exits later in the batch.
    exits: bool,
    /// A main thread's rename that a later one in the batch makes moot: the process is
    /// looked at once, for its last name.
    renamed_again: bool,
}

/// For each message of a batch, what the messages after it say about its task: one
/// pass from the end. A task id met again before (a FORK for it) belongs to another
/// task, so a FORK ends what is known about its id.
pub(super) fn lookahead(msgs: &[ProcMsg]) -> Vec<Ahead> {
    let mut later: HashMap<Tid, Ahead> = HashMap::new();
    let mut out = vec![Ahead::default(); msgs.len()];
    for (i, msg) in msgs.iter().enumerate().rev() {
        match msg {
            ProcMsg::Exit { tid, .. } => {
                later.insert(
                    *tid,
                    Ahead {
                        exits: true,
                        ..Ahead::default()
                    },
                );
            }
            ProcMsg::Comm { pid, tid, comm } => {
                let a = later.entry(*tid).or_default();
                out[i].renamed_again = tid == pid && (a.comm.is_some() || a.exits);
                if a.comm.is_none() {
                    a.comm = Some(comm.clone());
                }
            }
            ProcMsg::NewThread { tid, .. } => out[i] = later.remove(tid).unwrap_or_default(),
            ProcMsg::NewProcess { pid, .. } => {
                out[i] = later.remove(pid).unwrap_or_default();
                out[i].comm = None;
            }
            ProcMsg::Exec { pid } => {
                out[i].exits = later.get(pid).is_some_and(|a| a.exits);
            }
            ProcMsg::Overrun => later.clear(),
        }
    }
    out
}
