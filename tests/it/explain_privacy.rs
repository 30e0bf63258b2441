//! `Explain` for an unprivileged caller, on a real bus with real `busctl` as uid 65534:
//! another user's process shows its rule and CPUs only; the caller's own in full. The
//! same for `ListManaged` and `ListManagedCpus`.

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

/// Root's process (named `root_comm`) and uid 65534's (`nobody_comm`), both managed by
/// rule `owned` on CPU 0, and the daemon on a system-like bus. Dropped: nobody's
/// process killed. Each test names its own, so that tests run at once match only theirs.
struct TwoOwners {
    bus: Bus,
    _dirs: Dirs,
    root_proc: Helper,
    nobody_proc: std::process::Child,
    _daemon: Daemon,
}

impl Drop for TwoOwners {
    fn drop(&mut self) {
        let _ = self.nobody_proc.kill();
        let _ = self.nobody_proc.wait();
    }
}

fn two_owners(root_comm: &str, nobody_comm: &str) -> TwoOwners {
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    std::fs::set_permissions(dirs.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root's process, started with a secret on its command line.
    let root_proc = Helper::spawn(dirs.root.path(), root_comm);
    // nobody's process: a copy of sleep under a name of its own.
    let exe = dirs.root.path().join(nobody_comm);
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let nobody_proc = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    dirs.write_rule(
        "10-own.toml",
        &format!("[[rule]]\nname = \"owned\"\n[rule.match]\ncomm = [\"{root_comm}\", \"{nobody_comm}\"]\n[rule.place]\ncpus = \"0\"\n"),
    );
    let daemon = Daemon::start(&bus, &dirs);
    bus.wait_for("both managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 2"
    });
    TwoOwners {
        bus,
        _dirs: dirs,
        root_proc,
        nobody_proc,
        _daemon: daemon,
    }
}

#[test]
fn explain_tells_an_unprivileged_caller_only_what_they_could_read_themselves() {
    let _cpus = super::cpus_stay_online();
    let t = two_owners("pd-root-own", "pd-nobody-own");
    let (bus, root_proc, nobody_proc) = (&t.bus, &t.root_proc, &t.nobody_proc);
    // Root sees everything about root's process.
    let full = bus.call("Explain", &["u", &root_proc.pid.to_string()]);
    assert!(full.contains("original mask"), "{full}");
    assert!(full.contains("pd-root-own"), "{full}");
    // nobody sees the rule and the CPUs of root's process, and nothing else.
    let theirs = explain_as_nobody(bus, root_proc.pid as u32);
    assert_eq!(
        theirs.trim(),
        format!(
            "s \"pid {}: a process of another user; shown: its rule and CPUs only\\nmanaged by owned on CPUs 0\\n\"",
            root_proc.pid
        )
    );
    // nobody's own process, in full.
    let own = explain_as_nobody(bus, nobody_proc.id());
    assert!(own.contains("original mask"), "{own}");
    assert!(own.contains("pd-nobody-own"), "{own}");
    // ExplainJson keeps to the same policy: rule and CPUs of root's process only.
    let theirs = explain_json_as_nobody(bus, root_proc.pid as u32);
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
    let own = explain_json_as_nobody(bus, nobody_proc.id());
    assert_eq!(own["comm"], "pd-nobody-own", "{own}");
    assert_eq!(own["state"], "applied", "{own}");
}

/// `busctl --json=short call METHOD` as root or as uid 65534: the rows.
fn rows(bus: &Bus, nobody: bool, method: &str) -> Vec<serde_json::Value> {
    let args = ["--json=short", "call", NAME, PATH, IFACE, method];
    let out = if nobody {
        bus.busctl_as_nobody(&args)
    } else {
        bus.busctl(&args)
    };
    assert!(out.status.success(), "{method}: {}", text(&out));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows = reply["data"][0].as_array().unwrap().clone();
    rows.sort_by_key(|r| r[0].as_u64());
    rows
}

/// `ListManaged` and `ListManagedCpus` keep to `Explain`'s policy: an unprivileged
/// caller sees another user's process by pid, rule and CPUs only (`comm` and `state`
/// empty), their own in full; root sees every row whole.
#[test]
fn list_managed_shows_an_unprivileged_caller_only_what_explain_does() {
    use serde_json::json;
    let _cpus = super::cpus_stay_online();
    let t = two_owners("pd-root-list", "pd-nobody-list");
    let (root_pid, own_pid) = (t.root_proc.pid as u32, t.nobody_proc.id());
    let cpus_of = |method: &str| {
        if method == "ListManagedCpus" {
            json!([0])
        } else {
            json!("0")
        }
    };
    for method in ["ListManaged", "ListManagedCpus"] {
        let cpus = cpus_of(method);
        let mut want_nobody = vec![
            json!([root_pid, "", "owned", cpus, ""]),
            json!([own_pid, "pd-nobody-list", "owned", cpus, "applied"]),
        ];
        let mut want_root = vec![
            json!([root_pid, "pd-root-list", "owned", cpus, "applied"]),
            json!([own_pid, "pd-nobody-list", "owned", cpus, "applied"]),
        ];
        want_nobody.sort_by_key(|r| r[0].as_u64());
        want_root.sort_by_key(|r| r[0].as_u64());
        let seen = rows(&t.bus, true, method);
        assert_eq!(seen, want_nobody, "{method} as uid 65534");
        assert!(
            !serde_json::Value::from(seen)
                .to_string()
                .contains("pd-root-list"),
            "{method}"
        );
        assert_eq!(rows(&t.bus, false, method), want_root, "{method} as root");
    }
}
