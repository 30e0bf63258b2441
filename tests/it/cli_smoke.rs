//! The binary starts, its help lists every command, every command answers its help
//! with exit status 0 and its own first line, and every command run for real ends with
//! its exit status and prints its exact first line.

#[test]
fn help_lists_every_command() {
    let out = super::helper::pinnerd_command()
        .arg("--help")
        .output()
        .expect("run pinnerd --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "topology",
        "measure",
        "plan",
        "compare",
        "check",
        "daemon",
        "status",
        "remeasure",
        "reload",
        "managed",
        "explain",
        "diff",
        "fleet",
        "export",
    ] {
        assert!(text.contains(cmd), "help does not list {cmd}:\n{text}");
    }
}

/// Every subcommand and the first line of its help, exactly.
const FIRST_LINES: [(&str, &str); 19] = [
    (
        "topology",
        "Show the CPU topology read from sysfs (and latency domains with --matrix)",
    ),
    (
        "measure",
        "Measure the core-to-core latency matrix of this machine",
    ),
    (
        "plan",
        "Choose CPUs for a request from the topology and the latency matrix",
    ),
    (
        "compare",
        "Ping-pong throughput on the planned pair vs the autopilot pair, worst pair, unpinned",
    ),
    (
        "report",
        "Write the machine's map on one page (report.html) and its facts (report.json)",
    ),
    ("check", "Validate rule files or directories"),
    ("daemon", "Run the daemon"),
    ("status", "Show the running daemon's status (over D-Bus)"),
    (
        "remeasure",
        "Ask the running daemon to re-measure the latency matrix",
    ),
    ("reload", "Ask the running daemon to reload its rules"),
    ("managed", "List the processes the daemon manages"),
    ("explain", "Explain which rule placed a process, and why"),
    (
        "diff",
        "Compare the latency matrices of two machines of one layout",
    ),
    (
        "fleet",
        "Compare many machines of one CPU model and find the outliers",
    ),
    (
        "metrics",
        "Print the running daemon's metrics in the Prometheus text format",
    ),
    (
        "export",
        "Print what pinnerd knows in another engine's format (Kubernetes NFD, hwloc)",
    ),
    (
        "run",
        "Run a command on CPUs chosen like a rule's (asks the daemon when it runs)",
    ),
    (
        "pin",
        "Pin a running process's threads through the daemon, without a rule file",
    ),
    (
        "release",
        "Give a process pinned by `pin` or `run` its CPUs from before back",
    ),
];

