//! The errors a method replies with, and how the loop's errors become them.

use crate::api::{CommandError, ErrorKind};

/// Errors a method replies with, named `org.pinnerd.Pinnerd1.Error.*`. Their messages
/// reach the caller (busctl prints them), unlike the bus's own `AccessDenied`.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.pinnerd.Pinnerd1.Error")]
pub enum MethodError {
    #[zbus(error)]
    ZBus(zbus::Error),
    /// The method needs root.
    NotPermitted(String),
    /// An argument is malformed, too long or out of range.
    InvalidArgs(String),
    /// The caller is over its rate limit.
    RateLimited(String),
    /// No such process.
    NoSuchProcess(String),
    /// The process is not pinned by `PinProcess`.
    NotManaged(String),
    /// The daemon could not do it.
    Failed(String),
}

pub(super) type Result<T, E = MethodError> = std::result::Result<T, E>;

pub(super) fn command_error(e: CommandError) -> MethodError {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::InvalidArgs => MethodError::InvalidArgs(msg),
        ErrorKind::NoSuchProcess => MethodError::NoSuchProcess(msg),
        ErrorKind::NotManaged => MethodError::NotManaged(msg),
        ErrorKind::Failed => MethodError::Failed(msg),
        ErrorKind::NotPermitted => MethodError::NotPermitted(msg),
    }
}
