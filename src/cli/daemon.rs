//! `pinnerd daemon`: argument parsing, logging (journald under systemd, else stderr) and
//! the mapping of startup failures to exit codes. The daemon itself is `crate::daemon`.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::daemon::state::Config;
use crate::daemon::{DaemonError, Options};
use crate::dbus::BusTarget;
use crate::rules::LoadPolicy;
use crate::settings::{Settings, DEFAULT_SETTINGS_PATH};
use crate::sysroot::SysRoot;

use super::exit::ConfigInvalid;

/// The state directory when neither `--state-dir` nor `$STATE_DIRECTORY` says.
pub const DEFAULT_STATE: &str = "/var/lib/pinnerd";
/// The runtime directory when neither `--runtime-dir` nor `$RUNTIME_DIRECTORY` says.
pub const DEFAULT_RUNTIME: &str = "/run/pinnerd";

#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Daemon settings file (measurement interval, budget, rescan interval…); a missing
    /// file means the defaults.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_SETTINGS_PATH)]
    pub config: PathBuf,
    /// Rule directory; repeat for several. Default: the settings' `rule-dirs`
    /// (/etc/pinnerd.d).
    #[arg(long = "rules", value_name = "DIR")]
    pub rules: Vec<PathBuf>,
    /// Where the matrix and its history live. Default: $STATE_DIRECTORY, else
    /// /var/lib/pinnerd.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where the masks to restore after a crash live. Default: $RUNTIME_DIRECTORY, else
    /// /run/pinnerd.
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// `system`, `session`, or a D-Bus address such as `unix:path=/run/bus`.
    #[arg(long, value_name = "BUS", default_value = "system")]
    pub bus: BusTarget,
    /// For tests and benchmarks: read the CPUs, topology and fingerprint from the
    /// machine directory DIR (`sys/` and `proc/`, as `plan --sysfs` takes it; a
    /// generated or captured tree) instead of this machine's, and only observe: no
    /// process is pinned, no unit held, no cgroup, sysfs or IRQ file written, nothing
    /// measured. The stored matrix is the one in the state directory with DIR's
    /// fingerprint. Root only.
    #[arg(long, value_name = "DIR")]
    pub machine: Option<PathBuf>,
}

/// `--machine` given by someone other than root.
#[derive(Debug, thiserror::Error)]
#[error("--machine is for root only (tests and benchmarks): it makes the daemon answer for another machine's CPUs")]
pub struct MachineNotRoot;

/// systemd may list several directories separated by `:`; the first is ours.
fn dir_from_env(var: &str) -> Option<PathBuf> {
    let v: OsString = std::env::var_os(var)?;
    let s = v.to_string_lossy();
    s.split(':').find(|p| !p.is_empty()).map(PathBuf::from)
}

/// journald when systemd runs us (it sets `$JOURNAL_STREAM` and `$INVOCATION_ID`),
/// otherwise stderr. `RUST_LOG` overrides the level.
fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let under_systemd =
        std::env::var_os("JOURNAL_STREAM").is_some() || std::env::var_os("INVOCATION_ID").is_some();
    if under_systemd {
        if let Ok(journald) = tracing_journald::layer() {
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(
                    journald
                        .with_syslog_identifier("pinnerd".into())
                        .with_field_prefix(Some("PINNERD".into())),
                )
                .try_init();
            return;
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(super::output::colour(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn run(args: DaemonArgs, verbose: u8) -> anyhow::Result<ExitCode> {
    init_logging(verbose);
    let settings = Settings::load_or_default(&args.config, &LoadPolicy::for_current_process())
        .map_err(|e| ConfigInvalid(e.to_string()))?;
    let rule_dirs = (!args.rules.is_empty()).then_some(args.rules);
    let state_dir = args
        .state_dir
        .or_else(|| dir_from_env("STATE_DIRECTORY"))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE));
    let runtime_dir = args
        .runtime_dir
        .or_else(|| dir_from_env("RUNTIME_DIRECTORY"))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUNTIME));
    if args.machine.is_some() && !nix::unistd::geteuid().is_root() {
        return Err(MachineNotRoot.into());
    }
    let sysroot = match &args.machine {
        Some(dir) => {
            let root = SysRoot::machine(dir);
            let cpus = root.sys_path("devices/system/cpu");
            if !cpus.is_dir() {
                anyhow::bail!(
                    "--machine {}: no {} (a machine directory holds sys/ and proc/)",
                    dir.display(),
                    cpus.display()
                );
            }
            root
        }
        None => SysRoot::default(),
    };
    let opts = Options {
        config: Config {
            settings: args.config,
            rule_dirs,
            state_dir,
            runtime_dir,
            sysroot,
            observe_only: args.machine.is_some(),
        },
        settings,
        bus: args.bus,
    };
    match crate::daemon::run(opts) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(DaemonError::Config(e)) => Err(ConfigInvalid(e.to_string()).into()),
        Err(e) => Err(e).context("pinnerd daemon"),
    }
}
