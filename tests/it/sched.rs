//! The scheduling class a rule gives a thread, on the real kernel: real child
//! processes, `sched_setattr` for real, given back when the rule goes and after a crash.

use std::time::Duration;

use pinnerd::affinity::sched::{self, SchedAttr, SCHED_FIFO, SCHED_OTHER};
use pinnerd::manager::Input;
use pinnerd::rules::RuleSet;
use pinnerd::sysroot::SysRoot;

use super::affinity::{new_rules, rules, Rig, CPU_LAYOUT};
use super::helper::Helper;

fn rule(comm: &str) -> String {
    format!(
        "[[rule]]\nname = \"s\"\n[rule.match]\ncomm = \"{comm}\"\nuser = 0\n\
         [rule.place]\ncpus = \"0-1\"\nexclusive = true\n\
         [[rule.threads]]\ncomm = \"rx\"\ncpus = \"1\"\nexclusive = true\n\
         sched-policy = \"fifo\"\nsched-priority = 10\n"
    )
}

fn class(tid: i32) -> SchedAttr {
    sched::get(tid).unwrap()
}

fn normal(tid: i32) -> bool {
    let c = class(tid);
    c.policy == SCHED_OTHER && c.nice == 0
}

#[test]
fn the_rx_thread_runs_fifo_while_managed_and_gets_its_class_back_when_the_rule_goes() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut rig = Rig::new(8 << 20);
    let mut h = Helper::spawn(dir.path(), "pt-sched-a1");
    let rx = h.spawn_threads(1, Some("rx"))[0];
    let tx = h.spawn_threads(1, Some("tx"))[0];
    let pid = h.pid;
    assert!(normal(rx) && normal(tx) && normal(pid));
    rig.handle(new_rules(rules(&rule("pt-sched-a*"))));
    assert!(rig.mgr.is_managed(pid), "the start rescan matches it");
    let c = class(rx);
    assert_eq!((c.policy, c.priority), (SCHED_FIFO, 10), "{c:?}");
    assert!(normal(tx) && normal(pid), "the others keep theirs");
    let why = rig.mgr.explain(pid);
    assert!(
        why.contains(&format!(
            "tid {rx} (rx): applied 1; scheduling fifo 10 (had other)"
        )),
        "{why}"
    );
    // ExplainJson's `sched`: that thread alone, typed.
    assert_eq!(
        rig.mgr.thread_classes(pid),
        vec![pinnerd::api::ThreadSched {
            tid: rx as u32,
            comm: "rx".into(),
            policy: "fifo".into(),
            priority: 10,
            nice: 0,
            had: "other".into(),
        }]
    );
    // A new rx thread is given it too.
    let late = h.spawn_threads(1, Some("rx"))[0];
    assert!(
        rig.pump_until(Duration::from_secs(5), |_| class(late).policy == SCHED_FIFO),
        "the new rx thread is not real-time: {:?}",
        class(late)
    );
    rig.handle(new_rules(RuleSet::default()));
    for t in h.tids() {
        assert!(normal(t), "tid {t}: {:?}", class(t));
    }
    h.exit();
}

#[test]
fn after_a_crash_the_next_start_gives_the_class_back() {
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut h = Helper::spawn(dir.path(), "pt-sched-c1");
    let rx = h.spawn_threads(1, Some("rx"))[0];
    {
        let mut rig = Rig::new(8 << 20).with_journal(dir.path());
        rig.handle(new_rules(rules(&rule("pt-sched-c*"))));
        assert_eq!(class(rx).policy, SCHED_FIFO);
        rig.handle(Input::Rescan);
        // Dropped without shutdown: a crash.
    }
    assert_eq!(class(rx).policy, SCHED_FIFO);
    let rig = Rig::new(8 << 20).with_journal(dir.path());
    let mut mgr = rig.mgr;
    let report = mgr.recover(&SysRoot::default()).unwrap();
    assert_eq!(report.restored_sched, 1, "{report:?}");
    assert!(normal(rx), "{:?}", class(rx));
    h.exit();
}

