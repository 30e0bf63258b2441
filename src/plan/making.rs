//! The plan of the rules in force, made one way for the daemon (`daemon::state`) and
//! for its dry run (`pinnerd plan --live`), so both show the same plan.
//!
//! Must not touch: the machine. The callers read it (topology, stored matrix, devices,
//! the sched_ext state, through the same sysfs root) and hand the values in, assembled
//! into [`PlanInputs`] in one place (`rules_plan`, above `shape`); what the
//! sched_ext step found comes back as a value for the caller to log or print.
//!
//! ```text
//!   rules + Cpus + chooser ─► Plan::new ─► with_memory (nodes, [memory]) ─┐
//!   sched_ext scheduler running + [sched-ext] + groups ─► under_sched_ext ◄┘ ─► Planned
//! ```
//!
//! One-off requests (`plan --count`, `report`, `compare`, `PlanWith`, `plan --pid`) are
//! not made here: they place one request on the domains, not the rules.

use crate::cpuset::CpuSet;
use crate::rules::RuleSet;
use crate::sched_ext::{self, Policy, SchedExt, WidenTo};
use crate::settings::SchedExtSettings;
use crate::topology::Topology;

use super::{Choose, Cpus, MemoryPlanning, Plan, PlanState, SharedChoose};

/// What the plan of the rules is made from.
pub struct PlanInputs<'a> {
    /// The rules in force.
    pub rules: &'a RuleSet,
    /// Online CPUs, and the housekeeping CPUs kept free ([`Cpus::from_settings`]).
    pub cpus: Cpus,
    /// The shaper on the latency domains, the domains alone, or none before any
    /// domains exist (`shape::chooser`).
    pub choose: Option<SharedChoose>,
    /// The NUMA nodes and `[memory]`; `None` before the topology was read.
    pub memory: Option<MemoryPlanning>,
    /// The sched_ext scheduler running and what to do about it; `None` when none runs.
    pub sched_ext: Option<UnderSchedExt>,
}

/// A sched_ext scheduler that runs, and what the `[sched-ext]` policy does to the plan
/// while it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderSchedExt {
    pub scheduler: SchedExt,
    pub policy: Policy,
    /// The groups `widen` rounds masks up to (`widen-to`).
    pub widen_to: Vec<CpuSet>,
    /// The NUMA nodes `warn` tells partial masks by.
    pub nodes: Vec<CpuSet>,
}

impl UnderSchedExt {
    /// From what [`sched_ext::read`] says runs, the settings' `[sched-ext]` and the
    /// topology's groups; `None` when no scheduler runs or the topology is unknown (the
    /// plan is then made as if none ran).
    pub fn new(
        running: Option<SchedExt>,
        settings: &SchedExtSettings,
        topology: Option<&Topology>,
    ) -> Option<UnderSchedExt> {
        let (scheduler, t) = (running?, topology?);
        Some(UnderSchedExt {
            scheduler,
            policy: settings.policy,
            widen_to: sched_ext::groups(t, settings.widen_to),
            nodes: sched_ext::groups(t, WidenTo::Node),
        })
    }
}

/// What the sched_ext step did to the plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SchedExtStep {
    /// No scheduler runs: the plan as chosen.
    #[default]
    NoScheduler,
    /// `warn`: the plan as chosen; these rules pin partial masks (a unit's CPUs, or
    /// the first partial slot), in plan order.
    Warned(Vec<(String, CpuSet)>),
    /// `widen`: every mask rounded up to whole groups.
    Widened,
    /// `pause`: no rules until the scheduler stops.
    Paused,
}

/// A plan of the rules and the chooser it was made with: the daemon keeps the chooser
/// of the plan in force to make it again for what the manager reports (see
/// `daemon::replan`), and the dry run does the same once.
pub struct Planned {
    pub plan: Plan,
    pub choose: Option<SharedChoose>,
    /// What the sched_ext step did, for the caller to say.
    pub sched_ext: SchedExtStep,
}

/// The plan of `inputs.rules`: chosen on the CPUs with the chooser, memory weighed
/// when the nodes are known, then the `[sched-ext]` policy applied while a scheduler
/// runs.
pub fn make(inputs: PlanInputs<'_>) -> Planned {
    let choose = inputs.choose;
    let c = choose.as_deref().map(|c| c as &dyn Choose);
    let mut plan = Plan::new(inputs.rules, &inputs.cpus, c);
    if let Some(memory) = inputs.memory {
        plan = plan.with_memory(memory, c);
    }
    let (plan, sched_ext) = match &inputs.sched_ext {
        None => (plan, SchedExtStep::NoScheduler),
        Some(under) => under_sched_ext(plan, under, c),
    };
    Planned {
        plan,
        choose,
        sched_ext,
    }
}

