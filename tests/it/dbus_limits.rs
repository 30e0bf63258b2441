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
