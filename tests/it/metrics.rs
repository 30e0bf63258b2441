//! The Prometheus text pinnerd writes, checked by the real tools: `promtool check
//! metrics` (package `prometheus`) lints names, units, HELP and TYPE; node_exporter
//! (package `prometheus-node-exporter`), bound to 127.0.0.1 on a free port, serves the
//! textfile through its textfile collector.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pinnerd::metrics::{render, textfile, Counters, MetricsSnapshot};

/// `promtool check metrics` on `text`: its exit status and what it said.
pub fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (package prometheus) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && said.trim().is_empty(), said)
}

fn busy_snapshot() -> MetricsSnapshot {
    let mut counters = Counters::default();
    for kind in ["applied", "applied", "narrowed", "gone", "permission"] {
        counters.pin_outcome(kind);
    }
    for v in [12e-6, 80e-6, 3e-3, 0.7, 59.0] {
        counters.event_to_pin_seconds.observe(v);
    }
    counters.connector_overruns = 2;
    counters.rescans = 5;
    MetricsSnapshot {
        version: env!("CARGO_PKG_VERSION").into(),
        state: "ready".into(),
        levels: vec![
            ("smt".into(), Some(7.8)),
            ("llc".into(), Some(18.1)),
            ("machine".into(), Some(85.2)),
        ],
        matrix_trusted: true,
        matrix_measured_at_us: Some(1_763_000_000_000_000),
        matrix_measure_seconds: Some(31.5),
        matrix_measured_ratio: Some(1.0),
        now_us: 1_763_000_100_000_000,
        cpus: 32,
        rules: 3,
        rule_errors: 0,
        managed_processes: 2,
        managed_threads: 40,
        counters,
        nri_registered: Some(true),
    }
}

#[test]
fn promtool_accepts_the_rendered_metrics() {
    let text = render(&busy_snapshot());
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics:\n{said}\non:\n{text}");
    // And it is not a linter that accepts anything: a counter without `_total` and a
    // family without HELP are reported.
    let bad = "# TYPE pinnerd_rescans counter\npinnerd_rescans 1\n";
    let (ok, said) = promtool_check(bad);
    assert!(!ok, "promtool accepted a bad counter: {said}");
}

/// A node_exporter with only the textfile collector, on loopback; killed on drop.
pub struct NodeExporter {
    child: Child,
    port: u16,
}

