//! Containers the runtime told about over NRI, as the loop keeps them: moved through
//! `UpdateContainers` whenever the plan in force moves their rule's CPUs.

use super::*;
use crate::nri::link::{Ask, ContainerFacts, Decision, Moment, PodFacts, Update};

/// A process rule and a container rule, each holding one CPU exclusively.
const RULES: &str = r#"
[[rule]]
name = "feed"
[rule.match]
comm = "fake-feed"
[rule.place]
count = 1
exclusive = true

[[rule]]
name = "md"
[rule.match]
container = "md-feed"
[rule.place]
count = 1
exclusive = true
"#;

fn md_feed() -> ContainerFacts {
    ContainerFacts {
        id: "c-md".into(),
        name: "md-feed".into(),
        pod: PodFacts {
            name: "api-0".into(),
            namespace: "trading".into(),
            ..PodFacts::default()
        },
        ..ContainerFacts::default()
    }
}

/// The manager makes its plan again on its own (a managed process turned up in a cgroup
/// cpuset holding the container's CPU): the container is moved, without any new plan
/// handed down from rules, measurement or hotplug.
#[test]
fn the_managers_own_plan_moves_a_placed_container_through_updates() {
    let (mut s, d, ops, procs) = state_with_fakes(Timing::default());
    write_rule(d.path(), "containers", RULES);
    s.start().unwrap();
    let (tx, mut updates) = tokio::sync::mpsc::channel(4);
    s.connect_nri(tx);
    let (reply, mut decided) = tokio::sync::oneshot::channel();
    s.handle(Event::Nri(Ask::Place {
        container: md_feed(),
        moment: Moment::Creation,
        reply,
    }));
    let Ok(Decision::Place { cpus: born, .. }) = decided.try_recv() else {
        panic!("the container is placed at creation");
    };
    assert_eq!(born.len(), 1, "{born}");
    assert!(updates.try_recv().is_err(), "nothing to move yet");

    // A process of the other rule, in a cgroup whose cpuset is the container's CPU.
    procs.put(4242, "fake-feed", 7, &[]);
    ops.add_process(4242, 7, &[], &born);
    procs.set_cpuset(4242, Some(born.clone()));
    s.manager_event(crate::manager::Input::Rescan);
    assert_eq!(ops.mask(4242), Some(born.clone()), "the process took it");

    let batch = updates.try_recv().expect("the container is moved");
    let [Update { id, cpus, .. }] = batch.as_slice() else {
        panic!("{batch:?}");
    };
    assert_eq!(id, "c-md");
    assert!(cpus.intersection(&born).is_empty(), "{cpus} off {born}");
    assert_eq!(s.snapshot().containers.len(), 1);
    let how = &s.snapshot().containers[0].how;
    assert!(
        how.contains(&format!("after the plan changed (was {born}")),
        "{how}"
    );
    // The same plan again moves nothing.
    s.manager_event(crate::manager::Input::Rescan);
    assert!(updates.try_recv().is_err());
}

/// `ExplainJson`'s container: the runtime's facts and the cpuset pinnerd gave, for a
/// process in the container's cgroup, shown to root (the process is root's) and to no
/// other user; a process outside any container has none.
#[test]
fn the_container_a_process_runs_in_is_shown_to_who_sees_it_all() {
    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let (mut s, d, ops, procs) = state_with_fakes(Timing::default());
    write_rule(d.path(), "containers", RULES);
    s.start().unwrap();
    let (tx, _updates) = tokio::sync::mpsc::channel(4);
    s.connect_nri(tx);
    let (reply, mut decided) = tokio::sync::oneshot::channel();
    let container = ContainerFacts {
        id: ID.into(),
        ..md_feed()
    };
    s.handle(Event::Nri(Ask::Place {
        container,
        moment: Moment::Creation,
        reply,
    }));
    let Ok(Decision::Place { cpus, .. }) = decided.try_recv() else {
        panic!("placed at creation");
    };
    let online = s.machine.online();
    // Real processes (the call looks for them in /proc), described by the fakes.
    let (inside, outside) = (Sleeper::spawn("sleep"), Sleeper::spawn("sleep"));
    let (inside, outside) = (inside.pid(), outside.pid());
    for (pid, cgroup) in [
        (inside, format!("/kubepods/besteffort/pod1/{ID}")),
        (outside, "/system.slice/other.service".to_string()),
    ] {
        procs.put(pid as i32, "md", 7, &[]);
        procs.set_cgroup(pid as i32, &cgroup);
        ops.add_process(pid as i32, 7, &[], &online);
    }
    s.manager_event(crate::manager::Input::Rescan);
    let shown = |s: &mut State, pid: u32, caller_uid: u32| {
        ask(s, |reply| Call::Container {
            pid,
            caller_uid,
            reply,
        })
        .unwrap()
    };
    let view = shown(&mut s, inside, 0).expect("in the container");
    assert_eq!(
        (view.id.as_str(), view.name.as_str(), view.pod.as_str()),
        (ID, "md-feed", "api-0")
    );
    assert_eq!(view.namespace, "trading");
    assert_eq!(view.cpuset, Some(cpus.to_string()));
    assert!(
        view.how.contains("set at creation by pinnerd (rule md)"),
        "{}",
        view.how
    );
    assert_eq!(shown(&mut s, inside, 1000), None, "another user");
    assert_eq!(shown(&mut s, outside, 0), None, "in no container");
}
