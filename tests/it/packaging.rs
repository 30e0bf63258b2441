//! Packaging: `make install` stages the right tree for both prefixes, and every file the
//! Debian package metadata names exists, so a broken asset shows here rather than at
//! `cargo deb` time. (The package itself is installed and run under systemd by
//! `tests/vm/run.sh`.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `make VERB` in the repository with the test binary standing in for the release
/// build, into a fresh DESTDIR.
fn make(verb: &str, destdir: &Path, prefix: &str) {
    let out = Command::new("make")
        .arg("-C")
        .arg(repo())
        .arg(verb)
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg(format!("PREFIX={prefix}"))
        .arg(format!("BIN={}", super::helper::PINNERD))
        .output()
        .expect("run make (is it installed?)");
    assert!(
        out.status.success(),
        "make {verb} PREFIX={prefix} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every regular file and directory under `root`, relative, sorted.
fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn example_rules() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("config/pinnerd.d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "config/pinnerd.d has no example rules");
    names
}

/// The names of the files in the repository's `dir` ending in `ext`, sorted.
fn files_ending(dir: &str, ext: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(ext))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "{dir} has no {ext} files");
    names
}

fn unit_exec_start(path: &Path) -> String {
    let unit = std::fs::read_to_string(path).unwrap();
    unit.lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap_or_else(|| panic!("{} has no ExecStart=", path.display()))
        .to_string()
}

