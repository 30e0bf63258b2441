//! Sharing the machine: the daemon's measurements stay off the CPUs an exclusive rule
//! holds, keep their cells and say so — watched from the daemon's own thread list.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pinnerd::sysroot::SysRoot;
use pinnerd::{CpuSet, LatencyMatrix};

use super::affinity::online;
use super::daemon::*;
use super::helper::Helper;

/// Samples the names of the daemon's threads every millisecond until stopped; every
/// `pinnerd-spin-*` and `pinnerd-warm-*` name seen is kept.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeSet<String>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            // In the lowest realtime class (as root): a measurement's spinners busy every
            // CPU of a small machine, and a sampler in the normal class may not run at
            // all while a 100 ms measurement lasts. It sleeps 1 ms a round, so it takes
            // little from them.
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sets the calling thread's own policy; a refusal (not root) leaves it.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            let task = SysRoot::default().proc_path(format!("{pid}/task"));
            let mut seen = BTreeSet::new();
            while !s.load(Ordering::Relaxed) {
                for e in std::fs::read_dir(&task).into_iter().flatten().flatten() {
                    if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
                        let comm = comm.trim();
                        if comm.starts_with("pinnerd-spin-") || comm.starts_with("pinnerd-warm-") {
                            seen.insert(comm.to_string());
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        Sampler { stop, thread }
    }

    fn stop(self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Calls `Remeasure` and waits for its job to end, sampling the daemon's thread names
/// and recording the bus signals meanwhile: (job id, names seen, signals as JSON lines).
fn remeasure_watched(bus: &Bus, d: &Daemon) -> (String, BTreeSet<String>, String) {
    let mut monitor = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args(["monitor", "--json=short", NAME])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let sampler = Sampler::start(d.child.id());
    let job = bus.call("Remeasure", &[]);
    let job = job.trim_start_matches("t ").to_string();
    let pattern = format!("job={job} ");
    bus.wait_for("the measurement to end", Duration::from_secs(120), || {
        d.log()
            .lines()
            .any(|l| l.contains("measurement finished") && l.contains(&pattern))
    });
    let during = sampler.stop();
    std::thread::sleep(Duration::from_millis(500));
    let _ = monitor.kill();
    let mut signals = String::new();
    monitor
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut signals)
        .unwrap();
    let _ = monitor.wait();
    (job, during, signals)
}

#[test]
fn remeasure_never_spins_on_an_exclusive_rule_s_cpu_and_says_which_cells_it_kept() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let cpus = online();
    let held = cpus.last().unwrap();
    let first = cpus.first().unwrap();
    // Without the rule, the first measurement spins on every CPU: the sampler sees the
    // held CPU's spinner then, so it could see one later.
    let mut d = Daemon::spawn(&bus, &dirs, &[]);
    let sampler = Sampler::start(d.child.id());
    d.wait_note("READY=1", Duration::from_secs(60));
    let measured = d.wait_measured(&bus, "");
    let before = sampler.stop();
    // The kernel keeps 15 bytes of a name: `pinnerd-spin-1-0` reads `pinnerd-spin-1-`.
    let spin_on_held: String = format!("pinnerd-spin-{held}-").chars().take(15).collect();
    assert!(
        before.iter().any(|c| c.starts_with(&spin_on_held)),
        "the sampler saw no spinner of CPU {held} in the first measurement: {before:?}\n{}",
        d.log()
    );

    // A process held by an exclusive rule on that CPU.
    let h = Helper::spawn(dirs.root.path(), "pd-excl");
    dirs.write_rule(
        "10-excl.toml",
        &format!(
            "[[rule]]\nname = \"excl\"\n[rule.match]\ncomm = \"pd-excl\"\n[rule.place]\ncpus = \"{held}\"\nexclusive = true\n"
        ),
    );
    bus.wait_for("the process managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1"
    });

    let (job, during, signals) = remeasure_watched(&bus, &d);

    // No spinner (nor warm-up thread) ever ran on the held CPU.
    let on_held: Vec<_> = during
        .iter()
        .filter(|c| *c == &format!("pinnerd-warm-{held}") || c.starts_with(&spin_on_held))
        .collect();
    assert!(on_held.is_empty(), "spinners on CPU {held}: {on_held:?}");
    if cpus.len() == 2 {
        assert!(during.is_empty(), "one CPU left: nothing spins: {during:?}");
    }

    // The result names the CPU and the cells it kept: in the signal...
    let finished = signals
        .lines()
        .find(|l| l.contains("\"member\":\"MeasurementFinished\""))
        .unwrap_or_else(|| panic!("no MeasurementFinished: {signals}"));
    assert!(finished.contains(&format!("[{job},true,")), "{finished}");
    assert!(finished.contains("earlier cell"), "{finished}");
    assert!(
        finished.contains(&format!(
            "of CPU {held} (CPU {held}: exclusive rule \\\"excl\\\")"
        )),
        "{finished}"
    );
    if cpus.len() == 2 {
        assert!(
            finished.contains(&format!(
                "nothing measured: only CPU {first} may be measured"
            )),
            "{finished}"
        );
        assert!(
            finished.contains("kept 1 earlier cell of CPU"),
            "{finished}"
        );
        // Nothing new was measured: the figures keep their time.
        assert_eq!(bus.get("MeasuredAt"), measured);
    }
    // ...in the stored matrix's metadata...
    let text = std::fs::read_to_string(dirs.state().join("matrix.json")).unwrap();
    let m: LatencyMatrix = serde_json::from_str(&text).unwrap();
    let k = m
        .kept
        .clone()
        .expect("the stored matrix says which cells are old");
    assert_eq!(k.cpus.to_string(), held.to_string());
    assert_eq!(k.pairs, cpus.len() - 1);
    assert_eq!(k.missing, 0);
    assert!(m.between(first, held).is_some());
    // ...and in the status line; the daemon is ready, not degraded.
    assert_eq!(bus.get("State"), "s \"ready\"");
    d.wait_note(
        &format!("STATUS=ready: 1 rule, 0 errors, 1 process managed, matrix of {} CPUs, earlier cells kept for CPU {held}", cpus.len()),
        Duration::from_secs(10),
    );
    assert!(d.stop().success());
    drop(h);
}

