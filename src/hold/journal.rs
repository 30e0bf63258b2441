//! The journal of holds (`holds.json` in the runtime directory): what to undo if the
//! daemon dies, written before every change, read at the next start (see `Holder::recover`).

use std::path::{Path, PathBuf};

use super::Hold;
use crate::infile::{self, InError, Links};

/// File name of the hold journal under the runtime directory.
pub const JOURNAL_FILE: &str = "holds.json";
/// Largest journal read.
const MAX_JOURNAL_SIZE: u64 = 4 << 20;

/// The journal of holds: what to undo if the daemon dies.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    pub fn new(runtime_dir: &Path) -> Journal {
        Journal {
            path: runtime_dir.join(JOURNAL_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the journal atomically; empty removes it.
    pub fn save(&self, holds: &[Hold]) -> Result<(), String> {
        let text = if holds.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string_pretty(holds)
                    .map_err(|e| format!("{}: {e}", self.path.display()))?,
            )
        };
        crate::outfile::replace_own(&self.path, text.as_ref().map(|t| t.as_bytes()), true)
            .map_err(|(p, e)| format!("{}: {e}", p.display()))
    }

    /// What a previous run left: empty when there is no journal.
    pub fn load(&self) -> Result<Vec<Hold>, String> {
        let opened = infile::open_regular(&self.path, Links::Refuse)
            .and_then(|(file, md)| infile::read_text(file, md.len(), MAX_JOURNAL_SIZE));
        let text = match opened {
            Ok(text) => text,
            Err(InError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        serde_json::from_str(&text)
            .map_err(|e| format!("{}: corrupt hold journal: {e}", self.path.display()))
    }
}
