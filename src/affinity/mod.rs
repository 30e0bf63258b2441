//! Applying, reading back and restoring thread affinity.
//!
//! Owns: the [`AffinityOps`] seam (the only place the affinity of other tasks is set
//! or read, and `pidfd_open` called), the classification of every outcome
//! ([`Outcome`]), the restore journal kept under the runtime directory ([`restore`]),
//! [`give_back`] (the masks a hold let go of, for `hold`), and [`own_tid`], the one way the crate asks the calling thread's id. Measurement
//! pins only its own spinning threads (`measure::pinned`, and the independent ping-pong
//! it is checked by, `measure::plain`) through [`SystemOps`] too, and reads the CPUs
//! this process may use here (`measure::allowed_cpus`): one mask type
//! ([`CpuSet`]) at any size, up to the kernel's 8,192 CPUs, nowhere a fixed
//! 1,024-bit `cpu_set_t`.
//!
//! Must not touch: which CPUs a task should get (see `manager`, `placement`) or how
//! processes are discovered (see `watch`).
//!
//! ```text
//! manager ── set(tid, want) ──► AffinityOps ──► kernel
//!         ◄─ Outcome ───────── apply() ◄─ get(tid) (read back)
//! ```
//!
//! [`SystemOps`] is the real implementation; [`FakeOps`] records calls and simulates
//! cpusets, vanished tasks and permission errors for unit tests.

pub mod restore;
pub mod sched;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

/// A kernel task id (a thread id; for the main thread it equals the process id).
pub type Tid = i32;

/// The calling thread's id (`gettid`): the one way the crate asks it.
pub fn own_tid() -> Tid {
    nix::unistd::gettid().as_raw()
}

/// Why an affinity call failed. The message of each variant names the task.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The task exited (ESRCH), or the pid now belongs to another process.
    #[error("tid {tid}: no such task")]
    Gone { tid: Tid },
    /// EINVAL: none of the requested CPUs is allowed for the task (its cpuset excludes
    /// them all, or they are all offline), or the task refuses affinity changes
    /// (per-CPU kernel threads).
    #[error("tid {tid}: the kernel refused CPUs {cpus}: none is allowed for this task")]
    Invalid { tid: Tid, cpus: CpuSet },
    /// EPERM: changing another user's task needs CAP_SYS_NICE.
    #[error("tid {tid}: not permitted to change its affinity (needs CAP_SYS_NICE)")]
    Permission { tid: Tid },
    /// Any other failure of the system call.
    #[error("tid {tid}: {op} failed: {source}")]
    Os {
        tid: Tid,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// What happened when a mask was applied to one task. Races are outcomes, not errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The task now runs on exactly the requested CPUs (those of them online).
    Applied { effective: CpuSet },
    /// The kernel accepted the mask but a cpuset narrowed it to `effective`.
    Narrowed {
        requested: CpuSet,
        effective: CpuSet,
    },
    /// The cpuset excludes every requested CPU (EINVAL), or every requested CPU is
    /// offline. Not retried until the CPUs or the rules change.
    Refused { requested: CpuSet },
    /// The task exited before or during the call (ESRCH).
    Gone,
    /// A kernel thread: skipped without a call.
    KernelThread,
    /// Not permitted (EPERM).
    Permission,
    /// Anything else, with the message.
    Failed { message: String },
    /// Not pinned, on purpose, and why: no thread entry takes the thread and its rule
    /// has no `[rule.place]`, or its placement unit is not applied. No call was made.
    LeftAlone { why: String },
}

