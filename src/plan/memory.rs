//! Memory weighs in a `count` unit's choice: prefer the node holding most of the memory
//! of the processes it places, when CPUs there cost no more than a tolerance over the
//! best CPUs elsewhere. Pure: the memory per node comes in with the [`super::Cpusets`]
//! the manager hands over (read once per process, at first contact).

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;
use crate::memory::{Bytes, NodeBytes};
use crate::placement::Policy;
use crate::rules::{CpuTarget, PlacementRequest};

use super::{Choose, Chosen};

/// What planning needs to weigh memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPlanning {
    /// The NUMA nodes and their online CPUs; fewer than two: memory is not weighed.
    pub nodes: Vec<(u32, CpuSet)>,
    /// How much more (mean pair latency, as a fraction) CPUs near the memory may cost.
    pub tolerance: f64,
    /// Memory smaller than this is not weighed.
    pub min_bytes: u64,
}

impl MemoryPlanning {
    /// From the topology's nodes and the settings' `[memory]`.
    pub fn new(
        topology: &crate::topology::Topology,
        settings: &crate::settings::Settings,
    ) -> MemoryPlanning {
        MemoryPlanning {
            nodes: topology
                .nodes
                .iter()
                .map(|n| (n.id, n.cpus.clone()))
                .collect(),
            tolerance: settings.memory.tolerance.0,
            min_bytes: u64::from(settings.memory.min_size_mib) << 20,
        }
    }

    /// Whether memory can weigh at all: at least two nodes with CPUs.
    pub fn active(&self) -> bool {
        self.nodes.iter().filter(|(_, c)| !c.is_empty()).count() >= 2
    }

    /// The node ids.
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|(n, _)| *n).collect()
    }

    fn nodes_of(&self, cpus: &CpuSet) -> BTreeSet<u32> {
        self.nodes
            .iter()
            .filter(|(_, c)| !c.intersection(cpus).is_empty())
            .map(|(n, _)| *n)
            .collect()
    }
}

/// Whether memory may weigh in `req`'s choice: a compact count (spread wants its CPUs
/// apart, which one node would defeat; explicit CPUs are not chosen).
pub fn weighs(req: &PlacementRequest) -> bool {
    matches!(req.target, CpuTarget::Count(_)) && req.policy == Policy::Compact
}

