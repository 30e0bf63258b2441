//! `pinnerd plan`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

pub fn run(_args: PlanArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd plan` is not available in this build yet")
}
