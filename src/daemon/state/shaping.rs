//! `core-type`, `prefer` and `near` in the daemon: each plan gets the topology's facts
//! and the rules' devices, resolved through the sysfs root when it is made, and hands
//! them as values to the pure `shape` module. Split from `state/mod.rs`; same state, same
//! loop.

use std::sync::Arc;

use crate::devices;
use crate::plan::{Cpus, Plan, SharedChoose};

/// A plan and the chooser it was made with: the daemon keeps the chooser of the plan in
/// force to make it again for what the manager reports (see `daemon::replan`).
pub(super) struct Planned {
    pub plan: Plan,
    pub choose: Option<SharedChoose>,
}
use crate::shape::{self, Devices, Facts, OwnedShaper};

use super::State;

impl State {
    /// The topology's facts (none before the first read) and every device a rule, or
    /// `extra`, is near.
    pub(super) fn shaping_inputs(&self, extra: Option<&str>) -> (Option<Facts>, Devices) {
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

    /// The plan of the rules in force, with the machine's facts when it has them, and
    /// the chooser it was made with.
    pub(super) fn shaped_plan(&mut self, cpus: &Cpus) -> Planned {
        let (facts, devices) = self.shaping_inputs(None);
        let choose: Option<SharedChoose> = match (&self.domains, facts) {
            (Some(domains), Some(facts)) => Some(Arc::new(OwnedShaper {
                domains: domains.clone(),
                facts,
                devices,
            })),
            (domains, _) => domains.clone().map(|d| Arc::new(d) as SharedChoose),
        };
        Planned {
            plan: Plan::new(&self.rules.rules, cpus, choose.as_deref().map(|c| c as _)),
            choose,
        }
    }
}
