//! `pinnerd measure`: measure this machine's core-to-core latency matrix and show it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::cpuset::CpuSet;
use crate::fingerprint::Fingerprint;
use crate::matrix::{render, LatencyMatrix, PairStats};
use crate::measure::around::SpinPriority;
use crate::measure::complete;
use crate::measure::simulate::Simulated;
use crate::measure::sparse::{self, SparseConfig};
use crate::measure::{self, FirstTouch, MeasureConfig, Mode, Phase, Primitive, Progress};
use crate::sysroot::SysRoot;
use crate::topology::Topology;

#[derive(Debug, clap::Args)]
pub struct MeasureArgs {
    /// CPUs to measure, kernel list format (e.g. `0-3,8`). Default: every online CPU
    /// except isolated ones. Named isolated CPUs are measured.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<CpuSet>,
    /// Time allowed for measuring, in seconds (the wait for idle CPUs comes on top);
    /// pairs not reached in time stay empty, with a warning.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub budget: f64,
    /// Cache-line primitive.
    #[arg(long, value_enum, default_value_t = Primitive::Cas)]
    pub primitive: Primitive,
    /// One pair at a time (`serial`, also called `full`), disjoint pairs in parallel
    /// rounds (then a sample of pairs re-measured serially to report the disagreement),
    /// or `sparse`: the hierarchy from a few pairs, spot checks, the rest inferred.
    #[arg(long, value_enum, default_value_t = Mode::Serial)]
    pub mode: Mode,
    /// Do not spin: answer each pair sparse measurement asks for from this matrix (our
    /// JSON or core-to-core-latency's CSV), with noise. Implies `--mode sparse`.
    #[arg(long, value_name = "FILE")]
    pub simulate: Option<PathBuf>,
    /// With `--mode sparse` or `--simulate`: after the sparse map (its summary is
    /// printed first), measure its inferred cells in slices of disjoint pairs until
    /// every pair is measured, as the daemon does in the background; the matrix
    /// printed and saved is the completed one.
    #[arg(long)]
    pub complete: bool,
    /// With --simulate: sigma of the lognormal noise on each answer (0.02 ≈ 2%).
    #[arg(long, value_name = "F", default_value_t = 0.02, requires = "simulate")]
    pub noise: f64,
    /// With --simulate: seed of the noise and of the spot-check sample.
    #[arg(long, value_name = "S", default_value_t = 1, requires = "simulate")]
    pub seed: u64,
    /// With --simulate: a host that moves its vCPUs, as a cloud hypervisor does: the
    /// CPUs are placed on the file's CPUs at random, placed anew every N answers. The
    /// simulated machine is a virtual machine.
    #[arg(long, value_name = "N", requires = "simulate", value_parser = clap::value_parser!(u64).range(1..))]
    pub moves_every: Option<u64>,
    /// Which CPU of each pair touches the shared line first (where its memory lives).
    #[arg(long, value_enum, default_value_t = FirstTouch::Initiator)]
    pub first_touch: FirstTouch,
    /// Minimum idle share (percent) every measured CPU must show before measuring;
    /// 0 measures whatever the load.
    #[arg(long, value_name = "PCT", default_value_t = 75.0)]
    pub idle_threshold: f64,
    /// Scheduling priority of the spinning threads: `normal` (nice 0), `nice-19`, or
    /// `idle` (SCHED_IDLE: they run only when nothing else wants the CPU).
    #[arg(long, value_enum, default_value_t = SpinPriority::Normal)]
    pub spin_priority: SpinPriority,
    /// How long to wait for the CPUs to become idle, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub idle_wait: f64,
    /// Print the matrix as JSON (the format the daemon stores up to 1,024 CPUs).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the matrix as core-to-core-latency's CSV (lower triangle, no CPU ids).
    #[arg(long)]
    pub csv: bool,
    /// Also draw the heatmap as SVG into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also save the matrix into FILE: CSV when FILE ends in `.csv`, else JSON (from
    /// 1,025 CPUs on pinnerd's binary form, under the same name).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Read the machine from this sysfs tree instead of /sys (CPU lists, fingerprint).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysfs: Option<PathBuf>,
}

