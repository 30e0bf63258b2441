//! Cgroup cpusets: one plan instance per distinct cpuset, made by the loop for what
//! the manager reports; the mask at first contact where no cgroup says; memory nodes.

use super::*;

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

/// The cpuset of each plan instance, in order.
fn unit_cpusets(t: &T) -> Vec<Option<CpuSet>> {
    t.mgr
        .plan()
        .units()
        .iter()
        .map(|u| u.cpuset.clone())
        .collect()
}

/// A manager on CPUs 0-7 whose loop plans again with the stand-in engine, and the plan
/// of `text` as the daemon makes it.
fn cpuset_rig(text: &str) -> (T, Plan) {
    let mut t = rig(ManagerConfig::default());
    t.choose = Some(&LowestFirst);
    (t, plan_on(rules(text), "0-7"))
}

impl T {
    /// Process `pid` allowed on `mask` at first contact, in cgroup cpuset `cg`.
    fn in_cpuset(&self, pid: i32, comm: &str, mask: &str, cg: Option<&str>) {
        self.procs.put(pid, comm, 1, &[]);
        self.ops.add_process(pid, 1, &[], &set(mask));
        self.procs.set_cpuset(pid, cg.map(set));
    }
}

/// How many pins were refused or narrowed.
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

#[test]
fn each_cpuset_gets_its_own_plan_and_exclusivity_holds_across_them() {
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed-a", "0-7", Some("4-7"));
    t.in_cpuset(200, "feed-b", "0-7", Some("4-7"));
    t.in_cpuset(300, "feed-c", "0-7", Some("5-6"));
    t.in_cpuset(400, "feed-d", "0-7", None);
    let changes = t.ev(Input::RulesChanged(plan));
    assert_eq!(refused(&changes), 0, "{changes:?}");
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
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed", "0-7", Some("4-7"));
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
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed", "2-3,6", None);
    t.ev(Input::RulesChanged(plan));
    assert_eq!(t.ops.mask(100), Some(set("2-3")));
    t.assert_explains(100, "cpuset 2-3,6 (its allowed mask at first contact)");
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
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed", "0-7", Some("4-5"));
    t.ev(Input::RulesChanged(plan));
    assert_eq!(t.ops.mask(100), Some(set("4-5")));
    // The cgroup's CPUs are edited (the kernel narrows the task as it does).
    t.procs.set_cpuset(100, Some(set("6-7")));
    t.ops.set_cpuset(100, &set("6-7"));
    t.ev(Input::Rescan);
    assert_eq!(t.ops.mask(100), Some(set("6-7")));
    t.assert_explains(100, "cpuset 6-7 (from /sys/fs/cgroup/fake-100/");
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
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed-a", "0-7", Some("4-7"));
    t.ev(Input::RulesChanged(plan));
    assert_eq!(t.ops.mask(100), Some(set("4-5")));
    let units = unit_cpusets(&t);
    assert_eq!(units, vec![Some(set("4-7"))], "no instance on all CPUs yet");
    t.in_cpuset(200, "feed-b", "0-7", None);
    t.msg(ProcMsg::Exec { pid: 200 });
    assert_eq!(t.ops.mask(200), Some(set("0-1")));
    assert_eq!(t.ops.mask(100), Some(set("4-5")), "the first one stays");
}

#[test]
fn explicit_cpus_outside_the_cpuset_are_classified_as_before() {
    let (mut t, plan) = cpuset_rig(
        r#"
[[rule]]
name = "fixed"
[rule.match]
comm = "fixed"
[rule.place]
cpus = "0-1"
"#,
    );
    t.in_cpuset(100, "fixed", "0-7", Some("4-7"));
    t.ops.set_cpuset(100, &set("4-7"));
    let changes = t.ev(Input::RulesChanged(plan));
    assert_eq!(refused(&changes), 1, "{changes:?}");
    assert_eq!(t.mgr.plan().units().len(), 1);
    assert_eq!(t.mgr.plan().units()[0].cpuset, None);
}

