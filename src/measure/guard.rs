//! The load guard and steal accounting, both from `/proc/stat` per-CPU times.
//!
//! Measure only when the CPUs are idle enough: two snapshots some time apart give each
//! CPU's idle share; a CPU below the threshold means someone else is running there and
//! would preempt the spinning threads. Steal time over the whole run says the
//! hypervisor gave our vCPUs' time to someone else.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

use super::MeasureError;

/// `--idle-threshold` (or the settings' `idle-threshold`) was not a percentage.
#[derive(Debug, thiserror::Error)]
#[error("--idle-threshold is a percentage from 0 to 100, got {0}")]
pub struct IdleThresholdError(pub f64);

/// A minimum idle percentage (0 to 100) as the guard's minimum idle share (0 to 1).
pub fn idle_share(pct: f64) -> Result<f64, IdleThresholdError> {
    if !(0.0..=100.0).contains(&pct) {
        return Err(IdleThresholdError(pct));
    }
    Ok(pct / 100.0)
}

/// One CPU's cumulative times from `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// idle + iowait.
    pub idle: u64,
    /// user + nice + system + idle + iowait + irq + softirq + steal.
    pub total: u64,
    pub steal: u64,
}

/// Per-CPU times, by CPU id.
pub type StatSnapshot = BTreeMap<u32, CpuTimes>;

/// Parses the `cpuN` lines of `/proc/stat` (the aggregate `cpu` line is skipped).
/// Errors name the file and line.
pub fn parse_stat(text: &str, path: &Path) -> Result<StatSnapshot, MeasureError> {
    let mut out = StatSnapshot::new();
    for (k, line) in text.lines().enumerate() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(id) = name.strip_prefix("cpu") else {
            continue;
        };
        if id.is_empty() {
            continue;
        }
        let bad = |message: String| MeasureError::ParseProc {
            path: path.to_owned(),
            line: k + 1,
            message,
        };
        let cpu: u32 = id
            .parse()
            .map_err(|_| bad(format!("{name:?} is not cpuN")))?;
        let values: Vec<u64> = fields
            .map(|f| {
                f.parse()
                    .map_err(|_| bad(format!("{f:?} is not a tick count")))
            })
            .collect::<Result<_, _>>()?;
        if values.len() < 4 {
            return Err(bad(format!(
                "{name} has {} fields, expected at least 4",
                values.len()
            )));
        }
        let get = |i: usize| values.get(i).copied().unwrap_or(0);
        out.insert(
            cpu,
            CpuTimes {
                idle: get(3) + get(4),
                total: (0..8).map(get).sum(),
                steal: get(7),
            },
        );
    }
    Ok(out)
}

/// Reads and parses `/proc/stat` under `root`.
pub fn read_stat(root: &SysRoot) -> Result<StatSnapshot, MeasureError> {
    let path = root.proc_path("stat");
    let text = crate::sysroot::read_bounded(&path).map_err(|source| MeasureError::ReadProc {
        path: path.clone(),
        source,
    })?;
    parse_stat(&text, &path)
}

/// Idle share (0..=1) of each CPU in `cpus` between two snapshots. A CPU whose counters
/// did not advance (no ticks between the snapshots) counts as idle.
pub fn idle_shares(
    before: &StatSnapshot,
    after: &StatSnapshot,
    cpus: &CpuSet,
) -> BTreeMap<u32, f64> {
    cpus.iter()
        .map(|cpu| {
            let share = match (before.get(&cpu), after.get(&cpu)) {
                (Some(b), Some(a)) if a.total > b.total => {
                    a.idle.saturating_sub(b.idle) as f64 / (a.total - b.total) as f64
                }
                _ => 1.0,
            };
            (cpu, share.clamp(0.0, 1.0))
        })
        .collect()
}

/// Steal ticks of each CPU in `cpus` between two snapshots (only CPUs with steal).
pub fn steal_ticks(
    before: &StatSnapshot,
    after: &StatSnapshot,
    cpus: &CpuSet,
) -> BTreeMap<u32, u64> {
    cpus.iter()
        .filter_map(|cpu| {
            let d = after
                .get(&cpu)?
                .steal
                .saturating_sub(before.get(&cpu)?.steal);
            (d > 0).then_some((cpu, d))
        })
        .collect()
}

