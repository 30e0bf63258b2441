//! Unit tests over text: parse, compile, match.

use std::path::Path;

use super::*;
use crate::placement::{Policy, SmtPolicy};

fn users(name: &str) -> Option<u32> {
    match name {
        "root" => Some(0),
        "trader" => Some(1001),
        _ => None,
    }
}

fn policy() -> LoadPolicy {
    LoadPolicy {
        users,
        ..LoadPolicy::unchecked()
    }
}

fn compile(text: &str) -> Result<Vec<Rule>, Vec<String>> {
    compile_text(Path::new("t.toml"), text, &policy())
        .map_err(|es| es.iter().map(ToString::to_string).collect())
}

fn err(text: &str) -> String {
    compile(text).unwrap_err().join("\n")
}

const FEED: &str = r#"
[[rule]]
name = "md-feed"
priority = 50
[rule.match]
comm = "md-feed*"
exe = "/opt/md/bin/*"
cmdline = "--venue=X"
user = "trader"
cgroup = "/system.slice/md-feed.service"
unit = "md-feed.service"
[rule.place]
count = 4
policy = "compact"
smt = "avoid"
exclusive = true
[[rule.threads]]
comm = "rx-*"
count = 1
"#;

fn feed_process() -> ProcessInfo {
    ProcessInfo {
        pid: 42,
        comm: "md-feed".into(),
        exe: Some("/opt/md/bin/md-feed".into()),
        cmdline: vec!["/opt/md/bin/md-feed".into(), "--venue=X".into()],
        uid: 1001,
        cgroup: Some("/system.slice/md-feed.service".into()),
        threads: vec![
            ThreadInfo {
                tid: 42,
                comm: "md-feed".into(),
            },
            ThreadInfo {
                tid: 43,
                comm: "rx-0".into(),
            },
        ],
        container: None,
    }
}

#[test]
fn the_documented_example_compiles_and_matches() {
    let rules = compile(FEED).unwrap();
    assert_eq!(rules.len(), 1);
    let r = &rules[0];
    assert_eq!(r.name, "md-feed");
    assert_eq!(r.priority, 50);
    assert_eq!(r.at, Location { line: 3, col: 8 });
    assert_eq!(r.matcher.users, Some(vec![1001]));
    assert_eq!(
        r.place,
        Some(PlacementRequest {
            target: CpuTarget::Count(4),
            within: None,
            policy: Policy::Compact,
            smt: SmtPolicy::Avoid,
            exclusive: true,
            shape: Default::default(),
        })
    );
    let set = RuleSet::new(rules);
    let m = set.match_process(&feed_process()).unwrap();
    assert_eq!(m.rule.name, "md-feed");
    assert_eq!(
        m.threads,
        vec![
            ThreadAssignment {
                tid: 42,
                placement: ThreadPlacement::Process
            },
            ThreadAssignment {
                tid: 43,
                placement: ThreadPlacement::Thread(0)
            },
        ]
    );
    let mut other = feed_process();
    other.uid = 0;
    assert!(set.match_process(&other).is_none());
    let why = set.explain(&other).to_string();
    assert!(
        why.contains("md-feed: no match: uid 0 is not 1001"),
        "{why}"
    );
}

#[test]
fn errors_point_at_the_value() {
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"x[\"\n[rule.place]\ncpus = \"1\"\n"),
        "t.toml:4:8: comm: bad glob \"x[\": unclosed character class; missing ']'"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\nfoo = 1\n"),
        "t.toml:3:1: unknown field `foo`, expected one of `name`, `priority`, `match`, `place`, `threads`"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.place]\ncpus = \"1\"\n"),
        "t.toml:1:1: rule \"a\" has no [rule.match] section: a rule must say which processes it applies to"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"a\"\n[rule.place]\ncpus = \"1-3\"\ncount = 2\n"),
        "t.toml:6:8: [rule.place]: `cpus` and `count` cannot both be given"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"a\"\n[rule.place]\ncpus = \"3-1\"\n"),
        "t.toml:6:8: invalid CPU list token \"3-1\": range is reversed (start > end)"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\nuser = \"nobody-here\"\n[rule.place]\ncount = 1\n"),
        "t.toml:4:8: user: unknown user \"nobody-here\""
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\ncmdline = \"(\"\n[rule.place]\ncount = 1\n"),
        "t.toml:4:11: cmdline: bad regex \"(\": unclosed group"
    );
}

