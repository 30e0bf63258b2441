//! Topology discovery and the fingerprint on the real sysfs of the machine running the
//! tests, and `pinnerd topology` end to end.

use pinnerd::fingerprint::Fingerprint;
use pinnerd::sysroot::SysRoot;
use pinnerd::topology::Topology;
use pinnerd::CpuSet;

/// Invariants every sane topology satisfies, whatever the machine.
pub(super) fn assert_consistent(t: &Topology) {
    assert!(!t.online.is_empty(), "no online CPUs");
    assert!(t.online.is_subset(&t.possible), "online ⊄ possible");
    assert!(t.online.is_subset(&t.present), "online ⊄ present");
    assert!(
        t.offline.is_disjoint(&t.online),
        "a CPU is both online and offline"
    );
    assert_eq!(t.offline, t.possible.difference(&t.online));
    assert!(t.usable().is_subset(&t.online));
    assert!(t.usable().is_disjoint(&t.isolated));
    let listed: CpuSet = t.cpus.iter().map(|c| c.cpu).collect();
    assert_eq!(listed, t.online, "one entry per online CPU");
    assert_eq!(t.cpus.len(), t.online.len(), "no duplicate entries");
    for c in &t.cpus {
        let cpu = c.cpu;
        assert!(
            c.siblings.contains(cpu),
            "CPU {cpu} not in its own siblings"
        );
        assert!(
            c.siblings.is_subset(&c.die_cpus),
            "CPU {cpu}: core spans dies"
        );
        assert!(
            c.die_cpus.is_subset(&c.package_cpus),
            "CPU {cpu}: die spans packages"
        );
        assert!(c.cluster_cpus.contains(cpu));
        for cache in &c.caches {
            assert!(
                cache.shared.contains(cpu),
                "CPU {cpu} not in its {}",
                cache.name()
            );
        }
        if let Some(llc) = t.llc(cpu) {
            assert!(llc.contains(cpu), "CPU {cpu} not in its own LLC");
            assert!(
                c.siblings.is_subset(llc),
                "CPU {cpu}: LLC smaller than the core"
            );
        }
        for other in &c.siblings {
            if t.online.contains(other) {
                assert_eq!(t.siblings(other), Some(&c.siblings), "asymmetric siblings");
                assert_eq!(t.package_of(other), Some(c.package));
            }
        }
        let node = t.node(c.node).expect("CPU's node is listed");
        assert!(
            node.cpus.contains(cpu),
            "node {} does not list CPU {cpu}",
            c.node
        );
    }
    for n in &t.nodes {
        if !n.distances.is_empty() {
            assert_eq!(t.node_distance(n.id, n.id), Some(10), "local distance");
        }
    }
    for pair in t.cores().windows(2) {
        assert!(pair[0].is_disjoint(&pair[1]), "cores overlap");
    }
}

#[test]
fn the_real_sysfs_parses_consistently() {
    let t = Topology::discover(&SysRoot::default()).expect("read /sys");
    assert_consistent(&t);
    // Every CPU the scheduler lets us run on is online and listed.
    let allowed = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = allowed
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    let allowed: CpuSet = mask.trim().parse().unwrap();
    assert!(
        allowed.is_subset(&t.online),
        "{allowed} ⊄ online {}",
        t.online
    );
}

#[test]
fn the_real_fingerprint_is_stable() {
    let a = Fingerprint::read(&SysRoot::default()).unwrap();
    let b = Fingerprint::read(&SysRoot::default()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.hex.len(), 16);
    assert!(a.hex.bytes().all(|c| c.is_ascii_hexdigit()));
    let t = Topology::discover(&SysRoot::default()).unwrap();
    assert_eq!(a.inputs.online, t.online);
    assert!(a.inputs.kernel_release.is_some(), "osrelease read");
}

