//! Topology from damaged trees: a malformed file names its file, line and column, a tree
//! without CPUs is an error, and a missing file or fact degrades with a warning.

use std::path::{Path, PathBuf};

use pinnerd::fingerprint::Fingerprint;
use pinnerd::sysroot::{FileError, SysRoot};
use pinnerd::topology::{Topology, TopologyError};

use super::topology::{assert_consistent, copy_tree, fixture, read_fixture, set};

#[test]
fn a_malformed_file_is_an_error_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("ryzen-2700x"), dir.path());
    let bad = dir
        .path()
        .join("sys/devices/system/cpu/cpu5/topology/core_cpus_list");
    std::fs::write(&bad, "5,1x3\n").unwrap();
    match Topology::discover(&SysRoot::machine(dir.path())).unwrap_err() {
        TopologyError::File(FileError::Parse {
            path, line, column, ..
        }) => {
            assert_eq!(path, bad);
            assert_eq!((line, column), (1, 3));
        }
        other => panic!("unexpected {other}"),
    }
    let out = super::helper::pinnerd_command()
        .args(["topology", "--sysfs"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:1:3", bad.display())) && err.contains("\"1x3\""),
        "{err}"
    );

    let size = dir
        .path()
        .join("sys/devices/system/cpu/cpu0/cache/index2/size");
    std::fs::write(&bad, "5,13\n").unwrap();
    std::fs::write(&size, "512Q\n").unwrap();
    let err = Topology::discover(&SysRoot::machine(dir.path())).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("{}:1:1:", size.display())),
        "{err}"
    );
}

#[test]
fn a_tree_without_cpus_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let err = Topology::discover(&SysRoot::with_sys(dir.path())).unwrap_err();
    assert!(matches!(err, TopologyError::NoCpus { .. }), "{err}");
    assert!(err.to_string().contains(&dir.path().display().to_string()));
}

/// Removing any single file degrades, never fails or panics, and the result stays
/// consistent (siblings symmetric, every CPU in its own caches and node...).
#[test]
fn any_missing_file_degrades_gracefully() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    for (name, cpu_dirs) in [
        ("i7-7700-cpu3-offline", &["cpu0", "cpu3"][..]),
        ("epyc-vm-2cpu", &["cpu1"][..]),
        ("xeon-e5620", &["cpu1"][..]),
        ("i9-12900k", &["cpu17"][..]),
    ] {
        let src = fixture(name);
        let cpu = src.join("sys/devices/system/cpu");
        let mut files = Vec::new();
        for d in cpu_dirs {
            walk(&cpu.join(d), &mut files);
        }
        walk(&src.join("sys/devices/system/node"), &mut files);
        walk(&src.join("proc"), &mut files);
        for f in [
            "online",
            "possible",
            "present",
            "offline",
            "isolated",
            "smt/control",
        ] {
            files.push(cpu.join(f));
        }
        files.push(src.join("sys/devices/cpu_core/cpus"));
        let (baseline, _) = read_fixture(name);
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&src, dir.path());
        let root = SysRoot::machine(dir.path());
        let aside = dir.path().join("aside");
        let mut tried = 0;
        for file in files.iter().filter(|f| f.exists()) {
            let rel = file.strip_prefix(&src).unwrap();
            std::fs::rename(dir.path().join(rel), &aside).unwrap();
            let t =
                Topology::discover(&root).unwrap_or_else(|e| panic!("{name} without {rel:?}: {e}"));
            assert_consistent(&t);
            assert_eq!(t.online, baseline.online, "{name} without {rel:?}");
            Fingerprint::read(&root).unwrap_or_else(|e| panic!("{name} without {rel:?}: {e}"));
            std::fs::rename(&aside, dir.path().join(rel)).unwrap();
            tried += 1;
        }
        assert!(tried > 20, "{name}: only {tried} files tried");
        assert_eq!(
            Topology::discover(&root).unwrap(),
            baseline,
            "all files restored"
        );
    }
}

/// A fact missing for one CPU is taken from the CPUs that list it: nothing is lost
/// but a warning is added.
#[test]
fn a_fact_missing_for_one_cpu_is_taken_from_the_others() {
    let (baseline, _) = read_fixture("xeon-e5620");
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("xeon-e5620"), dir.path());
    let cpu1 = dir.path().join("sys/devices/system/cpu/cpu1");
    for f in [
        "topology/physical_package_id",
        "topology/core_cpus_list",
        "topology/package_cpus_list",
        "topology/die_cpus_list",
        "cache/index3/shared_cpu_list",
    ] {
        std::fs::remove_file(cpu1.join(f)).unwrap();
    }
    let mut t = Topology::discover(&SysRoot::machine(dir.path())).unwrap();
    assert_eq!(t.warnings.len(), 5, "{:#?}", t.warnings);
    assert!(
        t.warnings.iter().all(|w| w.starts_with("CPUs 1: ")),
        "{:#?}",
        t.warnings
    );
    t.warnings.clear();
    assert_eq!(t, baseline);

    // The capture has both shared_cpu_list and the hex shared_cpu_map: either will do.
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("epyc-vm-2cpu"), dir.path());
    let (baseline, _) = read_fixture("epyc-vm-2cpu");
    for cpu in ["cpu0", "cpu1"] {
        std::fs::remove_file(
            dir.path()
                .join("sys/devices/system/cpu")
                .join(cpu)
                .join("cache/index3/shared_cpu_list"),
        )
        .unwrap();
    }
    let t = Topology::discover(&SysRoot::machine(dir.path())).unwrap();
    assert_eq!(t, baseline, "read from shared_cpu_map");
    assert_eq!(t.llc(1), Some(&set("0-1")));
}
