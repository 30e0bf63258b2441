use std::path::Path;

use super::*;
use crate::devices;
use crate::placement::Policy;
use crate::rules::CpuTarget;
use crate::sysroot::SysRoot;

fn machine(name: &str) -> (SysRoot, Topology, Domains, Facts) {
    let root = SysRoot::machine(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name),
    );
    let t = Topology::discover(&root).unwrap();
    let d = Domains::from_topology(&t).unwrap();
    let f = Facts::from_topology(&t);
    (root, t, d, f)
}

/// `n` CPUs, compact, among every usable CPU of the machine, shaped by `s` with no
/// devices named.
fn compact(
    t: &Topology,
    d: &Domains,
    f: &Facts,
    n: usize,
    smt: SmtPolicy,
    s: Shape,
) -> Result<(Placement, Shaped), PlacementError> {
    place_shaped(
        d,
        f,
        &Devices::new(),
        &req(n, Policy::Compact, smt),
        &s,
        &t.usable(),
    )
}

use crate::cpuset::set;

fn req(count: usize, policy: Policy, smt: SmtPolicy) -> Request {
    Request {
        count,
        policy,
        smt,
        ..Default::default()
    }
}

fn shape(core_type: Option<CoreType>, prefer: Option<Prefer>, near: Option<&str>) -> Shape {
    Shape {
        core_type,
        prefer,
        near: near.map(str::to_string),
    }
}

/// Only cores of `c`.
fn kind(c: CoreType) -> Shape {
    shape(Some(c), None, None)
}

/// The cache group `p` prefers first.
fn preferring(p: Prefer) -> Shape {
    shape(None, Some(p), None)
}

#[test]
fn performance_cores_without_siblings_on_both_hybrid_numberings() {
    for (name, p_cores) in [("i9-12900k", "0-15"), ("hybrid-e-first", "8-19")] {
        let (_, t, d, f) = machine(name);
        // Without the key, the E cluster's shared L2 wins (the complaint).
        let plain =
            placement::place(&d, &req(4, Policy::Compact, SmtPolicy::Avoid), &t.usable()).unwrap();
        assert!(
            !plain.cpus.is_subset(&set(p_cores)),
            "{name}: {}",
            plain.cpus
        );
        let (p, shaped) =
            compact(&t, &d, &f, 4, SmtPolicy::Avoid, kind(CoreType::Performance)).unwrap();
        assert!(p.cpus.is_subset(&set(p_cores)), "{name}: {}", p.cpus);
        let cores: std::collections::BTreeSet<_> = p
            .cpus
            .iter()
            .map(|c| t.siblings(c).unwrap().first())
            .collect();
        assert_eq!(cores.len(), 4, "{name}: distinct cores {}", p.cpus);
        assert_eq!(shaped.by[0].key, "core-type");
        assert!(p
            .explanation
            .notes
            .iter()
            .any(|n| n.starts_with("core-type performance")));
    }
}

#[test]
fn efficiency_compact_takes_one_e_cluster() {
    for (name, clusters) in [
        ("i9-12900k", ["16-19", "20-23"]),
        ("hybrid-e-first", ["0-3", "4-7"]),
    ] {
        let (_, t, d, f) = machine(name);
        let (p, _) = compact(&t, &d, &f, 4, SmtPolicy::Allow, kind(CoreType::Efficiency)).unwrap();
        assert!(
            clusters.iter().any(|c| p.cpus == set(c)),
            "{name}: {}",
            p.cpus
        );
    }
}

#[test]
fn a_kind_too_small_is_refused_not_widened() {
    let (_, t, d, f) = machine("hybrid-e-first");
    let e = compact(&t, &d, &f, 9, SmtPolicy::Allow, kind(CoreType::Efficiency)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "asked for 9 efficiency CPUs but only 8 are usable (efficiency cores: CPUs 0-7; 8 of them free, 8 CPUs); core-type is never widened"
    );
    // Seven P-cores with smt = avoid: there are six.
    let e = compact(&t, &d, &f, 7, SmtPolicy::Avoid, kind(CoreType::Performance)).unwrap_err();
    assert!(e.to_string().contains("only 6 are usable"), "{e}");
    // One kind of core: every core is performance, none is efficiency.
    let (_, t, d, f) = machine("r9-7950x3d");
    let (p, _) = compact(&t, &d, &f, 2, SmtPolicy::Allow, kind(CoreType::Performance)).unwrap();
    assert_eq!(p.cpus.len(), 2);
    let e = compact(&t, &d, &f, 1, SmtPolicy::Allow, kind(CoreType::Efficiency)).unwrap_err();
    assert!(e.to_string().contains("one kind of core"), "{e}");
}

