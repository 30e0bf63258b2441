//! `pinnerd diff A B` and `pinnerd fleet FILE…`: matrices of several machines compared
//! (see `fleet`). Files are our JSON or core-to-core-latency's CSV.
//!
//! Must not touch: the comparison itself (in `crate::fleet`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use crate::fleet::{self, Diff, Fleet, Tolerance};
use crate::matrix::LatencyMatrix;

#[derive(Debug, clap::Args)]
pub struct ToleranceArgs {
    /// A level's (or a group pair's) median may differ by this fraction and still be
    /// the same.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub tolerance: f64,
    /// A single cell is listed as different beyond this fraction.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.25)]
    pub cell_tolerance: f64,
}

impl ToleranceArgs {
    fn get(&self) -> anyhow::Result<Tolerance> {
        for (name, v) in [
            ("--tolerance", self.tolerance),
            ("--cell-tolerance", self.cell_tolerance),
        ] {
            if !(v.is_finite() && v > 0.0 && v < 100.0) {
                anyhow::bail!("{name} {v}: must be a positive fraction, e.g. 0.1 for 10%");
            }
        }
        Ok(Tolerance {
            level: self.tolerance,
            cell: self.cell_tolerance,
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The reference matrix (its latency levels name the comparison).
    pub a: PathBuf,
    /// The matrix compared with it; same CPUs.
    pub b: PathBuf,
    #[command(flatten)]
    pub tolerance: ToleranceArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// Matrices of one CPU model and layout, one per host: at least 3, at most 256, and at
    /// most 3,145,728 cells (CPUs squared) in all, e.g. 48 matrices of 256 CPUs.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub tolerance: ToleranceArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn name(p: &Path) -> String {
    p.display().to_string()
}

/// `pinnerd diff --json`: the comparison, the two files' names and the matrices'
/// warnings.
#[derive(Serialize)]
struct DiffJson<'a> {
    #[serde(flatten)]
    diff: &'a Diff,
    a: String,
    b: String,
    warnings: &'a [String],
}

/// `pinnerd fleet --json`: the comparison and the matrices' warnings.
#[derive(Serialize)]
struct FleetJson<'a> {
    #[serde(flatten)]
    fleet: &'a Fleet,
    warnings: &'a [String],
}

fn load(p: &Path) -> anyhow::Result<LatencyMatrix> {
    super::export::load_matrix(p)
}

pub fn run_diff(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let tol = args.tolerance.get()?;
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let d = fleet::diff(&a, &name(&args.a), &b, &name(&args.b), tol)?;
    let warnings: Vec<String> = [(&args.a, &a), (&args.b, &b)]
        .iter()
        .flat_map(|(p, m)| {
            m.warnings
                .iter()
                .map(move |w| format!("{}: {w}", p.display()))
        })
        .collect();
    if args.json {
        let j = DiffJson {
            diff: &d,
            a: name(&args.a),
            b: name(&args.b),
            warnings: &warnings,
        };
        // Through a `Value`: the keys in alphabetical order, as they have always been.
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::to_value(&j)?)?
        );
    } else {
        out!("{}", render_diff(&d, &args.a, &args.b, &warnings));
    }
    Ok(ExitCode::SUCCESS)
}