#[test]
fn duplicate_names_in_one_file() {
    let text = "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"a\"\n[rule.place]\ncount = 1\n\
                [[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"b\"\n[rule.place]\ncount = 1\n";
    assert_eq!(
        err(text),
        "t.toml:8:8: duplicate rule name \"a\" (first defined at t.toml:2:8)"
    );
}

#[test]
fn units_come_from_cgroup_paths() {
    assert_eq!(
        unit_of_cgroup("/system.slice/md.service"),
        Some("md.service")
    );
    assert_eq!(
        unit_of_cgroup("/system.slice/docker.service/sub"),
        Some("docker.service")
    );
    assert_eq!(
        unit_of_cgroup("/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope"),
        Some("user@1000.service")
    );
    assert_eq!(unit_of_cgroup("/"), None);
    assert_eq!(unit_of_cgroup("/batch.slice"), None);
    assert_eq!(
        slices_of_cgroup("/batch.slice/job-1.scope").collect::<Vec<_>>(),
        vec!["batch.slice"]
    );
}

/// A slice a user makes with `systemd-run --user --slice=batch` sits below their
/// manager's `user@UID.service`; one made inside any unit's subtree sits below that
/// unit. Neither is the system's `batch.slice`.
#[test]
fn a_unit_pattern_matches_only_the_system_managers_slices_and_units() {
    assert_eq!(
        slices_of_cgroup(
            "/user.slice/user-1000.slice/user@1000.service/batch.slice/run-u7.service"
        )
        .collect::<Vec<_>>(),
        vec!["user.slice", "user-1000.slice"]
    );
    assert_eq!(
        slices_of_cgroup("/system.slice/cron.service/batch.slice").collect::<Vec<_>>(),
        vec!["system.slice"]
    );
    assert_eq!(unit_of_cgroup("/docker/abc/md-feed.service"), None);
    assert_eq!(
        unit_of_cgroup("/system.slice/md.service/inner.slice/x.service"),
        Some("md.service")
    );
    let rules =
        compile("[[rule]]\nname = \"batch\"\n[rule.match]\nunit = \"batch.slice\"\n[rule.place]\ncount = 1\n")
            .unwrap();
    let set = RuleSet::new(rules);
    let at = |cgroup: &str| ProcessInfo {
        comm: "job".into(),
        cgroup: Some(cgroup.into()),
        ..ProcessInfo::default()
    };
    assert!(set.match_process(&at("/batch.slice/job-1.scope")).is_some());
    assert!(set
        .match_process(&at("/system.slice/batch.slice/x.service"))
        .is_some());
    let users = at("/user.slice/user-4343.slice/user@4343.service/batch.slice/run-u7.service");
    assert!(set.match_process(&users).is_none());
    assert_eq!(
        set.explain(&users)
            .to_string()
            .lines()
            .find(|l| l.contains("batch:")),
        Some("  batch: no match: unit \"user@4343.service\" does not match \"batch.slice\"")
    );
}

#[test]
fn precedence_is_priority_then_name() {
    let text = |name: &str, prio: i32| {
        format!("[[rule]]\nname = \"{name}\"\npriority = {prio}\n[rule.match]\ncomm = \"w*\"\n[rule.place]\ncount = 1\n")
    };
    let mut rules = compile(&text("b", 5)).unwrap();
    rules.extend(compile(&text("a", 5)).unwrap());
    rules.extend(compile(&text("c", 1)).unwrap());
    let set = RuleSet::new(rules);
    let p = ProcessInfo {
        comm: "worker".into(),
        ..ProcessInfo::default()
    };
    assert_eq!(set.match_process(&p).unwrap().rule.name, "a");
    let why = set.explain(&p).to_string();
    assert!(
        why.contains("b: matched, loses to \"a\" (same priority 5, and \"a\" sorts first by name)"),
        "{why}"
    );
    assert!(
        why.contains("c: matched, loses to \"a\" (priority 1 < 5)"),
        "{why}"
    );
}