impl Outcome {
    /// The word used in logs, `ListManaged` and `Explain`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Applied { .. } => "applied",
            Outcome::Narrowed { .. } => "narrowed",
            Outcome::Refused { .. } => "refused",
            Outcome::Gone => "gone",
            Outcome::KernelThread => "kernel-thread",
            Outcome::Permission => "permission",
            Outcome::Failed { .. } => "failed",
            Outcome::LeftAlone { .. } => "left-alone",
        }
    }

    /// In words, for a log line: `applied: CPUs 2-3`, `failed: …`.
    pub fn words(&self) -> String {
        match self {
            Outcome::Applied { effective } => format!("applied: CPUs {effective}"),
            Outcome::Narrowed {
                requested,
                effective,
            } => format!("narrowed by its cpuset from {requested} to {effective}"),
            Outcome::Refused { requested } => {
                format!("refused: none of CPUs {requested} is allowed by its cpuset or online")
            }
            Outcome::Gone => "the thread exited".into(),
            Outcome::KernelThread => "a kernel thread: left alone".into(),
            Outcome::Permission => "not permitted (CAP_SYS_NICE?)".into(),
            Outcome::Failed { message } => format!("failed: {message}"),
            Outcome::LeftAlone { why } => format!("left alone: {why}"),
        }
    }

    /// The mask the task runs with after a successful call.
    pub fn effective(&self) -> Option<&CpuSet> {
        match self {
            Outcome::Applied { effective } | Outcome::Narrowed { effective, .. } => Some(effective),
            _ => None,
        }
    }
}

/// A process held for later actions: its pid, the start time seen at first contact
/// and (for real processes) a pidfd, which outlives pid reuse.
#[derive(Debug)]
pub struct ProcessHandle {
    pub pid: i32,
    /// Start time in clock ticks after boot (field 22 of `/proc/PID/stat`).
    pub start_time: u64,
    fd: Option<OwnedFd>,
}

impl ProcessHandle {
    /// A handle with no pidfd, for fakes and tests.
    pub fn detached(pid: i32, start_time: u64) -> Self {
        ProcessHandle {
            pid,
            start_time,
            fd: None,
        }
    }
}

/// The OS seam for everything the manager does to tasks.
pub trait AffinityOps {
    /// `sched_setaffinity(tid, cpus)`.
    fn set_affinity(&self, tid: Tid, cpus: &CpuSet) -> Result<(), AffinityError>;
    /// `sched_getaffinity(tid)`: the mask the task runs with (online CPUs only).
    fn get_affinity(&self, tid: Tid) -> Result<CpuSet, AffinityError>;
    /// Holds process `pid` if it is still the one that started at `start_time`;
    /// `Gone` if it exited or its pid was reused.
    fn hold(&self, pid: i32, start_time: u64) -> Result<ProcessHandle, AffinityError>;
    /// Whether the held process is still running (its pid cannot have been reused).
    fn alive(&self, handle: &ProcessHandle) -> bool;
    /// `sched_getattr(tid)`: its scheduling policy, priority and nice value.
    fn get_sched(&self, tid: Tid) -> Result<sched::SchedAttr, AffinityError>;
    /// `sched_setattr(tid, attr)`.
    fn set_sched(&self, tid: Tid, attr: &sched::SchedAttr) -> Result<(), AffinityError>;
}

/// Sets `requested` on `tid`, reads it back and classifies the result.
///
/// `online` is the set of online CPUs: a requested CPU that is offline does not count
/// as narrowing. A task whose mask already equals the request is not written again.
pub fn apply(ops: &dyn AffinityOps, tid: Tid, requested: &CpuSet, online: &CpuSet) -> Outcome {
    if requested.intersection(online).is_empty() {
        return apply_over(ops, tid, requested, online, None);
    }
    // Threads inherit their creator's mask: most new threads of a pinned process are
    // already right, and a read is cheaper than a write plus a read.
    let current = ops.get_affinity(tid).ok();
    apply_over(ops, tid, requested, online, current.as_ref())
}

/// [`apply`] for a task whose mask the caller has just read (`current`), so that it is
/// not read twice.
pub fn apply_over(
    ops: &dyn AffinityOps,
    tid: Tid,
    requested: &CpuSet,
    online: &CpuSet,
    current: Option<&CpuSet>,
) -> Outcome {
    let want_now = requested.intersection(online);
    if want_now.is_empty() {
        // Every requested CPU is offline: the kernel may accept the mask and then run
        // the task anywhere. Not applied; a CPU coming back re-applies.
        return Outcome::Refused {
            requested: requested.clone(),
        };
    }
    if current == Some(&want_now) {
        return Outcome::Applied {
            effective: want_now,
        };
    }
    match ops.set_affinity(tid, requested) {
        Ok(()) => {}
        Err(e) => return outcome_of_error(e, requested),
    }
    match ops.get_affinity(tid) {
        Ok(effective) => classify(requested, &want_now, effective),
        Err(e) => outcome_of_error(e, requested),
    }
}

