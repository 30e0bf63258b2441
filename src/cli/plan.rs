//! `pinnerd plan`: choose CPUs for a request (or, with `--live`, show what the rules
//! would do to the running system, changing nothing).
//!
//! Where the matrix comes from: `--matrix FILE`; else this machine's stored matrix
//! (the daemon's state directory) when its fingerprint matches; else a measurement
//! made now; else the sysfs topology alone. The output says which.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::place_flags::ShapeFlags;
use super::topology::ns;
use crate::cpuset::CpuSet;
use crate::devices;
use crate::domains::{self, Domains, Finding, Misfit};
use crate::fingerprint::Fingerprint;
use crate::matrix::store::MatrixStore;
use crate::matrix::LatencyMatrix;
use crate::measure::{self, MeasureConfig};
use crate::placement::{place, Cost, Placement, Policy, Request, SmtPolicy};
use crate::shape::{self, Facts, Shaped};
use crate::sysroot::SysRoot;
use crate::topology::Topology;

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
    /// Rule directories for --live (default: the settings' `rule-dirs`, /etc/pinnerd.d).
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// The daemon's settings file, for --live (housekeeping CPUs, rule directories); a
    /// missing file means the defaults.
    #[arg(long, value_name = "FILE", default_value = crate::settings::DEFAULT_SETTINGS_PATH)]
    pub config: PathBuf,
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
    /// Why measuring is off, when a command that plans through `plan` turned it off
    /// (`None`: the user's --no-measure).
    #[arg(skip)]
    pub measure_off_by: Option<String>,
}

/// The matrix stored in `dir` that fits this machine, as the daemon takes it
/// ([`MatrixStore::fitting`]: this machine's fingerprint, narrowed to its usable CPUs,
/// not used when it lacks one of their pairs), with its path; what stood in the way
/// goes to `warnings`. Nothing is created: a directory without a matrix gives `None`.
pub fn stored_matrix(
    dir: &Path,
    root: &SysRoot,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> Option<(PathBuf, LatencyMatrix)> {
    let path = MatrixStore::current_in(dir);
    if !path.exists() {
        return None;
    }
    let fp = Fingerprint::read(root).ok()?;
    let usable = topology.map(Topology::usable);
    match MatrixStore::open(dir).and_then(|s| s.fitting(&fp.hex, usable.as_ref())) {
        Ok(fit) => {
            if let Some(aside) = fit.set_aside {
                warnings.push(aside.to_string());
            }
            if let Some(m) = fit.matrix {
                return Some((path, m));
            }
            if !fit.missing.is_empty() {
                warnings.push(format!(
                    "the stored matrix lacks {} pair(s) of the usable CPUs (never measured here); not used",
                    fit.missing.len()
                ));
            }
        }
        Err(e) => warnings.push(format!("stored matrix unusable: {e}")),
    }
    None
}

/// The state directory the daemon uses.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .map(|v| {
            // systemd may list several, colon-separated; the first is ours.
            let s = v.to_string_lossy().into_owned();
            PathBuf::from(s.split(':').next().unwrap_or("/var/lib/pinnerd"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/lib/pinnerd"))
}

/// `plan --count`; `plan --live` is dispatched beside it (see `cli::run`), which this
/// module does not know.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let count = args.count.context("--count is required")? as usize;
    let plan = plan(&args, count)?;
    super::print_answer(args.json, || plan.json(), || plan.human())
}

/// Where the matrix came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    File(PathBuf),
    Stored(PathBuf),
    Measured(Duration),
    /// No matrix: the topology alone, with the reason.
    TopologyOnly(String),
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::File(p) => format!("matrix {}", p.display()),
            Source::Stored(p) => format!("stored matrix {}", p.display()),
            Source::Measured(d) => format!("matrix measured now ({:.1} s)", d.as_secs_f64()),
            Source::TopologyOnly(why) => format!("sysfs topology alone: {why}"),
        }
    }
}

/// Placement advice for one request, ready to print.
#[derive(Debug)]
pub struct Advice {
    pub source: Source,
    pub domains: Domains,
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    pub placement: Placement,
    /// What `--core-type`, `--prefer` and `--near` did; `None` when none was given.
    pub shaped: Option<Shaped>,
    /// The matrix is unstable: placed on the topology, no latency gain claimed.
    pub latency_off: Option<&'static str>,
}

/// What a plan stands on: the topology, the matrix and where it came from, and the
/// domains built from them. Built once by [`ground`]; [`place_on`] places any number of
/// requests on it (`pinnerd report` plans several).
#[derive(Debug)]
pub struct Ground {
    pub root: SysRoot,
    pub source: Source,
    pub topology: Option<Topology>,
    pub matrix: Option<LatencyMatrix>,
    /// How a matrix measured now was obtained (passes, disagreement); `None` otherwise.
    pub run: Option<measure::RunReport>,
    pub domains: Domains,
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    /// The CPUs a plan may use: the domains' CPUs less the isolated ones.
    pub available: CpuSet,
    /// The matrix is unstable (`domains::select`): the domains are the topology's and
    /// this line says so first.
    pub latency_off: Option<&'static str>,
}

