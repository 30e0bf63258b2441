//! The managed processes of [`State`](super::State): the manager, the chooser the plan
//! it holds was made with, and the operations it acts through.
//!
//! Owns: handing inputs and plans to the manager and planning again for what it then
//! reports (through `daemon::replan`), with that chooser. Must not touch: the machine,
//! the rules or when anything is due; the state hands each new plan down as a value.
//!
//! ```text
//!   State ─► Managed::hand_down(plan) / input(ev) ─► replan ─► Manager ─► Vec<Change>
//!                                                                ▲
//!                               Ops { affinity, procs } ─────────┘ (real, or fakes in tests)
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::affinity::{AffinityOps, DryRunOps, SystemOps};
use crate::api::ManagedEntry;
use crate::cpuset::CpuSet;
use crate::daemon::replan;
use crate::hold::Want;
use crate::manager::{self, Change, Manager};
use crate::plan::{Choose, Plan, Planned, SharedChoose};
use crate::settings::Settings;
use crate::sysroot::SysRoot;
use crate::topology::Topology;
use crate::watch::{ProcFs, ProcSource};

/// The operations the manager acts through: per-thread affinity and process reads.
#[derive(Clone)]
pub struct Ops {
    pub affinity: Arc<dyn AffinityOps + Send + Sync>,
    pub procs: Arc<dyn ProcSource + Send + Sync>,
}

impl Ops {
    /// The kernel's own, through the sysroot's `/proc`.
    pub fn system(root: &SysRoot) -> Ops {
        Ops {
            affinity: Arc::new(SystemOps::new(root.clone())),
            procs: Arc::new(ProcFs::new(root.clone())),
        }
    }
}

impl Ops {
    /// Reads processes through the sysroot's `/proc` and changes none: what would be
    /// set is only remembered ([`DryRunOps`]), for a daemon that observes another
    /// machine's tree (`daemon --machine`).
    pub fn observing(root: &SysRoot) -> Ops {
        Ops {
            affinity: Arc::new(DryRunOps::new(root.clone())),
            procs: Arc::new(ProcFs::new(root.clone())),
        }
    }
}

#[cfg(test)]
impl Ops {
    /// Fakes that see no real process and pin nothing (`FakeOps`, `FakeProcs`).
    pub fn fakes() -> Ops {
        Ops {
            affinity: Arc::new(crate::affinity::FakeOps::new()),
            procs: Arc::new(crate::watch::scan::FakeProcs::new()),
        }
    }
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ops")
    }
}

/// The manager (none before the state starts) and the chooser of its plan.
pub(super) struct Managed {
    ops: Ops,
    pub(super) manager: Option<Manager>,
    /// The chooser the manager's plan was made with: what the manager reports it saw
    /// is planned with it (see `daemon::replan`), so a new matrix moves nothing unless
    /// its own plan is handed down.
    chooser: Option<SharedChoose>,
}

