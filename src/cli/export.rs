//! `pinnerd export nfd` and `pinnerd export hwloc-distances`: the measured matrix and the
//! topology in the formats Kubernetes' Node Feature Discovery and hwloc read (see
//! `crate::export`).
//!
//! Must not touch: the formats themselves (in `crate::export`); the matrix store is only
//! read, never changed (a foreign or corrupt stored matrix is reported, not moved).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::advice;
use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::export::{hwloc, nfd};
use crate::matrix::store::MatrixStore;
use crate::matrix::LatencyMatrix;
use crate::topology::Topology;

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub format: Format,
}

#[derive(Debug, clap::Subcommand)]
pub enum Format {
    /// A Node Feature Discovery feature file (SMT, LLC groups, latency per level).
    Nfd(NfdArgs),
    /// The matrix as an hwloc distances file for `hwloc-annotate … root distances FILE`.
    HwlocDistances(HwlocArgs),
}

#[derive(Debug, clap::Args)]
pub struct NfdArgs {
    /// Latency matrix (our JSON or core-to-core-latency's CSV); default: the one the
    /// daemon stored for this machine, if its fingerprint matches.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Where the daemon stores this machine's matrix.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Read sysfs from DIR (a sysfs root or a captured machine holding sys/ and proc/).
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Write the file here (atomically: a temporary file renamed over it) instead of
    /// printing it, e.g. /etc/kubernetes/node-feature-discovery/features.d/pinnerd.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct HwlocArgs {
    /// Latency matrix; default: the one the daemon stored for this machine.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// hwloc topology XML whose PUs the matrix's CPUs are (their `os_index`); default:
    /// the running machine's, from `lstopo-no-graphics --of xml`.
    #[arg(long, value_name = "TOPO.xml")]
    pub topology: Option<PathBuf>,
    /// Unit of the values (hwloc stores integers): `ns` rounds, `ps` keeps 0.001 ns.
    #[arg(long, value_enum, default_value = "ns")]
    pub unit: hwloc::Unit,
    /// Where the daemon stores this machine's matrix.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

pub fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    match args.format {
        Format::Nfd(a) => run_nfd(a),
        Format::HwlocDistances(a) => run_hwloc(a),
    }
}

/// The matrix named, or this machine's stored one when it fits ([`MatrixStore::fitting`]:
/// this hardware's, narrowed to the `usable` CPUs when given); else `None`, with a
/// warning on stderr saying why.
fn matrix_for(
    given: Option<&Path>,
    state_dir: Option<&Path>,
    root: &crate::sysroot::SysRoot,
    usable: Option<&CpuSet>,
) -> anyhow::Result<Option<(PathBuf, LatencyMatrix)>> {
    if let Some(p) = given {
        return Ok(Some((p.to_owned(), load_matrix(p)?)));
    }
    let dir = state_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(advice::default_state_dir);
    let stored =
        advice::stored_in(&dir, root, usable).context("computing this machine's fingerprint")?;
    let Some(stored) = stored else {
        eprintln!(
            "pinnerd: warning: no stored matrix at {} and no --matrix",
            MatrixStore::current_in(&dir).display()
        );
        return Ok(None);
    };
    let fit = match stored.fit {
        Ok(fit) => fit,
        Err(e) => {
            eprintln!("pinnerd: warning: stored matrix unusable: {e}");
            return Ok(None);
        }
    };
    if let Some(aside) = &fit.set_aside {
        eprintln!(
            "pinnerd: warning: {aside} (this machine's fingerprint {})",
            stored.fingerprint
        );
    }
    if fit.matrix.is_none() && !fit.missing.is_empty() {
        eprintln!(
            "pinnerd: warning: {} lacks {} pair(s) of the usable CPUs (never measured here): not used",
            stored.path.display(),
            fit.missing.len()
        );
    }
    Ok(fit.matrix.map(|m| (stored.path, m)))
}

