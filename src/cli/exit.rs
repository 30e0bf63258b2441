//! Exit codes a command ends with, beyond 0 and 1.

/// Exit code for an invalid configuration (rules or settings), distinct from other
/// failures so a unit can use `RestartPreventExitStatus=`.
pub const EXIT_CONFIG: u8 = 3;

/// An error that means "the configuration is invalid"; maps to [`EXIT_CONFIG`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigInvalid(pub String);

/// The process exit code for an error that ended a command.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<ConfigInvalid>()) {
        EXIT_CONFIG
    } else {
        1
    }
}
