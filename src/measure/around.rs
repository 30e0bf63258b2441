//! Measuring around the CPUs others own: which CPUs a measurement stays off, and the
//! matrix it leaves behind, with the cells it kept for them said to be old.
//!
//! ```text
//! exclusive units' CPUs (plan) ────────────────┐
//! CPUs of latency-critical managed threads ────┤
//! measure.never-cpus (settings) ───────────────┼─► Around ─► measurable(usable): the CPUs spun on
//! nohz_full (sysfs: housekeeping-excluded) ────┘      │     pairs_off(pairs): drift/fill pairs kept
//!                                                     ▼
//! matrix of the measurable CPUs + earlier matrix ─► keep ─► matrix over the usable CPUs, its
//!                                                          `kept` naming the old cells' CPUs
//! ```
//!
//! Isolated CPUs are not usable at all (`Topology::usable`), so they never get here.
//! Pure apart from [`nohz_full`], which reads one sysfs file through a [`SysRoot`].
//! Must not touch: the spinners, the daemon's state, the store's files.

use crate::cpuset::CpuSet;
use crate::matrix::{keep as cells, KeptCells, LatencyMatrix};
use crate::sysroot::SysRoot;

/// The CPUs a measurement stays off, each with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Around {
    entries: Vec<(CpuSet, String)>,
}

impl Around {
    /// Stays off nothing.
    pub fn new() -> Around {
        Around::default()
    }

    /// Stays off `cpus` too, because of `why` (e.g. `exclusive rule "feed"`). An empty
    /// set adds nothing.
    pub fn add(&mut self, cpus: &CpuSet, why: impl Into<String>) {
        if !cpus.is_empty() {
            self.entries.push((cpus.clone(), why.into()));
        }
    }

