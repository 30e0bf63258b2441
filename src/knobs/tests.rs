use std::path::Path;

use super::*;
use crate::affinity::FakeOps;
use crate::cpuset::set;

/// A fake machine: 8 CPUs whose resume-latency files read `0` (no constraint), and
/// two NUMA nodes (0-3, 4-7).
fn machine(dir: &Path) -> SysRoot {
    let root = SysRoot::machine(dir);
    for cpu in 0..8 {
        let p = root.sys_path(format!("devices/system/cpu/cpu{cpu}/power"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("pm_qos_resume_latency_us"), "0\n").unwrap();
    }
    std::fs::write(root.sys_path("devices/system/cpu/online"), "0-7\n").unwrap();
    for (n, cpus) in [(0, "0-3"), (1, "4-7")] {
        let p = root.sys_path(format!("devices/system/node/node{n}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("cpulist"), format!("{cpus}\n")).unwrap();
    }
    std::fs::create_dir_all(&root.proc).unwrap();
    root
}

fn qos(root: &SysRoot, cpu: u32) -> String {
    std::fs::read_to_string(root.sys_path(idle::qos_path(cpu)))
        .unwrap()
        .trim()
        .to_string()
}

fn limits(root: &SysRoot, held: &[(u32, &str)]) -> Vec<Want> {
    let held: Vec<(u32, CpuSet)> = held.iter().map(|(us, c)| (*us, set(c))).collect();
    idle::wanted(root, &held).0
}

#[test]
fn an_idle_limit_is_written_as_the_kernel_reads_it_and_given_back_when_the_hold_ends() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    // CPU 3 had a limit of its own; CPU 2 had none ("0").
    std::fs::write(root.sys_path(idle::qos_path(3)), "200\n").unwrap();
    let mut knobs = Knobs::default();
    // Two rules on CPU 2: the strictest wins; 0 µs is "n/a" (no idle state), never "0".
    let done = knobs.sync(&io, &journal, limits(&root, &[(0, "2"), (50, "2-3")]));
    assert_eq!(done.set.len(), 2, "{done:?}");
    assert_eq!(qos(&root, 2), "n/a");
    assert_eq!(qos(&root, 3), "50");
    assert_eq!(qos(&root, 1), "0", "a CPU no rule holds is left alone");
    assert!(journal.0.path().exists(), "journalled while set");
    // The hold ends: exactly what was there comes back, "0" included.
    let done = knobs.sync(&io, &journal, Vec::new());
    assert_eq!(done.given_back.len(), 2, "{done:?}");
    assert_eq!(qos(&root, 2), "0");
    assert_eq!(qos(&root, 3), "200");
    assert!(!journal.0.path().exists(), "nothing set, no journal");
    assert!(knobs.is_empty());
}

#[test]
fn a_changed_rule_writes_its_new_limit_and_gives_back_the_value_from_before_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    let mut knobs = Knobs::default();
    knobs.sync(&io, &journal, limits(&root, &[(50, "2-3")]));
    // The rule now says 20 µs, and holds CPU 3 only.
    let done = knobs.sync(&io, &journal, limits(&root, &[(20, "3")]));
    assert_eq!(qos(&root, 3), "20");
    assert_eq!(qos(&root, 2), "0", "CPU 2 let go: given back");
    assert_eq!(done.given_back.len(), 1);
    // The same again writes nothing.
    let done = knobs.sync(&io, &journal, limits(&root, &[(20, "3")]));
    assert_eq!(done, Done::default());
    // Stop: the value before the first write, not the first limit.
    let done = knobs.release(&io, &journal);
    assert_eq!(done.given_back.len(), 1);
    assert_eq!(qos(&root, 3), "0");
    assert!(!journal.0.path().exists());
}

#[test]
fn after_a_crash_the_next_start_gives_back_what_the_journal_holds() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    std::fs::write(root.sys_path(idle::qos_path(5)), "n/a\n").unwrap();
    {
        let mut knobs = Knobs::default();
        knobs.sync(&io, &journal, limits(&root, &[(10, "4-5")]));
        assert_eq!(qos(&root, 4), "10");
        // Dropped without a release: the daemon died.
    }
    let done = Knobs::recover(&io, &journal).unwrap();
    assert_eq!(done.given_back.len(), 2, "{done:?}");
    assert_eq!(qos(&root, 4), "0");
    assert_eq!(qos(&root, 5), "n/a");
    assert!(!journal.0.path().exists(), "cleared once given back");
    // Nothing left: a second start does nothing.
    assert_eq!(Knobs::recover(&io, &journal).unwrap(), Done::default());
}

