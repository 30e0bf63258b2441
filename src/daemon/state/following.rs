//! `memory = "follow"` for [`State`]: which managed processes' memory follows their
//! CPUs, the nodes it last followed, one job per process at a time, queued for the
//! shell's one mover thread (never on the loop: one `migrate_pages` call cannot be
//! bounded; one move at a time over all processes), no more often than
//! `memory.follow-interval`, and what each job did (explain, log, metrics).
//! Split from `state/mod.rs` to keep each file readable; same state, same loop.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::cpuset::CpuSet;
use crate::memory::follow::{self, FollowJob, Outcome};

use super::{Action, State};

impl State {
    /// The managed processes whose memory follows, with the nodes of their CPUs now.
    fn follow_targets(&self) -> BTreeMap<i32, BTreeSet<u32>> {
        let (Some(m), Some(t)) = (&self.managed.manager, &self.machine.topology) else {
            return BTreeMap::new();
        };
        let rules: BTreeSet<&str> = m
            .rules()
            .rules()
            .iter()
            .filter(|r| r.memory_follow)
            .map(|r| r.name.as_str())
            .collect();
        if rules.is_empty() && self.sharing.follow.runtime.is_empty() {
            return BTreeMap::new();
        }
        m.list_managed()
            .into_iter()
            .filter(|r| {
                rules.contains(r.rule.as_str())
                    || (r.rule == "(runtime)"
                        && self.sharing.follow.runtime.contains(&(r.pid as i32)))
            })
            .filter_map(|r| {
                let cpus: CpuSet = r.cpus.parse().ok()?;
                let nodes = crate::memory::policy::nodes_of(t, &cpus);
                (!nodes.is_empty()).then_some((r.pid as i32, nodes))
            })
            .collect()
    }

    /// Starts a job for every following process whose CPUs are on other nodes than its
    /// memory last followed, unless one runs for it or its interval has not passed (a
    /// later tick starts it). Called after every manager change and every tick.
    pub(super) fn sync_memory(&mut self, now: Instant) {
        let targets = self.follow_targets();
        let runtime: BTreeSet<i32> = self
            .sharing
            .follow
            .runtime
            .iter()
            .copied()
            .filter(|p| {
                self.managed
                    .manager
                    .as_ref()
                    .is_some_and(|m| m.is_managed(*p))
            })
            .collect();
        self.sharing.follow.runtime = runtime;
        self.sharing
            .follow
            .entries
            .retain(|pid, e| targets.contains_key(pid) || e.running.is_some());
        if targets.is_empty() {
            return;
        }
        let all_nodes: Vec<u32> = self
            .machine
            .topology
            .as_ref()
            .map(|t| t.nodes.iter().map(|n| n.id).collect())
            .unwrap_or_default();
        let interval = self.loaded.settings.memory.follow_interval.0;
        let max_bytes = u64::from(self.loaded.settings.memory.follow_max_size_mib) << 20;
        for (pid, nodes) in targets {
            let e = self.sharing.follow.entries.entry(pid).or_default();
            if e.running.is_some() || e.done_for == nodes {
                continue;
            }
            if all_nodes.len() <= 1 {
                // Nothing to read or move: said once, without a thread.
                e.done_for = nodes;
                e.last_at = Some(now);
                e.last = Some(Outcome::Nothing(
                    "one node: all of its memory is local".into(),
                ));
                self.metrics
                    .memory
                    .count(e.last.as_ref().expect("just set"));
                tracing::info!(pid, "memory follow: one node, nothing to move");
                continue;
            }
            if follow::wait_left(
                e.last_at.map(|t| now.saturating_duration_since(t)),
                interval,
            )
            .is_some()
            {
                e.waiting = Some(nodes);
                continue;
            }
            e.waiting = None;
            e.running = Some(nodes.clone());
            self.sharing.follow.queued.push_back(pid);
            tracing::info!(pid, nodes = %follow::words(&nodes), "memory follow: moving its memory to the nodes of its CPUs");
            self.actions.push(Action::Follow(Box::new(FollowJob {
                pid,
                target: nodes,
                all_nodes: all_nodes.clone(),
                root: self.cfg.sysroot.clone(),
                max_bytes,
            })));
        }
    }

    /// A job ended: its outcome is kept for `explain`, logged and counted.
    pub(super) fn followed(&mut self, f: follow::Finished) {
        self.metrics.memory.count(&f.outcome);
        match &f.outcome {
            Outcome::Moved { .. } => {
                tracing::info!(pid = f.pid, outcome = %f.outcome, "memory follow")
            }
            Outcome::Failed(_) | Outcome::Refused(_) => {
                tracing::warn!(pid = f.pid, outcome = %f.outcome, "memory follow")
            }
            _ => tracing::debug!(pid = f.pid, outcome = %f.outcome, "memory follow"),
        }
        self.sharing.follow.queued.retain(|p| *p != f.pid);
        if let Some(e) = self.sharing.follow.entries.get_mut(&f.pid) {
            e.running = None;
            e.last_at = Some(f.at);
            // A refusal or failure is retried after the interval, a success is not.
            if !matches!(f.outcome, Outcome::Refused(_) | Outcome::Failed(_)) {
                e.done_for = f.target;
            }
            e.last = Some(f.outcome);
        }
        self.sync_memory(f.at);
    }

    /// The `memory follow:` line of `Explain` for `pid`; empty when its memory does not
    /// follow.
    pub(super) fn follow_line(&self, pid: i32, now: Instant) -> String {
        let Some(e) = self.sharing.follow.entries.get(&pid) else {
            return String::new();
        };
        let ago = |t: Option<Instant>| {
            t.map_or(String::new(), |t| {
                format!(
                    " ({:.0} s ago)",
                    now.saturating_duration_since(t).as_secs_f64()
                )
            })
        };
        let ahead = self
            .sharing
            .follow
            .queued
            .iter()
            .take_while(|p| **p != pid)
            .count();
        let mut s = match (&e.running, &e.last) {
            (Some(n), _) if ahead == 0 => format!(
                "memory follow: moving its memory to {} now\n",
                follow::words(n)
            ),
            (Some(n), _) => format!(
                "memory follow: waiting to move its memory to {}: one process moves at a time, {ahead} ahead of it\n",
                follow::words(n)
            ),
            (None, Some(o)) => format!("memory follow: {o}{}\n", ago(e.last_at)),
            (None, None) => String::new(),
        };
        if let Some(n) = &e.waiting {
            let wait = follow::wait_left(
                e.last_at.map(|t| now.saturating_duration_since(t)),
                self.loaded.settings.memory.follow_interval.0,
            )
            .unwrap_or(Duration::ZERO);
            s.push_str(&format!(
                "memory follow: its CPUs are on {} now; moving there in {:.0} s (memory.follow-interval)\n",
                follow::words(n),
                wait.as_secs_f64()
            ));
        }
        s
    }
}
