//! Commands for people, beside the rule files: `pinnerd run [PLACEMENT] -- CMD` (choose
//! CPUs, set the affinity, exec), `pinnerd pin PID [PLACEMENT]` and
//! `pinnerd release PID` (the daemon's `PinProcessWith` and `ReleaseProcess`).
//!
//! ```text
//!   PlaceFlags ─► PlaceSpec ─┬─► daemon: PinProcessWith(own pid)  registered, CPUs no exclusive rule holds
//!                            │     refused (not root, no polkit) ─► PlanWith: CPUs only, not registered
//!                            └─► no daemon: stored matrix, else sysfs (what `plan` does)
//!   CPUs ─► sched_setaffinity(self), read back ─► exec CMD (every thread inherits them)
//! ```
//!
//! Must not touch: choosing CPUs itself. The daemon chooses, or `plan`'s own planner.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

use super::client::{block_on, proxy, BusArgs, Pinnerd1Proxy};
use super::exit::ConfigInvalid;
use super::place_flags::{describe, PlaceFlags};
use crate::advice::{self, GroundSpec, Measuring};
use crate::affinity::{own_tid, AffinityOps, SystemOps};
use crate::api::PlaceSpec;
use crate::cpuset::CpuSet;
use crate::dbus::{placement_dict, BusTarget};
use crate::memory::policy::{self, RunMemory};
use crate::rules::{load_dirs, CpuTarget, LoadPolicy, PlacementRequest};
use crate::settings::Settings;
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// Exit status when the command cannot be found (as `env` and shells use).
pub const EXIT_NOT_FOUND: u8 = 127;
/// Exit status when the command was found but could not be run.
pub const EXIT_CANNOT_RUN: u8 = 126;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub place: PlaceFlags,
    #[command(flatten)]
    pub sched: super::place_flags::SchedFlags,
    #[command(flatten)]
    pub bus: BusArgs,
    /// The command's memory: bind (only the NUMA nodes of the chosen CPUs), preferred
    /// (those nodes first) or leave (the kernel's default: where the allocating CPU
    /// is). Set before exec, as numactl --membind/--preferred do.
    #[arg(long, value_name = "POLICY", default_value = "leave")]
    pub memory: crate::memory::policy::RunMemory,
    /// Show the CPUs that would be chosen, and who chose them; run nothing.
    #[arg(long)]
    pub print: bool,
    /// Never ask the daemon: choose from this machine's stored matrix, else its sysfs
    /// topology.
    #[arg(long)]
    pub local: bool,
    /// Rule directories for `--rule` without the daemon (default: the settings'
    /// `rule-dirs`, /etc/pinnerd.d).
    #[arg(long = "rules", value_name = "DIR")]
    pub rules: Vec<PathBuf>,
    /// The daemon's settings file, for a choice made without the daemon (housekeeping
    /// CPUs, rule directories); a missing file means the defaults.
    #[arg(long, value_name = "FILE", default_value = crate::settings::DEFAULT_SETTINGS_PATH)]
    pub config: PathBuf,
    /// Where the daemon stores this machine's matrix (default: $STATE_DIRECTORY, else
    /// /var/lib/pinnerd).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "print")]
    pub command: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
pub struct PinArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Process to pin (all its threads, and those it makes later).
    pub pid: u32,
    #[command(flatten)]
    pub place: PlaceFlags,
    /// The class of every thread while pinned, given back on release; a real-time
    /// policy or a negative nice value only for a caller allowed to pin others.
    #[command(flatten)]
    pub sched: super::place_flags::SchedFlags,
    /// follow: move its memory to the NUMA nodes of its CPUs (off the daemon's loop,
    /// no more often than memory.follow-interval); leave: do not move it.
    #[arg(long, value_name = "WHAT", default_value = "leave")]
    pub memory: PinMemory,
}

/// `pin --memory`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PinMemory {
    /// Move its memory to the nodes of its CPUs.
    Follow,
    /// Do not move its memory.
    #[default]
    Leave,
}

#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Process pinned by `pinnerd pin`, `pinnerd run` or `PinProcess`.
    pub pid: u32,
}

/// CPUs for `run`, and who chose them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub cpus: CpuSet,
    pub by: ChosenBy,
    /// What the reader should know (a refusal, the local planner's warnings).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChosenBy {
    /// The daemon pinned this process and keeps it as a run-time pin.
    DaemonRegistered,
    /// The daemon chose (among the CPUs no exclusive rule holds) but did not pin.
    Daemon,
    /// Chosen here, without the daemon; the text says from what and why.
    Local(String),
}

