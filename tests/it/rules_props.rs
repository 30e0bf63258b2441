//! Properties of rule files: any file the format can hold loads or fails with a located
//! error, and what loads matches and places as written.

use pinnerd::affinity::sched::SchedPolicy;
use std::fs;
use std::path::PathBuf;

use pinnerd::cpuset::CpuSet;
use pinnerd::placement::{Policy, SmtPolicy};
use pinnerd::rules::format::{
    self, MatchSpec, OneOrMany, PlaceSpec, RuleFile, RuleSpec, ThreadSpec, UserSpec,
};
use pinnerd::rules::{self, LoadPolicy, ProcessInfo, RuleSet};
use pinnerd::shape::Prefer;
use pinnerd::topology::CoreType;
use proptest::prelude::*;
use toml::Spanned;

fn sp<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
}

fn one_or_many<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = OneOrMany<T>> {
    prop_oneof![
        s.clone().prop_map(OneOrMany::One),
        prop::collection::vec(s, 1..4).prop_map(OneOrMany::Many),
    ]
}

fn text() -> impl Strategy<Value = String> + Clone {
    // Anything TOML strings can carry: quotes, backslashes, newlines, unicode.
    "(\\PC|[\"\\\\\n\t'])*"
}

fn cpuset() -> impl Strategy<Value = CpuSet> + Clone {
    prop::collection::vec(0u32..3000, 0..20).prop_map(|v| v.into_iter().collect())
}

fn user() -> impl Strategy<Value = UserSpec> + Clone {
    prop_oneof![
        "[a-z_][a-z0-9_-]{0,10}".prop_map(UserSpec::Name),
        (0u32..u32::MAX).prop_map(UserSpec::Uid),
    ]
}

fn policy() -> impl Strategy<Value = Policy> + Clone {
    prop_oneof![Just(Policy::Compact), Just(Policy::Spread)]
}

fn smt() -> impl Strategy<Value = SmtPolicy> + Clone {
    prop_oneof![
        Just(SmtPolicy::Allow),
        Just(SmtPolicy::Avoid),
        Just(SmtPolicy::PreferSiblings)
    ]
}

fn match_spec() -> impl Strategy<Value = MatchSpec> {
    (
        proptest::option::of(one_or_many(text())),
        proptest::option::of(one_or_many(text())),
        proptest::option::of(text()),
        proptest::option::of(one_or_many(user())),
        proptest::option::of(one_or_many(text())),
        proptest::option::of(one_or_many(text())),
        (
            proptest::option::of(one_or_many(text())),
            proptest::option::of(one_or_many(text())),
            proptest::option::of(one_or_many(text())),
            proptest::option::of(prop::collection::btree_map(text(), text(), 0..3)),
        ),
    )
        .prop_map(
            |(comm, exe, cmdline, user, cgroup, unit, (container, pod, namespace, labels))| {
                MatchSpec {
                    comm: comm.map(sp),
                    exe: exe.map(sp),
                    cmdline: cmdline.map(sp),
                    user: user.map(sp),
                    cgroup: cgroup.map(sp),
                    unit: unit.map(sp),
                    container: container.map(sp),
                    pod: pod.map(sp),
                    pod_namespace: namespace.map(sp),
                    pod_labels: labels
                        .map(|l| sp(l.into_iter().map(|(k, v)| (k, sp(v))).collect())),
                }
            },
        )
}

type PlaceParts = (
    Option<CpuSet>,
    Option<u32>,
    Option<CpuSet>,
    Option<Policy>,
    Option<SmtPolicy>,
    Option<bool>,
);

