//! `core-type`, `prefer` and `near` in the daemon: each plan gets the topology's facts
//! and the rules' devices, resolved through the sysfs root when it is made, and hands
//! them as values to the pure `shape` module. Split from `state.rs`; same state, same
//! loop.

use std::sync::Arc;

use crate::api::{CommandError, Reply};
use crate::devices;
use crate::placement::{Policy, SmtPolicy};
use crate::plan::{Cpus, Plan, SharedChoose};
use crate::rules::{CpuTarget, PlacementRequest};
use crate::shape::{self, Devices, Facts, OwnedShaper, Shape, Shaper};

use super::State;

impl State {
    /// The topology's facts (none before the first read) and every device a rule, or
    /// `extra`, is near.
    fn shaping_inputs(&self, extra: Option<&str>) -> (Option<Facts>, Devices) {
        let facts = self.topology.as_ref().map(Facts::from_topology);
        let mut names = shape::near_names(&self.rules.rules);
        names.extend(extra);
        names.sort_unstable();
        names.dedup();
        let devices = devices::resolve_all(&self.cfg.sysroot, names);
        for (name, loc) in &devices {
            match loc {
                Ok(l) if l.node.is_none() => {
                    tracing::warn!(device = %name, path = %l.path, "near: the device reports no NUMA node; not restricted")
                }
                Ok(_) => {}
                Err(why) => tracing::warn!(device = %name, %why, "near: device not found"),
            }
        }
        (facts, devices)
    }

    /// The plan of the rules in force, with the machine's facts when it has them. The
    /// plan keeps its chooser so that the manager can plan again in the processes'
    /// cgroup cpusets.
    pub(super) fn shaped_plan(&mut self, cpus: &Cpus) -> Plan {
        let (facts, devices) = self.shaping_inputs(None);
        let choose: Option<SharedChoose> = match (&self.domains, facts) {
            (Some(domains), Some(facts)) => Some(Arc::new(OwnedShaper {
                domains: domains.clone(),
                facts,
                devices,
            })),
            (domains, _) => domains.clone().map(|d| Arc::new(d) as SharedChoose),
        };
        Plan::shared(&self.rules.rules, cpus, choose)
    }

    fn checked_near(shape: &Shape) -> Result<(), CommandError> {
        match &shape.near {
            Some(n) => devices::check_name(n)
                .map_err(|why| CommandError::InvalidArgs(format!("near {n:?}: {why}"))),
            None => Ok(()),
        }
    }

    /// `PlanWith`: placement advice shaped by the machine's facts; changes nothing.
    pub(super) fn plan_shaped(
        &mut self,
        count: u32,
        policy: Policy,
        smt: SmtPolicy,
        shape: Shape,
    ) -> Result<Reply, CommandError> {
        Self::checked_near(&shape)?;
        let req = self.request(count, policy, smt)?;
        let usable = self.usable();
        self.domains()?;
        let (facts, devices) = self.shaping_inputs(shape.near.as_deref());
        let facts = facts.ok_or(CommandError::Starting)?;
        let d = self.domains.as_ref().ok_or(CommandError::Starting)?;
        let (p, shaped) = shape::place_shaped(d, &facts, &devices, &req, &shape, &usable)?;
        for w in &shaped.warnings {
            tracing::warn!(warning = %w, "PlanWith");
        }
        Ok(Reply::Cpus(p.cpus))
    }

    /// `PinProcessWith`: pins every thread of a process on CPUs shaped by the facts.
    pub(super) fn pin_shaped(
        &mut self,
        pid: u32,
        count: u32,
        policy: Policy,
        smt: SmtPolicy,
        shape: Shape,
    ) -> Result<Reply, CommandError> {
        Self::checked_near(&shape)?;
        let req = self.request(count, policy, smt)?;
        let request = PlacementRequest {
            target: CpuTarget::Count(count),
            within: None,
            policy: req.policy,
            smt: req.smt,
            exclusive: false,
            shape,
        };
        let pid_i = i32::try_from(pid).map_err(|_| CommandError::NoSuchProcess(pid))?;
        self.domains()?;
        let (facts, devices) = self.shaping_inputs(request.shape.near.as_deref());
        let facts = facts.ok_or(CommandError::Starting)?;
        let domains = self.domains.as_ref().ok_or(CommandError::Starting)?;
        let shaper = Shaper {
            domains,
            facts: &facts,
            devices: &devices,
        };
        let m = self.manager.as_mut().ok_or(CommandError::Starting)?;
        let cpus = m
            .plan()
            .pin(&request, Some(&shaper))
            .map_err(|source| CommandError::Pin { pid, source })?;
        match m.pin(pid_i, &cpus) {
            Ok(changes) => {
                tracing::info!(pid, %cpus, shape = %request.shape.describe(), "pinned at run time");
                self.after_manager(changes);
                Ok(Reply::Cpus(cpus))
            }
            Err(e) => Err(CommandError::from_manager(pid, e)),
        }
    }
}
