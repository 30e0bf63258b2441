//! The daemon's matrix store: the current matrix and its history in a state directory.
//!
//! Layout under the directory handed to [`MatrixStore::open`]:
//!
//! ```text
//! matrix.json                    the current matrix (our JSON format; binary from
//!                                `BINARY_FROM_CPUS` CPUs on, the name kept)
//! history/matrix-<µs>.json       previous matrices, newest kept, oldest pruned
//! matrix.json.corrupt-<µs>       a current file that did not parse, set aside
//! matrix.json.foreign-<µs>       a current file from other hardware, set aside
//! ```
//!
//! Set-aside files are pruned like the history: the newest `keep` of them stay. The
//! current file keeps the cells of CPUs that are offline now ([`MatrixStore::save_keeping`],
//! [`MatrixStore::fill`]; see `matrix::keep`), so a CPU that comes back needs nothing
//! measured.
//!
//! Writes are atomic: a temp file in the same directory, fsync, rename over the old file,
//! fsync of the directory; a writer killed mid-write leaves the old file whole and a
//! temp file that the next [`MatrixStore::open`] removes (when its writer is gone). A
//! bad file is moved aside and reported, never a panic.
//! Must not touch: measurement, the daemon's state (it calls in with a matrix).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{keep, LatencyMatrix};

const CURRENT: &str = "matrix.json";
const HISTORY: &str = "history";
/// Previous matrices kept by default.
pub const DEFAULT_HISTORY: usize = 20;

/// A store operation that failed. Every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory (or its history folder) could not be created or read.
    #[error("matrix store {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing, syncing or renaming a file failed.
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file could not be moved aside.
    #[error("moving {from} aside to {to}: {source}")]
    SetAside {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    /// The matrix to save is not a valid matrix.
    #[error("refusing to store an invalid matrix: {0}")]
    Invalid(String),
}

/// Why a stored file was moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsideReason {
    /// It did not parse or failed validation; the message names the file and line.
    Corrupt(String),
    /// It was measured on other hardware (or carries no fingerprint).
    Foreign { stored: Option<String> },
}

/// A file moved out of the way by [`MatrixStore::load_current`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub from: PathBuf,
    pub to: PathBuf,
    pub reason: AsideReason,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            AsideReason::Corrupt(why) => write!(
                f,
                "{} is corrupt ({why}); moved aside to {}",
                self.from.display(),
                self.to.display()
            ),
            AsideReason::Foreign { stored } => write!(
                f,
                "{} was measured on other hardware (fingerprint {}); moved aside to {}",
                self.from.display(),
                stored.as_deref().unwrap_or("none"),
                self.to.display()
            ),
        }
    }
}

/// What [`MatrixStore::load_current`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The stored matrix when it exists, parses and matches the fingerprint.
    pub matrix: Option<LatencyMatrix>,
    /// The current file when it was unusable and has been moved aside.
    pub set_aside: Option<SetAside>,
}

/// What [`MatrixStore::fitting`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitting {
    /// The stored matrix over the usable CPUs, when it fits this machine.
    pub matrix: Option<LatencyMatrix>,
    /// Pairs `(a, b)` of the usable CPUs the stored matrix (of this hardware) has no
    /// cell for; then `matrix` is `None`.
    pub missing: Vec<(u32, u32)>,
    /// The current file when it was unusable and has been moved aside.
    pub set_aside: Option<SetAside>,
}