/// The guard's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadGuard {
    /// Minimum idle share (0..=1) every measured CPU must show; 0 disables the guard.
    pub min_idle: f64,
    /// Length of one observation.
    pub sample: Duration,
    /// How long to keep trying before giving up.
    pub wait: Duration,
    /// What sets `min_idle`, for the error that tells how to lower it: the command
    /// line's `--idle-threshold` or the daemon's `measure.idle-threshold`.
    pub set_by: &'static str,
}

impl Default for LoadGuard {
    fn default() -> Self {
        LoadGuard {
            min_idle: 0.75,
            sample: Duration::from_millis(200),
            wait: Duration::from_secs(10),
            set_by: "--idle-threshold",
        }
    }
}

/// What the guard saw when it let the measurement start.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardPass {
    /// The lowest idle share among the measured CPUs, with its CPU.
    pub least_idle: Option<(u32, f64)>,
}

impl LoadGuard {
    /// Waits until every CPU in `cpus` is idle enough, observing `/proc/stat` under
    /// `root`; `MeasureError::Busy` when they are still busy after `wait`.
    pub fn wait_idle(&self, root: &SysRoot, cpus: &CpuSet) -> Result<GuardPass, MeasureError> {
        self.wait_idle_reporting(root, cpus, |_, _| {})
    }

