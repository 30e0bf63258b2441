//! Memory per NUMA node on the real kernel (this machine may have one node): `pinnerd
//! plan --pid`.

use super::helper::{pinnerd, Helper};

/// Whether this machine has more than one NUMA node.
fn several_nodes() -> bool {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_prefix("node")
                        .is_some_and(|id| id.parse::<u32>().is_ok())
                })
                .count()
                > 1
        })
        .unwrap_or(false)
}

#[test]
fn plan_pid_plans_a_running_process_with_its_rule_and_says_where_its_memory_is() {
    let _cpus = super::cpus_stay_online();
    let dir = tempfile::tempdir().unwrap();
    let h = Helper::spawn(dir.path(), "pd-plan-pid");
    let pid = h.pid.to_string();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("10-p.toml"),
        "[[rule]]\nname = \"planned\"\n[rule.match]\ncomm = \"pd-plan-pid\"\n[rule.place]\ncount = 1\n",
    )
    .unwrap();
    let absent = dir.path().join("absent.toml");
    let rules_s = rules.display().to_string();
    let config = absent.display().to_string();
    // Without --count: the matching rule's request.
    let out = pinnerd(&[
        "plan",
        "--pid",
        &pid,
        "--rules",
        &rules_s,
        "--config",
        &config,
        "--no-measure",
        "--json",
    ]);
    assert!(out.ok, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["pid"], h.pid);
    assert_eq!(v["rule"], "planned");
    assert_eq!(v["cpus"].as_array().unwrap().len(), 1, "{v}");
    if several_nodes() {
        assert!(v["memory_nodes"].as_object().unwrap().len() > 1, "{v}");
    } else {
        assert_eq!(v["memory_nodes"], serde_json::json!({}), "{v}");
        assert_eq!(v["memory_reason"], "one node", "{v}");
    }
    // With flags, in words.
    let out = pinnerd(&[
        "plan",
        "--pid",
        &pid,
        "--count",
        "1",
        "--config",
        &config,
        "--no-measure",
    ]);
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "for:       pid {pid} (pd-plan-pid), the request of the flags"
        )),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  memory: "), "{}", out.stdout);
    // No rule matches, and no such process: clear errors.
    let empty = dir.path().join("none");
    std::fs::create_dir(&empty).unwrap();
    let out = pinnerd(&[
        "plan",
        "--pid",
        &pid,
        "--rules",
        &empty.display().to_string(),
        "--config",
        &config,
        "--no-measure",
    ]);
    assert!(!out.ok, "{out:?}");
    assert!(out.stderr.contains("no rule in"), "{}", out.stderr);
    let out = pinnerd(&["plan", "--pid", "4194304", "--count", "1", "--no-measure"]);
    assert!(!out.ok, "{out:?}");
    assert!(
        out.stderr.contains("pid 4194304: no such process"),
        "{}",
        out.stderr
    );
}