/// Builds the configuration from the arguments and the machine.
pub fn config(args: &MeasureArgs) -> anyhow::Result<(MeasureConfig, Vec<String>)> {
    let root = match &args.sysfs {
        Some(dir) => SysRoot::with_sys(dir),
        None => SysRoot::default(),
    };
    // Every argument is checked before the machine is read.
    let budget = super::limits::seconds("--budget", args.budget, super::limits::MAX_BUDGET_SECS)?;
    let idle_wait = super::limits::seconds(
        "--idle-wait",
        args.idle_wait,
        super::limits::MAX_IDLE_WAIT_SECS,
    )?;
    if budget.is_zero() {
        anyhow::bail!("--budget must be more than 0 seconds");
    }
    let min_idle = super::limits::idle_share(args.idle_threshold)?;
    let topo = Topology::discover(&root).context("reading the CPU topology")?;
    let (cpus, notes) = measure::select_cpus(
        args.cpus.as_ref(),
        &topo.online,
        &topo.isolated,
        &measure::allowed_cpus().context("reading this process's CPUs")?,
    )?;
    let mut cfg = MeasureConfig::new(cpus);
    cfg.root = root.clone();
    cfg.budget = budget;
    cfg.primitive = args.primitive;
    cfg.mode = args.mode;
    cfg.first_touch = args.first_touch;
    cfg.guard.min_idle = min_idle;
    cfg.guard.wait = idle_wait;
    cfg.priority = args.spin_priority;
    cfg.fingerprint = match Fingerprint::read(&root) {
        Ok(fp) => Some(fp.hex),
        Err(e) => {
            tracing::warn!("no hardware fingerprint: {e}");
            None
        }
    };
    Ok((cfg, notes))
}

/// A progress line on stderr once a run has lasted a second, when stderr is a terminal.
struct ProgressLine {
    shown: bool,
    tty: bool,
}

