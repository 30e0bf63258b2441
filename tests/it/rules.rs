//! Rule files, settings and `pinnerd check`, on real files in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};

use pinnerd::rules::{self, FileOutcome, LoadPolicy, ProcessInfo};
use pinnerd::settings::Settings;

use super::helper::{pinnerd, Run};

pub(super) fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

pub(super) fn rule(name: &str, comm: &str) -> String {
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
    assert_eq!(report.rules.len(), 11);
}

#[test]
fn the_settings_example_is_exactly_the_defaults() {
    let path = repo("config/pinnerd.toml");
    let s = Settings::load(&path, &LoadPolicy::unchecked()).unwrap();
    assert_eq!(s, Settings::default());
}

#[test]
fn check_passes_on_the_shipped_config() {
    let Run {
        code,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "check",
        "--no-permissions",
        repo("config/pinnerd.toml").to_str().unwrap(),
        repo("config/pinnerd.d").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    // Doubts depend on the machine's CPUs: warnings only, before the verdict; so does
    // what the boot gave the CPUs of the exclusive rules: a note for each.
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.pop(), Some("ok: 8 files, 11 rules"), "{out}");
    let (notes, others): (Vec<&str>, Vec<&str>) = lines
        .iter()
        .partition(|l| l.contains(": note: rule ") && l.contains(": boot: "));
    assert!(others.iter().all(|l| l.contains(": warning: ")), "{out}");
    let exclusive = ["md-feed", "game-server", "dpdk-l3fwd"];
    for name in exclusive {
        assert!(
            notes
                .iter()
                .any(|l| l.contains(&format!(": note: rule {name}: boot: "))),
            "{name}: {out}"
        );
    }
}

/// `check DIR` reads what the daemon reads from DIR: the files directly inside. A
/// subdirectory holding rule files is named as not read, never counted.
#[test]
fn check_loads_the_files_the_daemon_loads_and_names_a_subdirectory_it_skips() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("old")).unwrap();
    fs::write(dir.path().join("a.toml"), rule("a", "a")).unwrap();
    fs::write(dir.path().join("old/b.toml"), rule("b", "b")).unwrap();
    let Run {
        code,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&["check", "--no-permissions", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let d = dir.path().display();
    assert_eq!(
        out,
        format!(
            "note: {d}/old: not read: the daemon loads only the *.toml files directly inside a rule directory\n\
             ok: 1 file, 1 rule\n"
        )
    );
    let report = pinnerd::rules::load_dirs(&[dir.path().to_path_buf()], &LoadPolicy::unchecked());
    assert_eq!(report.files.len(), 1);
}

#[test]
fn check_prints_every_problem_and_exits_with_the_config_code() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("a.toml"), rule("a", "x[")).unwrap();
    fs::write(dir.path().join("sub/b.toml"), "[[rule]]\nname = 5\n").unwrap();
    fs::write(dir.path().join("sub/c.toml"), rule("ok", "ok")).unwrap();
    fs::write(dir.path().join("notes.txt"), "not a rule file").unwrap();
    let Run {
        code,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&[
        "check",
        dir.path().to_str().unwrap(),
        dir.path().join("sub").to_str().unwrap(),
    ]);
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
    let Run {
        code, stderr: err, ..
    } = pinnerd(&["check", "/nonexistent/pinnerd.d"]);
    assert_eq!(code, 3);
    assert!(
        err.starts_with("/nonexistent/pinnerd.d: cannot read: No such file or directory"),
        "{err}"
    );
    // The summary says what was wrong, not that no file was rejected.
    assert!(err.contains("1 problem (1 path not found)"), "{err}");
    assert!(!err.contains("0 of 0 files"), "{err}");
}

