//! Clustering and placement speed on 256 and 512 CPUs.
//!
//! The 512-CPU matrix tiles the published Dual AMD EPYC 7742 matrix (256 CPUs) twice:
//! inside a tile the real cells, across tiles 300 ns plus a tenth of the tile's cell
//! (a four-socket machine whose far sockets cost more than the near ones).
//! A 512-CPU hybrid matrix (P-cores with SMT beside E-core clusters) and the tiled
//! matrix with one SMT sibling cell ruined time the per-part levels and the sibling
//! recovery. The shaped plans (`core-type`, `prefer`, `near`) run on the same domains with a
//! topology made from them: the SMT groups as cores, the CCX groups as L3 groups (96 MiB
//! and 32 MiB alternating, rankings varying), every fourth CCX of efficiency cores, the
//! four 128-CPU groups as NUMA nodes, and a device on node 2.
//! A thread entry's slots (`placement::slots`) are planned on the tiled domains.
//! Run: `cargo bench --bench placement`.

#![allow(
    clippy::too_many_lines,
    reason = "the limit is on the engine in src/; a benchmark reads as one scenario"
)]

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use pinnerd::domains::Domains;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::placement::{place, Policy, Request, SmtPolicy};
use pinnerd::shape::{place_shaped, Devices, Facts, Locality, Prefer, Shape};
use pinnerd::topology::{Cache, CacheKind, CoreType, Cpu, Node, Topology};
use pinnerd::CpuSet;

fn epyc_7742() -> LatencyMatrix {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot/Dual_AMD_EPYC_7742_64-Core_Processor.csv"
    ));
    LatencyMatrix::load(path).unwrap_or_else(|e| panic!("{e}"))
}

/// Two copies of a matrix side by side.
fn tiled(m: &LatencyMatrix) -> LatencyMatrix {
    let n = m.len();
    LatencyMatrix::from_fn((0..2 * n as u32).collect(), |i, j| {
        let (a, b) = (i % n, j % n);
        let inner = m.at(a, b).unwrap_or(0.0);
        if i / n == j / n {
            inner
        } else {
            300.0 + 0.1 * inner
        }
    })
}

/// 512 CPUs of a hybrid part: 128 P-cores with SMT (CPUs 0-255, siblings 2k and 2k+1,
/// 30 ns apart) and 256 E-cores (256-511) in clusters of 4 (45 ns inside, 62 ns across),
/// P to E 50 ns: the E clusters are a level of the E part only.
fn hybrid_512() -> LatencyMatrix {
    LatencyMatrix::from_fn((0..512).collect(), |i, j| {
        let (a, b) = (i.max(j), i.min(j));
        let jitter = ((a * 7 + b * 13) % 10) as f64 / 10.0;
        let v = if a < 256 && a / 2 == b / 2 {
            4.5
        } else if a < 256 {
            30.0
        } else if b < 256 {
            50.0
        } else if (a - 256) / 4 == (b - 256) / 4 {
            45.0
        } else {
            62.0
        };
        v + jitter
    })
}

/// A topology matching the clustered domains (see the module doc).
fn topology_of(d: &Domains) -> Topology {
    let levels = d.levels();
    let group_of = |l: usize, cpu: u32| -> (usize, CpuSet) {
        let (g, set) = levels[l]
            .groups
            .iter()
            .enumerate()
            .find(|(_, g)| g.contains(cpu))
            .unwrap();
        (g, set.clone())
    };
    let all: CpuSet = d.cpus().iter().copied().collect();
    let cpus: Vec<Cpu> = d
        .cpus()
        .iter()
        .map(|&cpu| {
            let (_, siblings) = group_of(0, cpu);
            let (ccx, l3) = group_of(1, cpu);
            let (node, node_cpus) = group_of(2, cpu);
            Cpu {
                cpu,
                package: node as u32,
                die: 0,
                cluster: None,
                core: cpu,
                node: node as u32,
                cluster_cpus: siblings.clone(),
                siblings,
                die_cpus: node_cpus.clone(),
                package_cpus: node_cpus,
                caches: vec![Cache {
                    level: 3,
                    kind: CacheKind::Unified,
                    size_bytes: Some(if ccx % 2 == 0 { 96 << 20 } else { 32 << 20 }),
                    id: Some(ccx as u32),
                    shared: l3,
                }],
                core_type: Some(if ccx % 4 == 3 {
                    CoreType::Efficiency
                } else {
                    CoreType::Performance
                }),
                capacity: None,
                max_freq_khz: Some(4_000_000 + 100_000 * (ccx as u64 % 5)),
                prefcore_ranking: Some(150 + (ccx as u32 * 7) % 60),
                highest_perf: None,
            }
        })
        .collect();
    let nodes = levels[2]
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| Node {
            id: i as u32,
            cpus: g.clone(),
            distances: (0..levels[2].groups.len() as u32)
                .map(|j| (j, if j == i as u32 { 10 } else { 20 + j }))
                .collect(),
        })
        .collect();
    Topology {
        online: all.clone(),
        possible: all.clone(),
        present: all,
        offline: CpuSet::new(),
        isolated: CpuSet::new(),
        cpus,
        nodes,
        warnings: Vec::new(),
        core_types_from: Some("bench".into()),
        x3d_mode: None,
    }
}

