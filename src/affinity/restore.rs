//! The restore journal: what must be given back if the daemon dies.
//!
//! Each managed process is recorded with its start time, the mask it had at first
//! contact and the mask we applied. The file is rewritten atomically (temp file, then
//! rename) whenever that set changes, so after a crash the next start can put every
//! task we changed back the way it was — and leave alone any task someone else has
//! changed since. A journal that does not parse at start is moved aside
//! (`restore.json.corrupt-<µs>`, the newest [`KEEP_CORRUPT`] kept) before anything can
//! overwrite it, so the masks it may still hold are never silently lost.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sched::SchedAttr;
use super::{apply, list_tids, parse_stat, AffinityError, AffinityOps, Outcome, Tid};
use crate::cpuset::CpuSet;
use crate::infile::{self, InError, Links};
use crate::outfile;
use crate::sysroot::SysRoot;

/// File name under the runtime directory.
pub const JOURNAL_FILE: &str = "restore.json";
/// Corrupt journals kept beside the journal; older ones are removed.
pub const KEEP_CORRUPT: usize = 4;

/// Largest journal read: one entry per managed process with its threads' masks is a few
/// hundred bytes, so 64 MiB holds hundreds of thousands of threads. A larger file, or one
/// that is not a regular file (a FIFO would block the read), is corrupt.
pub const MAX_JOURNAL_SIZE: u64 = 64 << 20;

/// Errors reading or writing the journal; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{path}: cannot write the restore journal: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot read the restore journal: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: corrupt restore journal: {message}")]
    Corrupt {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A corrupt journal found at start, moved aside so that it is not overwritten.
    #[error(
        "{path}:{line}:{column}: corrupt restore journal ({message}); moved aside to {aside}: \
         the masks it held were NOT restored, check the tasks it names by hand"
    )]
    SetAside {
        path: PathBuf,
        aside: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

/// One process whose tasks we changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreEntry {
    pub pid: i32,
    pub start_time: u64,
    pub comm: String,
    /// The mask we set (tasks still on it are ours to restore).
    pub applied: CpuSet,
    /// The main thread's mask at first contact: the default for every thread.
    pub original: CpuSet,
    /// Threads whose original or applied mask differs from the process's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub threads: BTreeMap<Tid, ThreadRestore>,
}

/// A thread with its own masks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRestore {
    pub original: CpuSet,
    pub applied: CpuSet,
    /// The scheduling class a rule gave it (`sched-policy`, `sched-priority`, `nice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched: Option<SchedRestore>,
}

/// The scheduling class a thread had at first contact and the one we set: a thread
/// still in ours is given its own back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedRestore {
    pub original: SchedAttr,
    pub applied: SchedAttr,
}