impl ProgressLine {
    fn update(&mut self, p: Progress) {
        if !self.tty || p.elapsed < Duration::from_secs(1) {
            return;
        }
        let what = match p.phase {
            Phase::Guard => "waiting for idle CPUs".to_string(),
            Phase::Warmup => "warming up".to_string(),
            Phase::Pass(n) => format!("pass {n}: {}/{}", p.done, p.total),
            Phase::SerialCheck => format!("serial check: {}/{}", p.done, p.total),
        };
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2Kmeasuring: {what}, {:.1} s",
            p.elapsed.as_secs_f64()
        );
        let _ = err.flush();
        self.shown = true;
    }

    fn finish(&self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

/// The human summary under the heatmap.
pub fn summary_text(m: &LatencyMatrix) -> String {
    let s = m.summary();
    let mut out = String::new();
    out.push_str(&format!(
        "{}, {}, primitive {}, mode {}\n",
        crate::words::count(m.len(), "CPU"),
        crate::words::count(s.pairs, "pair"),
        m.primitive.as_deref().unwrap_or("unknown"),
        m.mode.as_deref().unwrap_or("unknown"),
    ));
    if s.pairs > 0 {
        out.push_str(&format!(
            "one-way latency: min {:.1} ns, median {:.1} ns, max {:.1} ns\n",
            s.min_ns, s.median_ns, s.max_ns
        ));
        out.push_str("levels:\n");
        for l in &s.levels {
            out.push_str(&format!(
                "  {:>8.1} ns median ({:.1}–{:.1} ns), {} pair(s)\n",
                l.median_ns, l.min_ns, l.max_ns, l.pairs
            ));
        }
    }
    if s.missing > 0 {
        out.push_str(&format!("{} pair(s) without a figure\n", s.missing));
    }
    if let Some(sp) = m
        .sparse
        .as_ref()
        .filter(|sp| sp.pairs_measured >= sp.pairs_total)
    {
        out.push_str(&format!(
            "sparse, then completed: all {} pairs measured; the sparse map's modelled time on real hardware {:.1} s\n",
            sp.pairs_total, sp.modelled_seconds
        ));
    } else if let Some(sp) = &m.sparse {
        out.push_str(&format!(
            "sparse: {} of {} pairs measured ({:.1}%), the others inferred from their block; modelled time on real hardware {:.1} s\n",
            sp.pairs_measured,
            sp.pairs_total,
            100.0 * sp.pairs_measured as f64 / sp.pairs_total.max(1) as f64,
            sp.modelled_seconds
        ));
    }
    if let Some(st) = &m.stability {
        out.push_str(&format!(
            "repeat check: {} pair(s) measured again, {} off by more than {:.0}%: {}\n",
            st.repeated,
            st.disagreeing,
            st.tolerance * 100.0,
            st.latency_off().unwrap_or("stable")
        ));
    }
    if let Some(fp) = &m.fingerprint {
        out.push_str(&format!("fingerprint: {fp}\n"));
    }
    if m.warnings.is_empty() {
        out.push_str("warnings: none\n");
    } else {
        out.push_str("warnings:\n");
        for w in &m.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}

/// `--simulate FILE`: sparse measurement answered from the file, no spinning.
fn simulate(
    args: &MeasureArgs,
    path: &std::path::Path,
    preface: &mut String,
) -> anyhow::Result<measure::Measurement> {
    if args.mode != Mode::Serial && args.mode != Mode::Sparse {
        anyhow::bail!(
            "--simulate runs sparse measurement; --mode {} cannot be simulated",
            args.mode.as_str()
        );
    }
    if !args.noise.is_finite() || !(0.0..=1.0).contains(&args.noise) {
        anyhow::bail!(
            "--noise is a lognormal sigma from 0 to 1, got {}",
            args.noise
        );
    }
    let truth = LatencyMatrix::load(path)?;
    let cpus: Vec<u32> = match &args.cpus {
        Some(req) => {
            let have: CpuSet = truth.cpus.iter().copied().collect();
            let missing = req.difference(&have);
            if !missing.is_empty() {
                anyhow::bail!("{}: has no CPUs {missing} (it has {have})", path.display());
            }
            req.iter().collect()
        }
        None => truth.cpus.clone(),
    };
    let t0 = std::time::Instant::now();
    let mut sim = Simulated::new(&truth, args.noise, args.seed);
    if let Some(every) = args.moves_every {
        sim = sim.moving(usize::try_from(every).unwrap_or(usize::MAX));
    }
    let cfg = SparseConfig {
        seed: args.seed,
        ..SparseConfig::default()
    };
    let out = sparse::run_sparse(&cpus, None, &mut sim, &cfg)?;
    let mut m = out.to_matrix(&Default::default(), &cfg.costs);
    let moving = args
        .moves_every
        .map(|n| format!(", vCPUs moved every {n} answers"))
        .unwrap_or_default();
    m.warnings.push(format!(
        "simulated from {} (noise {}, seed {}{moving}): no pair was measured on this machine",
        path.display(),
        args.noise,
        args.seed
    ));
    if args.complete {
        complete_and_say(args, preface, &mut m, &mut sim, |_| Default::default())?;
    }
    // The simulated host is a virtual machine when it moves its vCPUs; otherwise
    // nothing says what it is.
    measure::repeat::record(&mut m, &mut sim, args.moves_every.is_some())?;
    Ok(measure::Measurement {
        matrix: m,
        report: measure::RunReport {
            elapsed: t0.elapsed(),
            ..Default::default()
        },
    })
}

/// `--complete`: the sparse map's summary (into `preface`, printed before the matrix, or
/// on stderr when stdout carries JSON or CSV), completes `m` through `meas`, and says what completion did.
fn complete_and_say<M: sparse::PairMeasurer>(
    args: &MeasureArgs,
    preface: &mut String,
    m: &mut LatencyMatrix,
    meas: &mut M,
    take_stats: impl FnMut(&mut M) -> std::collections::BTreeMap<(u32, u32), PairStats>,
) -> anyhow::Result<()> {
    let mut text = format!("sparse map:\n{}", indent(&summary_text(m)));
    let slice = complete::default_slice(m.len());
    let done = complete::complete(m, meas, slice, take_stats)?;
    let left = complete::pending(m).len();
    let modelled = done.modelled(
        &complete::MODEL_COSTS,
        measure::LoadGuard::default().sample,
        complete::DEFAULT_PAUSE,
    );
    text.push_str(&format!(
        "completion: {} pairs measured in {} slice(s) of {} ({} measurements), {}; modelled time on real hardware {:.1} s at the daemon's pace\n",
        done.pairs,
        done.slices,
        slice,
        done.measurements,
        if left == 0 {
            "every pair measured".to_string()
        } else {
            format!("{left} pair(s) gave no figure and stay inferred")
        },
        modelled.as_secs_f64()
    ));
    match complete::describe(&done.corrections, complete::AGREE) {
        Some(c) => text.push_str(&format!("completion corrected: {c}\n")),
        None => text.push_str("completion corrected no cell by more than 10%\n"),
    }
    if args.json || args.csv {
        eprint!("{text}");
    } else {
        preface.push_str(&text);
        preface.push('\n');
    }
    if left > 0 {
        m.warnings
            .push(format!("{left} pair(s) gave no figure while completing"));
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

pub fn run(args: MeasureArgs) -> anyhow::Result<ExitCode> {
    if args.complete && args.simulate.is_none() && args.mode != Mode::Sparse {
        anyhow::bail!("--complete completes a sparse map: use it with --mode sparse or --simulate");
    }
    let mut preface = String::new();
    let measured = if let Some(path) = &args.simulate {
        simulate(&args, path, &mut preface)?
    } else {
        let (cfg, notes) = config(&args)?;
        for n in &notes {
            eprintln!("pinnerd: {n}");
        }
        let mut line = ProgressLine {
            shown: false,
            tty: std::io::stderr().is_terminal(),
        };
        let result = measure::run_detailed(&cfg, |p| line.update(p));
        line.finish();
        let mut measured = result?;
        if args.complete {
            let deadline = std::time::Instant::now() + cfg.budget;
            let mut meas = measure::sparse_real::EngineMeasurer::new(&cfg, deadline).on_crew();
            complete_and_say(&args, &mut preface, &mut measured.matrix, &mut meas, |m| {
                std::mem::take(&mut m.stats)
            })?;
        }
        measured
    };
    let m = measured.matrix;
    if let Some(path) = &args.svg {
        let title = format!(
            "one-way core-to-core latency (ns), {}, {} CPUs",
            m.primitive.as_deref().unwrap_or("?"),
            m.len()
        );
        let svg = render::svg_heatmap(&m, &title)?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.out {
        // The user's name is kept whatever the form: JSON below
        // `matrix::binary::BINARY_FROM_CPUS` CPUs, binary from there on (the readers
        // tell them by content); CSV when the name ends in `.csv`.
        let csv = path.extension().is_some_and(|e| e == "csv");
        let text = if csv {
            m.to_csv().into_bytes()
        } else {
            m.to_file_bytes()?
        };
        // The reader's limit: never write a matrix file pinnerd would refuse to read.
        let limit = if csv || m.len() < crate::matrix::binary::BINARY_FROM_CPUS {
            crate::matrix::read::MAX_MATRIX_FILE_SIZE
        } else {
            crate::matrix::read::MAX_BINARY_FILE_SIZE
        };
        if text.len() as u64 > limit {
            anyhow::bail!(
                "not writing {}: the matrix of {} CPUs is {} bytes as a file, over the \
                 {limit}-byte limit for a matrix file (pinnerd could not read it back)",
                path.display(),
                m.len(),
                text.len()
            );
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    // Written whole at the end (a closed or full output is one error, named).
    let tty = std::io::stdout().is_terminal();
    let mut stdout: Vec<u8> = Vec::new();
    if args.json {
        write!(stdout, "{}", m.to_json_text()?)?;
    } else if args.csv {
        write!(stdout, "{}", m.to_csv())?;
        if m.cpus.iter().copied().ne(0..m.len() as u32) {
            // That format has no CPU ids: say which CPUs the rows are.
            let cpus: CpuSet = m.cpus.iter().copied().collect();
            eprintln!("pinnerd: CSV rows are, in order, CPUs {cpus} (the format has no CPU ids)");
        }
    } else {
        write!(stdout, "{preface}")?;
        let color = super::output::colour(tty);
        write!(stdout, "{}", render::terminal_heatmap(&m, color))?;
        writeln!(stdout)?;
        write!(stdout, "{}", summary_text(&m))?;
        if let Some((med, max)) = measured.report.cross_check_disagreement() {
            writeln!(
                stdout,
                "rounds vs serial on {} sampled pairs: median {:.1}%, max {:.1}% apart",
                measured.report.cross_check.len(),
                med * 100.0,
                max * 100.0
            )?;
        }
        writeln!(
            stdout,
            "took {:.2} s",
            measured.report.elapsed.as_secs_f64()
        )?;
    }
    super::output::write_stdout(format_args!("{}", String::from_utf8_lossy(&stdout)))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_one_pair_as_one_pair() {
        let m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 40.0);
        let text = summary_text(&m);
        assert!(text.starts_with("2 CPUs, 1 pair, primitive "), "{text}");
    }
}
