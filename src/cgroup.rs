//! Which CPUs a process's cgroup cpuset lets it run on.
//!
//! Owns: parsing `/proc/PID/cgroup`, finding the process's cpuset directory (cgroup v1's
//! cpuset hierarchy, else cgroup v2's unified one) and reading its effective CPUs.
//! Must not touch: affinity, the plan, what the CPUs are used for (see `manager`, which
//! keys plans by cpuset).
//!
//! ```text
//!   /proc/PID/cgroup ──► ProcCgroups (v1 cpuset path, v2 path)
//!        │
//!        ▼ under the SysRoot's sysfs, walking up to the root when a level has no file
//!   v1  fs/cgroup/cpuset/PATH/cpuset.effective_cpus (else cpuset.cpus)
//!   v2  fs/cgroup/PATH/cpuset.cpus.effective, fs/cgroup/unified/PATH/… (hybrid)
//!        │
//!        ▼
//!   Cpuset { cpus, file }
//! ```
//!
//! The mount points are the ones systemd makes (`/sys/fs/cgroup`, with `cpuset/` for v1
//! and `unified/` for v2 on a hybrid system); a cpuset mounted elsewhere is not seen, and
//! the manager then falls back to the process's allowed mask at first contact. In cgroup
//! v2 a cgroup without the cpuset controller has no `cpuset.cpus.effective`: its
//! processes are bound by the nearest ancestor that has one, hence the walk up.

use std::path::{Path, PathBuf};

use crate::cpuset::{CpuListError, CpuSet};
use crate::sysroot::{self, SysRoot};

/// A process's cgroup paths, from `/proc/PID/cgroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcCgroups {
    /// The path in the v1 hierarchy that has the `cpuset` controller.
    pub v1_cpuset: Option<String>,
    /// The path in the v2 (unified) hierarchy: the `0::PATH` line.
    pub v2: Option<String>,
    /// The path in the v1 `name=systemd` hierarchy (hybrid systems).
    pub v1_systemd: Option<String>,
}

impl ProcCgroups {
    /// The cgroup path a rule's `cgroup` and `unit` keys match: the v2 path when it says
    /// more than `/`, else the v1 `name=systemd` one (a hybrid system keeps its units
    /// there), else the v2 `/`.
    pub fn rule_path(&self) -> Option<&str> {
        match (&self.v2, &self.v1_systemd) {
            (Some(v), _) if v != "/" => Some(v),
            (_, Some(s)) => Some(s),
            (v, None) => v.as_deref(),
        }
    }
}

/// The CPUs a cgroup cpuset allows, and the file they were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpuset {
    pub cpus: CpuSet,
    pub file: PathBuf,
}

/// Why a process's cpuset could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// `/proc/PID/cgroup` or a cpuset file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A cpuset file does not hold a CPU list.
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: CpuListError },
    /// A line of `/proc/PID/cgroup` is not `ID:CONTROLLERS:PATH`.
    #[error("{}:{line}: not ID:CONTROLLERS:PATH", path.display())]
    Line { path: PathBuf, line: usize },
}

/// Parses the text of `/proc/PID/cgroup` (`path` names it in errors).
pub fn parse_proc_cgroup(path: &Path, text: &str) -> Result<ProcCgroups, CgroupError> {
    let mut out = ProcCgroups::default();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(cg)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CgroupError::Line {
                path: path.to_path_buf(),
                line: i + 1,
            });
        };
        if id.parse::<u32>().is_err() || !cg.starts_with('/') {
            return Err(CgroupError::Line {
                path: path.to_path_buf(),
                line: i + 1,
            });
        }
        if id == "0" && ctrl.is_empty() {
            out.v2 = Some(cg.to_string());
        } else if ctrl == "name=systemd" {
            out.v1_systemd = Some(cg.to_string());
        } else if ctrl.split(',').any(|c| c == "cpuset") {
            out.v1_cpuset = Some(cg.to_string());
        }
    }
    Ok(out)
}