#[test]
fn every_key_explains_its_mismatch() {
    let rules = compile(
        "[[rule]]\nname = \"exe\"\n[rule.match]\nexe = \"/opt/*\"\n[rule.place]\ncount = 1\n\
         [[rule]]\nname = \"cg\"\n[rule.match]\ncgroup = [\"/a/*\", \"/b/*\"]\n[rule.place]\ncount = 1\n\
         [[rule]]\nname = \"unit\"\n[rule.match]\nunit = \"db.service\"\n[rule.place]\ncount = 1\n\
         [[rule]]\nname = \"slice\"\n[rule.match]\nunit = \"batch.slice\"\n[rule.place]\ncpus = \"0\"\n\
         [[rule]]\nname = \"cmd\"\n[rule.match]\ncmdline = \"^x --y$\"\n[rule.place]\ncount = 1\n",
    )
    .unwrap();
    let set = RuleSet::new(rules);
    let p = ProcessInfo {
        pid: 7,
        comm: "job".into(),
        exe: None,
        cmdline: vec!["x".into(), "--z".into()],
        uid: 0,
        cgroup: Some("/batch.slice/job-1.scope".into()),
        threads: vec![],
        container: None,
    };
    let why = set.explain(&p);
    let lines: Vec<String> = why.to_string().lines().map(str::to_string).collect();
    assert_eq!(
        lines,
        [
            "pid 7 (job): rule \"slice\" (t.toml:20:8, priority 0)",
            "  cg: no match: cgroup \"/batch.slice/job-1.scope\" matches none of [\"/a/*\", \"/b/*\"]",
            "  cmd: no match: cmdline \"x --z\" does not match /^x --y$/",
            "  exe: no match: exe is unknown (not readable)",
            "  slice: matched, wins",
            "  unit: no match: unit \"job-1.scope\" does not match \"db.service\"",
        ]
    );
    assert_eq!(set.match_process(&p).unwrap().rule.name, "slice");
    let no_cgroup = ProcessInfo {
        cgroup: None,
        ..p.clone()
    };
    let why = set.explain(&no_cgroup).to_string();
    assert!(why.contains("  cg: no match: cgroup is unknown\n"), "{why}");
    assert!(
        why.contains("  unit: no match: unit is unknown (cgroup unknown)\n"),
        "{why}"
    );
    assert!(set.match_process(&no_cgroup).is_none());
}

#[test]
fn threads_take_the_first_entry_that_matches_then_the_process_placement() {
    let rules = compile(
        "[[rule]]\nname = \"t\"\n[rule.match]\ncomm = \"app\"\n\
         [[rule.threads]]\ncomm = \"rx-*\"\ncount = 1\n\
         [[rule.threads]]\ncomm = [\"rx-0\", \"tx-*\"]\ncount = 2\nshared = true\n",
    )
    .unwrap();
    let r = &rules[0];
    assert_eq!(r.thread_placement("rx-0"), Some(ThreadPlacement::Thread(0)));
    assert_eq!(r.thread_placement("tx-9"), Some(ThreadPlacement::Thread(1)));
    // No [rule.place]: other threads are left alone.
    assert_eq!(r.thread_placement("main"), None);
    assert!(r.threads[1].shared);
    assert_eq!(
        r.request(ThreadPlacement::Thread(1)).unwrap().target,
        CpuTarget::Count(2)
    );
}

#[test]
fn latency_critical_is_a_key_of_rule_place_and_off_by_default() {
    let rule = |extra: &str| {
        format!("[[rule]]\nname = \"lc\"\n[rule.match]\ncomm = \"lc\"\n[rule.place]\ncpus = \"1\"\n{extra}")
    };
    assert!(!compile(&rule("")).unwrap()[0].latency_critical);
    assert!(compile(&rule("latency-critical = true\n")).unwrap()[0].latency_critical);
    assert!(!compile(&rule("latency-critical = false\n")).unwrap()[0].latency_critical);
    let e = err(&rule("latency-critical = \"yes\"\n"));
    assert!(e.starts_with("t.toml:7:"), "{e}");
    // Not a thread entry's key: the whole rule is latency-critical or not.
    let e = err("[[rule]]\nname = \"lc\"\n[rule.match]\ncomm = \"lc\"\n[[rule.threads]]\ncomm = \"w\"\ncpus = \"1\"\nlatency-critical = true\n");
    assert!(
        e.contains("t.toml:8:1") && e.contains("latency-critical"),
        "{e}"
    );
}

