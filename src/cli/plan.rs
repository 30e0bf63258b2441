//! `pinnerd plan`: choose CPUs for a request (or, with `--live`, show what the rules
//! would do to the running system, changing nothing). The flags become a
//! [`GroundSpec`] and a request for `advice` (which says where the matrix comes from);
//! `plan --pid` (`plan_pid`) and `plan --live` (`live`) are dispatched beside it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

use super::place_flags::ShapeFlags;
use crate::advice::{self, GroundSpec, Measuring};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, SmtPolicy};

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Number of CPUs wanted.
    #[arg(long, short = 'k', required_unless_present_any = ["live", "pid"])]
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
    #[command(flatten)]
    pub place: ShapeFlags,
    /// Latency matrix (our JSON or core-to-core-latency CSV); default: this machine's.
    #[arg(long)]
    pub matrix: Option<PathBuf>,
    /// Root of the sysfs tree to read the topology from.
    #[arg(long, default_value = crate::sysroot::LIVE_SYS)]
    pub sysfs: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Dry run over the running system: which processes match which rules and what
    /// they would get. Changes nothing.
    #[arg(long)]
    pub live: bool,
    /// Plan one request for this running process: in its cgroup cpuset, weighing where
    /// its memory is; without --count, the request of the rule that matches it. Other
    /// rules' exclusive CPUs and the [sched-ext] policy are not applied (--live applies
    /// both, as the daemon does). Changes nothing.
    #[arg(long, value_name = "PID", conflicts_with = "live")]
    pub pid: Option<u32>,
    /// With --pid: the class `pinnerd pin PID` with these flags would give its threads
    /// (without --count, the rule's own keys of these names are shown).
    #[command(flatten)]
    pub sched: super::place_flags::SchedFlags,
    /// Rule directories for --live (default: the settings' `rule-dirs`, /etc/pinnerd.d).
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// The daemon's settings file, for --live (housekeeping CPUs, rule directories); a
    /// missing file means the defaults.
    #[arg(long, value_name = "FILE", default_value = crate::settings::DEFAULT_SETTINGS_PATH)]
    pub config: PathBuf,
    /// For --live: the bus the daemon is on, whose record says who set each running
    /// container's cpuset.
    #[command(flatten)]
    pub bus: super::client::BusArgs,
    /// For --live: where containerd's task files and the kubelet's CPU manager state
    /// are read (tests point it at a tree).
    #[arg(long, value_name = "DIR", hide = true, default_value = "/")]
    pub container_files: PathBuf,
    /// Where the daemon stores this machine's matrix (default: $STATE_DIRECTORY, else
    /// /var/lib/pinnerd).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Seconds a measurement made by `plan` (no --matrix, none stored) may take.
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    pub measure_budget: f64,
    /// Never measure: without --matrix or a stored matrix, use the topology alone.
    #[arg(long)]
    pub no_measure: bool,
    /// Minimum idle share (percent) every CPU must show before `plan` measures; 0
    /// measures whatever the load.
    #[arg(long, value_name = "PCT", default_value_t = 75.0)]
    pub idle_threshold: f64,
}

/// `plan --count`; `plan --live` and `plan --pid` are dispatched beside it by the
/// command line's `run`, which this module does not know.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    if args.sched != super::place_flags::SchedFlags::default() {
        bail!("--sched-policy, --sched-priority and --nice are for plan --pid");
    }
    let count = args.count.context("--count is required")? as usize;
    let req = advice::count_request(
        count,
        args.policy,
        args.smt,
        args.exclude.clone().unwrap_or_default(),
    );
    let plan = advice::advise(&ground_spec(&args)?, &req, &args.place.shape())?;
    super::output::print_answer(args.json, || plan.json(), || plan.human())
}

/// Where `plan` (and `plan --pid`) find the topology and the matrix: `--sysfs`,
/// `--matrix`, `--state-dir`, and whether and how a matrix may be measured now.
pub fn ground_spec(args: &PlanArgs) -> anyhow::Result<GroundSpec> {
    let budget = super::limits::seconds(
        "--measure-budget",
        args.measure_budget,
        super::limits::MAX_BUDGET_SECS,
    )?;
    Ok(GroundSpec {
        sysfs: args.sysfs.clone(),
        matrix: args.matrix.clone(),
        state_dir: args.state_dir.clone(),
        measuring: Measuring::unless_no_measure(args.no_measure, budget, args.idle_threshold),
    })
}
