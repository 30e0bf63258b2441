//! Whether a sched_ext (BPF) scheduler runs, and what pinnerd does while one does.
//!
//! Owns: reading `/sys/kernel/sched_ext/state` and `/sys/kernel/sched_ext/root/ops`
//! through the [`SysRoot`], the `[sched-ext]` policy's vocabulary, and widening a mask
//! to whole groups (LLC groups or NUMA nodes) — pure.
//! Must not touch: the plan's choice (it only rounds a chosen mask up, see
//! `plan::Plan::widened`), affinity calls, the loop (the daemon polls [`read`] on its
//! rescan cadence and acts on a change).
//!
//! Why it matters: under scx_layered a task whose mask is not all CPUs, a whole NUMA
//! node or a layer's cpuset goes to a low-priority fallback queue; scx_mitosis can abort
//! on such pins. `warn` pins as usual and says so per rule; `widen` rounds partial masks
//! up to whole LLC groups or nodes; `pause` gives every rule's tasks their masks back
//! until the scheduler stops, then applies the rules again.
//!
//! ```text
//!   kernel/sched_ext/state ("enabled", "disabled", "enabling", "disabling")
//!   kernel/sched_ext/root/ops (scheduler name)  ──► read ──► Option<SchedExt>
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::{self, SysRoot};

/// A sched_ext scheduler that is not off: its state and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedExt {
    /// The kernel's word: `enabled`, `enabling` or `disabling`.
    pub state: String,
    /// The scheduler's name (`root/ops`), e.g. `layered`; empty when the kernel does
    /// not say.
    pub ops: String,
}

impl SchedExt {
    /// In words, for logs and `status`: `layered (enabled)`.
    pub fn describe(&self) -> String {
        let name = if self.ops.is_empty() {
            "unnamed scheduler"
        } else {
            &self.ops
        };
        format!("{name} ({})", self.state)
    }
}

/// Why the sched_ext state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SchedExtError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The running sched_ext scheduler; `Ok(None)` when none runs (`disabled`) or the
/// kernel has no sched_ext (no `kernel/sched_ext/state`).
pub fn read(root: &SysRoot) -> Result<Option<SchedExt>, SchedExtError> {
    let read = |rel: &str| -> Result<Option<String>, SchedExtError> {
        let path = root.sys_path(rel);
        sysroot::read_optional(&path)
            .map(|t| t.map(|t| t.trim().to_string()))
            .map_err(|source| SchedExtError::Read { path, source })
    };
    let Some(state) = read("kernel/sched_ext/state")? else {
        return Ok(None);
    };
    if state == "disabled" || state.is_empty() {
        return Ok(None);
    }
    let ops = read("kernel/sched_ext/root/ops")?.unwrap_or_default();
    Ok(Some(SchedExt { state, ops }))
}

/// `[sched-ext] policy`: what to do while a sched_ext scheduler runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Pin as usual; warn once per rule that pins partial masks.
    #[default]
    Warn,
    /// Round every planned mask up to the whole groups (`widen-to`) it touches.
    Widen,
    /// Give every rule's tasks their masks back until the scheduler stops.
    Pause,
}

impl std::fmt::Display for Policy {
    /// As written in the settings: `warn`, `widen`, `pause`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Warn => "warn",
            Policy::Widen => "widen",
            Policy::Pause => "pause",
        })
    }
}

/// `[sched-ext] widen-to`: the groups `widen` rounds up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WidenTo {
    /// The CPUs that share a last-level cache.
    #[default]
    Llc,
    /// NUMA nodes (scx_layered's "whole node" masks).
    Node,
}

