//! Any bytes as what a container runtime sends on one NRI connection (see
//! `tests/it/fuzz_checks.rs`).

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::nri_stream(data));