/// The daemon's rule directory not existing yet is what the daemon treats as no rules
/// (it reads the directory once it appears): `check` with no path says the same and
/// passes, and `plan --pid` says there are no rules rather than that none matches. Run
/// in a mount namespace whose /etc is an empty tmpfs, so /etc/pinnerd.d surely does not
/// exist whatever this machine has.
#[test]
fn a_missing_default_rule_directory_is_no_rules_for_check_and_plan_as_for_the_daemon() {
    let script = format!(
        "mount -t tmpfs none /etc && {bin} check; echo \"check=$?\"; \
         {bin} plan --pid $$ --config /nonexistent/pinnerd.toml; echo \"plan=$?\"",
        bin = super::helper::PINNERD
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux)");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("check=0"), "{all}");
    assert!(
        all.contains("ok: /etc/pinnerd.d does not exist: no rules; the daemon runs with none"),
        "{all}"
    );
    assert!(
        all.contains("no rules: /etc/pinnerd.d does not exist; give --count"),
        "{all}"
    );
    assert!(!all.contains("no rule in /etc/pinnerd.d matches"), "{all}");
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
    let d = dir.path().display();
    fs::write(dir.path().join("d.toml"), rule("feed", "md-feed2")).unwrap();
    let fourth = rules::reload(&dirs, &policy, &third);
    assert_eq!(
        fourth.rules.get("feed").unwrap().file,
        dir.path().join("d.toml")
    );
    assert!(fourth.error_strings().contains(&format!(
        "{d}/a.toml: the last good version of this file cannot be kept: rule \"feed\" is now defined at {d}/d.toml:2:8",
    )));

    // A later reload, a.toml still broken: the loss is still said, not only the error
    // in the file.
    let later = rules::reload(&dirs, &policy, &fourth);
    assert_eq!(later.rules.len(), 2);
    assert_eq!(
        later.error_strings(),
        [
            format!("{d}/a.toml:1:8: unclosed array table, expected `]`"),
            format!(
                "{d}/a.toml: the last good version of this file cannot be kept: rule \"feed\" is now defined at {d}/d.toml:2:8 (at an earlier reload)"
            ),
        ],
        "{:?}",
        later.error_strings()
    );

    // Fixed: loaded fresh.
    fs::write(dir.path().join("a.toml"), rule("feed-a", "md-feed")).unwrap();
    let fifth = rules::reload(&dirs, &policy, &later);
    assert!(fifth.is_clean(), "{:?}", fifth.error_strings());
    assert_eq!(fifth.rules.len(), 3);
}

#[test]
fn the_rule_set_is_bounded_as_a_whole_and_the_files_before_keep_their_rules() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = [dir.path().to_path_buf()];
    let one = rule("a", "a").len() as u64;
    let policy = LoadPolicy {
        max_set_size: 3 * one,
        ..LoadPolicy::unchecked()
    };
    for name in ["a", "b", "c", "d"] {
        fs::write(dir.path().join(format!("{name}.toml")), rule(name, name)).unwrap();
    }
    let first = rules::load_dirs(&dirs, &policy);
    let names = |r: &rules::LoadReport| -> Vec<String> {
        r.rules.rules().iter().map(|r| r.name.clone()).collect()
    };
    assert_eq!(names(&first), ["a", "b", "c"]);
    assert_eq!(
        first.error_strings(),
        [format!(
            "{}/d.toml: refused: its {one} bytes do not fit in what is left (0 bytes) of the {} bytes the rule set's files may take together",
            dir.path().display(),
            3 * one
        )]
    );
    assert_eq!(first.files[3].1, FileOutcome::Rejected);

    // b.toml goes bad: its last good version is kept, within the bound.
    fs::write(dir.path().join("b.toml"), "[[rule]\n").unwrap();
    let second = rules::reload(&dirs, &policy, &first);
    assert_eq!(names(&second), ["a", "b", "c"]);
    assert_eq!(second.files[1].1, FileOutcome::KeptPrevious(1));

    // d.toml is removed and a.toml grows into b's share: the grown file is refused
    // and its last good version kept, so every rule that worked still does.
    fs::remove_file(dir.path().join("d.toml")).unwrap();
    let two = format!("{}{}", rule("a", "a"), rule("e", "e"));
    fs::write(dir.path().join("a.toml"), &two).unwrap();
    let third = rules::reload(&dirs, &policy, &second);
    assert_eq!(names(&third), ["a", "b", "c"]);
    assert_eq!(third.files[0].1, FileOutcome::KeptPrevious(1));
    assert!(third.error_strings().contains(&format!(
        "{}/a.toml: refused: its {} bytes do not fit in what is left ({one} bytes) of the {} bytes the rule set's files may take together",
        dir.path().display(),
        2 * one,
        3 * one
    )), "{:?}", third.error_strings());

    // b.toml is removed: a.toml's new version fits.
    fs::remove_file(dir.path().join("b.toml")).unwrap();
    let fourth = rules::reload(&dirs, &policy, &third);
    assert!(fourth.is_clean(), "{:?}", fourth.error_strings());
    assert_eq!(names(&fourth), ["a", "c", "e"]);
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
fn check_and_the_daemon_agree_on_a_symlinked_rule_directory() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("pinnerd.d-v2");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(real.join("a.toml"), rule("a", "a")).unwrap();
    let link = tmp.path().join("pinnerd.d");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let policy = LoadPolicy::owned_by(nix::unistd::geteuid().as_raw());
    let daemon = rules::load_dirs(std::slice::from_ref(&link), &policy);
    assert!(daemon.is_clean(), "{:?}", daemon.error_strings());
    assert_eq!(daemon.rules.len(), 1);
    let mut errors = Vec::new();
    let files = rules::collect_paths(std::slice::from_ref(&link), &policy, &mut errors);
    let check = rules::load_collected(&files, &policy, errors);
    assert!(check.is_clean(), "{:?}", check.error_strings());
    assert_eq!(check.files, daemon.files);
    let r = pinnerd(&["check", link.to_str().unwrap()]);
    assert_eq!(
        (r.code, r.stdout.trim()),
        (0, "ok: 1 file, 1 rule"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_rule_directory_that_becomes_untrusted_keeps_the_last_good_rules() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pinnerd.d");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("a.toml"), rule("a", "a")).unwrap();
    fs::write(dir.join("b.toml"), rule("b", "b")).unwrap();
    let dirs = vec![dir.clone()];
    let policy = LoadPolicy::owned_by(nix::unistd::geteuid().as_raw());
    let first = rules::load_dirs(&dirs, &policy);
    assert_eq!(first.rules.len(), 2);
    // Group-writable: nothing in it is read any more, and nothing is dropped either.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o775)).unwrap();
    fs::write(dir.join("a.toml"), rule("a-new", "x")).unwrap();
    let second = rules::reload(&dirs, &policy, &first);
    assert_eq!(second.rules.len(), 2, "{:?}", second.error_strings());
    let names: Vec<&str> = second
        .rules
        .rules()
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["a", "b"],
        "the untrusted directory's new content is not read"
    );
    assert!(
        second.error_strings()[0].contains("writable by group"),
        "{:?}",
        second.error_strings()
    );
    assert_eq!(
        second.files,
        vec![
            (dir.join("a.toml"), FileOutcome::KeptPrevious(1)),
            (dir.join("b.toml"), FileOutcome::KeptPrevious(1)),
        ]
    );
    // Kept across further reloads, and replaced once the directory is fixed.
    let third = rules::reload(&dirs, &policy, &second);
    assert_eq!(third.rules.len(), 2);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let fixed = rules::reload(&dirs, &policy, &third);
    assert!(fixed.is_clean(), "{:?}", fixed.error_strings());
    let names: Vec<&str> = fixed
        .rules
        .rules()
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["a-new", "b"]);
    // A directory removed altogether still holds no rules.
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(rules::reload(&dirs, &policy, &fixed).rules.len(), 0);
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

