//! The rules' plan made from what was read of one machine, in one place for the daemon
//! (`daemon::state`) and its dry run (`pinnerd plan --live`): the CPUs it plans for
//! (online, the housekeeping CPUs kept free), the chooser (the latency domains shaped by
//! the topology's facts and the rules' devices), memory weighed by `[memory]` on the
//! topology's nodes and the `[sched-ext]` policy while a scheduler runs. `plan::making`
//! makes the plan; this module only assembles its inputs, which `plan` cannot (`shape`
//! builds the chooser and depends on `plan`).
//!
//! ```text
//!   rules + Settings + MachineRead (topology, online, domains, devices, sched_ext)
//!     ─► PlanInputs (Cpus, shape::chooser, MemoryPlanning, UnderSchedExt) ─► making::make
//! ```
//!
//! Must not touch: the machine. The callers read it (through the same sysfs root) and
//! hand the values in; they say what the sched_ext step did (`Planned::sched_ext`).

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::plan::making::{self, PlanInputs, Planned, UnderSchedExt};
use crate::plan::{Cpus, MemoryPlanning};
use crate::rules::RuleSet;
use crate::sched_ext::SchedExt;
use crate::settings::Settings;
use crate::shape::{self, Devices, Facts};
use crate::topology::Topology;

/// What was read of the machine the rules' plan is made for.
pub struct MachineRead<'a> {
    /// Its topology; `None` before the first read (no facts, no memory weighed, the
    /// plan made as if no sched_ext scheduler ran).
    pub topology: Option<&'a Topology>,
    /// The CPUs online now.
    pub online: CpuSet,
    /// The latency domains in use; `None` before any exist.
    pub domains: Option<Domains>,
    /// Every device a rule is near, resolved through the sysfs root.
    pub devices: Devices,
    /// The sched_ext scheduler that runs, if one does (`sched_ext::read`).
    pub sched_ext: Option<SchedExt>,
}

/// The plan of `rules` on `machine` with `settings`: [`inputs`] made by
/// [`making::make`].
pub fn make(rules: &RuleSet, settings: &Settings, machine: MachineRead<'_>) -> Planned {
    making::make(inputs(rules, settings, machine))
}

/// What the plan of `rules` on `machine` with `settings` is made from.
pub fn inputs<'a>(
    rules: &'a RuleSet,
    settings: &Settings,
    machine: MachineRead<'_>,
) -> PlanInputs<'a> {
    let topology = machine.topology;
    PlanInputs {
        rules,
        cpus: Cpus::from_settings(machine.online, settings),
        choose: shape::chooser(
            machine.domains,
            topology.map(Facts::from_topology),
            machine.devices,
        ),
        memory: topology.map(|t| MemoryPlanning::new(t, settings)),
        sched_ext: UnderSchedExt::new(machine.sched_ext, &settings.sched_ext, topology),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;
    use crate::sysroot::SysRoot;

    fn machine(name: &str) -> Topology {
        let root = SysRoot::machine(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(name),
        );
        Topology::discover(&root).unwrap()
    }

    /// The settings' housekeeping CPUs are kept free of the online ones, the topology
    /// gives the chooser its facts and memory its nodes, and a running sched_ext
    /// scheduler is weighed only where the topology is known.
    #[test]
    fn inputs_come_from_the_settings_and_what_was_read() {
        let t = machine("xeon-2s-nic-nvme");
        let rules = crate::plan::tests::rules(
            "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"a\"\n[rule.place]\ncount = 2\n",
        );
        let mut settings = Settings::default();
        settings.placement.housekeeping_cpus = set("0");
        let running = SchedExt {
            state: "enabled".into(),
            ops: "layered".into(),
        };
        let read = |known: bool| MachineRead {
            topology: known.then_some(&t),
            online: t.online.clone(),
            domains: Some(Domains::from_topology(&t).unwrap()),
            devices: Devices::new(),
            sched_ext: Some(running.clone()),
        };
        let i = inputs(&rules, &settings, read(true));
        assert_eq!(i.cpus.online, t.online);
        assert_eq!(i.cpus.reserved, set("0"));
        assert!(i.choose.is_some());
        assert_eq!(
            i.memory.map(|m| m.node_ids()),
            Some(t.nodes.iter().map(|n| n.id).collect())
        );
        assert_eq!(i.sched_ext.map(|s| s.scheduler), Some(running.clone()));
        // Before the topology is read: the domains alone, no memory, no sched_ext step.
        let i = inputs(&rules, &settings, read(false));
        assert!(i.choose.is_some());
        assert!(i.memory.is_none() && i.sched_ext.is_none());
        // The plan made of them, on the CPUs left.
        let planned = make(&rules, &settings, read(true));
        assert!(!planned.plan.units()[0].state.held().contains(0));
    }
}
