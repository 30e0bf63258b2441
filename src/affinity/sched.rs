//! A thread's scheduling class: the policy, real-time priority and nice value a rule's
//! `sched-policy`, `sched-priority` and `nice` give it, read and set with
//! `sched_getattr`/`sched_setattr` (through [`AffinityOps`](super::AffinityOps), the
//! crate's one seam for changing other tasks), and what it had before, to give back.
//!
//! Must not touch: which threads get which class (see `manager`), what the rules allow
//! (see `rules`).

use serde::{Deserialize, Serialize};

use super::{AffinityError, Tid};

/// `SCHED_OTHER` (`SCHED_NORMAL`).
pub const SCHED_OTHER: u32 = 0;
pub const SCHED_FIFO: u32 = 1;
pub const SCHED_RR: u32 = 2;
pub const SCHED_BATCH: u32 = 3;
pub const SCHED_IDLE: u32 = 5;
pub const SCHED_DEADLINE: u32 = 6;
/// Children of the task start in `SCHED_OTHER` at nice 0 (or their parent's nice if it
/// was above 0), not in the task's real-time policy.
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
/// The flags a restore sets again (reset-on-fork and `SCHED_DEADLINE`'s reclaim and
/// overrun flags); the utilisation-clamp flags are left as they are.
const RESTORED_FLAGS: u64 = 0x07;

/// The highest real-time priority the kernel takes (`MAX_RT_PRIO - 1`).
pub const RT_PRIORITY_MAX: u32 = 99;

/// `sched-policy` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedPolicy {
    Other,
    Batch,
    Idle,
    Fifo,
    Rr,
}

impl SchedPolicy {
    /// `SCHED_FIFO` or `SCHED_RR`: it runs before every `SCHED_OTHER` task of its CPU.
    pub fn is_realtime(self) -> bool {
        matches!(self, SchedPolicy::Fifo | SchedPolicy::Rr)
    }

    /// The kernel's number for it.
    pub fn raw(self) -> u32 {
        match self {
            SchedPolicy::Other => SCHED_OTHER,
            SchedPolicy::Batch => SCHED_BATCH,
            SchedPolicy::Idle => SCHED_IDLE,
            SchedPolicy::Fifo => SCHED_FIFO,
            SchedPolicy::Rr => SCHED_RR,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            SchedPolicy::Other => "other",
            SchedPolicy::Batch => "batch",
            SchedPolicy::Idle => "idle",
            SchedPolicy::Fifo => "fifo",
            SchedPolicy::Rr => "rr",
        }
    }
}

impl std::str::FromStr for SchedPolicy {
    type Err = crate::placement::UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "other" => Ok(SchedPolicy::Other),
            "batch" => Ok(SchedPolicy::Batch),
            "idle" => Ok(SchedPolicy::Idle),
            "fifo" => Ok(SchedPolicy::Fifo),
            "rr" => Ok(SchedPolicy::Rr),
            _ => Err(crate::placement::UnknownWord {
                what: "sched-policy",
                given: s.to_string(),
                expected: "other, batch, idle, fifo, rr",
            }),
        }
    }
}

impl std::fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// The class a rule gives a thread: validated by `rules` (a priority only with a
/// real-time policy, `1..=99`; a nice value only with the others, `-20..=19`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sched {
    pub policy: SchedPolicy,
    /// `sched-priority`; 0 for the policies that are not real-time.
    pub priority: u32,
    /// `nice`; 0 for the real-time policies and when not given.
    pub nice: i32,
}

impl Sched {
    /// What `sched_setattr` is given: a real-time policy with reset-on-fork, so that
    /// what the thread starts is not real-time unless a rule makes it so.
    pub fn attr(&self) -> SchedAttr {
        SchedAttr {
            policy: self.policy.raw(),
            flags: if self.policy.is_realtime() {
                SCHED_FLAG_RESET_ON_FORK
            } else {
                0
            },
            nice: self.nice,
            priority: self.priority,
            ..SchedAttr::default()
        }
    }

