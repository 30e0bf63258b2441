//! Processes pinnerd never manages by accident: its own, PID 1 and the bus daemon.
//!
//! pinnerd's own process (the event loop, the D-Bus threads, the measurement spinners)
//! is never managed: pinning it would skew measurements and could starve the loop that
//! does the pinning. PID 1 and the system bus daemon keep the machine running; a broad
//! rule (`comm = "*"`, `cgroup = "/*"`) must not move them. They are managed only by a
//! rule that names them on purpose: a `comm` written exactly as their name (no glob).
//! A run-time pin (`PinProcess`, `pinnerd pin`) takes none of the three.
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

/// Whether process `pid` named `comm` is refused a run-time pin: a pin names no rule,
/// so it cannot name PID 1 or the bus daemon on purpose; a rule can.
pub fn protected_at_runtime(pid: i32, comm: &str, own_pid: i32) -> Option<Protected> {
    if pid == own_pid {
        Some(Protected::Own)
    } else if pid == 1 {
        Some(Protected::Init)
    } else if BUS_DAEMONS.contains(&comm) {
        Some(Protected::BusDaemon)
    } else {
        None
    }
}

/// Names PID 1 usually has, for [`broad_rule_note`].
const INIT_NAMES: [&str; 2] = ["systemd", "init"];

/// For `pinnerd check`: a note when `rule` could match PID 1 or the bus daemon without
/// naming them exactly (no `comm`, or a glob that matches their names), saying that
/// they are left alone.
pub fn broad_rule_note(rule: &Rule) -> Option<String> {
    let m = &rule.matcher;
    // PID 1 and the bus daemon run in no container.
    if m.container.is_some() {
        return None;
    }
    // The cgroup and unit each usually has; a rule without those keys may match anyway.
    let place_fits = |cgroups: &[&str], unit: &str| {
        m.cgroup
            .as_ref()
            .is_none_or(|g| cgroups.iter().any(|c| g.is_match(c)))
            && m.unit.as_ref().is_none_or(|g| g.is_match(unit))
    };
    let could = |names: &[&str], cgroups: &[&str], unit: &str| {
        let by_comm = match &m.comm {
            None => true,
            Some(g) => names
                .iter()
                .any(|n| g.is_match(n) && !g.patterns.iter().any(|p| p == n)),
        };
        by_comm && place_fits(cgroups, unit)
    };
    let init = could(&INIT_NAMES, &["/", "/init.scope"], "init.scope")
        && m.users.as_ref().is_none_or(|u| u.contains(&0));
    let bus = could(
        &BUS_DAEMONS,
        &["/system.slice/dbus.service"],
        "dbus.service",
    );
    let what = match (init, bus) {
        (true, true) => "PID 1 and the bus daemon",
        (true, false) => "PID 1",
        (false, true) => "the bus daemon",
        (false, false) => return None,
    };
    Some(format!(
        "note: {}: rule {:?} may match {what}: they are left alone unless `comm` names them exactly (pinnerd never manages itself)",
        rule.origin(),
        rule.name
    ))
}
