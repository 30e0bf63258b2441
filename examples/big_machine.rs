//! Writes a generated machine of N CPUs (the integration tests' `big_machine`): its
//! sysfs/procfs tree under DIR and its complete matrix as DIR/truth.json, for
//! `benches/big-machines.sh`. Also, for the daemon's row of that table: `store` puts
//! the matrix where `pinnerd daemon --machine DIR --state-dir STATE` looks for it, and
//! `rows` reads the daemon's whole matrix with `GetMatrixRows` and says what it took.
//!
//!     cargo run --release --example big_machine -- 4096 /tmp/big-4096
//!     cargo run --release --example big_machine -- store /tmp/big-4096 /tmp/state
//!     cargo run --release --example big_machine -- rows unix:path=/tmp/bus

#[path = "../tests/it/big_machine.rs"]
#[allow(dead_code)]
mod big_machine;

const USAGE: &str = "usage: big_machine N DIR (N a multiple of 32, at most 8192)
       big_machine store DIR STATE
       big_machine rows ADDRESS";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["store", dir, state] => big_machine::store_matrix(dir.as_ref(), state.as_ref()),
        ["rows", address] => rows(address),
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