fn run_nfd(args: NfdArgs) -> anyhow::Result<ExitCode> {
    let root = crate::sysroot::SysRoot::resolve(args.sysfs.as_deref(), None);
    let t = Topology::discover(&root)
        .with_context(|| format!("reading the CPU topology under {}", root.sys.display()))?;
    let matrix = matrix_for(
        args.matrix.as_deref(),
        args.state_dir.as_deref(),
        &root,
        Some(&t.usable()),
    )?;
    let domains = match &matrix {
        Some((path, m)) => {
            let mset: CpuSet = m.cpus.iter().copied().collect();
            if mset == t.online || mset == t.usable() {
                let (d, findings) = Domains::reconcile(m, Some(&t))
                    .with_context(|| format!("latency domains of {}", path.display()))?;
                for f in findings {
                    eprintln!("pinnerd: {}: {f}", path.display());
                }
                d
            } else {
                eprintln!(
                    "pinnerd: warning: {} covers CPUs {mset} but this machine's online CPUs are {}: latencies not exported",
                    path.display(),
                    t.online
                );
                Domains::from_topology(&t)?
            }
        }
        None => Domains::from_topology(&t)?,
    };
    let text = nfd::render(&t, Some(&domains));
    match &args.out {
        Some(out) => write_atomically(out, text.as_bytes())?,
        None => super::output::write_stdout(format_args!("{text}"))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so a
/// reader sees the old file or the new one, never half of one; no link is followed and
/// a directory writable by others is refused (see [`crate::outfile`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::outfile::replace(path, bytes, true)
        .with_context(|| format!("writing {}", path.display()))
}

fn run_hwloc(args: HwlocArgs) -> anyhow::Result<ExitCode> {
    let root = crate::sysroot::SysRoot::default();
    let Some((_, m)) = matrix_for(
        args.matrix.as_deref(),
        args.state_dir.as_deref(),
        &root,
        None,
    )?
    else {
        anyhow::bail!(
            "no matrix to export: give --matrix FILE, or let the daemon measure this machine first"
        );
    };
    let (xml, topo_name) = match &args.topology {
        Some(p) => (read_bounded(p)?, p.clone()),
        None => (lstopo_xml()?, PathBuf::from("lstopo-no-graphics --of xml")),
    };
    let pus = hwloc::pu_os_indexes(&xml, &topo_name)?;
    let text = hwloc::distances(&m, &pus, &topo_name, args.unit)?;
    super::output::write_stdout(format_args!("{text}"))?;
    Ok(ExitCode::SUCCESS)
}

/// [`LatencyMatrix::load`]: a regular file within its form's limit
/// (`matrix::read`), so a wrong path (a device, a FIFO) cannot hang the command or
/// exhaust memory.
pub fn load_matrix(p: &Path) -> anyhow::Result<LatencyMatrix> {
    Ok(LatencyMatrix::load(p)?)
}

/// The largest topology XML read: lstopo writes ~1 KiB per PU, so this is ample for any
/// machine and keeps a wrong path (a device, a huge file) from exhausting memory.
const MAX_TOPOLOGY_BYTES: u64 = 64 << 20;

/// A regular file of at most [`MAX_TOPOLOGY_BYTES`], as UTF-8.
fn read_bounded(p: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{}: not a regular file", p.display());
    }
    if meta.len() > MAX_TOPOLOGY_BYTES {
        anyhow::bail!(
            "{}: {} bytes, more than the {MAX_TOPOLOGY_BYTES} a topology XML can take",
            p.display(),
            meta.len()
        );
    }
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// The running machine's topology from hwloc itself.
fn lstopo_xml() -> anyhow::Result<String> {
    let out = std::process::Command::new("lstopo-no-graphics")
        .args(["--of", "xml"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "running lstopo-no-graphics (package hwloc-nox) for this machine's topology: {e}; install hwloc or give --topology TOPO.xml"
            )
        })?;
    if !out.status.success() {
        anyhow::bail!(
            "lstopo-no-graphics --of xml failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("lstopo-no-graphics printed invalid UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::sysroot::SysRoot;

    #[test]
    fn a_corrupt_stored_matrix_is_moved_aside_by_the_store_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("matrix.json"), "{not json").unwrap();
        let got = matrix_for(None, Some(dir.path()), &SysRoot::default(), None).unwrap();
        assert!(got.is_none());
        assert!(!dir.path().join("matrix.json").exists());
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("matrix.json.corrupt-"))
            .count();
        assert_eq!(aside, 1);
    }

    #[test]
    fn the_stored_matrix_is_narrowed_to_the_usable_cpus_as_the_daemon_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::default();
        let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |a, b| (10 * (a + b)) as f64);
        m.fingerprint = Some(Fingerprint::read(&root).unwrap().hex);
        MatrixStore::open(dir.path()).unwrap().save(&m).unwrap();
        let usable: CpuSet = "0-1".parse().unwrap();
        let (path, got) = matrix_for(None, Some(dir.path()), &root, Some(&usable))
            .unwrap()
            .unwrap();
        assert_eq!(path, dir.path().join("matrix.json"));
        assert_eq!(got.cpus, vec![0, 1]);
    }
}
