//! `pinnerd export hwloc-distances` read back by the real hwloc tools (package
//! `hwloc-nox`: `lstopo-no-graphics`, `hwloc-annotate`), and `pinnerd export nfd` on
//! fixture machines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pinnerd::LatencyMatrix;

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e} (hwloc-nox installed?)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn pinnerd() -> Command {
    super::helper::pinnerd_command()
}

/// The matrix `lstopo --distances` prints: rows of logical-index values.
fn lstopo_distances(xml: &Path) -> (String, Vec<Vec<u64>>) {
    let out = run(Command::new("lstopo-no-graphics")
        .arg("--input")
        .arg(xml)
        .arg("--distances"));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header = lines
        .find(|l| l.contains("name pinnerd-core-to-core"))
        .unwrap_or_else(|| panic!("no pinnerd distances in:\n{text}"))
        .to_string();
    let index = lines.next().unwrap();
    assert!(index.trim_start().starts_with("index"), "{text}");
    let rows = lines
        .take_while(|l| !l.trim().is_empty() && !l.contains("matrix"))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    (header, rows)
}

/// On a synthetic topology whose logical order is not the OS numbering (siblings 0 and
/// 8 are logical 0 and 1), hwloc shows the exported matrix value for value.
#[test]
fn hwloc_reads_the_exported_matrix_value_for_value() {
    let dir = tempfile::tempdir().unwrap();
    let os_of_logical: Vec<u32> = (0..8).flat_map(|c| [c, c + 8]).collect();
    let list: Vec<String> = os_of_logical.iter().map(|c| c.to_string()).collect();
    let synthetic = format!("pack:2 core:4 pu:2(indexes={})", list.join(","));
    let topo = dir.path().join("topo.xml");
    let out = run(Command::new("lstopo-no-graphics")
        .args(["--input", &synthetic, "--of", "xml"])
        .arg(&topo));
    drop(out);
    // A real matrix with Linux numbering (siblings i and i+8).
    let matrix = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot/AMD_Ryzen_7_5700X.csv"
    ));
    let m = LatencyMatrix::load(&matrix).unwrap();
    for (unit, scale) in [("ns", 1.0), ("ps", 1000.0)] {
        let exported = run(pinnerd()
            .args(["export", "hwloc-distances", "--unit", unit, "--matrix"])
            .arg(&matrix)
            .arg("--topology")
            .arg(&topo))
        .stdout;
        let file = dir.path().join(format!("distances-{unit}.txt"));
        std::fs::write(&file, &exported).unwrap();
        let annotated = dir.path().join(format!("annotated-{unit}.xml"));
        run(Command::new("hwloc-annotate")
            .arg(&topo)
            .arg(&annotated)
            .args(["root", "distances"])
            .arg(&file));
        let (header, rows) = lstopo_distances(&annotated);
        assert!(header.starts_with("Relative latency matrix"), "{header}");
        assert!(header.contains("between 16 PUs"), "{header}");
        assert_eq!(rows.len(), 16);
        for (li, row) in rows.iter().enumerate() {
            assert_eq!(row.len(), 16);
            for (lj, &v) in row.iter().enumerate() {
                let (a, b) = (os_of_logical[li], os_of_logical[lj]);
                let want = if a == b {
                    0
                } else {
                    ((m.between(a, b).unwrap() * scale).round() as u64).max(1)
                };
                assert_eq!(v, want, "logical {li},{lj} = CPUs {a},{b} ({unit})");
            }
        }
        // Siblings 0 and 8 are logical neighbours: the fastest pair of row 0.
        let fastest = (1..16).min_by_key(|&j| rows[0][j]).unwrap();
        assert_eq!(fastest, 1);
    }
}

