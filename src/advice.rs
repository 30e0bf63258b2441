//! One-off requests for K CPUs on this machine (or a captured one), as `plan`,
//! `plan --pid`, `report`, `compare` and `run` (without the daemon) ask them: the
//! ground a request stands on, made once, and any number of requests placed on it.
//!
//! ```text
//!   GroundSpec ─► ground ─► Ground (topology, matrix and where it came from, domains,
//!                              │     the CPUs a request may use)
//!   placement::Request + Shape ┴► place_on ─► Advice (CPUs, why; --json and words)
//! ```
//!
//! Where the matrix comes from: the given file; else this machine's stored matrix (the
//! daemon's state directory) when it fits, taken as the daemon takes it
//! ([`MatrixStore::fitting`]); else a measurement made now, when allowed; else the
//! sysfs topology alone. The advice says which.
//!
//! Owns: that choice of matrix for one-off requests. Must not touch: the rules' plan
//! (`plan::making`, which the daemon and `plan --live` make), the command line's
//! arguments (each command turns its flags into a [`GroundSpec`] and a request).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::devices;
use crate::domains::{self, Domains, Finding, Misfit, Trust};
use crate::fingerprint::{Fingerprint, FingerprintError};
use crate::matrix::store::{Fitting, MatrixStore, StoreError};
use crate::matrix::LatencyMatrix;
use crate::measure::{self, MeasureConfig};
use crate::placement::{place, Cost, Placement, Policy, Request, Shape, SmtPolicy};
use crate::shape::{self, Facts, Shaped};
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// Where a one-off request finds its topology and matrix.
#[derive(Debug, Clone)]
pub struct GroundSpec {
    /// The sysfs tree (or captured machine) to read the topology from.
    pub sysfs: PathBuf,
    /// A matrix file to plan on; `None`: this machine's.
    pub matrix: Option<PathBuf>,
    /// Where the daemon stores this machine's matrix; `None`: [`default_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// Whether a matrix may be measured now when none is given or stored.
    pub measuring: Measuring,
}

/// Whether a one-off request may measure this machine's matrix.
#[derive(Debug, Clone, PartialEq)]
pub enum Measuring {
    /// Within `budget` (at least 0.1 s), when every CPU is at least `min_idle_pct`
    /// percent idle (checked when a measurement is about to be made).
    Allowed { budget: Duration, min_idle_pct: f64 },
    /// Never; the words say who turned it off (`--no-measure`, or the command).
    Off(String),
}

impl Measuring {
    /// What `--no-measure` and the measurement flags of a command ask for.
    pub fn unless_no_measure(no_measure: bool, budget: Duration, min_idle_pct: f64) -> Measuring {
        match no_measure {
            true => Measuring::Off("--no-measure".into()),
            false => Measuring::Allowed {
                budget,
                min_idle_pct,
            },
        }
    }
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
    /// In words: `matrix FILE`, `stored matrix FILE`, `matrix measured now (1.2 s)`.
    pub fn describe(&self) -> String {
        match self {
            Source::File(p) => format!("matrix {}", p.display()),
            Source::Stored(p) => format!("stored matrix {}", p.display()),
            Source::Measured(d) => format!("matrix measured now ({:.1} s)", d.as_secs_f64()),
            Source::TopologyOnly(why) => format!("sysfs topology alone: {why}"),
        }
    }
}

/// What a request stands on: the topology, the matrix and where it came from, and the
/// domains built from them. Made once by [`ground`]; [`place_on`] places any number of
/// requests on it (`pinnerd report` places several).
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
    /// The CPUs a request may use: the domains' CPUs less the isolated ones.
    pub available: CpuSet,
    /// The matrix is unstable (`domains::select`): the domains are the topology's and
    /// this line says so first.
    pub latency_off: Option<&'static str>,
}

/// Placement advice for one request, ready to print.
#[derive(Debug)]
pub struct Advice {
    pub source: Source,
    pub domains: Domains,
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    pub placement: Placement,
    /// What `core-type`, `prefer` and `near` did; `None` when none was asked.
    pub shaped: Option<Shaped>,
    /// The matrix is unstable: placed on the topology, no latency gain claimed.
    pub latency_off: Option<&'static str>,
}

