//! Containers the runtime told the daemon about over NRI: whether the daemon is
//! registered and with which runtime, each container's rule and cpuset and how it got
//! it, and the updates sent when the plan changes.
//!
//! ```text
//! Ask::Place ──► decide (plan + topology) ──► Decision (oneshot) ─► plugin task
//! plan in force changed ──► replanned ──► Vec<Update> ──► plugin task ──► UpdateContainers
//!   (a new plan handed down, or the manager's made again for what it saw)
//! ```
//!
//! Owns: the container records and the update channel. Must not touch: the socket, the
//! plan's making (it reads the plan it is given).

use std::collections::BTreeMap;

use tokio::sync::mpsc;

use crate::api::ContainerView;
use crate::cpuset::CpuSet;
use crate::nri::link::{Ask, ContainerFacts, Decision, Moment, Update};
use crate::plan::{Plan, PlanState};
use crate::rules::ContainerInfo;
use crate::topology::Topology;

/// Containers known, and the runtime.
#[derive(Debug, Default)]
pub struct Containers {
    /// `registered with containerd 1.7.24`, `not connected (no socket at …)`, or "" when
    /// NRI is off.
    pub runtime: String,
    known: BTreeMap<String, Known>,
    /// Every container the runtime told about, named or not: for the processes the
    /// watcher finds in their cgroups.
    seen: BTreeMap<String, ContainerInfo>,
    /// A container whose processes may already run became known: look at /proc again.
    rescan: bool,
    updates: Option<mpsc::Sender<Vec<Update>>>,
    /// Adjustments and updates made, and containers a rule named that got none.
    pub adjusted: u64,
    pub skipped: u64,
}

#[derive(Debug, Clone)]
struct Known {
    facts: ContainerFacts,
    cpus: Option<CpuSet>,
    /// How it got its cpuset, or why it has none.
    how: String,
    /// The cpuset and its words before the last update sent, while the runtime may
    /// still refuse it.
    before: Option<(CpuSet, String)>,
    /// CPUs the runtime did not move it to: not sent again until the plan changes them.
    refused: Option<CpuSet>,
}

impl Known {
    fn view(&self) -> ContainerView {
        ContainerView {
            id: self.facts.id.clone(),
            name: self.facts.name.clone(),
            pod: self.facts.pod.name.clone(),
            namespace: self.facts.pod.namespace.clone(),
            cpuset: self.cpus.as_ref().map(ToString::to_string),
            how: self.how.clone(),
        }
    }
}

/// The rule matcher's view of a container.
pub fn info(c: &ContainerFacts) -> ContainerInfo {
    ContainerInfo {
        name: c.name.clone(),
        pod: c.pod.name.clone(),
        namespace: c.pod.namespace.clone(),
        labels: Some(c.pod.labels.clone()),
    }
}

impl Containers {
    /// Where updates go (the plugin task); none without NRI.
    pub fn connect(&mut self, updates: mpsc::Sender<Vec<Update>>) {
        self.updates = Some(updates);
        self.runtime = "not connected (starting)".into();
    }

    /// One question or piece of news from the plugin.
    pub fn hear(&mut self, ask: Ask, plan: Option<&Plan>, topology: Option<&Topology>) {
        match ask {
            Ask::Place {
                container,
                moment,
                reply,
            } => {
                self.saw(&container, moment == Moment::Synchronize);
                let decision = self.decide(&container, moment, plan, topology);
                let _ = reply.send(decision);
            }
            Ask::Unanswered { container, reason } => {
                self.skipped += 1;
                self.record(container, None, format!("no cpuset from pinnerd: {reason}"));
            }
            Ask::Started { container } => {
                self.saw(&container, true);
                if let Some(k) = self.known.get_mut(&container.id) {
                    k.facts.pid = container.pid.or(k.facts.pid);
                }
            }
            Ask::Gone { id } => {
                self.known.remove(&id);
                self.seen.remove(&id);
            }
            Ask::Registered { runtime, version } => {
                self.runtime = format!("registered with {runtime} {version}");
            }
            Ask::NotConnected { reason } => {
                self.runtime = format!("not connected ({reason})");
            }
            Ask::NotMoved { id, cpus, reason } => self.not_moved(&id, cpus, &reason),
        }
    }