/// Without --topology the running machine's comes from lstopo itself.
#[test]
fn hwloc_export_defaults_to_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpus: Vec<u32> = online
        .trim()
        .parse::<pinnerd::CpuSet>()
        .unwrap()
        .iter()
        .collect();
    let m = LatencyMatrix::from_fn(cpus.clone(), |i, j| 10.0 + (i + j) as f64);
    let path = dir.path().join("m.json");
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    let out = run(pinnerd()
        .args(["export", "hwloc-distances", "--matrix"])
        .arg(&path))
    .stdout;
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "name=pinnerd-core-to-core-ns");
    assert_eq!(lines[2], cpus.len().to_string());
    assert_eq!(lines.len(), 3 + cpus.len() + cpus.len() * cpus.len());

    let foreign = LatencyMatrix::from_fn(vec![0, 4096], |_, _| 10.0);
    std::fs::write(&path, serde_json::to_string(&foreign).unwrap()).unwrap();
    let out = pinnerd()
        .args(["export", "hwloc-distances", "--matrix"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the matrix names CPU 4096, which is not a PU of this topology"),
        "{err}"
    );
    // A topology that is not a file is refused before reading.
    let out = pinnerd()
        .args([
            "export",
            "hwloc-distances",
            "--topology",
            "/dev/zero",
            "--matrix",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
}

/// `export nfd --out` into a directory another user owns: refused, and a link planted
/// there is not written through.
#[test]
fn nfd_out_refuses_a_directory_another_user_owns() {
    let (_top, dir, victim) = super::metrics::nobodys_dir();
    let out_file = dir.join("pinnerd");
    super::metrics::as_nobody(
        "ln",
        &["-s".as_ref(), victim.as_os_str(), out_file.as_os_str()],
    );
    let sysfs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/xeon-e5620"
    );
    let out = pinnerd()
        .args(["export", "nfd", "--sysfs", sysfs, "--out"])
        .arg(&out_file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
}

/// The E5620 fixture (siblings i and i+8, two sockets) with a matrix in its numbering:
/// every label, and the file written atomically with --out.
#[test]
fn nfd_labels_for_a_fixture_machine() {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/xeon-e5620"
    );
    let m = LatencyMatrix::from_fn((0..16).collect(), |i, j| {
        if i % 8 == j % 8 {
            7.2
        } else if i % 2 == j % 2 {
            37.0 + (i + j) as f64 * 0.05
        } else {
            75.4 + (i * j) as f64 * 0.01
        }
    });
    let path = dir.path().join("m.json");
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    let out_file = dir.path().join("features.d/pinnerd");
    std::fs::create_dir_all(out_file.parent().unwrap()).unwrap();
    std::fs::write(&out_file, "stale\n").unwrap();
    run(pinnerd()
        .args(["export", "nfd", "--sysfs", sysfs, "--matrix"])
        .arg(&path)
        .arg("--out")
        .arg(&out_file));
    let text = std::fs::read_to_string(&out_file).unwrap();
    let labels: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        labels,
        [
            "pinnerd-smt=true",
            "pinnerd-llc-groups=2",
            "pinnerd-llc-cpus=8",
            "pinnerd-matrix-trusted=true",
            "pinnerd-latency-smt-ns=7",
            "pinnerd-latency-package-ns=38",
            "pinnerd-latency-machine-ns=76",
        ],
        "{text}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(out_file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");

    // A matrix of another machine: no latencies, not trusted, and a warning.
    let other = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot/AMD_Ryzen_7_5700X.csv"
    );
    let sysfs_2cpu = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sysfs/epyc-vm-2cpu"
    );
    let out = run(pinnerd().args(["export", "nfd", "--sysfs", sysfs_2cpu, "--matrix", other]));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(text.contains("pinnerd-matrix-trusted=false\n"), "{text}");
    assert!(!text.contains("pinnerd-latency-"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("latencies not exported"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The block scalar `KEY: |` of a YAML file, de-indented.
fn yaml_block(yaml: &str, key: &str) -> String {
    let mut lines = yaml.lines();
    let head = lines
        .find(|l| l.trim_start() == format!("{key}: |"))
        .unwrap_or_else(|| panic!("no block {key}"));
    let indent = head.len() - head.trim_start().len();
    let mut out = String::new();
    for l in lines {
        let i = l.len() - l.trim_start().len();
        if !l.trim().is_empty() && i <= indent {
            break;
        }
        out.push_str(l.get(indent + 2..).unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The DaemonSet's rule and settings files pass `pinnerd check`, and its capabilities
/// are the unit's.
#[test]
fn the_daemonset_config_passes_check_and_keeps_the_units_privileges() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml =
        std::fs::read_to_string(root.join("deploy/kubernetes/pinnerd-daemonset.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("40-batch.toml"),
        yaml_block(&yaml, "40-batch.toml"),
    )
    .unwrap();
    let settings = dir.path().join("pinnerd.toml");
    let text = yaml_block(&yaml, "pinnerd.toml");
    assert!(text.contains("textfile-dir = "), "{text}");
    std::fs::write(&settings, text).unwrap();
    let out = run(pinnerd()
        .args(["check", "--no-permissions"])
        .arg(&rules)
        .arg(&settings));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: 2 files, 1 rule\n"
    );

    let unit = std::fs::read_to_string(root.join("systemd/pinnerd.service")).unwrap();
    let bounding: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap()
        .split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_string())
        .collect();
    let add = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("add: "))
        .unwrap();
    let added: Vec<String> = add
        .trim_matches(['[', ']'])
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_string())
        .collect();
    assert_eq!(added, bounding);
    assert!(yaml.contains("privileged: false"));
    assert!(yaml.contains("allowPrivilegeEscalation: false"));
    assert!(yaml.contains("hostPID: true"));
}
