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

fn online() -> CpuSet {
    std::fs::read_to_string(SysRoot::default().sys_path("devices/system/cpu/online"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
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
        &format!("STATUS=ready: 1 rules, 0 errors, 1 processes managed, matrix of {} CPUs, earlier cells kept for CPU {held}", cpus.len()),
        Duration::from_secs(10),
    );
    assert!(d.stop().success());
    drop(h);
}
