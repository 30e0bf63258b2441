//! The command line: one file per subcommand, each with its `clap` arguments and a
//! `run` function. Commands print for humans by default and JSON with `--json`.
//!
//! Must not touch: engine logic. Commands call into the library modules and format.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `print!` for commands: a closed pipe (`pinnerd status | head -1`) or a full disk
/// (`> /dev/full`) is an error the command returns ([`StdoutError`]), never a panic.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))?
    };
}

/// `println!` for commands, as [`out!`].
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))?
    };
    ($($arg:tt)*) => {{
        $crate::cli::write_stdout(format_args!($($arg)*))?;
        $crate::cli::write_stdout(format_args!("\n"))?
    }};
}

/// Standard output could not be written: closed (a pipe whose reader left) or full.
#[derive(Debug, thiserror::Error)]
/// (The I/O error is in the message, not also a source: said once.)
#[error("writing to standard output: {0}")]
pub struct StdoutError(pub std::io::Error);

/// Writes `args` to standard output and flushes it, so that a closed or full output is
/// found here, as an error, and not at exit.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// Prints a command's answer whole: `as_json()` pretty-printed with `--json`, else
/// `human()`. A closed pipe (`| head`) or a full disk is an error, not a panic.
pub fn print_answer(
    json: bool,
    as_json: impl FnOnce() -> serde_json::Value,
    human: impl FnOnce() -> String,
) -> anyhow::Result<ExitCode> {
    let text = if json {
        serde_json::to_string_pretty(&as_json())? + "\n"
    } else {
        human()
    };
    write_stdout(format_args!("{text}"))?;
    Ok(ExitCode::SUCCESS)
}

/// Whether to colour what goes to a stream: only a terminal, and never with `NO_COLOR`
/// set (<https://no-color.org>).
pub fn colour(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub mod check;
pub mod client;
pub mod compare;
pub mod daemon;
pub mod docs;
pub mod export;
pub mod fleet;
pub mod live;
pub mod measure;
pub mod oneshot;
pub mod partition;
pub mod place_flags;
pub mod plan;
pub mod plan_pid;
pub mod report;
pub mod topology;

/// Longest `--budget` / `--measure-budget` accepted: one day.
pub const MAX_BUDGET_SECS: f64 = 86_400.0;
/// Longest `--idle-wait` accepted: one hour.
pub const MAX_IDLE_WAIT_SECS: f64 = 3_600.0;

/// A command-line number of seconds as a [`std::time::Duration`]: finite, from 0 to
/// `max`. Anything else (NaN, `inf`, `1e20`, negative) is an error naming the flag,
/// never a panic.
pub fn seconds(flag: &str, v: f64, max: f64) -> anyhow::Result<std::time::Duration> {
    if !v.is_finite() || !(0.0..=max).contains(&v) {
        anyhow::bail!("{flag} must be a number of seconds from 0 to {max}, got {v}");
    }
    std::time::Duration::try_from_secs_f64(v)
        .map_err(|e| anyhow::anyhow!("{flag}: {v} seconds: {e}"))
}

/// `--idle-threshold`: a percentage from 0 to 100, as the guard's minimum idle share.
pub fn idle_share(v: f64) -> anyhow::Result<f64> {
    Ok(crate::measure::guard::idle_share(v)?)
}

/// Exit code for an invalid configuration (rules or settings), distinct from other
/// failures so a unit can use `RestartPreventExitStatus=`.
pub const EXIT_CONFIG: u8 = 3;

/// An error that means "the configuration is invalid"; maps to [`EXIT_CONFIG`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigInvalid(pub String);

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

/// Logging to stderr; `RUST_LOG` overrides the level chosen by `-v`.
pub fn init_logging(cli: &Cli) {
    if matches!(cli.command, Command::Daemon(_)) {
        // The daemon sets up its own logging (journald when run by systemd).
        return;
    }
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Topology(args) => topology::run(args),
        Command::Measure(args) => measure::run(args),
        // `--live` and `--pid` plan on top of `plan` (its stored matrix, its request):
        // they use `plan`, and `plan` knows neither.
        Command::Plan(args) => match args.pid {
            _ if args.live => live::run(&live::LiveArgs {
                rules: args.rules,
                config: args.config,
                sysfs: args.sysfs,
                matrix: args.matrix,
                state_dir: args.state_dir,
                json: args.json,
            }),
            Some(pid) => plan_pid::run(&args, pid),
            None => plan::run(args),
        },
        Command::Compare(args) => compare::run(args),
        Command::Report(args) => report::run(args),
        Command::Check(args) => check::run(args),
        Command::Daemon(args) => daemon::run(args, cli.verbose),
        Command::Status(args) => client::status(args),
        Command::Remeasure(args) => client::remeasure(args),
        Command::Reload(args) => client::reload(args),
        Command::Managed(args) => client::managed(args),
        Command::Explain(args) => client::explain(args),
        Command::Diff(args) => fleet::run_diff(args),
        Command::Fleet(args) => fleet::run_fleet(args),
        Command::Export(args) => export::run(args),
        Command::Metrics(args) => client::metrics(args),
        Command::Run(args) => oneshot::run(args),
        Command::Pin(args) => oneshot::pin(args),
        Command::Release(args) => oneshot::release(args),
    }
}

/// `err` and its causes as one line, `outer: cause: root`, each cause said once.
///
/// Many errors put their source in their own message as well as exposing it as
/// `source()` (`"{path}: {source}"`), so the plain `{:#}` chain would print such a cause
/// twice; a cause whose text already ends the line so far is left out.
pub fn describe_error(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// The process exit code for an error that ended a command.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<ConfigInvalid>()) {
        EXIT_CONFIG
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::describe_error;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Read {
        path: &'static str,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_in_the_message_is_said_once_and_others_are_kept() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let err = anyhow::Error::new(Read {
            path: "m.json",
            source: io,
        })
        .context("loading");
        assert_eq!(
            describe_error(&err),
            "loading: m.json: No such file or directory (os error 2)"
        );
        let plain = anyhow::anyhow!("root").context("middle").context("outer");
        assert_eq!(describe_error(&plain), "outer: middle: root");
    }
}