/// Builds the domains from the arguments' matrix and topology and places the request.
pub fn plan(args: &PlanArgs, count: usize) -> anyhow::Result<Advice> {
    place_on(&ground(args)?, args, count)
}

/// The topology, the matrix (`--matrix`, else stored, else measured now) and the
/// domains for the arguments.
pub fn ground(args: &PlanArgs) -> anyhow::Result<Ground> {
    let measure_budget = super::seconds(
        "--measure-budget",
        args.measure_budget,
        super::MAX_BUDGET_SECS,
    )?
    .max(Duration::from_millis(100));
    let root = super::topology::resolve_roots(Some(&args.sysfs), None);
    let real_sysfs = args.sysfs == Path::new(crate::sysroot::LIVE_SYS);
    let mut warnings = Vec::new();
    let topology = match Topology::discover(&root) {
        Ok(t) => Some(t),
        Err(e) if args.matrix.is_some() && real_sysfs => {
            warnings.push(format!(
                "topology unavailable ({e}); using the matrix alone"
            ));
            None
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("reading the CPU topology under {}", args.sysfs.display())
            })
        }
    };
    let (source, matrix, run) = match &args.matrix {
        Some(path) => {
            let m = LatencyMatrix::load(path)?;
            (Source::File(path.clone()), Some(m), None)
        }
        None => this_machine_matrix(
            args,
            &root,
            topology.as_ref(),
            real_sysfs,
            measure_budget,
            &mut warnings,
        )?,
    };
    // A published matrix from another machine is planned on alone; on a captured
    // tree the matrix must fit it.
    let misfit = if real_sysfs && matches!(source, Source::File(_)) {
        Misfit::MatrixAlone
    } else {
        Misfit::Refuse
    };
    let selected = domains::select(matrix.as_ref(), topology.as_ref(), misfit)
        .with_context(|| format!("latency domains from the {}", source.describe()))?;
    warnings.extend(selected.warnings);
    let latency_off = selected.latency_off;
    let (domains, findings) = (selected.domains, selected.findings);
    if let Some(m) = &matrix {
        warnings.extend(m.warnings.iter().cloned());
    }
    let available: CpuSet = match &topology {
        Some(t) if domains.cpus().iter().all(|&c| t.online.contains(c)) => domains
            .cpus()
            .iter()
            .copied()
            .filter(|&c| !t.isolated.contains(c))
            .collect(),
        _ => domains.cpus().iter().copied().collect(),
    };
    Ok(Ground {
        root,
        source,
        topology,
        matrix,
        run,
        domains,
        findings,
        warnings,
        available,
        latency_off,
    })
}

/// Places `count` CPUs by the arguments' policy, SMT and shape flags on `ground`. A
/// one-off request, not the rules: no `Plan` is made (`plan --live` makes the daemon's,
/// through `plan::making`).
pub fn place_on(ground: &Ground, args: &PlanArgs, count: usize) -> anyhow::Result<Advice> {
    let mut warnings = ground.warnings.clone();
    let req = Request {
        count,
        policy: args.policy,
        smt: args.smt,
        exclude: args.exclude.clone().unwrap_or_default(),
        exclusive: false,
        cpus: None,
    };
    let shape = args.place.shape();
    let (placement, shaped) = if shape.is_empty() {
        (place(&ground.domains, &req, &ground.available)?, None)
    } else {
        let t = ground.topology.as_ref().context(
            "--core-type, --prefer and --near need the CPU topology, which could not be read",
        )?;
        let devices = devices::resolve_all(&ground.root, shape.near.as_deref());
        let (p, s) = shape::place_shaped(
            &ground.domains,
            &Facts::from_topology(t),
            &devices,
            &req,
            &shape,
            &ground.available,
        )?;
        warnings.extend(s.warnings.iter().cloned());
        (p, Some(s))
    };
    Ok(Advice {
        source: ground.source.clone(),
        domains: ground.domains.clone(),
        findings: ground.findings.clone(),
        warnings,
        placement,
        shaped,
        latency_off: ground.latency_off,
    })
}

