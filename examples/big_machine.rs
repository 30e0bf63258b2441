//! Writes a generated machine of N CPUs (the integration tests' `big_machine`): its
//! sysfs/procfs tree under DIR and its complete matrix as DIR/truth.json, for
//! `benches/big-machines.sh`.
//!
//!     cargo run --release --example big_machine -- 4096 /tmp/big-4096

#[path = "../tests/it/big_machine.rs"]
#[allow(dead_code)]
mod big_machine;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(dir)) = (args.next(), args.next()) else {
        eprintln!("usage: big_machine N DIR (N a multiple of 32, at most 8192)");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("N: a number");
    let dir = std::path::PathBuf::from(dir);
    let shape = big_machine::Shape::of(n);
    big_machine::write_tree(&dir, shape);
    big_machine::write_truth(&dir.join("truth.json"), shape);
}
