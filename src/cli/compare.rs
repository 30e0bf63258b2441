//! `pinnerd compare`: the seed experiment as a command: the planned CPUs (a one-off
//! request for K CPUs from `advice`, not the rules' plan) against autopilot, the worst
//! set and unpinned, measured by `effect`.
//!
//! Must not touch: placement or the ring itself (`advice` and `effect` own them).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::advice::{self, GroundSpec, Measuring};
use crate::cpuset::CpuSet;
use crate::effect;
use crate::placement::{Policy, SmtPolicy};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Threads in the ring (2 = ping-pong).
    #[arg(long, short = 'k', default_value_t = 2)]
    pub count: u32,
    /// Runs of each variant.
    #[arg(long, default_value_t = 7)]
    pub runs: u32,
    /// Length of one run, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub duration_ms: u64,
    /// Latency matrix to plan with (default: this machine's stored or measured one).
    #[arg(long)]
    pub matrix: Option<PathBuf>,
    /// Where the daemon stores this machine's matrix.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Never measure a matrix; plan on the topology alone when none is stored.
    #[arg(long)]
    pub no_measure: bool,
    /// Minimum idle share (percent) every CPU must show before a matrix is measured; 0
    /// measures whatever the load.
    #[arg(long, value_name = "PCT", default_value_t = 75.0)]
    pub idle_threshold: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let k = args.count as usize;
    if k < 2 {
        anyhow::bail!("--count must be at least 2 (a ring needs two threads), got {k}");
    }
    if args.runs == 0 || args.duration_ms == 0 {
        anyhow::bail!("--runs and --duration-ms must be at least 1");
    }
    let spec = GroundSpec {
        sysfs: PathBuf::from(crate::sysroot::LIVE_SYS),
        matrix: args.matrix.clone(),
        state_dir: args.state_dir.clone(),
        measuring: Measuring::unless_no_measure(
            args.no_measure,
            Duration::from_secs(20),
            args.idle_threshold,
        ),
    };
    let req = advice::count_request(k, Policy::Compact, SmtPolicy::Allow, CpuSet::new());
    let p =
        advice::advise(&spec, &req, &Default::default()).context("planning the CPUs to compare")?;
    let mut effect = effect::measure(
        &p.placement.cpus,
        &p.domains,
        &p.source_description(),
        k,
        args.runs,
        Duration::from_millis(args.duration_ms),
    )?;
    effect.latency_off = p.latency_off;
    super::output::print_answer(args.json, || effect.json(), || effect.human())
}
