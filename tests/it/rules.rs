//! Rule files, settings and `pinnerd check`, on real files in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};

use pinnerd::rules::{self, FileOutcome, LoadPolicy, ProcessInfo};
use pinnerd::settings::Settings;

use super::helper::{pinnerd, Run};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
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
    assert_eq!(report.rules.len(), 10);
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
    // Doubts depend on the machine's CPUs: warnings only, before the verdict.
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.pop(), Some("ok: 7 files, 10 rules"), "{out}");
    assert!(lines.iter().all(|l| l.contains(": warning: ")), "{out}");
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
/// relative to the corpus. `PINNERD_BLESS=1` rewrites the expected files (review the
/// diff!).
#[test]
fn the_bad_rule_corpus_fails_with_exact_messages_and_locations() {
    let corpus = repo("tests/rules_corpus");
    let bless = std::env::var_os("PINNERD_BLESS").is_some();
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

// ---- Files the loader must refuse before parsing. Git cannot hold these, so each test
// ---- makes its own in a temporary directory. Device nodes need root (CI runs as root).

mod unsafe_files {
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    use pinnerd::rules::{self, LoadPolicy, LoadReport, MAX_FILE_SIZE};

    use super::rule;

    /// Loads `dir` on another thread so that a loader that blocks (on a FIFO, say)
    /// fails the test instead of hanging it.
    fn load(dir: &Path, policy: LoadPolicy) -> LoadReport {
        let (tx, rx) = mpsc::channel();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(rules::load_dirs(&[dir], &policy));
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("loading blocked: the loader must never hang")
    }

    fn errors(dir: &Path, policy: LoadPolicy) -> Vec<String> {
        let d = format!("{}/", dir.display());
        load(dir, policy)
            .error_strings()
            .iter()
            .map(|e| e.replace(&d, "DIR/"))
            .collect()
    }

    fn euid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    const WRITABLE: &str = "rule files and their directory must not be writable by group or others";

    #[test]
    fn group_writable_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        fs::write(&f, rule("a", "a")).unwrap();
        chmod(&f, 0o664);
        assert_eq!(
            errors(dir.path(), LoadPolicy::owned_by(euid())),
            [format!(
                "DIR/a.toml: refused: file is writable by group (S_IWGRP) (mode 0664); {WRITABLE}"
            )]
        );
        // Without ownership checks (not running as root) the same file loads.
        assert!(load(dir.path(), LoadPolicy::unchecked()).is_clean());
    }

    #[test]
    fn other_writable_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        fs::write(&f, rule("a", "a")).unwrap();
        chmod(&f, 0o606);
        assert_eq!(
            errors(dir.path(), LoadPolicy::owned_by(euid())),
            [format!(
                "DIR/a.toml: refused: file is writable by others (S_IWOTH) (mode 0606); {WRITABLE}"
            )]
        );
    }

    #[test]
    fn group_and_other_writable_directory_refuses_every_file_in_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.toml"), rule("a", "a")).unwrap();
        chmod(dir.path(), 0o777);
        let d = dir.path().display();
        let report = load(dir.path(), LoadPolicy::owned_by(euid()));
        assert_eq!(
            report.error_strings(),
            [format!(
                "{d}: refused: directory is writable by group and others (S_IWGRP, S_IWOTH) (mode 0777); {WRITABLE}"
            )]
        );
        assert!(report.rules.is_empty());
        chmod(dir.path(), 0o700);
    }

    #[test]
    fn file_and_directory_owned_by_someone_else() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.toml"), rule("a", "a")).unwrap();
        let other = euid() + 4242;
        let d = dir.path().display();
        assert_eq!(
            load(dir.path(), LoadPolicy::owned_by(other)).error_strings(),
            [format!(
                "{d}: refused: directory is owned by uid {}, expected uid {other}",
                euid()
            )]
        );
        // A directory owned by the expected user holding a file that is not.
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        fs::write(sub.join("b.toml"), rule("b", "b")).unwrap();
        if euid() == 0 {
            nix::unistd::chown(&sub, Some(nix::unistd::Uid::from_raw(other)), None).unwrap();
            assert_eq!(
                errors(&sub, LoadPolicy::owned_by(other)),
                [format!(
                    "DIR/b.toml: refused: file is owned by uid 0, expected uid {other}"
                )]
            );
            // Every problem with the file is reported, not just the first.
            chmod(&sub.join("b.toml"), 0o646);
            assert_eq!(
                errors(&sub, LoadPolicy::owned_by(other)),
                [
                    format!("DIR/b.toml: refused: file is owned by uid 0, expected uid {other}"),
                    format!("DIR/b.toml: refused: file is writable by others (S_IWOTH) (mode 0646); {WRITABLE}"),
                ]
            );
        } else {
            // Without root we cannot give the directory away; the file check is the
            // same code path, exercised above through the directory.
            assert_eq!(errors(&sub, LoadPolicy::owned_by(other)).len(), 1);
        }
    }

    #[test]
    fn symlinks_inside_the_directory_are_followed_outside_refused() {
        let outer = tempfile::tempdir().unwrap();
        let dir = outer.path().join("pinnerd.d");
        fs::create_dir_all(dir.join("shared")).unwrap();
        fs::write(dir.join("shared/real.toml.in"), rule("inside", "in")).unwrap();
        fs::write(outer.path().join("outside.toml"), rule("outside", "out")).unwrap();
        symlink("shared/real.toml.in", dir.join("10-inside.toml")).unwrap();
        symlink("../outside.toml", dir.join("20-outside.toml")).unwrap();
        symlink("/dev/null", dir.join("30-null.toml")).unwrap();
        symlink("missing.toml.in", dir.join("40-dangling.toml")).unwrap();
        let report = load(&dir, LoadPolicy::unchecked());
        let o = fs::canonicalize(outer.path()).unwrap();
        let o = o.display();
        let d = dir.display();
        assert_eq!(
            report.error_strings(),
            [
                format!("{d}/20-outside.toml: refused: symlink points outside {o}/pinnerd.d: {o}/outside.toml"),
                format!("{d}/30-null.toml: refused: symlink points outside {o}/pinnerd.d: /dev/null"),
                format!("{d}/40-dangling.toml: refused: dangling symlink to missing.toml.in"),
            ]
        );
        assert_eq!(report.rules.len(), 1);
        assert!(report.rules.get("inside").is_some());
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("a.toml"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        symlink("pipe", dir.path().join("b.toml")).unwrap();
        fs::write(dir.path().join("c.toml"), rule("c", "c")).unwrap();
        let report = load(dir.path(), LoadPolicy::unchecked());
        let d = dir.path().display();
        assert_eq!(
            report.error_strings(),
            [
                format!("{d}/a.toml: refused: not a regular file but a FIFO"),
                format!("{d}/b.toml: refused: not a regular file but a FIFO"),
            ]
        );
        assert_eq!(report.rules.len(), 1);
    }

    #[test]
    fn sockets_devices_and_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(dir.path().join("a.toml")).unwrap();
        // Creating a device node needs CAP_MKNOD: CI runs as root.
        nix::sys::stat::mknod(
            &dir.path().join("b.toml"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
            nix::sys::stat::makedev(1, 3),
        )
        .expect("mknod /dev/null twin (needs root)");
        fs::create_dir(dir.path().join("c.toml")).unwrap();
        let d = dir.path().display();
        assert_eq!(
            load(dir.path(), LoadPolicy::unchecked()).error_strings(),
            [
                format!("{d}/a.toml: refused: not a regular file but a socket"),
                format!("{d}/b.toml: refused: not a regular file but a character device"),
                format!("{d}/c.toml: refused: not a regular file but a directory"),
            ]
        );
    }

    #[test]
    fn files_over_one_mib_are_refused_and_one_mib_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = rule("big", "big");
        let pad = MAX_FILE_SIZE as usize - text.len() - 2;
        text.push('#');
        text.push_str(&"x".repeat(pad));
        text.push('\n');
        assert_eq!(text.len() as u64, MAX_FILE_SIZE);
        fs::write(dir.path().join("a.toml"), &text).unwrap();
        let report = load(dir.path(), LoadPolicy::unchecked());
        assert!(report.is_clean(), "{:?}", report.error_strings());
        text.push('\n');
        fs::write(dir.path().join("a.toml"), &text).unwrap();
        assert_eq!(
            errors(dir.path(), LoadPolicy::unchecked()),
            ["DIR/a.toml: refused: 1048577 bytes is over the 1048576-byte limit for a rule file"]
        );
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.toml"), b"[[rule]]\nname = \"\xff\"\n").unwrap();
        assert_eq!(
            errors(dir.path(), LoadPolicy::unchecked()),
            ["DIR/a.toml: refused: not valid UTF-8 (first bad byte at offset 17)"]
        );
    }
}