    /// `fifo 50`, `batch nice 5`, `other`.
    pub fn words(&self) -> String {
        match (self.policy.is_realtime(), self.nice) {
            (true, _) => format!("{} {}", self.policy.word(), self.priority),
            (false, 0) => self.policy.word().to_string(),
            (false, n) => format!("{} nice {n}", self.policy.word()),
        }
    }
}

impl Sched {
    /// The class `sched-policy`, `sched-priority` and `nice` ask for, checked as a rule's
    /// keys are (`rules` points at the key in the file instead); `None` without any.
    /// `key` prefixes each name in the messages: `"--"` for flags, `""` for dict keys.
    pub fn checked(
        policy: Option<SchedPolicy>,
        priority: Option<i64>,
        nice: Option<i64>,
        key: &str,
    ) -> Result<Option<Sched>, String> {
        if policy.is_none() && priority.is_none() && nice.is_none() {
            return Ok(None);
        }
        let policy = policy.unwrap_or(SchedPolicy::Other);
        let priority = match (policy.is_realtime(), priority) {
            (true, None) => {
                return Err(format!(
                    "{key}sched-policy {policy} needs {key}sched-priority (1 to 99)"
                ))
            }
            (true, Some(p)) => match u32::try_from(p) {
                Ok(v) if (1..=RT_PRIORITY_MAX).contains(&v) => v,
                _ => return Err(format!("{key}sched-priority {p} is out of range: 1 to 99")),
            },
            (false, Some(_)) => {
                return Err(format!(
                    "{key}sched-priority is only for {key}sched-policy fifo or rr"
                ))
            }
            (false, None) => 0,
        };
        let nice = match nice {
            None => 0,
            Some(_) if !matches!(policy, SchedPolicy::Other | SchedPolicy::Batch) => {
                return Err(format!("{key}nice is not for {key}sched-policy {policy}"))
            }
            Some(n) if !(-20..=19).contains(&n) => {
                return Err(format!("{key}nice {n} is out of range: -20 to 19"))
            }
            Some(n) => n as i32,
        };
        Ok(Some(Sched {
            policy,
            priority,
            nice,
        }))
    }

    /// What only a privileged user may give a thread: a real-time policy, or a nice
    /// value below 0.
    pub fn privileged(&self) -> bool {
        self.policy.is_realtime() || self.nice < 0
    }
}

/// A thread's scheduling attributes as `sched_getattr` gives them (the fields a restore
/// needs; utilisation clamps are never changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SchedAttr {
    pub policy: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flags: u64,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub nice: i32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub priority: u32,
    /// `SCHED_DEADLINE`'s parameters, in nanoseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runtime: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deadline: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub period: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

impl SchedAttr {
    /// Whether a thread read as `self` still has what `want` set: its policy, and its
    /// priority (real-time) or nice value (`other`, `batch`). The kernel keeps a
    /// real-time thread's nice value from before, so it is not compared there.
    pub fn has(&self, want: &SchedAttr) -> bool {
        if self.policy != want.policy {
            return false;
        }
        match want.policy {
            SCHED_FIFO | SCHED_RR => self.priority == want.priority,
            SCHED_OTHER | SCHED_BATCH => self.nice == want.nice,
            _ => true,
        }
    }

    /// The attributes that put a thread back to `self` (flags kept to those a restore
    /// sets again).
    pub fn restoring(&self) -> SchedAttr {
        SchedAttr {
            flags: self.flags & RESTORED_FLAGS,
            ..*self
        }
    }

    /// The policy's word (`fifo`, `other`, `deadline`), or `policy 7`.
    pub fn policy_name(&self) -> String {
        match self.policy {
            SCHED_OTHER => "other",
            SCHED_BATCH => "batch",
            SCHED_IDLE => "idle",
            SCHED_FIFO => "fifo",
            SCHED_RR => "rr",
            SCHED_DEADLINE => "deadline",
            n => return format!("policy {n}"),
        }
        .to_string()
    }

    /// `fifo 50`, `other nice -5`, `deadline`, `policy 7`.
    pub fn words(&self) -> String {
        let name = self.policy_name();
        match self.policy {
            SCHED_FIFO | SCHED_RR => format!("{name} {}", self.priority),
            SCHED_OTHER | SCHED_BATCH if self.nice != 0 => format!("{name} nice {}", self.nice),
            _ => name.to_string(),
        }
    }
}

