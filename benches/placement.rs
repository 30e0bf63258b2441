//! Clustering and placement speed on 256 and 512 CPUs.
//!
//! The 512-CPU matrix tiles the published Dual AMD EPYC 7742 matrix (256 CPUs) twice:
//! inside a tile the real cells, across tiles 300 ns plus a tenth of the tile's cell
//! (a four-socket machine whose far sockets cost more than the near ones).
//! Run: `cargo bench --bench placement`.

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

fn bench(c: &mut Criterion) {
    let m256 = epyc_7742();
    let m512 = tiled(&m256);
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