    /// The runtime did not move container `id` to `cpus`: it keeps the cpuset it had,
    /// its line says why, and the same CPUs are not sent again.
    fn not_moved(&mut self, id: &str, cpus: CpuSet, reason: &str) {
        let Some(k) = self.known.get_mut(id) else {
            return;
        };
        if k.cpus.as_ref() != Some(&cpus) {
            return; // moved elsewhere since
        }
        self.adjusted = self.adjusted.saturating_sub(1);
        let (was, how) = k.before.take().unwrap_or_default();
        k.cpus = Some(was.clone());
        k.how =
            format!("{how}; the runtime did not move it to {cpus} when the plan changed: {reason}");
        k.refused = Some(cpus);
    }

    fn saw(&mut self, c: &ContainerFacts, may_run: bool) {
        if c.id.is_empty() {
            return;
        }
        let fresh = self.seen.insert(c.id.clone(), info(c)).is_none();
        self.rescan |= fresh && may_run;
    }

    /// Every container known (id, its facts for the matcher).
    pub fn seen(&self) -> Vec<(String, ContainerInfo)> {
        self.seen
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Whether /proc should be looked at again for a container's processes (once).
    pub fn take_rescan(&mut self) -> bool {
        std::mem::take(&mut self.rescan)
    }

    fn record(&mut self, facts: ContainerFacts, cpus: Option<CpuSet>, how: String) {
        let id = facts.id.clone();
        let k = Known {
            facts,
            cpus,
            how,
            before: None,
            refused: None,
        };
        self.known.insert(id, k);
    }

    /// The decision for `c`, recorded for the readers.
    pub fn decide(
        &mut self,
        c: &ContainerFacts,
        moment: Moment,
        plan: Option<&Plan>,
        topology: Option<&Topology>,
    ) -> Decision {
        let decision = choose(c, plan, topology);
        let when = match moment {
            Moment::Creation => "at creation",
            Moment::Synchronize => "when pinnerd registered (it ran before)",
            Moment::Update => "at the runtime's update",
        };
        match &decision {
            Decision::Place { cpus, rule, .. } => {
                self.adjusted += 1;
                let how = format!("cpuset {cpus} set {when} by pinnerd (rule {rule})");
                self.record(c.clone(), Some(cpus.clone()), how);
            }
            Decision::Undecided { reason, rule } => {
                self.skipped += 1;
                let how = format!("no cpuset from pinnerd (rule {rule}): {reason}");
                self.record(c.clone(), None, how);
            }
            Decision::NoRule => {}
        }
        decision
    }

    /// The plan in force may have changed (a new one handed down, or the manager's own
    /// made again for what it saw): every placed container whose CPUs changed is moved,
    /// and only those are counted and said. Cheap when nothing moved: one lookup per
    /// placed container, no update sent. A batch the plugin cannot take now is not
    /// recorded as moved, so the next change tries again.
    pub fn replanned(&mut self, plan: &Plan, topology: Option<&Topology>) {
        let Some(tx) = self.updates.clone() else {
            return;
        };
        let mut batch = Vec::new();
        for k in self.known.values() {
            let Some(was) = &k.cpus else { continue };
            if let Decision::Place { cpus, mems, .. } = choose(&k.facts, Some(plan), topology) {
                // A move the runtime did not make is not tried again for the same CPUs.
                if cpus != *was && k.refused.as_ref() != Some(&cpus) {
                    batch.push(Update {
                        id: k.facts.id.clone(),
                        cpus,
                        mems,
                        title: k.facts.title(),
                    });
                }
            }
        }
        if batch.is_empty() {
            return;
        }
        if tx.try_send(batch.clone()).is_err() {
            tracing::warn!("nri: the plugin is not taking updates now; containers keep their cpusets until the plan changes again");
            return;
        }
        for u in batch {
            let Some(k) = self.known.get_mut(&u.id) else {
                continue;
            };
            let was = k.cpus.replace(u.cpus.clone()).unwrap_or_default();
            k.before = Some((was.clone(), std::mem::take(&mut k.how)));
            k.refused = None;
            let rule = plan
                .rules()
                .match_container(&info(&k.facts))
                .map(|r| r.name.clone());
            k.how = format!(
                "cpuset {} set by pinnerd after the plan changed (was {was}; rule {})",
                u.cpus,
                rule.unwrap_or_default()
            );
            self.adjusted += 1;
        }
    }

    /// Every container a rule names, as readers see it.
    pub fn views(&self) -> Vec<ContainerView> {
        self.known.values().map(Known::view).collect()
    }

    /// The container `id`, if a rule names it.
    pub fn view(&self, id: &str) -> Option<ContainerView> {
        self.known.get(id).map(Known::view)
    }

    /// One line per container a rule names: `container api-0/md-feed (pod
    /// trading/api-0): cpuset 4-7 set at creation by pinnerd (rule md-feed)`.
    pub fn lines(&self) -> Vec<String> {
        self.views().iter().map(ContainerView::line).collect()
    }
}

/// Where `c` belongs in `plan`: pure, nothing recorded.
fn choose(c: &ContainerFacts, plan: Option<&Plan>, topology: Option<&Topology>) -> Decision {
    match plan {
        Some(plan) => would_give(&info(c), c.cpus.as_ref(), plan, topology),
        None => Decision::NoRule,
    }
}

/// Who set a container's cpuset, read from the words [`Containers`] records for it
/// (its `how`), as `plan --live` names it; `None` when pinnerd set none.
pub fn set_by_pinnerd(how: &str) -> Option<&'static str> {
    // `cpuset 4-7 set at creation by pinnerd (rule md-feed)`, or `no cpuset from …`.
    let (_, rest) = how.strip_prefix("cpuset ")?.split_once(" set ")?;
    if rest.starts_with("at creation by pinnerd") {
        Some("pinnerd at creation")
    } else if rest.starts_with("by pinnerd after the plan changed") {
        Some("pinnerd by UpdateContainers")
    } else if rest.starts_with("when pinnerd registered") {
        Some("pinnerd when it registered (Synchronize)")
    } else if rest.starts_with("at the runtime's update by pinnerd") {
        Some("pinnerd at the runtime's update")
    } else {
        None
    }
}

