//! Clustering and placement speed on 256 and 512 CPUs.
//!
//! The 512-CPU matrix tiles the published Dual AMD EPYC 7742 matrix (256 CPUs) twice:
//! inside a tile the real cells, across tiles 300 ns plus a tenth of the tile's cell
//! (a four-socket machine whose far sockets cost more than the near ones).
//! A 512-CPU hybrid matrix (P-cores with SMT beside E-core clusters) and the tiled
//! matrix with one SMT sibling cell ruined time the per-part levels and the sibling
//! recovery. Run: `cargo bench --bench placement`.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use pinnerd::domains::Domains;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::placement::{place, Policy, Request, SmtPolicy};
use pinnerd::CpuSet;

fn epyc_7742() -> LatencyMatrix {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/c2c-data/nviennot/Dual_AMD_EPYC_7742_64-Core_Processor.csv"
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

fn bench(c: &mut Criterion) {
    let m256 = epyc_7742();
    let m512 = tiled(&m256);
    let hybrid = hybrid_512();
    // One SMT sibling cell ruined (CPUs 5 and 133: 10x), every other pair i / i+128.
    let mut ruined = m512.clone();
    let (a, b) = (5, 133);
    let v = ruined.latency_ns[a][b].unwrap() * 10.0;
    ruined.latency_ns[a][b] = Some(v);
    ruined.latency_ns[b][a] = Some(v);
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