    /// Every CPU stayed off.
    pub fn cpus(&self) -> CpuSet {
        self.entries
            .iter()
            .fold(CpuSet::new(), |acc, (c, _)| acc.union(c))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The CPUs of `usable` a measurement may spin on.
    pub fn measurable(&self, usable: &CpuSet) -> CpuSet {
        usable.difference(&self.cpus())
    }

    /// Of `pairs`, those touching a CPU stayed off (they are not measured).
    pub fn pairs_off(&self, pairs: &[(u32, u32)]) -> Vec<(u32, u32)> {
        let off = self.cpus();
        pairs
            .iter()
            .copied()
            .filter(|&(a, b)| off.contains(a) || off.contains(b))
            .collect()
    }

    /// Why the CPUs of `among` are stayed off, in words: `CPU 1: exclusive rule "feed";
    /// CPUs 6-7: measure.never-cpus`. Empty when none of them is.
    pub fn reason(&self, among: &CpuSet) -> String {
        self.entries
            .iter()
            .filter_map(|(c, why)| {
                let c = c.intersection(among);
                (!c.is_empty()).then(|| format!("{}: {why}", cpu_words(&c)))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `CPU 3` or `CPUs 2-5`.
pub fn cpu_words(cpus: &CpuSet) -> String {
    if cpus.len() == 1 {
        format!("CPU {cpus}")
    } else {
        format!("CPUs {cpus}")
    }
}

/// The CPUs excluded from housekeeping at boot (`nohz_full=`): an absent or empty file
/// means none. A file that does not parse counts as none too, with the error returned
/// beside it so the caller can say so.
pub fn nohz_full(root: &SysRoot) -> (CpuSet, Option<String>) {
    let path = root.sys_path("devices/system/cpu/nohz_full");
    match crate::sysroot::read_bounded(&path) {
        Ok(text) => match text.trim().parse::<CpuSet>() {
            Ok(c) => (c, None),
            // The kernel writes "(null)" when the option was not given.
            Err(_) if text.trim() == "(null)" => (CpuSet::new(), None),
            Err(e) => (CpuSet::new(), Some(format!("{}: {e}", path.display()))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (CpuSet::new(), None),
        Err(e) => (CpuSet::new(), Some(format!("{}: {e}", path.display()))),
    }
}

/// The matrix over `usable` after a measurement that stayed off `around`: the cells of
/// `measured` (a matrix of the measurable CPUs, if anything was measured), and for the
/// pairs it has no figure for, `earlier`'s. Its `kept` names the CPUs stayed off and
/// counts the old cells and the pairs nobody has a figure for. `None` when nothing was
/// measured and `earlier` has no cell among `usable`.
///
/// Metadata (time, primitive, warnings) is `measured`'s; with nothing measured it is
/// `earlier`'s, so the time says how old the figures are.
pub fn keep(
    measured: Option<&LatencyMatrix>,
    earlier: Option<&LatencyMatrix>,
    usable: &CpuSet,
    around: &Around,
) -> Option<LatencyMatrix> {
    let off = usable.intersection(&around.cpus());
    let earlier = earlier.map(|e| cells::restrict(e, usable));
    let mut out = match (measured, &earlier) {
        (Some(m), Some(e)) if !off.is_empty() => cells::merge(m, e),
        (Some(m), _) => m.clone(),
        (None, Some(e)) => e.clone(),
        (None, None) => return None,
    };
    out.kept = None;
    if off.is_empty() {
        return Some(out);
    }
    let ids: Vec<u32> = usable.iter().collect();
    let (mut pairs, mut missing) = (0, 0);
    for (k, &b) in ids.iter().enumerate() {
        for &a in &ids[..k] {
            if off.contains(a) || off.contains(b) {
                match out.between(a, b) {
                    Some(_) => pairs += 1,
                    None => missing += 1,
                }
            }
        }
    }
    if measured.is_none() && pairs == 0 {
        // Nothing measured and no earlier figure among these CPUs: nothing to give.
        return None;
    }
    out.kept = Some(KeptCells {
        reason: around.reason(&off),
        cpus: off,
        pairs,
        missing,
    });
    Some(out)
}

/// One line about what a measurement kept, for logs, signals and status: `kept 3 cells
/// of CPU 1 (CPU 1: exclusive rule "feed")`, with the pairs nobody has measured when
/// there are any.
pub fn describe(k: &KeptCells) -> String {
    let mut s = format!(
        "kept {} earlier {} of {} ({})",
        k.pairs,
        if k.pairs == 1 { "cell" } else { "cells" },
        cpu_words(&k.cpus),
        k.reason
    );
    if k.missing > 0 {
        let pairs = if k.missing == 1 { "pair" } else { "pairs" };
        s.push_str(&format!(", {} {pairs} never measured", k.missing));
    }
    s
}

/// The scheduling priority spinners run at: the lower, the sooner any other work on
/// a measured CPU takes it from them (and the batch is discarded, not the work
/// delayed). Figures for each on the build VM are in `benches/README.md`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SpinPriority {
    /// SCHED_OTHER at nice 0: competes equally with everything else.
    Normal,
    /// SCHED_OTHER at nice 19: gets about 1.5% of a CPU against one nice-0 task.
    #[default]
    #[value(name = "nice-19")]
    #[serde(rename = "nice-19")]
    Nice19,
    /// SCHED_IDLE: runs only when nothing else wants the CPU.
    Idle,
}

impl SpinPriority {
    pub fn as_str(self) -> &'static str {
        match self {
            SpinPriority::Normal => "normal",
            SpinPriority::Nice19 => "nice-19",
            SpinPriority::Idle => "idle",
        }
    }

    /// Sets the calling thread's policy and nice value (Linux keeps both per thread).
    pub fn apply_to_this_thread(self) -> std::io::Result<()> {
        let (policy, nice) = match self {
            SpinPriority::Normal => (libc::SCHED_OTHER, 0),
            SpinPriority::Nice19 => (libc::SCHED_OTHER, 19),
            SpinPriority::Idle => (libc::SCHED_IDLE, 19),
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let tid = crate::affinity::own_tid() as libc::id_t;
        // SAFETY: PRIO_PROCESS with a tid sets that thread's nice value.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A managed thread of a latency-critical rule, watched while a measurement runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub pid: i32,
    pub tid: i32,
    pub rule: String,
}

/// Stops a measurement when a watched thread wakes on a CPU it spins on: between pair
/// groups the engine asks [`WakeWatch::woke`], which reads each thread's run time
/// (`/proc/PID/task/TID/schedstat`) and last CPU (`stat` field 39). A thread whose run
/// time advanced since the last look, last seen on a measured CPU, stops the run. A
/// busy-polling thread on a CPU the measurement stays off never does; a thread gone is
/// skipped.
#[derive(Debug, Clone, Default)]
pub struct WakeWatch {
    root: SysRoot,
    threads: Vec<Watched>,
    /// tid → run time (ns) at the last look.
    seen: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<i32, u64>>>,
}

impl WakeWatch {
    pub fn new(root: SysRoot, threads: Vec<Watched>) -> WakeWatch {
        WakeWatch {
            root,
            threads,
            seen: Default::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Why the measurement of `measured` must stop, if a watched thread ran on one of
    /// those CPUs since the last call. The first call only takes the run times.
    pub fn woke(&self, measured: &CpuSet) -> Option<String> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut why = None;
        for w in &self.threads {
            let Some((ran_ns, cpu)) = run_time_and_cpu(&self.root, w.pid, w.tid) else {
                continue;
            };
            let before = seen.insert(w.tid, ran_ns);
            if why.is_none() && before.is_some_and(|b| ran_ns > b) && measured.contains(cpu) {
                why = Some(format!(
                    "thread {} of process {} (latency-critical rule {:?}) woke on CPU {cpu}, which the measurement uses",
                    w.tid, w.pid, w.rule
                ));
            }
        }
        why
    }
}

/// A thread's total run time in ns and the CPU it last ran on; `None` when it is gone
/// or its files do not parse.
fn run_time_and_cpu(root: &SysRoot, pid: i32, tid: i32) -> Option<(u64, u32)> {
    let dir = root.proc_path(format!("{pid}/task/{tid}"));
    let schedstat = crate::sysroot::read_bounded(dir.join("schedstat")).ok()?;
    let ran_ns = schedstat.split_whitespace().next()?.parse().ok()?;
    let stat = crate::sysroot::read_bounded(dir.join("stat")).ok()?;
    // Fields after the comm's closing parenthesis start at field 3; field 39 is the CPU.
    let cpu = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .nth(39 - 3)?
        .parse()
        .ok()?;
    Some((ran_ns, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;

    /// A full matrix over `list` with cell (a, b) = 10a + b + `plus`.
    fn full(list: &str, plus: f64, at: u64) -> LatencyMatrix {
        let cpus: Vec<u32> = set(list).iter().collect();
        let cells: Vec<Vec<_>> = cpus
            .iter()
            .map(|&a| {
                cpus.iter()
                    .map(|&b| (a != b).then(|| 10.0 * a.min(b) as f64 + b.max(a) as f64 + plus))
                    .collect()
            })
            .collect();
        let mut m = LatencyMatrix::new(cpus, crate::matrix::Cells::from_rows(&cells));
        m.measured_at_us = Some(at);
        m
    }

    fn around(list: &str, why: &str) -> Around {
        let mut a = Around::new();
        a.add(&set(list), why);
        a
    }

    #[test]
    fn the_cpus_stayed_off_are_not_measurable_and_say_why() {
        let mut a = around("1", "exclusive rule \"feed\"");
        a.add(&set("6-7"), "measure.never-cpus");
        a.add(&CpuSet::new(), "nothing");
        assert_eq!(a.cpus(), set("1,6-7"));
        assert_eq!(a.measurable(&set("0-7")), set("0,2-5"));
        assert_eq!(
            a.reason(&set("0-7")),
            "CPU 1: exclusive rule \"feed\"; CPUs 6-7: measure.never-cpus"
        );
        assert_eq!(a.reason(&set("6")), "CPU 6: measure.never-cpus");
        assert_eq!(a.pairs_off(&[(0, 1), (0, 2), (5, 7)]), vec![(0, 1), (5, 7)]);
        assert!(Around::new().is_empty() && Around::new().cpus().is_empty());
    }

    #[test]
    fn measured_cells_win_and_the_protected_cpus_keep_their_earlier_cells() {
        let earlier = full("0-3", 0.5, 100);
        let measured = full("0,2-3", 0.0, 200);
        let a = around("1", "exclusive rule \"feed\"");
        let m = keep(Some(&measured), Some(&earlier), &set("0-3"), &a).unwrap();
        assert_eq!(m.cpus, vec![0, 1, 2, 3]);
        // New figures for the pairs measured, old ones for every pair with CPU 1.
        assert_eq!(m.between(0, 2), Some(2.0));
        assert_eq!(m.between(2, 3), Some(23.0));
        assert_eq!(m.between(0, 1), Some(1.5));
        assert_eq!(m.between(1, 3), Some(13.5));
        assert_eq!(m.measured_at_us, Some(200));
        let k = m.kept.as_ref().unwrap();
        assert_eq!((k.cpus.clone(), k.pairs, k.missing), (set("1"), 3, 0));
        assert_eq!(k.reason, "CPU 1: exclusive rule \"feed\"");
        assert_eq!(
            describe(k),
            "kept 3 earlier cells of CPU 1 (CPU 1: exclusive rule \"feed\")"
        );
        // The kept metadata goes through the file format.
        let back: LatencyMatrix =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.kept, m.kept);
        assert!(serde_json::to_string(&m)
            .unwrap()
            .contains("\"kept\":{\"cpus\":\"1\""));
    }

    #[test]
    fn nothing_measurable_keeps_the_earlier_matrix_with_its_own_time() {
        // Two CPUs, one protected: no pair to measure.
        let earlier = full("0-1", 0.0, 100);
        let a = around("1", "exclusive rule \"feed\"");
        assert_eq!(a.measurable(&set("0-1")), set("0"));
        let m = keep(None, Some(&earlier), &set("0-1"), &a).unwrap();
        assert_eq!(m.between(0, 1), Some(1.0));
        assert_eq!(m.measured_at_us, Some(100));
        let k = m.kept.unwrap();
        assert_eq!((k.pairs, k.missing), (1, 0));
        // Nothing earlier either, or no earlier cell among these CPUs: nothing to give.
        assert_eq!(keep(None, None, &set("0-1"), &a), None);
        assert_eq!(
            keep(None, Some(&full("0,2", 0.0, 100)), &set("0-1"), &a),
            None
        );
    }

    #[test]
    fn pairs_nobody_measured_are_counted_and_a_cpu_no_longer_protected_is_not_kept() {
        let earlier = full("0-2", 0.0, 100);
        let measured = full("0-2", 0.0, 200);
        let a = around("3", "measure.never-cpus");
        let m = keep(Some(&measured), Some(&earlier), &set("0-3"), &a).unwrap();
        let k = m.kept.clone().unwrap();
        assert_eq!((k.pairs, k.missing), (0, 3));
        assert!(
            describe(&k).ends_with(", 3 pairs never measured"),
            "{}",
            describe(&k)
        );
        // Nothing stayed off: the new matrix as it is, an old `kept` dropped.
        let mut stale = measured.clone();
        stale.kept = k.into();
        let m = keep(Some(&stale), Some(&earlier), &set("0-2"), &Around::new()).unwrap();
        assert_eq!(m.kept, None);
        assert_eq!(m.cpus, vec![0, 1, 2]);
    }

    #[test]
    fn nohz_full_reads_the_list_and_treats_absence_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(dir.path());
        assert_eq!(nohz_full(&root), (CpuSet::new(), None));
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("nohz_full"), "(null)\n").unwrap();
        assert_eq!(nohz_full(&root), (CpuSet::new(), None));
        std::fs::write(cpu.join("nohz_full"), "2-3\n").unwrap();
        assert_eq!(nohz_full(&root), (set("2-3"), None));
        std::fs::write(cpu.join("nohz_full"), "two\n").unwrap();
        let (c, err) = nohz_full(&root);
        assert!(c.is_empty());
        assert!(err.unwrap().contains("nohz_full"));
    }

    /// A fixture thread: `ran_ns` of run time, last on `cpu`.
    fn task(root: &std::path::Path, pid: i32, tid: i32, ran_ns: u64, cpu: u32) {
        let dir = root.join(format!("proc/{pid}/task/{tid}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("schedstat"), format!("{ran_ns} 100 7\n")).unwrap();
        let mut fields: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        fields[0] = "S".into();
        fields[39 - 3] = cpu.to_string();
        std::fs::write(
            dir.join("stat"),
            format!("{tid} (feed (x) 1) {}\n", fields.join(" ")),
        )
        .unwrap();
    }

    #[test]
    fn a_watched_thread_stops_the_run_only_when_it_ran_on_a_measured_cpu() {
        let dir = tempfile::tempdir().unwrap();
        let watched = |tid| Watched {
            pid: 10,
            tid,
            rule: "feed".into(),
        };
        task(dir.path(), 10, 11, 1000, 1);
        task(dir.path(), 10, 12, 5000, 0);
        let w = WakeWatch::new(
            SysRoot::machine(dir.path()),
            vec![watched(11), watched(12), watched(13)],
        );
        let measured = set("0,2-3");
        // The first look takes the run times; 13 does not exist (gone: skipped).
        assert_eq!(w.woke(&measured), None);
        assert_eq!(w.woke(&measured), None);
        // 11 busy-polls on CPU 1, which the measurement stays off: never a reason.
        task(dir.path(), 10, 11, 9000, 1);
        assert_eq!(w.woke(&measured), None);
        // 12 wakes on CPU 2, which the measurement uses.
        task(dir.path(), 10, 12, 6000, 2);
        let why = w.woke(&measured).unwrap();
        assert_eq!(
            why,
            "thread 12 of process 10 (latency-critical rule \"feed\") woke on CPU 2, which the measurement uses"
        );
        // Its run time stands still again: no reason.
        assert_eq!(w.woke(&measured), None);
        assert!(WakeWatch::default().is_empty());
    }

    #[test]
    fn a_real_thread_that_wakes_on_a_measured_cpu_is_seen() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let go = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (g, s) = (go.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            tx.send(crate::affinity::own_tid()).unwrap();
            while !g.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            while !s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        let pid = std::process::id() as i32;
        let w = WakeWatch::new(
            SysRoot::default(),
            vec![Watched {
                pid,
                tid,
                rule: "feed".into(),
            }],
        );
        // Every CPU counts as measured: wherever it runs, it runs on one.
        let all: CpuSet = (0..1024).collect();
        assert_eq!(w.woke(&all), None);
        go.store(true, Ordering::Relaxed);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut why = None;
        while why.is_none() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(20));
            why = w.woke(&all);
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let why = why.expect("the spinning thread's run time advanced");
        assert!(
            why.starts_with(&format!("thread {tid} of process {pid}")),
            "{why}"
        );
        // Measuring no CPU, nothing it does is a reason.
        assert_eq!(w.woke(&CpuSet::new()), None);
    }

    #[test]
    fn a_spin_priority_is_what_the_kernel_reports_for_the_thread() {
        // stat fields 19 (nice) and 41 (policy: 0 SCHED_OTHER, 5 SCHED_IDLE).
        fn nice_and_policy() -> (i64, u32) {
            let tid = crate::affinity::own_tid();
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .collect();
            (f[19 - 3].parse().unwrap(), f[41 - 3].parse().unwrap())
        }
        for (p, want) in [
            (SpinPriority::Nice19, (19, 0)),
            (SpinPriority::Idle, (19, libc::SCHED_IDLE as u32)),
        ] {
            let got = std::thread::spawn(move || {
                p.apply_to_this_thread().unwrap();
                nice_and_policy()
            })
            .join()
            .unwrap();
            assert_eq!(got, want, "{p:?}");
        }
        // Back to normal from idle (root may lower nice again).
        let got = std::thread::spawn(|| {
            SpinPriority::Idle.apply_to_this_thread().unwrap();
            SpinPriority::Normal.apply_to_this_thread().unwrap();
            nice_and_policy()
        })
        .join()
        .unwrap();
        assert_eq!(got, (0, 0));
        assert_eq!(SpinPriority::default(), SpinPriority::Nice19);
    }

    #[test]
    fn a_measurement_stops_when_a_watched_thread_runs_on_a_cpu_it_uses() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let _one = crate::measure::one_spinner_at_a_time();
        let allowed = crate::measure::allowed_cpus().unwrap();
        let cpus: CpuSet = allowed.iter().take(2).collect();
        let first = cpus.first().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            crate::measure::pinned::pin_current(first).unwrap();
            tx.send(crate::affinity::own_tid()).unwrap();
            while !s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        let pid = std::process::id() as i32;
        let mut cfg = crate::measure::MeasureConfig::new(cpus);
        cfg.guard.min_idle = 0.0;
        cfg.budget = std::time::Duration::from_secs(5);
        cfg.wake = WakeWatch::new(
            SysRoot::default(),
            vec![Watched {
                pid,
                tid,
                rule: "feed".into(),
            }],
        );
        let r = crate::measure::run(&cfg, |_| {});
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let e = r.expect_err("the watched thread ran on a measured CPU");
        assert!(
            matches!(e, crate::measure::MeasureError::Woken { .. }),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "measurement stopped: thread {tid} of process {pid} (latency-critical rule \"feed\") woke on CPU {first}"
            )),
            "{e}"
        );
    }
}
