//! The reliability promises (docs/reliability.md), asserted on the real daemon, the real
//! kernel and a
//! real bus with the rig the promise harness measures with (`benches/promises.rs`).
//! The bounds here are generous (a shared CI machine); the figures against the promised
//! times are in benches/README.md.

#[path = "../../benches/support/promise_rig.rs"]
mod rig;

use std::time::Duration;

/// What brings the test binary back to [`rig_entry`] when the rig re-executes it.
const SELF_ARGS: &[&str] = &[
    "--exact",
    "promises::rig_entry",
    "--nocapture",
    "--test-threads=1",
];

/// The rig's workload and flood client, when re-executed by it; run normally, checks
/// that the workload starts with its threads under its name.
#[test]
fn rig_entry() {
    rig::serve_role_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let w = rig::Workload::spawn(dir.path(), "rig-self", 3, SELF_ARGS);
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", w.pid)).unwrap();
    assert_eq!(comm.trim(), "rig-self");
    let workers = std::fs::read_dir(format!("/proc/{}/task", w.pid))
        .unwrap()
        .filter(|e| {
            let tid = e.as_ref().unwrap().file_name();
            std::fs::read_to_string(format!(
                "/proc/{}/task/{}/comm",
                w.pid,
                tid.to_str().unwrap()
            ))
            .is_ok_and(|c| c.trim() == "rig-worker")
        })
        .count();
    assert_eq!(workers, 3);
}

#[test]
fn after_a_cpu_comes_back_online_its_threads_are_pinned_to_it_again() {
    let _layout = super::affinity::CPU_LAYOUT
        .write()
        .unwrap_or_else(|p| p.into_inner());
    let _spin = super::one_spinner_at_a_time();
    let rounds = rig::hotplug(2, 4, Duration::from_millis(300), SELF_ARGS);
    for (i, r) in rounds.iter().enumerate() {
        assert!(
            r.widened,
            "round {i}: the kernel did not move the threads off the offline CPU"
        );
        // Promised: 1 s (benches/README.md); generous for a loaded CI machine.
        let t = r
            .re_pinned
            .unwrap_or_else(|| panic!("round {i}: never re-pinned"));
        assert!(
            t < Duration::from_secs(5),
            "round {i}: re-pinned only after {t:?}"
        );
    }
}

#[test]
fn after_kill_9_and_a_restart_every_managed_task_is_right() {
    let _layout = super::cpus_stay_online();
    let rounds = rig::crash(2, 4, SELF_ARGS);
    for (i, r) in rounds.iter().enumerate() {
        // Promised: 2 s after READY (benches/README.md); generous for a loaded CI machine.
        let t = r
            .ready_to_right
            .unwrap_or_else(|| panic!("round {i}: tasks not right 10 s after READY"));
        assert!(
            t < Duration::from_secs(8),
            "round {i}: right only {t:?} after READY"
        );
    }
}

#[test]
fn an_unprivileged_flood_leaves_roots_reads_answered_quickly() {
    let _layout = super::cpus_stay_online();
    let f = rig::flood(8, SELF_ARGS);
    eprintln!(
        "flood: answered {} refused {}; answered/sent {}",
        f.flood_ok, f.flood_refused, f.flood_per_method
    );
    assert!(f.daemon_alive, "the daemon died under the flood");
    assert_eq!(f.root_errors, 0, "root's reads failed under the flood");
    // The flood really flooded: far beyond the per-caller rate (20/s) for 8 s.
    assert!(
        f.flood_ok + f.flood_refused > 2_000,
        "the flood client made only {} calls",
        f.flood_ok + f.flood_refused
    );
    assert!(
        f.root_reads.len() > 100,
        "only {} root reads",
        f.root_reads.len()
    );
    let [_, _, p99, _] = rig::percentiles(&f.root_reads);
    // Promised: p99 < 50 ms (benches/README.md); generous for a loaded CI machine.
    assert!(
        p99 < 500.0,
        "root's Get State p99 {p99:.1} ms under the flood"
    );
}
