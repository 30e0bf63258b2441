//! The one switch that writes expected files instead of comparing them: snapbox's
//! `SNAPSHOTS=overwrite` (its `DEFAULT_ACTION_ENV`). It rewrites the generated files
//! (`generated::`), the expected topologies (`topology::`), the bad rule corpus's
//! expected messages (`rules::the_bad`) and, through trycmd, the documents' console
//! samples (`docs::every_console`); then review the diff and commit it. The comparisons
//! themselves stay byte for byte.

use snapbox::assert::{Action, DEFAULT_ACTION_ENV};

/// The switch as a reader types it, for messages.
pub const OVERWRITE: &str = "SNAPSHOTS=overwrite";

/// Whether `SNAPSHOTS=overwrite` asks for the expected files to be written.
pub fn overwrite() -> bool {
    Action::with_env_var(DEFAULT_ACTION_ENV) == Some(Action::Overwrite)
}