/// Runs `pinnerd topology --json [extra]` and checks it against the library's view of
/// `root`.
fn check_cli_json(extra: &[&std::ffi::OsStr], root: &SysRoot) {
    let out = super::helper::pinnerd_command()
        .args(["topology", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = Topology::discover(root).unwrap();
    let fp = Fingerprint::read(root).unwrap();
    assert_eq!(v["fingerprint"], fp.hex);
    assert_eq!(
        v["fingerprint_inputs"],
        serde_json::to_value(&fp.inputs).unwrap()
    );
    let ids = |value: &serde_json::Value| -> CpuSet {
        value
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {value}"))
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(ids(&v["online"]), t.online);
    assert_eq!(ids(&v["offline"]), t.offline);
    assert_eq!(ids(&v["isolated"]), t.isolated);
    assert_eq!(ids(&v["usable"]), t.usable());
    assert_eq!(v["hybrid"], t.is_hybrid());
    assert_eq!(v["warnings"].as_array().unwrap().len(), t.warnings.len());
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), t.online.len());
    for (entry, c) in cpus.iter().zip(&t.cpus) {
        assert_eq!(entry["cpu"], c.cpu);
        assert_eq!(entry["package"], c.package);
        assert_eq!(entry["die"], c.die);
        assert_eq!(entry["core"], c.core);
        assert_eq!(entry["node"], c.node);
        assert_eq!(ids(&entry["siblings"]), c.siblings);
        match t.llc(c.cpu) {
            Some(llc) => assert_eq!(&ids(&entry["llc"]), llc),
            None => assert!(entry["llc"].is_null(), "{entry}"),
        }
        assert_eq!(
            entry["core_type"],
            serde_json::to_value(c.core_type).unwrap()
        );
        assert_eq!(
            entry["max_freq_khz"],
            serde_json::to_value(c.max_freq_khz).unwrap()
        );
        assert_eq!(entry["isolated"], t.isolated.contains(c.cpu));
        let caches = entry["caches"].as_array().unwrap();
        assert_eq!(caches.len(), c.caches.len());
        for (e, k) in caches.iter().zip(&c.caches) {
            assert_eq!(e["level"], k.level);
            assert_eq!(e["type"], serde_json::to_value(k.kind).unwrap());
            assert_eq!(ids(&e["shared"]), k.shared);
        }
    }
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), t.nodes.len());
    for (entry, n) in nodes.iter().zip(&t.nodes) {
        assert_eq!(entry["id"], n.id);
        assert_eq!(ids(&entry["cpus"]), n.cpus);
    }
}

#[test]
fn cli_json_has_the_documented_fields_for_every_online_cpu() {
    check_cli_json(&[], &SysRoot::default());
    for name in FIXTURES {
        let dir = fixture(name);
        check_cli_json(
            &["--sysfs".as_ref(), dir.as_os_str()],
            &SysRoot::machine(&dir),
        );
    }
    // A sysfs root with procfs beside it reads the same machine.
    let dir = fixture("i9-12900k");
    let sys = dir.join("sys");
    check_cli_json(
        &["--sysfs".as_ref(), sys.as_os_str()],
        &SysRoot::machine(&dir),
    );
}

#[test]
fn cli_tree_shows_every_online_cpu() {
    let out = super::helper::pinnerd_command()
        .arg("topology")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let t = Topology::discover(&SysRoot::default()).unwrap();
    assert!(text.starts_with("fingerprint "), "{text}");
    for p in t.packages() {
        assert!(text.contains(&format!("package {p}: ")), "{text}");
    }
    let core_lines = text.lines().filter(|l| l.contains("─ core ")).count();
    assert_eq!(core_lines, t.cores().len(), "one line per core:\n{text}");
}

// ---- fixture trees -------------------------------------------------------------------

use std::path::{Path, PathBuf};

use pinnerd::topology::{CacheKind, CoreType};

pub(super) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

const FIXTURES: [&str; 9] = [
    "epyc-vm-2cpu",
    "xeon-e5620",
    "ryzen-2700x",
    "i9-12900k",
    "i7-7700-cpu3-offline",
    "container-no-cache",
    "r9-7950x3d",
    "hybrid-e-first",
    "xeon-2s-nic-nvme",
];

