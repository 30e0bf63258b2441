//! The one way the benches and the integration tests start the real `pinnerd daemon`:
//! a private `dbus-daemon` configured like a system bus ([`Bus`]), the daemon's command
//! line on a directory laid out as `rules/`, `state/`, `runtime/` and `settings.toml`
//! ([`daemon_command`]), and a running daemon whose systemd notify socket is drained
//! all the time, as systemd does ([`Daemon`]).
//!
//! Included with `#[path]` at the root of each crate that uses it (`benches/daemon.rs`,
//! `benches/promises.rs`, `tests/it/main.rs`), so `crate::daemon_rig` names it.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The project's bus policy file.
pub fn project_policy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/org.pinnerd.Pinnerd1.conf")
}

/// Debian's system bus (deny by default) plus the project's policy file.
pub fn system_like() -> String {
    format!(
        r#"<policy context="default"><allow user="*"/><deny own="*"/><deny send_type="method_call"/>
<allow send_type="signal"/><allow send_requested_reply="true" send_type="method_return"/>
<allow send_requested_reply="true" send_type="error"/><allow receive_type="method_call"/>
<allow receive_type="method_return"/><allow receive_type="error"/><allow receive_type="signal"/>
<allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
<allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/></policy>
<include>{}</include>"#,
        project_policy().display()
    )
}

/// A private dbus-daemon, a system bus with the given `<policy>` elements; killed on
/// drop.
pub struct Bus {
    _dir: tempfile::TempDir,
    pub address: String,
    pub pid: i32,
}

impl Bus {
    pub fn start(policies: &str) -> Bus {
        let dir = tempfile::tempdir().expect("tempdir");
        // An unprivileged caller must reach the socket.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let conf = dir.path().join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
{policies}
</busconfig>
"#,
                dir.path().display()
            ),
        )
        .unwrap();
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--print-address=1", "--print-pid=1", "--fork"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run dbus-daemon");
        assert!(out.status.success(), "dbus-daemon failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        let address = lines.next().expect("address line").trim().to_string();
        let pid = lines.next().expect("pid line").trim().parse().unwrap();
        Bus {
            _dir: dir,
            address,
            pid,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our dbus-daemon.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
    }
}

/// `pinnerd daemon` on `bus` with its directories and settings under `root`, telling
/// systemd's notify protocol to the socket `notify`; stdin and stdout closed, the
/// environment of a service manager removed. Callers add arguments, `RUST_LOG` and
/// stderr.
pub fn daemon_command(bus: &str, root: &Path, notify: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pinnerd"));
    cmd.arg("daemon")
        .arg(format!("--bus={bus}"))
        .arg("--rules")
        .arg(root.join("rules"))
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--runtime-dir")
        .arg(root.join("runtime"))
        .arg("--config")
        .arg(root.join("settings.toml"))
        .env("NOTIFY_SOCKET", notify)
        .env_remove("JOURNAL_STREAM")
        .env_remove("INVOCATION_ID")
        .env_remove("WATCHDOG_USEC")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// A notify socket of ours in `dir`, under a name no earlier daemon used, with a short
/// read timeout (so a reader can look at the child between reads).
pub fn notify_socket(dir: &Path) -> (UnixDatagram, PathBuf) {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let sock = dir.join(format!("notify-{stamp}"));
    let notify = UnixDatagram::bind(&sock).expect("bind notify socket");
    notify
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    (notify, sock)
}

/// A running `pinnerd daemon`, with systemd's notify protocol spoken on a socket of ours;
/// killed on drop.
pub struct Daemon {
    pub child: Child,
    /// When each `READY=1` arrived, from the thread that drains the notify socket.
    ready: std::sync::mpsc::Receiver<Instant>,
    stop_drain: std::sync::Arc<std::sync::atomic::AtomicBool>,
    log: PathBuf,
}

impl Daemon {
    /// Starts the daemon on `bus` with its directories under `root` (see
    /// [`daemon_command`]), logging at `rust_log` to `root/daemon.log`; returns at once.
    pub fn spawn(bus: &Bus, root: &Path, rust_log: &str) -> Daemon {
        let (notify, sock) = notify_socket(root);
        let log = root.join("daemon.log");
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = daemon_command(&bus.address, root, &sock)
            .env("RUST_LOG", rust_log)
            .stderr(logf)
            .spawn()
            .expect("spawn pinnerd daemon");
        // Drained all the time, as systemd does: a daemon whose notify socket is full
        // waits in its next STATUS= line.
        let (tx, ready) = std::sync::mpsc::channel();
        let stop_drain = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = stop_drain.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = notify.recv(&mut buf) {
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == "READY=1")
                    {
                        let _ = tx.send(Instant::now());
                    }
                }
            }
        });
        Daemon {
            child,
            ready,
            stop_drain,
            log,
        }
    }

    /// Waits for `READY=1` and returns when it was received.
    pub fn wait_ready(&mut self, timeout: Duration) -> Instant {
        let end = Instant::now() + timeout;
        loop {
            if let Ok(at) = self.ready.recv_timeout(Duration::from_millis(100)) {
                return at;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("daemon exited ({st}) before READY=1; log:\n{}", self.log());
            }
            assert!(
                Instant::now() < end,
                "no READY=1 from the daemon; log:\n{}",
                self.log()
            );
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and reap.
    pub fn kill9(mut self) {
        self.child.kill().expect("kill -9 the daemon");
        self.child.wait().unwrap();
    }

    /// SIGTERM, and wait for the exit (masks restored).
    pub fn stop(mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < end,
                "daemon did not stop; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_drain
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
