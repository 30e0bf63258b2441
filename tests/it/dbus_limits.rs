//! D-Bus limits on a real bus with real `busctl`: property reads are rate-limited per
//! caller like methods, and the caller's uid is asked of the bus once per connection.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::daemon::{text, Bus, Daemon, Dirs, Policy};

const NAME: &str = "org.pinnerd.Pinnerd1";
const PATH: &str = "/org/pinnerd/Pinnerd1";
const IFACE: &str = "org.pinnerd.Pinnerd1";

#[test]
fn property_reads_are_rate_limited_for_unprivileged_callers_but_not_for_root() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("[limits]\ndbus-calls-per-second = 1\ndbus-burst = 3\n");
    let _d = Daemon::start(&bus, &dirs);
    // One connection reading every property with GetAll pays one token, not nine.
    let all = bus.busctl_as_nobody(&["introspect", NAME, PATH, IFACE]);
    assert!(all.status.success(), "{}", text(&all));
    // Then single reads, as fast as busctl goes: past the burst they are refused.
    let mut refused = None;
    for i in 0..10 {
        let out = bus.busctl_as_nobody(&["get-property", NAME, PATH, IFACE, "State"]);
        if !out.status.success() {
            refused = Some((i, text(&out)));
            break;
        }
    }
    let (i, why) = refused.expect("ten quick reads by uid 65534 were all answered");
    assert!(i >= 1, "refused at once: {why}");
    assert!(
        why.contains("State: too many calls from uid 65534"),
        "{why}"
    );
    // Root is never limited.
    for _ in 0..10 {
        assert!(bus.get("State").starts_with("s "));
    }
}

#[test]
fn the_callers_uid_is_asked_once_per_connection() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let mut monitor = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args([
            "monitor",
            "--json=short",
            "--match",
            "type='method_call',member='GetConnectionUnixUser'",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // One busctl connection, five reads (one Get each).
    let out = bus.busctl_as_nobody(&[
        "get-property",
        NAME,
        PATH,
        IFACE,
        "State",
        "CpuCount",
        "RuleCount",
        "ManagedProcesses",
        "ManagedThreads",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(Duration::from_millis(500));
    let _ = monitor.kill();
    let mut seen = String::new();
    monitor
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut seen)
        .unwrap();
    let _ = monitor.wait();
    let asked = seen.matches("\"GetConnectionUnixUser\"").count();
    assert_eq!(asked, 1, "asked {asked} times:\n{seen}");
}

/// A bare D-Bus client that chooses its own serials (as any client may), connected as
/// uid/gid 65534: only the thread that connects takes that identity (raw `setres*id`,
/// which the kernel applies per thread), and the bus reads it from the socket.
struct RawClient {
    sock: std::os::unix::net::UnixStream,
}

impl RawClient {
    fn connect_as_nobody(address: &str) -> RawClient {
        let path = address
            .strip_prefix("unix:path=")
            .and_then(|a| a.split(',').next())
            .expect("a unix:path= address")
            .to_string();
        std::thread::spawn(move || {
            // SAFETY: plain syscalls on this thread's own credentials.
            unsafe {
                assert_eq!(
                    libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()),
                    0
                );
                assert_eq!(libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534), 0);
                assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0);
            }
            let sock = std::os::unix::net::UnixStream::connect(&path).unwrap();
            let mut c = RawClient { sock };
            c.auth();
            c
        })
        .join()
        .unwrap()
    }

    fn auth(&mut self) {
        use std::io::Write;
        let uid: String = "65534".bytes().map(|b| format!("{b:02x}")).collect();
        self.sock
            .write_all(format!("\0AUTH EXTERNAL {uid}\r\n").as_bytes())
            .unwrap();
        let line = self.line();
        assert!(line.starts_with("OK "), "{line}");
        self.sock.write_all(b"BEGIN\r\n").unwrap();
        self.call(
            1,
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
        );
        assert_eq!(self.reply().0, 2, "Hello answered");
    }

    fn line(&mut self) -> String {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        while !out.ends_with(b"\r\n") {
            self.sock.read_exact(&mut b).unwrap();
            out.push(b[0]);
        }
        String::from_utf8(out).unwrap()
    }

    /// Sends a method call without arguments with serial `serial`.
    fn call(&mut self, serial: u32, dest: &str, path: &str, iface: &str, member: &str) {
        use std::io::Write;
        fn pad(v: &mut Vec<u8>, to: usize) {
            while v.len() % to != 0 {
                v.push(0);
            }
        }
        let mut fields = Vec::new();
        for (code, sig, value) in [
            (1u8, b'o', path),
            (2, b's', iface),
            (3, b's', member),
            (6, b's', dest),
        ] {
            // Fields start 16 bytes into the message, so 8-alignment here is theirs.
            pad(&mut fields, 8);
            fields.extend_from_slice(&[code, 1, sig, 0]);
            fields.extend_from_slice(&(value.len() as u32).to_le_bytes());
            fields.extend_from_slice(value.as_bytes());
            fields.push(0);
        }
        let mut msg = vec![b'l', 1, 0, 1];
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(&serial.to_le_bytes());
        msg.extend_from_slice(&(fields.len() as u32).to_le_bytes());
        msg.extend_from_slice(&fields);
        pad(&mut msg, 8);
        self.sock.write_all(&msg).unwrap();
    }

    /// The type of the next reply or error (2 or 3) and its fields and body as text,
    /// skipping signals.
    fn reply(&mut self) -> (u8, String) {
        loop {
            let mut fixed = [0u8; 16];
            self.sock.read_exact(&mut fixed).unwrap();
            let body = u32::from_le_bytes(fixed[4..8].try_into().unwrap()) as usize;
            let fields = u32::from_le_bytes(fixed[12..16].try_into().unwrap()) as usize;
            let rest = fields.div_ceil(8) * 8 + body;
            let mut buf = vec![0u8; rest];
            self.sock.read_exact(&mut buf).unwrap();
            if fixed[1] == 2 || fixed[1] == 3 {
                return (fixed[1], String::from_utf8_lossy(&buf).into_owned());
            }
        }
    }
}

#[test]
fn a_reused_message_serial_buys_no_extra_calls() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("[limits]\ndbus-calls-per-second = 1\ndbus-burst = 3\n");
    let _d = Daemon::start(&bus, &dirs);
    let mut c = RawClient::connect_as_nobody(&bus.address);
    // One call at a time (the bus refuses a serial still awaiting its reply), each
    // with the serial of the one before.
    for member in ["ListManaged", "Metrics"] {
        let n = 30;
        let mut answered = 0;
        for _ in 0..n {
            c.call(7, NAME, PATH, IFACE, member);
            let (kind, text) = c.reply();
            if kind == 2 {
                answered += 1;
            } else {
                assert!(text.contains("too many calls from uid 65534"), "{text}");
            }
        }
        assert!(
            answered <= 4,
            "{answered} of {n} {member} calls with one serial were answered"
        );
    }
}
