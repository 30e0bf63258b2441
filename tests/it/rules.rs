//! Rule files, settings and `pinnerd check`, on real files in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use pinnerd::rules::{self, FileOutcome, LoadPolicy, ProcessInfo};
use pinnerd::settings::Settings;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn pinnerd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pinnerd"))
        .args(args)
        .output()
        .expect("run pinnerd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rule(name: &str, comm: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\n[rule.match]\ncomm = \"{comm}\"\n[rule.place]\ncount = 1\n"
    )
}

#[test]
fn every_example_in_config_loads() {
    let dir = repo("config/pinnerd.d");
    let mut seen = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let rules = rules::compile_text(&path, &text, &LoadPolicy::unchecked())
            .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        assert!(!rules.is_empty(), "{} has no rules", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "expected one example per use case, found {seen}");
    let report = rules::load_dirs(&[dir], &LoadPolicy::unchecked());
    assert!(report.is_clean(), "{:?}", report.error_strings());
    assert_eq!(report.rules.len(), 6);
}

#[test]
fn the_settings_example_is_exactly_the_defaults() {
    let path = repo("config/pinnerd.toml");
    let s = Settings::load(&path, &LoadPolicy::unchecked()).unwrap();
    assert_eq!(s, Settings::default());
}

#[test]
fn check_passes_on_the_shipped_config() {
    let (code, out, err) = pinnerd(&[
        "check",
        "--no-permissions",
        repo("config").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(out, "ok: 6 files, 6 rules\n");
}

#[test]
fn check_prints_every_problem_and_exits_with_the_config_code() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("a.toml"), rule("a", "x[")).unwrap();
    fs::write(dir.path().join("sub/b.toml"), "[[rule]]\nname = 5\n").unwrap();
    fs::write(dir.path().join("sub/c.toml"), rule("ok", "ok")).unwrap();
    fs::write(dir.path().join("notes.txt"), "not a rule file").unwrap();
    let (code, out, err) = pinnerd(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(code, 3, "stdout: {out}\nstderr: {err}");
    let d = dir.path().display();
    assert_eq!(
        err,
        format!(
            "{d}/a.toml:4:8: comm: bad glob \"x[\": unclosed character class; missing ']'\n\
             {d}/sub/b.toml:2:8: invalid type: integer `5`, expected a string\n\
             pinnerd: 2 problems (2 of 3 files rejected)\n"
        )
    );
}

#[test]
fn check_of_a_missing_path_fails() {
    let (code, _, err) = pinnerd(&["check", "/nonexistent/pinnerd.d"]);
    assert_eq!(code, 3);
    assert!(
        err.starts_with("/nonexistent/pinnerd.d: cannot read: No such file or directory"),
        "{err}"
    );
}

#[test]
fn a_bad_file_is_rejected_whole_and_others_still_load() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("10-good.toml"),
        rule("good", "good*") + &rule("good2", "other"),
    )
    .unwrap();
    fs::write(
        dir.path().join("20-bad.toml"),
        rule("fine-in-bad-file", "fine") + &rule("broken", "a{"),
    )
    .unwrap();
    let report = rules::load_dirs(&[dir.path().to_path_buf()], &LoadPolicy::unchecked());
    let names: Vec<_> = report
        .rules
        .rules()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(names, ["good", "good2"]);
    assert_eq!(report.errors.len(), 1);
    assert_eq!(
        report.files,
        vec![
            (dir.path().join("10-good.toml"), FileOutcome::Loaded(2)),
            (dir.path().join("20-bad.toml"), FileOutcome::Rejected),
        ]
    );
}

#[test]
fn reload_keeps_the_last_good_version_of_a_file_that_went_bad() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = [dir.path().to_path_buf()];
    let policy = LoadPolicy::unchecked();
    fs::write(dir.path().join("a.toml"), rule("feed", "md-feed")).unwrap();
    fs::write(dir.path().join("b.toml"), rule("db", "postgres")).unwrap();
    let first = rules::load_dirs(&dirs, &policy);
    assert!(first.is_clean());

    // a.toml gets a typo, b.toml is deleted, c.toml is new.
    fs::write(dir.path().join("a.toml"), "[[rule]\nname = \"feed\"\n").unwrap();
    fs::remove_file(dir.path().join("b.toml")).unwrap();
    fs::write(dir.path().join("c.toml"), rule("game", "game*")).unwrap();
    let second = rules::reload(&dirs, &policy, &first);
    let names: Vec<_> = second
        .rules
        .rules()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(names, ["feed", "game"]);
    assert_eq!(
        second.files,
        vec![
            (dir.path().join("a.toml"), FileOutcome::KeptPrevious(1)),
            (dir.path().join("c.toml"), FileOutcome::Loaded(1)),
        ]
    );
    assert_eq!(second.errors.len(), 1);
    assert_eq!(
        second.error_strings(),
        [format!(
            "{}/a.toml:1:8: unclosed array table, expected `]`",
            dir.path().display()
        )]
    );
    let p = ProcessInfo {
        comm: "md-feed".into(),
        ..ProcessInfo::default()
    };
    assert_eq!(second.rules.match_process(&p).unwrap().rule.name, "feed");

    // Still bad on the next reload: still kept (the last *good* version is remembered).
    let third = rules::reload(&dirs, &policy, &second);
    assert_eq!(third.rules.len(), 2);

    // The rule moves to a new file while a.toml stays broken: the fresh file wins and
    // the stale version is dropped, saying why.
    fs::write(dir.path().join("d.toml"), rule("feed", "md-feed2")).unwrap();
    let fourth = rules::reload(&dirs, &policy, &third);
    assert_eq!(
        fourth.rules.get("feed").unwrap().file,
        dir.path().join("d.toml")
    );
    assert!(fourth.error_strings().contains(&format!(
        "{d}/a.toml: the last good version of this file cannot be kept: rule \"feed\" is now defined at {d}/d.toml:2:8",
        d = dir.path().display()
    )));

    // Fixed: loaded fresh.
    fs::write(dir.path().join("a.toml"), rule("feed-a", "md-feed")).unwrap();
    let fifth = rules::reload(&dirs, &policy, &fourth);
    assert!(fifth.is_clean(), "{:?}", fifth.error_strings());
    assert_eq!(fifth.rules.len(), 3);
}

#[test]
fn duplicate_names_across_files_reject_the_later_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.toml"), rule("same", "a")).unwrap();
    fs::write(dir.path().join("b.toml"), rule("same", "b")).unwrap();
    let report = rules::load_dirs(&[dir.path().to_path_buf()], &LoadPolicy::unchecked());
    let d = dir.path().display();
    assert_eq!(
        report.error_strings(),
        [format!(
            "{d}/b.toml:2:8: duplicate rule name \"same\" (first defined at {d}/a.toml:2:8)"
        )]
    );
    assert_eq!(
        report.rules.get("same").unwrap().file,
        dir.path().join("a.toml")
    );
}

#[test]
fn a_missing_rule_directory_holds_no_rules() {
    let report = rules::load_dirs(
        &[PathBuf::from("/nonexistent/pinnerd.d")],
        &LoadPolicy::unchecked(),
    );
    assert!(report.is_clean());
    assert!(report.rules.is_empty());
}