/// The cpuset of process `pid`: `Ok(None)` when it is gone or no cpuset file is found
/// for it (no cpuset controller mounted where systemd mounts it).
pub fn process_cpuset(root: &SysRoot, pid: i32) -> Result<Option<Cpuset>, CgroupError> {
    match proc_cgroups(root, pid)? {
        Some(cg) => cpuset_of(root, &cg),
        None => Ok(None),
    }
}

/// The cgroups of process `pid` (`/proc/PID/cgroup`); `Ok(None)` when it is gone.
pub fn proc_cgroups(root: &SysRoot, pid: i32) -> Result<Option<ProcCgroups>, CgroupError> {
    let path = root.proc_path(format!("{pid}/cgroup"));
    let text = match sysroot::read_optional(&path) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        // ESRCH from a process that exits mid-read is a vanished process, not an error.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(source) => return Err(CgroupError::Read { path, source }),
    };
    parse_proc_cgroup(&path, &text).map(Some)
}

/// The cpuset of a process in the cgroups `cg`: v1's cpuset hierarchy first (on a
/// hybrid system that is where the controller lives), then v2's.
pub fn cpuset_of(root: &SysRoot, cg: &ProcCgroups) -> Result<Option<Cpuset>, CgroupError> {
    if let Some(p) = &cg.v1_cpuset {
        let base = root.sys_path("fs/cgroup/cpuset");
        if let Some(c) = walk_up(&base, p, &["cpuset.effective_cpus", "cpuset.cpus"])? {
            return Ok(Some(c));
        }
    }
    if let Some(p) = &cg.v2 {
        for base in ["fs/cgroup", "fs/cgroup/unified"] {
            if let Some(c) = walk_up(&root.sys_path(base), p, &["cpuset.cpus.effective"])? {
                return Ok(Some(c));
            }
        }
    }
    Ok(None)
}

