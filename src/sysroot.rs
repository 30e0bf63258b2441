//! Where the kernel's pseudo-filesystems live. The only module that spells `/sys` and
//! `/proc`; everything else takes a `SysRoot` so tests can point it at a fixture tree.
//!
//! Must not touch: parsing (see `topology`, `watch`).

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
    /// A sysfs tree at `sys` (e.g. a fixture), with the real `/proc`.
    pub fn with_sys(sys: impl Into<PathBuf>) -> Self {
        SysRoot {
            sys: sys.into(),
            ..SysRoot::default()
        }
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