/// Compares `actual` with the reviewed file `tests/fixtures/expected/<file>`;
/// `SNAPSHOTS=overwrite` rewrites it instead (then review the diff by hand).
fn assert_expected(file: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/expected")
        .join(file);
    if super::snapshots::overwrite() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        let overwrite = super::snapshots::OVERWRITE;
        panic!("{}: {e} ({overwrite} writes it)", path.display())
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the parsed result at line {}:\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            actual.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

pub(super) fn read_fixture(name: &str) -> (Topology, Fingerprint) {
    let root = SysRoot::machine(fixture(name));
    let t = Topology::from_sysroot(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
    let fp = Fingerprint::read(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
    (t, fp)
}

pub(super) fn set(text: &str) -> CpuSet {
    text.parse().unwrap()
}

#[test]
fn every_fixture_parses_to_its_reviewed_result() {
    for name in FIXTURES {
        let (t, fp) = read_fixture(name);
        assert_consistent(&t);
        let whole = serde_json::json!({ "topology": t, "fingerprint": fp });
        let text = serde_json::to_string_pretty(&whole).unwrap() + "\n";
        assert_expected(&format!("{name}.json"), &text);
        // And the result survives a round trip through its own serialization.
        let back: Topology = serde_json::from_value(whole["topology"].clone()).unwrap();
        assert_eq!(back, t, "{name}");
    }
}

#[test]
fn every_fixture_prints_its_reviewed_tree() {
    for name in FIXTURES {
        let out = super::helper::pinnerd_command()
            .args(["topology", "--sysfs"])
            .arg(fixture(name))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_expected(
            &format!("{name}.txt"),
            &String::from_utf8(out.stdout).unwrap(),
        );
    }
}

#[test]
fn xeon_e5620_numbering_is_not_proximity() {
    let (t, fp) = read_fixture("xeon-e5620");
    assert_eq!(t.online, set("0-15"));
    assert_eq!(t.packages(), vec![0, 1]);
    assert_eq!(t.siblings(0), Some(&set("0,8")), "0 and 8 share a core");
    assert_ne!(
        t.package_of(0),
        t.package_of(1),
        "0 and 1 are on different sockets"
    );
    assert_eq!(t.package_cpus(0), set("0,2,4,6,8,10,12,14"));
    assert_eq!(t.llc(1), Some(&set("1,3,5,7,9,11,13,15")));
    assert_eq!((t.node_of(0), t.node_of(1)), (Some(0), Some(1)));
    assert_eq!(t.node_distance(0, 1), Some(21));
    assert_eq!(t.node_distance(1, 1), Some(10));
    assert_eq!(t.cores().len(), 8);
    assert_eq!(
        t.cpu(4).unwrap().core,
        9,
        "Westmere's core ids are 0,1,9,10"
    );
    assert_eq!(t.cpu(0).unwrap().max_freq_khz, Some(2_401_000));
    assert!(t.has_smt() && !t.is_hybrid());
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!(fp.inputs.smt_control.as_deref(), Some("on"));
    assert_eq!(fp.inputs.cpu_model.as_deref(), Some("44"));
    assert!(!fp.inputs.hypervisor_flag);
}

#[test]
fn ryzen_2700x_has_two_ccx() {
    let (t, _) = read_fixture("ryzen-2700x");
    assert_eq!(t.llc_groups(), vec![set("0-3,8-11"), set("4-7,12-15")]);
    assert_eq!(t.llc(3), Some(&set("0-3,8-11")));
    assert_eq!(t.llc(12), Some(&set("4-7,12-15")));
    assert_eq!(t.siblings(3), Some(&set("3,11")));
    assert_eq!(t.llc_cache(0).unwrap().size_bytes, Some(8 << 20));
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.cpu(5).unwrap().cluster, Some(10));
}

#[test]
fn i9_12900k_is_hybrid() {
    let (t, _) = read_fixture("i9-12900k");
    assert!(t.is_hybrid());
    assert_eq!(t.cpu(0).unwrap().core_type, Some(CoreType::Performance));
    assert_eq!(t.cpu(15).unwrap().core_type, Some(CoreType::Performance));
    assert_eq!(t.cpu(16).unwrap().core_type, Some(CoreType::Efficiency));
    assert_eq!(t.siblings(14), Some(&set("14-15")));
    assert_eq!(t.siblings(16), Some(&set("16")));
    let e = t.cpu(21).unwrap();
    assert_eq!(
        e.data_cache(2).unwrap().shared,
        set("20-23"),
        "E-cores share L2 by 4"
    );
    assert_eq!(e.cluster_cpus, set("20-23"));
    let kinds: Vec<(u8, CacheKind)> = e.caches.iter().map(|c| (c.level, c.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1, CacheKind::Data),
            (1, CacheKind::Instruction),
            (2, CacheKind::Unified),
            (3, CacheKind::Unified)
        ]
    );
    assert_eq!(e.max_freq_khz, Some(3_900_000));
    assert_eq!(t.cpu(0).unwrap().max_freq_khz, Some(4_900_000));
    assert_eq!(t.llc(0), Some(&set("0-23")));
    assert_eq!(t.llc(23), Some(&set("0-23")));
    assert_eq!(t.cores().len(), 16);
}

#[test]
fn an_offline_cpu_is_reported_and_never_usable() {
    let (t, _) = read_fixture("i7-7700-cpu3-offline");
    assert_eq!(t.possible, set("0-7"));
    assert_eq!(t.offline, set("3"));
    assert_eq!(t.isolated, set("6"));
    assert_eq!(t.usable(), set("0-2,4-5,7"));
    assert!(t.cpu(3).is_none(), "an offline CPU has no entry");
    assert_eq!(
        t.siblings(7),
        Some(&set("7")),
        "CPU 7 runs alone on its core"
    );
    assert_eq!(t.llc(0), Some(&set("0-2,4-7")));
    assert_eq!(t.cpu(0).unwrap().capacity, Some(1024));
    assert_eq!(t.cpu(0).unwrap().cluster, None, "65535 means no cluster");
}

#[test]
fn a_container_without_cache_info_degrades_with_warnings() {
    let (t, fp) = read_fixture("container-no-cache");
    assert!(t.cpus.iter().all(|c| c.caches.is_empty()));
    assert_eq!(t.llc(0), None);
    assert!(t.llc_groups().is_empty());
    assert_eq!(
        t.siblings(1),
        Some(&set("0-1")),
        "read from the pre-5.3 file names"
    );
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].cpus, set("0-3"));
    for needle in [
        "no cache information",
        "devices/system/node missing",
        "die_id missing",
    ] {
        assert!(
            t.warnings.iter().any(|w| w.contains(needle)),
            "no warning about {needle}: {:?}",
            t.warnings
        );
    }
    assert!(fp.inputs.hypervisor_flag);
    assert_eq!(fp.inputs.bios_vendor, None);
    assert_eq!(fp.inputs.smt_control, None);
}