/// `plan` as the `[sched-ext]` policy wants it while a scheduler runs: as it is
/// (`warn`, naming the rules that pin a partial mask), every mask rounded up to whole
/// groups (`widen`), or without rules, so every rule's tasks get their masks back until
/// the scheduler stops (`pause`; run-time pins stay).
pub fn under_sched_ext(
    plan: Plan,
    under: &UnderSchedExt,
    choose: Option<&dyn Choose>,
) -> (Plan, SchedExtStep) {
    match under.policy {
        Policy::Pause => (Plan::empty(plan.cpus().clone()), SchedExtStep::Paused),
        Policy::Widen => (
            plan.widened(under.widen_to.clone(), choose),
            SchedExtStep::Widened,
        ),
        Policy::Warn => {
            let online = &plan.cpus().online;
            let partial = |c: &CpuSet| sched_ext::is_partial(c, &under.nodes, online);
            let found = plan
                .units()
                .iter()
                .filter_map(|u| {
                    let cpus = match &u.state {
                        PlanState::Placed { cpus } => partial(cpus).then(|| cpus.clone()),
                        PlanState::Slots { slots, .. } => {
                            slots.iter().find(|c| partial(c)).cloned()
                        }
                        _ => None,
                    }?;
                    Some((u.rule.clone(), cpus))
                })
                .collect();
            (plan, SchedExtStep::Warned(found))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cpuset::set;
    use crate::domains::Domains;
    use crate::rules::{LoadPolicy, RuleSet};

    fn ryzen() -> Topology {
        let root = crate::sysroot::SysRoot::with_sys(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs/ryzen-2700x/sys"),
        );
        Topology::discover(&root).unwrap()
    }

    fn rules(text: &str) -> RuleSet {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("r.toml"), text).unwrap();
        let report = crate::rules::load_dirs(&[d.path().to_path_buf()], &LoadPolicy::unchecked());
        assert!(report.errors.is_empty(), "{:?}", report.error_strings());
        report.rules
    }

    const TWO: &str = "[[rule]]\nname = \"scx\"\n[rule.match]\ncomm = \"pd-no-such\"\n[rule.place]\ncount = 2\nsmt = \"avoid\"\n";

    fn layered() -> SchedExt {
        SchedExt {
            state: "enabled".into(),
            ops: "layered".into(),
        }
    }

    /// The plan of [`TWO`] on the Ryzen fixture's topology with `policy`, and a
    /// scheduler running or not.
    fn planned(running: Option<SchedExt>, policy: Policy, widen_to: WidenTo) -> Planned {
        let t = ryzen();
        let rules = rules(TWO);
        let settings = SchedExtSettings { policy, widen_to };
        make(PlanInputs {
            rules: &rules,
            cpus: Cpus {
                online: t.online.clone(),
                reserved: CpuSet::new(),
            },
            choose: Some(Arc::new(Domains::from_topology(&t).unwrap())),
            memory: Some(MemoryPlanning::default()),
            sched_ext: UnderSchedExt::new(running, &settings, Some(&t)),
        })
    }

    fn placed(p: &Planned) -> Option<CpuSet> {
        match p.plan.get("scx", None) {
            Some(PlanState::Placed { cpus }) => Some(cpus.clone()),
            _ => None,
        }
    }

    #[test]
    fn the_sched_ext_step_applies_the_policy_while_a_scheduler_runs() {
        let chosen = planned(None, Policy::Widen, WidenTo::Llc);
        assert_eq!(chosen.sched_ext, SchedExtStep::NoScheduler);
        let two = placed(&chosen).unwrap();
        assert_eq!(two.len(), 2, "{two}");

        let widened = planned(Some(layered()), Policy::Widen, WidenTo::Llc);
        assert_eq!(widened.sched_ext, SchedExtStep::Widened);
        let llc = placed(&widened).unwrap();
        assert!(
            llc == set("0-3,8-11") || llc == set("4-7,12-15"),
            "not one whole LLC group: {llc}"
        );
        assert!(two.is_subset(&llc), "{two} rounded up to {llc}");
        let node = planned(Some(layered()), Policy::Widen, WidenTo::Node);
        assert_eq!(placed(&node), Some(set("0-15")));

        let paused = planned(Some(layered()), Policy::Pause, WidenTo::Llc);
        assert_eq!(paused.sched_ext, SchedExtStep::Paused);
        assert!(paused.plan.units().is_empty());
        assert_eq!(paused.plan.cpus(), chosen.plan.cpus());

        let warned = planned(Some(layered()), Policy::Warn, WidenTo::Llc);
        assert_eq!(
            warned.sched_ext,
            SchedExtStep::Warned(vec![("scx".into(), two.clone())])
        );
        assert_eq!(placed(&warned), Some(two), "warn pins as chosen");
    }

    #[test]
    fn without_a_topology_the_scheduler_changes_nothing() {
        let settings = SchedExtSettings {
            policy: Policy::Pause,
            widen_to: WidenTo::Llc,
        };
        assert_eq!(UnderSchedExt::new(Some(layered()), &settings, None), None);
        assert_eq!(UnderSchedExt::new(None, &settings, Some(&ryzen())), None);
    }
}
