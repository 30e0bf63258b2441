//! Writes a generated machine of N CPUs (the integration tests' `big_machine`): its
//! sysfs/procfs tree under DIR and its complete matrix as DIR/truth.json, for
//! `benches/big-machines.sh`. Also, for the daemon's row of that table: `store` puts
//! the matrix where `pinnerd daemon --machine DIR --state-dir STATE` looks for it, and
//! `rows` reads the daemon's whole matrix with `GetMatrixRows` and says what it took;
//! `noisy-page` writes the report page of N CPUs whose every pair has a figure of
//! seeded noise (5 to 505 ns, the worst case for the heatmaps' images), made in memory
//! since no matrix file of 8,192 CPUs can be read yet.
//!
//!     cargo run --release --example big_machine -- 4096 /tmp/big-4096
//!     cargo run --release --example big_machine -- store /tmp/big-4096 /tmp/state
//!     cargo run --release --example big_machine -- rows unix:path=/tmp/bus
//!     cargo run --release --example big_machine -- noisy-page 8192 /tmp/page.html

#[path = "../tests/it/big_machine.rs"]
#[allow(dead_code)]
mod big_machine;

const USAGE: &str = "usage: big_machine N DIR (N a multiple of 32, at most 8192)
       big_machine store DIR STATE
       big_machine rows ADDRESS
       big_machine noisy-page N FILE";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["store", dir, state] => big_machine::store_matrix(dir.as_ref(), state.as_ref()),
        ["rows", address] => rows(address),
        ["noisy-page", n, file] => noisy_page(n.parse().expect("N: a number"), file),
        [n, dir] => {
            let n: usize = n.parse().expect("N: a number");
            let dir = std::path::PathBuf::from(dir);
            let shape = big_machine::Shape::of(n);
            big_machine::write_tree(&dir, shape);
            big_machine::write_truth(&dir.join("truth.json"), shape);
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

/// Writes the page of `n` CPUs (LLCs of 16, the domain order the even CPUs then the
/// odd) with a figure of seeded noise for every pair to `file`, and prints its bytes
/// and the seconds the page took to draw.
fn noisy_page(n: u32, file: &str) {
    use pinnerd::cpuset::CpuSet;
    use pinnerd::report::{DomainLevel, Machine, Quality, Report, TopoBox};
    let m = pinnerd::LatencyMatrix::from_fn((0..n).collect(), |i, j| {
        let mut x = 11 ^ ((j as u64) << 32 | i as u64);
        // splitmix64's finaliser.
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        5.0 + (x % 50_000) as f64 / 100.0
    });
    let llcs: Vec<CpuSet> = (0..n / 16)
        .map(|g| (g * 16..g * 16 + 16).collect())
        .collect();
    let leaf = |c: u32| TopoBox {
        label: format!("CPU {c}"),
        cpus: std::iter::once(c).collect(),
        latency_ns: None,
        children: Vec::new(),
    };
    let r = Report {
        generated_by: "big_machine noisy-page".into(),
        source: format!("{n} CPUs of seeded noise"),
        this_machine: false,
        machine: Machine {
            cpus: n as usize,
            ..Machine::default()
        },
        topology: TopoBox {
            label: "machine".into(),
            cpus: (0..n).collect(),
            latency_ns: None,
            children: llcs
                .iter()
                .enumerate()
                .map(|(i, g)| TopoBox {
                    label: format!("llc {i}"),
                    cpus: g.clone(),
                    latency_ns: None,
                    children: g.iter().map(leaf).collect(),
                })
                .collect(),
        },
        topology_from: "matrix".into(),
        domains: vec![DomainLevel {
            name: "llc".into(),
            latency_ns: None,
            groups: llcs,
        }],
        colour_level: None,
        cpu_group: Default::default(),
        cpu_order: (0..n).collect(),
        domain_order: (0..n).step_by(2).chain((1..n).step_by(2)).collect(),
        plans: Vec::new(),
        effect: None,
        quality: Quality::default(),
        latency_off: None,
        daemon: None,
    };
    let start = std::time::Instant::now();
    let page = pinnerd::report::html(&r, Some(&m));
    let seconds = start.elapsed().as_secs_f64();
    std::fs::write(file, &page).unwrap();
    println!("cpus {n} bytes {} seconds {seconds:.2}", page.len());
}

/// Reads every row of the daemon's matrix on the bus at `address`, as a client would:
/// from row 0, as many rows as each reply gave. Prints the rows, the replies, their
/// bytes in all, the largest and the seconds taken.
fn rows(address: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = zbus::connection::Builder::address(address)
            .build()
            .await
            .unwrap();
        let start = std::time::Instant::now();
        let (mut first, mut replies, mut bytes, mut largest) = (0u32, 0, 0usize, 0usize);
        loop {
            let msg = conn
                .call_method(
                    Some("org.pinnerd.Pinnerd1"),
                    "/org/pinnerd/Pinnerd1",
                    Some("org.pinnerd.Pinnerd1"),
                    "GetMatrixRows",
                    &(first, 8192u32),
                )
                .await
                .unwrap();
            let (cpus, page): (Vec<u32>, Vec<Vec<f64>>) = msg.body().deserialize().unwrap();
            replies += 1;
            bytes += msg.data().len();
            largest = largest.max(msg.data().len());
            first += page.len() as u32;
            if page.is_empty() || first as usize >= cpus.len() {
                break;
            }
        }
        println!(
            "rows {first} replies {replies} bytes {bytes} largest {largest} seconds {:.2}",
            start.elapsed().as_secs_f64()
        );
    });
}
