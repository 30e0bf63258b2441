//! Checks that say whether a figure can be trusted: did the pin hold, did the thread
//! get switched out, is this a virtual machine, is the clock fine enough.
//!
//! The per-thread probes (`pin_current`, `current_cpu`, `context_switches`) are the
//! thin syscall layer the spin engine calls at batch boundaries; the rest is pure or
//! reads through `SysRoot`.

use std::time::{Duration, Instant};

use nix::sched::sched_getaffinity;
use nix::unistd::Pid;

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

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

fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

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
    // core_affinity does not range-check (libc's CPU_SET panics past the set's size).
    if cpu as usize >= nix::sched::CpuSet::count()
        || !core_affinity::set_for_current(core_affinity::CoreId { id: cpu as usize })
    {
        return Err(PinFailure::Refused { cpu, tid });
    }
    let mask = sched_getaffinity(Pid::from_raw(0)).map_err(|e| PinFailure::ReadBack {
        tid,
        errno: e.to_string(),
    })?;
    let got: CpuSet = (0..nix::sched::CpuSet::count())
        .filter(|&c| mask.is_set(c).unwrap_or(false))
        .map(|c| c as u32)
        .collect();
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

/// Whether the CPU flags in `/proc/cpuinfo` carry `hypervisor` (x86 guests), or
/// `/sys/hypervisor/type` names one (Xen and others).
pub fn hypervisor(root: &SysRoot) -> Option<String> {
    if let Ok(t) = crate::sysroot::read_bounded(root.sys_path("hypervisor/type")) {
        let t = t.trim();
        if !t.is_empty() {
            return Some(t.to_string());
        }
    }
    let cpuinfo = crate::sysroot::read_bounded(root.proc_path("cpuinfo")).ok()?;
    cpuinfo_has_hypervisor(&cpuinfo).then(|| "hypervisor flag".to_string())
}

/// Pure part of [`hypervisor`]: the `flags` line lists `hypervisor`.
pub fn cpuinfo_has_hypervisor(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_ascii_whitespace().any(|f| f == "hypervisor"))
}

/// The smallest step `Instant::now()` is seen to take: the clock's effective
/// resolution. A coarse clock quantises every batch figure.
pub fn timer_granularity() -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..200 {
        let a = Instant::now();
        let mut b = Instant::now();
        while b == a {
            b = Instant::now();
        }
        best = best.min(b - a);
    }
    best
}

/// A warning when the clock step is a noticeable share (> 1%) of a batch.
pub fn granularity_warning(granularity: Duration, batch: Duration) -> Option<String> {
    if batch.is_zero() || granularity.as_secs_f64() <= batch.as_secs_f64() * 0.01 {
        return None;
    }
    Some(format!(
        "the clock advances in steps of {} ns, {:.1}% of a {} µs batch: figures are quantised",
        granularity.as_nanos(),
        100.0 * granularity.as_secs_f64() / batch.as_secs_f64(),
        batch.as_micros()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypervisor_flag_in_cpuinfo() {
        assert!(cpuinfo_has_hypervisor(
            "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"
        ));
        assert!(!cpuinfo_has_hypervisor("flags\t\t: fpu vme\n"));
        assert!(!cpuinfo_has_hypervisor("model name\t: hypervisor-ish\n"));
    }

    #[test]
    fn hypervisor_on_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot {
            sys: dir.path().join("sys"),
            proc: dir.path().join("proc"),
        };
        assert_eq!(hypervisor(&root), None);
        std::fs::create_dir_all(&root.proc).unwrap();
        std::fs::write(root.proc.join("cpuinfo"), "flags : sse hypervisor\n").unwrap();
        assert_eq!(hypervisor(&root), Some("hypervisor flag".into()));
        std::fs::create_dir_all(root.sys.join("hypervisor")).unwrap();
        std::fs::write(root.sys.join("hypervisor/type"), "xen\n").unwrap();
        assert_eq!(hypervisor(&root), Some("xen".into()));
    }

    #[test]
    fn pin_is_verified_for_real() {
        let online = core_affinity::get_core_ids().unwrap();
        let target = online.last().unwrap().id as u32;
        std::thread::spawn(move || {
            pin_current(target).unwrap();
            assert_eq!(current_cpu(), i64::from(target));
            // A CPU that does not exist is refused.
            let e = pin_current(4000).unwrap_err();
            assert!(matches!(e, PinFailure::Refused { cpu: 4000, .. }), "{e}");
            // And the earlier pin still holds.
            assert_eq!(current_cpu(), i64::from(target));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn context_switches_are_counted() {
        let before = context_switches();
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            context_switches() > before,
            "sleeping is a voluntary switch"
        );
    }

    #[test]
    fn clock_granularity() {
        let g = timer_granularity();
        assert!(g > Duration::ZERO && g < Duration::from_millis(1), "{g:?}");
        assert_eq!(
            granularity_warning(Duration::from_nanos(30), Duration::from_micros(20)),
            None
        );
        let w = granularity_warning(Duration::from_nanos(1000), Duration::from_micros(20)).unwrap();
        assert!(w.contains("steps of 1000 ns, 5.0% of a 20 µs batch"), "{w}");
    }
}