/// What asking the daemon gave.
enum Asked {
    Choice(Choice),
    /// No daemon to ask (not on the bus, or the bus is not there).
    Absent(String),
}

/// `pinnerd run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let spec = args.place.spec()?;
    let sched = args.sched.sched()?;
    let choice = choose(&args, &spec)?;
    if args.print {
        out!("{}", describe_choice(&choice, &spec, &args.bus.bus));
        return Ok(ExitCode::SUCCESS);
    }
    for n in &choice.notes {
        eprintln!("pinnerd: {n}");
    }
    set_own_cpus(&choice.cpus)?;
    set_own_memory(args.memory, &choice.cpus)?;
    if let Some(sched) = sched {
        // The caller's own rights, as chrt's: the kernel refuses what it may not give
        // itself. The command and every thread it starts inherit the class.
        let attr = crate::affinity::sched::SchedAttr {
            flags: 0,
            ..sched.attr()
        };
        crate::affinity::sched::set(own_tid(), &attr).with_context(|| {
            format!(
                "--sched-policy/--nice: cannot set the scheduling class {}",
                sched.words()
            )
        })?;
    }
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given (pinnerd run [PLACEMENT] -- CMD [ARGS…])")?;
    // Only returns when the exec failed.
    let err = std::process::Command::new(program).args(rest).exec();
    eprintln!("pinnerd: cannot run {}: {err}", program.to_string_lossy());
    Ok(ExitCode::from(match err.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_RUN,
    }))
}

/// `run --memory`: this process's memory policy on the nodes of `cpus`, inherited by
/// the command it execs.
fn set_own_memory(what: RunMemory, cpus: &CpuSet) -> anyhow::Result<()> {
    if what == RunMemory::Leave {
        return Ok(());
    }
    let topology = Topology::discover(&SysRoot::default()).context("reading the NUMA nodes")?;
    let nodes = policy::nodes_of(&topology, cpus);
    if let Some(note) = policy::set_own(what, &nodes).context("--memory")? {
        eprintln!("pinnerd: {note}");
    }
    let (list, how) = (
        policy::node_list(&nodes),
        match what {
            RunMemory::Bind => "bound to",
            RunMemory::Preferred => "preferring",
            RunMemory::Leave => "left alone, not",
        },
    );
    tracing::info!(nodes = %list, memory = how, "memory policy set: {how} nodes {list}");
    Ok(())
}

/// The CPUs for `run`: the daemon's when it runs (pinning this process with them unless
/// only printing), else chosen here.
pub fn choose(args: &RunArgs, spec: &PlaceSpec) -> anyhow::Result<Choice> {
    let why_local = if args.local {
        "--local".to_string()
    } else {
        match block_on(ask_daemon(&args.bus.bus, spec, !args.print))? {
            Asked::Choice(c) => return Ok(c),
            Asked::Absent(why) => {
                tracing::info!(why, "no daemon to ask ({why}): choosing here");
                format!("no daemon on {} ({why})", bus_words(&args.bus.bus))
            }
        }
    };
    local_choice(args, spec, why_local)
}

/// Asks the daemon on `bus`: `PinProcessWith` on this process when `register`, else (or
/// when the daemon refuses this caller the pin) `PlanWith`.
async fn ask_daemon(bus: &BusTarget, spec: &PlaceSpec, register: bool) -> anyhow::Result<Asked> {
    let p = match proxy(bus).await {
        Ok(p) => p,
        Err(e) => return Ok(Asked::Absent(e.root_cause().to_string())),
    };
    let mut notes = Vec::new();
    if register {
        match p
            .pin_process_with(std::process::id(), placement_dict(spec))
            .await
        {
            Ok(cpus) => {
                return Ok(Asked::Choice(Choice {
                    cpus: parse_cpus(&cpus)?,
                    by: ChosenBy::DaemonRegistered,
                    notes,
                }))
            }
            Err(e) => match classify(&e) {
                Failure::Absent => return Ok(Asked::Absent(e.to_string())),
                Failure::Denied => notes.push(format!(
                    "the daemon chose the CPUs but did not pin this process (it stays unregistered): {}",
                    message(&e)
                )),
                Failure::Other => bail!("PinProcessWith: {}", message(&e)),
            },
        }
    }
    match plan_with(&p, spec).await {
        Ok(cpus) => Ok(Asked::Choice(Choice {
            cpus,
            by: ChosenBy::Daemon,
            notes,
        })),
        Err(e) => match classify(&e) {
            Failure::Absent => Ok(Asked::Absent(e.to_string())),
            _ => bail!("PlanWith: {}", message(&e)),
        },
    }
}

