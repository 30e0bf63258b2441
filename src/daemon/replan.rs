//! The loop's half of planning for what the manager sees: the manager reports its
//! processes' cgroup cpusets, memory and the slots their threads take
//! ([`Manager::wants_plan`]); this module makes the plan in force again for them, with
//! the chooser that plan was made with, and hands it down ([`Input::Replanned`]).
//!
//! Owns: when a plan is made again for the manager, and how often per event.
//! Must not touch: the choice of CPUs (`plan`), processes and affinity (`manager`).
//!
//! ```text
//!   Input ─► hand_down ─► Manager::handle ─► wants_plan(): Seen ─► Plan::again ─┐
//!                               ▲                                              │
//!                               └──────────── Input::Replanned(Plan) ◄─────────┘
//! ```

use crate::manager::{Change, Input, Manager};
use crate::plan::Choose;

/// Plans made again for one event at most. Each plan gives the processes that waited
/// for it their CPUs; the next is needed only when that moved slots or found another
/// cpuset. What is left waits for the next event, so that plans cannot chase each
/// other.
pub const ROUNDS: usize = 4;

/// Hands `input` to the manager, then plans again for what it reports ([`settle`]).
/// A new plan (`RulesChanged`, `PlanChanged`) is first made for what the manager sees
/// now, so that it arrives already in its processes' cpusets. `choose` is the chooser
/// the plan in force (or the one handed down) was made with.
pub fn hand_down(m: &mut Manager, input: Input, choose: Option<&dyn Choose>) -> Vec<Change> {
    let for_seen = |plan: crate::plan::Plan| {
        let seen = m.seen();
        if seen.cpusets == *plan.cpusets() && seen.demand == *plan.demand() {
            plan
        } else {
            plan.again(&seen, choose)
        }
    };
    let input = match input {
        Input::RulesChanged(plan) => Input::RulesChanged(for_seen(plan)),
        Input::PlanChanged(plan) => Input::PlanChanged(for_seen(plan)),
        other => other,
    };
    let mut out = m.handle(input);
    out.extend(settle(m, choose));
    out
}

/// While the manager reports what the plan in force was not made for, makes that plan
/// again for it and hands it down, [`ROUNDS`] times at most.
pub fn settle(m: &mut Manager, choose: Option<&dyn Choose>) -> Vec<Change> {
    let mut out = Vec::new();
    for _ in 0..ROUNDS {
        let Some(seen) = m.wants_plan() else { break };
        let plan = m.plan().again(&seen, choose);
        out.extend(m.handle(Input::Replanned(plan)));
    }
    out
}

/// Reads the command lines and memory the manager asked for on the calling thread and
/// hands each back, as [`hand_down`] does an input, until none is asked. For one-shot
/// callers (`plan --live`) and tests; the daemon's loop reads them off the loop instead
/// (`daemon::readers`), since a read can wait on the process's memory-map lock.
pub fn read_here(
    m: &mut Manager,
    procs: &dyn crate::watch::ProcSource,
    choose: Option<&dyn Choose>,
) -> Vec<Change> {
    let mut out = Vec::new();
    for _ in 0..ROUNDS {
        let cmdlines = m.take_cmdline_reads();
        let memory = m.take_memory_reads();
        if cmdlines.is_empty() && memory.is_empty() {
            break;
        }
        for w in cmdlines {
            let read = crate::manager::cmdlines::CmdlineRead {
                wanted: w,
                args: procs.cmdline(w.pid, w.start_time),
            };
            out.extend(hand_down(m, Input::Cmdline(read), choose));
        }
        for w in memory {
            let bytes = procs.memory(w.pid, &w.nodes);
            out.extend(hand_down(
                m,
                Input::Memory {
                    pid: w.pid,
                    start_time: w.start_time,
                    bytes,
                },
                choose,
            ));
        }
    }
    out
}