#[test]
fn a_cpu_without_a_resume_latency_file_is_said_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    std::fs::remove_file(root.sys_path(idle::qos_path(6))).unwrap();
    let (wants, missing) = idle::wanted(&root, &[(10, set("5-6"))]);
    assert_eq!(missing, set("6"));
    assert_eq!(wants.len(), 1);
}

#[test]
fn the_limits_meaning_is_the_kernels() {
    assert_eq!(idle::word(0), "n/a");
    assert_eq!(idle::word(7), "7");
    assert_eq!(idle::limit_of("0"), None, "0 is no constraint");
    assert_eq!(idle::limit_of("n/a"), Some(0), "n/a is no idle state");
    assert_eq!(idle::limit_of("35\n"), Some(35));
}

#[test]
fn explain_shows_each_idle_state_and_whether_the_limit_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    for (k, name, lat) in [(0, "POLL", 0), (1, "C1", 2), (2, "C6", 170)] {
        let p = root.sys_path(format!("devices/system/cpu/cpu2/cpuidle/state{k}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(p.join("latency"), format!("{lat}\n")).unwrap();
        std::fs::write(p.join("disable"), "0\n").unwrap();
    }
    std::fs::write(root.sys_path(idle::qos_path(2)), "10\n").unwrap();
    assert_eq!(
        idle::line(&root, 2),
        "CPU 2: resume latency limit 10 µs; idle states: POLL 0 µs allowed, C1 2 µs allowed, \
         C6 170 µs not allowed"
    );
    std::fs::write(root.sys_path(idle::qos_path(2)), "n/a\n").unwrap();
    assert!(idle::line(&root, 2).contains("C1 2 µs not allowed"));
    assert_eq!(
        idle::line(&root, 3),
        "CPU 3: no resume-latency limit; no cpuidle states (no idle driver)"
    );
    // The report groups CPUs alike; the limited one stands apart.
    assert_eq!(
        idle::grouped(&root, &set("0-4")),
        [
            "CPUs 0-1,3-4: no resume-latency limit; no cpuidle states (no idle driver)",
            "CPU 2: resume latency limit n/a (no idle state: polls); idle states: POLL 0 µs \
             allowed, C1 2 µs not allowed, C6 170 µs not allowed",
        ]
    );
}

fn workqueue(root: &SysRoot, name: Option<&str>, mask: &str) {
    let dir = match name {
        Some(n) => root.sys_path(format!("{}/{n}", kthreads::WORKQUEUE_DIR)),
        None => root.sys_path(kthreads::WORKQUEUE_DIR),
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cpumask"), format!("{mask}\n")).unwrap();
}

fn read_wq(root: &SysRoot, name: Option<&str>) -> String {
    let p = match name {
        Some(n) => format!("{}/{n}/cpumask", kthreads::WORKQUEUE_DIR),
        None => format!("{}/cpumask", kthreads::WORKQUEUE_DIR),
    };
    std::fs::read_to_string(root.sys_path(p))
        .unwrap()
        .trim()
        .to_string()
}

/// A task of the fake /proc: its stat line (flags, start time) and its mask.
fn task(root: &SysRoot, ops: &FakeOps, pid: i32, comm: &str, flags: u64, mask: &str) {
    let dir = root.proc_path(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stat"),
        format!(
            "{pid} ({comm}) S 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n",
            100 + pid
        ),
    )
    .unwrap();
    ops.add_task(pid, &set(mask));
}

const PF_KTHREAD: u64 = crate::affinity::PF_KTHREAD;

#[test]
fn unbound_workqueues_and_kernel_threads_leave_exclusive_cpus_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    workqueue(&root, None, "ff");
    workqueue(&root, Some("writeback"), "ff");
    // Only CPUs 6-7 allowed: emptied by the hold, so left alone.
    workqueue(&root, Some("nvme-wq"), "c0");
    task(&root, &ops, 2, "kthreadd", PF_KTHREAD, "0-7");
    task(&root, &ops, 20, "ksoftirqd/6", PF_KTHREAD, "6");
    task(
        &root,
        &ops,
        30,
        "kworker/u16:0",
        PF_KTHREAD | kthreads::PF_NO_SETAFFINITY,
        "0-7",
    );
    task(&root, &ops, 40, "kworker/6:1", PF_KTHREAD, "6");
    task(&root, &ops, 500, "rcu_preempt", 0, "0-7");
    let mut knobs = Knobs::default();
    let away = set("6-7");
    let w = kthreads::wanted(&root, &ops, &away, &knobs, false);
    assert_eq!(w.notes.len(), 1, "{:?}", w.notes);
    assert!(w.notes[0].contains("nvme-wq/cpumask"), "{:?}", w.notes);
    let done = knobs.sync(&io, &journal, w.wants);
    assert!(done.failed.is_empty(), "{done:?}");
    assert_eq!(read_wq(&root, None), "3f");
    assert_eq!(read_wq(&root, Some("writeback")), "3f");
    assert_eq!(read_wq(&root, Some("nvme-wq")), "c0");
    assert_eq!(
        ops.mask(2),
        Some(set("0-5")),
        "an unbound kernel thread moves"
    );
    assert_eq!(
        ops.mask(20),
        Some(set("6")),
        "a per-CPU kernel thread stays"
    );
    assert_eq!(
        ops.mask(30),
        Some(set("0-7")),
        "PF_NO_SETAFFINITY: not tried"
    );
    assert_eq!(ops.mask(40), Some(set("6")));
    assert_eq!(ops.mask(500), Some(set("0-7")), "not a kernel thread");
    // Nothing held: all back.
    let w = kthreads::wanted(&root, &ops, &CpuSet::new(), &knobs, false);
    let done = knobs.sync(&io, &journal, w.wants);
    assert_eq!(done.given_back.len(), 3, "{done:?}");
    assert_eq!(read_wq(&root, None), "ff");
    assert_eq!(read_wq(&root, Some("writeback")), "ff");
    assert_eq!(ops.mask(2), Some(set("0-7")));
    assert!(!journal.0.path().exists());
}

#[test]
fn a_mask_the_kernel_already_cut_for_an_isolated_partition_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    workqueue(&root, None, "3f");
    let mut knobs = Knobs::default();
    let w = kthreads::wanted(&root, &ops, &set("6-7"), &knobs, false);
    let done = knobs.sync(&io, &journal, w.wants);
    assert_eq!(done, Done::default());
    assert!(knobs.is_empty());
}

