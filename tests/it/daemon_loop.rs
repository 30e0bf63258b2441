//! The daemon's loop against what an unprivileged process can do to it: a command line
//! whose read blocks, bursts of renames, floods of refused calls. A real daemon on a
//! private bus, real processes, real `busctl`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pinnerd::sysroot::SysRoot;
use pinnerd::CpuSet;

use super::daemon::*;
use super::helper::Helper;

fn online() -> CpuSet {
    std::fs::read_to_string(SysRoot::default().sys_path("devices/system/cpu/online"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The affinity of every thread of `h`, as the kernel reports it.
fn masks(h: &Helper) -> Vec<CpuSet> {
    h.tids()
        .into_iter()
        .filter_map(|tid| {
            let status =
                std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", h.pid)).ok()?;
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))?;
            line.split_once(':')?.1.trim().parse().ok()
        })
        .collect()
}

fn all_on(h: &Helper, want: &CpuSet) -> bool {
    let m = masks(h);
    !m.is_empty() && m.iter().all(|x| x == want)
}

/// `daemon` run in a mount namespace of its own in which `fifo` is bind-mounted over
/// `target`: opening `target` there waits for a writer, as reading a command line waits
/// for a memory-map lock its process keeps busy, but for as long as the test says.
fn over_fifo(daemon: &Command, fifo: &Path, target: &str) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" "$1" && shift && exec "$@""#)
        .arg(fifo)
        .arg(target)
        .arg(daemon.get_program())
        .args(daemon.get_args());
    for (k, v) in daemon.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Opens `fifo` for writing once a reader has it open (`ENXIO` until then); `None` if
/// none does within `timeout`.
fn writer_once_read(fifo: &Path, timeout: Duration) -> Option<std::fs::File> {
    let end = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < end {
        if let Ok(f) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
        {
            return Some(f);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A process whose command line cannot be read (the read blocks until the test lets
/// it go) does not hold the loop: another rule's new process is pinned and root's
/// `ListManaged` answered while that read still waits; once it returns, the process it
/// was for is decided by it.
#[test]
fn a_command_line_read_that_blocks_holds_neither_pinning_nor_calls() {
    let _cpus = super::cpus_stay_online();
    let cpus = online();
    let (first, last) = (cpus.first().unwrap(), cpus.last().unwrap());
    let (held_cpus, other_cpus): (CpuSet, CpuSet) = (
        std::iter::once(last).collect(),
        std::iter::once(first).collect(),
    );
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_rule(
        "10-held.toml",
        &format!(
            "[[rule]]\nname = \"held\"\n[rule.match]\ncomm = \"pd-held\"\ncmdline = \"--held\"\n\
             [rule.place]\ncpus = \"{held_cpus}\"\n"
        ),
    );
    dirs.write_rule(
        "20-other.toml",
        &format!(
            "[[rule]]\nname = \"other\"\n[rule.match]\ncomm = \"pd-other\"\n\
             [rule.place]\ncpus = \"{other_cpus}\"\n"
        ),
    );
    let mut held = Helper::spawn(dirs.root.path(), "pd-idle-a");
    let mut other = Helper::spawn(dirs.root.path(), "pd-idle-b");
    let fifo = dirs.root.path().join("cmdline.fifo");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let target = format!("/proc/{}/cmdline", held.pid);
    let mut d = Daemon::spawn_wrapped(&bus, &dirs, |cmd| over_fifo(cmd, &fifo, &target));
    d.wait_note("READY=1", Duration::from_secs(60));
    bus.wait_for("the daemon on the bus", Duration::from_secs(30), || {
        bus.get("State") == "s \"ready\"" || bus.get("State") == "s \"measuring\""
    });

    // The rename makes its command line matter: the daemon opens it and waits.
    held.rename(held.pid, 1, &["pd-held"]);
    let mut writer = writer_once_read(&fifo, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the daemon never read the command line; log:\n{}", d.log()));
    // Nothing is written yet: the read waits in read(2) from here on.
    other.rename(other.pid, 1, &["pd-other"]);
    bus.wait_for(
        "the other rule's process pinned while the read waits",
        Duration::from_secs(30),
        || all_on(&other, &other_cpus),
    );
    let list = bus.call("ListManaged", &[]);
    assert!(
        list.contains(&format!("{} \"pd-other\" \"other\"", other.pid)),
        "{list}"
    );
    assert!(
        !list.contains("pd-held"),
        "undecided while its read waits: {list}"
    );
    assert!(all_on(&held, &cpus), "{:?}", masks(&held));

    // The read returns: the process is decided by what it said.
    writer.write_all(b"pd-held\0--held\0").unwrap();
    drop(writer);
    bus.wait_for(
        "the held process pinned once its command line was read",
        Duration::from_secs(30),
        || all_on(&held, &held_cpus),
    );
    let list = bus.call("ListManaged", &[]);
    assert!(
        list.contains(&format!("{} \"pd-held\" \"held\"", held.pid)),
        "{list}"
    );
    d.stop();
}

/// Waits until the daemon's log satisfies `f`; panics naming `what`, with the log's
/// warnings.
fn wait_log(d: &Daemon, what: &str, timeout: Duration, f: impl Fn(&str) -> bool) {
    let end = std::time::Instant::now() + timeout;
    loop {
        let log = d.log();
        if f(&log) {
            return;
        }
        if std::time::Instant::now() > end {
            let warns: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
            panic!(
                "timed out waiting for {what}; the log's {} warnings, from the first:\n{}",
                warns.len(),
                warns[..warns.len().min(20)].join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The number just before `words` on each line of the log that holds them.
fn counts_before(log: &str, words: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l[..l.find(words)?].split_whitespace().last()?.parse().ok())
        .collect()
}

/// 300 calls of uid 65534 (`busctl ARGS` as nobody) on a daemon with `settings`, each
/// refused with a warning that says `why`: far fewer lines than refusals say so, and
/// each refusal is logged once, in the first warning or a count.
fn refusals_are_one_warning_then_counts(settings: &str, args: &[&str], why: &str) {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings(settings);
    let d = Daemon::start(&bus, &dirs);
    let mut refused = 0u64;
    for _ in 0..300 {
        let out = bus.busctl_as_nobody(args);
        if !out.status.success() {
            refused += 1;
        }
    }
    assert!(refused >= 200, "{refused} of 300 refused");
    let saying = |log: &str| log.lines().filter(|l| l.contains(why)).count() as u64;
    let firsts = |log: &str| {
        log.lines()
            .filter(|l| l.contains(&format!("{why}; further")))
            .count() as u64
    };
    let counted = |log: &str| -> Vec<u64> {
        log.lines()
            .filter(|l| l.contains(why))
            .filter_map(|l| {
                let at = l.find("more calls refused for uid 65534")?;
                l[..at].split_whitespace().last()?.parse().ok()
            })
            .collect()
    };
    wait_log(
        &d,
        "every refusal in the log, the first or counted",
        Duration::from_secs(60),
        |log| firsts(log) + counted(log).iter().sum::<u64>() >= refused || saying(log) >= refused,
    );
    let log = d.log();
    let lines = saying(&log);
    assert!(
        lines * 10 < refused,
        "{lines} lines for {refused} refused calls"
    );
    let (firsts, counts) = (firsts(&log), counted(&log));
    assert_eq!(
        firsts + counts.iter().sum::<u64>(),
        refused,
        "each refusal logged or counted once: {firsts} warnings, counts {counts:?}"
    );
}

/// A caller flooding the daemon past its rate limit makes one warning, then one line
/// per interval with the count of the calls refused since.
#[test]
fn refused_calls_are_one_warning_then_counts() {
    refusals_are_one_warning_then_counts(
        "[limits]\ndbus-burst = 1\ndbus-calls-per-second = 1\n",
        &["get-property", NAME, PATH, IFACE, "State"],
        "caller over its rate limit",
    );
}

/// The same for a privileged method refused to a caller within its rate limit (no
/// polkit on this bus: root only).
#[test]
fn refused_privileged_calls_are_one_warning_then_counts() {
    refusals_are_one_warning_then_counts(
        "[limits]\ndbus-burst = 1000\ndbus-calls-per-second = 1000\n",
        &["call", NAME, PATH, IFACE, "Remeasure"],
        "refused a privileged method",
    );
}

/// A process with far more threads than its entry has slots makes one warning, then
/// one line per interval with how many more threads share a slot.
#[test]
fn threads_beyond_the_slots_are_one_warning_then_counts() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_rule(
        "10-slots.toml",
        "[[rule]]\nname = \"slots\"\n[rule.match]\ncomm = \"pd-slots\"\n\
         [[rule.threads]]\ncomm = \"pd-w\"\ncount = 1\n",
    );
    let d = Daemon::start(&bus, &dirs);
    let mut h = Helper::spawn(dirs.root.path(), "pd-slots");
    bus.wait_for("the process managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1"
    });
    const THREADS: u64 = 2000;
    for _ in 0..(THREADS / 200) {
        h.spawn_threads(200, Some("pd-w"));
    }
    let first = "more threads than slots";
    let slots = |log: &str| {
        log.lines().filter(|l| l.contains(first)).find_map(|l| {
            let rest = &l[l.find(" slots=")? + 7..];
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let firsts = |log: &str| log.lines().filter(|l| l.contains(first)).count() as u64;
    wait_log(
        &d,
        "every thread beyond the slots in the log, the first or counted",
        Duration::from_secs(120),
        |log| {
            let Some(slots) = slots(log) else {
                return false;
            };
            let counted: u64 = counts_before(log, "more threads of pid").iter().sum();
            // Every one accounted for, or a line each.
            firsts(log) + counted >= THREADS - slots || firsts(log) > 1
        },
    );
    let log = d.log();
    let slots = slots(&log).unwrap();
    let firsts = firsts(&log);
    let counts = counts_before(&log, "more threads of pid");
    assert_eq!(firsts, 1, "{counts:?}");
    assert_eq!(
        1 + counts.iter().sum::<u64>(),
        THREADS - slots,
        "{counts:?}"
    );
    assert!(
        (firsts + counts.len() as u64) * 10 < THREADS - slots,
        "{counts:?}"
    );
}

/// An owner moving every thread of a managed process makes one warning, then one line
/// per interval with how many more threads someone else moved.
#[test]
fn threads_moved_by_someone_else_are_one_warning_then_counts() {
    let _cpus = super::cpus_stay_online();
    let cpus = online();
    let (first, last) = (cpus.first().unwrap(), cpus.last().unwrap());
    let target: CpuSet = std::iter::once(last).collect();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("[watch]\nrescan-interval = \"1s\"\n");
    dirs.write_rule(
        "10-moved.toml",
        &format!(
            "[[rule]]\nname = \"moved\"\n[rule.match]\ncomm = \"pd-moved\"\n\
             [rule.place]\ncpus = \"{target}\"\n"
        ),
    );
    let d = Daemon::start(&bus, &dirs);
    let mut h = Helper::spawn(dirs.root.path(), "pd-moved");
    h.spawn_threads(300, Some("pd-mw"));
    bus.wait_for("every thread pinned", Duration::from_secs(180), || {
        all_on(&h, &target)
    });
    // The owner moves them all (a mask the rule's CPUs do not hold).
    let elsewhere: CpuSet = std::iter::once(first).collect();
    let tids = h.tids();
    for tid in &tids {
        pinnerd::affinity::AffinityOps::set_affinity(
            &pinnerd::affinity::SystemOps::default(),
            *tid,
            &elsewhere,
        )
        .unwrap();
    }
    let moved = tids.len() as u64;
    let pid = h.pid;
    let warns = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains(" WARN "))
            .filter(|l| l.contains("someone else changed") || l.contains("changed by someone else"))
            .map(str::to_string)
            .collect()
    };
    let firsts = |log: &str| {
        warns(log)
            .iter()
            .filter(|l| l.contains("managed thread") && l.contains("further"))
            .count() as u64
    };
    let counted = |log: &str| -> u64 {
        counts_before(
            log,
            &format!("more threads of pid {pid} had their managed affinity"),
        )
        .iter()
        .sum()
    };
    wait_log(
        &d,
        "every moved thread in the log, the first or counted",
        Duration::from_secs(180),
        |log| firsts(log) + counted(log) >= moved || warns(log).len() as u64 >= moved,
    );
    let log = d.log();
    let lines = warns(&log).len() as u64;
    assert!(
        lines * 10 < moved,
        "{lines} lines for {moved} threads moved"
    );
    assert_eq!(firsts(&log) + counted(&log), moved);
}

/// A process released after its owner moved every thread of it says so in one line
/// with the count of threads left alone, not one line per thread.
#[test]
fn a_release_of_threads_moved_by_someone_else_is_one_line() {
    let _cpus = super::cpus_stay_online();
    let cpus = online();
    let (first, last) = (cpus.first().unwrap(), cpus.last().unwrap());
    let target: CpuSet = std::iter::once(last).collect();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    // No periodic rescan in the window between the moves and the rename (pinning 300
    // threads on a loaded machine can take most of the default minute): a rescan there
    // would find the moves first, thread by thread.
    dirs.write_settings("[watch]\nrescan-interval = \"1h\"\n");
    dirs.write_rule(
        "10-left.toml",
        &format!(
            "[[rule]]\nname = \"left\"\n[rule.match]\ncomm = \"pd-left\"\n\
             [rule.place]\ncpus = \"{target}\"\n"
        ),
    );
    let d = Daemon::start(&bus, &dirs);
    let mut h = Helper::spawn(dirs.root.path(), "pd-left");
    h.spawn_threads(300, Some("pd-lw"));
    bus.wait_for("every thread pinned", Duration::from_secs(60), || {
        all_on(&h, &target)
    });
    let elsewhere: CpuSet = std::iter::once(first).collect();
    let tids = h.tids();
    for tid in &tids {
        pinnerd::affinity::AffinityOps::set_affinity(
            &pinnerd::affinity::SystemOps::default(),
            *tid,
            &elsewhere,
        )
        .unwrap();
    }
    // Renamed before any rescan looks: released, every thread left as its owner set it.
    h.rename(h.pid, 1, &["pd-renamed"]);
    let pid = h.pid;
    let released = format!("released pid {pid} (");
    wait_log(&d, "the release", Duration::from_secs(60), |log| {
        log.contains(&released)
    });
    let log = d.log();
    let line = log.lines().find(|l| l.contains(&released)).unwrap();
    assert!(
        line.contains(&format!("left_alone={}", tids.len())),
        "{line}"
    );
    let per_thread = log
        .lines()
        .filter(|l| !l.contains(" DEBUG ") && l.contains("not restoring"))
        .count();
    assert_eq!(per_thread, 0, "one line per thread left alone");
}
