//! The command line's grammar: `pinnerd` and its subcommands, each with the arguments
//! of the file that runs it (the man page and completions are drawn from it).

use clap::{Parser, Subcommand};

use super::{
    check, client, compare, daemon, export, fleet, measure, oneshot, plan, report, topology,
};

#[derive(Debug, Parser)]
#[command(
    name = "pinnerd",
    version,
    about = "Measures core-to-core latency and pins threads to the CPUs that suit them"
)]
pub struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the CPU topology read from sysfs (and latency domains with --matrix).
    Topology(topology::TopologyArgs),
    /// Measure the core-to-core latency matrix of this machine.
    Measure(measure::MeasureArgs),
    /// Choose CPUs for a request from the topology and the latency matrix.
    Plan(plan::PlanArgs),
    /// Ping-pong throughput on the planned pair vs the autopilot pair, worst pair, unpinned.
    Compare(compare::CompareArgs),
    /// Write the machine's map on one page (report.html) and its facts (report.json).
    Report(report::ReportArgs),
    /// Validate rule files or directories.
    Check(check::CheckArgs),
    /// Run the daemon.
    Daemon(daemon::DaemonArgs),
    /// Show the running daemon's status (over D-Bus).
    Status(client::StatusArgs),
    /// Ask the running daemon to re-measure the latency matrix.
    Remeasure(client::RemeasureArgs),
    /// Ask the running daemon to reload its rules.
    Reload(client::BusArgs),
    /// List the processes the daemon manages.
    Managed(client::BusArgs),
    /// Explain which rule placed a process, and why.
    Explain(client::ExplainArgs),
    /// Compare the latency matrices of two machines of one layout.
    Diff(fleet::DiffArgs),
    /// Compare many machines of one CPU model and find the outliers.
    Fleet(fleet::FleetArgs),
    /// Print the running daemon's metrics in the Prometheus text format.
    Metrics(client::BusArgs),
    /// Print what pinnerd knows in another engine's format (Kubernetes NFD, hwloc).
    Export(export::ExportArgs),
    /// Run a command on CPUs chosen like a rule's (asks the daemon when it runs).
    Run(oneshot::RunArgs),
    /// Pin a running process's threads through the daemon, without a rule file.
    Pin(oneshot::PinArgs),
    /// Give a process pinned by `pin` or `run` its CPUs from before back.
    Release(oneshot::ReleaseArgs),
}