impl SchedRestore {
    /// Puts `tid` back to its own class if it still has ours: `Ok(true)` when given
    /// back, `Ok(false)` when someone else changed it since (left alone).
    pub fn give_back(&self, ops: &dyn AffinityOps, tid: Tid) -> Result<bool, AffinityError> {
        let current = ops.get_sched(tid)?;
        if !current.has(&self.applied) {
            return Ok(false);
        }
        ops.set_sched(tid, &self.original.restoring())?;
        Ok(true)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalFile {
    version: u32,
    processes: Vec<RestoreEntry>,
}

/// The journal file under a runtime directory.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    pub fn new(runtime_dir: &Path) -> Self {
        Journal {
            path: runtime_dir.join(JOURNAL_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the journal with `entries` atomically. An empty list removes the file.
    pub fn save(&self, entries: &[RestoreEntry]) -> Result<(), RestoreError> {
        let body = if entries.is_empty() {
            None
        } else {
            let file = JournalFile {
                version: 1,
                processes: entries.to_vec(),
            };
            Some(
                serde_json::to_vec_pretty(&file).map_err(|e| RestoreError::Write {
                    path: self.path.clone(),
                    source: std::io::Error::other(e),
                })?,
            )
        };
        // No fsync: the journal guards against the daemon dying, not the machine. After
        // a crash of the daemon the page cache holds the last complete file (the rename
        // is atomic); after a power loss no task it names is alive any more, and the
        // unit's runtime directory (/run) does not survive the reboot. An fsync per
        // change would stall the loop on a disk-backed runtime directory (see
        // benches/README.md).
        outfile::replace_own(&self.path, body.as_deref(), false)
            .map_err(|(path, source)| RestoreError::Write { path, source })
    }

    /// Reads the journal; a missing file is an empty journal.
    pub fn load(&self) -> Result<Vec<RestoreEntry>, RestoreError> {
        let text = match self.read_bounded() {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let file: JournalFile = serde_json::from_str(&text).map_err(|e| RestoreError::Corrupt {
            path: self.path.clone(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Ok(file.processes)
    }

    /// Reads the journal for a crash restore. A corrupt file is renamed to
    /// `restore.json.corrupt-<µs>` (keeping the newest [`KEEP_CORRUPT`]) and reported as
    /// [`RestoreError::SetAside`], so that the next write cannot overwrite it.
    /// The journal's text; `None` when there is none. A file that is not a regular file
    /// or is over [`MAX_JOURNAL_SIZE`] is [`RestoreError::Corrupt`] (so it is set aside),
    /// found out before reading it.
    fn read_bounded(&self) -> Result<Option<String>, RestoreError> {
        let opened = infile::open_regular(&self.path, Links::Refuse)
            .and_then(|(file, md)| infile::read_text(file, md.len(), MAX_JOURNAL_SIZE));
        match opened {
            Ok(text) => Ok(Some(text)),
            Err(InError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(InError::Io(source)) => Err(RestoreError::Read {
                path: self.path.clone(),
                source,
            }),
            Err(e) => Err(RestoreError::Corrupt {
                path: self.path.clone(),
                line: 0,
                column: 0,
                message: e.to_string(),
            }),
        }
    }

    pub fn load_or_set_aside(&self) -> Result<Vec<RestoreEntry>, RestoreError> {
        let (line, column, message) = match self.load() {
            Err(RestoreError::Corrupt {
                line,
                column,
                message,
                ..
            }) => (line, column, message),
            other => return other,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        let aside = dir.join(format!("{JOURNAL_FILE}.corrupt-{us:020}"));
        fs::rename(&self.path, &aside).map_err(|source| RestoreError::Write {
            path: aside.clone(),
            source,
        })?;
        self.prune_corrupt(dir);
        Err(RestoreError::SetAside {
            path: self.path.clone(),
            aside,
            line,
            column,
            message,
        })
    }

    /// Corrupt journals set aside, oldest first.
    pub fn corrupt_files(&self) -> Vec<PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let prefix = format!("{JOURNAL_FILE}.corrupt-");
        let mut files: Vec<PathBuf> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect();
        files.sort();
        files
    }

    fn prune_corrupt(&self, dir: &Path) {
        let files = self.corrupt_files();
        for old in &files[..files.len().saturating_sub(KEEP_CORRUPT)] {
            if let Err(e) = fs::remove_file(old) {
                tracing::warn!(path = %old.display(), dir = %dir.display(), error = %e, "cannot prune an old corrupt restore journal {} (in {}): {e}", old.display(), dir.display());
            }
        }
    }
}

/// What a crash restore did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Tasks put back to their original mask.
    pub restored: usize,
    /// Tasks put back to their original scheduling class.
    pub restored_sched: usize,
    /// Tasks left alone because someone else changed them after us.
    pub left_alone: usize,
    /// Processes that exited or whose pid now belongs to another process.
    pub gone: usize,
    /// Tasks whose restore failed, with the reason.
    pub failed: Vec<(Tid, String)>,
    /// The entries whose process still runs, each of its tasks that was ours listed in
    /// `threads` with the mask it had before pinnerd first touched it: the restore may
    /// have been narrowed by a cgroup cpuset (a unit still held), so a later run that
    /// manages the process again takes these as its originals, not the masks it reads.
    pub alive: Vec<RestoreEntry>,
}

/// Restores every task recorded in `entries` that still runs on the mask we applied.
///
/// A process is recognised by pid, start time and comm; after a crash no pidfd
/// survives, so this is the best identity available.
pub fn restore_entries(
    ops: &dyn AffinityOps,
    root: &SysRoot,
    entries: &[RestoreEntry],
    online: &CpuSet,
) -> RestoreReport {
    let mut report = RestoreReport::default();
    for e in entries {
        let same = crate::sysroot::read_bounded(root.proc_path(format!("{}/stat", e.pid)))
            .ok()
            .and_then(|t| parse_stat(&t))
            .is_some_and(|s| s.start_time == e.start_time && s.comm == e.comm);
        if !same {
            report.gone += 1;
            continue;
        }
        let mut ours = BTreeMap::new();
        for tid in list_tids(root, e.pid) {
            if let Some(sched) = e.threads.get(&tid).and_then(|t| t.sched) {
                match sched.give_back(ops, tid) {
                    Ok(true) => report.restored_sched += 1,
                    Ok(false) => report.left_alone += 1,
                    Err(AffinityError::Gone { .. }) => {}
                    Err(err) => report.failed.push((tid, err.to_string())),
                }
            }
            let Ok(current) = ops.get_affinity(tid) else {
                continue;
            };
            let (original, applied) = match e.threads.get(&tid) {
                Some(t) => (&t.original, &t.applied),
                None => (&e.original, &e.applied),
            };
            if current != *applied && current != applied.intersection(online) {
                report.left_alone += 1;
                continue;
            }
            ours.insert(
                tid,
                ThreadRestore {
                    original: original.clone(),
                    applied: applied.clone(),
                    sched: None,
                },
            );
            match apply(ops, tid, original, online) {
                Outcome::Applied { .. } | Outcome::Narrowed { .. } => report.restored += 1,
                Outcome::Gone => {}
                other => report.failed.push((tid, other.label().to_string())),
            }
        }
        report.alive.push(RestoreEntry {
            threads: ours,
            ..e.clone()
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_round_trips_and_empties() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        assert!(j.load().unwrap().is_empty());
        let e = RestoreEntry {
            pid: 42,
            start_time: 7,
            comm: "md-feed".into(),
            applied: "2-3".parse().unwrap(),
            original: "0-7".parse().unwrap(),
            threads: BTreeMap::from([(
                43,
                ThreadRestore {
                    original: "0".parse().unwrap(),
                    applied: "3".parse().unwrap(),
                    sched: Some(SchedRestore {
                        original: SchedAttr::default(),
                        applied: SchedAttr {
                            policy: super::super::sched::SCHED_FIFO,
                            priority: 50,
                            ..SchedAttr::default()
                        },
                    }),
                },
            )]),
        };
        j.save(std::slice::from_ref(&e)).unwrap();
        assert_eq!(j.load().unwrap(), vec![e]);
        j.save(&[]).unwrap();
        assert!(!j.path().exists());
    }

    #[test]
    fn a_corrupt_journal_names_file_and_position() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        fs::write(j.path(), "{\n  \"version\": 1,\n  oops").unwrap();
        let msg = j.load().unwrap_err().to_string();
        assert!(msg.contains("restore.json:3:"), "{msg}");
    }

    #[test]
    fn a_fifo_or_an_oversized_journal_is_corrupt_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        // A FIFO would block a plain read until a writer came.
        nix::unistd::mkfifo(
            j.path(),
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let e = j.load().unwrap_err();
        assert!(
            matches!(&e, RestoreError::Corrupt { message, .. } if message.contains("not a regular file")),
            "{e}"
        );
        let e = j.load_or_set_aside().unwrap_err();
        assert!(matches!(e, RestoreError::SetAside { .. }), "{e}");
        assert!(!j.path().exists(), "the FIFO was moved aside");
        // Over the limit: refused from its size (a sparse file costs no disk).
        let f = fs::File::create(j.path()).unwrap();
        f.set_len(MAX_JOURNAL_SIZE + 1).unwrap();
        let e = j.load().unwrap_err();
        assert!(
            matches!(&e, RestoreError::Corrupt { message, .. } if message.contains("-byte limit")),
            "{e}"
        );
        // A symlink is not followed.
        fs::remove_file(j.path()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", j.path()).unwrap();
        let e = j.load().unwrap_err();
        assert!(
            matches!(&e, RestoreError::Corrupt { message, .. } if message.contains("not a regular file")),
            "{e}"
        );
    }

    #[test]
    fn a_corrupt_journal_at_start_is_moved_aside_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        let body = "{\n  \"version\": 1,\n  \"processes\": [{\"pid\": 42, \"start_";
        fs::write(j.path(), body).unwrap();
        let e = j.load_or_set_aside().unwrap_err();
        let RestoreError::SetAside { aside, line, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(*line, 3);
        let msg = e.to_string();
        assert!(
            msg.contains("restore.json:3:") && msg.contains("moved aside"),
            "{msg}"
        );
        assert!(!j.path().exists());
        assert_eq!(
            fs::read_to_string(aside).unwrap(),
            body,
            "kept byte for byte"
        );
        // The next write does not touch it, and an empty journal loads as empty.
        j.save(&[]).unwrap();
        assert!(j.load_or_set_aside().unwrap().is_empty());
        assert_eq!(j.corrupt_files(), vec![aside.clone()]);
        // Set-aside files are pruned to the newest few.
        for _ in 0..KEEP_CORRUPT + 2 {
            fs::write(j.path(), "not json").unwrap();
            assert!(j.load_or_set_aside().is_err());
        }
        let kept = j.corrupt_files();
        assert_eq!(kept.len(), KEEP_CORRUPT, "{kept:?}");
        assert!(!kept.contains(aside), "the oldest is pruned");
    }
}
