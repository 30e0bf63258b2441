//! Where the kernel's pseudo-filesystems live. The only module that spells `/sys` and
//! `/proc`; everything else takes a `SysRoot` so tests can point it at a fixture tree.
//!
//! Owns: the two roots and the raw reads of pseudo-files (text in, text out).
//! Must not touch: parsing (see `topology`, `fingerprint`, `watch`).

use std::io;
use std::path::{Path, PathBuf};

/// Roots of sysfs and procfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRoot {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        SysRoot {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }
}

impl SysRoot {
    /// Explicit roots for sysfs and procfs.
    pub fn new(sys: impl Into<PathBuf>, proc: impl Into<PathBuf>) -> Self {
        SysRoot {
            sys: sys.into(),
            proc: proc.into(),
        }
    }

    /// A sysfs tree at `sys` (e.g. a fixture), with the real `/proc`.
    pub fn with_sys(sys: impl Into<PathBuf>) -> Self {
        SysRoot {
            sys: sys.into(),
            ..SysRoot::default()
        }
    }

    /// A captured machine: `dir/sys` and `dir/proc`, the layout of the fixture trees
    /// under `tests/fixtures/sysfs/`.
    pub fn machine(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        SysRoot::new(dir.join("sys"), dir.join("proc"))
    }

    /// Whether this sysfs root is the running machine's (not a fixture or a captured
    /// tree): only then may a `/dev` node be stat'ed and matched against it.
    pub fn is_live_sys(&self) -> bool {
        self.sys == SysRoot::default().sys
    }

    /// `sys` joined with a relative path such as `devices/system/cpu/online`.
    pub fn sys_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.sys.join(rel)
    }

    /// `proc` joined with a relative path such as `self/status`.
    pub fn proc_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.proc.join(rel)
    }
}

/// Reads a pseudo-file whole. `Ok(None)` when it does not exist or may not be read:
/// containers, old kernels and VMs hide parts of sysfs, and callers degrade instead of
/// failing. Any other I/O error is returned.
pub fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Names of the entries of a directory, sorted; `Ok(None)` when it does not exist or
/// may not be listed.
pub fn list_dir(path: &Path) -> io::Result<Option<Vec<String>>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(Some(names))
}

/// Absent or hidden: the kernel (or a container runtime) does not offer this file.
/// `ENODEV`/`EINVAL` come from sysfs attributes that exist but have no value on this
/// hardware (e.g. some cpufreq files under a hypervisor).
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::NotADirectory
    ) || matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_layout_and_optional_reads() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(dir.path());
        assert_eq!(root.sys_path("a/b"), dir.path().join("sys/a/b"));
        assert_eq!(root.proc_path("cpuinfo"), dir.path().join("proc/cpuinfo"));
        std::fs::create_dir_all(root.sys_path("d")).unwrap();
        std::fs::write(root.sys_path("d/f"), "x\n").unwrap();
        assert_eq!(
            read_optional(&root.sys_path("d/f")).unwrap().as_deref(),
            Some("x\n")
        );
        assert_eq!(read_optional(&root.sys_path("d/missing")).unwrap(), None);
        assert_eq!(
            read_optional(&root.sys_path("d/f/under-a-file")).unwrap(),
            None
        );
        assert!(
            read_optional(&root.sys_path("d")).is_err(),
            "a directory is an error"
        );
        assert_eq!(
            list_dir(&root.sys_path("d")).unwrap(),
            Some(vec!["f".to_string()])
        );
        assert_eq!(list_dir(&root.sys_path("nope")).unwrap(), None);
    }
}
