//! Which directory a rule-directory path leads to, so that the rule watcher notices the
//! path being pointed elsewhere: inotify follows the directory it was given (an inode),
//! not the path, so a symlink swapped to a new directory, or the directory moved away
//! and another put in its place, would otherwise go unseen until SIGHUP.
//!
//! Must not touch: rule parsing (see `rules`), the watcher's loop (see `daemon::sources`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A directory's identity: device and inode of what a path leads to, symlinks followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirId {
    dev: u64,
    ino: u64,
}

impl DirId {
    /// The directory `path` leads to now; `None` when it leads to none.
    pub fn of(path: &Path) -> Option<DirId> {
        let md = std::fs::metadata(path).ok().filter(|m| m.is_dir())?;
        Some(DirId {
            dev: md.dev(),
            ino: md.ino(),
        })
    }
}

/// Whether `path` leads to another directory than `watched` (or to none any more).
pub fn leads_elsewhere(path: &Path, watched: Option<DirId>) -> bool {
    DirId::of(path) != watched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swapped_symlink_or_a_replaced_directory_leads_elsewhere() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, link) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("link"),
        );
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let id = DirId::of(&link);
        assert!(id.is_some());
        assert_eq!(id, DirId::of(&a));
        assert!(!leads_elsewhere(&link, id));
        // Swapped atomically, as `ln -sfn` does.
        let tmp_link = tmp.path().join("link.new");
        std::os::unix::fs::symlink(&b, &tmp_link).unwrap();
        std::fs::rename(&tmp_link, &link).unwrap();
        assert!(leads_elsewhere(&link, id));
        // A directory moved away and another made under its name.
        let id = DirId::of(&a);
        std::fs::rename(&a, tmp.path().join("a.old")).unwrap();
        assert!(leads_elsewhere(&a, id), "gone");
        std::fs::create_dir(&a).unwrap();
        assert!(leads_elsewhere(&a, id), "another directory");
        // A file is not a directory.
        assert_eq!(DirId::of(&tmp.path().join("a.old/none")), None);
    }
}
