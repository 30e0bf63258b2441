//! `pinnerd daemon`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DaemonArgs {}

pub fn run(_args: DaemonArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd daemon` is not available in this build yet")
}
