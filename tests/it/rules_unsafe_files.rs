//! Files the loader must refuse before parsing. Git cannot hold these, so each test makes
//! its own in a temporary directory. Device nodes need root (CI runs as root).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use pinnerd::rules::{self, LoadPolicy, LoadReport, MAX_FILE_SIZE};

use super::rules::rule;

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
