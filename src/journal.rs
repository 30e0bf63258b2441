//! A list kept in one JSON file of the runtime directory: what to undo if the daemon
//! dies (the IRQs it moved, `irq::Journal`; the units it holds, `hold::Journal`).
//! Written whole before every change, atomically, by the daemon only (`outfile`); read
//! at the next start as a regular file, never through a symlink, and bounded (`infile`),
//! so nothing another user put there can block or balloon the read.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::infile::{self, InError, Links};

/// Largest journal read: far above any real one (a few hundred entries of a few dozen
/// bytes each).
pub const MAX_JOURNAL_SIZE: u64 = 4 << 20;

/// A journal could not be written or read; every error names the file.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{path}: {source}", path = path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}", path = path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not JSON of the journal's kind, too large, or not a regular file.
    #[error("{path}: corrupt {what}: {message}", path = path.display())]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
}

/// A journal of `T`s in one file.
#[derive(Debug, Clone)]
pub struct ListFile<T> {
    path: PathBuf,
    /// What it is, for messages: "IRQ journal", "hold journal".
    what: &'static str,
    kind: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ListFile<T> {
    /// The journal `file` under `runtime_dir`.
    pub fn new(runtime_dir: &Path, file: &str, what: &'static str) -> ListFile<T> {
        ListFile {
            path: runtime_dir.join(file),
            what,
            kind: PhantomData,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the journal atomically (temp file, then rename); empty removes it.
    pub fn save(&self, items: &[T]) -> Result<(), JournalError> {
        let write = |source| JournalError::Write {
            path: self.path.clone(),
            source,
        };
        let text = match items {
            [] => None,
            _ => Some(serde_json::to_string_pretty(items).map_err(|e| write(e.into()))?),
        };
        // Every error names the journal, the temporary file's included.
        crate::outfile::replace_own(&self.path, text.as_ref().map(|t| t.as_bytes()), true)
            .map_err(|(_, source)| write(source))
    }

    /// What a previous run left: empty when there is no journal.
    pub fn load(&self) -> Result<Vec<T>, JournalError> {
        let opened = infile::open_regular(&self.path, Links::Refuse)
            .and_then(|(file, md)| infile::read_text(file, md.len(), MAX_JOURNAL_SIZE));
        let corrupt = |message: String| JournalError::Corrupt {
            path: self.path.clone(),
            what: self.what,
            message,
        };
        let text = match opened {
            Ok(text) => text,
            Err(InError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Vec::new())
            }
            Err(InError::Io(source)) => {
                return Err(JournalError::Read {
                    path: self.path.clone(),
                    source,
                })
            }
            Err(e) => return Err(corrupt(e.to_string())),
        };
        serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(dir: &Path) -> ListFile<u32> {
        ListFile::new(dir, "j.json", "test journal")
    }

    #[test]
    fn what_is_saved_is_loaded_and_an_empty_save_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path());
        assert_eq!(j.load().unwrap(), Vec::<u32>::new());
        j.save(&[3, 1, 2]).unwrap();
        assert_eq!(j.load().unwrap(), vec![3, 1, 2]);
        j.save(&[]).unwrap();
        assert!(!j.path().exists());
        assert_eq!(j.load().unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn a_corrupt_oversized_or_linked_journal_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path());
        std::fs::write(j.path(), "{not json").unwrap();
        let e = j.load().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: corrupt test journal: ", j.path().display())),
            "{e}"
        );
        std::fs::write(j.path(), vec![b' '; MAX_JOURNAL_SIZE as usize + 1]).unwrap();
        assert!(matches!(j.load(), Err(JournalError::Corrupt { .. })));
        std::fs::remove_file(j.path()).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "[1]").unwrap();
        std::os::unix::fs::symlink(&elsewhere, j.path()).unwrap();
        let e = j.load().unwrap_err();
        assert!(
            e.to_string().contains(&j.path().display().to_string()),
            "{e}"
        );
    }
}
