//! The cgroup cpuset of each managed process, and reporting what a plan must be made in.
//!
//! Owns: what each managed process's cpuset is (its cgroup's effective CPUs, else its
//! allowed mask at first contact — never a mask pinnerd set since), noticing that it
//! changed (a rescan reads it again), reporting the distinct cpusets, memory and slots
//! taken ([`Seen`], [`Manager::wants_plan`]), and taking the plan the daemon makes for
//! them ([`Input::Replanned`](super::Input::Replanned)).
//! Must not touch: the choice of CPUs or the making of plans (the daemon's, through
//! `plan`), affinity calls (see `applying`).

use super::{Change, Manager, Source};
use crate::cpuset::CpuSet;
use crate::plan::{Cpusets, Demand, Plan, PlanState, Seen, UnitPlan};

/// What a plan gives threads, without what its slots units hold.
fn targets(plan: &Plan) -> Vec<UnitPlan> {
    plan.units()
        .iter()
        .map(|u| {
            let mut u = u.clone();
            if let PlanState::Slots { held_slots, .. } = &mut u.state {
                *held_slots = 0;
            }
            u
        })
        .collect()
}

/// Where a managed process's cpuset came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Allowed {
    pub cpus: CpuSet,
    /// The cgroup file, or `None`: the allowed mask at first contact.
    pub file: Option<std::path::PathBuf>,
}

impl Allowed {
    /// In words, for `explain` and `plan --live`.
    pub fn describe(&self) -> String {
        match &self.file {
            Some(f) => format!("{} (from {})", self.cpus, f.display()),
            None => format!("{} (its allowed mask at first contact)", self.cpus),
        }
    }
}

impl Manager {
    /// The cpuset of process `pid`, whose main thread's mask at first contact was
    /// `original`.
    pub(super) fn read_allowed(&self, pid: i32, original: &CpuSet) -> Allowed {
        match self.procs.cpuset(pid) {
            Some(c) if !c.cpus.is_empty() => Allowed {
                cpus: c.cpus,
                file: Some(c.file),
            },
            _ => Allowed {
                cpus: original.clone(),
                file: None,
            },
        }
    }

    /// The memory of process `pid` at first contact, for a rule whose placement
    /// weighs memory (`plan::memory::weighs`) on a machine of several nodes; `None`
    /// below the settings' minimum size (it would not weigh).
    pub(super) fn first_memory(
        &self,
        pid: i32,
        source: &Source,
    ) -> Option<crate::memory::NodeBytes> {
        let Source::Rule(r) = source else { return None };
        let mp = self.plan.memory_planning();
        if !mp.active() || !r.place.as_ref().is_some_and(crate::plan::memory::weighs) {
            return None;
        }
        let bytes = self.procs.memory(pid, &mp.node_ids())?;
        (bytes.values().sum::<u64>() >= mp.min_bytes.max(1)).then_some(bytes)
    }

    /// The distinct cpusets of the processes each rule manages, and their memory. A
    /// rule whose processes all allow every CPU is left out (planned on all CPUs
    /// anyway).
    pub(super) fn current_cpusets(&self) -> Cpusets {
        let mut keys: std::collections::BTreeMap<&str, Vec<Option<CpuSet>>> = Default::default();
        let mut out = Cpusets::default();
        for m in self.managed.values() {
            if let Source::Rule(r) = &m.source {
                let key = self.plan.cpuset_key(&m.allowed.cpus);
                if let Some(bytes) = &m.memory {
                    out.add_memory(&r.name, key.as_ref(), bytes);
                }
                keys.entry(&r.name).or_default().push(key);
            }
        }
        for (rule, ks) in keys {
            if ks.iter().any(Option::is_some) {
                for k in ks {
                    out.add(rule, k.as_ref());
                }
            }
        }
        out
    }

    /// The slots the managed threads of each non-shared thread entry take.
    pub(super) fn current_demand(&self) -> Demand {
        let mut out = Demand::default();
        for m in self.managed.values() {
            if let Source::Rule(r) = &m.source {
                for (entry, pool) in &m.slots {
                    if let Some(top) = pool.highest() {
                        out.take(&r.name, *entry, top);
                    }
                }
            }
        }
        out
    }

    /// What the manager sees of its processes now: the plan for them must be made in
    /// these cpusets, holding these slots.
    pub fn seen(&self) -> Seen {
        Seen {
            cpusets: self.current_cpusets(),
            demand: self.current_demand(),
        }
    }