#[test]
fn the_captured_vm_matches_what_it_showed() {
    let (t, fp) = read_fixture("epyc-vm-2cpu");
    assert_eq!(t.online, set("0-1"));
    assert!(!t.has_smt());
    assert_eq!(t.llc(0), Some(&set("0-1")));
    assert_eq!(t.cpu(1).unwrap().data_cache(2).unwrap().shared, set("1"));
    assert_eq!(fp.inputs.smt_control.as_deref(), Some("notsupported"));
    assert!(fp.inputs.hypervisor_flag);
    assert_eq!(
        fp.inputs.bios_version, None,
        "this microVM has no DMI table"
    );
}

// ---- fingerprint on edited copies ------------------------------------------------------

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

fn edited_fingerprint(name: &str, edit: impl FnOnce(&Path)) -> Fingerprint {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture(name), dir.path());
    edit(dir.path());
    Fingerprint::read(&SysRoot::machine(dir.path())).unwrap()
}

#[test]
fn fingerprint_survives_a_reboot_hotplug_and_smt_toggles_and_changes_with_bios_and_cpus() {
    let (_, original) = read_fixture("xeon-e5620");
    let same = edited_fingerprint("xeon-e5620", |_| {});
    assert_eq!(same, original, "same files elsewhere, same fingerprint");

    // A reboot: frequencies in cpuinfo move, nothing else.
    let rebooted = edited_fingerprint("xeon-e5620", |d| {
        let p = d.join("proc/cpuinfo");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            text.replace("cpu MHz\t: 1596.000", "cpu MHz\t: 2394.000"),
        )
        .unwrap();
    });
    assert_eq!(rebooted.hex, original.hex);

    let bios = edited_fingerprint("xeon-e5620", |d| {
        std::fs::write(d.join("sys/class/dmi/id/bios_version"), "I23\n").unwrap();
        std::fs::write(d.join("sys/class/dmi/id/bios_date"), "11/02/2013\n").unwrap();
    });
    assert_ne!(bios.hex, original.hex, "a BIOS update changes it");
    assert_eq!(
        original.differences(&bios),
        vec![
            "bios_version: I22 -> I23",
            "bios_date: 05/05/2011 -> 11/02/2013"
        ]
    );

    // SMT switched off at run time: the siblings go offline, the hardware stays.
    let smt_off = edited_fingerprint("xeon-e5620", |d| {
        std::fs::write(d.join("sys/devices/system/cpu/smt/control"), "off\n").unwrap();
        std::fs::write(d.join("sys/devices/system/cpu/smt/active"), "0\n").unwrap();
        std::fs::write(d.join("sys/devices/system/cpu/online"), "0-7\n").unwrap();
    });
    assert_eq!(smt_off.hex, original.hex, "an SMT toggle keeps it");
    assert_eq!(smt_off.inputs.online.to_string(), "0-7", "still read");

    // Fewer CPUs present (a socket removed, SMT off in the firmware) is other hardware.
    let fewer = edited_fingerprint("xeon-e5620", |d| {
        std::fs::write(d.join("sys/devices/system/cpu/present"), "0-7\n").unwrap();
    });
    assert_ne!(fewer.hex, original.hex, "other present CPUs change it");
    assert_eq!(original.differences(&fewer), vec!["present: 0-15 -> 0-7"]);
}

