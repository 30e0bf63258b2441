//! `pinnerd run`, `pinnerd pin` and `pinnerd release` on real processes, with and
//! without a daemon on a private bus, and polkit's say over unprivileged callers (a
//! stand-in authority on that bus, answering `CheckAuthorization` as polkitd would).

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pinnerd::CpuSet;

use super::affinity::online;
use super::daemon::*;
use super::helper::{pinnerd, Helper, Run};

/// The CPUs in a `Cpus_allowed_list:` line of `text`.
fn allowed_in(text: &str) -> CpuSet {
    let line = text
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list line in {text:?}"));
    line.split_once(':').unwrap().1.trim().parse().unwrap()
}

/// The mask of every thread of `pid`.
fn masks(pid: u32) -> Vec<CpuSet> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let tid = e.ok()?.file_name();
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/task/{}/status", tid.to_string_lossy()))
                .ok()?;
        Some(allowed_in(&status))
    })
    .collect()
}

fn all_on(pid: u32, want: &CpuSet) -> bool {
    let m = masks(pid);
    !m.is_empty() && m.iter().all(|x| x == want)
}

/// `pinnerd ARGS` as uid/gid 65534 with no groups.
fn pinnerd_as_nobody(args: &[&str]) -> Run {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(super::helper::PINNERD)
        .args(args)
        .output()
        .expect("run setpriv pinnerd");
    Run {
        status: out.status,
        code: out.status.code().unwrap_or(-1),
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A `sleep` owned by uid 65534, killed on drop.
struct NobodysSleep(Child);

impl NobodysSleep {
    fn start() -> NobodysSleep {
        let child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sleep",
                "120",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let s = NobodysSleep(child);
        // setpriv execs sleep in the same process: wait for the exec.
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim() != "sleep")
            .unwrap_or(true)
        {
            assert!(std::time::Instant::now() < end, "sleep did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for NobodysSleep {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const NO_BUS: &str = "unix:path=/nonexistent/pinnerd-test-bus";

#[test]
fn run_without_a_daemon_sets_the_cpus_and_passes_the_exit_status_through() {
    let _cpus = super::cpus_stay_online();
    let online = online();
    // The issue's own example, on whatever system bus there is (or none).
    let out = pinnerd(&[
        "run",
        "--count",
        "1",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(out.ok, "{out:?}");
    let got = allowed_in(&out.stdout);
    assert_eq!(got.len(), 1, "{}", out.stdout);
    assert!(got.is_subset(&online));

    let last = online.last().unwrap().to_string();
    let out = pinnerd(&[
        "run",
        "--bus",
        NO_BUS,
        "--cpus",
        &last,
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(out.ok, "{out:?}");
    assert_eq!(allowed_in(&out.stdout).to_string(), last);
    // Every thread inherits the mask: a thread the command makes has it too.
    let out = pinnerd(&[
        "run",
        "--bus",
        NO_BUS,
        "--cpus",
        &last,
        "--",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/$$/task/*/status",
    ]);
    assert!(out.ok, "{out:?}");
    assert!(out
        .stdout
        .lines()
        .all(|l| l.ends_with(&format!("\t{last}"))));

    // The command's exit status is pinnerd's.
    let out = pinnerd(&[
        "run", "--bus", NO_BUS, "--count", "1", "--", "sh", "-c", "exit 7",
    ]);
    assert_eq!(out.code, 7, "{out:?}");
    let out = pinnerd(&["run", "--bus", NO_BUS, "--", "/nonexistent/command"]);
    assert_eq!(out.code, 127, "{out:?}");
    assert!(
        out.stderr.contains("cannot run /nonexistent/command"),
        "{}",
        out.stderr
    );
    // Errors before the exec: pinnerd's own code and message.
    let out = pinnerd(&["run", "--bus", NO_BUS, "--count", "0", "--", "true"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("--count 0"), "{}", out.stderr);
    let big = (online.len() + 1).to_string();
    let out = pinnerd(&["run", "--bus", NO_BUS, "--count", &big, "--", "true"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("pinnerd:"), "{}", out.stderr);

    // --print runs nothing and says who chose.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let marker_s = marker.display().to_string();
    let out = pinnerd(&[
        "run", "--bus", NO_BUS, "--count", "1", "--print", "--", "touch", &marker_s,
    ]);
    assert!(out.ok, "{out:?}");
    assert!(!marker.exists(), "--print ran the command");
    assert!(out.stdout.starts_with("CPUs "), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("chosen by: pinnerd here: no daemon on the bus at unix:path=/nonexistent"),
        "{}",
        out.stdout
    );
    // Quietly local: nothing on stderr without -v.
    let out = pinnerd(&["run", "--bus", NO_BUS, "--count", "1", "--", "true"]);
    assert!(out.ok && out.stderr.is_empty(), "{out:?}");
    let out = pinnerd(&["-v", "run", "--bus", NO_BUS, "--count", "1", "--", "true"]);
    assert!(out.ok && out.stderr.contains("no daemon to ask"), "{out:?}");
}

/// The NUMA node of `cpu`, from sysfs.
fn node_of(cpu: u32) -> u32 {
    for e in std::fs::read_dir("/sys/devices/system/node")
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("node").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let list = std::fs::read_to_string(e.path().join("cpulist")).unwrap();
        if list.trim().parse::<CpuSet>().unwrap().contains(cpu) {
            return id;
        }
    }
    panic!("CPU {cpu} is in no node")
}

#[test]
fn run_memory_sets_the_commands_policy_to_the_nodes_of_its_cpus() {
    let _cpus = super::cpus_stay_online();
    let cpu = online().last().unwrap();
    let node = node_of(cpu);
    let cpu_s = cpu.to_string();
    for (memory, policy) in [("bind", "bind"), ("preferred", "prefer")] {
        let out = pinnerd(&[
            "run",
            "--bus",
            NO_BUS,
            "--cpus",
            &cpu_s,
            "--memory",
            memory,
            "--",
            "cat",
            "/proc/self/numa_maps",
        ]);
        assert!(out.ok, "{out:?}");
        let want = format!("{policy}:{node}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert!(!lines.is_empty(), "{out:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.split(' ').nth(1) == Some(want.as_str())),
            "every mapping of the command has {want:?}: {}",
            out.stdout
        );
    }
    // Without --memory (leave): the default policy.
    let out = pinnerd(&[
        "run",
        "--bus",
        NO_BUS,
        "--cpus",
        &cpu_s,
        "--",
        "cat",
        "/proc/self/numa_maps",
    ]);
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout
            .lines()
            .all(|l| l.split(' ').nth(1) == Some("default")),
        "{out:?}"
    );
    let out = pinnerd(&[
        "run",
        "--bus",
        NO_BUS,
        "--memory",
        "everywhere",
        "--",
        "true",
    ]);
    assert!(!out.ok && out.stderr.contains("bind"), "{out:?}");
}

#[test]
fn run_rule_without_a_daemon_uses_the_rule_files() {
    let _cpus = super::cpus_stay_online();
    let dirs = Dirs::new();
    let last = online().last().unwrap();
    dirs.write_rule(
        "10-r.toml",
        &format!("[[rule]]\nname = \"on-last\"\n[rule.match]\ncomm = \"no-such-comm\"\n[rule.place]\ncpus = \"{last}\"\n"),
    );
    let rules = dirs.rules().display().to_string();
    let settings = dirs.settings().display().to_string();
    let out = pinnerd(&[
        "run",
        "--local",
        "--config",
        &settings,
        "--rules",
        &rules,
        "--rule",
        "on-last",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(out.ok, "{out:?}");
    assert_eq!(allowed_in(&out.stdout).to_string(), last.to_string());
    let out = pinnerd(&[
        "run", "--local", "--config", &settings, "--rules", &rules, "--rule", "nope", "--", "true",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("no rule named \"nope\""),
        "{}",
        out.stderr
    );
}

/// An exclusive rule holding CPU 1 that matches nothing running.
fn hold_cpu_1() -> String {
    "[[rule]]\nname = \"hold1\"\n[rule.match]\ncomm = \"no-such-comm\"\n[rule.place]\ncpus = \"1\"\nexclusive = true\n".to_string()
}

#[test]
fn run_with_the_daemon_avoids_exclusive_cpus_and_registers_the_process() {
    let _cpus = super::cpus_stay_online();
    assert!(
        online().is_subset(&"0-1023".parse().unwrap()) && online().len() >= 2,
        "needs CPUs 0 and 1"
    );
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_rule("10-hold.toml", &hold_cpu_1());
    let d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("RuleCount"), "u 1", "log:\n{}", d.log());
    let addr = bus.address.as_str();
    let grep = ["grep", "Cpus_allowed_list", "/proc/self/status"];

    let mut args = vec!["run", "--bus", addr, "--count", "1", "--"];
    args.extend(grep);
    let out = pinnerd(&args);
    assert!(out.ok, "{out:?}\nlog:\n{}", d.log());
    assert_eq!(allowed_in(&out.stdout).to_string(), "0", "{}", out.stdout);

    // The same through busctl, as docs/dbus.md shows it.
    let out = bus.busctl_as_nobody(&[
        "call", NAME, PATH, IFACE, "PlanWith", "a{sv}", "1", "count", "u", "1",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "s \"0\"");
    let out = bus.busctl(&[
        "call", NAME, PATH, IFACE, "PlanWith", "a{sv}", "2", "count", "u", "1", "cpus", "s", "1",
    ]);
    assert!(
        stderr_of(&out).contains("placement: `cpus` and `count` cannot both be given"),
        "{}",
        text(&out)
    );
    let out = pinnerd(&["run", "--bus", addr, "--count", "1", "--print"]);
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout.starts_with("CPUs 0  for 1 CPUs"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("chosen by: the daemon"),
        "{}",
        out.stdout
    );
    // --rule takes a loaded rule's placement; this one's explicit CPU 1 is held
    // exclusively (by itself), so no run-time pin may take it.
    let out = pinnerd(&["run", "--bus", addr, "--rule", "hold1", "--print"]);
    assert!(
        !out.ok
            && out
                .stderr
                .contains("CPUs 1 are held exclusively by rule \"hold1\""),
        "{out:?}"
    );
    let out = pinnerd(&["run", "--bus", addr, "--rule", "nope", "--", "true"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("no loaded rule is named \"nope\""),
        "{}",
        out.stderr
    );

    // The running command is a run-time pin of the daemon's: listed, and released when
    // it exits.
    let mut child = super::helper::pinnerd_command()
        .args(["run", "--bus", addr, "--count", "1", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    bus.wait_for("the command listed", Duration::from_secs(30), || {
        bus.call("ListManaged", &[])
            .contains(&format!("{pid} \"sleep\" \"(runtime)\" \"0\""))
    });
    assert!(all_on(pid, &"0".parse().unwrap()), "{:?}", masks(pid));
    let _ = child.kill();
    let _ = child.wait();

    // Without the right to pin (no polkit here), a user still gets the daemon's choice,
    // set by pinnerd itself, and is told the process is not registered.
    let mut args = vec!["run", "--bus", addr, "--count", "1", "--"];
    args.extend(grep);
    let out = pinnerd_as_nobody(&args);
    assert!(out.ok, "{out:?}");
    assert_eq!(allowed_in(&out.stdout).to_string(), "0", "{}", out.stdout);
    assert!(
        out.stderr.contains("did not pin this process")
            && out.stderr.contains("requires root (caller uid 65534)"),
        "{}",
        out.stderr
    );
}

/// Every placement flag reaches the daemon as a key it reads (`PlanWith` for `run
/// --print`, `PinProcessWith` for `run` and `pin`): what the daemon answers is what the
/// library plans for the same flags without it.
#[test]
fn every_placement_flag_works_through_the_daemon() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_rule("10-hold.toml", &hold_cpu_1());
    let h = Helper::spawn(dirs.root.path(), "rp-keys");
    let pid_s = h.pid.to_string();
    let d = Daemon::start(&bus, &dirs);
    let addr = bus.address.as_str();
    let cases: [&[&str]; 10] = [
        &["--count", "1"],
        &["--count", "1", "--policy", "spread"],
        &["--count", "1", "--smt", "avoid"],
        &["--count", "1", "--within", "0"],
        &["--count", "1", "--core-type", "performance"],
        &["--count", "1", "--core-type", "efficiency"],
        &["--count", "1", "--prefer", "cache"],
        &["--count", "1", "--near", "lo"],
        &["--cpus", "0"],
        &["--rule", "hold1"],
    ];
    for flags in cases {
        let mut args = vec!["run", "--bus", addr];
        args.extend_from_slice(flags);
        args.push("--print");
        let out = pinnerd(&args);
        // Without the daemon: the same flags planned here, with the same rules.
        let mut alone = vec!["run", "--bus", NO_BUS, "--rules"];
        let rules = dirs.rules();
        let rules_s = rules.to_str().unwrap();
        alone.push(rules_s);
        alone.extend_from_slice(flags);
        alone.push("--print");
        let here = pinnerd(&alone);
        assert!(!out.stderr.contains("unknown"), "{flags:?}: {out:?}");
        if flags.contains(&"efficiency") {
            // No efficiency cores on this machine: refused the same way by both.
            assert!(!out.ok && !here.ok, "{flags:?}: {out:?} {here:?}");
            assert!(
                out.stderr.contains("efficiency"),
                "{flags:?}: {}",
                out.stderr
            );
            continue;
        }
        if flags.contains(&"hold1") {
            // The rule's explicit CPU 1 is held exclusively (by the rule itself): the
            // daemon, which enforces exclusivity, refuses the pin and its plan, naming
            // the rule; alone, `run` has no exclusive holders to keep off.
            assert!(here.ok, "{flags:?} without the daemon: {here:?}");
            for out in [
                &out,
                &pinnerd(&["pin", "--bus", addr, &pid_s, "--rule", "hold1"]),
            ] {
                assert!(
                    !out.ok && out.stderr.contains("held exclusively by rule \"hold1\""),
                    "{flags:?}: {out:?}"
                );
            }
            continue;
        }
        assert!(out.ok, "{flags:?}: {out:?}\nlog:\n{}", d.log());
        let cpus = |s: &str| s.split_whitespace().nth(1).unwrap_or_default().to_string();
        assert!(out.stdout.starts_with("CPUs "), "{flags:?}: {}", out.stdout);
        assert!(here.ok, "{flags:?} without the daemon: {here:?}");
        assert_eq!(cpus(&out.stdout), cpus(&here.stdout), "{flags:?}");
        let mut args = vec!["pin", "--bus", addr, &pid_s];
        args.extend_from_slice(flags);
        let out = pinnerd(&args);
        assert!(out.ok, "pin {flags:?}: {out:?}\nlog:\n{}", d.log());
        let out = pinnerd(&["release", "--bus", addr, &pid_s]);
        assert!(out.ok, "release after {flags:?}: {out:?}");
    }
}

#[test]
fn pin_and_release_from_the_command_line() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let mut h = Helper::spawn(dirs.root.path(), "rp-pin");
    h.spawn_threads(2, Some("rp-worker"));
    let pid = h.pid as u32;
    let original = online();
    let _d = Daemon::start(&bus, &dirs);
    let addr = bus.address.as_str();
    let last = original.last().unwrap().to_string();
    let pid_s = pid.to_string();
    let out = pinnerd(&[
        "pin", "--bus", addr, &pid_s, "--count", "1", "--within", &last,
    ]);
    assert!(out.ok, "{out:?}");
    assert!(
        out.stdout.starts_with(&format!(
            "pid {pid}: pinned at run time to CPUs {last} (1 CPUs (compact, smt allow) within {last})"
        )),
        "{}",
        out.stdout
    );
    // Followed by the daemon's explanation, as `explain` prints it.
    let explain = pinnerd(&["explain", "--bus", addr, &pid_s]);
    assert!(out.stdout.ends_with(&explain.stdout), "{}", out.stdout);
    assert!(all_on(pid, &last.parse().unwrap()), "{:?}", masks(pid));

    let out = pinnerd(&["release", "--bus", addr, &pid_s]);
    assert!(out.ok, "{out:?}");
    assert!(out.stdout.starts_with(&format!("pid {pid}: released")));
    assert!(all_on(pid, &original), "{:?}", masks(pid));
    // PinProcessWith through busctl, as docs/dbus.md shows it.
    let got = bus.call(
        "PinProcessWith",
        &[
            "ua{sv}", &pid_s, "2", "count", "u", "1", "within", "s", &last,
        ],
    );
    assert_eq!(got, format!("s \"{last}\""));
    assert!(all_on(pid, &last.parse().unwrap()), "{:?}", masks(pid));
    bus.call("ReleaseProcess", &["u", &pid_s]);
    assert!(all_on(pid, &original), "{:?}", masks(pid));
    let out = pinnerd(&["release", "--bus", addr, &pid_s]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "ReleaseProcess: pid {pid}: not pinned by PinProcess"
        )),
        "{}",
        out.stderr
    );
    let out = pinnerd(&["pin", "--bus", addr, "4194304", "--count", "1"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("pid 4194304: no such process"),
        "{}",
        out.stderr
    );
    let out = pinnerd(&["pin", "--bus", NO_BUS, &pid_s]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("cannot connect"), "{}", out.stderr);
}

/// What the stand-in authority was asked: the caller's uid (from the bus, as polkitd
/// finds it) and the action.
type Asked = Arc<Mutex<Vec<(String, u32, String)>>>;

#[derive(Debug, serde::Serialize, serde::Deserialize, zbus::Type)]
struct AuthResult {
    is_authorized: bool,
    is_challenge: bool,
    details: HashMap<String, String>,
}

/// A stand-in for polkitd: grants the actions in `grant`, asks for authentication for
/// any other, and records every question.
struct FakeAuthority {
    grant: Vec<String>,
    asked: Asked,
}

#[zbus::interface(name = "org.freedesktop.PolicyKit1.Authority")]
impl FakeAuthority {
    async fn check_authorization(
        &self,
        subject: (String, HashMap<String, zbus::OwnedVariant>),
        action_id: String,
        _details: HashMap<String, String>,
        _flags: u32,
        _cancellation_id: String,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<AuthResult> {
        let (kind, detail) = subject;
        let name = detail
            .get("name")
            .and_then(|v| String::try_from(&**v).ok())
            .ok_or_else(|| zbus::fdo::Error::InvalidArgs("no name".into()))?;
        let proxy = zbus::fdo::DBusProxy::new(conn).await?;
        let bus_name = zbus::names::BusName::try_from(name.as_str())
            .map_err(|e| zbus::fdo::Error::InvalidArgs(e.to_string()))?;
        let uid = proxy.get_connection_unix_user(bus_name).await?;
        self.asked
            .lock()
            .unwrap()
            .push((kind, uid, action_id.clone()));
        let ok = self.grant.contains(&action_id);
        Ok(AuthResult {
            is_authorized: ok,
            is_challenge: !ok,
            details: HashMap::new(),
        })
    }
}

/// The stand-in served on `bus` under polkit's name until dropped.
struct Polkit {
    asked: Asked,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Polkit {
    fn start(bus: &Bus, grant: &[&str]) -> Polkit {
        let asked: Asked = Arc::default();
        let fake = FakeAuthority {
            grant: grant.iter().map(|s| s.to_string()).collect(),
            asked: asked.clone(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let address = bus.address.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let conn = zbus::connection::Builder::address(address.as_str())
                    .serve_at("/org/freedesktop/PolicyKit1/Authority", fake)
                    .name("org.freedesktop.PolicyKit1")
                    .build()
                    .await
                    .expect("serve the stand-in authority");
                ready.send(()).unwrap();
                let _ = stopped.await;
                drop(conn);
            });
        });
        is_ready
            .recv_timeout(Duration::from_secs(30))
            .expect("the stand-in authority started");
        Polkit {
            asked,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn asked(&self) -> Vec<(String, u32, String)> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for Polkit {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn polkit_lets_a_user_pin_their_own_process_and_not_roots() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::ProjectWithPolkit);
    let polkit = Polkit::start(&bus, &["org.pinnerd.pin-own-process"]);
    let dirs = Dirs::new();
    let roots = Helper::spawn(dirs.root.path(), "rp-roots");
    let original = online();
    let d = Daemon::start(&bus, &dirs);
    let addr = bus.address.as_str();
    let last = original.last().unwrap().to_string();
    let own = NobodysSleep::start();
    let own_pid = own.pid().to_string();

    // Their own process: org.pinnerd.pin-own-process, granted.
    let out = pinnerd_as_nobody(&["pin", "--bus", addr, &own_pid, "--cpus", &last]);
    assert!(out.ok, "{out:?}\nlog:\n{}", d.log());
    assert!(all_on(own.pid(), &last.parse().unwrap()));
    assert_eq!(
        polkit.asked(),
        [(
            "system-bus-name".to_string(),
            65534,
            "org.pinnerd.pin-own-process".to_string()
        )]
    );
    let out = pinnerd_as_nobody(&["release", "--bus", addr, &own_pid]);
    assert!(out.ok, "{out:?}");
    assert!(all_on(own.pid(), &original));

    // Root's process: org.pinnerd.manage, which this authority wants authentication for.
    let roots_pid = roots.pid.to_string();
    let out = pinnerd_as_nobody(&["pin", "--bus", addr, &roots_pid, "--count", "1"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "PinProcessWith of pid {roots_pid}: not authorized for org.pinnerd.manage (caller uid 65534); it needs authentication"
        )),
        "{}",
        out.stderr
    );
    assert!(all_on(roots.pid as u32, &original));
    let out = bus.busctl_as_nobody(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PinProcess",
        "uuss",
        &roots_pid,
        "1",
        "compact",
        "allow",
    ]);
    assert!(
        stderr_of(&out).contains("not authorized for org.pinnerd.manage"),
        "{}",
        text(&out)
    );
    for method in ["Reload", "Remeasure"] {
        let out = bus.busctl_as_nobody(&["call", NAME, PATH, IFACE, method]);
        assert!(
            stderr_of(&out).contains(&format!(
                "{method}: not authorized for org.pinnerd.manage (caller uid 65534)"
            )),
            "{}",
            text(&out)
        );
    }
    let asked: Vec<(u32, String)> = polkit
        .asked()
        .into_iter()
        .map(|(_, uid, action)| (uid, action))
        .collect();
    let own = (65534, "org.pinnerd.pin-own-process".to_string());
    let manage = (65534, "org.pinnerd.manage".to_string());
    assert_eq!(
        asked,
        [
            own.clone(),
            own,
            manage.clone(),
            manage.clone(),
            manage.clone(),
            manage
        ]
    );

    // `pinnerd run` as the user is registered: pinned by the daemon, no note.
    let out = pinnerd_as_nobody(&[
        "run",
        "--bus",
        addr,
        "--count",
        "1",
        "--",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(out.ok && out.stderr.is_empty(), "{out:?}");
    assert_eq!(allowed_in(&out.stdout).len(), 1);
    assert_eq!(
        polkit.asked().last().unwrap().2,
        "org.pinnerd.pin-own-process"
    );

    // Root is never asked about.
    let before = polkit.asked().len();
    let out = pinnerd(&["pin", "--bus", addr, &roots_pid, "--cpus", &last]);
    assert!(out.ok, "{out:?}");
    let out = pinnerd(&["release", "--bus", addr, &roots_pid]);
    assert!(out.ok, "{out:?}");
    assert_eq!(polkit.asked().len(), before);
}

/// A run-time pin takes only CPUs no exclusive rule holds, also when it names them
/// (`cpus`) or names a rule that does (`rule`): refused with the rule named, over the
/// bus and from `pinnerd pin`, for root and for a user pinning their own process, and
/// the process keeps its mask.
#[test]
fn a_runtime_pin_never_takes_a_cpu_an_exclusive_rule_holds() {
    let _cpus = super::cpus_stay_online();
    let original = online();
    assert!(
        original.contains(0) && original.contains(1),
        "needs CPUs 0 and 1 online: {original}"
    );
    let bus = Bus::start(Policy::ProjectWithPolkit);
    let _polkit = Polkit::start(&bus, &["org.pinnerd.pin-own-process"]);
    let dirs = Dirs::new();
    dirs.write_rule("10-hold.toml", &hold_cpu_1());
    let roots = Helper::spawn(dirs.root.path(), "rp-excl");
    let d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("RuleCount"), "u 1", "log:\n{}", d.log());
    let addr = bus.address.as_str();
    let own = NobodysSleep::start();
    let roots_pid = (roots.pid as u32).to_string();
    let own_pid = own.pid().to_string();
    let refusal = "CPUs 1 are held exclusively by rule \"hold1\"; a run-time pin takes only CPUs no exclusive rule holds";

    // Over the bus, as root: explicit CPUs, and a rule whose CPUs are explicit.
    for placement in [
        vec!["1", "cpus", "s", "1"],
        vec!["1", "cpus", "s", "0-1"],
        vec!["1", "rule", "s", "hold1"],
    ] {
        let mut args = vec![
            "call",
            NAME,
            PATH,
            IFACE,
            "PinProcessWith",
            "ua{sv}",
            &roots_pid,
        ];
        args.extend(placement.iter().copied());
        let out = bus.busctl(&args);
        assert!(!out.status.success(), "{placement:?}: {}", text(&out));
        assert!(
            stderr_of(&out).contains(refusal),
            "{placement:?}: {}",
            text(&out)
        );
        assert!(
            all_on(roots.pid as u32, &original),
            "{placement:?}: {:?}",
            masks(roots.pid as u32)
        );
        // PlanWith says what the pin would get: the same refusal.
        let mut args = vec!["call", NAME, PATH, IFACE, "PlanWith", "a{sv}"];
        args.extend(placement.iter().copied());
        let out = bus.busctl(&args);
        assert!(
            stderr_of(&out).contains(refusal),
            "PlanWith {placement:?}: {}",
            text(&out)
        );
    }
    // From the command line, as root.
    for flags in [["--cpus", "1"], ["--rule", "hold1"]] {
        let mut args = vec!["pin", "--bus", addr, &roots_pid];
        args.extend(flags);
        let out = pinnerd(&args);
        assert_eq!(out.code, 1, "{flags:?}: {out:?}");
        assert!(out.stderr.contains(refusal), "{flags:?}: {}", out.stderr);
        assert!(
            all_on(roots.pid as u32, &original),
            "{:?}",
            masks(roots.pid as u32)
        );
    }
    // uid 65534 pinning their own process, which polkit allows.
    let out = pinnerd_as_nobody(&["pin", "--bus", addr, &own_pid, "--cpus", "1"]);
    assert_eq!(out.code, 1, "{out:?}\nlog:\n{}", d.log());
    assert!(out.stderr.contains(refusal), "{}", out.stderr);
    assert!(all_on(own.pid(), &original), "{:?}", masks(own.pid()));
    // CPUs no exclusive rule holds stay open to the same pins.
    let out = pinnerd_as_nobody(&["pin", "--bus", addr, &own_pid, "--cpus", "0"]);
    assert!(out.ok, "{out:?}");
    assert!(
        all_on(own.pid(), &"0".parse().unwrap()),
        "{:?}",
        masks(own.pid())
    );
    let got = bus.call(
        "PinProcessWith",
        &["ua{sv}", &roots_pid, "1", "cpus", "s", "0"],
    );
    assert_eq!(got, "s \"0\"");
    assert!(
        all_on(roots.pid as u32, &"0".parse().unwrap()),
        "{:?}",
        masks(roots.pid as u32)
    );
}

/// `pin --sched-policy` over the bus: a user allowed to pin only their own processes
/// may give one a nice value of 0 or more, never a real-time class (that needs
/// org.pinnerd.manage); root may, and a release gives every thread its class back.
#[test]
fn only_a_caller_allowed_to_pin_others_may_give_a_realtime_class() {
    use pinnerd::affinity::sched::{self, SCHED_FIFO, SCHED_OTHER};
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::ProjectWithPolkit);
    let polkit = Polkit::start(&bus, &["org.pinnerd.pin-own-process"]);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    let addr = bus.address.as_str();
    let last = online().last().unwrap().to_string();
    let own = NobodysSleep::start();
    let own_pid = own.pid().to_string();
    let class = || sched::get(own.pid() as i32).unwrap();

    let out = pinnerd_as_nobody(&[
        "pin",
        "--bus",
        addr,
        &own_pid,
        "--cpus",
        &last,
        "--sched-policy",
        "fifo",
        "--sched-priority",
        "5",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("not authorized for org.pinnerd.manage"),
        "{}",
        out.stderr
    );
    assert_eq!(class().policy, SCHED_OTHER, "{:?}", class());
    assert!(polkit
        .asked()
        .iter()
        .any(|(_, uid, a)| *uid == 65534 && a == "org.pinnerd.manage"));

    let out = pinnerd_as_nobody(&[
        "pin", "--bus", addr, &own_pid, "--cpus", &last, "--nice", "4",
    ]);
    assert!(out.ok, "{out:?}\nlog:\n{}", d.log());
    assert_eq!((class().policy, class().nice), (SCHED_OTHER, 4));
    let out = pinnerd_as_nobody(&["release", "--bus", addr, &own_pid]);
    assert!(out.ok, "{out:?}");
    assert_eq!(class().nice, 0, "given back on release");

    // Root may.
    let out = pinnerd(&[
        "pin",
        "--bus",
        addr,
        &own_pid,
        "--cpus",
        &last,
        "--sched-policy",
        "fifo",
        "--sched-priority",
        "5",
    ]);
    assert!(out.ok, "{out:?}\nlog:\n{}", d.log());
    assert_eq!((class().policy, class().priority), (SCHED_FIFO, 5));
    let out = pinnerd(&["release", "--bus", addr, &own_pid]);
    assert!(out.ok, "{out:?}");
    assert_eq!(class().policy, SCHED_OTHER);
}