/// The groups `to` names on topology `t`: LLC groups (nodes when sysfs lists no
/// caches), or NUMA nodes (packages when it lists no nodes).
pub fn groups(t: &crate::topology::Topology, to: WidenTo) -> Vec<CpuSet> {
    let nodes: Vec<CpuSet> = t
        .nodes
        .iter()
        .map(|n| n.cpus.clone())
        .filter(|c| !c.is_empty())
        .collect();
    let nodes = if nodes.is_empty() {
        t.packages()
            .into_iter()
            .map(|p| t.package_cpus(p))
            .collect()
    } else {
        nodes
    };
    match to {
        WidenTo::Llc => {
            let llc = t.llc_groups();
            if llc.is_empty() {
                nodes
            } else {
                llc
            }
        }
        WidenTo::Node => nodes,
    }
}

/// `mask` rounded up to every group of `groups` it touches, within `limit` (the CPUs a
/// plan may use there: online, inside the process's cpuset). CPUs in no group stay.
pub fn widen(mask: &CpuSet, groups: &[CpuSet], limit: &CpuSet) -> CpuSet {
    groups
        .iter()
        .filter(|g| !g.is_disjoint(mask))
        .fold(mask.clone(), |acc, g| acc.union(g))
        .intersection(limit)
        .union(mask)
}

/// Whether `mask` is partial: neither every CPU of `all` nor a union of whole groups.
pub fn is_partial(mask: &CpuSet, groups: &[CpuSet], all: &CpuSet) -> bool {
    if all.difference(mask).is_empty() {
        return false;
    }
    let whole = groups
        .iter()
        .filter(|g| g.difference(mask).is_empty())
        .fold(CpuSet::new(), |acc, g| acc.union(g));
    !mask.difference(&whole).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;

    fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, SysRoot) {
        let d = tempfile::tempdir().unwrap();
        crate::sysroot::write_tree(&d.path().join("sys"), files);
        let root = SysRoot::machine(d.path());
        (d, root)
    }

    #[test]
    fn off_absent_and_running_are_told_apart() {
        let (_d, root) = tree(&[("devices/system/cpu/online", "0-3\n")]);
        assert_eq!(read(&root).unwrap(), None, "a kernel without sched_ext");
        let (_d, root) = tree(&[("kernel/sched_ext/state", "disabled\n")]);
        assert_eq!(read(&root).unwrap(), None);
        let (_d, root) = tree(&[
            ("kernel/sched_ext/state", "enabled\n"),
            ("kernel/sched_ext/root/ops", "layered\n"),
        ]);
        let s = read(&root).unwrap().unwrap();
        assert_eq!(
            s,
            SchedExt {
                state: "enabled".into(),
                ops: "layered".into()
            }
        );
        assert_eq!(s.describe(), "layered (enabled)");
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"state": "enabled", "ops": "layered"})
        );
        let (_d, root) = tree(&[("kernel/sched_ext/state", "enabling\n")]);
        assert_eq!(
            read(&root).unwrap().unwrap().describe(),
            "unnamed scheduler (enabling)"
        );
    }

    #[test]
    fn widening_rounds_up_to_whole_groups_inside_the_limit() {
        let llc = [set("0-3"), set("4-7")];
        assert_eq!(widen(&set("1-2"), &llc, &set("0-7")), set("0-3"));
        assert_eq!(widen(&set("3-4"), &llc, &set("0-7")), set("0-7"));
        // Never past the cpuset; the chosen CPUs always stay.
        assert_eq!(widen(&set("4"), &llc, &set("4-5")), set("4-5"));
        assert_eq!(widen(&set("9"), &llc, &set("0-7")), set("9"));
    }

    #[test]
    fn partial_means_neither_all_nor_whole_groups() {
        let nodes = [set("0-3"), set("4-7")];
        let all = set("0-7");
        assert!(!is_partial(&all, &nodes, &all));
        assert!(!is_partial(&set("4-7"), &nodes, &all));
        assert!(!is_partial(&set("0-7"), &nodes, &all));
        assert!(is_partial(&set("4-5"), &nodes, &all));
        assert!(is_partial(&set("0-4"), &nodes, &all));
    }
}