/// `best` (chosen in `pool`), or CPUs on the node holding most of `memory` when they
/// cost at most `mp.tolerance` more; with the reason in words when memory weighed.
pub fn prefer_memory(
    place: &dyn Choose,
    req: &PlacementRequest,
    pool: &CpuSet,
    best: Chosen,
    memory: &NodeBytes,
    mp: &MemoryPlanning,
) -> (Chosen, Option<String>) {
    let total: u64 = memory.values().sum();
    if !mp.active() || total == 0 || !weighs(req) {
        return (best, None);
    }
    if total < mp.min_bytes {
        return (
            best,
            Some(format!(
                "memory: its {} is below memory.min-size-mib ({}): not weighed",
                Bytes(total),
                Bytes(mp.min_bytes)
            )),
        );
    }
    let pct = |b: u64| (b as f64 * 100.0 / total as f64).round();
    let on = |nodes: &BTreeSet<u32>| -> u64 {
        nodes
            .iter()
            .map(|n| memory.get(n).copied().unwrap_or(0))
            .sum()
    };
    let best_nodes = mp.nodes_of(&best.cpus);
    let best_mem = on(&best_nodes);
    let mut ranked: Vec<(u32, u64)> = memory
        .iter()
        .filter(|(_, b)| **b > 0)
        .map(|(n, b)| (*n, *b))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (node, bytes) in ranked {
        if bytes <= best_mem {
            break; // the best choice already sits with at least this much
        }
        let Some((_, node_cpus)) = mp.nodes.iter().find(|(n, _)| *n == node) else {
            continue;
        };
        let sub = pool.intersection(node_cpus);
        let Ok(cand) = place.choose(req, &sub) else {
            continue; // the node cannot hold the request
        };
        let (cb, cc) = (place.cost(&best.cpus), place.cost(&cand.cpus));
        let more = match (cb, cc) {
            (Some(b), Some(c)) if b > 0.0 => Some(c / b - 1.0),
            _ => None,
        };
        let why = format!(
            "node {node} chosen: holds {}% of its {}",
            pct(bytes),
            Bytes(total)
        );
        return match more {
            Some(m) if m > mp.tolerance + 1e-9 => {
                let kept = best.cpus.clone();
                (
                    best,
                    Some(format!(
                        "memory: node {node} holds {}% of its {}, but CPUs there cost {:.0}% more than {kept} (memory.tolerance {:.0}%): CPUs {kept} kept",
                        pct(bytes),
                        Bytes(total),
                        m * 100.0,
                        mp.tolerance * 100.0
                    )),
                )
            }
            Some(m) if m > 0.0 => (
                cand,
                Some(format!(
                    "{why} (its CPUs cost {:.0}% more than {} elsewhere, within memory.tolerance {:.0}%)",
                    m * 100.0,
                    best.cpus,
                    mp.tolerance * 100.0
                )),
            ),
            _ => (cand, Some(why)),
        };
    }
    if best_mem == 0 {
        return (
            best,
            Some(format!(
                "memory: no node holding its {} has room for the request here; chosen by latency alone",
                Bytes(total)
            )),
        );
    }
    let words = match best_nodes.len() {
        1 => format!("node {}", best_nodes.first().copied().unwrap_or(0)),
        _ => format!("nodes {}", crate::memory::policy::node_list(&best_nodes)),
    };
    let verb = if best_nodes.len() == 1 {
        "holds"
    } else {
        "hold"
    };
    (
        best,
        Some(format!(
            "{words} chosen: {verb} {}% of its {}",
            pct(best_mem),
            Bytes(total)
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::Domains;
    use crate::matrix::LatencyMatrix;
    use crate::plan::{Cpus, Cpusets, Plan, PlanState};
    use crate::rules::{compile_text, LoadPolicy, RuleSet};

    use crate::cpuset::set;

    /// Two nodes, 0-3 and 4-7: `inner0` ns between CPUs of node 0, `inner1` of node 1,
    /// 120 ns across.
    fn two_nodes(inner0: f64, inner1: f64) -> Domains {
        let m = LatencyMatrix::from_fn((0..8).collect(), |i, j| match (i / 4, j / 4) {
            (0, 0) => inner0,
            (1, 1) => inner1,
            _ => 120.0,
        });
        Domains::from_matrix(&m).expect("domains")
    }

    fn mp(tolerance: f64) -> MemoryPlanning {
        MemoryPlanning {
            nodes: vec![(0, set("0-3")), (1, set("4-7"))],
            tolerance,
            min_bytes: 64 << 20,
        }
    }

    fn rule(extra: &str) -> RuleSet {
        let text = format!(
            "[[rule]]\nname = \"db\"\n[rule.match]\ncomm = \"db\"\n[rule.place]\ncount = 2\n{extra}"
        );
        let r = compile_text(
            std::path::Path::new("t.toml"),
            &text,
            &LoadPolicy::unchecked(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        RuleSet::new(r)
    }

    /// The plan of `rules` with the rule's process holding `bytes` per node.
    fn plan(rules: &RuleSet, d: Domains, bytes: &[(u32, u64)], m: MemoryPlanning) -> Plan {
        let cpus = Cpus {
            online: set("0-7"),
            reserved: CpuSet::new(),
        };
        let mut cs = Cpusets::default();
        cs.add_memory("db", None, &bytes.iter().copied().collect());
        let d: &dyn Choose = &d;
        Plan::new(rules, &cpus, Some(d))
            .with_memory(m, Some(d))
            .in_cpusets(&cs, Some(d))
    }

    fn placed(p: &Plan) -> (CpuSet, Option<String>) {
        let u = &p.units()[0];
        match &u.state {
            PlanState::Placed { cpus } => (cpus.clone(), u.memory.clone()),
            other => panic!("{other:?}"),
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn equal_nodes_go_where_the_memory_is() {
        let r = rule("");
        // Without memory the best-fit tie-break takes node 0.
        let none = plan(&r, two_nodes(20.0, 20.0), &[], mp(0.1));
        assert_eq!(placed(&none), (set("0-1"), None));
        let (cpus, why) = placed(&plan(
            &r,
            two_nodes(20.0, 20.0),
            &[(0, 100 << 20), (1, 924 << 20)],
            mp(0.1),
        ));
        assert_eq!(cpus, set("4-5"));
        assert_eq!(
            why.as_deref(),
            Some("node 1 chosen: holds 90% of its 1.0 GiB")
        );
        // Memory on node 0: node 0, and the reason says so too.
        let (cpus, why) = placed(&plan(
            &r,
            two_nodes(20.0, 20.0),
            &[(0, 3 * GIB), (1, GIB / 10)],
            mp(0.1),
        ));
        assert_eq!(cpus, set("0-1"));
        assert_eq!(
            why.as_deref(),
            Some("node 0 chosen: holds 97% of its 3.1 GiB")
        );
    }

    #[test]
    fn memory_weighs_only_within_the_tolerance() {
        let r = rule("");
        let mem = [(1, 2 * GIB)];
        // Node 1's pairs cost 5% more: within 10%, memory wins and says the price.
        let (cpus, why) = placed(&plan(&r, two_nodes(20.0, 21.0), &mem, mp(0.1)));
        assert_eq!(cpus, set("4-5"));
        let why = why.unwrap();
        assert!(why.starts_with("node 1 chosen: holds 100% of its 2.0 GiB (its CPUs cost 5% more than 0-1 elsewhere"), "{why}");
        // 30% more: the better CPUs are kept, and the reason says why.
        let (cpus, why) = placed(&plan(&r, two_nodes(20.0, 26.0), &mem, mp(0.1)));
        assert_eq!(cpus, set("0-1"));
        assert_eq!(
            why.as_deref(),
            Some("memory: node 1 holds 100% of its 2.0 GiB, but CPUs there cost 30% more than 0-1 (memory.tolerance 10%): CPUs 0-1 kept")
        );
        // A wider tolerance lets memory win again.
        let (cpus, _) = placed(&plan(&r, two_nodes(20.0, 26.0), &mem, mp(0.5)));
        assert_eq!(cpus, set("4-5"));
    }

    #[test]
    fn small_memory_spread_and_one_node_are_not_weighed() {
        let (cpus, why) = placed(&plan(
            &rule(""),
            two_nodes(20.0, 20.0),
            &[(1, 1 << 20)],
            mp(0.1),
        ));
        assert_eq!(cpus, set("0-1"));
        assert!(why
            .unwrap()
            .contains("below memory.min-size-mib (64.0 MiB)"));
        let (_, why) = placed(&plan(
            &rule("policy = \"spread\"\n"),
            two_nodes(20.0, 20.0),
            &[(1, GIB)],
            mp(0.1),
        ));
        assert_eq!(why, None);
        let one = MemoryPlanning {
            nodes: vec![(0, set("0-7"))],
            ..mp(0.1)
        };
        let (cpus, why) = placed(&plan(&rule(""), two_nodes(20.0, 20.0), &[(0, GIB)], one));
        assert_eq!((cpus, why), (set("0-1"), None));
    }

    #[test]
    fn a_node_too_small_for_the_request_is_passed_over() {
        let r = rule("");
        let m = MemoryPlanning {
            nodes: vec![(0, set("0-5")), (1, set("6")), (2, set("7"))],
            ..mp(0.1)
        };
        let (cpus, why) = placed(&plan(
            &r,
            two_nodes(20.0, 20.0),
            &[(1, GIB), (2, GIB / 2)],
            m,
        ));
        assert_eq!(cpus, set("0-1"), "no node of the memory holds 2 CPUs");
        assert_eq!(
            why.as_deref(),
            Some("memory: no node holding its 1.5 GiB has room for the request here; chosen by latency alone")
        );
    }
}
