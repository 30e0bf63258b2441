//! `core-type`, `prefer` and `near` in the daemon: each plan gets the topology's facts
//! and the rules' devices, resolved through the sysfs root when it is made, and hands
//! them as values to the pure `shape` module (through `plan::making` for the rules).
//! Split from `state/mod.rs`; same state, same loop.

use crate::devices;
use crate::shape::{self, Devices, Facts};

use super::State;

impl State {
    /// The topology's facts (none before the first read) and every device a rule, or
    /// `extra`, is near.
    pub(super) fn shaping_inputs(&self, extra: Option<&str>) -> (Option<Facts>, Devices) {
        let facts = self.machine.topology.as_ref().map(Facts::from_topology);
        let mut names = shape::near_names(&self.loaded.rules.rules);
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
}
