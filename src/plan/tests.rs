//! The planner's tests, and the fixtures the manager's and the daemon's tests share
//! with them: CPU lists, rule sets from text, count requests and a stand-in engine.

use super::*;
use crate::matrix::LatencyMatrix;
use crate::rules::{compile_text, LoadPolicy};

pub(crate) use crate::cpuset::set;

/// The rules of `text`, compiled without checking users or files.
pub(crate) fn rules(text: &str) -> RuleSet {
    let r = compile_text(
        std::path::Path::new("t.toml"),
        text,
        &LoadPolicy::unchecked(),
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    RuleSet::new(r)
}

/// `online` CPUs with `reserved` ones (`""`: none) kept from placement.
pub(crate) fn cpus(online: &str, reserved: &str) -> Cpus {
    Cpus {
        online: set(online),
        reserved: if reserved.is_empty() {
            CpuSet::new()
        } else {
            set(reserved)
        },
    }
}

/// `n` CPUs, compact, siblings allowed, shared: a run-time pin's plain request.
pub(crate) fn count_request(n: u32) -> PlacementRequest {
    PlacementRequest {
        target: CpuTarget::Count(n),
        within: None,
        policy: crate::placement::Policy::Compact,
        smt: crate::placement::SmtPolicy::Allow,
        exclusive: false,
        shape: Default::default(),
    }
}

/// Always the same CPUs: the plan an older matrix made.
struct Fixed(CpuSet);

impl Choose for Fixed {
    fn choose(&self, _: &PlacementRequest, _: &CpuSet) -> Result<Chosen, PlacementError> {
        Ok(Chosen {
            cpus: self.0.clone(),
            held: self.0.clone(),
        })
    }
}

/// Lowest-numbered CPUs first: a stand-in for the placement engine, for the planner's
/// and the manager's tests.
pub(crate) struct LowestFirst;

impl Choose for LowestFirst {
    fn choose(&self, req: &PlacementRequest, avail: &CpuSet) -> Result<Chosen, PlacementError> {
        match &req.target {
            CpuTarget::Count(n) if avail.len() >= *n as usize => {
                let c: CpuSet = avail.iter().take(*n as usize).collect();
                Ok(Chosen {
                    cpus: c.clone(),
                    held: c,
                })
            }
            CpuTarget::Count(n) => Err(PlacementError::NotEnough {
                wanted: *n as usize,
                usable: avail.len(),
                why: format!("{avail} available"),
            }),
            CpuTarget::Cpus(c) => Ok(Chosen {
                cpus: c.clone(),
                held: c.clone(),
            }),
        }
    }
}

/// 8 CPUs: {0,2,4,6} and {1,3,5,7} are two clusters (20 ns inside, 100 ns across),
/// the layout where "CPUs 0,1" is the autopilot mistake.
fn interleaved() -> Domains {
    Domains::from_matrix(&LatencyMatrix::interleaved(8, 20.0, 100.0)).expect("domains")
}

const PAIR: &str = r#"
[[rule]]
name = "md"
[rule.match]
comm = "md"
[rule.place]
count = 2
"#;

#[test]
fn a_pair_across_clusters_moves() {
    let d = interleaved();
    let r = rules(PAIR);
    let c = cpus("0-7", "");
    let old = Plan::new(&r, &c, Some(&Fixed(set("0-1"))));
    let new = Plan::new(&r, &c, Some(&d));
    let b = old.improvements(&new, &d, 0.10, 5.0);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].unit, "md");
    assert_eq!(b[0].now_ns, 100.0);
    assert_eq!(b[0].then_ns, 20.0);
}

#[test]
fn an_equally_good_pair_stays() {
    let d = interleaved();
    let r = rules(PAIR);
    let c = cpus("0-7", "");
    let old = Plan::new(&r, &c, Some(&Fixed(set("4,6"))));
    let new = Plan::new(&r, &c, Some(&d));
    assert!(old.improvements(&new, &d, 0.10, 5.0).is_empty());
    // And the same plan is never better than itself.
    assert!(new.improvements(&new, &d, 0.0, 0.0).is_empty());
}

