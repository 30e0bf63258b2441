//! The man pages under `man/`: `pinnerd(8)` documents every subcommand and every flag of
//! the clap command tree, `pinnerd.d(5)` every key the rule parser accepts and
//! `pinnerd.toml(5)` every key the settings parser accepts (both key lists found by
//! asking the parsers, never written down here), `man` renders each page without a
//! warning, and the EXAMPLE of each file-format page is a file `pinnerd check` accepts.

use std::path::PathBuf;
use std::process::Command;

use super::generated::REGENERATE;

fn page(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("man")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How roff spells `s` on a page: `-` is written `\-`.
fn roff(s: &str) -> String {
    s.replace('-', "\\-")
}

#[test]
fn every_page_renders_without_warnings() {
    // In a UTF-8 locale and in the C locale, where man renders with -Tascii and warns
    // on every character that has no ASCII form.
    for (name, locale) in ["pinnerd.8", "pinnerd.d.5", "pinnerd.toml.5"]
        .into_iter()
        .flat_map(|n| [(n, "C.UTF-8"), (n, "C")])
    {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("man")
            .join(name);
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(&path)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .env("LC_ALL", locale)
            .output()
            .expect("run man (is man-db installed?)");
        assert!(out.status.success(), "man -l {name}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.is_empty(),
            "LC_ALL={locale} man --warnings -l {name}:\n{stderr}"
        );
        // The title line, e.g. `PINNERD.D(5)`, is never bold.
        let (stem, section) = name.rsplit_once('.').unwrap();
        let title = format!("{}({section})", stem.to_uppercase());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&title), "{name} rendered to:\n{text}");
    }
}

#[test]
fn pinnerd_8_names_every_subcommand_and_flag() {
    let page = page("pinnerd.8");
    let cmd = pinnerd::cli::docs::command();
    let subs = pinnerd::cli::docs::subcommands(&cmd);
    assert!(subs.len() >= 15, "only {} subcommands found", subs.len());
    for (name, sub) in &subs {
        let heading = format!(".SS \"{name}\"\n");
        let Some(start) = page.find(&heading) else {
            panic!(
                "man/pinnerd.8 has no section for `{name}`; regenerate it with:\n    {REGENERATE}"
            );
        };
        let body = &page[start + heading.len()..];
        let section = &body[..body.find("\n.S").unwrap_or(body.len())];
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let spelled = match (arg.get_long(), arg.is_positional()) {
                (Some("help" | "version"), _) => continue,
                (Some(long), _) => format!("\\fB\\-\\-{}\\fR", roff(long)),
                (None, true) => roff(
                    &arg.get_value_names()
                        .and_then(|v| v.first().map(|s| s.to_string()))
                        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase()),
                ),
                (None, false) => format!("\\fB\\-{}\\fR", arg.get_short().unwrap()),
            };
            assert!(
                section.contains(&spelled),
                "man/pinnerd.8, `{name}`: {spelled} is missing; regenerate it with:\n    {REGENERATE}"
            );
        }
    }
}

/// A place in a TOML document: the tables leading to it, each a table or an array of
/// tables.
#[derive(Debug, Clone)]
struct TablePath(Vec<(String, bool)>);

impl TablePath {
    /// A document that opens this table and puts an unknown key in it.
    fn probe(&self) -> String {
        let mut doc = String::new();
        for i in 0..self.0.len() {
            let dotted: Vec<&str> = self.0[..=i].iter().map(|(n, _)| n.as_str()).collect();
            let dotted = dotted.join(".");
            if self.0[i].1 {
                doc.push_str(&format!("[[{dotted}]]\n"));
            } else {
                doc.push_str(&format!("[{dotted}]\n"));
            }
        }
        doc.push_str("zz_not_a_key = 1\n");
        doc
    }

    fn child(&self, name: &str, array: bool) -> TablePath {
        let mut p = self.0.clone();
        p.push((name.to_string(), array));
        TablePath(p)
    }

    /// `[measure]`, `[rule.match]` or `[[rule.threads]]`.
    fn header(&self) -> String {
        let dotted: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        match self.0.last() {
            Some((_, true)) => format!("[[{}]]", dotted.join(".")),
            _ => format!("[{}]", dotted.join(".")),
        }
    }
}

