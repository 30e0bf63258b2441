//! Every flag an error or hint message names exists on the command that prints it. The
//! messages are the string literals of each command's source file (`src/cli/NAME.rs`
//! prints for the subcommands below), and the load guard's advice, which every command
//! that may measure prints when a CPU is too busy.

use std::collections::BTreeSet;
use std::path::Path;

/// The subcommands whose messages each file under `src/cli/` prints. A message there
/// that names another command (`pinnerd measure --idle-threshold`) is checked against
/// that command instead.
const PRINTED_BY: &[(&str, &[&str])] = &[
    ("check.rs", &["check"]),
    ("compare.rs", &["compare"]),
    ("export.rs", &["export"]),
    ("fleet.rs", &["diff", "fleet"]),
    ("live.rs", &["plan"]),
    ("measure.rs", &["measure"]),
    ("oneshot.rs", &["run", "pin"]),
    ("place_flags.rs", &["run", "pin"]),
    ("plan.rs", &["plan"]),
    ("plan_pid.rs", &["plan"]),
    ("report.rs", &["report"]),
    ("topology.rs", &["topology"]),
];

/// Flags in those files that belong to other programs, not to pinnerd.
const OTHER_PROGRAMS: &[(&str, &str, &str)] = &[(
    "export.rs",
    "of",
    "lstopo-no-graphics --of xml: hwloc's own flag, in its command line and its error",
)];

/// The long flags of `sub` (a path like `export nfd` allowed), its subcommands' too, and
/// the global ones.
fn flags_of(root: &clap::Command, sub: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = root
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let Some(cmd) = root.get_subcommands().find(|c| c.get_name() == sub) else {
        panic!("no subcommand {sub}");
    };
    fn walk(c: &clap::Command, out: &mut BTreeSet<String>) {
        out.extend(
            c.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string)),
        );
        for s in c.get_subcommands() {
            walk(s, out);
        }
    }
    walk(cmd, &mut out);
    out.insert("help".into());
    out
}

/// The string literals of a Rust source file (raw strings and escapes handled well
/// enough for messages), comments skipped.
fn literals(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'\'' {
            // A char literal or a lifetime: step over a quoted character only.
            if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') {
                i += 4;
            } else {
                i += 1;
            }
        } else if b[i] == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push(src[start..i.min(b.len())].to_string());
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// `(command named before it, flag)` for each `--flag` in `text`: a flag right after
/// `pinnerd SUB ` belongs to SUB.
fn named_flags(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '`' || c == '(' || c == ',')
        .collect();
    let mut sub: Option<String> = None;
    for (i, w) in words.iter().enumerate() {
        if *w == "pinnerd" {
            sub = words.get(i + 1).map(|s| s.to_string());
            continue;
        }
        let Some(rest) = w.strip_prefix("--") else {
            continue;
        };
        let flag: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if flag.len() > 1 && flag.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            out.push((sub.clone(), flag));
        }
    }
    out
}

#[test]
fn every_flag_a_message_names_exists_on_the_command_that_prints_it() {
    let root = pinnerd::cli::docs::command();
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut checked = 0;
    let mut missing = Vec::new();
    for (file, subs) in PRINTED_BY {
        let src = std::fs::read_to_string(cli.join(file)).unwrap();
        for lit in literals(&src) {
            for (named_sub, flag) in named_flags(&lit) {
                if OTHER_PROGRAMS
                    .iter()
                    .any(|(f, o, _)| f == file && *o == flag)
                {
                    continue;
                }
                // A message naming a command is checked against it; else against the
                // commands this file prints for (code they share: one of them).
                let owners: Vec<&str> = match &named_sub {
                    Some(s) if root.get_subcommands().any(|c| c.get_name() == s) => vec![s],
                    _ => subs.to_vec(),
                };
                checked += 1;
                if !owners
                    .iter()
                    .any(|sub| flags_of(&root, sub).contains(&flag))
                {
                    missing.push(format!(
                        "src/cli/{file}: no --{flag} on `pinnerd {}`: {lit:?}",
                        owners.join("` or `pinnerd ")
                    ));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} flags found in messages");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every command that may measure (its own matrix when none is stored) prints the load
/// guard's advice when a CPU stays too busy; the flag that advice names is one it takes.
#[test]
fn the_busy_advice_names_a_flag_of_every_command_that_may_measure() {
    let advice = pinnerd::measure::MeasureError::Busy {
        cpu: 1,
        idle_pct: 10.0,
        threshold_pct: 75.0,
        waited: std::time::Duration::from_secs(10),
        set_by: pinnerd::measure::LoadGuard::default().set_by,
    }
    .to_string();
    let flags = named_flags(&advice);
    assert!(!flags.is_empty(), "{advice}");
    let root = pinnerd::cli::docs::command();
    for sub in ["measure", "plan", "report", "compare"] {
        for (_, flag) in &flags {
            assert!(
                flags_of(&root, sub).contains(flag),
                "`pinnerd {sub}` may measure and then advises --{flag}, which it does not take: {advice}"
            );
        }
    }
}