// ---- bad and missing input ------------------------------------------------------------

#[test]
fn x3d_fixture_knows_its_caches_rankings_and_mode() {
    let (t, _) = read_fixture("r9-7950x3d");
    assert_eq!(t.x3d_mode.as_deref(), Some("frequency"));
    assert_eq!(t.core_types_from, None, "rankings are not capacity classes");
    assert_eq!(t.kind_of(0), Some(CoreType::Performance), "one kind: all P");
    assert_eq!(t.cpus_of_kind(CoreType::Efficiency), CpuSet::new());
    let groups = t.llc_summary();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].cpus, set("0-7,16-23"));
    assert_eq!(groups[0].size_bytes, Some(96 << 20));
    assert_eq!(groups[0].cores, 8);
    assert_eq!(groups[0].bytes_per_core, Some(12 << 20));
    assert_eq!(groups[1].bytes_per_core, Some(4 << 20));
    assert!(groups[1].best_ranking > groups[0].best_ranking);
    assert!(groups[1].max_freq_khz > groups[0].max_freq_khz);
    assert_eq!(t.cpu(8).unwrap().prefcore_ranking, Some(236));
    assert_eq!(t.cpu(8).unwrap().highest_perf, Some(236));
}

#[test]
fn e_cores_first_hybrid_is_read_by_kind() {
    let (t, _) = read_fixture("hybrid-e-first");
    assert_eq!(t.cpus_of_kind(CoreType::Efficiency), set("0-7"));
    assert_eq!(t.cpus_of_kind(CoreType::Performance), set("8-19"));
    assert_eq!(t.siblings(8), Some(&set("8,14")));
    assert_eq!(t.cpu(0).unwrap().cluster_cpus, set("0-3"));
}