#[test]
fn irqs_away_is_a_key_of_rule_place() {
    let rule = |extra: &str| {
        format!("[[rule]]\nname = \"i\"\n[rule.match]\ncomm = \"i\"\n[rule.place]\ncpus = \"1\"\n{extra}")
    };
    assert!(!compile(&rule("")).unwrap()[0].irqs_away);
    assert!(!compile(&rule("irqs = \"leave\"\n")).unwrap()[0].irqs_away);
    assert!(compile(&rule("irqs = \"away\"\n")).unwrap()[0].irqs_away);
    let e = err(&rule("irqs = \"off\"\n"));
    assert!(e.starts_with("t.toml:7:8:") && e.contains("away"), "{e}");
}

#[test]
fn memory_follow_is_a_key_of_rule_place() {
    let rule = |extra: &str| {
        format!(
            "[[rule]]\nname = \"m\"\n[rule.match]\ncomm = \"m\"\n[rule.place]\ncount = 2\n{extra}"
        )
    };
    assert!(!compile(&rule("")).unwrap()[0].memory_follow);
    assert!(!compile(&rule("memory = \"leave\"\n")).unwrap()[0].memory_follow);
    assert!(compile(&rule("memory = \"follow\"\n")).unwrap()[0].memory_follow);
    let e = err(&rule("memory = \"bind\"\n"));
    assert!(e.starts_with("t.toml:7:10:") && e.contains("follow"), "{e}");
}

#[test]
fn isolate_needs_exclusive_in_both_tables_and_unit_cpuset_is_a_key_of_rule_place() {
    let place = |extra: &str| {
        format!("[[rule]]\nname = \"i\"\n[rule.match]\ncomm = \"i\"\nuser = 0\n[rule.place]\ncpus = \"1\"\n{extra}")
    };
    let r = &compile(&place("exclusive = true\nisolate = true\n")).unwrap()[0];
    assert!(r.isolate && !r.unit_cpuset);
    assert!(!compile(&place("")).unwrap()[0].isolate);
    let e = err(&place("isolate = true\n"));
    assert!(
        e.starts_with("t.toml:8:11:") && e.contains("`isolate = true` needs `exclusive = true`"),
        "{e}"
    );
    assert!(compile(&place("unit-cpuset = true\n")).unwrap()[0].unit_cpuset);
    let thread = |extra: &str| {
        format!("[[rule]]\nname = \"t\"\n[rule.match]\ncomm = \"t\"\nuser = 0\n[[rule.threads]]\ncomm = \"w\"\ncpus = \"1\"\n{extra}")
    };
    let r = &compile(&thread("exclusive = true\nisolate = true\n")).unwrap()[0];
    assert!(r.threads[0].isolate && !r.isolate);
    let e = err(&thread("isolate = true\n"));
    assert!(
        e.starts_with("t.toml:9:11:") && e.contains("[[rule.threads]]"),
        "{e}"
    );
    // With [rule.place], that too must be exclusive: the partition is the process's.
    let both = |place_extra: &str| {
        format!("[[rule]]\nname = \"t\"\n[rule.match]\ncomm = \"t\"\nuser = 0\n[rule.place]\ncpus = \"0-1\"\n{place_extra}[[rule.threads]]\ncomm = \"w\"\ncpus = \"1\"\nexclusive = true\nisolate = true\n")
    };
    let e = err(&both(""));
    assert!(
        e.starts_with("t.toml:12:11:") && e.contains("[rule.place] needs `exclusive = true` too"),
        "{e}"
    );
    assert!(compile(&both("exclusive = true\n")).unwrap()[0].threads[0].isolate);
    // Not a thread entry's key: a unit is the process's.
    let e = err(&thread("unit-cpuset = true\n"));
    assert!(e.contains("t.toml:9:1") && e.contains("unit-cpuset"), "{e}");
}