// ---- Properties.

mod props {
    use std::fs;
    use std::path::PathBuf;

    use pinnerd::cpuset::CpuSet;
    use pinnerd::placement::{Policy, SmtPolicy};
    use pinnerd::rules::format::{
        self, MatchSpec, OneOrMany, PlaceSpec, RuleFile, RuleSpec, ThreadSpec, UserSpec,
    };
    use pinnerd::rules::{self, LoadPolicy, ProcessInfo, RuleSet};
    use pinnerd::shape::Prefer;
    use pinnerd::topology::CoreType;
    use proptest::prelude::*;
    use toml::Spanned;

    fn sp<T>(v: T) -> Spanned<T> {
        Spanned::new(0..0, v)
    }

    fn one_or_many<T: std::fmt::Debug + Clone>(
        s: impl Strategy<Value = T> + Clone,
    ) -> impl Strategy<Value = OneOrMany<T>> {
        prop_oneof![
            s.clone().prop_map(OneOrMany::One),
            prop::collection::vec(s, 1..4).prop_map(OneOrMany::Many),
        ]
    }

    fn text() -> impl Strategy<Value = String> + Clone {
        // Anything TOML strings can carry: quotes, backslashes, newlines, unicode.
        "(\\PC|[\"\\\\\n\t'])*"
    }