/// Every case under `tests/rules_corpus/` (a `.toml` file, or a directory of them loaded
/// together) is invalid, and its problems are exactly those in `CASE.expected`, paths
/// relative to the corpus. `SNAPSHOTS=overwrite` rewrites the expected files (review the
/// diff!).
#[test]
fn the_bad_rule_corpus_fails_with_exact_messages_and_locations() {
    let corpus = repo("tests/rules_corpus");
    let bless = super::snapshots::overwrite();
    let mut entries: Vec<PathBuf> = fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "toml"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 100, "only {} cases", entries.len());
    let prefix = format!("{}/", corpus.display());
    let mut failures = Vec::new();
    for case in &entries {
        let report = rules::load_paths(std::slice::from_ref(case), &LoadPolicy::unchecked());
        let got: String = report
            .error_strings()
            .iter()
            .map(|e| e.replace(&prefix, "") + "\n")
            .collect();
        let expected_path = case.with_extension("expected");
        if bless {
            fs::write(&expected_path, &got).unwrap();
            continue;
        }
        assert!(!got.is_empty(), "{} loaded without error", case.display());
        let expected = fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        if got != expected {
            failures.push(format!(
                "{}:\n  expected: {expected:?}\n  got:      {got:?}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn check_validates_a_settings_file_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("pinnerd.toml"),
        "[watch]\nrescan-interval = \"soon\"\n",
    )
    .unwrap();
    fs::write(dir.path().join("a.toml"), rule("a", "a")).unwrap();
    let Run {
        code,
        stdout: out,
        stderr: err,
        ..
    } = pinnerd(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(code, 3, "stdout: {out}\nstderr: {err}");
    assert_eq!(
        err,
        format!(
            "{}/pinnerd.toml:2:19: invalid duration \"soon\": expected a duration like \"500ms\", \"30s\", \"10m\", \"2h\" or \"7d\", or \"off\"\n\
             pinnerd: 1 problem (1 of 2 files rejected)\n",
            dir.path().display()
        )
    );
    fs::write(
        dir.path().join("pinnerd.toml"),
        "[watch]\nrescan-interval = \"off\"\n",
    )
    .unwrap();
    let Run {
        code, stdout: out, ..
    } = pinnerd(&["check", dir.path().to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (0, "ok: 2 files, 1 rule\n"));
}
