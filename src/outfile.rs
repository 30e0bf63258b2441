//! Replacing an output file whole, in a directory someone else may reach.
//!
//! The metrics textfile, `export nfd --out` and `pinnerd report`'s files are written by
//! root into directories an administrator names (the report's by default into
//! `./pinnerd-report`, wherever root happens to be, `/tmp` included). The new content
//! goes to a temporary file with an unpredictable name, created exclusively and never
//! through a link (`O_CREAT|O_EXCL|O_NOFOLLOW`, relative to the directory's
//! descriptor), and is then renamed over the target: a reader sees the old file or the
//! new one, and a link planted at either name is replaced, never followed. A directory writable by others, or owned by a user other
//! than root and the writer, is refused before anything is written in it.
//!
//! Owns: the temporary file and the rename. Must not touch: anything else in the
//! directory.

use std::io::{Error, ErrorKind, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        let e = Error::from(e);
        Error::new(e.kind(), format!("{}: {e}", dir.display()))
    })
}

/// Why a directory is refused as a place to write; `None` when it is fine.
fn refusal(dir: &Path, fd: &OwnedFd) -> std::io::Result<Option<String>> {
    let st = nix::sys::stat::fstat(fd).map_err(Error::from)?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Ok(Some(format!(
            "{}: directory owned by uid {}, not by root or by this user (uid {me}): \
             refusing to write in it",
            dir.display(),
            st.st_uid
        )));
    }
    if st.st_mode & 0o002 != 0 {
        return Ok(Some(format!(
            "{}: directory writable by others (S_IWOTH, mode {:o}): refusing to write in it",
            dir.display(),
            st.st_mode & 0o7777
        )));
    }
    Ok(None)
}

/// An unpredictable suffix for a temporary name (the kernel's random bytes).
fn random_suffix() -> String {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // No randomness available: the exclusive create still refuses any existing name.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        buf = (t ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Replaces `path` with `bytes` (mode 0644): a temporary file in the same directory,
/// then a rename. `sync` flushes the data to disk before the rename. Errors name the
/// file or the directory.
pub fn replace(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    OutDir::open(dir)?.replace(name, bytes, sync).map(drop)
}

/// A directory checked once for several output files (`pinnerd report`'s): opened,
/// refused when writable by others or owned by another user, then written into
/// through its descriptor, so the files land in the directory that was checked.
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    fd: OwnedFd,
}

impl OutDir {
    /// Opens `dir` and checks who may write in it. The error names the directory.
    pub fn open(dir: &Path) -> std::io::Result<OutDir> {
        let fd = open_dir(dir)?;
        if let Some(why) = refusal(dir, &fd)? {
            return Err(Error::new(ErrorKind::PermissionDenied, why));
        }
        Ok(OutDir {
            path: dir.to_path_buf(),
            fd,
        })
    }

    /// Replaces the file `name` in the directory with `bytes` (mode 0644), as
    /// [`replace`] does; returns its path. Errors name the file.
    pub fn replace(
        &self,
        name: &std::ffi::OsStr,
        bytes: &[u8],
        sync: bool,
    ) -> std::io::Result<PathBuf> {
        let (dir, dirfd) = (&self.path, &self.fd);
        let path = dir.join(name);
        let mut parts = Path::new(name).components();
        if !matches!(
            (parts.next(), parts.next()),
            (Some(Component::Normal(_)), None)
        ) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{}: not a file name", path.display()),
            ));
        }
        // Hidden and not ending in the target's name, so a collector that reads `*.prom`
        // never reads a half-written one.
        let tmp = format!(".{}.tmp-{}", name.to_string_lossy(), random_suffix());
        let file = nix::fcntl::openat(
            dirfd,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| {
            let e = Error::from(e);
            Error::new(e.kind(), format!("{}/{tmp}: {e}", dir.display()))
        })?;
        let result = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::from(file);
            // The umask may have narrowed the mode; the collector must be able to read it.
            nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(0o644)).map_err(Error::from)?;
            f.write_all(bytes)?;
            if sync {
                f.sync_all()?;
            }
            drop(f);
            nix::fcntl::renameat(dirfd, tmp.as_str(), dirfd, name).map_err(Error::from)?;
            Ok(())
        })();
        if let Err(e) = result {
            let _ =
                nix::unistd::unlinkat(dirfd, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
            return Err(Error::new(e.kind(), format!("{}: {e}", path.display())));
        }
        Ok(path)
    }
}

/// Replaces `path`, a file in a directory of this process's own (the daemon's runtime
/// directory: no one else writes there, so none of the checks above), with `bytes`
/// through `PATH.tmp` beside it, then a rename; `sync` flushes the data first. `None`
/// removes the file (a missing one is fine). The error comes with the file it concerns:
/// the temporary file while it is written, else `path`.
pub fn replace_own(path: &Path, bytes: Option<&[u8]>, sync: bool) -> Result<(), (PathBuf, Error)> {
    let at = |p: &Path| {
        let p = p.to_path_buf();
        move |e: Error| (p, e)
    };
    let Some(bytes) = bytes else {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(at(path)(e)),
            _ => Ok(()),
        };
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(at(&tmp))?;
    f.write_all(bytes).map_err(at(&tmp))?;
    if sync {
        f.sync_all().map_err(at(&tmp))?;
    }
    drop(f);
    std::fs::rename(&tmp, path).map_err(at(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_a_link_at_the_target_instead_of_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let out = dir.path().join("out.prom");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        replace(&out, b"new\n", false).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert_eq!(names(dir.path()), vec!["out.prom", "victim"]);
    }

    #[test]
    fn an_own_file_is_replaced_through_its_tmp_file_and_removed_by_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.json");
        replace_own(&path, None, false).unwrap();
        replace_own(&path, Some(b"[1]"), true).unwrap();
        replace_own(&path, Some(b"[2]"), false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[2]");
        assert_eq!(names(dir.path()), vec!["j.json"]);
        replace_own(&path, None, false).unwrap();
        assert!(names(dir.path()).is_empty());
        // A directory in the way of the temporary file: the error names that file.
        std::fs::create_dir(dir.path().join("j.json.tmp")).unwrap();
        let (at, _) = replace_own(&path, Some(b"[3]"), false).unwrap_err();
        assert_eq!(at, dir.path().join("j.json.tmp"));
    }

    #[test]
    fn a_directory_writable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = replace(&dir.path().join("out"), b"x", false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("writable by others"), "{e}");
        assert!(names(dir.path()).is_empty());
        let e = replace(&dir.path().join("missing/out"), b"x", false).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