#[test]
fn sysfs_only_domains_never_move_anything() {
    let root = crate::sysroot::SysRoot::with_sys(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs/xeon-e5620/sys"),
    );
    let t = crate::topology::Topology::discover(&root).expect("fixture topology");
    let d = Domains::from_topology(&t).expect("domains");
    let r = rules(PAIR);
    let c = cpus("0-15", "");
    // CPUs 0 and 1 sit on different sockets: only latencies could say it is worse.
    let old = Plan::new(&r, &c, Some(&Fixed(set("0-1"))));
    let new = Plan::new(&r, &c, Some(&d));
    assert_eq!(
        old.get("md", None),
        Some(&PlanState::Placed { cpus: set("0-1") })
    );
    assert!(matches!(
        new.get("md", None),
        Some(PlanState::Placed { .. })
    ));
    assert!(old.improvements(&new, &d, 0.10, 5.0).is_empty());
}

#[test]
fn without_a_placement_engine_only_explicit_cpus_are_placed() {
    let r = rules(
        r#"
[[rule]]
name = "fixed"
[rule.match]
comm = "a"
[rule.place]
cpus = "2-3"

[[rule]]
name = "counted"
[rule.match]
comm = "b"
[rule.place]
count = 2
"#,
    );
    let p = Plan::new(&r, &cpus("0-7", ""), None);
    assert_eq!(
        p.get("fixed", None),
        Some(&PlanState::Placed { cpus: set("2-3") })
    );
    assert!(matches!(
        p.get("counted", None),
        Some(PlanState::Unplaceable { reason }) if reason.contains("no placement engine")
    ));
    assert_eq!(p.units().len(), 2);
    assert_eq!(p.units()[0].rule, "fixed", "explicit cpus come first");
}

#[test]
fn counts_avoid_reserved_and_exclusive_cpus_and_a_pin_too() {
    let r = rules(
        r#"
[[rule]]
name = "excl"
priority = 10
[rule.match]
comm = "a"
[rule.place]
count = 2
exclusive = true

[[rule]]
name = "shared"
[rule.match]
comm = "b"
[rule.place]
count = 2
"#,
    );
    let p = Plan::new(&r, &cpus("0-7", "0"), Some(&LowestFirst));
    assert_eq!(
        p.get("excl", None),
        Some(&PlanState::Placed { cpus: set("1-2") })
    );
    assert_eq!(
        p.get("shared", None),
        Some(&PlanState::Placed { cpus: set("3-4") })
    );
    assert_eq!(p.exclusive_cpus(), set("1-2"));
    let req = count_request(2);
    assert_eq!(p.pin(&req, Some(&LowestFirst)).unwrap(), set("3-4"));
    assert!(matches!(p.pin(&req, None), Err(PinError::NoEngine { .. })));
    let too_many = PlacementRequest {
        target: CpuTarget::Count(6),
        ..req
    };
    let e = p.pin(&too_many, Some(&LowestFirst)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot place 6 CPUs (compact, smt allow): asked for 6"),
        "{e}"
    );
}

#[test]
fn a_pin_to_explicit_cpus_an_exclusive_rule_holds_is_refused_naming_the_rule() {
    let r = rules(
        r#"
[[rule]]
name = "excl"
[rule.match]
comm = "a"
[rule.place]
cpus = "1-2"
exclusive = true

[[rule]]
name = "shared"
[rule.match]
comm = "b"
[rule.place]
cpus = "2-3"
"#,
    );
    let p = Plan::new(&r, &cpus("0-7", ""), Some(&LowestFirst));
    let on = |c: &str| PlacementRequest {
        target: CpuTarget::Cpus(set(c)),
        ..count_request(1)
    };
    for (asked, held) in [("1", "1"), ("0-3", "1-2"), ("2,5", "2")] {
        match p.pin(&on(asked), Some(&LowestFirst)) {
            Err(e @ PinError::Exclusive { .. }) => {
                assert_eq!(
                    e.to_string(),
                    format!("cpus {asked}: CPUs {held} are held exclusively by rule \"excl\"; a run-time pin takes only CPUs no exclusive rule holds")
                );
            }
            other => panic!("{asked}: {other:?}"),
        }
    }
    // CPUs a shared rule holds, or no rule, stay open to a pin.
    assert_eq!(p.pin(&on("3-4"), None).unwrap(), set("3-4"));
    assert_eq!(p.pin(&on("0"), None).unwrap(), set("0"));
}