/// The commands `pinnerd --help` lists, in its order, without `help` itself.
fn listed_commands() -> Vec<String> {
    let run = super::helper::pinnerd(&["--help"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Each subcommand answers `pinnerd CMD --help` and `pinnerd help CMD` with exit status 0
/// and its own first line, exactly; the table above is every command the help lists, so
/// a new command fails here until it is added.
#[test]
fn every_subcommand_answers_help_with_exit_0_and_its_exact_first_line() {
    let table: Vec<&str> = FIRST_LINES.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        listed_commands(),
        table,
        "the commands `pinnerd --help` lists"
    );
    let mut wrong = Vec::new();
    for (cmd, first) in FIRST_LINES {
        for args in [[cmd, "--help"], ["help", cmd]] {
            let run = super::helper::pinnerd(&args);
            let line = run.stdout.lines().next().unwrap_or("");
            if run.code != 0 || line != first || !run.stderr.is_empty() {
                wrong.push(format!(
                    "pinnerd {}: exit {}, first line {line:?} (want 0 and {first:?}), stderr {:?}",
                    args.join(" "),
                    run.code,
                    run.stderr
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Without a command, pinnerd says how it is used on standard error and exits 2.
#[test]
fn no_command_is_a_usage_error_with_exit_2() {
    let run = super::helper::pinnerd(&[]);
    assert_eq!(
        run.code, 2,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    assert_eq!(
        run.stderr.lines().next(),
        Some("Measures core-to-core latency and pins threads to the CPUs that suit them"),
        "{}",
        run.stderr
    );
}

/// One run of a subcommand: its arguments, the exit status it ends with and the first
/// line it prints (of standard output when it succeeds, of standard error when not).
struct Case {
    args: Vec<String>,
    code: i32,
    first: String,
}

fn case(args: &[&str], code: i32, first: &str) -> Case {
    Case {
        args: args.iter().map(|a| (*a).to_string()).collect(),
        code,
        first: first.to_string(),
    }
}

/// Runs `c`; what it did when that is not what `c` says.
fn differs(c: &Case) -> Option<String> {
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    let run = super::helper::pinnerd(&args);
    let said = if run.code == 0 {
        &run.stdout
    } else {
        &run.stderr
    };
    let line = said.lines().next().unwrap_or("");
    (run.code != c.code || line != c.first).then(|| {
        format!(
            "pinnerd {}: exit {}, first line {line:?} (want {} and {:?})\nstdout: {}\nstderr: {}",
            args.join(" "),
            run.code,
            c.code,
            c.first,
            run.stdout,
            run.stderr
        )
    })
}

/// The commands that need no daemon, on fixtures and on files in `d`; `daemon` itself on
/// a bad settings file, which ends it with the configuration's exit status.
fn alone(d: &std::path::Path) -> Vec<Case> {
    use super::closed_stdout::{one_rule_dir, CSV, FIXTURE, QUICK_COMPARE};
    let rules = one_rule_dir(d);
    let bad_settings = d.join("settings.toml");
    std::fs::write(&bad_settings, "[measure]\nbudget = 2\n").unwrap();
    let page = d.join("page");
    let (rules, bad_settings, page) = (
        rules.to_str().unwrap(),
        bad_settings.to_str().unwrap(),
        page.to_str().unwrap(),
    );
    vec![
        case(
            &["topology", "--sysfs", FIXTURE],
            0,
            "fingerprint 70db4f910c20cf47  Intel(R) Xeon(R) CPU           E5620  @ 2.40GHz",
        ),
        case(
            &["measure", "--simulate", CSV],
            0,
            "     0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15",
        ),
        case(
            &["plan", "--count", "1", "--no-measure", "--sysfs", FIXTURE],
            0,
            "CPUs 0  (1 CPU(s), policy compact, smt allow)",
        ),
        case(
            QUICK_COMPARE,
            0,
            "2-thread ring through one cache line, 1 interleaved runs x 20 ms each",
        ),
        case(
            &["report", "--matrix", CSV, "--out", page],
            0,
            &format!("{page}/report.html"),
        ),
        case(
            &["check", "--no-permissions", rules],
            0,
            "ok: 1 file, 1 rule",
        ),
        case(&["diff", CSV, CSV], 0, &format!("A: {CSV}")),
        case(
            &["fleet", CSV, CSV, CSV],
            0,
            "3 hosts, 0 outlier(s); reference = the median of every cell",
        ),
        case(
            &["export", "nfd", "--sysfs", FIXTURE],
            0,
            "# pinnerd 0.1.0: CPU topology and measured core-to-core latency",
        ),
        case(
            &["daemon", "--config", bad_settings, "--rules", rules],
            3,
            &format!("pinnerd: {bad_settings}:2:10: invalid type: integer `2`, expected a string"),
        ),
    ]
}

/// A string property of the daemon, without busctl's quoting (`s "ready"` is `ready`).
fn property(bus: &super::daemon::Bus, name: &str) -> String {
    let said = bus.get(name);
    let quoted = said.strip_prefix("s ").unwrap_or(&said);
    serde_json::from_str(quoted).unwrap_or_else(|e| panic!("{name} = {said}: {e}"))
}

/// The commands that ask the daemon on `bus`, on process `pid` where they take one; in
/// order, since `release` gives back what `pin` took.
fn asking(bus: &super::daemon::Bus, pid: &str) -> Vec<Case> {
    let addr = bus.address.as_str();
    // A measurement whose repeats disagreed (a busy machine) is said before the state.
    let off = property(bus, "LatencyOff");
    let status = if off.is_empty() {
        format!("state:        {}", property(bus, "State"))
    } else {
        off
    };
    vec![
        case(&["status", "--bus", addr], 0, &status),
        case(
            &["managed", "--bus", addr],
            0,
            "     PID  COMM             RULE                 CPUS         STATE",
        ),
        case(
            &["explain", "--bus", addr, pid],
            0,
            &format!("pid {pid} (sleep): no rule matches"),
        ),
        case(
            &["metrics", "--bus", addr],
            0,
            "# HELP pinnerd_info The running pinnerd's version; the value is always 1.",
        ),
        case(&["reload", "--bus", addr], 0, "0 rules loaded, 0 errors"),
        case(
            &["pin", "--bus", addr, pid, "--cpus", "0"],
            0,
            &format!("pid {pid}: pinned at run time to CPUs 0 (cpus 0)"),
        ),
        case(
            &["release", "--bus", addr, pid],
            0,
            &format!("pid {pid}: released; its threads have the CPUs they had before the pin back"),
        ),
        case(
            &["run", "--bus", addr, "--cpus", "0", "--", "echo", "ran"],
            0,
            "ran",
        ),
    ]
}

/// `remeasure` on the daemon on `bus`: it answers with the job a `Remeasure` just before
/// it started, since calls this close together join one job.
fn remeasure(bus: &super::daemon::Bus) -> Case {
    let job = bus.call("Remeasure", &[]);
    let job = job.strip_prefix("t ").unwrap_or(&job);
    case(
        &["remeasure", "--bus", &bus.address],
        0,
        &format!("measurement job {job} started"),
    )
}

/// Every subcommand run for real, once, with its exit status and the exact first line it
/// prints: those that need no daemon on fixtures, `daemon` on a bad settings file, and
/// those that ask the daemon against the real daemon on a private bus, on a process of
/// the test's. The cases cover every command the help lists, so a new command fails here
/// until it is added.
#[test]
fn every_subcommand_runs_with_its_exit_status_and_exact_first_line() {
    use super::daemon::{Bus, Daemon, Dirs, Policy};
    let _cpus = super::cpus_stay_online();
    // compare spins, and so does the daemon's first measurement.
    let _spin = super::one_spinner_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cases = alone(dir.path());
    let mut wrong: Vec<String> = cases.iter().filter_map(differs).collect();

    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let daemon = Daemon::start(&bus, &dirs);
    daemon.wait_measured(&bus, "");
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let asked = asking(&bus, &sleeper.id().to_string());
    wrong.extend(asked.iter().filter_map(differs));
    let remeasured = remeasure(&bus);
    wrong.extend(differs(&remeasured));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(daemon.stop().success(), "the daemon stops with exit 0");

    cases.extend(asked);
    cases.push(remeasured);
    let mut ran: Vec<&str> = cases.iter().map(|c| c.args[0].as_str()).collect();
    ran.sort_unstable();
    ran.dedup();
    let mut listed = listed_commands();
    listed.sort();
    assert_eq!(
        ran, listed,
        "the commands run here and those `pinnerd --help` lists"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
