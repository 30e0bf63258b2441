//! A threads entry's slots, planned together: `smt = avoid` holds across slots,
//! `compact` keeps the slots in the smallest group that holds them, `spread` spreads
//! them; on the sysfs fixtures and on published matrices.

use std::path::Path;

use pinnerd::domains::Domains;
use pinnerd::placement::{slots, Policy, Request, Slot, SmtPolicy};
use pinnerd::sysroot::SysRoot;
use pinnerd::topology::Topology;
use pinnerd::CpuSet;

use super::placement::load;

fn fixture(name: &str) -> Domains {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name);
    fixture_root(SysRoot::machine(dir))
}

fn fixture_root(root: SysRoot) -> Domains {
    let t = Topology::from_sysroot(&root).unwrap_or_else(|e| panic!("{root:?}: {e}"));
    Domains::from_topology(&t).unwrap_or_else(|e| panic!("{root:?}: {e}"))
}

fn matrix(file: &str) -> Domains {
    Domains::from_matrix(&load(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn all(d: &Domains) -> CpuSet {
    d.cpus().iter().copied().collect()
}

fn one_each(policy: Policy, smt: SmtPolicy) -> Request {
    Request {
        count: 1,
        policy,
        smt,
        ..Default::default()
    }
}

/// The core of `cpu` on `d` (the CPU itself without SMT).
fn core(d: &Domains, cpu: u32) -> usize {
    let i = d.index_of(cpu).unwrap();
    d.smt_level().map_or(i, |l| d.group_of(l, i))
}

fn cores(d: &Domains) -> usize {
    d.smt_level()
        .map_or(d.cpus().len(), |l| d.levels()[l].groups.len())
}

fn first(s: &[Slot]) -> Vec<u32> {
    s.iter().map(|s| s.cpus.first().unwrap()).collect()
}

fn worst(d: &Domains, cpus: &[u32]) -> f64 {
    let idx: Vec<usize> = cpus.iter().map(|&c| d.index_of(c).unwrap()).collect();
    let mut w = 0.0f64;
    for (a, &i) in idx.iter().enumerate() {
        for &j in &idx[..a] {
            w = w.max(d.cost(i, j));
        }
    }
    w
}

fn sysfs_fixtures() -> Vec<(&'static str, Domains)> {
    [
        "xeon-e5620",
        "i9-12900k",
        "epyc-vm-2cpu",
        "r9-7950x3d",
        "xeon-2s-nic-nvme",
        "ryzen-2700x",
    ]
    .into_iter()
    .map(|n| (n, fixture(n)))
    .collect()
}

fn matrices() -> Vec<(&'static str, Domains)> {
    [
        "AMD_EPYC_7773X.csv",
        "Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
        "Intel_Core_i9-12900K.csv",
        "AMD_Ryzen_9_5950X_at_3.40_GHz.csv",
    ]
    .into_iter()
    .map(|f| (f, matrix(f)))
    .collect()
}

#[test]
fn the_feed_handler_rule_on_the_e5620_fills_one_socket_one_cpu_per_core() {
    let d = fixture("xeon-e5620");
    let s = slots(&d, &one_each(Policy::Compact, SmtPolicy::Avoid), &all(&d)).unwrap();
    // Socket 0 is 0,2,4,6 (siblings 8,10,12,14); socket 1 the odd CPUs.
    assert_eq!(first(&s), [0, 2, 4, 6, 1, 3, 5, 7]);
    let s = slots(&d, &one_each(Policy::Spread, SmtPolicy::Avoid), &all(&d)).unwrap();
    assert_eq!(first(&s), [0, 1, 2, 3, 4, 5, 6, 7]);
    // Exclusive: whole cores, each slot reserving its idle sibling.
    let req = Request {
        exclusive: true,
        ..one_each(Policy::Compact, SmtPolicy::Avoid)
    };
    let s = slots(&d, &req, &all(&d)).unwrap();
    assert_eq!(first(&s)[..4], [0, 2, 4, 6]);
    assert_eq!(s[0].reserved.to_string(), "0,8");
}

#[test]
fn no_two_slots_share_a_core_with_smt_avoid() {
    for (name, d) in sysfs_fixtures().into_iter().chain(matrices()) {
        for policy in [Policy::Compact, Policy::Spread] {
            for count in [1usize, 2] {
                let req = Request {
                    count,
                    ..one_each(policy, SmtPolicy::Avoid)
                };
                let Ok(s) = slots(&d, &req, &all(&d)) else {
                    assert!(cores(&d) < count, "{name}: no slot for {count}");
                    continue;
                };
                let mut seen: Vec<usize> = s
                    .iter()
                    .flat_map(|s| s.cpus.iter())
                    .map(|c| core(&d, c))
                    .collect();
                let n = seen.len();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), n, "{name} {policy} count {count}: {:?}", s);
                assert_eq!(
                    s.len(),
                    cores(&d) / count,
                    "{name} {policy} count {count}: every core used"
                );
                assert!(s.iter().all(|s| s.cpus.len() == count));
            }
        }
    }
}

/// The finest group of any level that holds `cpu` and can give `k` slots (one CPU per
/// core under `smt = avoid`).
fn smallest_group(d: &Domains, cpu: u32, k: usize, per_core: bool) -> CpuSet {
    let i = d.index_of(cpu).unwrap();
    for (l, level) in d.levels().iter().enumerate() {
        let g = &level.groups[d.group_of(l, i)];
        let fits = if per_core {
            let mut c: Vec<usize> = g.iter().map(|c| core(d, c)).collect();
            c.sort_unstable();
            c.dedup();
            c.len()
        } else {
            g.len()
        };
        if fits >= k {
            return g.clone();
        }
    }
    all(d)
}

#[test]
fn compact_slots_stay_inside_the_smallest_group_that_holds_them() {
    for (name, d) in sysfs_fixtures().into_iter().chain(matrices()) {
        for smt in [SmtPolicy::Avoid, SmtPolicy::Allow] {
            let s = slots(&d, &one_each(Policy::Compact, smt), &all(&d)).unwrap();
            let cpus = first(&s);
            for k in 1..=cpus.len() {
                let g = smallest_group(&d, cpus[0], k, smt == SmtPolicy::Avoid);
                let so_far: CpuSet = cpus[..k].iter().copied().collect();
                assert!(
                    so_far.is_subset(&g),
                    "{name} smt {smt}: the first {k} slots {so_far} leave {g}"
                );
            }
        }
    }
}

#[test]
fn spread_slots_alternate_between_sockets() {
    for name in ["xeon-e5620", "xeon-2s-nic-nvme"] {
        let d = fixture(name);
        let top = d.levels().len() - 2;
        let s = slots(&d, &one_each(Policy::Spread, SmtPolicy::Avoid), &all(&d)).unwrap();
        let sockets: Vec<usize> = first(&s)
            .iter()
            .map(|&c| d.group_of(top, d.index_of(c).unwrap()))
            .collect();
        for pair in sockets.chunks(2).filter(|p| p.len() == 2) {
            assert_ne!(pair[0], pair[1], "{name}: {:?}", first(&s));
        }
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;

    fn domains() -> &'static [(&'static str, Domains)] {
        static D: std::sync::OnceLock<Vec<(&'static str, Domains)>> = std::sync::OnceLock::new();
        D.get_or_init(|| {
            let mut v = sysfs_fixtures();
            v.extend(matrices());
            v
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Slot k+1 never makes the slots' worst pair worse than another free choice
        /// would (within the placement's tolerance), and slots are valid: disjoint,
        /// among the free CPUs, one CPU per core under `smt = avoid`, whole free cores
        /// reserved when exclusive.
        #[test]
        fn each_next_slot_is_the_best_free_choice(
            which in 0usize..10,
            count in 1usize..4,
            smt in prop_oneof![Just(SmtPolicy::Allow), Just(SmtPolicy::Avoid), Just(SmtPolicy::PreferSiblings)],
            policy in prop_oneof![Just(Policy::Compact), Just(Policy::Spread)],
            exclusive in any::<bool>(),
            taken in proptest::collection::btree_set(0u32..128, 0..40),
        ) {
            let (name, d) = &domains()[which % domains().len()];
            let avail = all(d).difference(&taken.iter().copied().collect());
            let req = Request { count, policy, smt, exclusive, ..Default::default() };
            let Ok(s) = slots(d, &req, &avail) else { return Ok(()) };
            let mut used = CpuSet::new();
            for (k, slot) in s.iter().enumerate() {
                prop_assert_eq!(slot.cpus.len(), count, "{} slot {}", name, k);
                prop_assert!(slot.cpus.is_subset(&avail));
                prop_assert!(slot.reserved.is_subset(&avail));
                prop_assert!(slot.cpus.is_subset(&slot.reserved));
                prop_assert!(slot.reserved.is_disjoint(&used), "{} slot {} overlaps", name, k);
                if exclusive {
                    if let Some(l) = d.smt_level() {
                        for c in slot.cpus.iter() {
                            let whole = &d.levels()[l].groups[core(d, c)];
                            prop_assert!(whole.is_subset(&slot.reserved));
                        }
                    }
                }
                used = used.union(&slot.reserved);
            }
            if smt == SmtPolicy::Avoid {
                let mut c: Vec<usize> = used.intersection(&s.iter().fold(CpuSet::new(), |a, s| a.union(&s.cpus))).iter().map(|c| core(d, c)).collect();
                let n = c.len();
                c.sort_unstable();
                c.dedup();
                prop_assert_eq!(c.len(), n, "{}: two slots on one core", name);
            }
            // The greedy guarantee, for one CPU per thread: no other CPU free at step
            // k+1 (and allowed by the request) gives a lower worst pair.
            if count == 1 && policy == Policy::Compact && smt != SmtPolicy::PreferSiblings {
                let cpus = first(&s);
                let mut spent = CpuSet::new();
                for k in 1..cpus.len() {
                    spent = spent.union(&s[k - 1].reserved);
                    if smt == SmtPolicy::Avoid || exclusive {
                        for c in s[k - 1].cpus.iter() {
                            if let Some(l) = d.smt_level() {
                                if smt == SmtPolicy::Avoid {
                                    spent.extend(d.levels()[l].groups[core(d, c)].iter());
                                }
                            }
                        }
                    }
                    let chosen = worst(d, &cpus[..=k]);
                    let tol = (chosen * 0.02).max(if d.cost_is_ns() { 0.5 } else { 0.0 });
                    for other in avail.difference(&spent).iter() {
                        if exclusive {
                            if let Some(l) = d.smt_level() {
                                let whole = &d.levels()[l].groups[core(d, other)];
                                if !whole.is_subset(&avail.difference(&spent)) {
                                    continue;
                                }
                            }
                        }
                        let mut alt = cpus[..k].to_vec();
                        alt.push(other);
                        prop_assert!(
                            chosen <= worst(d, &alt) + tol,
                            "{} slot {}: {} (worst {}) but {} gives {}", name, k, cpus[k], chosen, other, worst(d, &alt)
                        );
                    }
                }
            }
        }
    }
}

/// The rule a user writes for "rx-0..rx-3 each on its own core, close together".
fn feed_rule(comm: &str, extra: &str) -> String {
    format!(
        "[[rule]]\nname = \"feed\"\n[rule.match]\ncomm = \"{comm}\"\n[[rule.threads]]\ncomm = \"rx-*\"\ncount = 1\npolicy = \"compact\"\nsmt = \"avoid\"\n{extra}"
    )
}

/// A helper process named `comm` with threads rx-0 … rx-3.
fn feed_process(dir: &Path, comm: &str) -> super::helper::Helper {
    let mut h = super::helper::Helper::spawn(dir, comm);
    for i in 0..4 {
        h.spawn_threads(1, Some(&format!("rx-{i}")));
    }
    h
}

/// `plan --live` on fixture `fixture`'s sysfs tree, or on `/sys`.
fn plan_live(dirs: &super::daemon::Dirs, fixture: &str, json: bool) -> super::helper::Run {
    let sys = if fixture.starts_with('/') {
        Path::new(fixture).to_path_buf()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(fixture)
            .join("sys")
    };
    let mut args = vec![
        "plan".to_string(),
        "--live".into(),
        "--rules".into(),
        dirs.rules().display().to_string(),
        "--config".into(),
        dirs.root.path().join("none.toml").display().to_string(),
        "--sysfs".into(),
        sys.display().to_string(),
    ];
    if json {
        args.push("--json".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::helper::pinnerd(&args)
}

/// The unit `rule.threads[0]` of a `plan --live --json`.
fn entry_plan(out: &str, rule: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["rule"] == rule && u["thread_entry"] == 0)
        .unwrap_or_else(|| panic!("no {rule}.threads[0] in {out}"))
        .clone()
}

/// The planner as the daemon runs it on the E5620 (no placement of its own in the
/// rule, so the slots come from every usable CPU), once its manager has seen four rx
/// threads take slots 0-3.
#[test]
fn four_live_rx_threads_get_four_cores_of_one_socket_on_the_e5620() {
    use pinnerd::plan::{Cpus, Demand, Plan, PlanState, Seen, SlotsFrom};
    use pinnerd::rules::{compile_text, LoadPolicy, RuleSet};
    let d = fixture("xeon-e5620");
    for exclusive in ["", "exclusive = true\n"] {
        let rules = compile_text(
            Path::new("feed.toml"),
            &feed_rule("myfeed", exclusive),
            &LoadPolicy::unchecked(),
        )
        .unwrap();
        let cpus = Cpus {
            online: all(&d),
            reserved: CpuSet::new(),
        };
        let plan = Plan::new(&RuleSet::new(rules), &cpus, Some(&d));
        // No thread yet: the slots are planned, none is held.
        let u = &plan.units()[0];
        assert_eq!(u.slots_from, Some(SlotsFrom::All(all(&d))));
        assert!(u.state.held().is_empty(), "{u:?}");
        let mut demand = Demand::default();
        for slot in 0..4 {
            demand.take("feed", 0, slot);
        }
        let plan = plan.again(
            &Seen {
                cpusets: Default::default(),
                demand,
            },
            Some(&d),
        );
        let u = &plan.units()[0];
        let PlanState::Slots { slots, held_slots } = &u.state else {
            panic!("{u:?}")
        };
        let four: Vec<String> = slots[..4].iter().map(|s| s.to_string()).collect();
        assert_eq!(four, ["0", "2", "4", "6"]);
        assert_eq!(*held_slots, 4);
        assert_eq!(u.state.held().to_string(), "0,2,4,6");
        assert_eq!(plan.exclusive_cpus().is_empty(), exclusive.is_empty());
    }
}

#[test]
fn slots_carved_from_a_place_of_one_cpu_say_so_before_the_daemon_acts() {
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule(
        "10-mc.toml",
        "[[rule]]\nname = \"mc\"\n[rule.match]\ncomm = \"sl-mc\"\n[rule.place]\ncpus = \"0\"\n[[rule.threads]]\ncomm = \"mc-worker\"\ncount = 1\n",
    );
    let mut h = super::helper::Helper::spawn(dirs.root.path(), "sl-mc");
    h.spawn_threads(4, Some("mc-worker"));
    let run = plan_live(&dirs, "xeon-e5620", false);
    assert!(
        run.stdout.contains(
            "threads[0]: 1 slot carved from [rule.place] cpus 0 for 4 threads; threads past slot 0 share CPUs"
        ),
        "{}",
        run.stdout
    );
    h.exit();
}

#[test]
fn an_exclusive_entry_holds_the_slots_of_its_live_threads_and_says_when_none_is_left_to_measure() {
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule("10-feed.toml", &feed_rule("sl-excl", "exclusive = true\n"));
    let h = feed_process(dirs.root.path(), "sl-excl");
    // This machine (2 CPUs in CI): its four threads take every slot there is.
    let run = plan_live(&dirs, "/sys", true);
    let u = entry_plan(&run.stdout, "feed");
    let slots = u["slots"].as_array().unwrap().len();
    assert_eq!(u["held_slots"], slots.min(4), "{u}");
    let run = plan_live(&dirs, "/sys", false);
    if fixture_root(SysRoot::default()).cpus().len() - slots.min(4) < 2 {
        assert!(
            run.stdout
                .contains("left to measure latencies on (a measurement needs 2)"),
            "{}",
            run.stdout
        );
    }
    h.exit();
    // With no live thread an exclusive entry holds nothing.
    let run = plan_live(&dirs, "xeon-e5620", true);
    let u = entry_plan(&run.stdout, "feed");
    assert_eq!(u["held_slots"], 0, "{u}");
    assert_eq!(u["slots"].as_array().unwrap().len(), 8, "{u}");
}

/// The real kernel: the daemon gives the rx threads distinct CPUs of distinct cores, as
/// many as this machine has cores (the fixture tests above show four on larger ones).
#[test]
fn the_daemon_gives_rx_threads_distinct_cores() {
    use super::daemon::{Bus, Daemon, Policy};
    let _cpus = super::cpus_stay_online();
    let root = SysRoot::default();
    let t = Topology::from_sysroot(&root).unwrap();
    let d = Domains::from_topology(&t).unwrap();
    let bus = Bus::start(Policy::Project);
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule("10-feed.toml", &feed_rule("sl-daemon", ""));
    let h = feed_process(dirs.root.path(), "sl-daemon");
    let _daemon = Daemon::start(&bus, &dirs);
    let rx_masks = || -> Vec<CpuSet> {
        h.tids()
            .into_iter()
            .filter(|tid| {
                std::fs::read_to_string(root.proc_path(format!("{}/task/{tid}/comm", h.pid)))
                    .is_ok_and(|c| c.starts_with("rx-"))
            })
            .filter_map(|tid| {
                let s =
                    std::fs::read_to_string(root.proc_path(format!("{}/task/{tid}/status", h.pid)))
                        .ok()?;
                let l = s.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
                l.split_once(':')?.1.trim().parse().ok()
            })
            .collect()
    };
    let want = cores(&d).min(4);
    bus.wait_for(
        "the rx threads pinned to one CPU each",
        std::time::Duration::from_secs(30),
        || {
            let m = rx_masks();
            m.len() == 4 && m.iter().all(|c| c.len() == 1)
        },
    );
    let m = rx_masks();
    let mut used: Vec<usize> = m.iter().map(|c| core(&d, c.first().unwrap())).collect();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used.len(), want, "{m:?}");
    h.exit();
}

/// The README's rule with one `rx-*` thread more than its two slots, on the real kernel:
/// the threads take slots 0, 1 and 2 in the order they started, so the *last* one is
/// past the last slot (shares slot 0's CPUs) and the first keeps slot 0; the log has one
/// "more threads than slots" warning, naming the last thread.
#[test]
fn one_thread_more_than_the_slots_is_the_last_one_and_one_warning() {
    use super::daemon::{Bus, Daemon, Policy};
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule(
        "10-feed.toml",
        "[[rule]]\nname = \"feed\"\n[rule.match]\ncomm = \"sl-more\"\n[rule.place]\ncount = 2\n\
         [[rule.threads]]\ncomm = \"rx-*\"\ncount = 1\n",
    );
    let d = Daemon::start(&bus, &dirs);
    let mut h = super::helper::Helper::spawn(dirs.root.path(), "sl-more");
    let tids: Vec<i32> = ["rx-a", "rx-b", "rx-c"]
        .iter()
        .flat_map(|name| h.spawn_threads(1, Some(name)))
        .collect();
    let line = |why: &str, tid: i32| -> Option<String> {
        // busctl prints the reply's newlines as `\n`.
        let at = why.find(&format!("tid {tid} ("))?;
        let rest = &why[at..];
        Some(rest[..rest.find("\\n").unwrap_or(rest.len())].to_string())
    };
    let explain = || bus.call("Explain", &["u", &h.pid.to_string()]);
    bus.wait_for(
        "the three rx threads applied",
        std::time::Duration::from_secs(30),
        || {
            let why = explain();
            tids.iter()
                .all(|&t| line(&why, t).is_some_and(|l| l.contains(": applied")))
        },
    );
    let why = explain();
    let [a, b, c] = [tids[0], tids[1], tids[2]].map(|t| line(&why, t).unwrap());
    assert!(!a.contains("past the last"), "{a}\n{why}");
    assert!(!b.contains("past the last"), "{b}\n{why}");
    assert!(
        c.contains("(slot 2, past the last of 2 slots: shares the CPUs of slot 0)"),
        "{c}\n{why}"
    );
    // Slot 2 shares slot 0's CPUs: the first and the last thread have the same mask.
    let mask = |l: &str| {
        l.split(": applied ")
            .nth(1)
            .map(|m| m.split(' ').next().unwrap().to_string())
    };
    assert_eq!(mask(&a), mask(&c), "{why}");
    let log = d.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("more threads than slots"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains(&format!("tid={}", tids[2])) && warnings[0].contains("comm=rx-c"),
        "{}",
        warnings[0]
    );
    h.exit();
}

/// `check`'s doubts, on the E5620: slots that run out and exclusive entries that could
/// take the machine, each at the line and column of the entry's `comm`.
#[test]
fn doubts_name_slots_that_run_out_and_entries_that_could_take_the_machine() {
    use pinnerd::plan::doubts::doubts;
    use pinnerd::plan::{Cpus, Plan};
    use pinnerd::rules::{compile_text, LoadPolicy, RuleSet};
    let d = fixture("xeon-e5620");
    let text = "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"a\"\n\
                [[rule.threads]]\ncomm = \"rx-*\"\ncount = 1\nsmt = \"avoid\"\nwithin = \"0,8\"\n\
                [[rule.threads]]\ncomm = \"tx-*\"\ncount = 1\nsmt = \"avoid\"\nwithin = \"2,4,10,12\"\n\
                [[rule.threads]]\ncomm = \"w-*\"\ncount = 2\nexclusive = true\n";
    let rules = compile_text(Path::new("a.toml"), text, &LoadPolicy::unchecked()).unwrap();
    let cpus = Cpus {
        online: all(&d),
        reserved: CpuSet::new(),
    };
    let plan = Plan::new(&RuleSet::new(rules), &cpus, Some(&d));
    let got: Vec<String> = doubts(&plan).iter().map(|x| x.to_string()).collect();
    assert_eq!(
        got,
        [
            "a.toml:6:8: warning: a.threads[0]: 1 slot within 0,8: every thread of the entry shares its CPUs (give it more CPUs, or `within`)",
            "a.toml:11:8: warning: a.threads[1]: smt = \"avoid\" leaves 2 slots within 2,4,10,12 (one per core): threads past slot 1 share a core",
            "a.toml:16:8: warning: a.threads[2] is exclusive: its 8 slots could take 16 of the 16 usable CPUs as threads appear (more than half); with every slot taken no CPU pair is left to measure latencies on",
        ]
    );
}

/// A rule written for a bigger machine: `check` names the CPUs it lacks instead of
/// counting them as taken, and so does `plan --live`'s rule line.
#[test]
fn doubts_name_explicit_cpus_the_machine_does_not_have() {
    use pinnerd::plan::doubts::doubts;
    use pinnerd::plan::{Cpus, Plan};
    use pinnerd::rules::{compile_text, LoadPolicy, RuleSet};
    let text = "[[rule]]\nname = \"far\"\n[rule.match]\ncomm = \"far\"\n[rule.place]\ncpus = \"6-7\"\nexclusive = true\n\
                [[rule]]\nname = \"part\"\n[rule.match]\ncomm = \"part\"\n[rule.place]\ncpus = \"1-3\"\n";
    let rules = compile_text(Path::new("a.toml"), text, &LoadPolicy::unchecked()).unwrap();
    let cpus = Cpus {
        online: "0-1".parse().unwrap(),
        reserved: CpuSet::new(),
    };
    let plan = Plan::new(&RuleSet::new(rules), &cpus, None);
    let got: Vec<String> = doubts(&plan).iter().map(|x| x.to_string()).collect();
    assert_eq!(
        got,
        [
            "a.toml:2:8: warning: far: `cpus`: CPUs 6-7 are not online on this machine (online: 0-1): none of them can be used, its threads stay where they are",
            "a.toml:9:8: warning: part: `cpus`: CPUs 2-3 are not online on this machine (online: 0-1): only CPU 1 is used",
        ]
    );
}

/// `plan --live` says on the rule's line what `check` warns of: explicit `cpus` the
/// machine lacks (the E5620 has CPUs 0-15).
#[test]
fn plan_live_says_which_explicit_cpus_the_machine_lacks() {
    let dirs = super::daemon::Dirs::new();
    dirs.write_rule(
        "10-far.toml",
        "[[rule]]\nname = \"far\"\n[rule.match]\ncomm = \"sl-far\"\n[rule.place]\ncpus = \"15-17\"\n",
    );
    let h = super::helper::Helper::spawn(dirs.root.path(), "sl-far");
    let run = plan_live(&dirs, "xeon-e5620", false);
    h.exit();
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("far"))
        .unwrap_or_else(|| panic!("no line of rule far in:\n{}", run.stdout));
    assert!(
        line.contains(
            "CPUs 16-17 are not online on this machine (online: 0-15): only CPU 15 is used"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn check_warns_before_the_daemon_acts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mc.toml");
    std::fs::write(
        &file,
        "[[rule]]\nname = \"mc\"\n[rule.match]\ncomm = \"memcached\"\n[rule.place]\ncpus = \"0\"\n[[rule.threads]]\ncomm = \"mc-worker\"\ncount = 1\n",
    )
    .unwrap();
    let out = super::helper::pinnerd(&["check", "--no-permissions", file.to_str().unwrap()]);
    assert!(out.ok, "{out:?}");
    assert_eq!(
        out.stdout,
        format!(
            "{}:8:8: warning: mc.threads[0]: 1 slot carved from [rule.place] cpus 0: every thread of the entry shares its CPUs (give it more CPUs, or `within`)\nok: 1 file, 1 rule\n",
            file.display()
        )
    );
}

/// `core-type` and `prefer` shape every slot: E-cores only, never widened; the
/// V-cache CCD first, then the other.
#[test]
fn shape_keys_shape_every_slot() {
    use pinnerd::plan::Choose;
    use pinnerd::rules::{CpuTarget, PlacementRequest};
    use pinnerd::shape::{Devices, Facts, Prefer, Shape, Shaper};
    use pinnerd::topology::CoreType;
    let machine = |name: &str| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name);
        let t = Topology::from_sysroot(&SysRoot::machine(dir)).unwrap();
        let d = Domains::from_topology(&t).unwrap();
        (Facts::from_topology(&t), d)
    };
    let request = |shape: Shape| PlacementRequest {
        target: CpuTarget::Count(1),
        within: None,
        policy: Policy::Compact,
        smt: SmtPolicy::Avoid,
        exclusive: false,
        shape,
    };
    let devices = Devices::default();
    let (facts, d) = machine("i9-12900k");
    let shaper = Shaper {
        domains: &d,
        facts: &facts,
        devices: &devices,
    };
    let e_cores = request(Shape {
        core_type: Some(CoreType::Efficiency),
        ..Shape::default()
    });
    let s = shaper.slots(&e_cores, &all(&d)).unwrap();
    let got: CpuSet = s.iter().fold(CpuSet::new(), |a, c| a.union(&c.cpus));
    assert_eq!(got.to_string(), "16-23");
    assert_eq!(s.len(), 8);

    let (facts, d) = machine("r9-7950x3d");
    let shaper = Shaper {
        domains: &d,
        facts: &facts,
        devices: &devices,
    };
    let cache = request(Shape {
        prefer: Some(Prefer::Cache),
        ..Shape::default()
    });
    let s = shaper.slots(&cache, &all(&d)).unwrap();
    // One slot per core, the V-cache CCD's eight cores first.
    assert_eq!(s.len(), 16);
    let first: CpuSet = s[..8].iter().fold(CpuSet::new(), |a, c| a.union(&c.cpus));
    let vcache = facts_llc_of(&d, s[0].cpus.first().unwrap());
    assert!(first.is_subset(&vcache), "{first} not in {vcache}");
}

/// The last-level-cache group (the level below the machine) of `cpu`.
fn facts_llc_of(d: &Domains, cpu: u32) -> CpuSet {
    let l = d.levels().len() - 2;
    d.levels()[l].groups[d.group_of(l, d.index_of(cpu).unwrap())].clone()
}
