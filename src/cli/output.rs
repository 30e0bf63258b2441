//! What every command writes: standard output that fails as an error (never a
//! panic), an answer as JSON or for people, colour only for a terminal, an error as one
//! line.

use std::process::ExitCode;

pub use crate::words::describe_error;

/// Standard output could not be written: closed (a pipe whose reader left) or full.
#[derive(Debug, thiserror::Error)]
/// (The I/O error is in the message, not also a source: said once.)
#[error("writing to standard output: {0}")]
pub struct StdoutError(pub std::io::Error);

/// Writes `args` to standard output and flushes it, so that a closed or full output is
/// found here, as an error, and not at exit.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// Prints a command's answer whole: `as_json()` pretty-printed with `--json`, else
/// `human()`. A closed pipe (`| head`) or a full disk is an error, not a panic.
pub fn print_answer(
    json: bool,
    as_json: impl FnOnce() -> serde_json::Value,
    human: impl FnOnce() -> String,
) -> anyhow::Result<ExitCode> {
    let text = if json {
        serde_json::to_string_pretty(&as_json())? + "\n"
    } else {
        human()
    };
    write_stdout(format_args!("{text}"))?;
    Ok(ExitCode::SUCCESS)
}

/// Whether to colour what goes to a stream: only a terminal, and never with `NO_COLOR`
/// set (<https://no-color.org>).
pub fn colour(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