#[test]
fn a_rule_is_planned_once_per_cpuset_and_thread_entries_follow_their_instance() {
    let r = rules(
        r#"
[[rule]]
name = "app"
[rule.match]
comm = "app"
[rule.place]
count = 2
exclusive = true
[[rule.threads]]
comm = "w*"
count = 1
"#,
    );
    let p = Plan::new(&r, &cpus("0-7", "0"), Some(&LowestFirst));
    assert_eq!(
        p.get("app", None),
        Some(&PlanState::Placed { cpus: set("1-2") })
    );
    // A process whose cpuset holds every CPU but the reserved one needs no instance.
    assert_eq!(p.cpuset_key(&set("1-7")), None);
    assert_eq!(p.cpuset_key(&set("4-9")), Some(set("4-7")));
    let mut cs = Cpusets::default();
    cs.add("app", Some(&set("4-7")));
    cs.add("app", None);
    let q = p.in_cpusets(&cs, Some(&LowestFirst));
    assert_eq!(q.cpusets(), &cs);
    assert_eq!(
        q.get_in("app", None, None),
        Some(&PlanState::Placed { cpus: set("1-2") })
    );
    assert_eq!(
        q.get_in("app", None, Some(&set("4-7"))),
        Some(&PlanState::Placed { cpus: set("4-5") })
    );
    // The thread entry places within its own instance's CPUs.
    assert_eq!(
        q.get_in("app", Some(0), Some(&set("4-7"))),
        Some(&PlanState::Slots {
            slots: vec![set("4"), set("5")],
            held_slots: 0,
        })
    );
    // A cpuset the plan was not made in falls back to the plan on all CPUs.
    assert_eq!(
        q.get_in("app", None, Some(&set("6-7"))),
        Some(&PlanState::Placed { cpus: set("1-2") })
    );
    assert!(q.has_cpuset("app", Some(&set("4-7"))));
    assert!(!q.has_cpuset("app", Some(&set("6-7"))));
    assert!(q.has_cpuset("app", None));
    let mut only = Cpusets::default();
    only.add("app", Some(&set("4-7")));
    assert!(!p
        .in_cpusets(&only, Some(&LowestFirst))
        .has_cpuset("app", None));
    // Exclusive across instances: an overlapping cpuset cannot reuse 4-5.
    cs.add("app", Some(&set("5-7")));
    let q = p.in_cpusets(&cs, Some(&LowestFirst));
    assert_eq!(
        q.get_in("app", None, Some(&set("5-7"))),
        Some(&PlanState::Placed { cpus: set("6-7") })
    );
}

#[test]
fn widening_rounds_masks_up_within_what_the_unit_may_use() {
    let r = rules(
        r#"
[[rule]]
name = "first"
priority = 10
[rule.match]
comm = "a"
[rule.place]
count = 1
exclusive = true

[[rule]]
name = "second"
[rule.match]
comm = "b"
[rule.place]
count = 1
"#,
    );
    let p = Plan::new(&r, &cpus("0-7", "0"), Some(&LowestFirst))
        .widened(vec![set("0-3"), set("4-7")], Some(&LowestFirst));
    assert_eq!(p.widen_groups(), &[set("0-3"), set("4-7")]);
    // CPU 1 widened to its group, less the reserved CPU 0.
    assert_eq!(
        p.get("first", None),
        Some(&PlanState::Placed { cpus: set("1-3") })
    );
    // The next unit may not widen onto the exclusive unit's CPUs: 4 → 4-7.
    assert_eq!(
        p.get("second", None),
        Some(&PlanState::Placed { cpus: set("4-7") })
    );
    // Kept when planned again in a cpuset, and never past it.
    let mut cs = Cpusets::default();
    cs.add("second", Some(&set("5-6")));
    let q = p.in_cpusets(&cs, Some(&LowestFirst));
    assert_eq!(
        q.get_in("second", None, Some(&set("5-6"))),
        Some(&PlanState::Placed { cpus: set("5-6") })
    );
}

