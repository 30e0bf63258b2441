//! Which cgroup files the daemon may write: the slices its units' `ReadWritePaths=`
//! name, as seen from here, from a running daemon's mount table, or from the shipped
//! units. Owns: the reading of mount tables. Must not touch: the files themselves.

use std::path::{Path, PathBuf};

/// The slices whose subtrees the shipped units' `ReadWritePaths=` name
/// (`systemd/pinnerd.service`, `systemd/pinnerd-partition@.service`): what the daemon
/// may write unless a drop-in names more (docs/sharing.md, "A slice of its own").
pub const WRITABLE_SLICES: [&str; 3] = ["system.slice", "user.slice", "machine.slice"];

/// Which files the daemon finds on a read-only mount: by its own `access(2)`, by the
/// mount table of the running daemon (`/proc/PID/mountinfo`, read by a dry run), or,
/// with no daemon to read, by what the shipped units allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountView {
    /// This process's own view: `access(2)` answers `EROFS` (the daemon, inside its
    /// unit's sandbox).
    Here,
    /// Another process's mount table (`/proc/PID/mountinfo`).
    Mountinfo(String),
    /// The shipped units: writable only below [`WRITABLE_SLICES`] of `mount`.
    Shipped { mount: PathBuf },
}

impl MountView {
    /// Whether `path` is on a read-only mount in this view.
    pub fn read_only(&self, path: &Path) -> bool {
        match self {
            MountView::Here => matches!(
                nix::unistd::access(existing(path), nix::unistd::AccessFlags::W_OK),
                Err(nix::errno::Errno::EROFS)
            ),
            MountView::Mountinfo(text) => read_only_in(text, path),
            MountView::Shipped { mount } => !WRITABLE_SLICES
                .iter()
                .any(|s| path.starts_with(mount.join(s))),
        }
    }
}

/// `path` if it exists, else the nearest directory above it that does: a file not there
/// yet (a slice's cpuset files appear only once systemd enables the controller for it,
/// when a unit in it is confined) is on the mount of the directory it will be made in.
pub(super) fn existing(path: &Path) -> &Path {
    path.ancestors().find(|p| p.exists()).unwrap_or(path)
}

/// Whether `path` is on a read-only mount by the mount table `mountinfo`: the options of
/// the mount whose mount point is the longest that contains it (the last listed of
/// those, which is on top).
pub fn read_only_in(mountinfo: &str, path: &Path) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for line in mountinfo.lines() {
        let (mine, sb) = line.split_once(" - ").unwrap_or((line, ""));
        let f: Vec<&str> = mine.split(' ').collect();
        let (Some(point), Some(opts)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let point = PathBuf::from(unescape_mountinfo(point));
        if !path.starts_with(&point) {
            continue;
        }
        let depth = point.components().count();
        let ro = |o: &str| o.split(',').any(|x| x == "ro");
        let sb_opts = sb.split(' ').nth(2).unwrap_or("");
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, ro(opts) || ro(sb_opts)));
        }
    }
    best.is_some_and(|(_, ro)| ro)
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
