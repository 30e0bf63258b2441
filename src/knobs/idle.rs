//! `idle-limit-us`: the per-CPU resume-latency limit
//! (`devices/system/cpu/cpuN/power/pm_qos_resume_latency_us`) on the CPUs a rule holds,
//! and the idle states (`cpuidle/stateK`) it allows, for `explain` and `report`.
//!
//! The file's words (drivers/base/power/sysfs.c): a number N > 0 allows the idle states
//! whose exit latency is at most N µs; `0` means *no constraint*; `n/a` allows no idle
//! state at all (the CPU polls). So a limit of 0 µs is written `n/a`, and what was
//! there, `0` included, is given back as it was read.

use std::collections::BTreeMap;

use super::{Knob, Want};
use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

/// The largest `idle-limit-us` a rule may ask: a second. No idle state takes longer to
/// leave (the deepest package states take a few milliseconds).
pub const MAX_IDLE_LIMIT_US: u32 = 1_000_000;

/// The resume-latency file of `cpu`, relative to the sysfs root.
pub fn qos_path(cpu: u32) -> String {
    format!("devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us")
}

/// How a limit of `us` µs is written: 0 µs (no idle state) is `n/a`, since `0` means
/// no constraint.
pub fn word(us: u32) -> String {
    if us == 0 {
        "n/a".into()
    } else {
        us.to_string()
    }
}

/// The limit a word of the file sets, in µs: `None` for no constraint (`0`).
pub fn limit_of(word: &str) -> Option<u32> {
    match word.trim() {
        "n/a" => Some(0),
        "0" => None,
        w => w.parse().ok(),
    }
}

/// The limits to set: for each CPU held by rules with `idle-limit-us`, the strictest of
/// theirs. `held` gives each such rule's limit and CPUs. CPUs without the file are
/// returned apart (the kernel has no per-CPU PM QoS there: said, not an error).
pub fn wanted(root: &SysRoot, held: &[(u32, CpuSet)]) -> (Vec<Want>, CpuSet) {
    let mut strictest: BTreeMap<u32, u32> = BTreeMap::new();
    for (us, cpus) in held {
        for cpu in cpus.iter() {
            let e = strictest.entry(cpu).or_insert(*us);
            *e = (*e).min(*us);
        }
    }
    let mut missing = CpuSet::new();
    let mut wants = Vec::new();
    for (cpu, us) in strictest {
        let path = qos_path(cpu);
        if !root.sys_path(&path).is_file() {
            missing.insert(cpu);
            continue;
        }
        wants.push(Want {
            knob: Knob::File { path },
            value: word(us),
            before: None,
        });
    }
    (wants, missing)
}

/// One idle state of a CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    pub index: u32,
    pub name: String,
    /// Exit latency in µs.
    pub latency_us: u32,
    /// `disable` set (by someone, not the limit).
    pub disabled: bool,
}

/// The idle states of `cpu` (`None`: no cpuidle directory, the kernel has no idle
/// driver for it, or runs it under a hypervisor that hides them).
pub fn states(root: &SysRoot, cpu: u32) -> Option<Vec<IdleState>> {
    let dir = root.sys_path(format!("devices/system/cpu/cpu{cpu}/cpuidle"));
    let names = crate::sysroot::list_dir(&dir).ok()??;
    let mut out = Vec::new();
    for n in names {
        let Some(index) = n.strip_prefix("state").and_then(|i| i.parse().ok()) else {
            continue;
        };
        let read = |f: &str| {
            crate::sysroot::read_bounded(dir.join(&n).join(f))
                .map(|s| s.trim().to_string())
                .ok()
        };
        out.push(IdleState {
            index,
            name: read("name").unwrap_or_else(|| format!("state{index}")),
            latency_us: read("latency").and_then(|l| l.parse().ok()).unwrap_or(0),
            disabled: read("disable").is_some_and(|d| d == "1"),
        });
    }
    out.sort_by_key(|s| s.index);
    Some(out)
}

/// The line `explain` shows for a held CPU: its limit and each idle state with its exit
/// latency, and whether it is allowed now.
pub fn line(root: &SysRoot, cpu: u32) -> String {
    format!("CPU {cpu}: {}", describe(root, cpu))
}

/// What `report` shows: the CPUs of `cpus` grouped by their limit and idle states, one
/// line per group (a held CPU's limit sets it apart).
pub fn grouped(root: &SysRoot, cpus: &CpuSet) -> Vec<String> {
    let mut groups: BTreeMap<String, CpuSet> = BTreeMap::new();
    for cpu in cpus.iter() {
        groups.entry(describe(root, cpu)).or_default().insert(cpu);
    }
    let mut lines: Vec<(u32, String)> = groups
        .into_iter()
        .map(|(d, c)| {
            let first = c.first().unwrap_or(0);
            let cpus = if c.len() == 1 { "CPU" } else { "CPUs" };
            (first, format!("{cpus} {c}: {d}"))
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, l)| l).collect()
}

/// A CPU's limit and each idle state with its exit latency, and whether it is allowed.
fn describe(root: &SysRoot, cpu: u32) -> String {
    let limit = crate::sysroot::read_bounded(root.sys_path(qos_path(cpu)))
        .ok()
        .map(|w| limit_of(&w));
    let limit_words = match limit {
        None => "no resume-latency limit file".to_string(),
        Some(None) => "no resume-latency limit".to_string(),
        Some(Some(0)) => "resume latency limit n/a (no idle state: polls)".to_string(),
        Some(Some(us)) => format!("resume latency limit {us} µs"),
    };
    let Some(states) = states(root, cpu) else {
        return format!("{limit_words}; no cpuidle states (no idle driver)");
    };
    let states: Vec<String> = states
        .iter()
        .map(|s| {
            let allowed = !s.disabled
                && match limit {
                    Some(Some(0)) => s.latency_us == 0 && s.name == "POLL",
                    Some(Some(us)) => s.latency_us <= us,
                    _ => true,
                };
            let how = if s.disabled {
                "disabled"
            } else if allowed {
                "allowed"
            } else {
                "not allowed"
            };
            format!("{} {} µs {how}", s.name, s.latency_us)
        })
        .collect();
    format!("{limit_words}; idle states: {}", states.join(", "))
}