    fn cpuset() -> impl Strategy<Value = CpuSet> + Clone {
        prop::collection::vec(0u32..3000, 0..20).prop_map(|v| v.into_iter().collect())
    }

    fn user() -> impl Strategy<Value = UserSpec> + Clone {
        prop_oneof![
            "[a-z_][a-z0-9_-]{0,10}".prop_map(UserSpec::Name),
            (0u32..u32::MAX).prop_map(UserSpec::Uid),
        ]
    }

    fn policy() -> impl Strategy<Value = Policy> + Clone {
        prop_oneof![Just(Policy::Compact), Just(Policy::Spread)]
    }

    fn smt() -> impl Strategy<Value = SmtPolicy> + Clone {
        prop_oneof![
            Just(SmtPolicy::Allow),
            Just(SmtPolicy::Avoid),
            Just(SmtPolicy::PreferSiblings)
        ]
    }

    fn match_spec() -> impl Strategy<Value = MatchSpec> {
        (
            proptest::option::of(one_or_many(text())),
            proptest::option::of(one_or_many(text())),
            proptest::option::of(text()),
            proptest::option::of(one_or_many(user())),
            proptest::option::of(one_or_many(text())),
            proptest::option::of(one_or_many(text())),
        )
            .prop_map(|(comm, exe, cmdline, user, cgroup, unit)| MatchSpec {
                comm: comm.map(sp),
                exe: exe.map(sp),
                cmdline: cmdline.map(sp),
                user: user.map(sp),
                cgroup: cgroup.map(sp),
                unit: unit.map(sp),
            })
    }

    type PlaceParts = (
        Option<CpuSet>,
        Option<u32>,
        Option<CpuSet>,
        Option<Policy>,
        Option<SmtPolicy>,
        Option<bool>,
    );