impl Managed {
    /// Every managed process as `caller_uid` may see it: root and a process's owner get
    /// its row whole; anyone else its pid, rule and CPUs only (`comm` and `state`
    /// empty), as `Explain` shows it.
    pub(super) fn rows(&self, caller_uid: u32) -> Vec<ManagedEntry> {
        let Some(m) = &self.manager else {
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

    pub(super) fn new(ops: Ops) -> Managed {
        Managed {
            ops,
            manager: None,
            chooser: None,
        }
    }

    /// A manager for `online` CPUs with `settings`, acting through these operations.
    /// The manager, once started.
    pub(super) fn manager(&self) -> Option<&Manager> {
        self.manager.as_ref()
    }

    /// The manager, once started, to act on.
    pub(super) fn manager_mut(&mut self) -> Option<&mut Manager> {
        self.manager.as_mut()
    }

    /// The plan in force, once the manager started.
    pub(super) fn plan(&self) -> Option<&Plan> {
        self.manager.as_ref().map(Manager::plan)
    }

    pub(super) fn new_manager(&self, online: CpuSet, settings: &Settings) -> Manager {
        Manager::from_settings(
            self.ops.affinity.clone(),
            self.ops.procs.clone(),
            online,
            settings,
        )
    }

    /// Takes `m` as the manager and hands it its first plan and a first look at every
    /// process.
    pub(super) fn install(&mut self, mut m: Manager, planned: Planned) -> Vec<Change> {
        self.chooser = planned.choose;
        let choose = self.chooser.as_deref().map(|c| c as &dyn Choose);
        let mut changes =
            replan::hand_down(&mut m, manager::Input::RulesChanged(planned.plan), choose);
        changes.extend(replan::hand_down(&mut m, manager::Input::Rescan, choose));
        self.manager = Some(m);
        changes
    }

    /// The affinity seam, for the knobs of kernel threads (`knobs`).
    pub(super) fn affinity(&self) -> Arc<dyn crate::affinity::AffinityOps + Send + Sync> {
        self.ops.affinity.clone()
    }

    /// For each rule `pick` takes that holds CPUs with a managed process now: the rule
    /// and the CPUs its units hold (its exclusive units only, with `exclusive`).
    fn held_by(
        &self,
        pick: impl Fn(&crate::rules::Rule) -> bool,
        exclusive: bool,
    ) -> Vec<(&crate::rules::Rule, CpuSet)> {
        let Some(m) = &self.manager else {
            return Vec::new();
        };
        if !m.rules().rules().iter().any(|r| pick(r)) {
            return Vec::new();
        }
        let holding: BTreeSet<String> = m.list_managed().into_iter().map(|r| r.rule).collect();
        m.rules()
            .rules()
            .iter()
            .filter(|r| pick(r) && holding.contains(&r.name))
            .map(|r| {
                let cpus = m
                    .plan()
                    .units()
                    .iter()
                    .filter(|u| u.rule == r.name && (u.exclusive || !exclusive))
                    .fold(CpuSet::new(), |acc, u| acc.union(&u.state.held()));
                (r.as_ref(), cpus)
            })
            .filter(|(_, cpus)| !cpus.is_empty())
            .collect()
    }

    /// The `idle-limit-us` of each rule that holds CPUs now, with its CPUs.
    pub(super) fn idle_limits_held(&self) -> Vec<(u32, CpuSet)> {
        self.held_by(|r| r.idle_limit_us.is_some(), true)
            .into_iter()
            .map(|(r, cpus)| (r.idle_limit_us.unwrap_or_default(), cpus))
            .collect()
    }

    /// The CPUs kernel threads and unbound workqueues are to keep off: those `exclusive`
    /// rules that name their owners hold now (see `knobs::kthreads`).
    pub(super) fn kernel_work_away(&self) -> CpuSet {
        self.held_by(|r| r.owned(), true)
            .into_iter()
            .fold(CpuSet::new(), |acc, (_, cpus)| acc.union(&cpus))
    }

    /// The CPUs of `irqs = "away"` rules that hold CPUs with a managed process now.
    pub(super) fn irqs_wanted_away(&self) -> CpuSet {
        let Some(m) = &self.manager else {
            return CpuSet::new();
        };
        if !m.rules().rules().iter().any(|r| r.irqs_away) {
            return CpuSet::new();
        }
        let holding: BTreeSet<String> = m.list_managed().into_iter().map(|r| r.rule).collect();
        let rules: BTreeSet<&str> = m
            .rules()
            .rules()
            .iter()
            .filter(|r| r.irqs_away && holding.contains(&r.name))
            .map(|r| r.name.as_str())
            .collect();
        m.plan()
            .units()
            .iter()
            .filter(|u| rules.contains(u.rule.as_str()))
            .fold(CpuSet::new(), |acc, u| acc.union(&u.state.held()))
    }

    /// What should be held now: [`Manager::hold_want`] of every managed process, on
    /// `topology`'s nodes.
    pub(super) fn holds_wanted(&self, topology: Option<&Topology>) -> Vec<Want> {
        let Some(m) = &self.manager else {
            return Vec::new();
        };
        let rules = m.rules().rules();
        if !rules
            .iter()
            .any(|r| r.isolate || r.unit_cpuset || r.threads.iter().any(|t| t.isolate))
        {
            return Vec::new();
        }
        let node_of = |cpu: u32| topology.and_then(|t| t.node_of(cpu));
        let mut wants: Vec<Want> = m
            .list_managed()
            .iter()
            .filter_map(|row| m.hold_want(row, &node_of))
            .collect();
        wants.sort_by_key(|w| w.pid);
        wants
    }

    /// Hands a new plan down (`make`: rules or CPUs changed); its chooser is kept for
    /// what the manager reports next. `None` before the manager exists.
    pub(super) fn hand_down(
        &mut self,
        planned: Planned,
        make: fn(Plan) -> manager::Input,
    ) -> Option<Vec<Change>> {
        self.manager.as_ref()?;
        self.chooser = planned.choose;
        self.input(make(planned.plan))
    }

    /// One input to the manager, and the plans made again for what it then reports.
    pub(super) fn input(&mut self, ev: manager::Input) -> Option<Vec<Change>> {
        let m = self.manager.as_mut()?;
        let choose = self.chooser.as_deref().map(|c| c as &dyn Choose);
        Some(replan::hand_down(m, ev, choose))
    }

    /// Proc connector messages, in order, and the plans made again for what the
    /// manager then reports.
    pub(super) fn proc_batch(&mut self, msgs: Vec<crate::watch::ProcMsg>) -> Option<Vec<Change>> {
        let m = self.manager.as_mut()?;
        let mut changes = m.handle_batch(msgs);
        changes.extend(self.settle());
        Some(changes)
    }

    /// Plans made again for what the manager reports it saw (after a change made to it
    /// directly: a pin, a release, slots let go).
    pub(super) fn settle(&mut self) -> Vec<Change> {
        let Some(m) = self.manager.as_mut() else {
            return Vec::new();
        };
        let choose = self.chooser.as_deref().map(|c| c as &dyn Choose);
        replan::settle(m, choose)
    }
}

/// One manager change in the log, with fields.
pub(super) fn log_change(c: &Change) {
    match c {
        Change::Pinned {
            pid,
            tid,
            rule,
            outcome,
        } => {
            tracing::debug!(pid, tid, rule = %rule, outcome = outcome.label(), "pid {pid}, thread {tid} (rule {rule}): {}", outcome.words())
        }
        Change::Released {
            pid,
            rule,
            restored,
            reason,
        } => {
            // The manager says it at info, with the process's name and counts.
            tracing::debug!(pid, rule = %rule, restored, reason = %reason, "pid {pid} released (rule {rule}): {reason}")
        }
        Change::Foreign {
            pid,
            tid,
            expected,
            found,
            released,
        } => {
            // The manager warns (once per process, then counts): debug here.
            tracing::debug!(pid, tid, %expected, %found, released, "someone else changed a managed mask")
        }
        Change::Exited { pid } => tracing::debug!(pid, "managed process exited"),
        Change::Rescanned { processes, took } => {
            tracing::debug!(processes, took_ms = took.as_millis() as u64, "rescan")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::FakeOps;
    use crate::plan::making::make;
    use crate::plan::tests::{cpus, rules, set};
    use crate::plan::PlanInputs;
    use crate::watch::scan::FakeProcs;

    /// The plan of a rule placing `feed` on `on`, made as the state makes its plans.
    fn feed_on(on: &str) -> Planned {
        let text = format!(
            "[[rule]]\nname = \"feed\"\n[rule.match]\ncomm = \"feed\"\n[rule.place]\ncpus = \"{on}\"\n"
        );
        make(PlanInputs {
            rules: &rules(&text),
            cpus: cpus("0-7", ""),
            choose: None,
            memory: None,
            sched_ext: None,
        })
    }

    fn fakes() -> (Arc<FakeOps>, Arc<FakeProcs>, Managed) {
        let ops = Arc::new(FakeOps::new());
        let procs = Arc::new(FakeProcs::new());
        let managed = Managed::new(Ops {
            affinity: ops.clone(),
            procs: procs.clone(),
        });
        (ops, procs, managed)
    }

    #[test]
    fn plans_handed_down_pin_and_move_threads_through_the_ops_given() {
        let (ops, procs, mut managed) = fakes();
        procs.put(100, "feed", 1, &[(101, "feed")]);
        ops.add_process(100, 1, &[100, 101], &set("0-7"));
        procs.put(200, "other", 1, &[]);
        ops.add_process(200, 1, &[200], &set("0-7"));

        let m = managed.new_manager(set("0-7"), &Settings::default());
        let changes = managed.install(m, feed_on("2-3"));
        assert!(changes
            .iter()
            .any(|c| matches!(c, Change::Pinned { pid: 100, .. })));
        assert_eq!(ops.mask(100), Some(set("2-3")));
        assert_eq!(ops.mask(101), Some(set("2-3")));
        assert_eq!(ops.mask(200), Some(set("0-7")), "no rule matches it");

        // New rules reach the running threads; nothing is left to plan again after.
        let moved = managed
            .hand_down(feed_on("4-5"), manager::Input::RulesChanged)
            .expect("a manager is installed");
        assert!(!moved.is_empty());
        assert_eq!(ops.mask(100), Some(set("4-5")));
        assert_eq!(ops.mask(101), Some(set("4-5")));
        assert!(managed.settle().is_empty());
        assert_eq!(managed.manager.as_ref().unwrap().managed_processes(), 1);
    }

    #[test]
    fn before_a_manager_is_installed_nothing_is_handed_down() {
        let (ops, procs, mut managed) = fakes();
        procs.put(100, "feed", 1, &[]);
        ops.add_process(100, 1, &[100], &set("0-7"));
        assert!(managed
            .hand_down(feed_on("2-3"), manager::Input::RulesChanged)
            .is_none());
        assert!(managed.input(manager::Input::Rescan).is_none());
        assert!(managed.proc_batch(Vec::new()).is_none());
        assert!(managed.settle().is_empty());
        assert!(ops.calls().is_empty(), "{:?}", ops.calls());
    }
}