    /// What the manager saw, when the plan in force was not made for it (or processes
    /// wait for a plan, or a cpuset changed): the loop makes the plan again for it
    /// ([`Plan::again`]) and hands it down ([`Input::Replanned`](super::Input::Replanned)).
    /// `None`: the plan in force fits.
    pub fn wants_plan(&self) -> Option<Seen> {
        let seen = self.seen();
        let fits = self.awaiting.is_empty()
            && !self.reapply
            && seen.cpusets == *self.plan.cpusets()
            && seen.demand == *self.plan.demand();
        (!fits).then_some(seen)
    }

    /// Takes the plan made again for what was seen: the processes that waited for it
    /// are pinned; when it moves any unit's CPUs (or a cpuset changed), every managed
    /// thread is applied again.
    pub(super) fn replanned(&mut self, plan: Plan, out: &mut Vec<Change>) {
        // Rules of explicit CPUs only come out the same, and so do slots whose holding
        // alone changed: nothing to re-apply.
        let moved = targets(&plan) != targets(&self.plan);
        if moved {
            tracing::info!(cpusets = ?plan.cpusets(), "planning again for the processes' cgroup cpusets and threads");
        }
        self.plan = plan;
        let awaiting = std::mem::take(&mut self.awaiting);
        if moved || std::mem::take(&mut self.reapply) {
            self.reevaluate_managed(out);
            return;
        }
        for pid in awaiting {
            match self.procs.snapshot(pid) {
                Some(snap) => self.consider_snapshot(snap, None, out),
                None => self.forget(pid, out),
            }
        }
    }

    /// Reads a managed process's cpuset again (the rescan's check): a process moved
    /// to another cgroup, or its cgroup's CPUs edited, has its threads applied again in
    /// the new cpuset.
    pub(super) fn recheck_cpuset(&mut self, pid: i32) {
        let Some(c) = self.procs.cpuset(pid) else {
            return;
        };
        if c.cpus.is_empty() {
            return;
        }
        let Some(m) = self.managed.get_mut(&pid) else {
            return;
        };
        if m.allowed.cpus == c.cpus {
            return;
        }
        tracing::info!(pid, from = %m.allowed.cpus, to = %c.cpus, file = %c.file.display(), "cpuset changed");
        m.allowed = Allowed {
            cpus: c.cpus,
            file: Some(c.file),
        };
        for t in m.threads.values_mut() {
            t.stale = true;
        }
        // Its threads wait for the plan made in the new cpuset.
        self.awaiting.insert(pid);
        self.reapply = true;
    }

    /// The cpuset managed process `pid` is planned in: `None` when it allows every CPU
    /// (or is not managed).
    pub fn cpuset_key_of(&self, pid: i32) -> Option<CpuSet> {
        self.managed
            .get(&pid)
            .and_then(|m| self.plan.cpuset_key(&m.allowed.cpus))
    }

