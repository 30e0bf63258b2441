//! What the manager tells: `ListManaged` rows, `explain`, and the restore journal's
//! contents.
//!
//! Must not touch: the tasks (no affinity calls).

use std::collections::BTreeMap;

use super::{ManagedRow, Manager, Source};
use crate::affinity::restore::{self, RestoreEntry, RestoreError};
use crate::affinity::Outcome;
use crate::cpuset::CpuSet;
use crate::plan::PlanState;

/// Why a task's affinity is not ours to read or set, in `explain`.
const PERMISSION: &str =
    "permission: not permitted to read or set its affinity (CAP_SYS_NICE, or a security module)";

impl Manager {
    /// Rows for `ListManaged`, by pid.
    pub fn list_managed(&self) -> Vec<ManagedRow> {
        self.managed
            .iter()
            .map(|(pid, m)| {
                let mut cpus = CpuSet::new();
                let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
                for t in m.threads.values() {
                    if t.released {
                        *counts.entry("released").or_default() += 1;
                        continue;
                    }
                    if let Some(e) = t.outcome.effective() {
                        cpus = cpus.union(e);
                    }
                    *counts.entry(t.outcome.label()).or_default() += 1;
                }
                let state = if counts.len() == 1 {
                    counts
                        .keys()
                        .next()
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                } else {
                    counts
                        .iter()
                        .map(|(k, v)| format!("{v} {k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let state = match &m.source {
                    Source::Rule(r) => match self.plan_for(*pid, &r.name, None) {
                        Some(PlanState::Lost { to, .. }) if cpus.is_empty() => {
                            format!("conflict: lost to {to}")
                        }
                        _ => state,
                    },
                    Source::Runtime(_) => state,
                };
                ManagedRow {
                    pid: *pid as u32,
                    comm: m.comm.clone(),
                    rule: m.source.name(),
                    cpus: cpus.to_string(),
                    state,
                }
            })
            .collect()
    }

    /// How many live threads of `rule`'s processes its thread entry `entry` takes.
    pub fn entry_threads(&self, rule: &str, entry: usize) -> usize {
        self.managed
            .values()
            .filter(|m| matches!(&m.source, Source::Rule(r) if r.name == rule))
            .flat_map(|m| m.threads.values())
            .filter(|t| !t.released && t.placement == crate::rules::ThreadPlacement::Thread(entry))
            .count()
    }

    /// Processes a rule matched that are not managed because they are pinnerd itself,
    /// PID 1 or the bus daemon (see `protect`).
    pub fn protected(&self) -> Vec<super::protect::ProtectedMatch> {
        self.protected.values().cloned().collect()
    }

    /// The real uid of process `pid` (the owner the kernel checks affinity calls
    /// against); `None` when there is no such process.
    pub fn owner(&self, pid: i32) -> Option<u32> {
        self.process(pid).map(|s| s.info.uid)
    }

    /// Whether `caller_uid` sees where process `pid`'s memory is: root and the owner of
    /// a user process (the same callers who see its whole explanation); never for a
    /// kernel thread, which has no memory of its own.
    pub fn shows_memory(&self, pid: i32, caller_uid: u32) -> bool {
        self.process(pid)
            .is_some_and(|s| !s.kernel_thread && (caller_uid == 0 || s.info.uid == caller_uid))
    }

    /// Whether user `caller_uid` sees all of process `pid` (its `comm`, state, command
    /// line): root and the process's owner do; [`Manager::explain_for`] and
    /// `ExplainJson` show anyone else its rule and CPUs only.
    pub fn shows_all_to(&self, pid: i32, caller_uid: u32) -> bool {
        caller_uid == 0
            || self
                .process(pid)
                .is_some_and(|s| s.info.uid == caller_uid && !s.kernel_thread)
    }

    /// [`Manager::explain`] as user `caller_uid` may see it: root and the process's owner
    /// get all of it; anyone else only the rule that manages it and its CPUs — never the
    /// command line, the executable or the verdicts that would reveal them, which the
    /// daemon reads with privileges the caller lacks.
    pub fn explain_for(&self, pid: i32, caller_uid: u32) -> String {
        if caller_uid == 0 {
            return self.explain(pid);
        }
        let Some(snap) = self.process(pid) else {
            return format!("pid {pid}: no such process\n");
        };
        if snap.info.uid == caller_uid && !snap.kernel_thread {
            return self.explain(pid);
        }
        let mut s =
            format!("pid {pid}: a process of another user; shown: its rule and CPUs only\n");
        match self
            .list_managed()
            .into_iter()
            .find(|r| r.pid as i32 == pid)
        {
            Some(r) => s.push_str(&format!("managed by {} on CPUs {}\n", r.rule, r.cpus)),
            None => s.push_str("not managed\n"),
        }
        s
    }

    /// `explain`'s line for a process whose command line can decide it and is not read
    /// yet (read off the loop; the verdicts see an empty one until it comes).
    fn cmdline_note(&self, snap: &crate::watch::ProcessSnapshot) -> &'static str {
        let waits = self.plan.rules().cmdline_matters(&snap.info.comm)
            && self.cmdlines.known(snap.pid(), snap.start_time).is_none();
        if waits {
            "command line: not read yet; decided once it is\n"
        } else {
            ""
        }
    }

    /// `explain`'s line for a process it does not manage: protected (and why), refused
    /// by the kernel, or merely not managed.
    fn why_not_managed(&self, pid: i32, snap: &crate::watch::ProcessSnapshot) -> String {
        let protected =
            self.plan.rules().match_process(&snap.info).and_then(|m| {
                super::protect::protected(pid, &snap.info.comm, self.own_pid, &m.rule)
            });
        match protected {
            Some(p) => format!("not managed: {}", p.describe()),
            None if self.denied.get(&pid) == Some(&snap.start_time) => {
                format!("not managed: {PERMISSION}")
            }
            None => "not managed".to_string(),
        }
    }

    /// Why process `pid` got (or did not get) what it has: the matcher's verdicts,
    /// the plan of the winning rule and each thread's outcome.
    pub fn explain(&self, pid: i32) -> String {
        use std::fmt::Write;
        let Some(mut snap) = self.process(pid) else {
            return format!("pid {pid}: no such process\n");
        };
        if snap.info.container.is_none() {
            snap.info.container = self.container_of(snap.info.cgroup.as_deref());
        }
        let mut s = String::new();
        if snap.kernel_thread {
            let _ = writeln!(
                s,
                "pid {pid} ({}): a kernel thread; never pinned",
                snap.info.comm
            );
            return s;
        }
        s.push_str(self.cmdline_note(&snap));
        if let Some(c) = &snap.info.container {
            let _ = writeln!(
                s,
                "in container {} (pod {}/{}), as the runtime said over NRI",
                c.name, c.namespace, c.pod
            );
        }
        let _ = write!(s, "{}", self.plan.rules().explain(&snap.info));
        match self.managed.get(&pid) {
            None => {
                let _ = writeln!(s, "{}", self.why_not_managed(pid, &snap));
            }
            Some(m) => {
                let _ = writeln!(
                    s,
                    "managed by {} since first contact; original mask {}",
                    m.source.name(),
                    m.original
                );
                let _ = writeln!(s, "cpuset {}", m.allowed.describe());
                if let Source::Rule(_) = &m.source {
                    for p in self.own_units(m) {
                        let unit = match p.thread_entry {
                            None => "place".to_string(),
                            Some(i) => format!("threads[{i}]"),
                        };
                        let _ = writeln!(s, "  plan {unit}: {}", p.state.describe());
                        if let Some(i) = p.thread_entry {
                            let mine = m
                                .threads
                                .values()
                                .filter(|t| {
                                    !t.released
                                        && t.placement == crate::rules::ThreadPlacement::Thread(i)
                                })
                                .count();
                            if let Some(line) = p.slots_line(mine) {
                                let _ = writeln!(s, "    {line}");
                            }
                        }
                        if let Some(why) = &p.memory {
                            let _ = writeln!(s, "  plan {unit}: {why}");
                        }
                    }
                }
                for (tid, t) in &m.threads {
                    let _ = writeln!(s, "  tid {tid} ({}): {}", t.comm, self.thread_words(m, t));
                }
            }
        }
        s
    }

    /// The plan's units of a rule-managed process `m`: its own instance of each (in its
    /// cpuset, else the one on all CPUs); none for a run-time pin.
    fn own_units<'a>(&'a self, m: &super::Managed) -> Vec<&'a crate::plan::UnitPlan> {
        let Source::Rule(r) = &m.source else {
            return Vec::new();
        };
        let key = self.plan.cpuset_key(&m.allowed.cpus);
        let units = self.plan.units();
        units
            .iter()
            .filter(|p| {
                p.rule == r.name
                    && (p.cpuset == key
                        || (p.cpuset.is_none()
                            && !units.iter().any(|q| {
                                q.rule == p.rule
                                    && q.thread_entry == p.thread_entry
                                    && q.cpuset.is_some()
                                    && q.cpuset == key
                            })))
            })
            .collect()
    }

    /// The CPUs the `exclusive` units (`isolate` ones included) of process `pid`'s rule
    /// hold for it; empty when none or not managed by a rule.
    pub fn held_cpus(&self, pid: i32) -> CpuSet {
        let Some(m) = self.managed.get(&pid) else {
            return CpuSet::new();
        };
        self.own_units(m)
            .into_iter()
            .filter(|p| p.exclusive)
            .fold(CpuSet::new(), |all, p| all.union(&p.state.held()))
    }

    /// The scheduling class set on each thread of process `pid` that has one (not
    /// released), for `ExplainJson`; empty when not managed.
    pub fn thread_classes(&self, pid: i32) -> Vec<crate::api::ThreadSched> {
        let Some(m) = self.managed.get(&pid) else {
            return Vec::new();
        };
        m.threads
            .iter()
            .filter(|(_, t)| !t.released)
            .filter_map(|(tid, t)| {
                let c = t.sched.as_ref()?;
                Some(crate::api::ThreadSched {
                    tid: *tid as u32,
                    comm: t.comm.clone(),
                    policy: c.applied.policy_name(),
                    priority: c.applied.priority,
                    nice: c.applied.nice,
                    had: c.original.words(),
                })
            })
            .collect()
    }

    /// What became of thread `t` of managed process `m`, for `explain`: its outcome,
    /// the slot it shares when its entry has more threads than slots, and the scheduling
    /// class set on it.
    fn thread_words(&self, m: &super::Managed, t: &super::ManagedThread) -> String {
        let what = if t.released {
            "released (someone else changed its mask)".to_string()
        } else {
            match &t.outcome {
                Outcome::Applied { effective } => format!("applied {effective}"),
                Outcome::Narrowed {
                    requested,
                    effective,
                } => format!("narrowed by a cpuset: asked {requested}, runs on {effective}"),
                Outcome::Refused { requested } => {
                    format!("refused: its cpuset excludes all of {requested}")
                }
                Outcome::Failed { message } => format!("failed: {message}"),
                Outcome::Permission => PERMISSION.to_string(),
                Outcome::LeftAlone { why } => format!("left alone: {why}"),
                other => other.label().to_string(),
            }
        };
        let shared = match &m.source {
            Source::Rule(r) => self.slots_outnumbered(&r.name, t.placement, t.slot),
            Source::Runtime(_) => None,
        };
        let what = match shared {
            Some(n) => format!(
                "{what} (slot {}, past the last of {n} slots: shares the CPUs of slot {})",
                t.slot,
                t.slot % n
            ),
            None => what,
        };
        match &t.sched {
            Some(c) => format!(
                "{what}; scheduling {} (had {})",
                c.applied.words(),
                c.original.words()
            ),
            None => what,
        }
    }

    /// Whether the restore journal has changes not yet written ([`Manager::flush`]).
    pub fn journal_dirty(&self) -> bool {
        self.journal_dirty && self.journal.is_some()
    }

    /// Writes the restore journal if what must be restored changed. After a failed
    /// write the journal stays dirty, so the caller can try again.
    pub fn flush(&mut self) -> Result<(), RestoreError> {
        if !self.journal_dirty {
            return Ok(());
        }
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        journal.save(&self.journal_entries())?;
        self.journal_dirty = false;
        Ok(())
    }

    /// What the journal holds now.
    pub fn journal_entries(&self) -> Vec<RestoreEntry> {
        self.managed
            .values()
            .filter_map(|m| {
                let main = m.threads.get(&m.handle.pid)?;
                let applied = main.outcome.effective()?.clone();
                let threads = m
                    .threads
                    .iter()
                    .filter(|(_, t)| !t.released)
                    .filter_map(|(tid, t)| {
                        let eff = t.outcome.effective()?;
                        (t.original != m.original || *eff != applied || t.sched.is_some()).then(
                            || {
                                (
                                    *tid,
                                    restore::ThreadRestore {
                                        original: t.original.clone(),
                                        applied: eff.clone(),
                                        sched: t.sched,
                                    },
                                )
                            },
                        )
                    })
                    .collect();
                Some(RestoreEntry {
                    pid: m.handle.pid,
                    start_time: m.handle.start_time,
                    comm: m.comm.clone(),
                    applied,
                    original: m.original.clone(),
                    threads,
                })
            })
            // What a previous run changed of processes not managed again (yet).
            .chain(self.recovered.values().cloned())
            .collect()
    }

    /// The threads of latency-critical rules it holds, with the CPUs each holds: a
    /// measurement stays off those CPUs and stops when one of the threads wakes where it
    /// spins (`measure::around`).
    pub fn latency_critical_threads(&self) -> Vec<(crate::measure::around::Watched, CpuSet)> {
        let mut out = Vec::new();
        for (pid, m) in &self.managed {
            let Source::Rule(r) = &m.source else { continue };
            if !r.latency_critical {
                continue;
            }
            for (tid, t) in &m.threads {
                if let (false, Some(cpus)) = (t.released, t.outcome.effective()) {
                    let w = crate::measure::around::Watched {
                        pid: *pid,
                        tid: *tid,
                        rule: r.name.clone(),
                    };
                    out.push((w, cpus.clone()));
                }
            }
        }
        out
    }

    /// What the daemon asks its holder for one managed process (see `hold`): for a
    /// rule with `isolate` (on `[rule.place]` or a `[[rule.threads]]` entry) or
    /// `unit-cpuset`, the CPUs its plan holds for the process, and their nodes
    /// (`node_of`) with `memory = "follow"`; `None` for other rules, or before the
    /// plan holds CPUs for it, or while the process waits for the plan made for it
    /// (its memory weighed at first contact). The daemon and `plan --live` both ask
    /// this.
    pub fn hold_want(
        &self,
        row: &ManagedRow,
        node_of: &dyn Fn(u32) -> Option<u32>,
    ) -> Option<crate::hold::Want> {
        let rule = self.rules().get(&row.rule)?;
        let isolate = rule.isolate || rule.threads.iter().any(|t| t.isolate);
        if !(isolate || rule.unit_cpuset) {
            return None;
        }
        let pid = row.pid as i32;
        // A process that waits for its plan (its memory being read, a new cpuset) is
        // held once the plan made for it says where: a hold made before would move.
        if self.awaiting.contains(&pid) {
            return None;
        }
        let mut cpus = self
            .plan_for(pid, &rule.name, None)
            .map(|s| s.held())
            .unwrap_or_default();
        for (i, t) in rule.threads.iter().enumerate() {
            if t.isolate {
                if let Some(s) = self.plan_for(pid, &rule.name, Some(i)) {
                    cpus = cpus.union(&s.held());
                }
            }
        }
        if cpus.is_empty() {
            return None;
        }
        let mems = rule
            .memory_follow
            .then(|| cpus.iter().filter_map(node_of).collect());
        Some(crate::hold::Want {
            rule: rule.name.clone(),
            pid: row.pid,
            cpus,
            mems,
            isolate,
            vouch: crate::hold::Vouch {
                users: rule.matcher.users.clone().unwrap_or_default(),
                unit: rule.matcher.unit.is_some(),
            },
            originals: self.originals_of(pid),
        })
    }

    /// The mask each task of managed process `pid` had before pinnerd first touched
    /// it, by tid (its main thread's always).
    fn originals_of(&self, pid: i32) -> std::collections::BTreeMap<u32, CpuSet> {
        let Some(m) = self.managed.get(&pid) else {
            return Default::default();
        };
        std::iter::once((pid as u32, m.original.clone()))
            .chain(
                m.threads
                    .iter()
                    .filter(|(_, t)| !t.released)
                    .map(|(tid, t)| (*tid as u32, t.original.clone())),
            )
            .collect()
    }
}