/// Every IRQ's `smp_affinity_list`, by number.
fn irq_masks() -> std::collections::BTreeMap<u32, CpuSet> {
    pinnerd::irq::list(&SysRoot::default())
        .unwrap()
        .into_iter()
        .map(|i| (i.n, i.affinity))
        .collect()
}

/// Puts every IRQ's mask back as it was when made, whatever the test did: a failing
/// test must not leave the machine's interrupts moved.
struct IrqsAsBefore(std::collections::BTreeMap<u32, CpuSet>);

impl Drop for IrqsAsBefore {
    fn drop(&mut self) {
        let now = irq_masks();
        for (n, m) in &self.0 {
            if now.get(n) != Some(m) {
                let path = SysRoot::default().proc_path(format!("irq/{n}/smp_affinity_list"));
                let _ = std::fs::write(path, format!("{m}\n"));
            }
        }
    }
}

#[test]
fn irqs_away_leave_the_rule_s_cpu_while_it_holds_it_and_come_back_even_after_a_crash() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let cpus = online();
    let held = cpus.last().unwrap();
    let before = irq_masks();
    let _as_before = IrqsAsBefore(before.clone());
    let touching: Vec<u32> = before
        .iter()
        .filter(|(_, m)| m.contains(held) && m.len() > 1)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        !touching.is_empty(),
        "no IRQ on CPU {held} with somewhere else to go: {before:?}"
    );
    let h = Helper::spawn(dirs.root.path(), "pd-irqs");
    let rule = format!(
        "[[rule]]\nname = \"quiet\"\n[rule.match]\ncomm = \"pd-irqs\"\n[rule.place]\ncpus = \"{held}\"\nexclusive = true\nirqs = \"away\"\n"
    );
    dirs.write_rule("10-quiet.toml", &rule);
    let d = Daemon::start(&bus, &dirs);
    // Each IRQ that touched the CPU has left it, or the kernel refused and the log says
    // which (managed interrupts: EPERM or EIO) — once.
    let reported = |log: &str, n: u32| log.contains(&format!("irq={n} why="));
    let all_off_or_reported = |log: &str| {
        let now = irq_masks();
        touching
            .iter()
            .all(|n| now.get(n).is_none_or(|m| !m.contains(held)) || reported(log, *n))
    };
    bus.wait_for("IRQs off the held CPU", Duration::from_secs(30), || {
        all_off_or_reported(&d.log())
    });
    let now = irq_masks();
    let moved: Vec<u32> = touching
        .iter()
        .copied()
        .filter(|n| now.get(n).is_some_and(|m| !m.contains(held)))
        .collect();
    assert!(!moved.is_empty(), "no IRQ moved; log:\n{}", d.log());
    // The kernel's effective affinity agrees for every IRQ moved, or it was reported.
    for irq in pinnerd::irq::list(&SysRoot::default()).unwrap() {
        if let (true, Some(e)) = (moved.contains(&irq.n), &irq.effective) {
            assert!(
                !e.contains(held) || reported(&d.log(), irq.n),
                "IRQ {} on {e}",
                irq.n
            );
        }
    }
    assert!(dirs.runtime().join("irqs.json").exists(), "journal written");
    // The rule goes: they come back.
    std::fs::remove_file(dirs.rules().join("10-quiet.toml")).unwrap();
    bus.wait_for("IRQs back", Duration::from_secs(30), || {
        let now = irq_masks();
        touching.iter().all(|n| now.get(n) == before.get(n))
    });
    assert!(
        !dirs.runtime().join("irqs.json").exists(),
        "journal cleared"
    );
    // Again, then the daemon dies: the next start gives them back from the journal.
    dirs.write_rule("10-quiet.toml", &rule);
    bus.wait_for("IRQs off again", Duration::from_secs(30), || {
        let now = irq_masks();
        moved
            .iter()
            .all(|n| now.get(n).is_some_and(|m| !m.contains(held)))
    });
    d.signal(libc::SIGKILL);
    drop(d);
    std::fs::remove_file(dirs.rules().join("10-quiet.toml")).unwrap();
    let now = irq_masks();
    assert!(
        moved
            .iter()
            .all(|n| now.get(n).is_some_and(|m| !m.contains(held))),
        "a dead daemon restores nothing by itself"
    );
    let d = Daemon::start(&bus, &dirs);
    let now = irq_masks();
    for n in &touching {
        assert_eq!(now.get(n), before.get(n), "IRQ {n} restored at start");
    }
    assert!(d
        .log()
        .contains("IRQ masks left by a previous run restored"));
    assert!(d.stop().success());
    drop(h);
}

