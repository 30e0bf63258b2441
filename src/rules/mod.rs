//! Rule files: strict TOML in `/etc/pinnerd.d`, validated and compiled into a matcher.
//!
//! ```text
//! *.toml ──load (safety checks)──► format (serde, spans) ──compile──► Rule ──► RuleSet
//!                                                                     ProcessInfo ──┘──► Match / Explanation
//! ```
//!
//! Owns: the rule format, file loading and its safety checks, validation, the matcher.
//! Must not touch: /proc (the watcher builds [`ProcessInfo`]), affinity, placement
//! decisions (a rule only carries a [`PlacementRequest`]).
//!
//! Reload: keep the [`LoadReport`] of the last load and pass it to [`reload`]; files
//! that are still present but now rejected keep their last good rules, and the new
//! report's `errors` say why. `errors` display as `FILE:LINE:COL: message`.

mod compile;
mod error;
pub mod format;
mod load;
mod matcher;
mod patterns;

pub use compile::{
    system_user_lookup, ContainerMatcher, CpuTarget, NoPlace, PlacementRequest, ProcessMatcher,
    Rule, ThreadRule, UserLookup, COMM_MAX, NAME_MAX,
};
pub use error::{echo, echo_message, LineIndex, Location, RuleError, RuleErrorKind, ECHO_MAX};
pub use load::{
    collect_paths, compile_text, load_collected, load_dirs, load_paths, nested_dirs, read_checked,
    reload, FileOutcome, LoadPolicy, LoadReport, DEFAULT_RULE_DIR, MAX_FILE_SIZE, MAX_SET_SIZE,
};
pub use matcher::{
    slices_of_cgroup, unit_of_cgroup, ContainerInfo, Explanation, Match, ProcessInfo, RuleSet,
    Standing, ThreadAssignment, ThreadInfo, ThreadPlacement, Verdict,
};
pub use patterns::GlobList;

#[cfg(test)]
mod tests;
