//! `memory = "follow"`, kept in [`Following`]: which managed processes' memory follows
//! their CPUs, the nodes it last followed, one job per process at a time, queued for the
//! shell's one mover thread (never on the loop: one `migrate_pages` call cannot be
//! bounded; one move at a time over all processes), no more often than
//! `memory.follow-interval`, and what each job did (explain, log, metrics). Handed the
//! manager, the topology and the settings; imports nothing of the state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::cpuset::CpuSet;
use crate::manager::Manager;
use crate::memory::follow::{self, FollowJob, Outcome};
use crate::metrics::MemoryCounters;
use crate::settings::Settings;
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// One process whose memory follows its CPUs.
#[derive(Debug, Default)]
pub(super) struct Entry {
    /// The nodes its memory was last moved to (or found on); empty: not yet.
    pub(super) done_for: BTreeSet<u32>,
    /// A job runs for it now, towards these nodes.
    pub(super) running: Option<BTreeSet<u32>>,
    /// When its last job ended.
    pub(super) last_at: Option<Instant>,
    /// What its last job did.
    pub(super) last: Option<Outcome>,
    /// Its CPUs moved to these nodes, and the interval holds the next job back.
    pub(super) waiting: Option<BTreeSet<u32>>,
}

/// Every following process.
#[derive(Debug, Default)]
pub(super) struct Following {
    pub(super) entries: BTreeMap<i32, Entry>,
    /// Processes pinned at run time with `memory = "follow"`.
    pub(super) runtime: BTreeSet<i32>,
    /// The processes whose jobs are queued, in the order they were queued: the shell's
    /// [`follow::MoveQueue`] runs them one at a time in this order, so the first is
    /// moving and the others wait.
    pub(super) queued: VecDeque<i32>,
}

impl Following {
    /// Whether the memory of `pid`, pinned at run time, follows its CPUs.
    pub(super) fn set_runtime(&mut self, pid: i32, follow: bool) {
        if follow {
            self.runtime.insert(pid);
        } else {
            self.runtime.remove(&pid);
        }
    }
}

/// What [`Following::sync`] reads: the manager, the machine and the settings now.
pub(super) struct Now<'a> {
    pub(super) at: Instant,
    pub(super) manager: Option<&'a Manager>,
    pub(super) topology: Option<&'a Topology>,
    pub(super) settings: &'a Settings,
    pub(super) root: &'a SysRoot,
    /// Processes whose hold is asked for and not made yet: their memory waits for it.
    pub(super) unsettled: &'a BTreeSet<i32>,
}

impl Following {
    /// The managed processes whose memory follows, with the nodes of their CPUs now.
    fn targets(&self, m: &Manager, t: &Topology) -> BTreeMap<i32, BTreeSet<u32>> {
        let rules: BTreeSet<&str> = m
            .rules()
            .rules()
            .iter()
            .filter(|r| r.memory_follow)
            .map(|r| r.name.as_str())
            .collect();
        if rules.is_empty() && self.runtime.is_empty() {
            return BTreeMap::new();
        }
        m.list_managed()
            .into_iter()
            .filter(|r| {
                rules.contains(r.rule.as_str())
                    || (r.rule == "(runtime)" && self.runtime.contains(&(r.pid as i32)))
            })
            .filter_map(|r| {
                let cpus: CpuSet = r.cpus.parse().ok()?;
                let nodes = crate::memory::policy::nodes_of(t, &cpus);
                (!nodes.is_empty()).then_some((r.pid as i32, nodes))
            })
            .collect()
    }