#[test]
fn remeasure_never_spins_where_a_latency_critical_rule_s_threads_run() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let cpus = online();
    let held = cpus.last().unwrap();
    let h = Helper::spawn(dirs.root.path(), "pd-critical");
    // A matrix first (with the rule in force from the start, a two-CPU machine has no
    // pair to measure and nothing to keep).
    let d = Daemon::start(&bus, &dirs);
    d.wait_measured(&bus, "");
    // Not exclusive: only its managed threads' CPUs are left alone.
    dirs.write_rule(
        "10-lc.toml",
        &format!(
            "[[rule]]\nname = \"lc\"\n[rule.match]\ncomm = \"pd-critical\"\n[rule.place]\ncpus = \"{held}\"\nlatency-critical = true\n"
        ),
    );
    bus.wait_for("the process managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1"
    });
    let (job, during, signals) = remeasure_watched(&bus, &d);
    let spin_on_held: String = format!("pinnerd-spin-{held}-").chars().take(15).collect();
    assert!(
        !during.iter().any(|c| c.starts_with(&spin_on_held)),
        "spinners on CPU {held}: {during:?}"
    );
    let finished = signals
        .lines()
        .find(|l| l.contains("\"member\":\"MeasurementFinished\""))
        .unwrap_or_else(|| panic!("no MeasurementFinished: {signals}"));
    assert!(finished.contains(&format!("[{job},true,")), "{finished}");
    assert!(
        finished.contains(&format!("CPU {held}: latency-critical rule \\\"lc\\\"")),
        "{finished}"
    );
    assert!(d.stop().success());
    drop(h);
}

