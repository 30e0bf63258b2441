//! The binary starts, its help lists every command, and every command answers its help
//! with exit status 0 and its own first line.

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