async fn plan_with(p: &Pinnerd1Proxy<'_>, spec: &PlaceSpec) -> zbus::Result<CpuSet> {
    let text = p.plan_with(placement_dict(spec)).await?;
    text.parse()
        .map_err(|e| zbus::Error::Failure(format!("the daemon answered CPUs {text:?}: {e}")))
}

fn parse_cpus(text: &str) -> anyhow::Result<CpuSet> {
    text.parse()
        .with_context(|| format!("the daemon answered CPUs {text:?}"))
}

/// How a call to the daemon failed.
enum Failure {
    /// No daemon (or one that does not know the method): choose here.
    Absent,
    /// The caller may not pin: choose, but do not register.
    Denied,
    Other,
}

fn classify(e: &zbus::Error) -> Failure {
    use zbus::fdo::Error as F;
    match e {
        zbus::Error::FDO(f) => match **f {
            F::ServiceUnknown(_)
            | F::NameHasNoOwner(_)
            | F::UnknownMethod(_)
            | F::UnknownObject(_)
            | F::UnknownInterface(_) => Failure::Absent,
            F::AccessDenied(_) => Failure::Denied,
            _ => Failure::Other,
        },
        zbus::Error::MethodError(name, _, _)
            if name.as_str() == "org.pinnerd.Pinnerd1.Error.NotPermitted" =>
        {
            Failure::Denied
        }
        zbus::Error::InputOutput(_) => Failure::Absent,
        _ => Failure::Other,
    }
}

/// The daemon's own message of an error reply, without the error name.
fn message(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(_, Some(m), _) => m.clone(),
        zbus::Error::FDO(f) => f.to_string(),
        other => other.to_string(),
    }
}

/// Chosen here, as `pinnerd plan` does without `--matrix`: the stored matrix when it is
/// this machine's, else the sysfs topology (never a measurement), among the usable CPUs
/// this process may run on, less the settings' housekeeping CPUs.
fn local_choice(args: &RunArgs, spec: &PlaceSpec, why: String) -> anyhow::Result<Choice> {
    let policy = LoadPolicy::for_current_process();
    let settings = Settings::load_or_default(&args.config, &policy)
        .map_err(|e| ConfigInvalid(e.to_string()))?;
    let request = match spec {
        PlaceSpec::Request(r) => r.clone(),
        PlaceSpec::Rule(name) => local_rule(args, &settings, &policy, name)?,
    };
    let mut notes = Vec::new();
    let count = match &request.target {
        CpuTarget::Cpus(c) => {
            return Ok(Choice {
                cpus: c.clone(),
                by: ChosenBy::Local(format!("{why}: the CPUs given")),
                notes,
            })
        }
        CpuTarget::Count(n) => *n as usize,
    };
    let root = SysRoot::default();
    let topology = Topology::discover(&root).context("reading the CPU topology")?;
    let usable = topology.usable();
    let own = SystemOps::new(root)
        .get_affinity(own_tid())
        .context("reading this process's CPUs")?;
    if usable.intersection(&own) != usable {
        notes.push(format!(
            "chosen among CPUs {}: this process may not run on the others",
            usable.intersection(&own)
        ));
    }
    let pool = advice::request_pool(
        &usable,
        &[Some(&own), request.within.as_ref()],
        &[Some(&settings.placement.housekeeping_cpus)],
    );
    let exclude = usable.difference(&pool);
    let ground = GroundSpec {
        sysfs: PathBuf::from(crate::sysroot::LIVE_SYS),
        matrix: None,
        state_dir: args.state_dir.clone(),
        measuring: Measuring::Off(
            "`run` never measures (run the daemon, or `pinnerd measure`, to store one)".into(),
        ),
    };
    let req = advice::count_request(count, request.policy, request.smt, exclude);
    let advice = advice::advise(&ground, &req, &request.shape)
        .with_context(|| format!("choosing {}", describe(spec)))?;
    notes.extend(advice.warnings.iter().cloned());
    Ok(Choice {
        cpus: advice.placement.cpus.clone(),
        by: ChosenBy::Local(format!("{why}: {}", advice.source_description())),
        notes,
    })
}

