//! Any bytes as an hwloc topology XML for `export hwloc-distances --topology` (see
//! `tests/it/fuzz_checks.rs`).

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::hwloc_xml(data));