    fn place_parts() -> impl Strategy<Value = PlaceParts> {
        (
            proptest::option::of(cpuset()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(cpuset()),
            proptest::option::of(policy()),
            proptest::option::of(smt()),
            proptest::option::of(any::<bool>()),
        )
    }

    type ShapeParts = (Option<CoreType>, Option<Prefer>, Option<String>);

    fn shape_parts() -> impl Strategy<Value = ShapeParts> {
        (
            proptest::option::of(prop_oneof![
                Just(CoreType::Performance),
                Just(CoreType::Efficiency)
            ]),
            proptest::option::of(prop_oneof![Just(Prefer::Cache), Just(Prefer::Frequency)]),
            proptest::option::of(text()),
        )
    }

    fn place_spec() -> impl Strategy<Value = PlaceSpec> {
        (place_parts(), shape_parts()).prop_map(
            |((cpus, count, within, policy, smt, exclusive), (core_type, prefer, near))| {
                PlaceSpec {
                    cpus: cpus.map(sp),
                    count: count.map(sp),
                    within: within.map(sp),
                    policy: policy.map(sp),
                    smt: smt.map(sp),
                    exclusive: exclusive.map(sp),
                    core_type: core_type.map(sp),
                    prefer: prefer.map(sp),
                    near: near.map(sp),
                    latency_critical: exclusive.map(|e| sp(!e)),
                    irqs: exclusive.map(|e| {
                        sp(if e {
                            pinnerd::rules::format::Irqs::Away
                        } else {
                            pinnerd::rules::format::Irqs::Leave
                        })
                    }),
                    memory: exclusive.map(|e| {
                        sp(if e {
                            pinnerd::rules::format::Memory::Leave
                        } else {
                            pinnerd::rules::format::Memory::Follow
                        })
                    }),
                }
            },
        )
    }

    fn thread_spec() -> impl Strategy<Value = ThreadSpec> {
        (
            one_or_many(text()),
            place_parts(),
            proptest::option::of(any::<bool>()),
            shape_parts(),
        )
            .prop_map(
                |(
                    comm,
                    (cpus, count, within, policy, smt, exclusive),
                    shared,
                    (core_type, prefer, near),
                )| ThreadSpec {
                    comm: sp(comm),
                    cpus: cpus.map(sp),
                    count: count.map(sp),
                    within: within.map(sp),
                    policy: policy.map(sp),
                    smt: smt.map(sp),
                    exclusive: exclusive.map(sp),
                    shared: shared.map(sp),
                    core_type: core_type.map(sp),
                    prefer: prefer.map(sp),
                    near: near.map(sp),
                },
            )
    }

    fn rule_spec() -> impl Strategy<Value = RuleSpec> {
        (
            text(),
            proptest::option::of(any::<i32>()),
            proptest::option::of(match_spec()),
            proptest::option::of(place_spec()),
            prop::collection::vec(thread_spec(), 0..3),
        )
            .prop_map(|(name, priority, matches, place, threads)| RuleSpec {
                name: sp(name),
                priority: priority.map(sp),
                matches: matches.map(sp),
                place: place.map(sp),
                threads: threads.into_iter().map(sp).collect(),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Parse → serialise → parse is the identity, for any file the format can hold.
        #[test]
        fn serialise_then_parse_is_the_identity(rules in prop::collection::vec(rule_spec(), 0..4)) {
            let file = RuleFile { rules: rules.into_iter().map(sp).collect() };
            let text = format::to_toml(&file).unwrap();
            let back = format::parse(&text)
                .unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
            prop_assert_eq!(&back, &file);
            let again = format::to_toml(&back).unwrap();
            prop_assert_eq!(again, text);
        }
    }

    #[test]
    fn the_shipped_examples_survive_a_round_trip() {
        let dir = super::repo("config/pinnerd.d");
        for entry in fs::read_dir(dir).unwrap() {
            let text = fs::read_to_string(entry.unwrap().path()).unwrap();
            let parsed = format::parse(&text).unwrap();
            let back = format::parse(&format::to_toml(&parsed).unwrap()).unwrap();
            assert_eq!(back, parsed);
        }
    }

    const COMMS: [&str; 6] = ["app", "app-rx", "apx", "db", "dbw", "zz"];
    const GLOBS: [&str; 8] = ["app*", "ap?", "db", "db*", "*", "{app,db}", "*w", "*-rx"];

    /// A small rule: name, priority in a narrow range (so ties happen), a comm glob or
    /// none (a uid match instead).
    #[derive(Debug, Clone)]
    struct Small {
        name: String,
        priority: i32,
        comm: Option<&'static str>,
    }

    fn small_rules() -> impl Strategy<Value = Vec<Small>> {
        prop::collection::btree_map(
            "[a-e]{1,3}",
            (
                -1i32..=1,
                proptest::option::of(prop::sample::select(GLOBS.to_vec())),
            ),
            1..12,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(name, (priority, comm))| Small {
                    name,
                    priority,
                    comm,
                })
                .collect()
        })
    }

    fn toml_of(r: &Small) -> String {
        let m = match r.comm {
            Some(g) => format!("comm = \"{g}\""),
            None => "user = 0".to_string(),
        };
        format!(
            "[[rule]]\nname = \"{}\"\npriority = {}\n[rule.match]\n{m}\n[rule.place]\ncount = 1\n",
            r.name, r.priority
        )
    }

    /// The specification, written as plainly as possible: among the rules that match,
    /// the highest priority, then the smallest name.
    fn oracle(rules: &[Small], comm: &str) -> Option<String> {
        rules
            .iter()
            .filter(|r| match r.comm {
                None => true, // uid 0 below
                Some(g) => globset::Glob::new(g)
                    .unwrap()
                    .compile_matcher()
                    .is_match(comm),
            })
            .min_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)))
            .map(|r| r.name.clone())
    }

    fn winners(set: &RuleSet) -> Vec<Option<String>> {
        COMMS
            .iter()
            .map(|c| {
                let p = ProcessInfo {
                    comm: c.to_string(),
                    uid: 0,
                    ..ProcessInfo::default()
                };
                let fast = set.match_process(&p).map(|m| m.rule.name.clone());
                // The fast path (index, no explanations) and Explain always agree.
                let explained = set.explain(&p).winner.map(|m| m.rule.name.clone());
                assert_eq!(fast, explained, "comm {c}");
                fast
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Which rule wins does not depend on how rules are spread over files, on the
        /// files' names (their load order), or on the order rules are handed over.
        #[test]
        fn the_winner_does_not_depend_on_files_or_order(
            rules in small_rules(),
            seed_a in any::<u64>(),
            seed_b in any::<u64>(),
        ) {
            let expected: Vec<Option<String>> = COMMS.iter().map(|c| oracle(&rules, c)).collect();
            for seed in [seed_a, seed_b] {
                let dir = tempfile::tempdir().unwrap();
                // Spread rules over up to 4 files whose names sort in a seed-dependent order.
                let mut files: Vec<String> = vec![String::new(); 4];
                for (i, r) in rules.iter().enumerate() {
                    let f = (seed.rotate_left(i as u32 * 7) % 4) as usize;
                    files[f].push_str(&toml_of(r));
                }
                for (i, text) in files.iter().enumerate() {
                    let name = format!("{:x}-{i}.toml", seed.rotate_left(i as u32 * 13) & 0xfff);
                    fs::write(dir.path().join(name), text).unwrap();
                }
                let report = rules::load_dirs(&[PathBuf::from(dir.path())], &LoadPolicy::unchecked());
                prop_assert!(report.is_clean(), "{:?}", report.error_strings());
                prop_assert_eq!(winners(&report.rules), expected.clone());
            }
            // Handing the compiled rules over in reverse changes nothing either.
            let all: String = rules.iter().map(toml_of).collect();
            let mut compiled = rules::compile_text("x.toml".as_ref(), &all, &LoadPolicy::unchecked()).unwrap();
            compiled.reverse();
            prop_assert_eq!(winners(&RuleSet::new(compiled)), expected);
        }
    }
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