fn classify(requested: &CpuSet, want_now: &CpuSet, effective: CpuSet) -> Outcome {
    if effective == *want_now {
        Outcome::Applied { effective }
    } else if effective.is_subset(requested) {
        Outcome::Narrowed {
            requested: requested.clone(),
            effective,
        }
    } else {
        Outcome::Failed {
            message: format!("asked for CPUs {requested}, read back {effective}"),
        }
    }
}

/// Maps an error of a set or get call to an outcome.
pub fn outcome_of_error(err: AffinityError, requested: &CpuSet) -> Outcome {
    match err {
        AffinityError::Gone { .. } => Outcome::Gone,
        AffinityError::Invalid { .. } => Outcome::Refused {
            requested: requested.clone(),
        },
        AffinityError::Permission { .. } => Outcome::Permission,
        e @ AffinityError::Os { .. } => Outcome::Failed {
            message: e.to_string(),
        },
    }
}

/// Gives tasks back their masks after a hold let go of `held` (systemd leaves a unit's
/// tasks on the CPUs it was confined to when its `AllowedCPUs=` is reset, systemd
/// #43846): each of `tids` whose mask is exactly `held`, or its original narrowed to
/// `held`, gets its original from `originals` (by tid: the mask before pinnerd first
/// touched it), else `fallback`. A task gone or refused is skipped. Returns how many
/// were given back.
pub fn give_back(
    ops: &dyn AffinityOps,
    tids: impl IntoIterator<Item = Tid>,
    held: &CpuSet,
    originals: &BTreeMap<u32, CpuSet>,
    fallback: &CpuSet,
) -> usize {
    let mut n = 0;
    for tid in tids {
        let Ok(mask) = ops.get_affinity(tid) else {
            continue;
        };
        let original = u32::try_from(tid).ok().and_then(|t| originals.get(&t));
        let narrowed = original.is_some_and(|o| mask == o.intersection(held));
        if &mask != held && !narrowed {
            continue;
        }
        let back = original.unwrap_or(fallback);
        if back != &mask && ops.set_affinity(tid, back).is_ok() {
            n += 1;
        }
    }
    n
}

/// The real kernel.
#[derive(Debug, Clone, Default)]
pub struct SystemOps {
    root: SysRoot,
}

/// Largest mask tried by `sched_getaffinity` (bits): far above any kernel's NR_CPUS.
const MAX_MASK_BITS: usize = 1 << 20;

impl SystemOps {
    pub fn new(root: SysRoot) -> Self {
        SystemOps { root }
    }

    fn errno_error(
        tid: Tid,
        op: &'static str,
        err: std::io::Error,
        cpus: &CpuSet,
    ) -> AffinityError {
        match err.raw_os_error() {
            Some(libc::ESRCH) => AffinityError::Gone { tid },
            Some(libc::EINVAL) => AffinityError::Invalid {
                tid,
                cpus: cpus.clone(),
            },
            Some(libc::EPERM) => AffinityError::Permission { tid },
            _ => AffinityError::Os {
                tid,
                op,
                source: err,
            },
        }
    }
}

