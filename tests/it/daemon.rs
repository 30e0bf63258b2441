//! The daemon on a private, system-like `dbus-daemon` (deny by default, plus the
//! project's policy file), driven with real `busctl`, as a user would.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use pinnerd::sysroot::SysRoot;

pub(super) const NAME: &str = "org.pinnerd.Pinnerd1";
pub(super) const PATH: &str = "/org/pinnerd/Pinnerd1";
pub(super) const IFACE: &str = "org.pinnerd.Pinnerd1";

/// The same rules as Debian's system bus: anyone connects, nothing may be owned or
/// called unless a policy file punches a hole.
const SYSTEM_POLICY: &str = r#"
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <policy user="root">
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Monitoring"/>
  </policy>
"#;

/// Lets anyone own anything and call anything: only the daemon's own check is left.
const ALLOW_ALL: &str = r#"
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
"#;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// System-like deny-by-default plus `systemd/org.pinnerd.Pinnerd1.conf`.
    Project,
    AllowAll,
    /// [`Policy::Project`], and root may own polkit's name (a stand-in authority) and
    /// anyone may call it, as polkit's own bus policy allows.
    ProjectWithPolkit,
}

/// What polkit's bus policy allows, for a stand-in authority.
const POLKIT_POLICY: &str = r#"
  <policy user="root">
    <allow own="org.freedesktop.PolicyKit1"/>
  </policy>
  <policy context="default">
    <allow send_destination="org.freedesktop.PolicyKit1"/>
  </policy>
"#;

/// A private dbus-daemon (see `daemon_rig`), with `busctl` to drive it.
pub struct Bus {
    rig: crate::daemon_rig::Bus,
    pub address: String,
}

impl Bus {
    pub fn start(policy: Policy) -> Bus {
        let project_policy = crate::daemon_rig::project_policy();
        let policies = match policy {
            Policy::Project => format!(
                "{SYSTEM_POLICY}\n  <include>{}</include>",
                project_policy.display()
            ),
            Policy::AllowAll => ALLOW_ALL.to_string(),
            Policy::ProjectWithPolkit => format!(
                "{SYSTEM_POLICY}\n  <include>{}</include>\n{POLKIT_POLICY}",
                project_policy.display()
            ),
        };
        let rig = crate::daemon_rig::Bus::start(&policies);
        Bus {
            address: rig.address.clone(),
            rig,
        }
    }

    /// The dbus-daemon's pid.
    pub fn pid(&self) -> i32 {
        self.rig.pid
    }

