//! `pinnerd plan`: choose CPUs for a request (or, with `--live`, show what the rules
//! would do to the running system, changing nothing).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cpuset::CpuSet;
use crate::placement::{Policy, SmtPolicy};

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Number of CPUs wanted.
    #[arg(long, short = 'k', required_unless_present = "live")]
    pub count: Option<u32>,
    /// compact (threads that talk) or spread (independent workers).
    #[arg(long, default_value = "compact")]
    pub policy: Policy,
    /// allow, avoid or prefer-siblings.
    #[arg(long, default_value = "allow")]
    pub smt: SmtPolicy,
    /// CPUs never to choose (kernel list format, e.g. 0,8-9).
    #[arg(long)]
    pub exclude: Option<CpuSet>,
    /// Latency matrix (our JSON or core-to-core-latency CSV); default: this machine's.
    #[arg(long)]
    pub matrix: Option<PathBuf>,
    /// Root of the sysfs tree to read the topology from.
    #[arg(long, default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Dry run over the running system: which processes match which rules and what
    /// they would get. Changes nothing.
    #[arg(long)]
    pub live: bool,
    /// Rule directories for --live (default /etc/pinnerd.d).
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
}

pub fn run(_args: PlanArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinnerd plan` is not available in this build yet")
}