    /// [`LoadGuard::wait_idle`], calling `on_busy(cpu, idle share)` after every
    /// observation that found a CPU too busy (for a progress display).
    pub fn wait_idle_reporting(
        &self,
        root: &SysRoot,
        cpus: &CpuSet,
        mut on_busy: impl FnMut(u32, f64),
    ) -> Result<GuardPass, MeasureError> {
        if self.min_idle <= 0.0 {
            return Ok(GuardPass { least_idle: None });
        }
        let started = Instant::now();
        // Said once when the wait begins and once when it ends, not at every sample.
        let mut waiting = false;
        loop {
            let before = read_stat(root)?;
            std::thread::sleep(self.sample);
            let after = read_stat(root)?;
            let shares = idle_shares(&before, &after, cpus);
            let least = shares
                .iter()
                .map(|(&c, &s)| (c, s))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            match least {
                Some((cpu, share)) if share < self.min_idle => {
                    if started.elapsed() >= self.wait {
                        return Err(MeasureError::Busy {
                            cpu,
                            idle_pct: share * 100.0,
                            threshold_pct: self.min_idle * 100.0,
                            waited: started.elapsed(),
                            set_by: self.set_by,
                        });
                    }
                    if !waiting {
                        tracing::info!(
                            cpu,
                            idle_pct = share * 100.0,
                            "waiting for the CPUs to become idle: CPU {cpu} is {:.0}% idle, {:.0}% wanted, for at most {:.1} s",
                            share * 100.0,
                            self.min_idle * 100.0,
                            self.wait.as_secs_f64()
                        );
                        waiting = true;
                    }
                    on_busy(cpu, share);
                }
                _ => {
                    if waiting {
                        tracing::info!(
                            "the CPUs became idle after {:.1} s: measuring",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    return Ok(GuardPass { least_idle: least });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT1: &str = "cpu  100 0 100 800 0 0 0 0 0 0\n\
cpu0 50 0 50 400 0 0 0 0 0 0\n\
cpu1 50 0 50 400 0 0 0 3 0 0\n\
intr 12345 0 0\n";
    const STAT2: &str = "cpu  250 0 150 900 0 0 0 0 0 0\n\
cpu0 60 0 50 490 0 0 0 0 0 0\n\
cpu1 190 0 100 410 10 0 0 13 0 0\n\
intr 12345 0 0\n";

    #[test]
    fn idle_and_steal_from_two_snapshots() {
        let p = Path::new("stat");
        let a = parse_stat(STAT1, p).unwrap();
        let b = parse_stat(STAT2, p).unwrap();
        let cpus: CpuSet = "0-1".parse().unwrap();
        let idle = idle_shares(&a, &b, &cpus);
        assert!((idle[&0] - 0.9).abs() < 1e-12, "{idle:?}");
        // cpu1: idle + iowait 20 of 220 ticks.
        assert!((idle[&1] - 20.0 / 220.0).abs() < 1e-12);
        assert_eq!(steal_ticks(&a, &b, &cpus), BTreeMap::from([(1, 10)]));
        // A CPU missing from /proc/stat counts as idle (no evidence of load).
        assert_eq!(idle_shares(&a, &b, &"5".parse().unwrap())[&5], 1.0);
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let e = parse_stat("cpu 1 2 3 4\ncpu0 1 x 3 4\n", Path::new("/p/stat")).unwrap_err();
        assert_eq!(e.to_string(), "/p/stat:2: \"x\" is not a tick count");
        let e = parse_stat("cpuX 1 2 3 4\n", Path::new("s")).unwrap_err();
        assert_eq!(e.to_string(), "s:1: \"cpuX\" is not cpuN");
        let e = parse_stat("cpu0 1 2\n", Path::new("s")).unwrap_err();
        assert!(e.to_string().contains("expected at least 4"), "{e}");
    }

    #[test]
    fn guard_on_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        // A frozen /proc/stat: counters never advance, so the CPUs count as idle.
        std::fs::write(dir.path().join("proc/stat"), STAT1).unwrap();
        let root = SysRoot {
            sys: dir.path().join("sys"),
            proc: dir.path().join("proc"),
        };
        let guard = LoadGuard {
            min_idle: 0.9,
            sample: Duration::from_millis(1),
            wait: Duration::ZERO,
            ..LoadGuard::default()
        };
        let pass = guard.wait_idle(&root, &"0-1".parse().unwrap()).unwrap();
        assert_eq!(pass.least_idle, Some((0, 1.0)));
        // A missing /proc/stat is an error naming the path.
        std::fs::remove_file(dir.path().join("proc/stat")).unwrap();
        let e = guard.wait_idle(&root, &"0-1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("proc/stat"), "{e}");
    }

    /// A thread keeping CPU 0 busy until dropped.
    struct BusyCpu0 {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl BusyCpu0 {
        fn start() -> BusyCpu0 {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            let thread = std::thread::spawn(move || {
                let _ = crate::measure::pinned::pin_current(0);
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            BusyCpu0 {
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for BusyCpu0 {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// A wait for idle CPUs is said once, not at every sample of it.
    #[test]
    fn a_wait_for_idle_cpus_is_logged_once() {
        let _spin = crate::measure::one_spinner_at_a_time();
        let spinner = BusyCpu0::start();
        let guard = LoadGuard {
            min_idle: 0.99,
            sample: Duration::from_millis(50),
            wait: Duration::from_millis(500),
            set_by: "measure.idle-threshold",
        };
        let mut samples = 0;
        let (r, log) = crate::test_log::logged(|| {
            guard.wait_idle_reporting(&SysRoot::default(), &"0".parse().unwrap(), |_, _| {
                samples += 1
            })
        });
        drop(spinner);
        assert!(matches!(r, Err(MeasureError::Busy { cpu: 0, .. })), "{r:?}");
        assert!(samples > 2, "{samples} busy samples");
        assert_eq!(
            log.matches("waiting for the CPUs to become idle").count(),
            1,
            "{log}"
        );
        assert!(log.contains("99% wanted, for at most 0.5 s"), "{log}");
    }

    #[test]
    fn guard_refuses_a_busy_cpu() {
        let _spin = crate::measure::one_spinner_at_a_time();
        // The real /proc/stat, with a CPU kept busy by a spinning thread.
        let spinner = BusyCpu0::start();
        let guard = LoadGuard {
            min_idle: 0.99,
            sample: Duration::from_millis(100),
            wait: Duration::ZERO,
            set_by: "measure.idle-threshold",
        };
        let r = guard.wait_idle(&SysRoot::default(), &"0".parse().unwrap());
        drop(spinner);
        match r {
            Err(
                e @ MeasureError::Busy {
                    cpu: 0, idle_pct, ..
                },
            ) => {
                assert!(idle_pct < 99.0);
                // The daemon's error names its setting, not a flag it lacks.
                let text = e.to_string();
                assert!(text.contains("lower measure.idle-threshold"), "{text}");
                assert!(!text.contains("--idle-threshold"), "{text}");
            }
            other => panic!("expected Busy on CPU 0, got {other:?}"),
        }
    }
}
