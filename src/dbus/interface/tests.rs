use super::*;

#[test]
fn policy_and_smt_words_are_checked_before_the_loop_sees_them() {
    assert_eq!(
        words("spread", "avoid").unwrap(),
        (Policy::Spread, SmtPolicy::Avoid)
    );
    for (policy, smt, want) in [
        ("tight", "allow", "unknown policy \"tight\""),
        ("compact", "sometimes", "unknown smt policy \"sometimes\""),
    ] {
        match words(policy, smt) {
            Err(MethodError::InvalidArgs(m)) => assert!(m.contains(want), "{m}"),
            other => panic!("{policy} {smt}: {other:?}"),
        }
    }
}

fn entry(cpus: &str) -> ManagedEntry {
    ManagedEntry {
        pid: 42,
        comm: "feed".into(),
        rule: "md".into(),
        cpus: cpus.into(),
        state: "applied".into(),
    }
}

#[test]
fn managed_rows_carry_cpu_ids() {
    let row = managed_with_cpu_ids(entry("0-2,8")).unwrap();
    assert_eq!(row.3, vec![0, 1, 2, 8]);
    assert_eq!(
        (row.0, row.1.as_str(), row.4.as_str()),
        (42, "feed", "applied")
    );
    assert_eq!(
        managed_with_cpu_ids(entry("")).unwrap().3,
        Vec::<u32>::new()
    );
    match managed_with_cpu_ids(entry("0-x")) {
        Err(MethodError::Failed(m)) => assert!(m.contains("pid 42: CPU list"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// [`explain_json`] as the JSON text's value, `memory` as the JSON it answers.
fn json(
    pid: u32,
    entry: Option<ManagedEntry>,
    text: &str,
    memory: serde_json::Value,
    container: Option<ContainerView>,
    full: bool,
) -> serde_json::Value {
    let parts = ExplainParts {
        pid,
        entry,
        explained: Explained {
            text: text.into(),
            full,
            sched: vec![crate::api::tests::rx_thread()],
        },
        memory: serde_json::from_value(memory).unwrap(),
        container,
    };
    serde_json::to_value(explain_json(parts).unwrap()).unwrap()
}

fn md_feed() -> ContainerView {
    ContainerView {
        id: "c0ffee".into(),
        name: "md-feed".into(),
        pod: "api-0".into(),
        namespace: "trading".into(),
        cpuset: Some("4-7".into()),
        how: "cpuset 4-7 set at creation by pinnerd (rule md)".into(),
    }
}

#[test]
fn explain_json_has_the_row_or_nulls() {
    let memory = serde_json::json!({"one_node": true, "nodes": []});
    let v = json(42, Some(entry("3")), "why\n", memory.clone(), None, true);
    assert_eq!(
        v,
        serde_json::json!({"pid": 42, "managed": true, "rule": "md", "comm": "feed",
                           "cpus": [3], "state": "applied", "text": "why\n",
                           "memory": memory, "container": null,
                           "sched": [{"tid": 43, "comm": "rx-0", "policy": "fifo",
                                      "priority": 50, "nice": 0,
                                      "had": "other nice 5"}]})
    );
    // Another user's process: its rule and CPUs only, as the text says.
    let v = json(
        42,
        Some(entry("3")),
        "shown: its rule and CPUs only\n",
        serde_json::Value::Null,
        Some(md_feed()),
        false,
    );
    assert_eq!(
        v,
        serde_json::json!({"pid": 42, "managed": true, "rule": "md", "comm": null,
                           "cpus": [3], "state": null,
                           "text": "shown: its rule and CPUs only\n", "memory": null,
                           "container": null, "sched": []})
    );
    let v = json(
        7,
        None,
        "not managed\n",
        serde_json::Value::Null,
        None,
        false,
    );
    assert!(v["memory"].is_null() && v["container"].is_null());
    assert_eq!(v["managed"], false);
    assert_eq!(v["cpus"], serde_json::json!([]));
    assert!(v["rule"].is_null() && v["comm"].is_null() && v["state"].is_null());
    assert_eq!(v["text"], "not managed\n");
}

#[test]
fn explain_json_names_the_container_to_who_sees_it_all() {
    let v = json(
        42,
        Some(entry("4")),
        "why\n",
        serde_json::Value::Null,
        Some(md_feed()),
        true,
    );
    assert_eq!(
        v["container"],
        serde_json::json!({"id": "c0ffee", "name": "md-feed", "pod": "api-0",
                           "namespace": "trading", "cpuset": "4-7",
                           "how": "cpuset 4-7 set at creation by pinnerd (rule md)"})
    );
}
