//! Client commands that talk to the running daemon over D-Bus: `status`, `remeasure`,
//! `reload`, `managed`, `explain`.

use std::process::ExitCode;

/// Which bus to reach the daemon on.
#[derive(Debug, clap::Args)]
pub struct BusArgs {}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Debug, clap::Args)]
pub struct RemeasureArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Process id to explain.
    pub pid: u32,
}

fn unavailable(name: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd {name}` is not available in this build yet")
}

pub fn status(_args: StatusArgs) -> anyhow::Result<ExitCode> {
    unavailable("status")
}
pub fn remeasure(_args: RemeasureArgs) -> anyhow::Result<ExitCode> {
    unavailable("remeasure")
}
pub fn reload(_args: BusArgs) -> anyhow::Result<ExitCode> {
    unavailable("reload")
}
pub fn managed(_args: BusArgs) -> anyhow::Result<ExitCode> {
    unavailable("managed")
}
pub fn explain(_args: ExplainArgs) -> anyhow::Result<ExitCode> {
    unavailable("explain")
}