/// The keys a table accepts, from the parser's own "unknown field" message.
fn accepted(parse: &dyn Fn(&str) -> Result<(), String>, at: &TablePath) -> Option<Vec<String>> {
    let err = parse(&at.probe()).err()?;
    if !err.contains("unknown field `zz_not_a_key`") {
        return None;
    }
    let list = &err[err.find("expected").unwrap_or(err.len())..];
    Some(
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Every table and every key below `at`, found by asking the parser: a key is a table
/// (or an array of tables) when opening it as one and putting an unknown key inside gets
/// the "unknown field" error back.
fn key_tree(
    parse: &dyn Fn(&str) -> Result<(), String>,
    at: &TablePath,
    tables: &mut Vec<TablePath>,
    keys: &mut Vec<(TablePath, String)>,
) {
    let names = accepted(parse, at)
        .unwrap_or_else(|| panic!("the parser reports no known keys for {}", at.probe()));
    for name in names {
        let as_table = at.child(&name, false);
        let as_array = at.child(&name, true);
        if accepted(parse, &as_table).is_some() {
            tables.push(as_table.clone());
            key_tree(parse, &as_table, tables, keys);
        } else if accepted(parse, &as_array).is_some() {
            tables.push(as_array.clone());
            key_tree(parse, &as_array, tables, keys);
        } else {
            keys.push((at.clone(), name));
        }
    }
}

/// Checks that `page` names every table and key the parser accepts.
fn page_names_every_key(page_name: &str, parse: &dyn Fn(&str) -> Result<(), String>) -> usize {
    let page = page(page_name);
    let mut tables = Vec::new();
    let mut keys = Vec::new();
    key_tree(parse, &TablePath(Vec::new()), &mut tables, &mut keys);
    for t in &tables {
        let header = roff(&t.header());
        assert!(
            page.contains(&header),
            "man/{page_name} does not mention the table {} (write it as `{header}`)",
            t.header()
        );
    }
    for (t, key) in &keys {
        let spelled = roff(key);
        assert!(
            page.lines().any(|l| l == format!(".B {spelled}")),
            "man/{page_name} does not describe the key `{key}` of {} (a `.TP` entry with `.B {spelled}`)",
            t.header()
        );
    }
    keys.len()
}

#[test]
fn pinnerd_d_5_names_every_rule_key() {
    let parse = |text: &str| {
        pinnerd::rules::format::parse(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let n = page_names_every_key("pinnerd.d.5", &parse);
    // name, priority, six match keys, six place keys, and the thread entry's own.
    assert!(n >= 14, "only {n} rule keys found");
}

#[test]
fn pinnerd_toml_5_names_every_settings_key() {
    let parse = |text: &str| {
        toml::from_str::<pinnerd::settings::Settings>(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let n = page_names_every_key("pinnerd.toml.5", &parse);
    assert!(n >= 15, "only {n} settings keys found");
}

/// The EXIT STATUS section names every status the binary exits with: 2 for a wrong
/// command line (seen from the binary itself), 3 for invalid rules, and `run`'s 126 and
/// 127 (seen from the binary too).
#[test]
fn pinnerd_8_exit_status_names_every_status_the_binary_gives() {
    let page = page("pinnerd.8");
    let start = page
        .find(".SH \"EXIT STATUS\"")
        .or_else(|| page.find(".SH EXIT STATUS"))
        .expect("man/pinnerd.8 has an EXIT STATUS section");
    let body = &page[start..];
    let section = &body[..body[4..].find("\n.SH").map_or(body.len(), |i| i + 4)];
    let documented = |code: i32| section.contains(&format!("\\fB{code}\\fR"));
    let dir = tempfile::tempdir().unwrap();
    let not_runnable = dir.path().join("not-runnable");
    std::fs::write(&not_runnable, "").unwrap();
    let seen = [
        super::helper::pinnerd_command()
            .arg("--no-such-flag")
            .output()
            .unwrap(),
        super::helper::pinnerd_command()
            .args(["check", "--no-such-flag"])
            .output()
            .unwrap(),
        super::helper::pinnerd_command()
            .args(["run", "--print-nothing-such"])
            .output()
            .unwrap(),
        super::helper::pinnerd_command()
            .args(["run", "--", "/nonexistent/pinnerd-test-command"])
            .output()
            .unwrap(),
        super::helper::pinnerd_command()
            .args(["run", "--"])
            .arg(&not_runnable)
            .output()
            .unwrap(),
    ];
    let codes: Vec<i32> = seen.iter().filter_map(|o| o.status.code()).collect();
    assert!(
        codes.contains(&2),
        "no wrong command line gave 2: {codes:?}"
    );
    assert!(
        codes.contains(&127),
        "a missing command gave no 127: {codes:?}"
    );
    assert!(
        codes.contains(&126),
        "a file that is not runnable gave no 126: {codes:?}"
    );
    for code in codes.iter().copied().chain([0, 1, 3]) {
        assert!(
            documented(code),
            "exit status {code} is not in man/pinnerd.8's EXIT STATUS; regenerate it with:\n    {REGENERATE}\n{section}"
        );
    }
}

/// A line of a page's source as `man` shows it: `\-` is `-`, `\(dq` is `"`, `\e` is `\`.
fn unroff(line: &str) -> String {
    line.replace("\\-", "-")
        .replace("\\(dq", "\"")
        .replace("\\e", "\\")
}

/// The `.EX` … `.EE` blocks of a page's EXAMPLE section, as the reader sees them.
fn examples(page_name: &str) -> Vec<String> {
    let page = page(page_name);
    let section = page
        .split("\n.SH ")
        .find(|s| s.starts_with("EXAMPLE"))
        .unwrap_or_else(|| panic!("{page_name}: no EXAMPLE section"));
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in section.lines() {
        match (line, &mut open) {
            (".EX", None) => open = Some(String::new()),
            (".EE", Some(_)) => out.extend(open.take()),
            (line, Some(text)) => {
                text.push_str(&unroff(line));
                text.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// The examples of `pinnerd.d(5)` and `pinnerd.toml(5)`, saved as a reader would (a rule
/// file in a rule directory, the settings as `pinnerd.toml`), pass `pinnerd check`: an
/// example that names a user, a key or a value this machine lacks fails here.
#[test]
fn every_file_format_example_passes_pinnerd_check() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("pinnerd.d");
    std::fs::create_dir(&rules).unwrap();
    let settings = dir.path().join("pinnerd.toml");
    // The rule file is checked through its directory, as the daemon reads it.
    for (page_name, file, arg, says) in [
        (
            "pinnerd.d.5",
            rules.join("10-example.toml"),
            &rules,
            "ok: 1 file, 1 rule\n",
        ),
        (
            "pinnerd.toml.5",
            settings.clone(),
            &settings,
            "ok: 1 file, 0 rules\n",
        ),
    ] {
        let found = examples(page_name);
        assert_eq!(found.len(), 1, "{page_name}: {found:?}");
        std::fs::write(&file, &found[0]).unwrap();
        let arg = arg.to_str().unwrap();
        let run = super::helper::pinnerd(&["check", arg]);
        // What the boot gave this machine's CPUs is a note that depends on the machine.
        let said: String = run
            .stdout
            .lines()
            .filter(|l| !(l.contains(": note: rule ") && l.contains(": boot: ")))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            run.ok && said == says && run.stderr.is_empty(),
            "{page_name}'s EXAMPLE, as {}:\n{}\n`pinnerd check {arg}` exited {}:\n{}{}",
            file.display(),
            found[0],
            run.code,
            run.stdout,
            run.stderr
        );
    }
}

#[test]
fn examples_are_read_as_the_reader_sees_them() {
    assert_eq!(
        unroff(r#"comm = "rx\-*" \(dqa\(dq \e"#),
        r#"comm = "rx-*" "a" \"#
    );
    let page = examples("pinnerd.d.5");
    assert!(
        page[0].starts_with("[[rule]]\nname = \"md-feed\"\n"),
        "{page:?}"
    );
}