fn place_parts() -> impl Strategy<Value = PlaceParts> {
    (
        proptest::option::of(cpuset()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(cpuset()),
        proptest::option::of(policy()),
        proptest::option::of(smt()),
        proptest::option::of(any::<bool>()),
    )
}

type ShapeParts = (Option<CoreType>, Option<Prefer>, Option<String>);

fn shape_parts() -> impl Strategy<Value = ShapeParts> {
    (
        proptest::option::of(prop_oneof![
            Just(CoreType::Performance),
            Just(CoreType::Efficiency)
        ]),
        proptest::option::of(prop_oneof![Just(Prefer::Cache), Just(Prefer::Frequency)]),
        proptest::option::of(text()),
    )
}

fn place_spec() -> impl Strategy<Value = PlaceSpec> {
    (place_parts(), shape_parts()).prop_map(
        |((cpus, count, within, policy, smt, exclusive), (core_type, prefer, near))| PlaceSpec {
            cpus: cpus.map(sp),
            count: count.map(sp),
            within: within.map(sp),
            policy: policy.map(sp),
            smt: smt.map(sp),
            exclusive: exclusive.map(sp),
            core_type: core_type.map(sp),
            prefer: prefer.map(sp),
            near: near.map(sp),
            // Only ever with exclusive (the compiler refuses it alone).
            isolate: exclusive.map(sp),
            sched_policy: exclusive.filter(|e| *e).map(|_| sp(SchedPolicy::Fifo)),
            sched_priority: exclusive.filter(|e| *e).map(|_| sp(10)),
            nice: exclusive.filter(|e| !*e).map(|_| sp(5)),
            unit_cpuset: exclusive.map(|e| sp(!e)),
            // Only ever with exclusive, as isolate.
            idle_limit_us: exclusive.filter(|e| *e).map(|_| Box::new(sp(10))),
            latency_critical: exclusive.map(|e| sp(!e)),
            irqs: exclusive.map(|e| {
                sp(if e {
                    pinnerd::rules::format::Irqs::Away
                } else {
                    pinnerd::rules::format::Irqs::Leave
                })
            }),
            memory: exclusive.map(|e| {
                sp(if e {
                    pinnerd::rules::format::Memory::Leave
                } else {
                    pinnerd::rules::format::Memory::Follow
                })
            }),
        },
    )
}

fn thread_spec() -> impl Strategy<Value = ThreadSpec> {
    (
        one_or_many(text()),
        place_parts(),
        proptest::option::of(any::<bool>()),
        shape_parts(),
    )
        .prop_map(
            |(
                comm,
                (cpus, count, within, policy, smt, exclusive),
                shared,
                (core_type, prefer, near),
            )| ThreadSpec {
                comm: sp(comm),
                cpus: cpus.map(sp),
                count: count.map(sp),
                within: within.map(sp),
                policy: policy.map(sp),
                smt: smt.map(sp),
                exclusive: exclusive.map(sp),
                shared: shared.map(sp),
                core_type: core_type.map(sp),
                prefer: prefer.map(sp),
                near: near.map(sp),
                isolate: exclusive.map(sp),
                sched_policy: exclusive.filter(|e| *e).map(|_| sp(SchedPolicy::Rr)),
                sched_priority: exclusive.filter(|e| *e).map(|_| sp(99)),
                nice: exclusive.filter(|e| !*e).map(|_| sp(-20)),
            },
        )
}

fn rule_spec() -> impl Strategy<Value = RuleSpec> {
    (
        text(),
        proptest::option::of(any::<i32>()),
        proptest::option::of(match_spec()),
        proptest::option::of(place_spec()),
        prop::collection::vec(thread_spec(), 0..3),
    )
        .prop_map(|(name, priority, matches, place, threads)| RuleSpec {
            name: sp(name),
            priority: priority.map(sp),
            matches: matches.map(|m| sp(Box::new(m))),
            place: place.map(|p| sp(Box::new(p))),
            threads: threads.into_iter().map(sp).collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Parse → serialise → parse is the identity, for any file the format can hold.
    #[test]
    fn serialise_then_parse_is_the_identity(rules in prop::collection::vec(rule_spec(), 0..4)) {
        let file = RuleFile { rules: rules.into_iter().map(sp).collect() };
        let text = format::to_toml(&file).unwrap();
        let back = format::parse(&text)
            .unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
        prop_assert_eq!(&back, &file);
        let again = format::to_toml(&back).unwrap();
        prop_assert_eq!(again, text);
    }
}

#[test]
fn the_shipped_examples_survive_a_round_trip() {
    let dir = super::rules::repo("config/pinnerd.d");
    for entry in fs::read_dir(dir).unwrap() {
        let text = fs::read_to_string(entry.unwrap().path()).unwrap();
        let parsed = format::parse(&text).unwrap();
        let back = format::parse(&format::to_toml(&parsed).unwrap()).unwrap();
        assert_eq!(back, parsed);
    }
}

const COMMS: [&str; 6] = ["app", "app-rx", "apx", "db", "dbw", "zz"];
const GLOBS: [&str; 8] = ["app*", "ap?", "db", "db*", "*", "{app,db}", "*w", "*-rx"];

/// A small rule: name, priority in a narrow range (so ties happen), a comm glob or
/// none (a uid match instead).
#[derive(Debug, Clone)]
struct Small {
    name: String,
    priority: i32,
    comm: Option<&'static str>,
}

fn small_rules() -> impl Strategy<Value = Vec<Small>> {
    prop::collection::btree_map(
        "[a-e]{1,3}",
        (
            -1i32..=1,
            proptest::option::of(prop::sample::select(GLOBS.to_vec())),
        ),
        1..12,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(name, (priority, comm))| Small {
                name,
                priority,
                comm,
            })
            .collect()
    })
}

fn toml_of(r: &Small) -> String {
    let m = match r.comm {
        Some(g) => format!("comm = \"{g}\""),
        None => "user = 0".to_string(),
    };
    format!(
        "[[rule]]\nname = \"{}\"\npriority = {}\n[rule.match]\n{m}\n[rule.place]\ncount = 1\n",
        r.name, r.priority
    )
}

/// The specification, written as plainly as possible: among the rules that match,
/// the highest priority, then the smallest name.
fn oracle(rules: &[Small], comm: &str) -> Option<String> {
    rules
        .iter()
        .filter(|r| match r.comm {
            None => true, // uid 0 below
            Some(g) => globset::Glob::new(g)
                .unwrap()
                .compile_matcher()
                .is_match(comm),
        })
        .min_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)))
        .map(|r| r.name.clone())
}

