//! The command line: one file per subcommand, each with its `clap` arguments and a
//! `run` function. Commands print for humans by default and JSON with `--json`.
//!
//! Must not touch: engine logic. Commands call into the library modules and format.

use std::process::ExitCode;

/// `print!` for commands: a closed pipe (`pinnerd status | head -1`) or a full disk
/// (`> /dev/full`) is an error the command returns ([`output::StdoutError`]), never a
/// panic.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!($($arg)*))?
    };
}

/// `println!` for commands, as [`out!`].
macro_rules! outln {
    () => {
        $crate::cli::output::write_stdout(format_args!("\n"))?
    };
    ($($arg:tt)*) => {{
        $crate::cli::output::write_stdout(format_args!($($arg)*))?;
        $crate::cli::output::write_stdout(format_args!("\n"))?
    }};
}

pub mod check;
pub mod client;
pub mod command;
pub mod compare;
pub mod daemon;
pub mod docs;
pub mod exit;
pub mod export;
pub mod fleet;
pub mod limits;
pub mod live;
pub mod live_containers;
pub mod measure;
pub mod oneshot;
pub mod output;
pub mod partition;
pub mod place_flags;
pub mod plan;
pub mod plan_pid;
pub mod report;
pub mod topology;

pub use command::{Cli, Command};
pub use exit::{exit_code_for, ConfigInvalid, EXIT_CONFIG};
pub use limits::{idle_share, seconds, MAX_BUDGET_SECS, MAX_IDLE_WAIT_SECS};
pub use output::{colour, describe_error, print_answer, write_stdout, StdoutError};

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
            _ if args.live && args.sched != place_flags::SchedFlags::default() => {
                anyhow::bail!("--sched-policy, --sched-priority and --nice are for plan --pid")
            }
            _ if args.live => live::run(&live::LiveArgs {
                rules: args.rules,
                config: args.config,
                sysfs: args.sysfs,
                matrix: args.matrix,
                state_dir: args.state_dir,
                json: args.json,
                bus: args.bus.bus,
                container_files: args.container_files,
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
