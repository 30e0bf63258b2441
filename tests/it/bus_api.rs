//! The structured bus methods for programs, on the real daemon and a private bus:
//! `ListManagedCpus` (CPU lists as `au`) and `ExplainJson`, read with `busctl --json`
//! as root and as an unprivileged user, next to their text twins.

use super::daemon::*;
use super::helper::Helper;

/// `busctl --json=short call …` as root or as nobody, parsed.
fn call_json(bus: &Bus, nobody: bool, method: &str, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json=short", "call", NAME, PATH, IFACE, method];
    a.extend_from_slice(args);
    let out = if nobody {
        bus.busctl_as_nobody(&a)
    } else {
        bus.busctl(&a)
    };
    assert!(out.status.success(), "{method}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{method}: {e}: {}", text(&out)))
}

/// The JSON text docs/dbus.md shows (busctl's `s "…"`) on the line after the first that
/// starts with `prompt`.
fn doc_json_sample(prompt: &str) -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dbus.md"),
    )
    .unwrap();
    let sample = doc
        .lines()
        .skip_while(|l| !l.starts_with(prompt))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/dbus.md shows no `{prompt}` reply"));
    let quoted = sample.strip_prefix("s ").expect(sample);
    serde_json::from_str(quoted).expect(sample)
}

#[test]
fn list_managed_cpus_and_explain_json_agree_with_their_text_twins() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-json");
    let _d = Daemon::start(&bus, &dirs);
    let pid = h.pid.to_string();
    let pinned = bus.call("PinProcess", &["uuss", &pid, "1", "compact", "allow"]);
    let pinned: pinnerd::CpuSet = pinned
        .trim_start_matches("s ")
        .trim_matches('"')
        .parse()
        .unwrap();
    let ids: Vec<u64> = pinned.iter().map(u64::from).collect();

    // ListManagedCpus: the same rows as ListManaged, CPUs as numbers; open to everyone,
    // root's process shown to another user by pid, rule and CPUs only.
    for nobody in [false, true] {
        let v = call_json(&bus, nobody, "ListManagedCpus", &[]);
        assert_eq!(v["type"], "a(ussaus)", "{v}");
        let rows = v["data"][0].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{v}");
        let row = rows[0].as_array().unwrap();
        assert_eq!(row[0], h.pid as u64);
        let (comm, state) = if nobody {
            ("", "")
        } else {
            ("pd-json", "applied")
        };
        assert_eq!((&row[1], &row[4]), (&comm.into(), &state.into()), "{v}");
        let got: Vec<u64> = row[3]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(got, ids, "{v}");
    }
    let text_rows = call_json(&bus, false, "ListManaged", &[]);
    let text_row = text_rows["data"][0][0].as_array().unwrap();
    assert_eq!(text_row[3], pinned.to_string());

    // ExplainJson as root: the row's fields and the whole text of Explain.
    let v = call_json(&bus, false, "ExplainJson", &["u", &pid]);
    assert_eq!(v["type"], "s");
    let j: serde_json::Value = serde_json::from_str(v["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(j["pid"], h.pid as u64);
    assert_eq!(j["managed"], true);
    assert_eq!(j["comm"], "pd-json");
    assert_eq!(j["rule"], text_row[2]);
    assert_eq!(j["state"], text_row[4]);
    assert_eq!(j["cpus"].as_array().unwrap().len(), ids.len(), "{j}");
    let explain = call_json(&bus, false, "Explain", &["u", &pid]);
    assert_eq!(j["text"], explain["data"][0], "{j}");
    assert!(j["text"].as_str().unwrap().contains("tid "), "{j}");
    // Where its memory is: "one node" here, else bytes per node; the text agrees.
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
        })
        .unwrap_or(1);
    if nodes <= 1 {
        assert_eq!(j["memory"]["one_node"], true, "{j}");
        assert!(
            j["text"].as_str().unwrap().contains("memory: one node"),
            "{j}"
        );
    } else {
        assert!(j["memory"]["total_bytes"].as_u64().unwrap() > 0, "{j}");
        assert_eq!(j["memory"]["nodes"].as_array().unwrap().len(), nodes, "{j}");
    }

    // As nobody, for root's process: rule and CPUs, and the text Explain gives nobody.
    let v = call_json(&bus, true, "ExplainJson", &["u", &pid]);
    let j: serde_json::Value = serde_json::from_str(v["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(j["managed"], true);
    let shown = j["text"].as_str().unwrap();
    assert!(shown.contains("a process of another user"), "{shown}");
    assert!(!shown.contains("tid "), "{shown}");
    assert!(j["memory"].is_null(), "{j}");

    // A process the daemon does not manage, and one that does not exist.
    let own = std::process::id().to_string();
    let v = call_json(&bus, false, "ExplainJson", &["u", &own]);
    let j: serde_json::Value = serde_json::from_str(v["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(j["managed"], false, "{j}");
    assert_eq!(j["cpus"], serde_json::json!([]), "{j}");
    assert!(j["rule"].is_null(), "{j}");
    let out = bus.busctl(&["call", NAME, PATH, IFACE, "ExplainJson", "u", "4194304"]);
    assert!(!out.status.success());
    assert!(
        stderr_of(&out).contains("pid 4194304: no such process"),
        "{}",
        text(&out)
    );
}

/// The `ExplainJson` reply docs/dbus.md shows ("What the replies look like": a process
/// pinned by `PinProcess`) has the keys and the lines of the text the daemon returns, in
/// its order: each line the same up to its first number (the pid, the CPUs, the path of
/// the cpuset file differ by machine); the memory line is the one-node one only on a
/// one-node machine.
#[test]
fn the_explain_json_reply_in_docs_dbus_md_has_the_lines_the_daemon_returns() {
    let _cpus = super::cpus_stay_online();
    let shown = doc_json_sample("$ busctl … ExplainJson u ");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect(&shown);

    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "sleep");
    let _d = Daemon::start(&bus, &dirs);
    let pid = h.pid.to_string();
    bus.call("PinProcess", &["uuss", &pid, "1", "compact", "allow"]);
    let v = call_json(&bus, false, "ExplainJson", &["u", &pid]);
    let real: serde_json::Value = serde_json::from_str(v["data"][0].as_str().unwrap()).unwrap();

    let keys = |j: &serde_json::Value| j.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&shown),
        keys(&real),
        "docs/dbus.md: {shown}\nthe daemon: {real}"
    );
    let one_node = real["memory"]["one_node"] == true;
    let shapes = |j: &serde_json::Value| -> Vec<String> {
        j["text"]
            .as_str()
            .unwrap()
            .lines()
            .filter(|l| one_node || !l.starts_with("memory:"))
            .map(|l| {
                l.split(|c: char| c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect::<Vec<_>>()
    };
    // One `tid` line per thread: the helper has more threads than the sample's sleep.
    let shapes = |j: &serde_json::Value| {
        let mut s = shapes(j);
        s.dedup();
        s
    };
    assert_eq!(
        shapes(&shown),
        shapes(&real),
        "docs/dbus.md's ExplainJson text: {}\nthe daemon's: {}",
        shown["text"],
        real["text"]
    );
}

/// `HoldsJson` is `pinnerd::api::HoldsView` on the wire: the sample docs/dbus.md shows
/// reads as one with every field (none missing, none unknown) and writes back the same
/// text, and the daemon's value reads as one (nothing held here: the empty view, as
/// `Holds` is empty).
#[test]
fn holds_json_is_the_holds_view_and_docs_dbus_md_shows_one() {
    let _cpus = super::cpus_stay_online();
    let shown = doc_json_sample("$ busctl … get-property … HoldsJson");
    let view: pinnerd::api::HoldsView = serde_json::from_str(&shown).expect(&shown);
    assert_eq!(serde_json::to_string(&view).unwrap(), shown);
    assert_eq!(view.refused.len(), 1, "{view:?}");

    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let got = bus.get("HoldsJson");
    let got: String = serde_json::from_str(got.strip_prefix("s ").expect(&got)).expect(&got);
    let got: pinnerd::api::HoldsView = serde_json::from_str(&got).expect(&got);
    assert_eq!(got, pinnerd::api::HoldsView::default());
    assert_eq!(bus.get("Holds"), "s \"\"");
}
