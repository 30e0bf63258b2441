//! `pinnerd compare`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CompareArgs {}

pub fn run(_args: CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd compare` is not available in this build yet")
}
