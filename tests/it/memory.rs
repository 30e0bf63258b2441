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

/// `memory = "follow"` and `pin --memory follow` on this machine: with one node nothing
/// is read or moved, and Explain and the metrics say so.
#[test]
fn memory_follow_on_one_node_is_a_clear_no_op() {
    use super::daemon::*;
    use std::time::Duration;
    let _cpus = super::cpus_stay_online();
    // Several nodes: a job runs and reports whatever it did (the VM check
    // memory-follows checks the moving itself).
    let (note, one_node) = if several_nodes() {
        ("memory follow: ", false)
    } else {
        (
            "memory follow: nothing moved: one node: all of its memory is local",
            true,
        )
    };
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-mem-follow");
    let runtime = Helper::spawn(dirs.root.path(), "pd-mem-pin");
    dirs.write_rule(
        "10-follow.toml",
        "[[rule]]\nname = \"follow\"\n[rule.match]\ncomm = \"pd-mem-follow\"\n[rule.place]\ncount = 1\nmemory = \"follow\"\n",
    );
    let _d = Daemon::start(&bus, &dirs);
    let pid = h.pid.to_string();
    bus.wait_for("the rule's note", Duration::from_secs(30), || {
        bus.call("Explain", &["u", &pid]).contains(note)
    });
    let why = bus.call("Explain", &["u", &pid]);
    assert_eq!(why.contains("memory: one node"), one_node, "{why}");
    // A pin at run time with --memory follow, through the client.
    let rpid = runtime.pid.to_string();
    let out = pinnerd(&[
        "pin",
        "--bus",
        bus.address.as_str(),
        &rpid,
        "--count",
        "1",
        "--memory",
        "follow",
    ]);
    assert!(out.ok, "{out:?}");
    bus.wait_for("the pin's note", Duration::from_secs(30), || {
        bus.call("Explain", &["u", &rpid]).contains(note)
    });
    let metrics = bus.call("Metrics", &[]);
    if one_node {
        assert!(
            metrics.contains("pinnerd_memory_migrations_total{outcome=\\\"nothing\\\"} 2"),
            "{metrics}"
        );
    } else {
        assert!(
            metrics.contains("pinnerd_memory_moved_bytes_total "),
            "{metrics}"
        );
    }
    // A wrong word in the dict is refused, naming the key.
    let out = bus.busctl(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PinProcessWith",
        "ua{sv}",
        &rpid,
        "2",
        "count",
        "u",
        "1",
        "memory",
        "s",
        "bind",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("placement: memory: \"bind\"; expected follow or leave"),
        "{}",
        text(&out)
    );
}

/// `plan --live` weighs memory as the daemon does (the settings' `[memory]`) and shows
/// where each matching process's memory is, on a captured two-node machine (the
/// processes are this machine's).
#[test]
fn plan_live_weighs_and_shows_where_each_process_memory_is() {
    use super::daemon::Dirs;
    let dirs = Dirs::new();
    dirs.write_rule(
        "10-live-mem.toml",
        "[[rule]]\nname = \"live-mem\"\n[rule.match]\ncomm = \"pd-live-mem\"\n[rule.place]\ncount = 2\n",
    );
    // Any size weighs (the helper is far below the default 64 MiB).
    std::fs::write(dirs.settings(), "[memory]\nmin-size-mib = 0\n").unwrap();
    let h = Helper::spawn(dirs.root.path(), "pd-live-mem");
    let sys = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs/xeon-2s-nic-nvme/sys");
    let (rules, settings) = (dirs.rules(), dirs.settings());
    let args = |json: bool| {
        let mut a = vec![
            "plan".to_string(),
            "--live".into(),
            "--rules".into(),
            rules.display().to_string(),
            "--config".into(),
            settings.display().to_string(),
            "--sysfs".into(),
            sys.display().to_string(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let a = args(true);
    let out = pinnerd(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.ok, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let me = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == h.pid)
        .unwrap_or_else(|| panic!("not listed: {v}"));
    let nodes = me["memory_nodes"]
        .as_object()
        .unwrap_or_else(|| panic!("{me}"));
    assert_eq!(
        nodes.keys().collect::<Vec<_>>(),
        ["0", "1"],
        "every node of the machine planned on: {me}"
    );
    assert!(
        nodes.values().map(|b| b.as_u64().unwrap()).sum::<u64>() > 0,
        "{me}"
    );
    let unit = v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["rule"] == "live-mem")
        .unwrap_or_else(|| panic!("no unit: {v}"));
    let why = unit["memory"]
        .as_str()
        .unwrap_or_else(|| panic!("memory did not weigh: {unit}"));
    assert!(
        why.starts_with("node ") && why.contains(" chosen: holds "),
        "{why}"
    );
    let a = args(false);
    let out = pinnerd(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout.contains(&format!("    {why}\n")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(" resident — node 0 "), "{}", out.stdout);
    h.exit();
}