    /// The jobs to start: one for every following process whose CPUs are on other nodes
    /// than its memory last followed, unless one runs for it or its interval has not
    /// passed (a later tick starts it), or its hold is not made yet (see `Now`). Asked
    /// after every manager change and every tick; what is settled without a job is
    /// counted in `counts`.
    pub(super) fn sync(&mut self, now: Now<'_>, counts: &mut MemoryCounters) -> Vec<FollowJob> {
        let targets = match (now.manager, now.topology) {
            (Some(m), Some(t)) => self.targets(m, t),
            _ => BTreeMap::new(),
        };
        let managed = |p: &i32| now.manager.is_some_and(|m| m.is_managed(*p));
        self.runtime.retain(managed);
        self.entries
            .retain(|pid, e| targets.contains_key(pid) || e.running.is_some());
        if targets.is_empty() {
            return Vec::new();
        }
        let all_nodes: Vec<u32> = now
            .topology
            .map(|t| t.nodes.iter().map(|n| n.id).collect())
            .unwrap_or_default();
        let interval = now.settings.memory.follow_interval.0;
        let max_bytes = u64::from(now.settings.memory.follow_max_size_mib) << 20;
        let mut jobs = Vec::new();
        for (pid, nodes) in targets {
            if now.unsettled.contains(&pid) {
                continue; // followed once the hold its placement waits for is made
            }
            let e = self.entries.entry(pid).or_default();
            if e.running.is_some() || e.done_for == nodes {
                continue;
            }
            if all_nodes.len() <= 1 {
                // Nothing to read or move: said once, without a thread.
                e.done_for = nodes;
                e.last_at = Some(now.at);
                e.last = Some(Outcome::Nothing(
                    "one node: all of its memory is local".into(),
                ));
                counts.count(e.last.as_ref().expect("just set"));
                tracing::info!(
                    pid,
                    "pid {pid}: memory follow: nothing moved: one node: all of its memory is local"
                );
                continue;
            }
            if follow::wait_left(
                e.last_at.map(|t| now.at.saturating_duration_since(t)),
                interval,
            )
            .is_some()
            {
                e.waiting = Some(nodes);
                continue;
            }
            e.waiting = None;
            e.running = Some(nodes.clone());
            self.queued.push_back(pid);
            let words = follow::words(&nodes);
            tracing::info!(
                pid, nodes = %words,
                "pid {pid}: memory follow: moving its memory to {words}, where its CPUs are"
            );
            jobs.push(FollowJob {
                pid,
                target: nodes,
                all_nodes: all_nodes.clone(),
                root: now.root.clone(),
                max_bytes,
            });
        }
        jobs
    }

    /// A job ended: its outcome is kept for `explain`, logged and counted in `counts`.
    pub(super) fn ended(&mut self, f: follow::Finished, counts: &mut MemoryCounters) {
        counts.count(&f.outcome);
        match &f.outcome {
            Outcome::Moved { .. } => {
                tracing::info!(pid = f.pid, outcome = %f.outcome, "pid {}: memory follow: {}", f.pid, f.outcome)
            }
            Outcome::Failed(_) | Outcome::Refused(_) => {
                tracing::warn!(pid = f.pid, outcome = %f.outcome, "pid {}: memory follow: {}", f.pid, f.outcome)
            }
            _ => {
                tracing::debug!(pid = f.pid, outcome = %f.outcome, "pid {}: memory follow: {}", f.pid, f.outcome)
            }
        }
        self.queued.retain(|p| *p != f.pid);
        if let Some(e) = self.entries.get_mut(&f.pid) {
            e.running = None;
            e.last_at = Some(f.at);
            // A refusal or failure is retried after the interval, a success is not.
            if !matches!(f.outcome, Outcome::Refused(_) | Outcome::Failed(_)) {
                e.done_for = f.target;
            }
            e.last = Some(f.outcome);
        }
    }