#[test]
fn a_kernel_thread_whose_pid_was_reused_is_not_given_back_a_mask() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    task(&root, &ops, 77, "kthreadd", PF_KTHREAD, "0-7");
    let mut knobs = Knobs::default();
    let w = kthreads::wanted(&root, &ops, &set("4-7"), &knobs, false);
    knobs.sync(&io, &journal, w.wants);
    assert_eq!(ops.mask(77), Some(set("0-3")));
    // It exited and a user's process got its pid (another start time).
    std::fs::write(
        root.proc_path("77/stat"),
        "77 (kthreadd) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0\n",
    )
    .unwrap();
    ops.external_set(77, &set("1"));
    let done = knobs.release(&io, &journal);
    assert_eq!(done, Done::default());
    assert_eq!(ops.mask(77), Some(set("1")), "not touched");
}

#[test]
fn a_per_node_thread_a_partition_change_widened_is_put_back_on_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let root = machine(dir.path());
    let ops = FakeOps::new();
    let io = Io {
        root: &root,
        ops: &ops,
    };
    let journal = Journal::new(dir.path());
    // kswapd1 reset to every CPU the top cpuset has; kcompactd0 as it should be.
    task(&root, &ops, 60, "kswapd1", PF_KTHREAD, "0-5");
    task(&root, &ops, 61, "kcompactd0", PF_KTHREAD, "0-3");
    let mut knobs = Knobs::default();
    let w = kthreads::wanted(&root, &ops, &set("6-7"), &knobs, false);
    knobs.sync(&io, &journal, w.wants);
    assert_eq!(
        ops.mask(60),
        Some(set("4-5")),
        "its node, less the held CPUs"
    );
    assert_eq!(ops.mask(61), Some(set("0-3")));
    // Given back as its node's CPUs, not the reset mask.
    knobs.release(&io, &journal);
    assert_eq!(ops.mask(60), Some(set("4-7")));
    // Released, a partition change widens it again: with nothing held the kernel
    // threads are looked at only after a partition.
    ops.external_set(60, &set("0-7"));
    let w = kthreads::wanted(&root, &ops, &CpuSet::new(), &knobs, false);
    assert!(w.wants.is_empty(), "{w:?}");
    let w = kthreads::wanted(&root, &ops, &CpuSet::new(), &knobs, true);
    knobs.sync(&io, &journal, w.wants);
    assert_eq!(ops.mask(60), Some(set("4-7")));
}

#[test]
fn hex_masks_are_written_as_the_kernel_reads_them() {
    assert_eq!(kthreads::hex_mask(&set("0-5")), "3f");
    assert_eq!(kthreads::hex_mask(&set("0,32")), "1,00000001");
    assert_eq!(
        CpuSet::parse_hex_mask(&kthreads::hex_mask(&set("1-70"))).unwrap(),
        set("1-70")
    );
}