/// Anyone can start a process with any comm, exe path or command line, so a rule that
/// changes the machine for everyone (an isolated partition, a confined unit) must name
/// what a user cannot choose: the owner or a system unit.
#[test]
fn a_hold_rule_must_name_its_user_or_unit() {
    let rule = |matches: &str, place: &str, threads: &str| {
        format!("[[rule]]\nname = \"h\"\n[rule.match]\n{matches}[rule.place]\ncpus = \"2-3\"\nexclusive = true\n{place}{threads}")
    };
    let comm_only = "comm = \"md-feed\"\ncmdline = \"--venue\"\n";
    let e = err(&rule(comm_only, "isolate = true\n", ""));
    assert_eq!(
        e,
        "t.toml:9:11: rule \"h\": `isolate = true` changes the machine for every user, so the rule must name whose processes may trigger it: add `user` (the owners, e.g. `user = \"mdfeed\"`) or `unit` (a system service: its main process) to [rule.match]; comm, exe, cmdline and cgroup are chosen by whoever starts the process"
    );
    let e = err(&rule(comm_only, "unit-cpuset = true\n", ""));
    assert!(
        e.starts_with("t.toml:9:15: rule \"h\": `unit-cpuset = true`"),
        "{e}"
    );
    let e = err(&rule(
        "exe = \"/opt/md/*\"\ncgroup = \"/system.slice/*\"\n",
        "",
        "[[rule.threads]]\ncomm = \"rx\"\ncpus = \"4\"\nexclusive = true\nisolate = true\n",
    ));
    assert!(
        e.starts_with("t.toml:13:11: rule \"h\": `isolate = true`"),
        "{e}"
    );
    // The owner or a unit: either is enough; a rule that holds nothing needs neither.
    let user = "comm = \"md-feed\"\nuser = 0\n";
    assert!(compile(&rule(user, "isolate = true\nunit-cpuset = true\n", "")).unwrap()[0].isolate);
    let unit = "unit = \"md-feed.service\"\n";
    assert!(compile(&rule(unit, "isolate = true\n", "")).unwrap()[0].isolate);
    assert!(compile(&rule(comm_only, "", "")).is_ok());
}

const CONTAINER_RULE: &str = r#"
[[rule]]
name = "md-feed"
[rule.match]
container = "md-feed"
pod = "api-*"
pod-namespace = "trading"
pod-labels = { app = "md-*" }
[rule.place]
count = 2
exclusive = true
memory = "follow"
"#;

fn feed_container() -> ContainerInfo {
    ContainerInfo {
        name: "md-feed".into(),
        pod: "api-0".into(),
        namespace: "trading".into(),
        labels: Some([("app".to_string(), "md-feed".to_string())].into()),
    }
}

#[test]
fn container_keys_match_a_container_at_creation_all_of_them() {
    let set = RuleSet::new(compile(CONTAINER_RULE).unwrap());
    assert_eq!(
        set.match_container(&feed_container()).unwrap().name,
        "md-feed"
    );
    let other_ns = ContainerInfo {
        namespace: "web".into(),
        ..feed_container()
    };
    assert!(set.match_container(&other_ns).is_none());
    let other_label = ContainerInfo {
        labels: Some([("app".to_string(), "web".to_string())].into()),
        ..feed_container()
    };
    assert!(set.match_container(&other_label).is_none());
    // Labels are known only through NRI: a rule that asks for one does not match
    // without them.
    let unlabelled = ContainerInfo {
        labels: None,
        ..feed_container()
    };
    assert!(set.match_container(&unlabelled).is_none());
}

#[test]
fn a_process_in_a_container_matches_container_keys_and_one_outside_does_not() {
    let set = RuleSet::new(compile(CONTAINER_RULE).unwrap());
    let inside = ProcessInfo {
        container: Some(feed_container()),
        ..feed_process()
    };
    assert_eq!(set.match_process(&inside).unwrap().rule.name, "md-feed");
    assert!(set.match_process(&feed_process()).is_none());
    let why = set.explain(&feed_process());
    assert_eq!(
        why.verdicts[0].outcome,
        Standing::NoMatch("the process is in no known container".into())
    );
    let elsewhere = ProcessInfo {
        container: Some(ContainerInfo {
            name: "web".into(),
            ..feed_container()
        }),
        ..feed_process()
    };
    assert_eq!(
        set.explain(&elsewhere).verdicts[0].outcome,
        Standing::NoMatch("container \"web\" does not match \"md-feed\"".into())
    );
}

