//! `core-type`, `prefer` and `near` in the daemon: each plan gets the topology's facts
//! and the rules' devices, resolved through the sysfs root when it is made, and hands
//! them as values to the pure `shape` module (through `rules_plan` for the rules).
//! Imports nothing of the state: it is handed the topology, the rules and the root.

use crate::devices;
use crate::rules::RuleSet;
use crate::shape::{self, Devices, Facts};
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// The facts of `topology` (none before the first read) and every device a rule of
/// `rules`, or `extra`, is near, resolved through `root`; a device not found, or
/// without a NUMA node, is logged.
pub(super) fn inputs(
    topology: Option<&Topology>,
    rules: &RuleSet,
    root: &SysRoot,
    extra: Option<&str>,
) -> (Option<Facts>, Devices) {
    let facts = topology.map(Facts::from_topology);
    let mut names = shape::near_names(rules);
    names.extend(extra);
    names.sort_unstable();
    names.dedup();
    let devices = devices::resolve_all(root, names);
    for (name, loc) in &devices {
        match loc {
            Ok(l) if l.node.is_none() => {
                tracing::warn!(device = %name, path = %l.path, "near: device {name} ({}) reports no NUMA node; not restricted", l.path)
            }
            Ok(_) => {}
            Err(why) => {
                tracing::warn!(device = %name, %why, "near: device {name} not found: {why}")
            }
        }
    }
    (facts, devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_a_rule_or_the_request_is_near_is_resolved_once_through_the_root() {
        let root = SysRoot::machine(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs/xeon-2s-nic-nvme"),
        );
        let topology = Topology::discover(&root).unwrap();
        let rules = crate::plan::tests::rules(
            "[[rule]]\nname = \"nic\"\n[rule.match]\ncomm = \"feed\"\n[rule.place]\ncount = 2\nnear = \"ens1f0\"\n\
             [[rule]]\nname = \"again\"\n[rule.match]\ncomm = \"feed2\"\n[rule.place]\ncount = 1\nnear = \"ens1f0\"\n",
        );
        let (facts, devices) = inputs(Some(&topology), &rules, &root, Some("no-such-dev0"));
        assert!(facts.is_some());
        assert_eq!(
            devices.keys().map(String::as_str).collect::<Vec<_>>(),
            vec!["ens1f0", "no-such-dev0"]
        );
        assert_eq!(devices["ens1f0"].as_ref().unwrap().node, Some(1));
        assert!(devices["no-such-dev0"].is_err());
        // Before the topology is read: no facts, the devices all the same.
        let (facts, devices) = inputs(None, &rules, &root, None);
        assert!(facts.is_none());
        assert_eq!(devices.len(), 1);
    }
}