/// This machine's matrix: stored (fingerprint matching), else measured now (sparse
/// where the daemon would measure sparsely), else none.
fn this_machine_matrix(
    args: &PlanArgs,
    root: &SysRoot,
    topology: Option<&Topology>,
    real_sysfs: bool,
    measure_budget: Duration,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(Source, Option<LatencyMatrix>, Option<measure::RunReport>)> {
    if !real_sysfs {
        return Ok((
            Source::TopologyOnly(format!(
                "no --matrix given for the tree {}, and only the running machine can be measured",
                args.sysfs.display()
            )),
            None,
            None,
        ));
    }
    let fingerprint = Fingerprint::read(root).ok();
    let dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    if let Some((path, m)) = stored_matrix(&dir, root, topology, warnings) {
        return Ok((Source::Stored(path), Some(m), None));
    }
    let why_not = if args.no_measure {
        Some(format!(
            "no stored matrix in {} and {}",
            dir.display(),
            args.measure_off_by.as_deref().unwrap_or("--no-measure")
        ))
    } else {
        None
    };
    if let (None, Some(t)) = (&why_not, topology) {
        let mut cfg = MeasureConfig::new(t.usable());
        cfg.budget = measure_budget;
        cfg.guard.min_idle = super::idle_share(args.idle_threshold)?;
        cfg.fingerprint = fingerprint.as_ref().map(|f| f.hex.clone());
        cfg.root = root.clone();
        // Sparse from the size where the daemon measures sparsely by default.
        cfg.mode = measure::Mode::default_for(cfg.cpus.len(), measure::SPARSE_FROM_CPUS);
        let started = std::time::Instant::now();
        match measure::run_detailed(&cfg, |_| {}) {
            Ok(m) => {
                return Ok((
                    Source::Measured(started.elapsed()),
                    Some(m.matrix),
                    Some(m.report),
                ))
            }
            Err(e) => {
                return Ok((
                    Source::TopologyOnly(format!(
                        "no stored matrix in {} and measuring failed: {e}",
                        dir.display()
                    )),
                    None,
                    None,
                ))
            }
        }
    }
    Ok((
        Source::TopologyOnly(why_not.unwrap_or_else(|| "no matrix".into())),
        None,
        None,
    ))
}

fn cost_json(c: &Cost) -> serde_json::Value {
    json!({
        "worst_latency_ns": c.worst_ns,
        "mean_latency_ns": c.mean_ns,
        "worst_level": c.worst_level,
    })
}

impl Advice {
    /// Where the matrix came from, in words.
    pub fn source_description(&self) -> String {
        self.source.describe()
    }

    /// The `--json` object.
    pub fn json(&self) -> serde_json::Value {
        let x = &self.placement.explanation;
        json!({
            "cpus": self.placement.cpus.iter().collect::<Vec<u32>>(),
            "cpu_list": self.placement.cpus.to_string(),
            "worst_latency_ns": x.cost.worst_ns,
            "mean_latency_ns": x.cost.mean_ns,
            "worst_level": x.cost.worst_level,
            "policy": x.policy,
            "smt": x.smt,
            "level": x.level,
            "level_latency_ns": x.level_latency_ns,
            "domains": x.domains.iter().map(|d| d.iter().collect::<Vec<u32>>()).collect::<Vec<_>>(),
            "autopilot": x.autopilot.as_ref().map(|(cpus, c)| {
                let mut v = cost_json(c);
                v["cpus"] = json!(cpus.iter().collect::<Vec<u32>>());
                v
            }),
            "notes": x.notes,
            "shaped_by": self.shaped.as_ref().map_or_else(Vec::new, |s| s.by.clone()),
            "source": self.source.describe(),
            "trust": x.trust,
            "findings": self.findings,
            "warnings": self.warnings,
            "latency_off": self.latency_off,
        })
    }

    /// The human explanation.
    pub fn human(&self) -> String {
        let x = &self.placement.explanation;
        let mut s = String::new();
        if let Some(line) = self.latency_off {
            let _ = writeln!(s, "{line}");
        }
        let _ = writeln!(
            s,
            "CPUs {}  ({} CPU(s), policy {}, smt {})",
            self.placement.cpus,
            self.placement.cpus.len(),
            x.policy,
            x.smt
        );
        let _ = writeln!(
            s,
            "  from:      {} (trusted: {:?})",
            self.source.describe(),
            x.trust
        );
        let doms: Vec<String> = x.domains.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(
            s,
            "  domain:    {} {} (typical {} inside)",
            x.level,
            doms.join(" | "),
            ns(x.level_latency_ns)
        );
        let _ = writeln!(
            s,
            "  cost:      worst {}, mean {} (farthest pair shares: {})",
            ns(x.cost.worst_ns),
            ns(x.cost.mean_ns),
            x.cost.worst_level
        );
        if let Some(shaped) = self.shaped.as_ref().filter(|sh| !sh.by.is_empty()) {
            let keys: Vec<String> = shaped
                .by
                .iter()
                .map(|b| format!("{} {} (CPUs {})", b.key, b.value, b.cpus))
                .collect();
            let _ = writeln!(s, "  shaped by: {}", keys.join(" → "));
        }
        if let Some((cpus, c)) = &x.autopilot {
            let ratio = match (c.worst_ns, x.cost.worst_ns) {
                // Figures of an unstable matrix are not the machine's: no gain from them.
                _ if self.latency_off.is_some() => String::new(),
                (Some(a), Some(p)) if p > 0.0 => format!(" — {:.1}x the plan's worst", a / p),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  autopilot: CPUs {cpus} would cost worst {}, mean {} (farthest pair shares: {}){ratio}",
                ns(c.worst_ns),
                ns(c.mean_ns),
                c.worst_level
            );
        }
        for n in &x.notes {
            let _ = writeln!(s, "  note:      {n}");
        }
        for f in &self.findings {
            let _ = writeln!(s, "  finding:   {f}");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning:   {w}");
        }
        s
    }
}