fn winners(set: &RuleSet) -> Vec<Option<String>> {
    COMMS
        .iter()
        .map(|c| {
            let p = ProcessInfo {
                comm: c.to_string(),
                uid: 0,
                ..ProcessInfo::default()
            };
            let fast = set.match_process(&p).map(|m| m.rule.name.clone());
            // The fast path (index, no explanations) and Explain always agree.
            let explained = set.explain(&p).winner.map(|m| m.rule.name.clone());
            assert_eq!(fast, explained, "comm {c}");
            fast
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Which rule wins does not depend on how rules are spread over files, on the
    /// files' names (their load order), or on the order rules are handed over.
    #[test]
    fn the_winner_does_not_depend_on_files_or_order(
        rules in small_rules(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let expected: Vec<Option<String>> = COMMS.iter().map(|c| oracle(&rules, c)).collect();
        for seed in [seed_a, seed_b] {
            let dir = tempfile::tempdir().unwrap();
            // Spread rules over up to 4 files whose names sort in a seed-dependent order.
            let mut files: Vec<String> = vec![String::new(); 4];
            for (i, r) in rules.iter().enumerate() {
                let f = (seed.rotate_left(i as u32 * 7) % 4) as usize;
                files[f].push_str(&toml_of(r));
            }
            for (i, text) in files.iter().enumerate() {
                let name = format!("{:x}-{i}.toml", seed.rotate_left(i as u32 * 13) & 0xfff);
                fs::write(dir.path().join(name), text).unwrap();
            }
            let report = rules::load_dirs(&[PathBuf::from(dir.path())], &LoadPolicy::unchecked());
            prop_assert!(report.is_clean(), "{:?}", report.error_strings());
            prop_assert_eq!(winners(&report.rules), expected.clone());
        }
        // Handing the compiled rules over in reverse changes nothing either.
        let all: String = rules.iter().map(toml_of).collect();
        let mut compiled = rules::compile_text("x.toml".as_ref(), &all, &LoadPolicy::unchecked()).unwrap();
        compiled.reverse();
        prop_assert_eq!(winners(&RuleSet::new(compiled)), expected);
    }
}
