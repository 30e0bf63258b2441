//! Placement: pure logic from latency domains and a request to a CPU set.
//!
//! [`place`] takes [`Domains`] (from a matrix, from sysfs, or both reconciled), a
//! [`Request`] and the CPUs still available, and returns the chosen CPUs with their
//! worst and mean pairwise latency and an [`Explanation`]: which domain, its cost, and
//! what the autopilot choice (the K lowest-numbered CPUs) would cost.
//!
//! - `compact` finds the finest level with a group able to hold the request, runs a
//!   greedy min-max selection from every seed inside each such group, and keeps the
//!   cheapest; among equal costs the group with the fewest free CPUs wins (best-fit:
//!   big free domains stay intact, as in the kubelet's CPU manager).
//! - `spread` takes one CPU per group at the coarsest level that has enough groups,
//!   round-robin over their parents.
//! - SMT: `avoid` never takes two CPUs of one core; `prefer-siblings` fills whole cores.
//!   `exclusive` takes only fully free cores and reserves their idle siblings.
//!
//! - slots (`slots`): one set of CPUs per thread of a `[[rule.threads]]` entry,
//!   planned together so that `policy` and `smt` hold across the slots.
//!
//! Files: `request` (the words, the request, the answer and its errors), `place` (the
//! entry point, explicit lists and costs), `choose` (`compact` and `spread`), `slots`.
//!
//! Deterministic: every tie is broken by CPU or group order, never by a hash.
//! Must not touch: the OS (no files, no syscalls, no clocks).

mod choose;
mod place;
mod request;
mod slots;

pub use place::{place, set_cost};
pub use request::{
    check_device_name, core_type_word, kind_word, Cost, Explanation, Placement, PlacementError,
    Policy, Prefer, Request, Shape, ShapeError, SmtPolicy, UnknownWord,
};
pub use slots::{slots, Slot, SlotPlanner, MAX_SLOTS};
