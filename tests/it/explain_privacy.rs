//! `Explain` for an unprivileged caller, on a real bus with real `busctl` as uid 65534:
//! another user's process shows its rule and CPUs only; the caller's own in full.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::daemon::{text, Bus, Daemon, Dirs, Policy};
use super::helper::Helper;

const NAME: &str = "org.pinnerd.Pinnerd1";
const PATH: &str = "/org/pinnerd/Pinnerd1";
const IFACE: &str = "org.pinnerd.Pinnerd1";

fn explain_as_nobody(bus: &Bus, pid: u32) -> String {
    let out = bus.busctl_as_nobody(&["call", NAME, PATH, IFACE, "Explain", "u", &pid.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `ExplainJson` as uid 65534, parsed.
fn explain_json_as_nobody(bus: &Bus, pid: u32) -> serde_json::Value {
    let out = bus.busctl_as_nobody(&[
        "--json=short",
        "call",
        NAME,
        PATH,
        IFACE,
        "ExplainJson",
        "u",
        &pid.to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::from_str(reply["data"][0].as_str().unwrap()).unwrap()
}

#[test]
fn explain_tells_an_unprivileged_caller_only_what_they_could_read_themselves() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    std::fs::set_permissions(dirs.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root's process, started with a secret on its command line.
    let root_proc = Helper::spawn(dirs.root.path(), "pd-root-own");
    // nobody's process: a copy of sleep under a name of its own.
    let exe = dirs.root.path().join("pd-nobody-own");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let mut nobody_proc = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    dirs.write_rule(
        "10-own.toml",
        "[[rule]]\nname = \"owned\"\n[rule.match]\ncomm = [\"pd-root-own\", \"pd-nobody-own\"]\n[rule.place]\ncpus = \"0\"\n",
    );
    let _d = Daemon::start(&bus, &dirs);
    bus.wait_for("both managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 2"
    });
    // Root sees everything about root's process.
    let full = bus.call("Explain", &["u", &root_proc.pid.to_string()]);
    assert!(full.contains("original mask"), "{full}");
    assert!(full.contains("pd-root-own"), "{full}");
    // nobody sees the rule and the CPUs of root's process, and nothing else.
    let theirs = explain_as_nobody(&bus, root_proc.pid as u32);
    assert_eq!(
        theirs.trim(),
        format!(
            "s \"pid {}: a process of another user; shown: its rule and CPUs only\\nmanaged by owned on CPUs 0\\n\"",
            root_proc.pid
        )
    );
    // nobody's own process, in full.
    let own = explain_as_nobody(&bus, nobody_proc.id());
    assert!(own.contains("original mask"), "{own}");
    assert!(own.contains("pd-nobody-own"), "{own}");
    // ExplainJson keeps to the same policy: rule and CPUs of root's process only.
    let theirs = explain_json_as_nobody(&bus, root_proc.pid as u32);
    assert_eq!(
        (
            &theirs["rule"],
            &theirs["cpus"],
            &theirs["comm"],
            &theirs["state"]
        ),
        (
            &serde_json::json!("owned"),
            &serde_json::json!([0]),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{theirs}"
    );
    assert!(!theirs.to_string().contains("pd-root-own"), "{theirs}");
    let own = explain_json_as_nobody(&bus, nobody_proc.id());
    assert_eq!(own["comm"], "pd-nobody-own", "{own}");
    assert_eq!(own["state"], "applied", "{own}");
    let _ = nobody_proc.kill();
    let _ = nobody_proc.wait();
}