impl AffinityOps for SystemOps {
    fn set_affinity(&self, tid: Tid, cpus: &CpuSet) -> Result<(), AffinityError> {
        // The kernel copies min(len, its mask size) bytes and zero-fills the rest, so a
        // mask exactly as long as the set needs is always enough.
        // 64-bit words have the layout of the kernel's `unsigned long` bitmap on every
        // little-endian target and on 64-bit big-endian ones.
        let words: Vec<u64> = cpus.as_words().to_vec();
        let words = if words.is_empty() { vec![0] } else { words };
        // SAFETY: the pointer and length describe `words`, which outlives the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setaffinity,
                tid as libc::pid_t,
                std::mem::size_of_val(words.as_slice()),
                words.as_ptr(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Self::errno_error(
                tid,
                "sched_setaffinity",
                std::io::Error::last_os_error(),
                cpus,
            ))
        }
    }

    fn get_affinity(&self, tid: Tid) -> Result<CpuSet, AffinityError> {
        // The buffer must hold the kernel's nr_cpu_ids bits; EINVAL means "too small".
        let mut bits = 1024usize;
        loop {
            let mut words: Vec<u64> = vec![0; bits / 64];
            // SAFETY: the pointer and length describe `words`, which outlives the call.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_sched_getaffinity,
                    tid as libc::pid_t,
                    std::mem::size_of_val(words.as_slice()),
                    words.as_mut_ptr(),
                )
            };
            if rc >= 0 {
                let used = (rc as usize).div_ceil(8);
                words.truncate(used.min(words.len()));
                return Ok(CpuSet::from_words(words));
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) && bits < MAX_MASK_BITS {
                bits *= 2;
                continue;
            }
            return Err(Self::errno_error(
                tid,
                "sched_getaffinity",
                err,
                &CpuSet::new(),
            ));
        }
    }

    fn hold(&self, pid: i32, start_time: u64) -> Result<ProcessHandle, AffinityError> {
        if pid <= 0 {
            return Err(AffinityError::Gone { tid: pid });
        }
        // nix has no pidfd API: the raw call.
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let rc =
            unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            return Err(Self::errno_error(pid, "pidfd_open", err, &CpuSet::new()));
        }
        // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(rc as i32) };
        // The pidfd now pins whichever process has this pid; make sure it is the one
        // we saw, not a successor that reused the pid.
        match read_start_time(&self.root, pid, pid) {
            Some(t) if t == start_time => Ok(ProcessHandle {
                pid,
                start_time,
                fd: Some(fd),
            }),
            _ => Err(AffinityError::Gone { tid: pid }),
        }
    }

    fn alive(&self, handle: &ProcessHandle) -> bool {
        let Some(fd) = &handle.fd else {
            return read_start_time(&self.root, handle.pid, handle.pid) == Some(handle.start_time);
        };
        // A pidfd becomes readable when its process exits.
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        rc == 0
    }

    fn get_sched(&self, tid: Tid) -> Result<sched::SchedAttr, AffinityError> {
        sched::get(tid)
    }

    fn set_sched(&self, tid: Tid, attr: &sched::SchedAttr) -> Result<(), AffinityError> {
        sched::set(tid, attr)
    }
}

/// Start time (clock ticks after boot) of task `tid` of process `pid`, from
/// `/proc/PID/task/TID/stat`; `None` when it is gone or unreadable.
pub fn read_start_time(root: &SysRoot, pid: i32, tid: Tid) -> Option<u64> {
    let text =
        crate::sysroot::read_bounded(root.proc_path(format!("{pid}/task/{tid}/stat"))).ok()?;
    parse_stat(&text).map(|s| s.start_time)
}