#[test]
fn capacity_classes_give_kinds_without_pmu_lists() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-3\n").unwrap();
    for (c, cap) in [(0, 1024), (1, 1024), (2, 446), (3, 446)] {
        std::fs::create_dir_all(cpu.join(format!("cpu{c}"))).unwrap();
        std::fs::write(cpu.join(format!("cpu{c}/cpu_capacity")), format!("{cap}\n")).unwrap();
    }
    let t = Topology::discover(&SysRoot::with_sys(dir.path())).unwrap();
    assert_eq!(
        t.core_types_from.as_deref(),
        Some("devices/system/cpu/cpuN/cpu_capacity")
    );
    assert_eq!(t.cpus_of_kind(CoreType::Performance), set("0-1"));
    assert_eq!(t.cpus_of_kind(CoreType::Efficiency), set("2-3"));
    // A mode the driver does not write is an error naming the file.
    let dev = dir.path().join("devices/platform/AMDI0101:00");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("amd_x3d_mode"), "turbo\n").unwrap();
    let drv = dir.path().join("bus/platform/drivers/amd_x3d_vcache");
    std::fs::create_dir_all(&drv).unwrap();
    std::os::unix::fs::symlink(&dev, drv.join("AMDI0101:00")).unwrap();
    let e = Topology::discover(&SysRoot::with_sys(dir.path())).unwrap_err();
    assert!(
        e.to_string().contains("amd_x3d_mode:1:1: ")
            && e.to_string().contains("expected cache or frequency"),
        "{e}"
    );
}

#[test]
fn topology_json_carries_kinds_caches_rankings_and_the_x3d_mode() {
    let run = |name: &str| -> serde_json::Value {
        let out = super::helper::pinnerd_command()
            .args(["topology", "--json", "--sysfs"])
            .arg(fixture(name))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = run("r9-7950x3d");
    assert_eq!(v["x3d_mode"], "frequency");
    assert_eq!(v["core_types_from"], serde_json::Value::Null);
    let groups = v["llc_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["size_bytes"], 96u64 << 20);
    assert_eq!(groups[0]["bytes_per_core"], 12u64 << 20);
    assert_eq!(groups[1]["bytes_per_core"], 4u64 << 20);
    assert_eq!(groups[1]["best_ranking"], 236);
    assert_eq!(v["cpus"][8]["prefcore_ranking"], 236);
    let v = run("hybrid-e-first");
    assert_eq!(v["core_types_from"], "devices/cpu_core/cpus");
    assert_eq!(v["cpus"][0]["core_type"], "efficiency");
    assert_eq!(v["cpus"][8]["core_type"], "performance");
}

#[test]
fn the_first_capacity_file_that_splits_in_two_names_the_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-3\n").unwrap();
    // cpu_capacity is flat; highest_perf has two clear classes (a Zen 5 + Zen 5c part).
    for (c, perf) in [(0, 208), (1, 208), (2, 142), (3, 142)] {
        let d = cpu.join(format!("cpu{c}"));
        std::fs::create_dir_all(d.join("acpi_cppc")).unwrap();
        std::fs::write(d.join("cpu_capacity"), "1024\n").unwrap();
        std::fs::write(d.join("acpi_cppc/highest_perf"), format!("{perf}\n")).unwrap();
    }
    let t = Topology::discover(&SysRoot::with_sys(dir.path())).unwrap();
    assert_eq!(
        t.core_types_from.as_deref(),
        Some("devices/system/cpu/cpuN/acpi_cppc/highest_perf")
    );
    assert_eq!(t.cpus_of_kind(CoreType::Efficiency), set("2-3"));
    assert_eq!(t.cpu(0).unwrap().highest_perf, Some(208));
    // One CPU without the file: that source is skipped, and all are one kind.
    std::fs::remove_file(cpu.join("cpu3/acpi_cppc/highest_perf")).unwrap();
    let t = Topology::discover(&SysRoot::with_sys(dir.path())).unwrap();
    assert_eq!(t.core_types_from, None);
    assert_eq!(t.cpus_of_kind(CoreType::Performance), set("0-3"));
}
