//! Where the kernel's pseudo-filesystems live. The only module that spells `/sys` and
//! `/proc`; everything else takes a `SysRoot` so tests can point it at a fixture tree.
//!
//! Owns: the two roots and the raw reads of pseudo-files (text in, text out).
//! Must not touch: parsing (see `topology`, `fingerprint`, `watch`).

use std::io;
use std::path::{Path, PathBuf};

/// Where the running machine's sysfs is: the default of every `--sysfs` flag.
pub const LIVE_SYS: &str = "/sys";
/// Where the running machine's procfs is.
pub const LIVE_PROC: &str = "/proc";

/// Roots of sysfs and procfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRoot {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        SysRoot {
            sys: PathBuf::from(LIVE_SYS),
            proc: PathBuf::from(LIVE_PROC),
        }
    }
}

impl SysRoot {
    /// `--sysfs DIR` may name a sysfs root or a machine directory holding `sys/` and
    /// `proc/`; procfs defaults to the `proc` beside the sysfs root (a chroot's or a
    /// capture's), falling back to the running machine's.
    pub fn resolve(sysfs: Option<&Path>, procfs: Option<&Path>) -> SysRoot {
        let mut root = SysRoot::default();
        if let Some(dir) = sysfs {
            let machine = SysRoot::machine(dir);
            let is_machine_dir = !SysRoot::with_sys(dir)
                .sys_path("devices/system/cpu")
                .exists()
                && machine.sys_path("devices/system/cpu").exists();
            if is_machine_dir {
                root = machine;
            } else {
                root.sys = dir.to_path_buf();
                if let Some(beside) = dir.parent().map(|p| p.join("proc")) {
                    if beside.is_dir() {
                        root.proc = beside;
                    }
                }
            }
        }
        if let Some(dir) = procfs {
            root.proc = dir.to_path_buf();
        }
        root
    }

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

/// Largest pseudo-file read. A sysfs attribute holds a page; `/proc/cpuinfo` of a
/// 1,024-CPU machine about 1.5 MB. A captured tree (`--sysfs`, `--procfs`) is untrusted
/// input: a larger file is an error, not a reason to fill memory.
pub const MAX_PSEUDO_FILE: u64 = 4 << 20;

/// Reads a file of a sysfs or procfs tree whole, as text: a regular file only (a FIFO
/// would block, `/dev/zero` never ends; both are refused without reading, a symlink to
/// them too) of at most [`MAX_PSEUDO_FILE`] bytes. Errors say which rule was broken;
/// callers add the path.
pub fn read_bounded(path: impl AsRef<Path>) -> io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking, so that opening a FIFO does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path.as_ref())?;
    let ft = file.metadata()?.file_type();
    if !ft.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a regular file but a {}", crate::infile::type_name(&ft)),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PSEUDO_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PSEUDO_FILE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("over the {MAX_PSEUDO_FILE}-byte limit for a sysfs or procfs file"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a pseudo-file whole (see [`read_bounded`]). `Ok(None)` when it does not exist
/// or may not be read: containers, old kernels and VMs hide parts of sysfs, and callers
/// degrade instead of failing. Any other I/O error is returned.
pub fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match read_bounded(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Why a file of a sysfs or procfs tree gave no value, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A file's content does not parse (1-based line and column).
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

/// [`read_optional`], its error naming the file.
pub fn read_optional_file(path: &Path) -> Result<Option<String>, FileError> {
    read_optional(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Most entries [`list_dir`] reads from one directory. The largest sysfs directory read
/// (`devices/system/cpu`) holds one entry a possible CPU plus a few dozen; a captured
/// tree with more is not a machine's, and reading it whole would only cost memory.
pub const MAX_DIR_ENTRIES: usize = 1 << 16;

/// Names of the entries of a directory, sorted; `Ok(None)` when it does not exist or
/// may not be listed; an error past [`MAX_DIR_ENTRIES`].
pub fn list_dir(path: &Path) -> io::Result<Option<Vec<String>>> {
    list_at_most(path, MAX_DIR_ENTRIES)
}

fn list_at_most(path: &Path, max: usize) -> io::Result<Option<Vec<String>>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        if names.len() == max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("more than {max} entries, which no kernel directory read here holds"),
            ));
        }
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

/// Writes a fixture tree for a test: each `(path, text)` under `dir`, parents created.
#[cfg(test)]
pub(crate) fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
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

    #[test]
    fn a_directory_of_more_entries_than_the_bound_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let crowded = dir.path().join("crowded");
        std::fs::create_dir(&crowded).unwrap();
        for i in 0..=16 {
            std::fs::File::create(crowded.join(i.to_string())).unwrap();
        }
        assert_eq!(list_at_most(&crowded, 17).unwrap().unwrap().len(), 17);
        let err = list_at_most(&crowded, 16).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("more than 16 entries"), "{err}");
    }

    #[test]
    fn a_fifo_a_device_or_a_huge_file_is_refused_without_hanging_or_filling_memory() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR).unwrap();
        let e = read_optional(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file but a FIFO"), "{e}");
        let zero = dir.path().join("online");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_optional(&zero).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file but a character device"),
            "{e}"
        );
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_PSEUDO_FILE + 1)
            .unwrap();
        let e = read_bounded(&big).unwrap_err().to_string();
        assert!(e.contains("-byte limit"), "{e}");
        std::fs::write(&big, "0-3\n").unwrap();
        assert_eq!(read_bounded(&big).unwrap(), "0-3\n");
    }
}