/// The kernel's `struct sched_attr` (`SCHED_ATTR_SIZE_VER1`: 56 bytes).
#[repr(C)]
#[derive(Debug, Default)]
struct RawAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

fn error(tid: Tid, op: &'static str, err: std::io::Error) -> AffinityError {
    match err.raw_os_error() {
        Some(libc::ESRCH) => AffinityError::Gone { tid },
        Some(libc::EPERM) => AffinityError::Permission { tid },
        _ => AffinityError::Os {
            tid,
            op,
            source: err,
        },
    }
}

/// `sched_getattr` of task `tid`.
pub fn get(tid: Tid) -> Result<SchedAttr, AffinityError> {
    let mut raw = RawAttr::default();
    let size = std::mem::size_of::<RawAttr>() as libc::c_uint;
    // SAFETY: the pointer and size describe `raw`, which outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::pid_t,
            &mut raw as *mut RawAttr,
            size,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(error(tid, "sched_getattr", std::io::Error::last_os_error()));
    }
    Ok(SchedAttr {
        policy: raw.sched_policy,
        flags: raw.sched_flags,
        nice: raw.sched_nice,
        priority: raw.sched_priority,
        runtime: raw.sched_runtime,
        deadline: raw.sched_deadline,
        period: raw.sched_period,
    })
}

/// `sched_setattr` of task `tid`. The utilisation clamps are not touched (no
/// `SCHED_FLAG_UTIL_CLAMP*`). EPERM: another user's task, or a real-time priority over
/// the caller's `RLIMIT_RTPRIO` without `CAP_SYS_NICE`; EBUSY: `SCHED_DEADLINE`'s
/// admission control, or a real-time policy where the cgroup has no real-time runtime.
pub fn set(tid: Tid, attr: &SchedAttr) -> Result<(), AffinityError> {
    let raw = RawAttr {
        size: std::mem::size_of::<RawAttr>() as u32,
        sched_policy: attr.policy,
        sched_flags: attr.flags & RESTORED_FLAGS,
        sched_nice: attr.nice,
        sched_priority: attr.priority,
        sched_runtime: attr.runtime,
        sched_deadline: attr.deadline,
        sched_period: attr.period,
        ..RawAttr::default()
    };
    // SAFETY: the pointer describes `raw` (its size in its first field), which outlives
    // the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::pid_t,
            &raw as *const RawAttr,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(error(tid, "sched_setattr", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reads_and_sets_its_own_nice() {
        // A thread of its own, so that the test runner's other threads keep theirs.
        std::thread::spawn(|| {
            let tid = super::super::own_tid();
            let before = get(tid).unwrap();
            assert_eq!(before.policy, SCHED_OTHER);
            let want = Sched {
                policy: SchedPolicy::Batch,
                priority: 0,
                nice: 7,
            }
            .attr();
            set(tid, &want).unwrap();
            let now = get(tid).unwrap();
            assert!(now.has(&want), "{now:?}");
            assert_eq!(now.words(), "batch nice 7");
            // Raising the nice value again needs CAP_SYS_NICE; give back only where
            // that is allowed (the thread ends anyway).
            let _ = set(tid, &before.restoring());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_realtime_thread_is_compared_by_priority_not_nice() {
        let had = SchedAttr {
            policy: SCHED_FIFO,
            nice: 5,
            priority: 10,
            ..SchedAttr::default()
        };
        let want = Sched {
            policy: SchedPolicy::Fifo,
            priority: 10,
            nice: 0,
        }
        .attr();
        assert!(had.has(&want));
        assert!(!SchedAttr {
            priority: 11,
            ..had
        }
        .has(&want));
        assert_eq!(want.flags, SCHED_FLAG_RESET_ON_FORK);
        assert_eq!(had.words(), "fifo 10");
        assert_eq!(SchedAttr { flags: 0x60, ..had }.restoring().flags, 0);
    }

    #[test]
    fn a_task_that_does_not_exist_is_gone() {
        assert!(matches!(get(i32::MAX), Err(AffinityError::Gone { .. })));
    }
}