/// The `[rule.place]` of rule `name`, from the rule directories.
fn local_rule(
    args: &RunArgs,
    settings: &Settings,
    policy: &LoadPolicy,
    name: &str,
) -> anyhow::Result<PlacementRequest> {
    let dirs = settings.rule_dirs_or(&args.rules);
    let report = load_dirs(&dirs, policy);
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let Some(rule) = report.rules.get(name) else {
        let mut msg = format!("no rule named {name:?} in {}", shown.join(", "));
        if !report.errors.is_empty() {
            msg.push_str(&format!(
                " ({} problem(s) in the rule files; see pinnerd check)",
                report.errors.len()
            ));
        }
        bail!(msg);
    };
    let mut request = rule.place_request()?;
    request.exclusive = false;
    Ok(request)
}

/// Sets this (single-threaded) process's CPUs before exec; says so when a cpuset
/// narrows them.
fn set_own_cpus(cpus: &CpuSet) -> anyhow::Result<()> {
    let ops = SystemOps::default();
    let tid = own_tid();
    ops.set_affinity(tid, cpus)
        .with_context(|| format!("cannot run on CPUs {cpus}"))?;
    let got = ops
        .get_affinity(tid)
        .context("reading this process's CPUs back")?;
    if &got != cpus {
        eprintln!("pinnerd: the kernel narrowed CPUs {cpus} to {got} (a cpuset)");
    }
    Ok(())
}

/// `--print`: the CPUs, the request and who chose them.
pub fn describe_choice(choice: &Choice, spec: &PlaceSpec, bus: &BusTarget) -> String {
    let mut s = format!("CPUs {}  for {}\n", choice.cpus, describe(spec));
    let by = match &choice.by {
        ChosenBy::DaemonRegistered => format!(
            "the daemon on {}, which keeps the process as a run-time pin",
            bus_words(bus)
        ),
        ChosenBy::Daemon => format!(
            "the daemon on {}, among the CPUs no exclusive rule holds",
            bus_words(bus)
        ),
        ChosenBy::Local(why) => format!("pinnerd here: {why}"),
    };
    s.push_str(&format!("  chosen by: {by}\n"));
    for n in &choice.notes {
        s.push_str(&format!("  note:      {n}\n"));
    }
    s
}

/// `the system bus`, `the session bus`, `the bus at unix:path=…`.
fn bus_words(bus: &BusTarget) -> String {
    match bus {
        BusTarget::Address(a) => format!("the bus at {a}"),
        other => format!("the {other} bus"),
    }
}

/// `pinnerd pin PID [PLACEMENT]`.
pub fn pin(args: PinArgs) -> anyhow::Result<ExitCode> {
    let spec = args.place.spec()?;
    let sched = args.sched.sched()?;
    block_on(async {
        let p = proxy(&args.bus.bus).await?;
        let mut dict = crate::dbus::placement_dict_with(&spec, args.memory == PinMemory::Follow);
        if let Some(s) = sched {
            dict.insert("sched-policy", zbus::Variant::from(s.policy.to_string()));
            if s.policy.is_realtime() {
                dict.insert("sched-priority", zbus::Variant::from(i64::from(s.priority)));
            } else if s.nice != 0 {
                dict.insert("nice", zbus::Variant::from(i64::from(s.nice)));
            }
        }
        let cpus = p
            .pin_process_with(args.pid, dict)
            .await
            .map_err(|e| anyhow::anyhow!(message(&e)))
            .context("PinProcessWith")?;
        outln!(
            "pid {}: pinned at run time to CPUs {cpus} ({})",
            args.pid,
            describe(&spec)
        );
        if let Ok(text) = p.explain(args.pid).await {
            outln!("{text}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `pinnerd release PID`.
pub fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus.bus).await?;
        p.release_process(args.pid)
            .await
            .map_err(|e| anyhow::anyhow!(message(&e)))
            .context("ReleaseProcess")?;
        outln!(
            "pid {}: released; its threads have the CPUs they had before the pin back",
            args.pid
        );
        Ok(ExitCode::SUCCESS)
    })
}