#[test]
fn container_keys_and_process_keys_are_anded_and_such_a_rule_waits_for_the_process() {
    let text = CONTAINER_RULE.replace(
        "container = \"md-feed\"",
        "container = \"md-feed\"\ncomm = \"md-feed\"",
    );
    let set = RuleSet::new(compile(&text).unwrap());
    assert!(set.match_container(&feed_container()).is_none());
    let inside = ProcessInfo {
        container: Some(feed_container()),
        ..feed_process()
    };
    assert!(set.match_process(&inside).is_some());
    let other_comm = ProcessInfo {
        comm: "x".into(),
        ..inside
    };
    assert!(set.match_process(&other_comm).is_none());
}

#[test]
fn container_keys_are_checked_and_holds_are_refused_on_container_rules() {
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\npod = \"x[\"\n[rule.place]\ncount = 1\n"),
        "t.toml:4:7: pod: bad glob \"x[\": unclosed character class; missing ']'"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\npod-labels = { app = \"\" }\n[rule.place]\ncount = 1\n"),
        "t.toml:4:22: pod-labels: bad glob \"\": empty pattern"
    );
    assert_eq!(
        err("[[rule]]\nname = \"a\"\n[rule.match]\npod-labels = 3\n[rule.place]\ncount = 1\n"),
        "t.toml:4:14: invalid type: integer `3`, expected a map"
    );
    let isolated = "[[rule]]\nname = \"a\"\n[rule.match]\ncontainer = \"c\"\n[rule.place]\ncount = 1\nexclusive = true\nisolate = true\n";
    let e = err(isolated);
    assert!(e.starts_with("t.toml:8:11: rule \"a\" names a container: `isolate = true` is not for container rules"), "{e}");
    let unit = "[[rule]]\nname = \"a\"\n[rule.match]\npod = \"c\"\nuser = \"root\"\n[rule.place]\ncount = 1\nunit-cpuset = true\n";
    assert!(err(unit).contains("`unit-cpuset = true` is not for container rules"));
}

#[test]
fn sched_keys_are_compiled_per_table_and_checked() {
    let rule = |place: &str, thread: &str| {
        format!(
            "[[rule]]\nname = \"s\"\n[rule.match]\ncomm = \"s\"\nuser = 0\n[rule.place]\ncpus = \"0-1\"\nexclusive = true\n{place}[[rule.threads]]\ncomm = \"rx\"\ncpus = \"1\"\n{thread}"
        )
    };
    let r = &compile(&rule(
        "sched-policy = \"batch\"\nnice = 5\n",
        "exclusive = true\nsched-policy = \"fifo\"\nsched-priority = 50\n",
    ))
    .unwrap()[0];
    let batch = crate::affinity::sched::Sched {
        policy: crate::affinity::sched::SchedPolicy::Batch,
        priority: 0,
        nice: 5,
    };
    assert_eq!(r.place_sched, Some(batch));
    let fifo = r.threads[0].sched.unwrap();
    assert_eq!(fifo.words(), "fifo 50");
    assert_eq!(compile(&rule("", "")).unwrap()[0].threads[0].sched, None);
    // `nice` alone keeps the normal policy.
    let r = &compile(&rule("nice = -3\n", "")).unwrap()[0];
    assert_eq!(r.place_sched.unwrap().words(), "other nice -3");

    // A real-time policy only on CPUs held exclusive: the entry's own table.
    let e = err(&rule("", "sched-policy = \"fifo\"\nsched-priority = 50\n"));
    assert_eq!(
        e,
        "t.toml:12:16: [[rule.threads]]: `sched-policy = \"fifo\"` needs `exclusive = true`: a real-time thread runs before every other task of its CPUs and starves what else runs there"
    );
    let e = err(&rule("", "exclusive = true\nsched-policy = \"rr\"\n"));
    assert!(
        e.starts_with("t.toml:13:16:") && e.contains("needs `sched-priority`"),
        "{e}"
    );
    let e = err(&rule(
        "",
        "exclusive = true\nsched-policy = \"fifo\"\nsched-priority = 100\n",
    ));
    assert!(
        e.starts_with("t.toml:14:18:") && e.contains("1 to 99"),
        "{e}"
    );
    let e = err(&rule(
        "",
        "exclusive = true\nsched-policy = \"rr\"\nsched-priority = 0\n",
    ));
    assert!(
        e.starts_with("t.toml:14:18:") && e.contains("out of range"),
        "{e}"
    );
    let e = err(&rule("sched-priority = 3\n", ""));
    assert!(
        e.starts_with("t.toml:9:18:") && e.contains("only for"),
        "{e}"
    );
    let e = err(&rule("nice = 20\n", ""));
    assert!(
        e.starts_with("t.toml:9:8:") && e.contains("-20 to 19"),
        "{e}"
    );
    let e = err(&rule("sched-policy = \"idle\"\nnice = 1\n", ""));
    assert!(
        e.starts_with("t.toml:10:8:") && e.contains("not for"),
        "{e}"
    );
    let e = err(&rule("sched-policy = \"deadline\"\n", ""));
    assert!(
        e.starts_with("t.toml:9:16:") && e.contains("fifo, rr"),
        "{e}"
    );

    // What only a privileged user may give needs an owner that cannot be imitated.
    let anyone = rule("nice = -1\n", "").replace("user = 0\n", "");
    let e = err(&anyone);
    assert!(
        e.starts_with("t.toml:8:8:") && e.contains("`nice`") && e.contains("add `user`"),
        "{e}"
    );
    assert!(compile(&rule("nice = 1\n", "").replace("user = 0\n", "")).is_ok());
}

