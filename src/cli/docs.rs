//! Documentation generated from the command tree: the `pinnerd(8)` man page (every
//! subcommand with every flag) and the bash, zsh and fish completions. Checked in under
//! `man/` and `completions/`, shipped in the package, and compared with what this code
//! generates by `tests/it/generated.rs`, which also writes them again:
//! `SNAPSHOTS=overwrite cargo test --test it generated::`.
//!
//! The two file-format pages, `pinnerd.d(5)` and `pinnerd.toml(5)`, are written by hand
//! beside them in `man/`; a test checks they name every key the parsers accept.
//!
//! Must not touch: anything but the `clap` command tree.

use clap::{Arg, ArgAction, Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};

use super::command::Cli;
use super::exit::EXIT_CONFIG;
use super::oneshot::{EXIT_CANNOT_RUN, EXIT_NOT_FOUND};

/// The shells completions are generated for, and where each file is checked in.
pub const COMPLETIONS: &[(Shell, &str)] = &[
    (Shell::Bash, "completions/pinnerd.bash"),
    (Shell::Zsh, "completions/_pinnerd"),
    (Shell::Fish, "completions/pinnerd.fish"),
];

/// The whole command tree, as clap sees it.
pub fn command() -> Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "pinnerd", &mut out);
    out
}

/// Every subcommand below `cmd`, depth first, with its full name (`pinnerd export nfd`).
pub fn subcommands(cmd: &Command) -> Vec<(String, &Command)> {
    fn walk<'a>(prefix: &str, cmd: &'a Command, out: &mut Vec<(String, &'a Command)>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let name = format!("{prefix} {}", sub.get_name());
            out.push((name.clone(), sub));
            walk(&name, sub, out);
        }
    }
    let mut out = Vec::new();
    walk(cmd.get_name(), cmd, &mut out);
    out
}

/// The `pinnerd(8)` page: clap_mangen's title, name, synopsis, description and global
/// options, then one subsection per subcommand with every one of its arguments, then
/// files, exit status and related pages.
pub fn man_page() -> std::io::Result<String> {
    let cmd = command();
    let man = clap_mangen::Man::new(cmd.clone()).section("8");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    // clap_mangen leaves out an empty date, which shifts the footer's fields: the title
    // line is written here with every field in place.
    let title = format!(
        ".TH PINNERD 8 \"\" \"pinnerd {}\" \"System Administration\"",
        env!("CARGO_PKG_VERSION")
    );
    let mut page: String = String::from_utf8_lossy(&out)
        .lines()
        .map(|l| {
            if l.starts_with(".TH ") {
                title.as_str()
            } else {
                l
            }
        })
        .flat_map(|l| [l, "\n"])
        .collect();

    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for (name, sub) in subcommands(&cmd) {
        roff.control("SS", [name.as_str()]);
        roff.text(synopsis(&name, sub));
        if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
            roff.control("PP", []);
            paragraphs(&mut roff, &about.to_string(), "PP");
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
                continue;
            }
            roff.control("TP", []);
            roff.text(arg_heading(arg));
            let mut help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() && arg.get_action().takes_values() {
                help.push_str(&format!(" [default: {}]", defaults.join(", ")));
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() && arg.get_action().takes_values() {
                help.push_str(&format!(" [possible values: {}]", values.join(", ")));
            }
            paragraphs(&mut roff, &help, "IP");
        }
    }
    holds(&mut roff);
    roff.control("SH", ["FILES"]);
    for (file, what) in [
        (
            crate::settings::DEFAULT_SETTINGS_PATH,
            "The daemon's settings; see pinnerd.toml(5).",
        ),
        (
            crate::rules::DEFAULT_RULE_DIR,
            "Rule files, *.toml; see pinnerd.d(5).",
        ),
        (
            "/run/pinnerd/holds.json",
            "What the daemon changed for isolate and unit-cpuset rules, written before each \
             change: the next start undoes or takes over what a crash left.",
        ),
        (
            "/usr/share/doc/pinnerd/docs/",
            "The guides: rules.md, pinning.md, sharing.md (isolation), service.md and the \
             rest, as the README links them.",
        ),
    ] {
        roff.control("TP", []);
        roff.text([italic(file)]);
        roff.text([roman(what)]);
    }
    exit_status(&mut roff);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("pinnerd.d"),
        roman("(5), "),
        bold("pinnerd.toml"),
        roman("(5), "),
        bold("taskset"),
        roman("(1), "),
        bold("busctl"),
        roman("(1), "),
        bold("systemd.exec"),
        roman("(5)"),
    ]);
    page.push_str(&roff.to_roff());
    Ok(ascii_safe(&page))
}