/// `plan --live` says what class each unit's threads would get, and sets none.
#[test]
fn plan_live_says_the_class_and_changes_nothing() {
    use super::daemon::Dirs;
    use super::helper::pinnerd;
    let _cpu = CPU_LAYOUT.read().unwrap_or_else(|p| p.into_inner());
    let dirs = Dirs::new();
    dirs.write_rule("10-sched.toml", &rule("pt-sched-l1"));
    let mut h = Helper::spawn(dirs.root.path(), "pt-sched-l1");
    let rx = h.spawn_threads(1, Some("rx"))[0];
    let rules = dirs.rules().display().to_string();
    let out = pinnerd(&["plan", "--live", "--rules", &rules]);
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout.contains(
            "scheduling: fifo 10 for each thread it places, set when placed and given back \
             when let go"
        ),
        "{}",
        out.stdout
    );
    assert!(normal(rx), "a dry run set it: {:?}", class(rx));
    h.exit();
}

/// `check` refuses a real-time policy on CPUs not held exclusive, at its place in the
/// file, with the configuration exit code.
#[test]
fn check_refuses_a_realtime_policy_on_cpus_not_held() {
    use super::helper::pinnerd;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rt.toml");
    std::fs::write(
        &file,
        rule("rt").replace("cpus = \"1\"\nexclusive = true\n", "cpus = \"1\"\n"),
    )
    .unwrap();
    let out = pinnerd(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains(
            "rt.toml:12:16: [[rule.threads]]: `sched-policy = \"fifo\"` needs `exclusive = true`"
        ),
        "{}",
        out.stderr
    );
    std::fs::write(&file, rule("rt")).unwrap();
    let out = pinnerd(&["check", dir.path().to_str().unwrap()]);
    assert!(out.ok, "{out:?}");
}

/// `run --sched-policy fifo --sched-priority N` execs the command in that class (the
/// caller's own right, as root here); a bad combination is refused before anything runs.
#[test]
fn run_execs_the_command_in_the_class_asked_for() {
    use super::helper::pinnerd;
    let out = pinnerd(&[
        "run",
        "--local",
        "--cpus",
        "0",
        "--sched-policy",
        "fifo",
        "--sched-priority",
        "7",
        "--",
        "cat",
        "/proc/self/stat",
    ]);
    assert!(out.ok, "{out:?}");
    let fields: Vec<&str> = out.stdout.rsplit_once(") ").unwrap().1.split(' ').collect();
    // Fields 40 (rt_priority) and 41 (policy), counted from the state (field 3).
    assert_eq!((fields[37], fields[38]), ("7", "1"), "{}", out.stdout);
    let out = pinnerd(&[
        "run",
        "--local",
        "--cpus",
        "0",
        "--nice",
        "3",
        "--",
        "cat",
        "/proc/self/stat",
    ]);
    let fields: Vec<&str> = out.stdout.rsplit_once(") ").unwrap().1.split(' ').collect();
    assert_eq!((fields[16], fields[38]), ("3", "0"), "{}", out.stdout);
    let out = pinnerd(&["run", "--local", "--sched-policy", "rr", "--", "true"]);
    assert!(
        !out.ok && out.stderr.contains("needs --sched-priority"),
        "{out:?}"
    );
}

/// `plan --pid` takes the class flags and says what they would give; they are refused
/// without --pid.
#[test]
fn plan_pid_says_the_class_the_flags_would_give() {
    use super::helper::pinnerd;
    let pid = std::process::id().to_string();
    let out = pinnerd(&[
        "plan",
        "--pid",
        &pid,
        "--count",
        "1",
        "--no-measure",
        "--sched-policy",
        "batch",
        "--nice",
        "3",
        "--json",
    ]);
    assert!(out.ok, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["sched"], "batch nice 3", "{v}");
    let out = pinnerd(&[
        "plan",
        "--pid",
        &pid,
        "--count",
        "1",
        "--no-measure",
        "--sched-policy",
        "rr",
    ]);
    assert!(
        !out.ok && out.stderr.contains("needs --sched-priority"),
        "{out:?}"
    );
    let out = pinnerd(&["plan", "--count", "1", "--no-measure", "--nice", "3"]);
    assert!(
        !out.ok && out.stderr.contains("are for plan --pid"),
        "{out:?}"
    );
}