/// Where a container of these facts belongs in `plan`, inside the cpuset `given` it
/// arrived with (the kubelet's static CPU manager's): the daemon's answer, and
/// `plan --live`'s.
pub fn would_give(
    c: &ContainerInfo,
    given: Option<&CpuSet>,
    plan: &Plan,
    topology: Option<&Topology>,
) -> Decision {
    let Some(rule) = plan.rules().match_container(c) else {
        return Decision::NoRule;
    };
    match cpus_for(plan, &rule.name, given) {
        Ok(cpus) => {
            let mems = (rule.memory_follow)
                .then(|| topology.map(|t| crate::memory::policy::nodes_of(t, &cpus)))
                .flatten()
                .filter(|n| !n.is_empty())
                .map(|n| n.into_iter().collect::<CpuSet>());
            Decision::Place {
                rule: rule.name.clone(),
                cpus,
                mems,
            }
        }
        Err(reason) => Decision::Undecided {
            rule: rule.name.clone(),
            reason,
        },
    }
}

/// The rule's CPUs in the plan, inside the cpuset the container arrived with (the
/// kubelet's static CPU manager): never widened.
pub fn cpus_for(plan: &Plan, rule: &str, given: Option<&CpuSet>) -> Result<CpuSet, String> {
    let cpus = match plan.get(rule, None) {
        Some(PlanState::Placed { cpus }) => cpus.clone(),
        Some(state @ (PlanState::Lost { .. } | PlanState::Unplaceable { .. })) => {
            return Err(state.describe());
        }
        Some(PlanState::Slots { .. }) | None => {
            return Err("the rule has no [rule.place] CPUs for a whole container".into());
        }
    };
    match given {
        Some(given) if !cpus.is_subset(given) => {
            let inside = cpus.intersection(given);
            if inside.is_empty() {
                Err(format!(
                    "the plan's CPUs {cpus} are outside the cpuset {given} the container arrived with, which pinnerd does not widen"
                ))
            } else {
                Ok(inside)
            }
        }
        _ => Ok(cpus),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nri::link::PodFacts;
    use crate::plan::tests::{cpus, rules, LowestFirst};

    const RULES: &str = r#"
[[rule]]
name = "md-feed"
[rule.match]
container = "md-feed"
pod-namespace = "trading"
[rule.place]
count = 2
exclusive = true
"#;

    fn plan(online: &str) -> Plan {
        Plan::new(&rules(RULES), &cpus(online, ""), Some(&LowestFirst))
    }

    fn feed(id: &str, given: Option<&str>) -> ContainerFacts {
        ContainerFacts {
            id: id.into(),
            name: "md-feed".into(),
            pod: PodFacts {
                name: "api-0".into(),
                namespace: "trading".into(),
                ..PodFacts::default()
            },
            cpus: given.map(|g| g.parse().unwrap()),
            ..ContainerFacts::default()
        }
    }

    #[test]
    fn a_named_container_gets_its_rules_cpus_and_is_said() {
        let mut c = Containers::default();
        let d = c.decide(&feed("a", None), Moment::Creation, Some(&plan("0-7")), None);
        assert_eq!(
            d,
            Decision::Place {
                rule: "md-feed".into(),
                cpus: "0-1".parse().unwrap(),
                mems: None
            }
        );
        assert_eq!(
            c.lines(),
            ["container api-0/md-feed (pod trading/api-0): cpuset 0-1 set at creation by pinnerd (rule md-feed)"]
        );
        let other = ContainerFacts {
            name: "web".into(),
            ..feed("b", None)
        };
        assert_eq!(
            c.decide(&other, Moment::Creation, Some(&plan("0-7")), None),
            Decision::NoRule
        );
        assert_eq!(
            c.lines().len(),
            1,
            "a container no rule names is not listed"
        );
    }

    #[test]
    fn a_kubelet_cpuset_is_never_widened() {
        let mut c = Containers::default();
        let inside = c.decide(
            &feed("a", Some("1-3")),
            Moment::Creation,
            Some(&plan("0-7")),
            None,
        );
        assert!(matches!(inside, Decision::Place { ref cpus, .. } if cpus.to_string() == "1"));
        let outside = c.decide(
            &feed("b", Some("6-7")),
            Moment::Creation,
            Some(&plan("0-7")),
            None,
        );
        match outside {
            Decision::Undecided { reason, .. } => {
                assert!(reason.contains("does not widen"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.skipped, 1);
    }

    #[test]
    fn a_changed_plan_moves_placed_containers_through_updates() {
        let mut c = Containers::default();
        let (tx, mut rx) = mpsc::channel(4);
        c.connect(tx);
        c.decide(&feed("a", None), Moment::Creation, Some(&plan("0-7")), None);
        c.replanned(&plan("0-7"), None);
        assert!(rx.try_recv().is_err(), "nothing moved when nothing changed");
        c.replanned(&plan("4-7"), None);
        let batch = rx.try_recv().unwrap();
        assert_eq!(
            batch,
            [Update {
                id: "a".into(),
                cpus: "4-5".parse().unwrap(),
                mems: None,
                title: "api-0/md-feed (pod trading/api-0)".into(),
            }]
        );
        assert!(c.lines()[0]
            .contains("cpuset 4-5 set by pinnerd after the plan changed (was 0-1; rule md-feed)"));
        assert_eq!(c.adjusted, 2, "the creation and the one move");
        c.replanned(&plan("4-7"), None);
        assert!(
            rx.try_recv().is_err(),
            "a container already moved is not moved again"
        );
        assert_eq!(c.adjusted, 2, "nor counted again");
        // A plugin that cannot take the batch now: nothing is recorded as moved, and the
        // next change sends it.
        let (tx, mut rx) = mpsc::channel(1);
        c.connect(tx.clone());
        tx.try_send(Vec::new()).unwrap();
        c.replanned(&plan("0-7"), None);
        assert!(
            c.lines()[0].contains("(was 0-1; rule md-feed)"),
            "{:?}",
            c.lines()
        );
        assert_eq!(rx.try_recv().unwrap(), []);
        c.replanned(&plan("0-7"), None);
        assert_eq!(rx.try_recv().unwrap()[0].cpus.to_string(), "0-1");
        assert!(c.lines()[0].contains("cpuset 0-1 set by pinnerd after the plan changed (was 4-5"));
        c.hear(Ask::Gone { id: "a".into() }, None, None);
        assert!(c.lines().is_empty());
    }

    #[test]
    fn a_move_the_runtime_did_not_make_is_said_and_not_sent_again_for_the_same_cpus() {
        let mut c = Containers::default();
        let (tx, mut rx) = mpsc::channel(4);
        c.connect(tx);
        c.decide(&feed("a", None), Moment::Creation, Some(&plan("0-7")), None);
        c.replanned(&plan("4-7"), None);
        assert_eq!(rx.try_recv().unwrap()[0].cpus.to_string(), "4-5");
        // The plugin gave up on it: the runtime refused every attempt.
        c.hear(
            Ask::NotMoved {
                id: "a".into(),
                cpus: "4-5".parse().unwrap(),
                reason: "the runtime refused the call (Unknown): cgroup busy (4 attempts)".into(),
            },
            None,
            None,
        );
        assert_eq!(
            c.lines(),
            ["container api-0/md-feed (pod trading/api-0): cpuset 0-1 set at creation by pinnerd (rule md-feed); the runtime did not move it to 4-5 when the plan changed: the runtime refused the call (Unknown): cgroup busy (4 attempts)"]
        );
        assert_eq!(
            c.views()[0].cpuset.as_deref(),
            Some("0-1"),
            "the cpuset it still has"
        );
        assert_eq!(c.adjusted, 1, "only the creation counts");
        c.replanned(&plan("4-7"), None);
        assert!(
            rx.try_recv().is_err(),
            "the same CPUs are not sent again while the plan stays"
        );
        // The plan gives it other CPUs: sent.
        c.replanned(&plan("2-7"), None);
        assert_eq!(rx.try_recv().unwrap()[0].cpus.to_string(), "2-3");
        // A refusal of an update since overtaken is not recorded over the newer one.
        c.hear(
            Ask::NotMoved {
                id: "a".into(),
                cpus: "4-5".parse().unwrap(),
                reason: "late".into(),
            },
            None,
            None,
        );
        assert!(
            c.lines()[0].contains("cpuset 2-3 set by pinnerd after the plan changed (was 0-1"),
            "{:?}",
            c.lines()
        );
    }

    #[test]
    fn the_runtime_line_says_registered_or_why_not() {
        let mut c = Containers::default();
        c.hear(
            Ask::Registered {
                runtime: "containerd".into(),
                version: "1.7.24".into(),
            },
            None,
            None,
        );
        assert_eq!(c.runtime, "registered with containerd 1.7.24");
        c.hear(
            Ask::NotConnected {
                reason: "no socket at /x".into(),
            },
            None,
            None,
        );
        assert_eq!(c.runtime, "not connected (no socket at /x)");
    }
}
