//! Integration tests: one binary, one module per area.

#![allow(
    clippy::too_many_lines,
    reason = "the limit is on the engine in src/; a test reads as one scenario"
)]

mod affinity;
mod bad_input;
mod big;
pub mod big_machine;
mod bus_api;
mod cgroups;
mod cli_smoke;
mod closed_stdout;
mod commands;
mod completion;
mod crash_writes;
mod daemon;
mod daemon_admission;
mod daemon_lifecycle;
mod daemon_loop;
mod daemon_pinning;
#[path = "../../benches/support/daemon_rig.rs"]
mod daemon_rig;
mod dbus_limits;
mod docs;
mod domains;
mod explain_privacy;
mod export;
mod fleet;
mod fuzz_checks;
mod fuzz_replay;
mod generated;
mod helper;
mod hints;
mod manpages;
mod measure;
mod memory;
mod metrics;
mod moving_host;
mod nri;
mod one_truth;
mod packaging;
mod pid_reuse;
mod placement;
mod placement_invariants;
mod promises;
mod protect;
mod report;
mod rules;
mod rules_props;
mod rules_unsafe_files;
mod run_pin;
mod sched;
mod sched_ext;
mod shape;
mod sharing;
mod slots;
mod snapshots;
mod soak;
mod sparse;
mod systemd_units;
mod topology;
mod topology_degraded;
mod vm_runner;
mod watch;

/// Tests that take a CPU offline hold [`affinity::CPU_LAYOUT`] for writing; tests that
/// pin, spin or start a daemon expect every CPU to stay online and hold it for reading.
pub fn cpus_stay_online() -> std::sync::RwLockReadGuard<'static, ()> {
    affinity::CPU_LAYOUT
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

static SPINNERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Busy-spin pairs need both CPUs of a 2-CPU machine to themselves: two at once would
/// preempt each other and throw every batch away. Tests that spin take turns.
pub fn one_spinner_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SPINNERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