fn bench(c: &mut Criterion) {
    let m256 = epyc_7742();
    let m512 = tiled(&m256);
    let hybrid = hybrid_512();
    // One SMT sibling cell ruined (CPUs 5 and 133: 10x), every other pair i / i+128.
    let mut ruined = m512.clone();
    let (a, b) = (5, 133);
    let v = ruined.latency_ns.get(a, b).unwrap() * 10.0;
    ruined.latency_ns.set(a, b, Some(v));
    c.bench_function("cluster 512 CPUs (hybrid, E clusters in one part)", |b| {
        b.iter(|| Domains::from_matrix(black_box(&hybrid)).unwrap())
    });
    c.bench_function(
        "cluster 512 CPUs (7742 tiled, one sibling cell ruined)",
        |b| b.iter(|| Domains::from_matrix(black_box(&ruined)).unwrap()),
    );
    let dh = Domains::from_matrix(&hybrid).unwrap();
    let all_h: CpuSet = dh.cpus().iter().copied().collect();
    let spread8 = Request {
        count: 8,
        policy: Policy::Spread,
        ..Default::default()
    };
    c.bench_function("plan 512 CPUs (hybrid): spread K=8", |b| {
        b.iter(|| place(black_box(&dh), black_box(&spread8), &all_h).unwrap())
    });
    c.bench_function("cluster 256 CPUs (Dual EPYC 7742)", |b| {
        b.iter(|| Domains::from_matrix(black_box(&m256)).unwrap())
    });
    c.bench_function("cluster 512 CPUs (7742 tiled)", |b| {
        b.iter(|| Domains::from_matrix(black_box(&m512)).unwrap())
    });
    let d = Domains::from_matrix(&m512).unwrap();
    let all: CpuSet = d.cpus().iter().copied().collect();
    let busy: CpuSet = "0-7,130-150,300-301".parse().unwrap();
    let some = all.difference(&busy);
    // A thread entry's slots, all of them (the planner makes them again whenever a
    // thread takes or frees one).
    let rx = Request {
        count: 1,
        smt: SmtPolicy::Avoid,
        ..Default::default()
    };
    c.bench_function(
        "slots 512 CPUs: count 1, compact, smt=avoid (256 slots)",
        |b| b.iter(|| pinnerd::placement::slots(black_box(&d), black_box(&rx), &all).unwrap()),
    );
    for (name, req, avail) in [
        (
            "plan 512 CPUs: compact K=2",
            Request {
                count: 2,
                ..Default::default()
            },
            &all,
        ),
        (
            "plan 512 CPUs: compact K=8",
            Request {
                count: 8,
                ..Default::default()
            },
            &all,
        ),
        (
            "plan 512 CPUs: compact K=16 smt=avoid, 31 CPUs taken",
            Request {
                count: 16,
                smt: SmtPolicy::Avoid,
                ..Default::default()
            },
            &some,
        ),
        (
            "plan 512 CPUs: compact K=64",
            Request {
                count: 64,
                ..Default::default()
            },
            &all,
        ),
        (
            "plan 512 CPUs: spread K=8",
            Request {
                count: 8,
                policy: Policy::Spread,
                ..Default::default()
            },
            &all,
        ),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| place(black_box(&d), black_box(&req), avail).unwrap())
        });
    }
    let t = topology_of(&d);
    let facts = Facts::from_topology(&t);
    let node2 = t.nodes[2].cpus.clone();
    let devices: Devices = [(
        "eth0".to_string(),
        Ok(Locality {
            device: "eth0".into(),
            path: "devices/pci0000:80/0000:81:00.0".into(),
            node: Some(2),
            local_cpus: Some(node2),
        }),
    )]
    .into_iter()
    .collect();
    let all_keys = Shape {
        core_type: Some(CoreType::Performance),
        prefer: Some(Prefer::Cache),
        near: Some("eth0".into()),
    };
    for (name, req, shape) in [
        (
            "plan 512 CPUs shaped: performance, cache, near; compact K=8 smt=avoid",
            Request {
                count: 8,
                smt: SmtPolicy::Avoid,
                ..Default::default()
            },
            all_keys.clone(),
        ),
        (
            "plan 512 CPUs shaped: performance, frequency; compact K=16",
            Request {
                count: 16,
                ..Default::default()
            },
            Shape {
                prefer: Some(Prefer::Frequency),
                near: None,
                ..all_keys.clone()
            },
        ),
        (
            "plan 512 CPUs shaped: near, widened to a second node; compact K=160",
            Request {
                count: 160,
                ..Default::default()
            },
            Shape {
                near: Some("eth0".into()),
                ..Shape::default()
            },
        ),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                place_shaped(
                    black_box(&d),
                    &facts,
                    &devices,
                    black_box(&req),
                    &shape,
                    &all,
                )
                .unwrap()
            })
        });
    }
    c.bench_function("facts from a 512-CPU topology", |b| {
        b.iter(|| Facts::from_topology(black_box(&t)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
