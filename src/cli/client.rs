//! Client commands that talk to the running daemon over D-Bus: `status`, `remeasure`,
//! `reload`, `managed`, `explain`, `metrics`. Each is a thin call of one method or property of
//! `org.pinnerd.Pinnerd1`; what busctl shows is what these print.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::StreamExt;

use crate::dbus::BusTarget;

/// Which bus to reach the daemon on.
#[derive(Debug, clap::Args)]
pub struct BusArgs {
    /// `system`, `session`, or a D-Bus address such as `unix:path=/run/bus`.
    #[arg(long, value_name = "BUS", default_value = "system")]
    pub bus: BusTarget,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Debug, clap::Args)]
pub struct RemeasureArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Wait for the measurement to finish and print its summary.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Process id to explain.
    pub pid: u32,
    /// Print the bus's `ExplainJson` object instead (the managed row, the text, where
    /// its memory is, the container it runs in; see docs/dbus.md).
    #[arg(long)]
    pub json: bool,
}

#[zbus::proxy(
    interface = "org.pinnerd.Pinnerd1",
    default_service = "org.pinnerd.Pinnerd1",
    default_path = "/org/pinnerd/Pinnerd1"
)]
pub trait Pinnerd1 {
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn state_reason(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn measured_at(&self) -> zbus::Result<u64>;
    #[zbus(property)]
    fn fingerprint(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn cpu_count(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn rule_count(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn managed_processes(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn managed_threads(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn rule_errors(&self) -> zbus::Result<Vec<String>>;
    #[zbus(property)]
    fn sched_ext(&self) -> zbus::Result<(String, String)>;
    #[zbus(property)]
    fn holds(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn nri(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn containers(&self) -> zbus::Result<Vec<String>>;
    #[zbus(property)]
    fn latency_off(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn pairs_measured(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn pairs_total(&self) -> zbus::Result<u32>;

    fn remeasure(&self) -> zbus::Result<u64>;
    fn reload(&self) -> zbus::Result<(u32, Vec<String>)>;
    fn list_managed(&self) -> zbus::Result<Vec<(u32, String, String, String, String)>>;
    fn explain(&self, pid: u32) -> zbus::Result<String>;
    fn explain_json(&self, pid: u32) -> zbus::Result<String>;
    fn metrics(&self) -> zbus::Result<String>;
    fn pin_process(&self, pid: u32, count: u32, policy: &str, smt: &str) -> zbus::Result<String>;
    fn release_process(&self, pid: u32) -> zbus::Result<()>;
    fn pin_process_with(
        &self,
        pid: u32,
        placement: std::collections::HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<String>;
    fn plan_with(
        &self,
        placement: std::collections::HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<String>;

    #[zbus(signal)]
    fn measurement_finished(&self, job: u64, ok: bool, summary: String) -> zbus::Result<()>;
}

pub(crate) fn block_on<T>(
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?
        .block_on(fut)
}

pub(crate) async fn proxy(bus: &BusTarget) -> anyhow::Result<Pinnerd1Proxy<'static>> {
    let conn = bus.connect().await?;
    Pinnerd1Proxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .with_context(|| format!("cannot reach pinnerd on the {bus} bus"))
}

/// `YYYY-MM-DD HH:MM:SS UTC` from µs since the epoch (the calendar is chrono's). Past
/// the year 262,143, where chrono's calendar ends, the seconds since the epoch.
pub fn format_epoch_us(us: u64) -> String {
    use chrono::{Datelike, Timelike};
    let secs = us / 1_000_000;
    let Some(t) = i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
    else {
        return format!("{secs} s after 1970-01-01 00:00:00 UTC");
    };
    // Written field by field: chrono's `%Y` signs a year past 9999.
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus.bus).await?;
        let measured = match p.measured_at().await? {
            0 => "never".to_string(),
            us => format_epoch_us(us),
        };
        let errors = p.rule_errors().await?;
        let off = p.latency_off().await?;
        if !off.is_empty() {
            outln!("{off}");
        }
        outln!("state:        {}", p.state().await?);
        let reason = p.state_reason().await?;
        if !reason.is_empty() {
            outln!("  why: {reason}");
        }
        outln!("version:      {}", p.version().await?);
        outln!("cpus:         {}", p.cpu_count().await?);
        outln!("fingerprint:  {}", p.fingerprint().await?);
        outln!("measured at:  {measured}");
        match (p.pairs_measured().await?, p.pairs_total().await?) {
            (_, 0) => {}
            (m, t) if m < t => outln!(
                "pairs:        {m} of {t} measured ({:.1}%), completing (the rest inferred)",
                100.0 * f64::from(m) / f64::from(t)
            ),
            (_, t) => outln!("pairs:        all {t} measured"),
        }
        outln!(
            "rules:        {} ({})",
            p.rule_count().await?,
            crate::words::count(errors.len(), "error")
        );
        outln!(
            "managed:      {}, {}",
            crate::words::count(p.managed_processes().await? as usize, "process"),
            crate::words::count(p.managed_threads().await? as usize, "thread")
        );
        for e in &errors {
            outln!("  {e}");
        }
        let sched_ext = match p.sched_ext().await? {
            (state, _) if state.is_empty() => "off".to_string(),
            (state, ops) => format!("{ops} ({state})"),
        };
        outln!("sched_ext:    {sched_ext}");
        let holds = p.holds().await?;
        if !holds.is_empty() {
            outln!("held:         {holds}");
        }
        let nri = p.nri().await?;
        if !nri.is_empty() {
            outln!("nri: {nri}");
        }
        for c in p.containers().await? {
            outln!("{c}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub fn remeasure(args: RemeasureArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus.bus).await?;
        // Subscribe before asking, so the end of a short job cannot be missed.
        let mut finished = if args.wait {
            Some(p.receive_measurement_finished().await?)
        } else {
            None
        };
        let job = p.remeasure().await.context("Remeasure")?;
        let Some(stream) = finished.as_mut() else {
            outln!("measurement job {job} started");
            return Ok(ExitCode::SUCCESS);
        };
        let wait = async {
            while let Some(sig) = stream.next().await {
                let a = sig.args()?;
                if a.job == job {
                    return Ok::<_, anyhow::Error>(Some((a.ok, a.summary)));
                }
            }
            Ok(None)
        };
        match tokio::time::timeout(Duration::from_secs(args.timeout), wait).await {
            Ok(Ok(Some((true, summary)))) => {
                outln!("measurement job {job} finished: {summary}");
                Ok(ExitCode::SUCCESS)
            }
            Ok(Ok(Some((false, summary)))) => {
                bail!("measurement job {job} failed: {summary}")
            }
            Ok(Ok(None)) => bail!("the daemon went away before job {job} finished"),
            Ok(Err(e)) => Err(e),
            Err(_) => bail!("job {job} did not finish within {} s", args.timeout),
        }
    })
}

pub fn reload(args: BusArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus).await?;
        let (n, errors) = p.reload().await.context("Reload")?;
        outln!(
            "{} loaded, {}",
            crate::words::count(n as usize, "rule"),
            crate::words::count(errors.len(), "error")
        );
        for e in &errors {
            outln!("  {e}");
        }
        Ok(if errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(super::exit::EXIT_CONFIG)
        })
    })
}

pub fn managed(args: BusArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus).await?;
        let list = p.list_managed().await.context("ListManaged")?;
        outln!(
            "{:>8}  {:<16} {:<20} {:<12} STATE",
            "PID",
            "COMM",
            "RULE",
            "CPUS"
        );
        for (pid, comm, rule, cpus, state) in list {
            outln!("{pid:>8}  {comm:<16} {rule:<20} {cpus:<12} {state}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub fn explain(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus.bus).await?;
        let text = match args.json {
            true => p.explain_json(args.pid).await.context("ExplainJson")?,
            false => p.explain(args.pid).await.context("Explain")?,
        };
        outln!("{text}");
        Ok(ExitCode::SUCCESS)
    })
}

/// `pinnerd metrics`: the running daemon's numbers in the Prometheus text format.
pub fn metrics(args: BusArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let p = proxy(&args.bus).await?;
        let text = p.metrics().await.context("Metrics")?;
        out!("{text}");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_formatting() {
        assert_eq!(format_epoch_us(0), "1970-01-01 00:00:00 UTC");
        // `date -u -d @1795788746`
        assert_eq!(
            format_epoch_us(1_795_788_746_000_000),
            "2026-11-27 14:12:26 UTC"
        );
        assert_eq!(
            format_epoch_us(951_782_400_000_000),
            "2000-02-29 00:00:00 UTC"
        );
        // `date -u -d @253402300800`: five digits, no sign.
        assert_eq!(
            format_epoch_us(253_402_300_800_000_000),
            "10000-01-01 00:00:00 UTC"
        );
    }

    #[test]
    fn past_the_calendar_the_seconds_are_given() {
        assert_eq!(
            format_epoch_us(u64::MAX),
            "18446744073709 s after 1970-01-01 00:00:00 UTC"
        );
    }
}