#[test]
fn an_exclusive_thread_entry_holds_only_the_slots_live_threads_take() {
    let r = rules(
        r#"
[[rule]]
name = "feed"
priority = 10
[rule.match]
comm = "feed"
[[rule.threads]]
comm = "rx-*"
count = 1
exclusive = true

[[rule]]
name = "batch"
[rule.match]
comm = "batch"
[rule.place]
count = 2
exclusive = true
"#,
    );
    let p = Plan::new(&r, &cpus("0-3", ""), Some(&LowestFirst));
    // No rx thread yet: every CPU is a slot, none held; the batch rule is placed.
    assert_eq!(
        p.get("feed", Some(0)),
        Some(&PlanState::Slots {
            slots: vec![set("0"), set("1"), set("2"), set("3")],
            held_slots: 0,
        })
    );
    assert_eq!(
        p.get("batch", None),
        Some(&PlanState::Placed { cpus: set("0-1") })
    );
    // Two rx threads hold slots 0 and 1: the batch rule moves to what is left.
    let mut d = Demand::default();
    d.take("feed", 0, 0);
    d.take("feed", 0, 1);
    let q = p.again(
        &Seen {
            cpusets: Cpusets::default(),
            demand: d.clone(),
        },
        Some(&LowestFirst),
    );
    assert_eq!(q.get("feed", Some(0)).unwrap().held(), set("0-1"));
    assert_eq!(
        q.get("batch", None),
        Some(&PlanState::Placed { cpus: set("2-3") })
    );
    assert_eq!(q.exclusive_cpus(), set("0-3"));
    // A third takes every CPU that is left for the batch rule: it loses.
    d.take("feed", 0, 2);
    let q = p.again(
        &Seen {
            cpusets: Cpusets::default(),
            demand: d.clone(),
        },
        Some(&LowestFirst),
    );
    assert!(
        matches!(q.get("batch", None), Some(PlanState::Lost { .. })),
        "{q:?}"
    );
}

#[test]
fn slots_read_in_order_with_how_many_live_threads_hold() {
    let s = PlanState::Slots {
        slots: vec![set("4"), set("5-6"), set("7")],
        held_slots: 1,
    };
    assert_eq!(
        s.describe(),
        "one slot per thread, slot 0 first: 4 | 5-6 | 7 (1 held by live threads)"
    );
}

/// A thread entry with no CPU left to seek its slots in says why, never "in " and an
/// empty list.
#[test]
fn a_thread_entry_with_no_cpu_left_says_why_in_words() {
    let r = rules(
        r#"
[[rule]]
name = "big"
priority = 10
[rule.match]
comm = "big"
[rule.place]
cpus = "2-3"
exclusive = true

[[rule]]
name = "dpdk"
[rule.match]
comm = "dpdk"
[[rule.threads]]
comm = "lcore-*"
count = 1
within = "2-3"
exclusive = true

[[rule]]
name = "far"
[rule.match]
comm = "far"
[[rule.threads]]
comm = "lcore-*"
count = 1
within = "8-9"
"#,
    );
    let p = Plan::new(&r, &cpus("0-3", ""), Some(&LowestFirst));
    let reason = |rule: &str| match p.get(rule, Some(0)) {
        Some(PlanState::Unplaceable { reason }) => reason.clone(),
        other => panic!("{rule}: {other:?}"),
    };
    let taken = reason("dpdk");
    assert!(
        taken.starts_with(
            "1 CPUs per thread do not fit anywhere: every CPU within 2-3 is held by another rule"
        ),
        "{taken}"
    );
    let outside = reason("far");
    assert!(
        outside.starts_with(
            "1 CPUs per thread do not fit anywhere: none of its `within` CPUs is one a count may be given"
        ),
        "{outside}"
    );
}
