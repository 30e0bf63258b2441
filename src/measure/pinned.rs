//! The per-thread probes of a measuring thread: pin the calling thread to one CPU and
//! verify it (`pin_current`), where it runs now (`current_cpu`), how often it was
//! switched out (`context_switches`). The thin syscall layer the spin engine calls at
//! batch boundaries; it knows nothing of runs or pairs.

use crate::affinity::{AffinityOps as _, SystemOps};
use crate::cpuset::CpuSet;

/// Why a thread is not where it was put.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinFailure {
    /// The kernel refused the affinity change (CPU offline, outside our cpuset…).
    #[error("setting the affinity of thread {tid} to CPU {cpu} failed")]
    Refused { cpu: u32, tid: i32 },
    /// The affinity read back is not the one CPU asked for.
    #[error("thread {tid} asked for CPU {cpu} but its affinity reads back as {got}")]
    MaskDiffers { cpu: u32, tid: i32, got: String },
    /// The thread is running on another CPU than the one it is pinned to.
    #[error("thread {tid} is pinned to CPU {cpu} but runs on CPU {running}")]
    Elsewhere { cpu: u32, tid: i32, running: i64 },
    /// Reading the affinity back failed.
    #[error("reading back the affinity of thread {tid}: {errno}")]
    ReadBack { tid: i32, errno: String },
}

use crate::affinity::own_tid as gettid;

/// The CPU the calling thread runs on now (`sched_getcpu`), or -1 when unknown.
pub fn current_cpu() -> i64 {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    i64::from(unsafe { libc::sched_getcpu() })
}

/// Voluntary + involuntary context switches of the calling thread so far.
pub fn context_switches() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is valid on
    // Linux since 2.6.26.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        // Cannot tell: report a value that changes, so the batch is treated as
        // disturbed rather than trusted blindly.
        return u64::MAX;
    }
    (ru.ru_nvcsw as u64).wrapping_add(ru.ru_nivcsw as u64)
}

/// Pins the calling thread to `cpu` and verifies it: the affinity read back is exactly
/// `{cpu}` and the thread is running there.
pub fn pin_current(cpu: u32) -> Result<(), PinFailure> {
    let tid = gettid();
    // The crate's one mask type, sized to the CPU: no fixed 1,024-bit `cpu_set_t`.
    let ops = SystemOps::default();
    if cpu > crate::cpuset::MAX_CPU_ID || ops.set_affinity(tid, &CpuSet::from_iter([cpu])).is_err()
    {
        return Err(PinFailure::Refused { cpu, tid });
    }
    let got = ops.get_affinity(tid).map_err(|e| PinFailure::ReadBack {
        tid,
        errno: e.to_string(),
    })?;
    if got.len() != 1 || !got.contains(cpu) {
        return Err(PinFailure::MaskDiffers {
            cpu,
            tid,
            got: got.to_string(),
        });
    }
    let running = current_cpu();
    if running != i64::from(cpu) {
        return Err(PinFailure::Elsewhere { cpu, tid, running });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_is_verified_for_real() {
        let target = crate::measure::allowed_cpus().unwrap().last().unwrap();
        std::thread::spawn(move || {
            pin_current(target).unwrap();
            assert_eq!(current_cpu(), i64::from(target));
            // A CPU that does not exist is refused, past 1,024 and at the largest id
            // alike (a fixed 1,024-bit set could not even name them).
            for absent in [
                4000,
                crate::cpuset::MAX_CPU_ID,
                crate::cpuset::MAX_CPU_ID + 1,
            ] {
                let e = pin_current(absent).unwrap_err();
                assert!(
                    matches!(e, PinFailure::Refused { cpu, .. } if cpu == absent),
                    "{e}"
                );
            }
            // And the earlier pin still holds.
            assert_eq!(current_cpu(), i64::from(target));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn context_switches_are_counted() {
        let before = context_switches();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(
            context_switches() > before,
            "sleeping is a voluntary switch"
        );
    }
}