#[test]
fn prefer_picks_the_vcache_or_the_frequency_ccd() {
    let (_, t, d, f) = machine("r9-7950x3d");
    for (prefer, ccd, word) in [
        (Prefer::Cache, "0-7,16-23", "12 MiB per core"),
        (Prefer::Frequency, "8-15,24-31", "ranking up to 236"),
    ] {
        let (p, shaped) = compact(&t, &d, &f, 4, SmtPolicy::Avoid, preferring(prefer)).unwrap();
        assert!(p.cpus.is_subset(&set(ccd)), "{prefer}: {}", p.cpus);
        assert_eq!(shaped.candidates, set(ccd));
        assert!(shaped.by[0].note.contains(word), "{}", shaped.by[0].note);
    }
    // Twelve cores do not fit in one CCD: prefer steps aside, and says so.
    let (p, shaped) = compact(&t, &d, &f, 12, SmtPolicy::Avoid, preferring(Prefer::Cache)).unwrap();
    assert_eq!(p.cpus.len(), 12);
    assert!(shaped.by[0].note.contains("not applied"));
    // Frequency without rankings falls back to the maximum frequency.
    let mut g = f.clone();
    for l in &mut g.llc {
        l.best_ranking = None;
    }
    let s = narrow(
        &g,
        &Devices::new(),
        &shape(None, Some(Prefer::Frequency), None),
        &t.usable(),
        2,
        false,
    )
    .unwrap();
    assert_eq!(s.candidates, set("8-15,24-31"));
    assert!(
        s.by[0].note.contains("maximum frequency 5.76 GHz"),
        "{}",
        s.by[0].note
    );
}

#[test]
fn near_keeps_the_devices_node_and_widens_by_distance() {
    let (root, t, d, f) = machine("xeon-2s-nic-nvme");
    let devs = devices::resolve_all(&root, ["ens1f0", "/dev/nvme0n1", "eno1", "eth9"]);
    // The candidates `near = dev` leaves for `n` CPUs, siblings allowed.
    let near = |dev, n| {
        narrow(
            &f,
            &devs,
            &shape(None, None, Some(dev)),
            &t.usable(),
            n,
            false,
        )
    };
    for dev in ["ens1f0", "/dev/nvme0n1"] {
        let (p, shaped) = place_shaped(
            &d,
            &f,
            &devs,
            &req(4, Policy::Compact, SmtPolicy::Avoid),
            &shape(None, None, Some(dev)),
            &t.usable(),
        )
        .unwrap();
        assert!(p.cpus.is_subset(&set("8-15,24-31")), "{dev}: {}", p.cpus);
        assert!(
            shaped.by[0].note.contains("node 1"),
            "{}",
            shaped.by[0].note
        );
    }
    // 20 CPUs: node 1 holds 16, node 0 is added with a note.
    let s = near("ens1f0", 20).unwrap();
    assert_eq!(s.candidates, set("0-31"));
    assert!(
        s.by[0]
            .note
            .contains("hold only 16 usable CPUs of 20; added node 0 (distance 21)"),
        "{}",
        s.by[0].note
    );
    // Placed, the device's own cores come first, whole; the rest from node 0.
    let (p, _) = place_shaped(
        &d,
        &f,
        &devs,
        &req(10, Policy::Compact, SmtPolicy::Avoid),
        &shape(None, None, Some("ens1f0")),
        &t.usable(),
    )
    .unwrap();
    assert_eq!(p.cpus.intersection(&set("8-15,24-31")), set("8-15"));
    assert_eq!(p.cpus.len(), 10);
    assert_eq!(p.explanation.autopilot.as_ref().unwrap().0, set("0-9"));
    // No node: a warning and no restriction.
    let s = near("eno1", 4).unwrap();
    assert_eq!(s.candidates, t.usable());
    assert!(s.by.is_empty());
    assert!(s.warnings[0].contains("numa_node -1"), "{:?}", s.warnings);
    // Unknown: an error naming it.
    let e = near("eth9", 4).unwrap_err();
    assert!(
        e.to_string().starts_with("near \"eth9\": unknown device"),
        "{e}"
    );
}

#[test]
fn keys_combine_in_order_and_plain_domains_refuse_them() {
    let (root, t, d, f) = machine("xeon-2s-nic-nvme");
    let devs = devices::resolve_all(&root, ["ens1f0"]);
    let s = narrow(
        &f,
        &devs,
        &shape(
            Some(CoreType::Performance),
            Some(Prefer::Cache),
            Some("ens1f0"),
        ),
        &t.usable(),
        2,
        true,
    )
    .unwrap();
    let keys: Vec<&str> = s.by.iter().map(|b| b.key).collect();
    assert_eq!(keys, ["core-type", "near", "prefer"]);
    assert_eq!(s.candidates, set("8-15,24-31"));
    let pr = PlacementRequest {
        target: CpuTarget::Count(2),
        within: None,
        policy: Policy::Compact,
        smt: SmtPolicy::Allow,
        exclusive: false,
        shape: shape(None, None, Some("ens1f0")),
    };
    let e = d.choose(&pr, &t.usable()).unwrap_err();
    assert!(e.to_string().contains("no topology facts"), "{e}");
    let shaper = Shaper {
        domains: &d,
        facts: &f,
        devices: &devs,
    };
    let c = shaper.choose(&pr, &t.usable()).unwrap();
    assert!(c.cpus.is_subset(&set("8-15,24-31")), "{}", c.cpus);
}

#[test]
fn words_round_trip() {
    for p in [Prefer::Cache, Prefer::Frequency] {
        assert_eq!(p.as_str().parse::<Prefer>().unwrap(), p);
    }
    for k in [CoreType::Performance, CoreType::Efficiency] {
        assert_eq!(kind_word(k).parse::<CoreType>().unwrap(), k);
    }
    assert_eq!(
        "big".parse::<CoreType>().unwrap_err().to_string(),
        "unknown core type \"big\": expected one of performance, efficiency"
    );
}