    fn busctl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("busctl");
        c.arg(format!("--address={}", self.address));
        c.args(args);
        c
    }

    /// `busctl --address=… ARGS` as root.
    pub fn busctl(&self, args: &[&str]) -> Output {
        self.busctl_cmd(args).output().expect("run busctl")
    }

    /// The same, as uid/gid 65534 (nobody) with no groups.
    pub fn busctl_as_nobody(&self, args: &[&str]) -> Output {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "busctl"]);
        c.arg(format!("--address={}", self.address));
        c.args(args);
        c.output().expect("run setpriv busctl")
    }

    /// `busctl call` on the daemon's object; panics with the output on failure.
    pub fn call(&self, method: &str, sig_and_args: &[&str]) -> String {
        let mut args = vec!["call", NAME, PATH, IFACE, method];
        args.extend_from_slice(sig_and_args);
        let out = self.busctl(&args);
        assert!(
            out.status.success(),
            "busctl call {method} {sig_and_args:?} failed: {}",
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// `busctl get-property`, e.g. `s "ready"`.
    pub fn get(&self, prop: &str) -> String {
        let out = self.busctl(&["get-property", NAME, PATH, IFACE, prop]);
        assert!(out.status.success(), "get-property {prop}: {}", text(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Waits until `f` holds, or panics naming `what`.
    pub fn wait_for(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}");
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The directories one daemon instance uses.
pub struct Dirs {
    pub root: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        for d in ["rules", "state", "runtime"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        // Rule directories must not be writable by others (and are owned by root here).
        std::fs::set_permissions(
            root.path().join("rules"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let d = Dirs { root };
        // Small budgets; measure even on a busy machine (spinners at nice 0, not the
        // default nice 19, which other tests' load would starve); nothing periodic.
        d.write_settings("");
        d
    }

    /// Writes the settings file: the test defaults plus `extra` TOML.
    pub fn write_settings(&self, extra: &str) {
        std::fs::write(
            self.settings(),
            format!(
                "[measure]\nbudget = \"1s\"\nidle-threshold = 0\nspin-priority = \"normal\"\ndrift-probe = \"off\"\ninterval = \"off\"\n{extra}"
            ),
        )
        .unwrap();
    }

    /// Writes a rule file atomically (temp file + rename, as editors do).
    pub fn write_rule(&self, name: &str, text: &str) {
        let tmp = self.root.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.rules().join(name)).unwrap();
    }
    pub fn rules(&self) -> PathBuf {
        self.root.path().join("rules")
    }
    pub fn state(&self) -> PathBuf {
        self.root.path().join("state")
    }
    pub fn runtime(&self) -> PathBuf {
        self.root.path().join("runtime")
    }
    pub fn settings(&self) -> PathBuf {
        self.root.path().join("settings.toml")
    }
}

/// A running `pinnerd daemon` on a private bus, with systemd's notify protocol spoken
/// over a socket of ours. Killed on drop.
pub struct Daemon {
    pub child: Child,
    notify: UnixDatagram,
    pub(super) log: PathBuf,
    pub notes: Vec<String>,
}

impl Daemon {
    /// Starts the daemon; returns at once (see [`Daemon::wait_ready`]).
    pub fn spawn(bus: &Bus, dirs: &Dirs, extra: &[&str]) -> Daemon {
        let (notify, sock) = crate::daemon_rig::notify_socket(dirs.root.path());
        let log = dirs
            .root
            .path()
            .join(format!("daemon-{}.log", std::process::id()));
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = crate::daemon_rig::daemon_command(&bus.address, dirs.root.path(), &sock);
        cmd.args(extra)
            .env("RUST_LOG", "pinnerd=debug")
            .stderr(logf);
        let child = cmd.spawn().expect("spawn pinnerd daemon");
        Daemon {
            child,
            notify,
            log,
            notes: Vec::new(),
        }
    }

    /// [`Daemon::spawn`] through `wrap`, which gets the daemon's command and returns the
    /// one to run (the same daemon under another program, say).
    pub fn spawn_wrapped(bus: &Bus, dirs: &Dirs, wrap: impl FnOnce(&Command) -> Command) -> Daemon {
        let (notify, sock) = crate::daemon_rig::notify_socket(dirs.root.path());
        let log = dirs
            .root
            .path()
            .join(format!("daemon-{}.log", std::process::id()));
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = crate::daemon_rig::daemon_command(&bus.address, dirs.root.path(), &sock);
        cmd.env("RUST_LOG", "pinnerd=debug");
        let mut cmd = wrap(&cmd);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(logf);
        let child = cmd.spawn().expect("spawn pinnerd daemon");
        Daemon {
            child,
            notify,
            log,
            notes: Vec::new(),
        }
    }

    /// Starts the daemon and waits for `READY=1`.
    pub fn start(bus: &Bus, dirs: &Dirs) -> Daemon {
        let mut d = Daemon::spawn(bus, dirs, &[]);
        d.wait_note("READY=1", Duration::from_secs(60));
        d
    }

    /// Reads notify messages until one line equals `want`; panics with the log if the
    /// daemon exits or time runs out.
    pub fn wait_note(&mut self, want: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            if self.notes.iter().any(|n| n == want) {
                self.notes.retain(|n| n != want);
                return;
            }
            if Instant::now() > end {
                panic!("no {want} from the daemon; log:\n{}", self.log());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("daemon exited ({st}) before {want}; log:\n{}", self.log());
            }
            if let Ok(n) = self.notify.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).to_string();
                self.notes.extend(msg.lines().map(str::to_string));
            }
        }
    }

    /// Every notify line the daemon sent, in order, until it exits (at most `timeout`)
    /// and its socket is drained: those already read first.
    pub fn notes_until_exit(&mut self, timeout: Duration) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        let mut exited = false;
        loop {
            match self.notify.recv(&mut buf) {
                Ok(n) => {
                    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
                    self.notes.extend(msg.lines().map(str::to_string));
                }
                // Nothing within the read timeout: once it has exited, nothing more comes.
                Err(_) if exited => return std::mem::take(&mut self.notes),
                Err(_) => {}
            }
            if !exited {
                exited = self.child.try_wait().unwrap().is_some();
                assert!(
                    exited || Instant::now() < end,
                    "daemon did not exit; log:\n{}",
                    self.log()
                );
            }
        }
    }

    /// Waits until `MeasuredAt` is set and differs from `not`; returns it. A measurement
    /// that fails (the CI machine may be too busy for the pins to hold) is asked for
    /// again a few times; the daemon log is shown if none succeeds.
    pub fn wait_measured(&self, bus: &Bus, not: &str) -> String {
        let end = Instant::now() + Duration::from_secs(120);
        let mut retries = 0;
        loop {
            let m = bus.get("MeasuredAt");
            if m != "t 0" && m != not {
                return m;
            }
            if bus.get("State") == "s \"degraded\"" && retries < 5 {
                retries += 1;
                bus.call("Remeasure", &[]);
            }
            assert!(Instant::now() < end, "no measurement; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: i32) {
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill {sig}");
    }

    /// SIGTERM, then wait for a clean exit. The notify socket is drained meanwhile, as
    /// systemd does: a daemon that sent more than the socket queues (reloads, status
    /// lines) waits in its last `STOPPING=1` until it is read.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let end = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < end,
                "daemon did not stop; log:\n{}",
                self.log()
            );
            // Waits up to the socket's 100 ms read timeout.
            let _ = self.notify.recv(&mut buf);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn introspection_lists_every_member() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let out = bus.busctl(&["introspect", NAME, PATH, IFACE]);
    assert!(out.status.success(), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    for (member, sig) in [
        (".Version", "s"),
        (".State", "s"),
        (".MeasuredAt", "t"),
        (".Fingerprint", "s"),
        (".CpuCount", "u"),
        (".RuleCount", "u"),
        (".ManagedProcesses", "u"),
        (".ManagedThreads", "u"),
        (".RuleErrors", "as"),
        (".SchedExt", "(ss)"),
        (".Holds", "s"),
        (".HoldsJson", "s"),
        (".StateReason", "s"),
        (".Remeasure", "-"),
        (".Reload", "-"),
        (".GetMatrix", "-"),
        (".ListManaged", "-"),
        (".Metrics", "-"),
        (".Explain", "u"),
        (".Plan", "uss"),
        (".PinProcess", "uuss"),
        (".ReleaseProcess", "u"),
        (".PinProcessWith", "ua{sv}"),
        (".PlanWith", "a{sv}"),
        (".MeasurementFinished", "tbs"),
        (".RulesReloaded", "uas"),
    ] {
        let line = t
            .lines()
            .find(|l| l.split_whitespace().next() == Some(member))
            .unwrap_or_else(|| panic!("{member} missing from introspection:\n{t}"));
        assert_eq!(line.split_whitespace().nth(2), Some(sig), "{line}");
    }
    // Properties that change say so.
    let state = t.lines().find(|l| l.starts_with(".State")).unwrap();
    assert!(state.contains("emits-change"), "{state}");
}

#[test]
fn every_property_reads() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    assert_eq!(
        bus.get("Version"),
        format!("s \"{}\"", env!("CARGO_PKG_VERSION"))
    );
    let state = bus.get("State");
    assert!(
        ["s \"measuring\"", "s \"ready\"", "s \"degraded\""].contains(&state.as_str()),
        "{state}"
    );
    assert!(bus.get("MeasuredAt").starts_with("t "));
    let fp = bus.get("Fingerprint");
    assert!(fp.starts_with("s \"") && fp.len() > 4, "fingerprint: {fp}");
    let online =
        std::fs::read_to_string(SysRoot::default().sys_path("devices/system/cpu/online")).unwrap();
    let n = online.trim().parse::<pinnerd::CpuSet>().unwrap().len();
    assert_eq!(bus.get("CpuCount"), format!("u {n}"));
    assert_eq!(bus.get("RuleCount"), "u 0");
    assert_eq!(bus.get("ManagedProcesses"), "u 0");
    assert_eq!(bus.get("ManagedThreads"), "u 0");
    assert_eq!(bus.get("RuleErrors"), "as 0");
    // A non-root user may read them too.
    let out = bus.busctl_as_nobody(&["get-property", NAME, PATH, IFACE, "State", "CpuCount"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn read_only_methods_answer() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.call("ListManaged", &[]), "a(ussss) 0");
    let m = bus.call("GetMatrix", &[]);
    assert!(m.starts_with("auaad "), "{m}");
    // The paged form, open to anyone by the bus policy: every CPU, the rows asked for.
    let out = bus.busctl_as_nobody(&["call", NAME, PATH, IFACE, "GetMatrixRows", "uu", "0", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = String::from_utf8_lossy(&out.stdout);
    // Empty while no matrix exists (the first measurement may still run), else one row.
    if rows.trim() != "auaad 0 0" {
        let words: Vec<&str> = rows.split_whitespace().collect();
        let n: usize = words[1].parse().unwrap();
        assert_eq!(words[2 + n], "1", "one row: {rows}");
        assert_eq!(words[3 + n], n.to_string(), "of every CPU: {rows}");
    }
    // Plan: every usable CPU when asked for all of them (this machine has no isolcpus).
    let n: usize = bus
        .get("CpuCount")
        .trim_start_matches("u ")
        .parse()
        .unwrap();
    let all = (0..n).map(|c| c.to_string()).collect::<Vec<_>>().join(" ");
    let out = bus.busctl_as_nobody(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "Plan",
        "uss",
        &n.to_string(),
        "compact",
        "allow",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("au {n} {all}")
    );
    let out = bus.busctl(&[
        "call", NAME, PATH, IFACE, "Plan", "uss", "0", "compact", "allow",
    ]);
    assert!(
        stderr_of(&out).contains("count 0: must be between 1"),
        "{}",
        text(&out)
    );
    let out = bus.busctl(&["call", NAME, PATH, IFACE, "Explain", "u", "4194304"]);
    assert!(!out.status.success());
    assert!(
        stderr_of(&out).contains("pid 4194304: no such process"),
        "{}",
        text(&out)
    );
}

#[test]
fn remeasure_returns_a_job_at_once() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let first = bus.call("Remeasure", &[]);
    assert!(first.starts_with("t "), "{first}");
    bus.wait_for("the measurement to end", Duration::from_secs(60), || {
        bus.get("State") != "s \"measuring\""
    });
}

/// A rule with explicit CPUs that matches nothing running.
pub(super) fn rule(name: &str) -> String {
    format!("[[rule]]\nname = \"{name}\"\n[rule.match]\ncomm = \"no-such-{name}\"\n[rule.place]\ncpus = \"0\"\n")
}

#[test]
fn remeasure_wait_reports_the_end_and_measured_at_changes() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let d = Daemon::start(&bus, &dirs);
    // The first measurement starts at once (nothing stored yet).
    let before = d.wait_measured(&bus, "");
    let out = super::helper::pinnerd_command()
        .args([
            "remeasure",
            "--wait",
            "--timeout",
            "60",
            "--bus",
            &bus.address,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\nlog:\n{}", text(&out), d.log());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("finished:") && said.contains("ns one-way"),
        "{said}"
    );
    assert_ne!(bus.get("MeasuredAt"), before);
    assert_eq!(bus.get("State"), "s \"ready\"");
    // The matrix is there, square, over the online CPUs.
    let m = bus.call("GetMatrix", &[]);
    let n = bus.get("CpuCount").trim_start_matches("u ").to_string();
    assert!(m.starts_with(&format!("auaad {n} ")), "{m}");
}

#[test]
fn remeasure_calls_in_quick_succession_coalesce() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let a = bus.call("Remeasure", &[]);
    let b = bus.call("Remeasure", &[]);
    let c = bus.call("Remeasure", &[]);
    assert_eq!(a, b);
    assert_eq!(b, c);
}

/// The busctl commands of the README and of docs/dbus.md work as written (on a private
/// bus instead of the system bus).
#[test]
fn the_documented_busctl_commands_work() {
    let _cpus = super::cpus_stay_online();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let section = |file: &str, heading: &str| -> Vec<String> {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let section = text
            .split(heading)
            .nth(1)
            .unwrap_or_else(|| panic!("{file} has no section {heading:?}"));
        let section = section.split("\n## ").next().unwrap();
        section
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("busctl --system ") && !l.contains(" monitor "))
            .map(String::from)
            .collect()
    };
    let readme = section("README.md", "## Asking the daemon with busctl");
    assert!(readme.len() >= 3, "{readme:?}");
    let mut cmds = readme;
    cmds.extend(section("docs/dbus.md", "## Trying it from the shell"));
    assert!(cmds.len() >= 8, "{cmds:?}");
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    for cmd in cmds {
        let args: Vec<&str> = cmd.split_whitespace().skip(2).collect();
        let out = bus.busctl(&args);
        assert!(out.status.success(), "{cmd}: {}", text(&out));
    }
}

/// `PlanWith` takes `core-type`, `prefer` and `near` in its placement dict, open to every
/// user like `Plan`; `PinProcessWith` is root's (or polkit's), like `PinProcess`.
#[test]
fn plan_with_options_answers_and_refuses_with_reasons() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    // This machine has one kind of core: every CPU is a performance CPU.
    let out = bus.busctl_as_nobody(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PlanWith",
        "a{sv}",
        "2",
        "count",
        "u",
        "1",
        "core-type",
        "s",
        "performance",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let cpus: pinnerd::CpuSet = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("s ")
        .trim_matches('"')
        .parse()
        .unwrap();
    assert_eq!(cpus.len(), 1, "{}", text(&out));
    // /dev/null is a virtual device with no node: no restriction.
    let out = bus.busctl(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PlanWith",
        "a{sv}",
        "3",
        "count",
        "u",
        "1",
        "near",
        "s",
        "/dev/null",
        "prefer",
        "s",
        "cache",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for (options, want) in [
        (
            vec!["core-type", "s", "efficiency"],
            "asked for 1 efficiency CPUs but only 0 are usable (this machine has one kind of core",
        ),
        (
            vec!["near", "s", "pinnerd-no-such-if"],
            "near \"pinnerd-no-such-if\": unknown device",
        ),
        (
            vec!["near", "s", "/etc/passwd"],
            "a path must start with /dev/",
        ),
        (vec!["prefer", "s", "vcache"], "unknown prefer \"vcache\""),
        (vec!["numa", "s", "0"], "unknown key \"numa\""),
        // The scheduling keys are checked as PinProcessWith checks them, not ignored.
        (
            vec!["sched-policy", "s", "fifo"],
            "sched-policy fifo needs sched-priority (1 to 99)",
        ),
        (
            vec!["sched-priority", "x", "500"],
            "sched-priority is only for sched-policy fifo or rr",
        ),
        (
            vec!["nice", "x", "40"],
            "nice 40 is out of range: -20 to 19",
        ),
    ] {
        let mut args = vec![
            "call", NAME, PATH, IFACE, "PlanWith", "a{sv}", "2", "count", "u", "1",
        ];
        args.extend(options.iter().copied());
        let out = bus.busctl(&args);
        assert!(!out.status.success(), "{options:?}: {}", text(&out));
        assert!(
            stderr_of(&out).contains(want),
            "{options:?}: {}",
            text(&out)
        );
    }
    // A plan with a real-time class changes nothing: any user may ask for it.
    let out = bus.busctl_as_nobody(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PlanWith",
        "a{sv}",
        "3",
        "count",
        "u",
        "1",
        "sched-policy",
        "s",
        "fifo",
        "sched-priority",
        "x",
        "50",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // PinProcessWith is not open to other users without polkit.
    let out = bus.busctl_as_nobody(&[
        "call",
        NAME,
        PATH,
        IFACE,
        "PinProcessWith",
        "ua{sv}",
        "1",
        "1",
        "count",
        "u",
        "1",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
}

/// `near` over the bus is resolved by the daemon as root, for any caller: a link that
/// uid 65534 plants in `/dev/shm` must not tell them whether a path they cannot read
/// exists. Every path that is not a usable device gets one answer, word for word.
#[test]
fn near_tells_an_unprivileged_caller_nothing_about_paths_they_cannot_see() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    // A directory only root may enter, holding one file.
    let secret = tempfile::tempdir().unwrap();
    std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(secret.path().join("present"), "x").unwrap();
    let _d = Daemon::start(&bus, &dirs);
    // nobody's links: to the file that exists, to one that does not, and the same two
    // spelled relative to /dev/shm.
    let tag = format!("pinnerd-near-{}", std::process::id());
    let rel = |leaf: &str| format!("../..{}", secret.path().join(leaf).to_string_lossy());
    let links = [
        (
            format!("{tag}-present"),
            secret.path().join("present").to_string_lossy().into_owned(),
        ),
        (
            format!("{tag}-absent"),
            secret.path().join("absent").to_string_lossy().into_owned(),
        ),
        (format!("{tag}-rel-present"), rel("present")),
        (format!("{tag}-rel-absent"), rel("absent")),
    ];
    struct Unlink(Vec<PathBuf>);
    impl Drop for Unlink {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let _unlink = Unlink(
        links
            .iter()
            .map(|(l, _)| Path::new("/dev/shm").join(l))
            .collect(),
    );
    for (link, target) in &links {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "ln",
                "-s",
            ])
            .arg(target)
            .arg(Path::new("/dev/shm").join(link))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ln -s {target} {link}: {}",
            text(&out)
        );
    }
    let plan_near = |near: &str| {
        bus.busctl_as_nobody(&[
            "call", NAME, PATH, IFACE, "PlanWith", "a{sv}", "2", "count", "u", "1", "near", "s",
            near,
        ])
    };
    // A real device still works for nobody.
    let out = plan_near("/dev/null");
    assert!(out.status.success(), "{}", text(&out));
    let mut answers = Vec::new();
    for near in links.iter().map(|(l, _)| format!("/dev/shm/{l}")).chain([
        "/dev/shm".to_string(),
        format!("/dev/shm/{tag}-never-made"),
        "/dev/block/4095:1048575".to_string(),
    ]) {
        let out = plan_near(&near);
        assert!(!out.status.success(), "{near}: {}", text(&out));
        answers.push((near.clone(), stderr_of(&out).replace(&near, "NAME")));
    }
    let first = &answers[0].1;
    for (near, answer) in &answers {
        assert_eq!(answer, first, "{near} answers differently: {answers:#?}");
    }
    assert!(
        first.contains("not a device node below /dev"),
        "{answers:#?}"
    );
}
