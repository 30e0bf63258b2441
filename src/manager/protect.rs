//! Processes pinnerd never manages by accident: its own, PID 1 and the bus daemon.
//!
//! pinnerd's own process (the event loop, the D-Bus threads, the measurement spinners)
//! is never managed: pinning it would skew measurements and could starve the loop that
//! does the pinning. PID 1 and the system bus daemon keep the machine running; a broad
//! rule (`comm = "*"`, `cgroup = "/*"`) must not move them. They are managed only by a
//! rule that names them on purpose: a `comm` written exactly as their name (no glob).
//!
//! Must not touch: anything but the process's pid and comm and the rule's `comm` key.

use crate::rules::Rule;

/// Bus daemons' names as the kernel keeps them (15 bytes at most).
const BUS_DAEMONS: [&str; 3] = ["dbus-daemon", "dbus-broker", "dbus-broker-lau"];

/// Why a process that a rule matched is not managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    /// pinnerd itself: never managed.
    Own,
    /// PID 1, matched by a rule that does not name it exactly.
    Init,
    /// The bus daemon, matched by a rule that does not name it exactly.
    BusDaemon,
}

impl Protected {
    /// In words, for `explain`, `plan --live` and the log.
    pub fn describe(self) -> &'static str {
        match self {
            Protected::Own => "pinnerd's own process: never managed",
            Protected::Init => {
                "PID 1: protected; managed only by a rule whose `comm` is exactly its name"
            }
            Protected::BusDaemon => {
                "the bus daemon: protected; managed only by a rule whose `comm` is exactly its name"
            }
        }
    }
}

/// A process a rule matched but that is not managed, and why (for `plan --live`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedMatch {
    pub pid: i32,
    pub comm: String,
    pub rule: String,
    pub why: Protected,
}

/// Whether process `pid` named `comm`, matched by `rule`, is kept out of its hands.
pub fn protected(pid: i32, comm: &str, own_pid: i32, rule: &Rule) -> Option<Protected> {
    if pid == own_pid {
        return Some(Protected::Own);
    }
    let why = if pid == 1 {
        Protected::Init
    } else if BUS_DAEMONS.contains(&comm) {
        Protected::BusDaemon
    } else {
        return None;
    };
    let named = rule
        .matcher
        .comm
        .as_ref()
        .is_some_and(|g| g.patterns.iter().any(|p| p == comm));
    (!named).then_some(why)
}
