//! Every subcommand that prints, into a closed pipe (`pinnerd status | head -1`) and
//! into a full disk (`> /dev/full`): an error message and exit status 1, never a panic
//! (exit 101) and never a silent success.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use super::daemon::{Bus, Daemon, Dirs, Policy};

pub(super) const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/xeon-e5620"
);
pub(super) const CSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/c2c-data/nviennot/AMD_Ryzen_7_2700X_Eight-Core_Processor.csv"
);

/// `compare` without a measurement, one short run: it still spins a pair of threads.
pub(super) const QUICK_COMPARE: &[&str] = &[
    "compare",
    "--no-measure",
    "--runs",
    "1",
    "--duration-ms",
    "20",
];

/// Four PUs (OS indexes 0-3) for `export hwloc-distances`.
const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<topology version="2.0">
  <object type="Machine" os_index="0">
    <object type="PU" os_index="0"/>
    <object type="PU" os_index="1"/>
    <object type="PU" os_index="2"/>
    <object type="PU" os_index="3"/>
  </object>
</topology>
"#;

/// A pipe whose reading end is already closed: every write gets EPIPE.
fn closed_pipe() -> Stdio {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

fn full_disk() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

/// Runs `pinnerd ARGS` with standard output `out`; asserts an error said and exit 1.
fn fails_cleanly(args: &[&str], out: Stdio, what: &str, said: &str) {
    let o = super::helper::pinnerd_command()
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} into {what}: {err}");
    assert_eq!(o.status.code(), Some(1), "{args:?} into {what}: {err}");
    assert!(err.contains(said), "{args:?} into {what}: {err}");
}

/// `d/rules`, holding one valid rule file (rule `a`).
pub(super) fn one_rule_dir(d: &std::path::Path) -> std::path::PathBuf {
    let rules = d.join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("a.toml"),
        "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"x\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    rules
}

fn each_output(args: &[&str]) {
    fails_cleanly(args, closed_pipe(), "a closed pipe", "Broken pipe");
    fails_cleanly(args, full_disk(), "/dev/full", "No space left on device");
}

#[test]
fn every_printing_command_fails_cleanly_on_a_closed_or_full_output() {
    let _cpus = super::cpus_stay_online();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m4 = d.join("m4.json");
    let matrix =
        pinnerd::LatencyMatrix::from_fn(
            vec![0, 1, 2, 3],
            |i, j| {
                if i / 2 == j / 2 {
                    8.0
                } else {
                    40.0
                }
            },
        );
    std::fs::write(&m4, serde_json::to_string(&matrix).unwrap()).unwrap();
    let xml = d.join("t.xml");
    std::fs::write(&xml, XML).unwrap();
    let rules = one_rule_dir(d);
    let (m4, xml, rules) = (
        m4.to_str().unwrap(),
        xml.to_str().unwrap(),
        rules.to_str().unwrap(),
    );
    // A rule directory with a subdirectory: `check` prints a note about it.
    let nested = d.join("nested");
    std::fs::create_dir_all(nested.join("sub")).unwrap();
    let (nested, page) = (nested.to_str().unwrap(), d.join("page"));
    let page = page.to_str().unwrap();
    let no_bus = "unix:path=/nonexistent/pinnerd-test-bus";
    let me = std::process::id().to_string();
    let alone: [&[&str]; 17] = [
        &["--help"],
        &["topology", "--sysfs", FIXTURE],
        &["topology", "--sysfs", FIXTURE, "--json"],
        &["measure", "--simulate", CSV],
        &["measure", "--simulate", CSV, "--json"],
        &["plan", "--count", "1", "--no-measure", "--sysfs", FIXTURE],
        &["plan", "--pid", &me, "--count", "1", "--no-measure"],
        &[
            "plan",
            "--count",
            "1",
            "--no-measure",
            "--sysfs",
            FIXTURE,
            "--json",
        ],
        &["check", "--no-permissions", rules],
        &["check", "--no-permissions", nested],
        &["report", "--matrix", CSV, "--out", page],
        &["diff", CSV, CSV],
        &["fleet", CSV, CSV, CSV],
        &["export", "nfd", "--sysfs", FIXTURE],
        &[
            "export",
            "hwloc-distances",
            "--matrix",
            m4,
            "--topology",
            xml,
        ],
        &["run", "--bus", no_bus, "--cpus", "0", "--print"],
        QUICK_COMPARE,
    ];
    for args in alone {
        if args[0] == "--help" {
            // clap prints the help itself; it must not panic either.
            for out in [closed_pipe(), full_disk()] {
                let o = super::helper::pinnerd_command()
                    .args(args)
                    .stdout(out)
                    .stderr(Stdio::piped())
                    .output()
                    .unwrap();
                assert_ne!(o.status.code(), Some(101), "{:?}", o);
            }
            continue;
        }
        let _spin = (args[0] == "compare").then(super::one_spinner_at_a_time);
        each_output(args);
    }

    // The commands that ask the daemon.
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _daemon = Daemon::start(&bus, &dirs);
    let addr = bus.address.as_str();
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let pid = pid.as_str();
    let with_daemon: [&[&str]; 7] = [
        &["status", "--bus", addr],
        &["managed", "--bus", addr],
        &["explain", "--bus", addr, pid],
        &["metrics", "--bus", addr],
        &["reload", "--bus", addr],
        &["remeasure", "--bus", addr],
        &["pin", "--bus", addr, pid, "--cpus", "0"],
    ];
    for args in with_daemon {
        each_output(args);
    }
    // Each pin took effect before its report failed; each release reports too.
    let release = ["release", "--bus", addr, pid];
    fails_cleanly(&release, closed_pipe(), "a closed pipe", "Broken pipe");
    let _ = super::helper::pinnerd_command()
        .args(["pin", "--bus", addr, pid, "--cpus", "0"])
        .output()
        .unwrap();
    fails_cleanly(
        &release,
        full_disk(),
        "/dev/full",
        "No space left on device",
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// Log lines are coloured on a terminal only, and never with `NO_COLOR` set.
#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let bin = super::helper::PINNERD;
    let run = format!("{bin} -v run --bus unix:path=/nonexistent/bus --cpus 0 --print");
    let cmd = format!("{run} >/dev/null");
    // On a terminal (`script` gives the command one): coloured.
    let on_tty = |no_color: bool| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if no_color {
            c.env("NO_COLOR", "1");
        }
        let o = c.output().expect("script (package bsdutils)");
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let coloured = on_tty(false);
    assert!(
        coloured.contains("no daemon to ask") && coloured.contains("\x1b["),
        "{coloured:?}"
    );
    let plain = on_tty(true);
    assert!(
        plain.contains("no daemon to ask") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    // Into a pipe: never.
    let o = Command::new("sh")
        .args(["-c", &format!("{run} 2>&1 >/dev/null | cat")])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&o.stdout);
    assert!(
        piped.contains("no daemon to ask") && !piped.contains('\x1b'),
        "{piped:?}"
    );
}