/// The fields of `/proc/PID/stat` the watcher and the restorer need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFields {
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z` (exited, not yet reaped), `X` (dead), …
    pub state: char,
    pub ppid: i32,
    /// `PF_*` flags (field 9).
    pub flags: u64,
    /// Field 20.
    pub num_threads: u32,
    pub start_time: u64,
}

impl StatFields {
    /// The whole process has exited: a zombie waiting for its parent, or dead. A leader
    /// that is a zombie while other threads of the process still run (it called
    /// `pthread_exit`) counts itself in `num_threads` with them, so it is not.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x') && self.num_threads <= 1
    }
}

/// `PF_KTHREAD` from include/linux/sched.h.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// Parses the fields we need from a `stat` line. The comm is in parentheses and may
/// itself contain spaces and parentheses, so the rest is split after the last `)`.
pub fn parse_stat(text: &str) -> Option<StatFields> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_ascii_whitespace();
    // rest[0] is field 3 (state).
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // fields 5..=8: pgrp, session, tty_nr, tpgid
    let mut rest = rest.skip(4);
    let flags = rest.next()?.parse().ok()?;
    // fields 10..=19 (10 fields), then 20 = num_threads, 21, then 22 = starttime
    let num_threads = rest.nth(10)?.parse().ok()?;
    let start_time = rest.nth(1)?.parse().ok()?;
    Some(StatFields {
        comm,
        state,
        ppid,
        flags,
        num_threads,
        start_time,
    })
}

/// Thread ids of process `pid` from `/proc/PID/task` (empty when it is gone).
pub fn list_tids(root: &SysRoot, pid: i32) -> Vec<Tid> {
    let Ok(dir) = fs::read_dir(root.proc_path(format!("{pid}/task"))) else {
        return Vec::new();
    };
    let mut tids: Vec<Tid> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// Reads the real system but changes nothing: `set_affinity` only remembers what
/// would have been set (for `pinnerd plan --live`).
#[derive(Debug, Default)]
pub struct DryRunOps {
    real: SystemOps,
    planned: Mutex<BTreeMap<Tid, CpuSet>>,
    planned_sched: Mutex<BTreeMap<Tid, sched::SchedAttr>>,
}

impl DryRunOps {
    pub fn new(root: SysRoot) -> Self {
        DryRunOps {
            real: SystemOps::new(root),
            planned: Mutex::new(BTreeMap::new()),
            planned_sched: Mutex::new(BTreeMap::new()),
        }
    }

    /// What would have been set, by task.
    pub fn planned(&self) -> BTreeMap<Tid, CpuSet> {
        self.planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The scheduling classes that would have been set, by task.
    pub fn planned_sched(&self) -> BTreeMap<Tid, sched::SchedAttr> {
        self.planned_sched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The task's real mask now.
    pub fn real_mask(&self, tid: Tid) -> Result<CpuSet, AffinityError> {
        self.real.get_affinity(tid)
    }
}

impl AffinityOps for DryRunOps {
    fn set_affinity(&self, tid: Tid, cpus: &CpuSet) -> Result<(), AffinityError> {
        // Validate against the task without changing it: it must exist.
        self.real.get_affinity(tid)?;
        self.planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tid, cpus.clone());
        Ok(())
    }

    fn get_affinity(&self, tid: Tid) -> Result<CpuSet, AffinityError> {
        let real = self.real.get_affinity(tid)?;
        Ok(self
            .planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tid)
            .cloned()
            .unwrap_or(real))
    }

    fn hold(&self, pid: i32, start_time: u64) -> Result<ProcessHandle, AffinityError> {
        self.real.hold(pid, start_time)
    }

    fn alive(&self, handle: &ProcessHandle) -> bool {
        self.real.alive(handle)
    }

    fn get_sched(&self, tid: Tid) -> Result<sched::SchedAttr, AffinityError> {
        let real = self.real.get_sched(tid)?;
        Ok(self
            .planned_sched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tid)
            .copied()
            .unwrap_or(real))
    }

    fn set_sched(&self, tid: Tid, attr: &sched::SchedAttr) -> Result<(), AffinityError> {
        self.real.get_sched(tid)?;
        self.planned_sched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tid, *attr);
        Ok(())
    }
}

/// One recorded call of [`FakeOps`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Set(Tid, CpuSet),
    Get(Tid),
}

/// A recording fake: tasks with masks, optional cpusets, and injected failures.
#[derive(Debug, Default)]
pub struct FakeOps {
    state: Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    masks: BTreeMap<Tid, CpuSet>,
    /// Requested masks (what the kernel remembers as the user's wish).
    cpusets: BTreeMap<Tid, CpuSet>,
    gone: BTreeSet<Tid>,
    denied: BTreeSet<Tid>,
    /// pid → start time of the process currently holding that pid.
    processes: BTreeMap<i32, u64>,
    /// Scheduling classes set or given (a task not here is `SCHED_OTHER`, nice 0).
    scheds: BTreeMap<Tid, sched::SchedAttr>,
    /// Tasks whose class cannot be set (EPERM: a real-time priority over the limit).
    sched_denied: BTreeSet<Tid>,
    calls: Vec<Call>,
}

impl FakeOps {
    pub fn new() -> Self {
        FakeOps::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A process `pid` started at `start_time` with the given threads, all on `mask`.
    pub fn add_process(&self, pid: i32, start_time: u64, tids: &[Tid], mask: &CpuSet) {
        let mut s = self.lock();
        s.processes.insert(pid, start_time);
        for &t in tids.iter().chain(std::iter::once(&pid)) {
            s.masks.insert(t, mask.clone());
            s.gone.remove(&t);
        }
    }

    /// A task appears (a new thread) with `mask`.
    pub fn add_task(&self, tid: Tid, mask: &CpuSet) {
        let mut s = self.lock();
        s.masks.insert(tid, mask.clone());
        s.gone.remove(&tid);
    }

    /// The task exits.
    pub fn remove_task(&self, tid: Tid) {
        let mut s = self.lock();
        s.masks.remove(&tid);
        s.gone.insert(tid);
        if s.processes.remove(&tid).is_some() {
            // The pid may be reused later by add_process.
        }
    }

    /// The task is confined to `cpuset`; its mask is narrowed as the kernel would.
    pub fn set_cpuset(&self, tid: Tid, cpuset: &CpuSet) {
        let mut s = self.lock();
        s.cpusets.insert(tid, cpuset.clone());
        if let Some(m) = s.masks.get(&tid).cloned() {
            let narrowed = m.intersection(cpuset);
            s.masks.insert(
                tid,
                if narrowed.is_empty() {
                    cpuset.clone()
                } else {
                    narrowed
                },
            );
        }
    }

    /// Changes to `tid` are refused with EPERM.
    pub fn deny(&self, tid: Tid) {
        self.lock().denied.insert(tid);
    }

    /// Someone else changes the task's mask.
    pub fn external_set(&self, tid: Tid, mask: &CpuSet) {
        self.lock().masks.insert(tid, mask.clone());
    }

    /// The task's current mask.
    pub fn mask(&self, tid: Tid) -> Option<CpuSet> {
        self.lock().masks.get(&tid).cloned()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Only the `set` calls so far.
    pub fn sets(&self) -> Vec<(Tid, CpuSet)> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Set(t, m) => Some((*t, m.clone())),
                Call::Get(_) => None,
            })
            .collect()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The task's scheduling class now.
    pub fn sched(&self, tid: Tid) -> sched::SchedAttr {
        self.lock().scheds.get(&tid).copied().unwrap_or_default()
    }

    /// Someone else sets the task's class.
    pub fn external_sched(&self, tid: Tid, attr: sched::SchedAttr) {
        self.lock().scheds.insert(tid, attr);
    }

    /// Setting the task's class is refused with EPERM from now on.
    pub fn deny_sched(&self, tid: Tid) {
        self.lock().sched_denied.insert(tid);
    }
}

impl AffinityOps for FakeOps {
    fn set_affinity(&self, tid: Tid, cpus: &CpuSet) -> Result<(), AffinityError> {
        let mut s = self.lock();
        s.calls.push(Call::Set(tid, cpus.clone()));
        if s.gone.contains(&tid) || !s.masks.contains_key(&tid) {
            return Err(AffinityError::Gone { tid });
        }
        if s.denied.contains(&tid) {
            return Err(AffinityError::Permission { tid });
        }
        let effective = match s.cpusets.get(&tid) {
            Some(limit) => cpus.intersection(limit),
            None => cpus.clone(),
        };
        if effective.is_empty() {
            return Err(AffinityError::Invalid {
                tid,
                cpus: cpus.clone(),
            });
        }
        s.masks.insert(tid, effective);
        Ok(())
    }

    fn get_affinity(&self, tid: Tid) -> Result<CpuSet, AffinityError> {
        let mut s = self.lock();
        s.calls.push(Call::Get(tid));
        s.masks
            .get(&tid)
            .cloned()
            .ok_or(AffinityError::Gone { tid })
    }

    fn hold(&self, pid: i32, start_time: u64) -> Result<ProcessHandle, AffinityError> {
        match self.lock().processes.get(&pid) {
            Some(&t) if t == start_time => Ok(ProcessHandle::detached(pid, start_time)),
            _ => Err(AffinityError::Gone { tid: pid }),
        }
    }

    fn alive(&self, handle: &ProcessHandle) -> bool {
        self.lock().processes.get(&handle.pid) == Some(&handle.start_time)
    }

    fn get_sched(&self, tid: Tid) -> Result<sched::SchedAttr, AffinityError> {
        let s = self.lock();
        if s.gone.contains(&tid) || !s.masks.contains_key(&tid) {
            return Err(AffinityError::Gone { tid });
        }
        Ok(s.scheds.get(&tid).copied().unwrap_or_default())
    }

    fn set_sched(&self, tid: Tid, attr: &sched::SchedAttr) -> Result<(), AffinityError> {
        let mut s = self.lock();
        if s.gone.contains(&tid) || !s.masks.contains_key(&tid) {
            return Err(AffinityError::Gone { tid });
        }
        if s.sched_denied.contains(&tid) {
            return Err(AffinityError::Permission { tid });
        }
        s.scheds.insert(tid, *attr);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