#[test]
fn make_install_prefix_usr_is_the_package_layout() {
    let dest = tempfile::tempdir().unwrap();
    make("install", dest.path(), "/usr");
    let mut want: Vec<String> = [
        "etc/",
        "etc/pinnerd.d/",
        "usr/",
        "usr/bin/",
        "usr/bin/pinnerd",
        "usr/lib/",
        "usr/lib/systemd/",
        "usr/lib/systemd/system/",
        "usr/lib/systemd/system/pinnerd-partition@.service",
        "usr/lib/systemd/system/pinnerd.service",
        "usr/lib/tmpfiles.d/",
        "usr/lib/tmpfiles.d/pinnerd.conf",
        "usr/share/",
        "usr/share/bash-completion/",
        "usr/share/bash-completion/completions/",
        "usr/share/bash-completion/completions/pinnerd",
        "usr/share/dbus-1/",
        "usr/share/dbus-1/interfaces/",
        "usr/share/dbus-1/interfaces/org.pinnerd.Pinnerd1.xml",
        "usr/share/dbus-1/system.d/",
        "usr/share/dbus-1/system.d/org.pinnerd.Pinnerd1.conf",
        "usr/share/doc/",
        "usr/share/doc/pinnerd/",
        "usr/share/doc/pinnerd/README.md",
        "usr/share/doc/pinnerd/docs/",
        "usr/share/doc/pinnerd/docs/images/",
        "usr/share/doc/pinnerd/docs/images/README.md",
        "usr/share/doc/pinnerd/docs/report/",
        "usr/share/doc/pinnerd/examples/",
        "usr/share/doc/pinnerd/examples/pinnerd.d/",
        "usr/share/doc/pinnerd/examples/pinnerd.toml",
        "usr/share/fish/",
        "usr/share/fish/vendor_completions.d/",
        "usr/share/fish/vendor_completions.d/pinnerd.fish",
        "usr/share/man/",
        "usr/share/man/man5/",
        "usr/share/man/man5/pinnerd.d.5",
        "usr/share/man/man5/pinnerd.toml.5",
        "usr/share/man/man8/",
        "usr/share/man/man8/pinnerd.8",
        "usr/share/polkit-1/",
        "usr/share/polkit-1/actions/",
        "usr/share/polkit-1/actions/org.pinnerd.policy",
        "usr/share/zsh/",
        "usr/share/zsh/vendor-completions/",
        "usr/share/zsh/vendor-completions/_pinnerd",
    ]
    .map(String::from)
    .into();
    for r in example_rules() {
        want.push(format!("usr/share/doc/pinnerd/examples/pinnerd.d/{r}"));
    }
    for (dir, ext) in [
        ("docs", ".md"),
        ("docs/images", ".svg"),
        ("docs/report", ".png"),
    ] {
        for f in files_ending(dir, ext) {
            want.push(format!("usr/share/doc/pinnerd/{dir}/{f}"));
        }
    }
    want.sort();
    assert_eq!(tree(dest.path()), want);
    // Every link of the installed README to a document finds it beside it.
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for link in readme.split("](docs/").skip(1) {
        let target = link.split([')', '#']).next().unwrap();
        assert!(
            dest.path()
                .join("usr/share/doc/pinnerd/docs")
                .join(target)
                .is_file(),
            "the installed README links docs/{target}, which is not installed"
        );
    }
    assert_eq!(
        unit_exec_start(&dest.path().join("usr/lib/systemd/system/pinnerd.service")),
        "ExecStart=/usr/bin/pinnerd daemon"
    );
    // The staged files are the repository's, byte for byte (the unit only when the
    // prefix leaves ExecStart as it is).
    for (staged, source) in [
        (
            "usr/share/dbus-1/system.d/org.pinnerd.Pinnerd1.conf",
            "systemd/org.pinnerd.Pinnerd1.conf",
        ),
        (
            "usr/lib/systemd/system/pinnerd.service",
            "systemd/pinnerd.service",
        ),
        (
            "usr/lib/systemd/system/pinnerd-partition@.service",
            "systemd/pinnerd-partition@.service",
        ),
        (
            "usr/share/polkit-1/actions/org.pinnerd.policy",
            "polkit/org.pinnerd.policy",
        ),
        (
            "usr/share/doc/pinnerd/examples/pinnerd.toml",
            "config/pinnerd.toml",
        ),
        ("usr/share/man/man8/pinnerd.8", "man/pinnerd.8"),
        (
            "usr/share/dbus-1/interfaces/org.pinnerd.Pinnerd1.xml",
            "systemd/org.pinnerd.Pinnerd1.xml",
        ),
        (
            "usr/share/zsh/vendor-completions/_pinnerd",
            "completions/_pinnerd",
        ),
    ] {
        assert_eq!(
            std::fs::read(dest.path().join(staged)).unwrap(),
            std::fs::read(repo().join(source)).unwrap(),
            "{staged} differs from {source}"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(dest.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("usr/bin/pinnerd"), 0o755);
    assert_eq!(mode("usr/lib/systemd/system/pinnerd.service"), 0o644);
    assert_eq!(mode("etc/pinnerd.d"), 0o755);
}

#[test]
fn make_install_prefix_usr_local_rewrites_the_unit_and_uninstalls() {
    let dest = tempfile::tempdir().unwrap();
    make("install", dest.path(), "/usr/local");
    let unit = dest
        .path()
        .join("usr/local/lib/systemd/system/pinnerd.service");
    assert_eq!(
        unit_exec_start(&unit),
        "ExecStart=/usr/local/bin/pinnerd daemon"
    );
    // The partition helper (isolate = true) runs the same binary.
    assert_eq!(
        unit_exec_start(
            &dest
                .path()
                .join("usr/local/lib/systemd/system/pinnerd-partition@.service")
        ),
        "ExecStart=@/usr/local/bin/pinnerd pinnerd-cpuset-partition %i"
    );
    assert!(dest.path().join("usr/local/bin/pinnerd").is_file());
    // dbus-daemon does not read /usr/local/share/dbus-1: the policy goes under /etc.
    assert!(dest
        .path()
        .join("etc/dbus-1/system.d/org.pinnerd.Pinnerd1.conf")
        .is_file());
    assert!(!dest.path().join("usr/local/share/dbus-1/system.d").exists());
    // polkitd reads actions from /usr/share/polkit-1/actions only.
    assert!(dest
        .path()
        .join("usr/share/polkit-1/actions/org.pinnerd.policy")
        .is_file());
    // The interface XML is for tools, which read every data directory; zsh looks for
    // local completions in site-functions.
    for f in [
        "usr/local/share/dbus-1/interfaces/org.pinnerd.Pinnerd1.xml",
        "usr/local/share/man/man8/pinnerd.8",
        "usr/local/share/man/man5/pinnerd.d.5",
        "usr/local/share/zsh/site-functions/_pinnerd",
        "usr/local/share/bash-completion/completions/pinnerd",
        "usr/local/share/fish/vendor_completions.d/pinnerd.fish",
    ] {
        assert!(dest.path().join(f).is_file(), "{f} not installed");
    }
    for r in example_rules() {
        assert!(dest
            .path()
            .join("usr/local/share/doc/pinnerd/examples/pinnerd.d")
            .join(&r)
            .is_file());
    }

    // A rule the administrator wrote survives uninstall.
    std::fs::write(dest.path().join("etc/pinnerd.d/mine.toml"), "").unwrap();
    make("uninstall", dest.path(), "/usr/local");
    let files: Vec<String> = tree(dest.path())
        .into_iter()
        .filter(|p| !p.ends_with('/'))
        .collect();
    assert_eq!(files, ["etc/pinnerd.d/mine.toml"]);
}

#[test]
fn deb_metadata_names_existing_files() {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let deb = &manifest["package"]["metadata"]["deb"];
    let assets = deb["assets"].as_array().expect("deb assets");
    let mut targets = Vec::new();
    for a in assets {
        let a = a.as_array().unwrap();
        let (source, target) = (a[0].as_str().unwrap(), a[1].as_str().unwrap());
        targets.push(target.to_string());
        if source.starts_with("target/") {
            continue; // built by cargo deb
        }
        let path = repo().join(source);
        if let Some((dir, ext)) = source.split_once("/*") {
            assert!(
                std::fs::read_dir(repo().join(dir)).unwrap().any(|e| e
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(ext)),
                "deb asset {source} matches nothing"
            );
        } else {
            assert!(path.is_file(), "deb asset {source} does not exist");
        }
    }
    for t in [
        "usr/bin/",
        "usr/share/dbus-1/system.d/",
        "usr/share/dbus-1/interfaces/",
        "usr/share/man/man8/",
        "usr/share/man/man5/",
        "usr/share/bash-completion/completions/pinnerd",
        "usr/share/zsh/vendor-completions/",
        "usr/share/fish/vendor_completions.d/",
        "usr/share/polkit-1/actions/",
        "usr/share/doc/pinnerd/examples/",
        "usr/share/doc/pinnerd/examples/pinnerd.d/",
        "usr/share/doc/pinnerd/",
        "usr/share/doc/pinnerd/docs/",
        "usr/share/doc/pinnerd/docs/images/",
        "usr/share/doc/pinnerd/docs/report/",
        "usr/lib/systemd/system/",
    ] {
        assert!(targets.iter().any(|x| x == t), "no deb asset goes to {t}");
    }

    // The unit comes from systemd-units; the maintainer scripts must carry the token
    // where cargo-deb inserts the enable/start snippets.
    let units = &deb["systemd-units"];
    assert_eq!(units["unit-name"].as_str(), Some("pinnerd"));
    assert_eq!(units["enable"].as_bool(), Some(true));
    let unit_dir = repo().join(units["unit-scripts"].as_str().unwrap());
    assert!(unit_dir.join("pinnerd.service").is_file());
    let scripts = repo().join(deb["maintainer-scripts"].as_str().unwrap());
    for s in ["postinst", "postrm"] {
        let text = std::fs::read_to_string(scripts.join(s)).unwrap();
        assert!(text.contains("#DEBHELPER#"), "{s} lacks #DEBHELPER#");
    }
    let postinst = std::fs::read_to_string(scripts.join("postinst")).unwrap();
    assert!(postinst.contains("/etc/pinnerd.d"));
}

#[test]
fn the_runtime_record_outlives_every_stop_and_only_purge_removes_it() {
    // systemd removes a runtime directory at every stop unless told to keep it; a stop
    // after a crash would then lose what the next start must undo.
    let unit = std::fs::read_to_string(repo().join("systemd/pinnerd.service")).unwrap();
    let preserve: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("RuntimeDirectoryPreserve="))
        .collect();
    assert_eq!(preserve, ["yes"]);
    // The script as dpkg runs it, with `rm` and `rmdir` recording instead of removing.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    for tool in ["rm", "rmdir"] {
        let path = dir.path().join(tool);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"{tool} $*\" >>'{}'\n", log.display()),
        )
        .unwrap();
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&path, perm).unwrap();
    }
    let calls = |verb: &str| {
        let _ = std::fs::remove_file(&log);
        let out = Command::new("/bin/sh")
            .arg(repo().join("debian/postrm"))
            .arg(verb)
            .env("PATH", dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "postrm {verb}: {out:?}");
        std::fs::read_to_string(&log).unwrap_or_default()
    };
    assert_eq!(
        calls("remove"),
        "",
        "remove keeps the record for a reinstall"
    );
    let purged = calls("purge");
    assert!(
        purged.lines().any(|l| l == "rm -rf /run/pinnerd"),
        "{purged}"
    );
    assert!(
        purged.lines().any(|l| l == "rm -rf /var/lib/pinnerd"),
        "{purged}"
    );
}

#[test]
fn maintainer_scripts_are_valid_sh() {
    for s in ["postinst", "postrm"] {
        let out = Command::new("sh")
            .arg("-n")
            .arg(repo().join("debian").join(s))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "debian/{s}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
