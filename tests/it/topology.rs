//! Topology discovery and the fingerprint on the real sysfs of the machine running the
//! tests, and `pinnerd topology` end to end.

use std::process::Command;

use pinnerd::fingerprint::Fingerprint;
use pinnerd::sysroot::SysRoot;
use pinnerd::topology::Topology;
use pinnerd::CpuSet;

/// Invariants every sane topology satisfies, whatever the machine.
fn assert_consistent(t: &Topology) {
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

#[test]
fn cli_json_has_the_documented_fields_for_every_online_cpu() {
    let out = Command::new(env!("CARGO_BIN_EXE_pinnerd"))
        .args(["topology", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = Topology::discover(&SysRoot::default()).unwrap();
    let fp = Fingerprint::read(&SysRoot::default()).unwrap();
    assert_eq!(v["fingerprint"], fp.hex);
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), t.online.len());
    for (entry, c) in cpus.iter().zip(&t.cpus) {
        let ids = |key: &str| -> CpuSet {
            entry[key]
                .as_array()
                .unwrap_or_else(|| panic!("{key} is not an array: {entry}"))
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        assert_eq!(entry["cpu"], c.cpu);
        assert_eq!(entry["package"], c.package);
        assert_eq!(entry["die"], c.die);
        assert_eq!(entry["core"], c.core);
        assert_eq!(entry["node"], c.node);
        assert_eq!(ids("siblings"), c.siblings);
        match t.llc(c.cpu) {
            Some(llc) => assert_eq!(&ids("llc"), llc),
            None => assert!(entry["llc"].is_null()),
        }
    }
}

#[test]
fn cli_tree_shows_every_online_cpu() {
    let out = Command::new(env!("CARGO_BIN_EXE_pinnerd"))
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
