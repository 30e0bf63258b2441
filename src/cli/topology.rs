//! `pinnerd topology`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct TopologyArgs {}

pub fn run(_args: TopologyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd topology` is not available in this build yet")
}