fn ns(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

/// A line of `diff`'s levels table, its heading included: level, A ns, B ns, B/A, pairs,
/// cells differing.
fn diff_line(s: &mut String, [level, a, b, ratio, pairs, differing]: [&str; 6]) {
    let _ = writeln!(
        s,
        "{level:<12} {a:>10} {b:>10} {ratio:>7} {pairs:>7} {differing:>9}"
    );
}

/// A line of `fleet`'s levels table, its heading included: level, reference, min, max.
fn fleet_line(s: &mut String, [level, reference, min, max]: [&str; 4]) {
    let _ = writeln!(s, "{level:<12} {reference:>12} {min:>10} {max:>10}");
}

/// The human report: a table of levels, the verdict and its reasons, the largest cells.
pub fn render_diff(d: &Diff, a: &Path, b: &Path, warnings: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "A: {}", a.display());
    let _ = writeln!(s, "B: {}", b.display());
    diff_line(
        &mut s,
        ["level", "A ns", "B ns", "B/A", "pairs", "differing"],
    );
    for l in &d.levels {
        let ratio = l
            .ratio
            .map(|r| format!("{r:.2}x"))
            .unwrap_or_else(|| "-".into());
        diff_line(
            &mut s,
            [
                &l.level,
                &ns(l.a_ns),
                &ns(l.b_ns),
                &ratio,
                &l.pairs.to_string(),
                &l.cells_differing.to_string(),
            ],
        );
    }
    let _ = writeln!(s, "verdict: {}", d.verdict.as_str());
    for r in &d.reasons {
        let _ = writeln!(s, "  {r}");
    }
    if !d.cells.is_empty() {
        let _ = writeln!(
            s,
            "{} of {} cells differ by more than {:.0}%; the largest:",
            d.cells.len(),
            d.cells_compared,
            d.tolerance.cell * 100.0
        );
        for c in d.cells.iter().take(10) {
            let _ = writeln!(
                s,
                "  CPUs {:>3},{:<3} ({}) {:.1} ns -> {:.1} ns ({:.2}x)",
                c.a, c.b, c.level, c.a_ns, c.b_ns, c.ratio
            );
        }
    }
    for w in warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// Most matrices `fleet` compares at once.
pub const MAX_FLEET_FILES: usize = 256;
/// Most cells (CPUs squared, summed over the files) `fleet` holds at once: three
/// matrices of 1,024 CPUs (the fewest a fleet compares), or 48 of 256 (8 bytes a pair,
/// one triangle: 12 MiB).
pub const MAX_FLEET_CELLS: usize = 3 << 20;

const _: () = assert!(
    MAX_FLEET_FILES == 256 && MAX_FLEET_CELLS == 3_145_728,
    "the help of `files` states these"
);

pub fn run_fleet(args: FleetArgs) -> anyhow::Result<ExitCode> {
    let tol = args.tolerance.get()?;
    if args.files.len() > MAX_FLEET_FILES {
        anyhow::bail!(
            "{} matrices: fleet compares at most {MAX_FLEET_FILES} at once; compare a sample",
            args.files.len()
        );
    }
    let mut hosts = Vec::with_capacity(args.files.len());
    let mut warnings = Vec::new();
    let mut cells = 0usize;
    for p in &args.files {
        let m = load(p)?;
        cells = cells.saturating_add(m.len().saturating_mul(m.len()));
        if cells > MAX_FLEET_CELLS {
            anyhow::bail!(
                "{}: with it the matrices hold {cells} cells, over the {MAX_FLEET_CELLS} fleet holds at once \
                 (3 matrices of 1024 CPUs, 48 of 256); compare fewer",
                p.display()
            );
        }
        warnings.extend(m.warnings.iter().map(|w| format!("{}: {w}", p.display())));
        hosts.push((name(p), m));
    }
    let f = fleet::fleet(&hosts, tol)?;
    if args.json {
        let j = FleetJson {
            fleet: &f,
            warnings: &warnings,
        };
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::to_value(&j)?)?
        );
    } else {
        out!("{}", render_fleet(&f, &warnings));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human report: the fleet's figures per level, then one line per host.
pub fn render_fleet(f: &Fleet, warnings: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} hosts, {} outlier(s); reference = the median of every cell",
        f.hosts.len(),
        f.outliers
    );
    fleet_line(&mut s, ["level", "reference ns", "min ns", "max ns"]);
    for l in &f.levels {
        fleet_line(
            &mut s,
            [&l.level, &ns(l.reference_ns), &ns(l.min_ns), &ns(l.max_ns)],
        );
    }
    for h in &f.hosts {
        let devs: Vec<String> = h
            .levels
            .iter()
            .map(|l| match l.deviation {
                Some(d) => format!("{} {:+.1}%", l.level, d * 100.0),
                None => format!("{} -", l.level),
            })
            .collect();
        let _ = writeln!(
            s,
            "{} {}: {}",
            if h.outlier { "OUTLIER" } else { "ok     " },
            h.file,
            devs.join(", ")
        );
        if h.outlier {
            for r in &h.reasons {
                let _ = writeln!(s, "          {r}");
            }
        }
    }
    for w in warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
