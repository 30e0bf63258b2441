//! Domains and placement on every usable published matrix in `tests/fixtures/c2c-data`,
//! against the counts in its INDEX.md and against an exact search.

use std::path::{Path, PathBuf};

use pinnerd::domains::{Domains, FindingKind, LevelKind};
use pinnerd::matrix::LatencyMatrix;
use pinnerd::placement::{place, Policy, Request, SmtPolicy};
use pinnerd::CpuSet;

use super::domains::qemu_layout;

pub(super) fn data_dir() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot"
    ))
    .to_owned()
}

/// Files INDEX.md calls unusable, and why. Every other file in the directory is used.
const EXCLUDED: &[(&str, &str)] = &[
    (
        "m1.ultra.16pp4e.csv",
        "measured on macOS, which ignores affinity: NOT a valid matrix",
    ),
    (
        "IBM_PPC970_2.2_at_1.8GHz_x2.txt",
        "not a CSV: pasted console output",
    ),
];

/// What INDEX.md says each usable file holds: CPUs, SMT pairs, the CPU count of its
/// cache/CCX groups (threads included) when it names k-core groups below the socket,
/// and sockets. `smt` is the INDEX's own count of pairs, except where noted.
struct Expect {
    file: &'static str,
    n: usize,
    smt: usize,
    group: Option<usize>,
    sockets: usize,
}

const EXPECT: &[Expect] = &[
    Expect {
        file: "AMD_EPYC_7773X.csv",
        n: 128,
        smt: 64,
        group: Some(16),
        sockets: 1,
    },
    Expect {
        file: "AMD_EPYC_7R13_48-Core_Processor.csv",
        n: 192,
        smt: 96,
        group: Some(16),
        sockets: 2,
    },
    Expect {
        file: "AMD_Ryzen_7_2700X_Eight-Core_Processor.csv",
        n: 16,
        smt: 8,
        group: Some(8),
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_7_5700X.csv",
        n: 16,
        smt: 8,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_7_5800U.csv",
        n: 16,
        smt: 8,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_9_5900HX_at_3.3_GHz.csv",
        n: 16,
        smt: 8,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_9_5900X.csv",
        n: 24,
        smt: 12,
        group: Some(12),
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_9_5950X_at_3.40_GHz.csv",
        n: 32,
        smt: 16,
        group: Some(16),
        sockets: 1,
    },
    // INDEX: "groups of <= 12 cores" (quantised values); the two CCDs hold 16 CPUs each.
    Expect {
        file: "AMD_Ryzen_9_7950X.csv",
        n: 32,
        smt: 9,
        group: Some(16),
        sockets: 1,
    },
    // 2 dies x 2 CCX: 4-core CCX groups (8 CPUs); the 8-core dies are checked below.
    Expect {
        file: "AMD_Ryzen_Threadripper_1950X.csv",
        n: 32,
        smt: 16,
        group: Some(8),
        sockets: 1,
    },
    Expect {
        file: "AMD_Ryzen_Threadripper_3960X_3.80GHz_24_Cores_Zen_2_3rd_Gen_2019-Q4.csv",
        n: 48,
        smt: 24,
        group: Some(6),
        sockets: 1,
    },
    Expect {
        file: "AWS_Graviton2.csv",
        n: 64,
        smt: 0,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "AWS_Graviton3.csv",
        n: 64,
        smt: 0,
        group: None,
        sockets: 1,
    },
    // INDEX counts "1 pair ~52.7" by its ratio rule; an Apple core has no SMT, and 52.7 ns
    // is an L2 cluster's latency, so no SMT level is expected; its "groups of <= 3
    // cores" are the clusters.
    Expect {
        file: "Apple_M1_Pro.csv",
        n: 8,
        smt: 0,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Dual_AMD_EPYC_7742_64-Core_Processor.csv",
        n: 256,
        smt: 128,
        group: Some(8),
        sockets: 2,
    },
    Expect {
        file: "Dual_IBM_Power7_8_coresat3.3_GHz_2010-Q1.csv",
        n: 16,
        smt: 0,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Intel_Xeon_CPU_E5-2630_v4_at_2.20GHz.csv",
        n: 40,
        smt: 20,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Intel_Xeon_CPU_E5-2680_v4_at_2.40GHz.csv",
        n: 56,
        smt: 28,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Intel_Xeon_CPU_E5-2690_0_at_2.90GHz.csv",
        n: 32,
        smt: 16,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Intel_Xeon_CPU_X5650_at_2.67GHz.csv",
        n: 24,
        smt: 12,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
        n: 64,
        smt: 32,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Dual_Sun-Oracle_SPARC_T4_8_coresat2.85_GHz.csv",
        n: 16,
        smt: 0,
        group: None,
        sockets: 2,
    },
    // One socket, two 32-core dies.
    Expect {
        file: "HiSilicon_Kunpeng_920-6426_at_2.6GHz.csv",
        n: 64,
        smt: 0,
        group: Some(32),
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i5-10310U.csv",
        n: 8,
        smt: 4,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i7-6700K.csv",
        n: 8,
        smt: 4,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i9-12900K.csv",
        n: 24,
        smt: 8,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i9-9900K_CPU_at_3.60_GHz.csv",
        n: 16,
        smt: 8,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Atom_CPU_D510_at_1.66GHz.csv",
        n: 4,
        smt: 2,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i5-4590_CPU_at_3.30GHz.csv",
        n: 4,
        smt: 0,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Core_i7-1165G7_at_2.80GHz.csv",
        n: 8,
        smt: 4,
        group: None,
        sockets: 1,
    },
    Expect {
        file: "Intel_Xeon_Gold_6242_at_2.8GHz.csv",
        n: 32,
        smt: 16,
        group: None,
        sockets: 1,
    },
    // INDEX: "32 pairs ~41.4 ... tile-mates sharing L2, not SMT": a cluster level.
    Expect {
        file: "Intel_Xeon_Phi_CPU_7210_at_1.30GHz.csv",
        n: 64,
        smt: 0,
        group: Some(2),
        sockets: 1,
    },
    Expect {
        file: "Intel_Xeon_CPU_E5-2695_v4_at_2.10GHz.csv",
        n: 72,
        smt: 36,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Intel_Xeon_Platinum_8275CL_CPU_at_3.00GHz.csv",
        n: 96,
        smt: 48,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Intel_Xeon_Platinum_8375C_CPU_at_2.90GHz.csv",
        n: 128,
        smt: 64,
        group: None,
        sockets: 2,
    },
    Expect {
        file: "Loongson_3A5000HV_2.5GHz_4_Cores_2021-Q3.csv",
        n: 4,
        smt: 0,
        group: None,
        sockets: 1,
    },
];

