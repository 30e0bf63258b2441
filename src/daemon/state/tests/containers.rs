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
    assert!(
        s.snapshot().containers[0].contains(&format!("after the plan changed (was {born}")),
        "{:?}",
        s.snapshot().containers
    );
    // The same plan again moves nothing.
    s.manager_event(crate::manager::Input::Rescan);
    assert!(updates.try_recv().is_err());
}