/// The HOLDS section: what `isolate` and `unit-cpuset` change outside the rule's
/// threads, and how to see it.
fn holds(roff: &mut Roff) {
    roff.control("SH", ["HOLDS"]);
    roff.text([roman(
        "A rule with isolate = true or unit-cpuset = true (see pinnerd.d(5)) holds CPUs for \
         the systemd unit its process runs in: the unit's AllowedCPUs= (and \
         AllowedMemoryNodes=) are set at run time, and with isolate its CPUs become an \
         isolated cgroup v2 cpuset partition, written by the helper unit \
         pinnerd-partition@.service, so that no other task runs there. Such a rule must match \
         on user or unit, and a hold is made only for a process of the rule's users or for \
         the main process of a system service the rule names. Everything is undone when the \
         rule lets go. As shipped, the daemon and the helper may write only below system.slice, \
         user.slice and machine.slice: a unit in a slice of its own (Slice=trading.slice) \
         stays merely exclusive, and explain, check and plan --live say so, until both units \
         get a drop-in with ReadWritePaths=-/sys/fs/cgroup/trading.slice (see sharing.md, \
         \"A slice of its own\").",
    )]);
    roff.control("PP", []);
    roff.text([
        roman("To see a hold: "),
        bold("pinnerd explain PID"),
        roman(" prints a held: line (the unit, its AllowedCPUs=, the CPUs isolated, or why not); "),
        bold("pinnerd status"),
        roman(" prints held: with the units confined and the CPUs isolated; the bus property "),
        bold("Holds"),
        roman(" says the same ("),
        bold("busctl get-property org.pinnerd.Pinnerd1 /org/pinnerd/Pinnerd1 org.pinnerd.Pinnerd1 Holds"),
        roman("); the kernel lists isolated CPUs in "),
        italic("/sys/fs/cgroup/cpuset.cpus.isolated"),
        roman(". "),
        bold("pinnerd plan --live"),
        roman(" says what would be held, changing nothing."),
    ]);
}

/// The EXIT STATUS section: every status the binary exits with
/// (`tests/it/manpages.rs` checks them against the binary).
fn exit_status(roff: &mut Roff) {
    roff.control("SH", ["EXIT STATUS"]);
    for (code, what) in [
        ("0".to_string(), "Success.".to_string()),
        (
            "1".to_string(),
            "Any other error; the message on standard error says which.".to_string(),
        ),
        (
            "2".to_string(),
            "The command line is wrong: an unknown subcommand or flag, or a missing or \
             malformed value."
                .to_string(),
        ),
        (
            EXIT_CONFIG.to_string(),
            "The rules or settings are invalid (check, the daemon at start; for reload: \
             the daemon reports rule errors)."
                .to_string(),
        ),
        (
            EXIT_CANNOT_RUN.to_string(),
            "run: the command was found but cannot be run.".to_string(),
        ),
        (
            EXIT_NOT_FOUND.to_string(),
            "run: the command was not found. Otherwise run replaces itself with the \
             command, whose exit status is then the command's own."
                .to_string(),
        ),
    ] {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(what)]);
    }
}

/// The page with the few non-ASCII characters of the help texts written as groff
/// understands them in every locale: `man` under `LC_ALL=C` renders with `-Tascii`,
/// which has no glyph for U+2026 and warns. `\&` keeps a leading "..." from reading as
/// a request.
fn ascii_safe(page: &str) -> String {
    page.replace('…', "\\&...").replace('≈', "\\(~~")
}

/// `pinnerd sub [OPTIONS] <ARG>…` in bold and italics.
fn synopsis(name: &str, sub: &Command) -> Vec<Inline> {
    let mut line = vec![bold(name)];
    for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
        if matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
            continue;
        }
        line.push(roman(" "));
        let mut piece = arg_heading(arg);
        if !arg.is_required_set() {
            piece.insert(0, roman("["));
            piece.push(roman("]"));
        }
        line.extend(piece);
    }
    if sub.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
    }
    line
}

/// `-c, --count N` or `FILE` for a positional.
fn arg_heading(arg: &Arg) -> Vec<Inline> {
    let mut out = Vec::new();
    if let Some(s) = arg.get_short() {
        out.push(bold(format!("-{s}")));
    }
    if let Some(l) = arg.get_long() {
        if !out.is_empty() {
            out.push(roman(", "));
        }
        out.push(bold(format!("--{l}")));
    }
    if arg.get_action().takes_values() {
        let names: Vec<String> = match arg.get_value_names() {
            Some(v) => v.iter().map(|s| s.to_string()).collect(),
            None => vec![arg.get_id().as_str().to_uppercase()],
        };
        if !out.is_empty() {
            out.push(roman(" "));
        }
        out.push(italic(names.join(" ")));
        if matches!(arg.get_action(), ArgAction::Append)
            || arg.get_num_args().is_some_and(|n| n.max_values() > 1)
        {
            out.push(roman("..."));
        }
    }
    out
}

/// Text with blank lines as paragraph breaks (`break`: `PP` in a section, `IP` inside
/// an option's tagged paragraph).
fn paragraphs(roff: &mut Roff, text: &str, brk: &str) {
    let paras: Vec<&str> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for (i, para) in paras.iter().enumerate() {
        if i > 0 {
            roff.control(brk, []);
        }
        roff.text([roman(para.replace('\n', " "))]);
    }
}