    /// The cpuset a managed process is planned in, in words (`None`: not managed).
    pub fn cpuset_of(&self, pid: i32) -> Option<String> {
        self.managed.get(&pid).map(|m| m.allowed.describe())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::affinity::{FakeOps, Outcome};
    use crate::cpuset::CpuSet;
    use crate::manager::{Change, Input, Manager, ManagerConfig};
    use crate::plan::tests::LowestFirst;
    use crate::plan::{Cpus, Plan, PlanState};
    use crate::rules::{compile_text, LoadPolicy, RuleSet};
    use crate::watch::scan::FakeProcs;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// Two CPUs each, held exclusively.
    const FEED: &str = r#"
[[rule]]
name = "feed"
[rule.match]
comm = "feed*"
[rule.place]
count = 2
exclusive = true
"#;

    struct T {
        ops: Arc<FakeOps>,
        procs: Arc<FakeProcs>,
        mgr: Manager,
    }

    /// The cpuset of each plan instance, in order.
    fn unit_cpusets(t: &T) -> Vec<Option<CpuSet>> {
        t.mgr
            .plan()
            .units()
            .iter()
            .map(|u| u.cpuset.clone())
            .collect()
    }

    /// A manager on CPUs 0-7, and the plan of `text` as the daemon makes it.
    fn rig(text: &str) -> (T, Plan) {
        let ops = Arc::new(FakeOps::new());
        let procs = Arc::new(FakeProcs::new());
        let cpus = Cpus {
            online: set("0-7"),
            reserved: CpuSet::new(),
        };
        let mgr = Manager::new(
            ops.clone(),
            procs.clone(),
            cpus.clone(),
            ManagerConfig::default(),
        );
        let r = compile_text(
            std::path::Path::new("t.toml"),
            text,
            &LoadPolicy::unchecked(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let plan = Plan::new(&RuleSet::new(r), &cpus, Some(&LowestFirst));
        (T { ops, procs, mgr }, plan)
    }

    impl T {
        /// One input, as the daemon's loop hands it down (with the plans made again for
        /// what the manager then reports).
        fn ev(&mut self, input: Input) -> Vec<Change> {
            crate::daemon::replan::hand_down(&mut self.mgr, input, Some(&LowestFirst))
        }

        /// Process `pid` allowed on `mask` at first contact, in cgroup cpuset `cg`.
        fn process(&self, pid: i32, comm: &str, mask: &str, cg: Option<&str>) {
            self.procs.put(pid, comm, 1, &[]);
            self.ops.add_process(pid, 1, &[], &set(mask));
            self.procs.set_cpuset(pid, cg.map(set));
        }

        fn refused(changes: &[Change]) -> usize {
            changes
                .iter()
                .filter(|c| {
                    matches!(
                        c,
                        Change::Pinned {
                            outcome: Outcome::Refused { .. } | Outcome::Narrowed { .. },
                            ..
                        }
                    )
                })
                .count()
        }
    }

    #[test]
    fn each_cpuset_gets_its_own_plan_and_exclusivity_holds_across_them() {
        let (mut t, plan) = rig(FEED);
        t.process(100, "feed-a", "0-7", Some("4-7"));
        t.process(200, "feed-b", "0-7", Some("4-7"));
        t.process(300, "feed-c", "0-7", Some("5-6"));
        t.process(400, "feed-d", "0-7", None);
        let changes = t.ev(Input::RulesChanged(plan));
        assert_eq!(T::refused(&changes), 0, "{changes:?}");
        // One plan per distinct cpuset, each inside it; CPUs 4-5 went to the first
        // cpuset, so 5-6 has too few left and says who holds them.
        assert_eq!(t.ops.mask(100), Some(set("4-5")));
        assert_eq!(t.ops.mask(200), Some(set("4-5")));
        assert_eq!(
            t.mgr.plan_for(300, "feed", None),
            Some(&PlanState::Lost {
                to: "feed".into(),
                cpus: set("5")
            })
        );
        assert_eq!(
            t.ops.mask(300),
            Some(set("0-7")),
            "a lost unit is not applied"
        );
        // All CPUs: planned around the CPUs the cpuset instances hold.
        assert_eq!(t.ops.mask(400), Some(set("0-1")));
        let units = unit_cpusets(&t);
        assert_eq!(units, vec![None, Some(set("4-7")), Some(set("5-6"))]);
    }

    #[test]
    fn a_process_in_a_new_cpuset_is_reported_and_waits_for_the_plan_made_for_it() {
        let (mut t, plan) = rig(FEED);
        t.process(100, "feed", "0-7", Some("4-7"));
        // Without the loop: the manager reports the cpuset and pins nothing meanwhile.
        t.mgr.handle(Input::RulesChanged(plan));
        assert_eq!(t.ops.mask(100), Some(set("0-7")));
        let seen = t
            .mgr
            .wants_plan()
            .expect("a cpuset the plan was not made in");
        assert_eq!(seen.cpusets.of("feed"), vec![Some(set("4-7"))]);
        assert_eq!(unit_cpusets(&t), vec![None], "the manager planned nothing");
        // The loop makes the plan for what it saw and hands it down.
        let again = t.mgr.plan().again(&seen, Some(&LowestFirst));
        t.mgr.handle(Input::Replanned(again));
        assert_eq!(t.ops.mask(100), Some(set("4-5")));
        assert_eq!(t.mgr.wants_plan(), None);
        assert_eq!(t.mgr.counters().refused, 0);
    }

    #[test]
    fn the_mask_at_first_contact_stands_in_for_a_missing_cgroup_and_never_shrinks() {
        let (mut t, plan) = rig(FEED);
        t.process(100, "feed", "2-3,6", None);
        t.ev(Input::RulesChanged(plan));
        assert_eq!(t.ops.mask(100), Some(set("2-3")));
        assert!(
            t.mgr
                .explain(100)
                .contains("cpuset 2-3,6 (its allowed mask at first contact)"),
            "{}",
            t.mgr.explain(100)
        );
        // Our own pin narrowed the mask; the cpuset stays what it was.
        t.ev(Input::Rescan);
        assert_eq!(
            t.mgr.cpuset_of(100).as_deref(),
            Some("2-3,6 (its allowed mask at first contact)")
        );
        assert_eq!(t.ops.mask(100), Some(set("2-3")));
    }

    #[test]
    fn a_cpuset_change_is_seen_on_rescan_and_the_process_replanned() {
        let (mut t, plan) = rig(FEED);
        t.process(100, "feed", "0-7", Some("4-5"));
        t.ev(Input::RulesChanged(plan));
        assert_eq!(t.ops.mask(100), Some(set("4-5")));
        // The cgroup's CPUs are edited (the kernel narrows the task as it does).
        t.procs.set_cpuset(100, Some(set("6-7")));
        t.ops.set_cpuset(100, &set("6-7"));
        t.ev(Input::Rescan);
        assert_eq!(t.ops.mask(100), Some(set("6-7")));
        assert!(t
            .mgr
            .explain(100)
            .contains("cpuset 6-7 (from /sys/fs/cgroup/fake-100/"));
        // The old cpuset's plan is gone with its last process.
        let units = unit_cpusets(&t);
        assert_eq!(units, vec![Some(set("6-7"))]);
        // It leaves: the rule is planned on all CPUs again.
        t.procs.remove(100, 100);
        t.ops.remove_task(100);
        t.ev(Input::Rescan);
        let units = unit_cpusets(&t);
        assert_eq!(units, vec![None]);
    }

    #[test]
    fn a_process_on_all_cpus_after_only_cpuset_ones_gets_the_plan_on_all_cpus() {
        let (mut t, plan) = rig(FEED);
        t.process(100, "feed-a", "0-7", Some("4-7"));
        t.ev(Input::RulesChanged(plan));
        assert_eq!(t.ops.mask(100), Some(set("4-5")));
        let units = unit_cpusets(&t);
        assert_eq!(units, vec![Some(set("4-7"))], "no instance on all CPUs yet");
        t.process(200, "feed-b", "0-7", None);
        t.ev(Input::Proc(crate::watch::ProcMsg::Exec { pid: 200 }));
        assert_eq!(t.ops.mask(200), Some(set("0-1")));
        assert_eq!(t.ops.mask(100), Some(set("4-5")), "the first one stays");
    }

    #[test]
    fn explicit_cpus_outside_the_cpuset_are_classified_as_before() {
        let (mut t, plan) = rig(r#"
[[rule]]
name = "fixed"
[rule.match]
comm = "fixed"
[rule.place]
cpus = "0-1"
"#);
        t.process(100, "fixed", "0-7", Some("4-7"));
        t.ops.set_cpuset(100, &set("4-7"));
        let changes = t.ev(Input::RulesChanged(plan));
        assert_eq!(T::refused(&changes), 1, "{changes:?}");
        assert_eq!(t.mgr.plan().units().len(), 1);
        assert_eq!(t.mgr.plan().units()[0].cpuset, None);
    }

    #[test]
    fn a_running_process_is_placed_on_the_node_holding_its_memory() {
        use crate::plan::MemoryPlanning;
        const DB: &str =
            "[[rule]]\nname = \"db\"\n[rule.match]\ncomm = \"db*\"\n[rule.place]\ncount = 2\n";
        let (mut t, plan) = rig(DB);
        let plan = plan.with_memory(
            MemoryPlanning {
                nodes: vec![(0, set("0-3")), (1, set("4-7"))],
                tolerance: 0.1,
                min_bytes: 64 << 20,
            },
            Some(&LowestFirst),
        );
        t.process(100, "db-big", "0-7", None);
        t.procs.set_memory(100, &[(0, 1 << 28), (1, 15 << 28)]);
        t.ev(Input::RulesChanged(plan.clone()));
        assert_eq!(t.ops.mask(100), Some(set("4-5")));
        let why = t.mgr.explain(100);
        assert!(
            why.contains("plan place: node 1 chosen: holds 94% of its 4.0 GiB"),
            "{why}"
        );
        // A process too small to weigh changes nothing: the best-fit choice.
        let (mut t, plan) = rig(DB);
        let plan = plan.with_memory(
            MemoryPlanning {
                nodes: vec![(0, set("0-3")), (1, set("4-7"))],
                tolerance: 0.1,
                min_bytes: 64 << 20,
            },
            Some(&LowestFirst),
        );
        t.process(200, "db-small", "0-7", None);
        t.procs.set_memory(200, &[(1, 1 << 20)]);
        t.ev(Input::RulesChanged(plan));
        assert_eq!(t.ops.mask(200), Some(set("0-1")));
        assert!(!t.mgr.explain(200).contains("chosen:"));
    }
}
