//! Any bytes as core-to-core-latency CSV (see `tests/it/fuzz_checks.rs`).

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::matrix_csv(data));