pub(super) fn load(file: &str) -> LatencyMatrix {
    LatencyMatrix::load(&data_dir().join(file)).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn all(d: &Domains) -> CpuSet {
    d.cpus().iter().copied().collect()
}

#[test]
fn every_file_is_either_used_or_excluded_by_name() {
    let mut names: Vec<String> = std::fs::read_dir(data_dir())
        .expect("tests/fixtures/c2c-data/nviennot is part of the repository")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut known: Vec<String> = EXPECT
        .iter()
        .map(|e| e.file.to_string())
        .chain(EXCLUDED.iter().map(|e| e.0.to_string()))
        .collect();
    known.sort();
    assert_eq!(names, known);
    // The excluded ones really are unusable or flagged, not silently skipped.
    let e = LatencyMatrix::load(&data_dir().join(EXCLUDED[1].0)).unwrap_err();
    assert!(e.to_string().contains("IBM_PPC970"), "{e}");
}

#[test]
fn domains_recover_smt_cache_groups_and_sockets() {
    for e in EXPECT {
        let m = load(e.file);
        assert_eq!(m.len(), e.n, "{}", e.file);
        let (d, _) = Domains::reconcile(&m, None).unwrap();
        let levels = d.levels();
        let ctx = || {
            levels
                .iter()
                .map(|l| format!("{}:{}x{:?}", l.name(), l.groups.len(), l.latency_ns))
                .collect::<Vec<_>>()
                .join(" ")
        };
        // SMT pairs.
        let pairs = levels
            .iter()
            .find(|l| l.kind == LevelKind::Smt)
            .map(|l| l.groups.iter().filter(|g| g.len() == 2).count())
            .unwrap_or(0);
        assert_eq!(pairs, e.smt, "{}: SMT pairs; levels {}", e.file, ctx());
        // Cache / CCX / cluster groups of the INDEX's size, covering every CPU.
        if let Some(size) = e.group {
            assert!(
                levels
                    .iter()
                    .any(|l| l.groups.len() == e.n / size
                        && l.groups.iter().all(|g| g.len() == size)),
                "{}: no level of {}-CPU groups; levels {}",
                e.file,
                size,
                ctx()
            );
        }
        // Sockets: the level under the machine has one group per socket.
        let top = &levels[levels.len() - 1];
        assert_eq!(top.kind, LevelKind::Machine);
        assert_eq!(top.groups.len(), 1);
        if e.sockets > 1 {
            let below = &levels[levels.len() - 2];
            assert_eq!(below.groups.len(), e.sockets, "{}: {}", e.file, ctx());
            assert!(
                below.groups.iter().all(|g| g.len() == e.n / e.sockets),
                "{}: {}",
                e.file,
                ctx()
            );
        }
        // Typical latency rises level by level (the NUMA-home level keeps its fast figure).
        let lat: Vec<f64> = levels.iter().filter_map(|l| l.latency_ns).collect();
        assert!(lat.windows(2).all(|w| w[0] < w[1]), "{}: {}", e.file, ctx());
    }
}

#[test]
fn threadripper_dies_and_numa_home_artefacts_are_reported() {
    let (d, f) = Domains::reconcile(&load("AMD_Ryzen_Threadripper_1950X.csv"), None).unwrap();
    assert!(d
        .levels()
        .iter()
        .any(|l| l.groups.len() == 2 && l.groups.iter().all(|g| g.len() == 16)));
    assert!(f.iter().any(|f| f.kind == FindingKind::NumaHome), "{f:?}");
    let (d, f) = Domains::reconcile(&load("AMD_EPYC_7R13_48-Core_Processor.csv"), None).unwrap();
    let home: Vec<_> = f
        .iter()
        .filter(|f| f.kind == FindingKind::NumaHome)
        .collect();
    assert_eq!(home.len(), 1, "{f:?}");
    assert_eq!(home[0].cpus.to_string(), "48-95,144-191");
    assert!(
        home[0].message.contains("NUMA-home artefact"),
        "{}",
        home[0]
    );
    let socket = &d.levels()[d.levels().len() - 2];
    assert_eq!(socket.groups[0].to_string(), "0-47,96-143");
    // The level's latency is the hardware's (the fast socket's), not a blend.
    let l = socket.latency_ns.unwrap();
    assert!((100.0..115.0).contains(&l), "{l}");
}

/// Exact oracle: the smallest threshold t such that the graph of pairs ≤ t has a
/// K-clique (branch and bound over candidates sorted by index).
fn exact_minmax(m: &Domains, k: usize) -> f64 {
    let n = m.cpus().len();
    let mut values: Vec<f64> = (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .map(|(i, j)| m.cost(i, j))
        .collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let (mut lo, mut hi) = (0usize, values.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if has_clique(m, k, values[mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    values[lo]
}

fn has_clique(m: &Domains, k: usize, t: f64) -> bool {
    let n = m.cpus().len();
    let adj: Vec<Vec<usize>> = (0..n)
        .map(|i| (0..n).filter(|&j| j != i && m.cost(i, j) <= t).collect())
        .collect();
    fn extend(adj: &[Vec<usize>], cand: &[usize], depth: usize, k: usize) -> bool {
        if depth == k {
            return true;
        }
        if cand.len() + depth < k {
            return false;
        }
        for (x, &v) in cand.iter().enumerate() {
            if cand.len() - x + depth < k {
                return false;
            }
            let next: Vec<usize> = cand[x + 1..]
                .iter()
                .copied()
                .filter(|u| adj[v].binary_search(u).is_ok())
                .collect();
            if extend(adj, &next, depth + 1, k) {
                return true;
            }
        }
        false
    }
    for v in 0..n {
        let cand: Vec<usize> = adj[v].iter().copied().filter(|&u| u > v).collect();
        if extend(&adj, &cand, 1, k) {
            return true;
        }
    }
    false
}

#[test]
fn compact_is_within_five_percent_of_the_exact_minmax() {
    for e in EXPECT {
        let d = Domains::from_matrix(&load(e.file)).unwrap();
        for k in [2usize, 4, 8] {
            if k > e.n {
                continue;
            }
            let req = Request {
                count: k,
                ..Default::default()
            };
            let p = place(&d, &req, &all(&d)).unwrap();
            assert_eq!(p.cpus.len(), k);
            let got = p.explanation.cost.worst_ns.unwrap();
            let best = exact_minmax(&d, k);
            assert!(
                got <= best * 1.05 + 0.05,
                "{} K={k}: compact {} has worst {got} ns, the exact optimum is {best} ns",
                e.file,
                p.cpus
            );
        }
    }
}

#[test]
fn spread_takes_distinct_domains_at_the_coarsest_level_with_enough() {
    for e in EXPECT {
        let d = Domains::from_matrix(&load(e.file)).unwrap();
        for k in [2usize, 4, 8] {
            if k > e.n {
                continue;
            }
            let req = Request {
                count: k,
                policy: Policy::Spread,
                ..Default::default()
            };
            let p = place(&d, &req, &all(&d)).unwrap();
            assert_eq!(p.cpus.len(), k, "{}", e.file);
            let level = d
                .levels()
                .iter()
                .position(|l| l.name() == p.explanation.level)
                .unwrap();
            let idx: Vec<usize> = p.cpus.iter().map(|c| d.index_of(c).unwrap()).collect();
            let mut groups: Vec<usize> = idx.iter().map(|&i| d.group_of(level, i)).collect();
            groups.sort_unstable();
            groups.dedup();
            if d.levels()[level].groups.len() >= k {
                assert_eq!(
                    groups.len(),
                    k,
                    "{} K={k}: {} at {}",
                    e.file,
                    p.cpus,
                    p.explanation.level
                );
                // No coarser level (below the machine) has k groups.
                for coarser in &d.levels()[level + 1..d.levels().len() - 1] {
                    assert!(coarser.groups.len() < k, "{} K={k}", e.file);
                }
            }
        }
    }
}

#[test]
fn smt_avoid_never_picks_siblings() {
    for e in EXPECT {
        let d = Domains::from_matrix(&load(e.file)).unwrap();
        let Some(smt) = d.smt_level() else { continue };
        for policy in [Policy::Compact, Policy::Spread] {
            for k in [2usize, 4, 8] {
                if k > e.n / 2 {
                    continue;
                }
                let req = Request {
                    count: k,
                    policy,
                    smt: SmtPolicy::Avoid,
                    ..Default::default()
                };
                let p = place(&d, &req, &all(&d)).unwrap();
                let mut cores: Vec<usize> = p
                    .cpus
                    .iter()
                    .map(|c| d.group_of(smt, d.index_of(c).unwrap()))
                    .collect();
                cores.sort_unstable();
                cores.dedup();
                assert_eq!(cores.len(), k, "{} {policy} K={k}: {}", e.file, p.cpus);
            }
        }
    }
}

#[test]
fn prefer_siblings_fills_whole_cores_and_exclusive_reserves_them() {
    let d = Domains::from_matrix(&load("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv")).unwrap();
    let req = Request {
        count: 4,
        smt: SmtPolicy::PreferSiblings,
        ..Default::default()
    };
    let p = place(&d, &req, &all(&d)).unwrap();
    let smt = d.smt_level().unwrap();
    let mut cores: Vec<usize> = p
        .cpus
        .iter()
        .map(|c| d.group_of(smt, d.index_of(c).unwrap()))
        .collect();
    cores.dedup();
    cores.sort_unstable();
    cores.dedup();
    assert_eq!(cores.len(), 2, "{}", p.cpus);
    // Exclusive + avoid: 2 CPUs on 2 whole free cores, siblings reserved.
    let busy: CpuSet = "32".parse().unwrap(); // sibling of CPU 0 taken by someone else
    let avail = all(&d).difference(&busy);
    let req = Request {
        count: 2,
        smt: SmtPolicy::Avoid,
        exclusive: true,
        ..Default::default()
    };
    let p = place(&d, &req, &avail).unwrap();
    assert!(!p.cpus.contains(0), "CPU 0's core is not free: {}", p.cpus);
    assert_eq!(p.reserved.len(), 4, "{} / {}", p.cpus, p.reserved);
    assert!(p.cpus.is_subset(&p.reserved));
}

#[test]
fn exclusions_and_best_fit_keep_free_domains_whole() {
    // 5950X: two 16-CPU CCDs. With 2 CPUs of CCD 0 taken, a 4-CPU request goes to the
    // already-broken CCD 0, leaving CCD 1 whole.
    let d = Domains::from_matrix(&load("AMD_Ryzen_9_5950X_at_3.40_GHz.csv")).unwrap();
    let llc = d
        .levels()
        .iter()
        .position(|l| l.kind == LevelKind::Cache)
        .unwrap();
    let ccd0 = d.levels()[llc].groups[0].clone();
    let taken: CpuSet = ccd0.iter().take(2).collect();
    let avail = all(&d).difference(&taken);
    let req = Request {
        count: 4,
        smt: SmtPolicy::Avoid,
        ..Default::default()
    };
    let p = place(&d, &req, &avail).unwrap();
    assert!(p.cpus.is_subset(&ccd0), "{} not in {}", p.cpus, ccd0);
    assert!(p.cpus.is_disjoint(&taken));
    // Excluding all of CCD 0 moves it.
    let req = Request {
        count: 4,
        smt: SmtPolicy::Avoid,
        exclude: ccd0.clone(),
        ..Default::default()
    };
    let p = place(&d, &req, &all(&d)).unwrap();
    assert!(p.cpus.is_disjoint(&ccd0));
    // Deterministic.
    assert_eq!(place(&d, &req, &all(&d)).unwrap(), p);
}

#[test]
fn explanation_compares_with_autopilot() {
    // Dual Xeon Gold: CPUs 0 and 1 are not siblings (0/32 are), so autopilot K=2 pays
    // the mesh while the plan pays SMT.
    let d = Domains::from_matrix(&load("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv")).unwrap();
    let p = place(
        &d,
        &Request {
            count: 2,
            ..Default::default()
        },
        &all(&d),
    )
    .unwrap();
    let x = &p.explanation;
    assert_eq!(x.level, "smt");
    assert!(x.cost.worst_ns.unwrap() < 10.0, "{x:?}");
    let (auto, cost) = x.autopilot.clone().unwrap();
    assert_eq!(auto.to_string(), "0-1");
    assert!(cost.worst_ns.unwrap() > 40.0, "{cost:?}");
}

#[test]
fn explicit_lists_are_validated() {
    let d = Domains::from_matrix(&load("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv")).unwrap();
    let ok = Request {
        cpus: Some("3,5".parse().unwrap()),
        ..Default::default()
    };
    let p = place(&d, &ok, &all(&d)).unwrap();
    assert_eq!(p.cpus.to_string(), "3,5");
    let bad = Request {
        cpus: Some("3,64".parse().unwrap()),
        ..Default::default()
    };
    let e = place(&d, &bad, &all(&d)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPUs 64 are not online CPUs of this machine (0-63)"
    );
    let sib = Request {
        cpus: Some("0,32".parse().unwrap()),
        smt: SmtPolicy::Avoid,
        ..Default::default()
    };
    let e = place(&d, &sib, &all(&d)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPUs 0 and 32 are SMT siblings but the request says smt = avoid"
    );
    let taken = Request {
        cpus: Some("1-2".parse().unwrap()),
        exclude: "2".parse().unwrap(),
        ..Default::default()
    };
    let e = place(&d, &taken, &all(&d)).unwrap_err();
    assert_eq!(e.to_string(), "CPUs 2 are excluded or already taken");
}

#[test]
fn bad_requests_and_matrices_are_clear_errors() {
    let d = Domains::from_matrix(&load("Intel_Core_i7-6700K.csv")).unwrap();
    let e = place(
        &d,
        &Request {
            count: 0,
            ..Default::default()
        },
        &all(&d),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "count must be at least 1");
    let e = place(
        &d,
        &Request {
            count: 9,
            ..Default::default()
        },
        &all(&d),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "asked for 9 CPUs but only 8 are usable (8 online, the rest excluded or taken)"
    );
    let req = Request {
        count: 5,
        smt: SmtPolicy::Avoid,
        ..Default::default()
    };
    let e = place(&d, &req, &all(&d)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("asked for 5 CPUs but only 4 are usable (one CPU per core"),
        "{e}"
    );

    let mut m = load("Intel_Core_i7-6700K.csv");
    m.latency_ns.set(3, 1, Some(f64::INFINITY)); // NaN is no figure in `Cells`
    let e = Domains::from_matrix(&m).unwrap_err();
    assert!(e.to_string().contains("NaN"), "{e}");
    let mut m = load("Intel_Core_i7-6700K.csv");
    m.latency_ns.set(3, 1, Some(-2.0));
    assert!(Domains::from_matrix(&m)
        .unwrap_err()
        .to_string()
        .contains("-2"));

    // A matrix measured on other CPUs than the topology's.
    let m = load("Intel_Core_i7-6700K.csv");
    let layout = qemu_layout();
    let mut small = layout.clone();
    small.cpus = "0-3".parse().unwrap();
    small.levels.clear();
    let e = Domains::reconcile_layout(&m, Some(&small)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "latency matrix covers CPUs 0-7 (8) but the topology's online CPUs are 0-3 (4)"
    );
}
