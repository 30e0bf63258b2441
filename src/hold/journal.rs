//! The journal of holds (`holds.json` in the runtime directory): what to undo if the
//! daemon dies, written before every change, read at the next start (see `Holder::recover`).

use std::path::Path;

use super::Hold;
use crate::journal::{JournalError, ListFile};

/// File name of the hold journal under the runtime directory.
pub const JOURNAL_FILE: &str = "holds.json";

/// The journal of holds: what to undo if the daemon dies.
#[derive(Debug, Clone)]
pub struct Journal(ListFile<Hold>);

impl Journal {
    pub fn new(runtime_dir: &Path) -> Journal {
        Journal(ListFile::new(runtime_dir, JOURNAL_FILE, "hold journal"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Replaces the journal atomically; empty removes it.
    pub fn save(&self, holds: &[Hold]) -> Result<(), JournalError> {
        self.0.save(holds)
    }

    /// What a previous run left: empty when there is no journal.
    pub fn load(&self) -> Result<Vec<Hold>, JournalError> {
        self.0.load()
    }
}