/// `check` of an `isolate` rule says, for this machine, whether it can isolate: the
/// reason in one line where it cannot (this machine's kernel, cgroup v1 or a kernel
/// without remote partitions), and nothing where it can; the file is valid either way.
#[test]
fn check_says_in_one_line_why_an_isolate_rule_cannot_isolate_here() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iso.toml");
    std::fs::write(
        &file,
        "[[rule]]\nname = \"iso\"\n[rule.match]\ncomm = \"iso\"\nuser = 0\n[rule.place]\ncpus = \"0\"\nexclusive = true\nisolate = true\n",
    )
    .unwrap();
    let r = super::helper::pinnerd(&["check", "--no-permissions", file.to_str().unwrap()]);
    assert!(r.ok, "{}{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().filter(|l| l.contains("isolate")).collect();
    match pinnerd::hold::cannot_isolate_here(&SysRoot::default()) {
        Some(why) => {
            assert_eq!(
                lines,
                vec![format!(
                    "{}:2:8: warning: rule iso: isolate = true cannot isolate on this machine: {why}; the rule stays merely exclusive",
                    file.display()
                )],
                "{}",
                r.stdout
            );
        }
        None => assert!(lines.is_empty(), "{}", r.stdout),
    }
    // Without exclusive it is an error naming the line and column.
    std::fs::write(
        &file,
        "[[rule]]\nname = \"iso\"\n[rule.match]\ncomm = \"iso\"\nuser = 0\n[rule.place]\ncpus = \"0\"\nisolate = true\n",
    )
    .unwrap();
    let r = super::helper::pinnerd(&["check", "--no-permissions", file.to_str().unwrap()]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains(&format!("{}:8:11:", file.display()))
            && r.stderr.contains("needs `exclusive = true`"),
        "{}",
        r.stderr
    );
    // A rule any user could trigger (comm and cmdline only) is refused where it holds.
    std::fs::write(
        &file,
        "[[rule]]\nname = \"iso\"\n[rule.match]\ncomm = \"iso\"\ncmdline = \"-x\"\n[rule.place]\ncpus = \"0\"\nexclusive = true\nisolate = true\n",
    )
    .unwrap();
    let r = super::helper::pinnerd(&["check", "--no-permissions", file.to_str().unwrap()]);
    assert!(!r.ok);
    assert!(
        r.stderr.contains(&format!(
            "{}:9:11: rule \"iso\": `isolate = true` changes the machine for every user",
            file.display()
        )) && r.stderr.contains("add `user`"),
        "{}",
        r.stderr
    );
}

/// The partition helper (the binary run as `pinnerd-cpuset-partition` by
/// `pinnerd-partition@.service`) takes one `MODE:PATH`, only `isolated` or `member`, only a
/// unit's cgroup below the system manager's slices (any leading slice: which it can write
/// is its unit's `ReadWritePaths=`), and writes nothing else: each refusal says why.
#[test]
fn the_partition_helper_writes_only_the_two_modes_below_the_slices() {
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("pinnerd-cpuset-partition");
    std::os::unix::fs::symlink(super::helper::PINNERD, &helper).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&helper).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("usage: pinnerd-cpuset-partition MODE:PATH"),
        "{err}"
    );
    let (_, err) = run(&["root:system.slice-x.service"]);
    assert!(
        err.contains("mode \"root\" is neither isolated nor member"),
        "{err}"
    );
    let (_, err) = run(&["isolated:init.scope"]);
    assert!(
        err.contains("is not below the system manager's slices"),
        "{err}"
    );
    let (_, err) = run(&["isolated:trading.slice"]);
    assert!(err.contains("is not below"), "{err}");
    // A unit in a slice of its own is taken (and is not there here).
    let (code, err) = run(&["isolated:trading.slice-pinnerd\\x2dno\\x2dsuch.service"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("trading.slice/pinnerd-no-such.service: no such cgroup"),
        "{err}"
    );
    let (_, err) = run(&["isolated:system.slice-..-init.scope"]);
    assert!(err.contains("is not below"), "{err}");
    let (code, err) = run(&["isolated:system.slice-pinnerd\\x2dno\\x2dsuch.service"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("pinnerd-no-such.service"), "{err}");
    // Under its own name the binary is the whole command line again.
    let r = super::helper::pinnerd(&["--version"]);
    assert!(r.ok && r.stdout.starts_with("pinnerd "), "{}", r.stdout);
}