#[test]
fn idle_limit_is_a_key_of_rule_place_on_exclusive_rules_that_name_their_owners() {
    let rule = |matches: &str, place: &str| {
        format!("[[rule]]\nname = \"il\"\n[rule.match]\n{matches}\n[rule.place]\ncpus = \"2-3\"\n{place}")
    };
    let owned = "user = \"root\"";
    let ok = compile(&rule(owned, "exclusive = true\nidle-limit-us = 0\n")).unwrap();
    assert_eq!(ok[0].idle_limit_us, Some(0), "0: no idle state");
    let ok = compile(&rule(owned, "exclusive = true\nidle-limit-us = 20\n")).unwrap();
    assert_eq!(ok[0].idle_limit_us, Some(20));
    assert!(ok[0].owned());
    assert_eq!(
        compile(&rule(owned, "exclusive = true\n")).unwrap()[0].idle_limit_us,
        None
    );
    // Out of range, with the file, line and column of the value.
    let e = err(&rule(owned, "exclusive = true\nidle-limit-us = -1\n"));
    assert!(
        e.starts_with("t.toml:8:17:") && e.contains("0 (no idle state"),
        "{e}"
    );
    let e = err(&rule(owned, "exclusive = true\nidle-limit-us = 1000001\n"));
    assert!(
        e.starts_with("t.toml:8:17:") && e.contains("1000000 µs"),
        "{e}"
    );
    // A rule that holds no CPU has none to limit: refused, not ignored.
    let e = err(&rule(owned, "idle-limit-us = 5\n"));
    assert!(
        e.starts_with("t.toml:7:17:") && e.contains("needs `exclusive = true`"),
        "{e}"
    );
    // A comm anyone can choose does not change how the machine sleeps.
    let e = err(&rule(
        "comm = \"il\"",
        "exclusive = true\nidle-limit-us = 5\n",
    ));
    assert!(
        e.starts_with("t.toml:8:17:") && e.contains("add `user`"),
        "{e}"
    );
    // Not a thread entry's key.
    let e = err("[[rule]]\nname = \"il\"\n[rule.match]\nuser = \"root\"\n[[rule.threads]]\ncomm = \"w\"\ncpus = \"1\"\nidle-limit-us = 3\n");
    assert!(
        e.contains("t.toml:8:1") && e.contains("idle-limit-us"),
        "{e}"
    );
}