impl NodeExporter {
    pub fn start(textfile_dir: &Path) -> NodeExporter {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("prometheus-node-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(["--collector.disable-defaults", "--collector.textfile"])
            .arg(format!(
                "--collector.textfile.directory={}",
                textfile_dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "prometheus-node-exporter (package prometheus-node-exporter) must be installed",
            );
        NodeExporter { child, port }
    }

    /// `GET /metrics`, waiting up to 10 s for the exporter to listen.
    pub fn scrape(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.try_scrape() {
                Ok(body) => return body,
                Err(e) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!("node_exporter exited: {status}");
                    }
                    assert!(
                        Instant::now() < deadline,
                        "node_exporter never answered: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn try_scrape(&self) -> std::io::Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut body = Vec::new();
        s.take(16 << 20).read_to_end(&mut body)?;
        let text = String::from_utf8_lossy(&body).into_owned();
        match text.split_once("\r\n\r\n") {
            Some((head, body))
                if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") =>
            {
                Ok(body.to_string())
            }
            _ => Err(std::io::Error::other(format!(
                "unexpected reply: {text:.200}"
            ))),
        }
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(series with labels, value)` of every sample line.
pub fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            let v = match v {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("{l}")),
            };
            // Bucket bounds are numbers too: `le="1e-05"` is `le="0.00001"`.
            let at = series.find("{le=\"").or_else(|| series.find(",le=\""));
            let series = match at.map(|i| series.split_at(i + 5)) {
                Some((head, rest)) => {
                    let (le, tail) = rest.split_once('"').unwrap();
                    let le: f64 = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    };
                    format!("{head}\"{le}\"{tail}")
                }
                None => series.to_string(),
            };
            (series, v)
        })
        .collect()
}

#[test]
fn node_exporter_serves_the_textfile() {
    let dir = tempfile::tempdir().unwrap();
    let text = render(&busy_snapshot());
    textfile::write(dir.path(), &text).unwrap();
    let mut ne = NodeExporter::start(dir.path());
    let body = ne.scrape();
    assert!(body.contains("node_textfile_scrape_error 0\n"), "{body}");
    // node_exporter re-prints numbers (7.8e-09 for 0.0000000078): compare values.
    let served = samples(&body);
    let ours = samples(&text);
    assert!(ours.len() > 30, "{text}");
    for (series, v) in &ours {
        let got = served
            .iter()
            .find(|(s, _)| s == series)
            .unwrap_or_else(|| panic!("node_exporter lacks {series}:\n{body}"));
        assert_eq!(got.1, *v, "{series}");
    }
    // A broken textfile is reported by node_exporter, so the check above can fail.
    std::fs::write(
        dir.path().join("pinnerd.prom"),
        "pinnerd_rescans_total{ 1\n",
    )
    .unwrap();
    let body = ne.scrape();
    assert!(body.contains("node_textfile_scrape_error 1\n"), "{body}");
}

/// The real daemon on a private bus, pinning a real process: `pinnerd metrics` passes
/// promtool and counts the pins; its textfile, served by node_exporter, says the same;
/// an unprivileged caller may read it.
#[test]
fn the_daemon_serves_metrics_and_writes_the_textfile() {
    use super::daemon::{Bus, Daemon, Dirs, Policy};
    use super::helper::{pinnerd, Helper};

    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let textfile_dir = dirs.root.path().join("textfile");
    std::fs::create_dir(&textfile_dir).unwrap();
    dirs.write_settings(&format!(
        "[metrics]\ntextfile-dir = \"{}\"\ntextfile-period = \"1s\"\n",
        textfile_dir.display()
    ));
    let mut h = Helper::spawn(dirs.root.path(), "pd-metrics");
    h.spawn_threads(3, Some("pd-m-worker"));
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpu = online.trim().split([',', '-']).next().unwrap().to_string();
    dirs.write_rule(
        "10-m.toml",
        &format!("[[rule]]\nname = \"m\"\n[rule.match]\ncomm = \"pd-metrics\"\n[rule.place]\ncpus = \"{cpu}\"\n"),
    );
    let _d = Daemon::start(&bus, &dirs);
    let threads = |bus: &Bus| -> u32 {
        bus.get("ManagedThreads")
            .trim_start_matches("u ")
            .parse()
            .unwrap()
    };
    bus.wait_for("the helper managed", Duration::from_secs(30), || {
        bus.get("ManagedProcesses") == "u 1" && threads(&bus) >= 4
    });
    let before = threads(&bus);
    // Threads made now are pinned from their FORK events: the histogram sees them.
    h.spawn_threads(2, Some("pd-m-late"));
    bus.wait_for("the late threads managed", Duration::from_secs(30), || {
        threads(&bus) == before + 2
    });

    let out = pinnerd(&["metrics", "--bus", &bus.address]);
    assert!(out.ok, "{}{}", out.stdout, out.stderr);
    let (ok, said) = promtool_check(&out.stdout);
    assert!(ok, "promtool check metrics:\n{said}\non:\n{}", out.stdout);
    let ours = samples(&out.stdout);
    let value = |series: &str| -> f64 {
        ours.iter()
            .find(|(s, _)| s == series)
            .unwrap_or_else(|| panic!("no {series} in:\n{}", out.stdout))
            .1
    };
    assert_eq!(value("pinnerd_rules"), 1.0);
    assert_eq!(value("pinnerd_managed_processes"), 1.0);
    assert_eq!(value("pinnerd_managed_threads"), f64::from(before + 2));
    assert!(value("pinnerd_pin_outcomes_total{outcome=\"applied\"}") >= f64::from(before + 2));
    assert!(value("pinnerd_rescans_total") >= 1.0);
    let state: Vec<&(String, f64)> = ours
        .iter()
        .filter(|(s, v)| s.starts_with("pinnerd_state{") && *v == 1.0)
        .collect();
    assert_eq!(state.len(), 1, "{}", out.stdout);
    // The connector may be unavailable where this runs (then rescans pin, and the
    // daemon says it is degraded); with it, the late threads went through the histogram.
    if bus.get("State") != "s \"degraded\"" {
        assert!(
            value("pinnerd_event_to_pin_delay_seconds_count") >= 2.0,
            "{}",
            out.stdout
        );
    }

    // Anyone may read the metrics, as the bus policy says.
    let nobody = bus.busctl_as_nobody(&[
        "call",
        "org.pinnerd.Pinnerd1",
        "/org/pinnerd/Pinnerd1",
        "org.pinnerd.Pinnerd1",
        "Metrics",
    ]);
    assert!(nobody.status.success(), "{nobody:?}");
    assert!(String::from_utf8_lossy(&nobody.stdout).contains("pinnerd_rules 1"));

    // The textfile, through node_exporter.
    let file = textfile_dir.join("pinnerd.prom");
    bus.wait_for("the textfile", Duration::from_secs(10), || file.exists());
    let mut ne = NodeExporter::start(&textfile_dir);
    let body = ne.scrape();
    assert!(body.contains("node_textfile_scrape_error 0\n"), "{body}");
    let served = samples(&body);
    for series in ["pinnerd_rules", "pinnerd_managed_threads", "pinnerd_cpus"] {
        let got = served.iter().find(|(s, _)| s == series);
        assert_eq!(got.map(|g| g.1), Some(value(series)), "{series}:\n{body}");
    }
}

/// Runs `cmd ARGS` as uid/gid 65534 with no groups; panics if it fails.
pub fn as_nobody(cmd: &str, args: &[&std::ffi::OsStr]) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", cmd])
        .args(args)
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "{cmd} {args:?} as uid 65534: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory (under a traversable parent) owned by uid 65534, and a root-owned file
/// outside it that uid 65534 must never get written.
pub fn nobodys_dir() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = top.path().join("victim");
    std::fs::write(&victim, "root's\n").unwrap();
    let dir = top.path().join("textfiles");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    (top, dir, victim)
}

#[test]
fn a_link_planted_by_another_user_never_gets_the_textfile_written_through_it() {
    let (_top, dir, victim) = nobodys_dir();
    // The temporary name the textfile once had, and the file itself, as links.
    for name in [
        format!(".{}.tmp-{}", textfile::FILE_NAME, std::process::id()),
        textfile::FILE_NAME.to_string(),
    ] {
        as_nobody(
            "ln",
            &[
                "-s".as_ref(),
                victim.as_os_str(),
                dir.join(name).as_os_str(),
            ],
        );
    }
    let e = textfile::write(&dir, "pinnerd_rescans_total 1\n").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("owned by uid 65534") && msg.contains("textfiles"),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");

    // A sticky directory anyone may write (like /tmp) is refused too.
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let msg = textfile::write(&dir, "x\n").unwrap_err().to_string();
    assert!(msg.contains("writable by others"), "{msg}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");

    // Once the directory is root's alone, a link at the file's name is replaced.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = textfile::write(&dir, "pinnerd_rescans_total 1\n").unwrap();
    assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
}
