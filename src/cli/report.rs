//! `pinnerd report`: the machine's map on one page. The facts (the topology, the matrix
//! as `advice` finds it, plans for K = 2, 4, 8, with `--compare` the measured effect)
//! are gathered by `report_facts`; on this machine the running daemon's containers are
//! asked on the bus here. It writes `report.json` and `report.html` (drawn by
//! `crate::report`) into `--out`, each replaced whole and never through a link, in a
//! directory no other user owns or may write in (`crate::outfile`).
//!
//! Must not touch: placement, measurement or the gathering of facts (`report_facts`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::advice::{self, Ground, GroundSpec, Measuring, Source};
use crate::report::{self, Report};
use crate::report_facts;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Directory to write report.html and report.json into (created when missing).
    #[arg(long, value_name = "DIR", default_value = "pinnerd-report")]
    pub out: PathBuf,
    /// Latency matrix (our JSON or core-to-core-latency's CSV) instead of this machine's
    /// stored or measured one. Another machine's matrix is drawn from its own domains.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Root of the sysfs tree to read the topology from (e.g. a captured machine).
    #[arg(long, value_name = "DIR", default_value = crate::sysroot::LIVE_SYS)]
    pub sysfs: PathBuf,
    /// Also measure the effect (a ping-pong ring on the planned, autopilot, worst and
    /// unpinned CPUs, as `pinnerd compare`) and the engine against a plain ping-pong on
    /// the first two CPUs. Spins this machine's CPUs for about 15 s.
    #[arg(long)]
    pub compare: bool,
    /// Seconds a measurement made by the report may take (none stored, no --matrix).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub budget: f64,
    /// Minimum idle share (percent) every CPU must show before the report measures; 0
    /// measures whatever the load.
    #[arg(long, value_name = "PCT", default_value_t = 75.0)]
    pub idle_threshold: f64,
    /// Where the running daemon is asked for its containers (the page of this machine
    /// only): `system`, `session`, or a D-Bus address.
    #[arg(long, value_name = "BUS", default_value = "system")]
    pub bus: crate::dbus::BusTarget,
}

/// How long the daemon is waited for: its properties answer at once when it runs.
const DAEMON_WAIT: Duration = Duration::from_secs(2);

/// The matrix measured for the page, written beside it.
const MATRIX_FILE: &str = "matrix.json";

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let budget = super::limits::seconds("--budget", args.budget, super::limits::MAX_BUDGET_SECS)?;
    let g = advice::ground(&GroundSpec {
        sysfs: args.sysfs.clone(),
        matrix: args.matrix.clone(),
        state_dir: None,
        measuring: Measuring::Allowed {
            budget,
            min_idle_pct: args.idle_threshold,
        },
    })?;
    let real_sysfs = args.sysfs == Path::new(crate::sysroot::LIVE_SYS);
    let known = report_facts::this_machine(&g).is_some();
    if args.compare && !(real_sysfs && known) {
        anyhow::bail!(
            "--compare spins this machine's CPUs: it needs this machine's matrix (no --sysfs, no --matrix of another machine)"
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating the report directory {}", args.out.display()))?;
    // Root may run this anywhere (`/tmp`): a directory another user owns or may write
    // in is refused, and the files never go through a link planted in it.
    let out_dir = crate::outfile::OutDir::open(&args.out)?;
    let asked = report_facts::Asked {
        matrix: args.matrix.as_deref(),
        live_sysfs: real_sysfs,
        compare: args.compare,
    };
    let mut r = report_facts::gather(&g, &asked)?;
    r.daemon = (real_sysfs && known).then(|| daemon_facts(&args.bus));
    write_report(&out_dir, &g, &r)
}

/// The running daemon's NRI line and containers, asked on `bus` within [`DAEMON_WAIT`];
/// why it could not be asked, instead.
fn daemon_facts(bus: &crate::dbus::BusTarget) -> report::DaemonFacts {
    let asked = super::client::block_on(async {
        let ask = async {
            let p = super::client::proxy(bus).await?;
            let nri = p.nri().await.context("Nri")?;
            let containers = p.containers().await.context("Containers")?;
            Ok::<_, anyhow::Error>((nri, containers))
        };
        match tokio::time::timeout(DAEMON_WAIT, ask).await {
            Ok(answer) => answer,
            Err(_) => anyhow::bail!("no answer on the {bus} bus within {DAEMON_WAIT:?}"),
        }
    });
    match asked {
        Ok((nri, containers)) => report::DaemonFacts {
            nri,
            containers,
            error: None,
        },
        Err(e) => report::DaemonFacts {
            error: Some(format!("{e:#}")),
            ..report::DaemonFacts::default()
        },
    }
}

/// Writes `report.json`, `report.html` and, when it was measured now, `matrix.json`
/// into `out_dir`, and says where.
fn write_report(
    out_dir: &crate::outfile::OutDir,
    g: &Ground,
    r: &Report,
) -> anyhow::Result<ExitCode> {
    let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
        Ok(out_dir.replace(name.as_ref(), text.as_bytes(), false)?)
    };
    if let (Source::Measured(_), Some(m)) = (&g.source, &g.matrix) {
        // JSON, or binary from `BINARY_FROM_CPUS` CPUs on (the name stays).
        out_dir.replace(MATRIX_FILE.as_ref(), &m.to_file_bytes()?, false)?;
    }
    let json = write("report.json", &(serde_json::to_string_pretty(r)? + "\n"))?;
    let html = write("report.html", &report::html(r, g.matrix.as_ref()))?;
    if let Some(line) = g.latency_off {
        outln!("{line}");
    }
    outln!(
        "{}\n{}\nfrom the {}",
        html.display(),
        json.display(),
        r.source
    );
    Ok(ExitCode::SUCCESS)
}