/// The current matrix and its history in one directory.
#[derive(Debug, Clone)]
pub struct MatrixStore {
    dir: PathBuf,
    keep: usize,
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

/// A name in `dir` that does not exist yet: `base` or `base.N`.
fn free_name(dir: &Path, base: &str) -> PathBuf {
    let first = dir.join(base);
    if !first.exists() {
        return first;
    }
    (1u32..)
        .map(|k| dir.join(format!("{base}.{k}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::Write {
            path: dir.to_owned(),
            source,
        })
}

impl MatrixStore {
    /// Where the current matrix of a store in `dir` is, without opening the store
    /// (which creates the directory): for a dry run that must change nothing.
    pub fn current_in(dir: &Path) -> PathBuf {
        dir.join(CURRENT)
    }

    /// Opens (creating when needed) the store in `dir`, keeping
    /// [`DEFAULT_HISTORY`] previous matrices.
    pub fn open(dir: impl Into<PathBuf>) -> Result<MatrixStore, StoreError> {
        let dir = dir.into();
        let history = dir.join(HISTORY);
        fs::create_dir_all(&history).map_err(|source| StoreError::Dir {
            path: history.clone(),
            source,
        })?;
        let store = MatrixStore {
            dir,
            keep: DEFAULT_HISTORY,
        };
        store.remove_stale_temp_files();
        Ok(store)
    }

    /// Removes temp files (`.matrix.json.tmp-<pid>-<µs>`) left by writers that died
    /// mid-write; a live writer's file is left alone.
    fn remove_stale_temp_files(&self) {
        let prefix = format!(".{CURRENT}.tmp-");
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            let Some(pid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH);
            if gone {
                match fs::remove_file(&path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "removed a temp file left by a writer that died: {}", path.display())
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale temp file {}: {e}", path.display())
                    }
                }
            }
        }
    }

    /// Keep at most `keep` previous matrices.
    pub fn with_history(mut self, keep: usize) -> MatrixStore {
        self.keep = keep;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the current matrix file.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    /// The current matrix if it exists, parses, validates and was measured on hardware
    /// with `fingerprint`. A corrupt or foreign file is moved aside (reported in
    /// [`Loaded::set_aside`]); only failing to move it is an error.
    pub fn load_current(&self, fingerprint: &str) -> Result<Loaded, StoreError> {
        let path = self.current_path();
        if !path.exists() {
            return Ok(Loaded {
                matrix: None,
                set_aside: None,
            });
        }
        let (reason, tag) = match LatencyMatrix::load(&path) {
            Ok(m) if m.fingerprint.as_deref() == Some(fingerprint) => {
                return Ok(Loaded {
                    matrix: Some(m),
                    set_aside: None,
                })
            }
            Ok(m) => (
                AsideReason::Foreign {
                    stored: m.fingerprint,
                },
                "foreign",
            ),
            Err(e) => (AsideReason::Corrupt(e.to_string()), "corrupt"),
        };
        let to = free_name(&self.dir, &format!("{CURRENT}.{tag}-{}", now_us()));
        fs::rename(&path, &to).map_err(|source| StoreError::SetAside {
            from: path.clone(),
            to: to.clone(),
            source,
        })?;
        sync_dir(&self.dir)?;
        self.prune_set_aside()?;
        let aside = SetAside {
            from: path,
            to,
            reason,
        };
        tracing::warn!(store = %self.dir.display(), "{aside}");
        Ok(Loaded {
            matrix: None,
            set_aside: Some(aside),
        })
    }

    /// The stored matrix that fits this machine, the one decision the daemon, `plan`
    /// and `export` share: it parses and validates and was measured on hardware with
    /// `fingerprint` (else it is moved aside, see [`MatrixStore::load_current`]), and it
    /// has a cell for every pair of the `usable` CPUs, to which it is narrowed (it keeps
    /// the cells of CPUs offline now, see [`super::keep::cover`]). `usable` `None`:
    /// every CPU it has.
    pub fn fitting(
        &self,
        fingerprint: &str,
        usable: Option<&crate::cpuset::CpuSet>,
    ) -> Result<Fitting, StoreError> {
        let loaded = self.load_current(fingerprint)?;
        let (matrix, missing) = match (loaded.matrix, usable) {
            (Some(m), Some(cpus)) => {
                let c = super::keep::cover(&m, cpus);
                (c.matrix, c.missing)
            }
            (m, None) => (m, Vec::new()),
            (None, _) => (None, Vec::new()),
        };
        Ok(Fitting {
            matrix,
            missing,
            set_aside: loaded.set_aside,
        })
    }

    /// Makes `matrix` the current one, atomically; the previous current matrix joins
    /// the history (hard link, so a current file exists at every instant) and the
    /// oldest history entries beyond the limit are removed. Returns the current path.
    pub fn save(&self, matrix: &LatencyMatrix) -> Result<PathBuf, StoreError> {
        matrix.validate().map_err(StoreError::Invalid)?;
        let current = self.current_path();
        let tmp = self.dir.join(format!(
            ".{CURRENT}.tmp-{}-{}",
            std::process::id(),
            now_us()
        ));
        // Streamed to the file, never held whole: compact JSON (a cell costs about 6
        // bytes, not the 20 of pretty printing) below `BINARY_FROM_CPUS` CPUs, the
        // binary form (4 bytes a cell) from there on, under the same name (figures by
        // size in benches/README.md).
        let write = |path: &Path| -> std::io::Result<u64> {
            let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
            matrix.write_file(&mut f)?;
            f.sync_all()?;
            Ok(f.metadata()?.len())
        };
        let size = match write(&tmp) {
            Ok(size) => size,
            Err(source) => {
                let _ = fs::remove_file(&tmp);
                return Err(StoreError::Write { path: tmp, source });
            }
        };
        // The reader's limit: never store a file it would refuse.
        let (limit, form) = if matrix.len() < super::binary::BINARY_FROM_CPUS {
            (super::read::MAX_MATRIX_FILE_SIZE, "JSON")
        } else {
            (super::read::MAX_BINARY_FILE_SIZE, "binary")
        };
        if size > limit {
            let _ = fs::remove_file(&tmp);
            return Err(StoreError::Invalid(format!(
                "{size} bytes as {form}, over the {limit}-byte limit for a matrix file"
            )));
        }
        if current.exists() {
            let history = self.dir.join(HISTORY);
            let name = format!("matrix-{:020}.json", now_us());
            let to = free_name(&history, &name);
            fs::hard_link(&current, &to).map_err(|source| StoreError::Write {
                path: to.clone(),
                source,
            })?;
            sync_dir(&history)?;
        }
        fs::rename(&tmp, &current).map_err(|source| {
            let _ = fs::remove_file(&tmp);
            StoreError::Write {
                path: current.clone(),
                source,
            }
        })?;
        sync_dir(&self.dir)?;
        self.prune()?;
        Ok(current)
    }

    /// History files, oldest first.
    pub fn history(&self) -> Result<Vec<PathBuf>, StoreError> {
        let dir = self.dir.join(HISTORY);
        let entries = fs::read_dir(&dir).map_err(|source| StoreError::Dir {
            path: dir.clone(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("matrix-") && n.contains(".json"))
            })
            .collect();
        files.sort();
        Ok(files)
    }

    /// Makes `matrix` the current one like [`MatrixStore::save`], keeping the cells of
    /// the current matrix (same fingerprint) for CPUs `matrix` does not cover: CPUs
    /// offline while it was measured. Returns the matrix stored.
    pub fn save_keeping(&self, matrix: &LatencyMatrix) -> Result<LatencyMatrix, StoreError> {
        let stored = match &matrix.fingerprint {
            Some(fp) => self.load_current(fp)?.matrix,
            None => None,
        };
        let union = match stored {
            Some(old) => keep::merge(matrix, &old),
            None => matrix.clone(),
        };
        self.save(&union)?;
        Ok(union)
    }

    /// Adds measured cells `(a, b, ns)` to the current matrix of `fingerprint` and
    /// stores the result; `None` when there is no current matrix to add to.
    pub fn fill(
        &self,
        fingerprint: &str,
        cells: &[(u32, u32, Option<f64>)],
    ) -> Result<Option<LatencyMatrix>, StoreError> {
        let Some(stored) = self.load_current(fingerprint)?.matrix else {
            return Ok(None);
        };
        let filled = keep::fill(&stored, cells);
        self.save(&filled)?;
        Ok(Some(filled))
    }

    /// Files set aside (corrupt or foreign), oldest first.
    pub fn set_aside_files(&self) -> Result<Vec<PathBuf>, StoreError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| StoreError::Dir {
            path: self.dir.clone(),
            source,
        })?;
        let mut files: Vec<(String, PathBuf)> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?;
                let stamp = name
                    .strip_prefix(&format!("{CURRENT}.corrupt-"))
                    .or_else(|| name.strip_prefix(&format!("{CURRENT}.foreign-")))?;
                Some((format!("{stamp:0>40}"), p))
            })
            .collect();
        files.sort();
        Ok(files.into_iter().map(|(_, p)| p).collect())
    }

    fn prune_set_aside(&self) -> Result<(), StoreError> {
        self.keep_newest(self.set_aside_files()?)
    }

    fn prune(&self) -> Result<(), StoreError> {
        self.keep_newest(self.history()?)
    }

    /// Removes all but the newest `keep` of `files` (oldest first).
    fn keep_newest(&self, files: Vec<PathBuf>) -> Result<(), StoreError> {
        let excess = files.len().saturating_sub(self.keep);
        for old in &files[..excess] {
            fs::remove_file(old).map_err(|source| StoreError::Write {
                path: old.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(fp: &str, v: f64) -> LatencyMatrix {
        let mut m = LatencyMatrix::from_fn(vec![0, 1], |_, _| v);
        m.fingerprint = Some(fp.into());
        m
    }

    #[test]
    fn a_matrix_the_reader_would_refuse_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path().join("state")).unwrap();
        let n = crate::matrix::MAX_MATRIX_CPUS as u32 + 1;
        // Refused on its CPU count, before its cells are looked at (none are built).
        let e = store
            .save(&LatencyMatrix::new(
                (0..n).collect(),
                crate::matrix::Cells::new(0),
            ))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("8193 CPUs: more than the 8192 a matrix may have"),
            "{e}"
        );
        assert!(!store.current_path().exists());
    }

    #[test]
    fn save_then_load_round_trips_and_keeps_history() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path().join("state"))
            .unwrap()
            .with_history(2);
        let loaded = store.load_current("fp1").unwrap();
        assert_eq!(loaded.matrix, None);
        assert_eq!(loaded.set_aside, None);
        for v in [10.0, 20.0, 30.0, 40.0] {
            store.save(&matrix("fp1", v)).unwrap();
        }
        let loaded = store.load_current("fp1").unwrap();
        assert_eq!(loaded.matrix, Some(matrix("fp1", 40.0)));
        let history = store.history().unwrap();
        assert_eq!(history.len(), 2, "{history:?}");
        let old = LatencyMatrix::load(&history[0]).unwrap();
        assert_eq!(old.at(0, 1), Some(20.0));
        let newer = LatencyMatrix::load(&history[1]).unwrap();
        assert_eq!(newer.at(0, 1), Some(30.0));
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
    }

    #[test]
    fn the_fitting_matrix_is_this_hardware_s_narrowed_to_the_usable_cpus() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap();
        let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |a, b| (10 * (a + b)) as f64);
        m.fingerprint = Some("fp1".into());
        store.save(&m).unwrap();
        // Narrowed to the usable CPUs (CPU 2 offline now: its cells stay stored).
        let fit = store.fitting("fp1", Some(&"0-1".parse().unwrap())).unwrap();
        assert_eq!(
            fit.matrix.as_ref().map(|m| m.cpus.clone()),
            Some(vec![0, 1])
        );
        assert!(fit.missing.is_empty());
        // All of it without usable CPUs given.
        let fit = store.fitting("fp1", None).unwrap();
        assert_eq!(fit.matrix.map(|m| m.cpus), Some(vec![0, 1, 2]));
        // A CPU never measured: the pairs it lacks, and no matrix.
        let fit = store
            .fitting("fp1", Some(&"0-1,3".parse().unwrap()))
            .unwrap();
        assert_eq!(fit.matrix, None);
        assert_eq!(fit.missing, vec![(0, 3), (1, 3)]);
        // Other hardware: moved aside, as `load_current` does.
        let fit = store.fitting("fp2", Some(&"0-1".parse().unwrap())).unwrap();
        assert_eq!(fit.matrix, None);
        assert!(matches!(
            fit.set_aside.map(|a| a.reason),
            Some(AsideReason::Foreign { .. })
        ));
        assert!(!store.current_path().exists());
    }

    #[test]
    fn corrupt_file_is_moved_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap();
        fs::write(
            store.current_path(),
            "{\"cpus\": [0, 1],\n \"latency_ns\": [[nul",
        )
        .unwrap();
        let loaded = store.load_current("fp1").unwrap();
        assert_eq!(loaded.matrix, None);
        let aside = loaded.set_aside.unwrap();
        assert!(!store.current_path().exists());
        assert!(aside.to.exists());
        match &aside.reason {
            AsideReason::Corrupt(why) => {
                assert!(why.contains("matrix.json:2:"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(aside.to_string().contains("corrupt"), "{aside}");
        // Truncated to nothing: the CSV reader names the file and line 1.
        fs::write(store.current_path(), "").unwrap();
        let loaded = store.load_current("fp1").unwrap();
        assert!(loaded.set_aside.is_some());
        // Then saving works again.
        store.save(&matrix("fp1", 5.0)).unwrap();
        assert!(store.load_current("fp1").unwrap().matrix.is_some());
    }

    #[test]
    fn foreign_fingerprint_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap();
        store.save(&matrix("other-machine", 5.0)).unwrap();
        let loaded = store.load_current("this-machine").unwrap();
        assert_eq!(loaded.matrix, None);
        let aside = loaded.set_aside.unwrap();
        assert_eq!(
            aside.reason,
            AsideReason::Foreign {
                stored: Some("other-machine".into())
            }
        );
        assert!(LatencyMatrix::load(&aside.to).is_ok());
    }

    #[test]
    fn set_aside_files_are_pruned_like_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap().with_history(3);
        for k in 0..5 {
            store.save(&matrix(&format!("other-{k}"), 5.0)).unwrap();
            assert!(store.load_current("this").unwrap().set_aside.is_some());
            fs::write(store.current_path(), "garbage").unwrap();
            assert!(store.load_current("this").unwrap().set_aside.is_some());
        }
        let kept = store.set_aside_files().unwrap();
        assert_eq!(kept.len(), 3, "{kept:?}");
        // The newest stay: the last corrupt file and the last foreign one among them.
        let last_foreign = kept
            .iter()
            .filter(|p| p.to_string_lossy().contains("foreign"))
            .map(|p| LatencyMatrix::load(p).unwrap().fingerprint.unwrap())
            .max();
        assert_eq!(last_foreign.as_deref(), Some("other-4"));
    }

    #[test]
    fn saving_keeps_the_cells_of_cpus_the_new_matrix_lacks_and_fill_adds_cells() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap();
        let mut four = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |i, j| (10 * i + j) as f64);
        four.fingerprint = Some("fp".into());
        store.save(&four).unwrap();
        // Measured while CPU 3 was offline.
        let stored = store.save_keeping(&matrix("fp", 7.0)).unwrap();
        assert_eq!(stored.cpus, vec![0, 1, 2, 3]);
        assert_eq!(stored.between(0, 1), Some(7.0), "the new cell wins");
        assert_eq!(stored.between(2, 3), Some(32.0), "CPU 3's cells are kept");
        assert_eq!(store.load_current("fp").unwrap().matrix, Some(stored));
        // A CPU never measured: its pairs are added.
        let cells: Vec<_> = (0..4).map(|c| (c, 5, Some(50.0 + f64::from(c)))).collect();
        let filled = store.fill("fp", &cells).unwrap().unwrap();
        assert_eq!(filled.cpus, vec![0, 1, 2, 3, 5]);
        assert_eq!(filled.between(5, 2), Some(52.0));
        assert_eq!(store.load_current("fp").unwrap().matrix, Some(filled));
        assert_eq!(store.fill("other", &cells).unwrap(), None);
    }

    #[test]
    fn invalid_matrix_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::open(dir.path()).unwrap();
        let mut m = matrix("fp", 1.0);
        // Cells in memory are symmetric by construction: a negative one is invalid.
        m.latency_ns.set(0, 1, Some(-2.0));
        let e = store.save(&m).unwrap_err();
        assert!(e.to_string().contains("not a latency"), "{e}");
        assert!(!store.current_path().exists());
    }

    #[test]
    fn unwritable_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        fs::write(&file, "x").unwrap();
        let e = MatrixStore::open(file.join("sub")).unwrap_err();
        assert!(e.to_string().contains("plain-file"), "{e}");
    }
}
