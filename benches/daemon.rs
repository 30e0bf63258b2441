//! Daemon harness (not criterion: it times a whole daemon on a private bus).
//!
//! 1. Startup to `READY=1` with a stored matrix: the daemon is started N times on a
//!    state directory that already holds this machine's matrix; the time from spawn to
//!    the `READY=1` datagram on our `NOTIFY_SOCKET` is recorded.
//! 2. Property reads while processes are exec'd: a rule matches `pb-exec`; a thread
//!    execs a copy of `true` under that name 100 times a second, while this process reads
//!    `State`, `ManagedProcesses` and `RuleErrors` over D-Bus (org.freedesktop.DBus.Properties
//!    Get, one round trip each) and records each read's latency.
//!
//! Run as root: `cargo bench --bench daemon` (`-- --reads 4000 --starts 20` to change the
//! sample sizes). Prints percentiles; the figures go in benches/README.md.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "org.pinnerd.Pinnerd1";
const PATH: &str = "/org/pinnerd/Pinnerd1";

struct Bus {
    address: String,
    pid: i32,
}

impl Bus {
    fn start(dir: &Path) -> Bus {
        let policy =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/org.pinnerd.Pinnerd1.conf");
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<busconfig><type>system</type><listen>unix:path={}/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><deny own="*"/><deny send_type="method_call"/>
<allow send_type="signal"/><allow send_requested_reply="true" send_type="method_return"/>
<allow send_requested_reply="true" send_type="error"/><allow receive_type="method_call"/>
<allow receive_type="method_return"/><allow receive_type="error"/><allow receive_type="signal"/>
<allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/></policy>
<include>{}</include></busconfig>"#,
                dir.display(),
                policy.display()
            ),
        )
        .unwrap();
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--print-address=1", "--print-pid=1", "--fork"])
            .output()
            .expect("dbus-daemon");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut l = text.lines();
        Bus {
            address: l.next().unwrap().to_string(),
            pid: l.next().unwrap().trim().parse().unwrap(),
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
    }
}

struct Daemon {
    child: Child,
    notify: UnixDatagram,
}

impl Daemon {
    fn spawn(bus: &Bus, dir: &Path, n: u32) -> Daemon {
        let sock = dir.join(format!("notify-{n}"));
        let _ = std::fs::remove_file(&sock);
        let notify = UnixDatagram::bind(&sock).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_pinnerd"))
            .arg("daemon")
            .arg(format!("--bus={}", bus.address))
            .arg("--rules")
            .arg(dir.join("rules"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--runtime-dir")
            .arg(dir.join("runtime"))
            .arg("--config")
            .arg(dir.join("settings.toml"))
            .env("NOTIFY_SOCKET", &sock)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Daemon { child, notify }
    }

    fn wait_ready(&self) {
        let mut buf = [0u8; 4096];
        loop {
            let n = self.notify.recv(&mut buf).expect("no READY=1 within 60 s");
            if String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l == "READY=1")
            {
                return;
            }
        }
    }

    fn stop(mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // After `stop` this finds the child reaped; after a panic it ends the daemon.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentiles(name: &str, v: Vec<Duration>) {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| pinnerd::stats::percentile_sorted(&ms, q);
    println!(
        "{name}: n={} p50={:.3} ms p90={:.3} ms p99={:.3} ms max={:.3} ms",
        ms.len(),
        p(0.50),
        p(0.90),
        p(0.99),
        p(1.0)
    );
}

fn loadavg() -> String {
    std::fs::read_to_string(pinnerd::sysroot::SysRoot::default().proc_path("loadavg"))
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn get(conn: &zbus::Connection, prop: &str) -> zbus::Result<()> {
    let reply = conn
        .call_method(
            Some(NAME),
            PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(NAME, prop),
        )
        .await?;
    let _: zbus::OwnedVariant = reply.body().deserialize()?;
    Ok(())
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench targets without `--bench`: the harness
        // takes minutes, so it only runs under `cargo bench`.
        println!("daemon harness: run it with `cargo bench --bench daemon`");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the daemon harness needs root (it pins processes); skipped");
        return;
    }
    let starts = arg("--starts", 20);
    let reads = arg("--reads", 4000);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in ["rules", "state", "runtime"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    std::fs::write(
        dir.path().join("settings.toml"),
        "[measure]\nbudget = \"2s\"\nidle-threshold = 1.0\ndrift-probe = \"off\"\ninterval = \"off\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules/bench.toml"),
        "[[rule]]\nname = \"bench\"\n[rule.match]\ncomm = \"pb-exec\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    let bus = Bus::start(dir.path());

    // A stored matrix: let a first daemon measure and store it.
    let d = Daemon::spawn(&bus, dir.path(), 0);
    d.wait_ready();
    let end = Instant::now() + Duration::from_secs(120);
    while !dir.path().join("state/matrix.json").exists() {
        assert!(Instant::now() < end, "the first measurement did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    d.stop();

    // 1. Startup to READY with a stored matrix.
    let mut times = Vec::new();
    for n in 1..=starts as u32 {
        let t0 = Instant::now();
        let d = Daemon::spawn(&bus, dir.path(), n);
        d.wait_ready();
        times.push(t0.elapsed());
        d.stop();
    }
    percentiles("startup to READY=1 (stored matrix)", times);

    // 2. Property reads: first without, then under 100 execs/s of a matching process.
    let d = Daemon::spawn(&bus, dir.path(), 1000);
    d.wait_ready();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(async {
        zbus::connection::Builder::address(bus.address.as_str())
            .build()
            .await
            .unwrap()
    });
    let read_all = |n: usize| -> Vec<Duration> {
        rt.block_on(async {
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                let prop = ["State", "ManagedProcesses", "RuleErrors"][i % 3];
                let t = Instant::now();
                get(&conn, prop).await.unwrap();
                lat.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            lat
        })
    };
    println!("load average before: {}", loadavg());
    percentiles("property Get, no exec load", read_all(reads / 2));
    let exe = dir.path().join("pb-exec");
    std::fs::copy("/bin/true", &exe).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let execs = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, execs, exe) = (stop.clone(), execs.clone(), exe.clone());
        std::thread::spawn(move || {
            let period = Duration::from_millis(10);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let _ = Command::new(&exe).status();
                execs.fetch_add(1, Ordering::Relaxed);
                next += period;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
    };
    let t0 = Instant::now();
    let lat = read_all(reads);
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    println!(
        "exec load: {:.0} execs/s of a matching process over {secs:.1} s",
        execs.load(Ordering::Relaxed) as f64 / secs
    );
    percentiles("property Get under exec load", lat);
    println!("load average after: {}", loadavg());
    d.stop();
}
