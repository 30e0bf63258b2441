//! `pinnerd measure`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct MeasureArgs {}

pub fn run(_args: MeasureArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd measure` is not available in this build yet")
}