/// The state directory the daemon uses: the first of `$STATE_DIRECTORY`, else
/// `/var/lib/pinnerd`.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .map(|v| {
            // systemd may list several, colon-separated; the first is ours.
            let s = v.to_string_lossy().into_owned();
            PathBuf::from(s.split(':').next().unwrap_or("/var/lib/pinnerd"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/lib/pinnerd"))
}

/// This machine's stored matrix as the store answered for it.
#[derive(Debug)]
pub struct Stored {
    /// The current matrix file of the store.
    pub path: PathBuf,
    /// This machine's fingerprint, which the stored matrix must carry.
    pub fingerprint: String,
    /// [`MatrixStore::fitting`]'s answer: the matrix narrowed to the usable CPUs, the
    /// pairs it lacks, a file set aside; or why the store could not be read.
    pub fit: Result<Fitting, StoreError>,
}

/// The matrix stored in `dir` for the machine at `root`, taken as the daemon takes it
/// ([`MatrixStore::fitting`]: this machine's fingerprint, narrowed to `usable`). `None`
/// when `dir` holds no matrix: then nothing is created. The callers say what they make
/// of a set-aside file or missing pairs, each in its own words.
pub fn stored_in(
    dir: &Path,
    root: &SysRoot,
    usable: Option<&CpuSet>,
) -> Result<Option<Stored>, FingerprintError> {
    let path = MatrixStore::current_in(dir);
    if !path.exists() {
        return Ok(None);
    }
    let fingerprint = Fingerprint::read(root)?.hex;
    let fit = MatrixStore::open(dir).and_then(|s| s.fitting(&fingerprint, usable));
    Ok(Some(Stored {
        path,
        fingerprint,
        fit,
    }))
}

/// The matrix stored in `dir` that fits this machine ([`stored_in`]), with its path;
/// what stood in the way goes to `warnings`. No matrix, or no fingerprint: `None`.
pub fn stored_matrix(
    dir: &Path,
    root: &SysRoot,
    topology: Option<&Topology>,
    warnings: &mut Vec<String>,
) -> Option<(PathBuf, LatencyMatrix)> {
    let usable = topology.map(Topology::usable);
    let stored = stored_in(dir, root, usable.as_ref()).ok()??;
    match stored.fit {
        Ok(fit) => {
            if let Some(aside) = fit.set_aside {
                warnings.push(aside.to_string());
            }
            if let Some(m) = fit.matrix {
                return Some((stored.path, m));
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

/// The topology, the matrix (the given file, else stored, else measured now) and the
/// domains for `spec`.
pub fn ground(spec: &GroundSpec) -> anyhow::Result<Ground> {
    let root = SysRoot::resolve(Some(&spec.sysfs), None);
    let real_sysfs = spec.sysfs == Path::new(crate::sysroot::LIVE_SYS);
    let mut warnings = Vec::new();
    let topology = match Topology::discover(&root) {
        Ok(t) => Some(t),
        Err(e) if spec.matrix.is_some() && real_sysfs => {
            warnings.push(format!(
                "topology unavailable ({e}); using the matrix alone"
            ));
            None
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("reading the CPU topology under {}", spec.sysfs.display())
            })
        }
    };
    let (source, matrix, run) = match &spec.matrix {
        Some(path) => {
            let m = LatencyMatrix::load(path)?;
            (Source::File(path.clone()), Some(m), None)
        }
        None => this_machine_matrix(spec, &root, topology.as_ref(), real_sysfs, &mut warnings)?,
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

/// Places `req`, shaped by `shape`, on `ground`. A one-off request, not the rules: no
/// `Plan` is made.
pub fn place_on(ground: &Ground, req: &Request, shape: &Shape) -> anyhow::Result<Advice> {
    let mut warnings = ground.warnings.clone();
    let (placement, shaped) = if shape.is_empty() {
        (place(&ground.domains, req, &ground.available)?, None)
    } else {
        let t = ground.topology.as_ref().context(
            "--core-type, --prefer and --near need the CPU topology, which could not be read",
        )?;
        let devices = devices::resolve_all(&ground.root, shape.near.as_deref());
        let (p, s) = shape::place_shaped(
            &ground.domains,
            &Facts::from_topology(t),
            &devices,
            req,
            shape,
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

/// [`ground`] and [`place_on`] for one request.
pub fn advise(spec: &GroundSpec, req: &Request, shape: &Shape) -> anyhow::Result<Advice> {
    place_on(&ground(spec)?, req, shape)
}

/// A count request as the command line gives it: `count` CPUs by `policy` and `smt`,
/// never `exclude`.
pub fn count_request(count: usize, policy: Policy, smt: SmtPolicy, exclude: CpuSet) -> Request {
    Request {
        count,
        policy,
        smt,
        exclude,
        exclusive: false,
        cpus: None,
    }
}

/// The CPUs a one-off request for one process may take: the `usable` CPUs inside each
/// of `bounds` (its cgroup cpuset, or the CPUs this process may run on; the request's
/// `within`), off each of `off` (the settings' housekeeping CPUs, `--exclude`). `plan
/// --pid` and `run` place inside it, with the usable CPUs outside it excluded.
pub fn request_pool(
    usable: &CpuSet,
    bounds: &[Option<&CpuSet>],
    off: &[Option<&CpuSet>],
) -> CpuSet {
    let inside = bounds
        .iter()
        .flatten()
        .fold(usable.clone(), |pool, b| pool.intersection(b));
    off.iter()
        .flatten()
        .fold(inside, |pool, o| pool.difference(o))
}

/// This machine's matrix: stored (fingerprint matching), else measured now (sparse
/// where the daemon would measure sparsely), else none.
fn this_machine_matrix(
    spec: &GroundSpec,
    root: &SysRoot,
    topology: Option<&Topology>,
    real_sysfs: bool,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(Source, Option<LatencyMatrix>, Option<measure::RunReport>)> {
    if !real_sysfs {
        return Ok((
            Source::TopologyOnly(format!(
                "no --matrix given for the tree {}, and only the running machine can be measured",
                spec.sysfs.display()
            )),
            None,
            None,
        ));
    }
    let fingerprint = Fingerprint::read(root).ok();
    let dir = spec.state_dir.clone().unwrap_or_else(default_state_dir);
    if let Some((path, m)) = stored_matrix(&dir, root, topology, warnings) {
        return Ok((Source::Stored(path), Some(m), None));
    }
    let (budget, min_idle_pct, t) = match (&spec.measuring, topology) {
        (Measuring::Off(by), _) => {
            let why = format!("no stored matrix in {} and {by}", dir.display());
            return Ok((Source::TopologyOnly(why), None, None));
        }
        (Measuring::Allowed { .. }, None) => {
            return Ok((Source::TopologyOnly("no matrix".into()), None, None))
        }
        (
            Measuring::Allowed {
                budget,
                min_idle_pct,
            },
            Some(t),
        ) => (*budget, *min_idle_pct, t),
    };
    let mut cfg = MeasureConfig::new(t.usable());
    cfg.budget = budget.max(Duration::from_millis(100));
    cfg.guard.min_idle = measure::guard::idle_share(min_idle_pct)?;
    cfg.fingerprint = fingerprint.as_ref().map(|f| f.hex.clone());
    cfg.root = root.clone();
    // Sparse from the size where the daemon measures sparsely by default.
    cfg.mode = measure::Mode::default_for(cfg.cpus.len(), measure::SPARSE_FROM_CPUS);
    let started = std::time::Instant::now();
    Ok(match measure::run_detailed(&cfg, |_| {}) {
        Ok(m) => (
            Source::Measured(started.elapsed()),
            Some(m.matrix),
            Some(m.report),
        ),
        Err(e) => (
            Source::TopologyOnly(format!(
                "no stored matrix in {} and measuring failed: {e}",
                dir.display()
            )),
            None,
            None,
        ),
    })
}

/// A latency in words; `unknown` without one.
pub fn ns(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} ns"))
        .unwrap_or_else(|| "unknown".into())
}

/// A set's cost as `plan --json` gives it: `autopilot`'s object.
#[derive(Debug, Serialize)]
pub struct CostJson {
    pub cpus: Vec<u32>,
    pub mean_latency_ns: Option<f64>,
    pub worst_latency_ns: Option<f64>,
    pub worst_level: String,
}

/// `pinnerd plan --json`: the chosen CPUs, why, and what autopilot would cost.
#[derive(Debug, Serialize)]
pub struct AdviceJson<'a> {
    /// The CPUs 0..K−1 and their cost; `null` when the costs are unknown.
    pub autopilot: Option<CostJson>,
    /// The chosen CPUs, as a list and in the kernel's list format.
    pub cpu_list: String,
    pub cpus: Vec<u32>,
    /// The groups of `level` the CPUs came from.
    pub domains: Vec<Vec<u32>>,
    pub findings: &'a [Finding],
    /// The domain level the choice was made at and its typical latency.
    pub level: &'a str,
    pub level_latency_ns: Option<f64>,
    /// The line saying latency placement is off (an unstable matrix), or null.
    pub latency_off: Option<&'static str>,
    pub mean_latency_ns: Option<f64>,
    pub notes: &'a [String],
    pub policy: Policy,
    /// `core-type`, `prefer` and `near` in the order they narrowed the CPUs.
    pub shaped_by: &'a [crate::shape::ShapedBy],
    pub smt: SmtPolicy,
    /// Where the matrix came from, in words.
    pub source: String,
    pub trust: Trust,
    pub warnings: &'a [String],
    pub worst_latency_ns: Option<f64>,
    /// The coarsest level two chosen CPUs only share.
    pub worst_level: &'a str,
}

impl Advice {
    /// Where the matrix came from, in words.
    pub fn source_description(&self) -> String {
        self.source.describe()
    }

    /// The `--json` form.
    pub fn as_json(&self) -> AdviceJson<'_> {
        let x = &self.placement.explanation;
        let cost_json = |cpus: &CpuSet, c: &Cost| CostJson {
            cpus: cpus.iter().collect(),
            mean_latency_ns: c.mean_ns,
            worst_latency_ns: c.worst_ns,
            worst_level: c.worst_level.clone(),
        };
        AdviceJson {
            autopilot: x.autopilot.as_ref().map(|(cpus, c)| cost_json(cpus, c)),
            cpu_list: self.placement.cpus.to_string(),
            cpus: self.placement.cpus.iter().collect(),
            domains: x.domains.iter().map(|d| d.iter().collect()).collect(),
            findings: &self.findings,
            level: &x.level,
            level_latency_ns: x.level_latency_ns,
            latency_off: self.latency_off,
            mean_latency_ns: x.cost.mean_ns,
            notes: &x.notes,
            policy: x.policy,
            shaped_by: self.shaped.as_ref().map_or(&[], |s| &s.by),
            smt: x.smt,
            source: self.source.describe(),
            trust: x.trust,
            warnings: &self.warnings,
            worst_latency_ns: x.cost.worst_ns,
            worst_level: &x.cost.worst_level,
        }
    }

    /// The `--json` object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self.as_json()).expect("plain data serializes")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    #[test]
    fn a_request_pool_is_the_usable_cpus_inside_every_bound_and_off_the_rest() {
        let usable = set("0-7");
        assert_eq!(request_pool(&usable, &[], &[]), usable);
        assert_eq!(
            request_pool(
                &usable,
                &[Some(&set("2-9")), None, Some(&set("0-5"))],
                &[Some(&set("0,3")), None, Some(&set("5"))],
            ),
            set("2,4")
        );
        assert_eq!(
            request_pool(&usable, &[Some(&set("8-9"))], &[]),
            CpuSet::new(),
            "a bound outside the usable CPUs leaves nothing"
        );
    }
}