#[test]
fn a_running_process_is_placed_on_the_node_holding_its_memory() {
    use crate::plan::MemoryPlanning;
    const DB: &str =
        "[[rule]]\nname = \"db\"\n[rule.match]\ncomm = \"db*\"\n[rule.place]\ncount = 2\n";
    // Two nodes of four CPUs; a process is weighed from 64 MiB on.
    let rig = || {
        let (t, plan) = cpuset_rig(DB);
        let memory = MemoryPlanning {
            nodes: vec![(0, set("0-3")), (1, set("4-7"))],
            tolerance: 0.1,
            min_bytes: 64 << 20,
        };
        (t, plan.with_memory(memory, Some(&LowestFirst)))
    };
    let (mut t, plan) = rig();
    t.in_cpuset(100, "db-big", "0-7", None);
    t.procs.set_memory(100, &[(0, 1 << 28), (1, 15 << 28)]);
    t.ev(Input::RulesChanged(plan));
    // Its memory is read off the loop; its threads wait for it.
    assert_eq!(t.ops.mask(100), Some(set("0-7")));
    let asked = t.mgr.take_memory_reads();
    assert_eq!(asked.len(), 1, "{asked:?}");
    // A read for an earlier process by that pid changes nothing.
    t.ev(Input::Memory {
        pid: 100,
        start_time: asked[0].start_time + 1,
        bytes: Some([(0, 16 << 28)].into_iter().collect()),
    });
    assert_eq!(t.ops.mask(100), Some(set("0-7")));
    t.ev(Input::Memory {
        pid: 100,
        start_time: asked[0].start_time,
        bytes: Some([(0, 1 << 28), (1, 15 << 28)].into_iter().collect()),
    });
    assert_eq!(t.ops.mask(100), Some(set("4-5")));
    t.assert_explains(100, "plan place: node 1 chosen: holds 94% of its 4.0 GiB");
    // A process too small to weigh changes nothing: the best-fit choice.
    let (mut t, plan) = rig();
    t.in_cpuset(200, "db-small", "0-7", None);
    t.procs.set_memory(200, &[(1, 1 << 20)]);
    t.ev(Input::RulesChanged(plan));
    t.read_asked();
    assert_eq!(t.ops.mask(200), Some(set("0-1")));
    assert!(!t.mgr.explain(200).contains("chosen:"));
}

/// The lines a cpuset change makes say, in their message alone (what the journal shows
/// first), which process, which rule, which CPUs and what happens next.
#[test]
fn a_cpuset_change_is_logged_in_words() {
    let (mut t, plan) = cpuset_rig(FEED);
    t.in_cpuset(100, "feed", "0-7", Some("4-5"));
    let (_, said) = crate::test_log::messages(|| t.ev(Input::RulesChanged(plan)));
    let file = "/sys/fs/cgroup/fake-100/cpuset.cpus.effective";
    assert!(
        said.contains(&format!(
            "INFO managing pid 100 (feed) for rule feed, in cpuset 4-5 (from {file})"
        )),
        "{said:#?}"
    );
    t.procs.set_cpuset(100, Some(set("6-7")));
    t.ops.set_cpuset(100, &set("6-7"));
    let (_, said) = crate::test_log::messages(|| t.ev(Input::Rescan));
    assert_eq!(
        said,
        [
            format!(
                "INFO pid 100 (feed): its cpuset changed from 4-5 to 6-7 ({file}): planning again"
            ),
            "INFO planned again for the processes' cgroup cpusets (feed in 6-7): \
             feed in cpuset 6-7: cpus 6-7; the threads of rule feed are applied again"
                .to_string(),
        ]
    );
    assert_eq!(t.ops.mask(100), Some(set("6-7")));
}

/// A unit not applied says which rule and why, in its message.
#[test]
fn a_unit_not_placed_or_lost_is_logged_in_words() {
    let mut t = rig(ManagerConfig::default());
    let plan = plan_on(
        rules(
            r#"
[[rule]]
name = "hi"
priority = 50
[rule.match]
comm = "hi"
[rule.place]
cpus = "2-3"
exclusive = true

[[rule]]
name = "lo"
priority = 10
[rule.match]
comm = "lo"
[rule.place]
cpus = "3-4"

[[rule]]
name = "big"
priority = 100
[rule.match]
comm = "big"
[rule.place]
count = 9
"#,
        ),
        "0-7",
    );
    let (_, said) = crate::test_log::messages(|| t.ev(Input::RulesChanged(plan)));
    assert_eq!(
        said,
        [
            "INFO rule big could not be placed: asked for 9 CPUs but only 8 are usable (0-7 available)",
            "INFO rule lo lost CPUs 3 to rule hi, which takes precedence: not applied",
        ]
    );
}