    /// The `memory follow:` line of `Explain` for `pid`; empty when its memory does not
    /// follow.
    /// `interval` is `memory.follow-interval`.
    pub(super) fn line(&self, pid: i32, now: Instant, interval: Duration) -> String {
        let Some(e) = self.entries.get(&pid) else {
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
        let ahead = self.queued.iter().take_while(|p| **p != pid).count();
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
                interval,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::affinity::FakeOps;
    use crate::cpuset::set;
    use crate::watch::scan::FakeProcs;

    /// A manager acting through fakes on CPUs 0-15 with process 100 pinned at run time
    /// to CPU 1, on the two-node Xeon fixture.
    fn rig() -> (Manager, Topology, SysRoot) {
        let root = SysRoot::machine(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs/xeon-e5620"),
        );
        let topology = Topology::discover(&root).unwrap();
        let (ops, procs) = (Arc::new(FakeOps::new()), Arc::new(FakeProcs::new()));
        procs.put(100, "feed", 1, &[]);
        ops.add_process(100, 1, &[100], &set("0-15"));
        let mut m = Manager::from_settings(ops, procs, set("0-15"), &Settings::default());
        m.pin(100, &set("1")).unwrap();
        (m, topology, root)
    }

    fn now<'a>(
        at: Instant,
        m: &'a Manager,
        t: &'a Topology,
        s: &'a Settings,
        root: &'a SysRoot,
    ) -> Now<'a> {
        Now {
            at,
            manager: Some(m),
            topology: Some(t),
            settings: s,
            root,
            unsettled: &NONE_UNSETTLED,
        }
    }

    static NONE_UNSETTLED: BTreeSet<i32> = BTreeSet::new();

    #[test]
    fn a_run_time_pin_that_follows_gets_one_job_at_a_time_then_waits_its_interval() {
        let (m, t, root) = rig();
        let settings = Settings::default();
        let mut counts = MemoryCounters::default();
        let mut f = Following::default();
        let t0 = Instant::now();
        // Not following: nothing to do.
        assert!(f
            .sync(now(t0, &m, &t, &settings, &root), &mut counts)
            .is_empty());
        f.set_runtime(100, true);
        let jobs = f.sync(now(t0, &m, &t, &settings, &root), &mut counts);
        let node = crate::memory::policy::nodes_of(&t, &set("1"));
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].pid, &jobs[0].target), (100, &node));
        assert!(f
            .line(100, t0, Duration::from_secs(60))
            .starts_with("memory follow: moving its memory to "));
        // While it runs, no second job.
        assert!(f
            .sync(now(t0, &m, &t, &settings, &root), &mut counts)
            .is_empty());
        f.ended(
            follow::Finished {
                pid: 100,
                target: node.clone(),
                outcome: Outcome::Refused("too big".into()),
                at: t0,
            },
            &mut counts,
        );
        // A refusal is tried again, after the interval only.
        assert!(f
            .sync(now(t0, &m, &t, &settings, &root), &mut counts)
            .is_empty());
        let interval = settings.memory.follow_interval.0;
        let later = t0 + interval + Duration::from_secs(1);
        assert_eq!(
            f.sync(now(later, &m, &t, &settings, &root), &mut counts)
                .len(),
            1
        );
    }

    /// What a follow does is said with the process and the nodes in its message.
    #[test]
    fn memory_follow_is_logged_in_words() {
        let (m, t, root) = rig();
        let settings = Settings::default();
        let mut counts = MemoryCounters::default();
        let mut f = Following::default();
        let t0 = Instant::now();
        f.set_runtime(100, true);
        let node = crate::memory::policy::nodes_of(&t, &set("1"));
        let (_, said) = crate::test_log::messages(|| {
            f.sync(now(t0, &m, &t, &settings, &root), &mut counts);
            f.ended(
                follow::Finished {
                    pid: 100,
                    target: node.clone(),
                    outcome: Outcome::Moved {
                        from: [0].into(),
                        to: node.clone(),
                        moved: 3 << 20,
                        left: 0,
                        pages_left: 0,
                        took: Duration::from_millis(200),
                    },
                    at: t0,
                },
                &mut counts,
            );
            f.ended(
                follow::Finished {
                    pid: 100,
                    target: node.clone(),
                    outcome: Outcome::Refused("too big".into()),
                    at: t0,
                },
                &mut counts,
            );
        });
        assert_eq!(
            said,
            [
                "INFO pid 100: memory follow: moving its memory to node 1, where its CPUs are",
                "INFO pid 100: memory follow: moved 3.0 MiB from node 0 to node 1 in 0.2 s",
                "WARN pid 100: memory follow: refused: too big",
            ]
        );
    }
}