/// The first of `files` found in `base/cg`, then in each parent up to `base`.
fn walk_up(base: &Path, cg: &str, files: &[&str]) -> Result<Option<Cpuset>, CgroupError> {
    // `..` would leave the hierarchy (a path seen from another cgroup namespace).
    let parts: Vec<&str> = cg
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if parts.contains(&"..") {
        return Ok(None);
    }
    for depth in (0..=parts.len()).rev() {
        let dir = parts[..depth]
            .iter()
            .fold(base.to_path_buf(), |d, p| d.join(p));
        for f in files {
            let file = dir.join(f);
            match sysroot::read_optional(&file) {
                Ok(Some(text)) => {
                    let cpus: CpuSet =
                        text.trim().parse().map_err(|source| CgroupError::Parse {
                            path: file.clone(),
                            source,
                        })?;
                    return Ok(Some(Cpuset { cpus, file }));
                }
                Ok(None) => {}
                Err(source) => return Err(CgroupError::Read { path: file, source }),
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sysroot::write_tree;

    #[test]
    fn parses_hybrid_and_pure_v2() {
        let p = Path::new("/proc/7/cgroup");
        let hybrid = "12:cpuset:/pinned\n11:cpu,cpuacct:/x\n1:name=systemd:/system.slice/a.service\n0::/system.slice/a.service\n";
        let cg = parse_proc_cgroup(p, hybrid).unwrap();
        assert_eq!(cg.v1_cpuset.as_deref(), Some("/pinned"));
        assert_eq!(cg.v2.as_deref(), Some("/system.slice/a.service"));
        let v2 = parse_proc_cgroup(p, "0::/user.slice/run-u7.scope\n").unwrap();
        assert_eq!(v2.v1_cpuset, None);
        assert_eq!(v2.v2.as_deref(), Some("/user.slice/run-u7.scope"));
        let joint = parse_proc_cgroup(p, "3:cpu,cpuset:/a/b\n").unwrap();
        assert_eq!(joint.v1_cpuset.as_deref(), Some("/a/b"));
    }

    #[test]
    fn a_bad_line_is_named() {
        let p = Path::new("/proc/7/cgroup");
        let e = parse_proc_cgroup(p, "0::/\ngarbage\n").unwrap_err();
        assert_eq!(e.to_string(), "/proc/7/cgroup:2: not ID:CONTROLLERS:PATH");
        let e = parse_proc_cgroup(p, "x:cpuset:/a\n").unwrap_err();
        assert_eq!(e.to_string(), "/proc/7/cgroup:1: not ID:CONTROLLERS:PATH");
    }

    #[test]
    fn v1_cpuset_is_read_from_the_cpuset_hierarchy() {
        let d = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(d.path());
        write_tree(
            d.path(),
            &[
                (
                    "proc/42/cgroup",
                    "5:cpuset:/box\n0::/system.slice/x.service\n",
                ),
                ("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-7\n"),
                ("sys/fs/cgroup/cpuset/box/cpuset.effective_cpus", "1,3\n"),
                ("sys/fs/cgroup/cpuset/box/cpuset.cpus", "1-3\n"),
            ],
        );
        let c = process_cpuset(&root, 42).unwrap().unwrap();
        assert_eq!(c.cpus.to_string(), "1,3");
        assert!(c.file.ends_with("cpuset/box/cpuset.effective_cpus"));
        // Without effective_cpus (a `noprefix`-less old kernel): cpuset.cpus.
        std::fs::remove_file(
            d.path()
                .join("sys/fs/cgroup/cpuset/box/cpuset.effective_cpus"),
        )
        .unwrap();
        let c = process_cpuset(&root, 42).unwrap().unwrap();
        assert_eq!(c.cpus.to_string(), "1-3");
    }

    #[test]
    fn v2_walks_up_to_the_nearest_cpuset() {
        let d = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(d.path());
        write_tree(
            d.path(),
            &[
                ("proc/9/cgroup", "0::/system.slice/run-u3.service\n"),
                ("sys/fs/cgroup/cpuset.cpus.effective", "0-7\n"),
                (
                    "sys/fs/cgroup/system.slice/run-u3.service/cpuset.cpus.effective",
                    "4-7\n",
                ),
            ],
        );
        let c = process_cpuset(&root, 9).unwrap().unwrap();
        assert_eq!(c.cpus.to_string(), "4-7");
        // A cgroup without the controller is bound by its ancestors'.
        write_tree(
            d.path(),
            &[("proc/10/cgroup", "0::/user.slice/session-1.scope\n")],
        );
        let c = process_cpuset(&root, 10).unwrap().unwrap();
        assert_eq!(c.cpus.to_string(), "0-7");
        assert_eq!(c.file, d.path().join("sys/fs/cgroup/cpuset.cpus.effective"));
    }

    #[test]
    fn hybrid_unified_without_cpuset_and_gone_processes_give_none() {
        let d = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(d.path());
        write_tree(
            d.path(),
            &[
                ("proc/5/cgroup", "1:name=systemd:/a\n0::/a\n"),
                ("sys/fs/cgroup/unified/a/cgroup.procs", "5\n"),
            ],
        );
        assert_eq!(process_cpuset(&root, 5).unwrap(), None);
        assert_eq!(process_cpuset(&root, 6).unwrap(), None);
        // A path from another cgroup namespace is not followed out of the hierarchy.
        write_tree(
            d.path(),
            &[
                ("proc/8/cgroup", "0::/../../etc\n"),
                ("sys/fs/cgroup/cpuset.cpus.effective", "0-3\n"),
            ],
        );
        assert_eq!(process_cpuset(&root, 8).unwrap(), None);
    }

    #[test]
    fn a_bad_cpuset_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(d.path());
        write_tree(
            d.path(),
            &[
                ("proc/5/cgroup", "0::/a\n"),
                ("sys/fs/cgroup/a/cpuset.cpus.effective", "1-x\n"),
            ],
        );
        let e = process_cpuset(&root, 5).unwrap_err();
        assert!(
            e.to_string()
                .contains("sys/fs/cgroup/a/cpuset.cpus.effective"),
            "{e}"
        );
    }
}
