//! Any bytes as a rule file: load (safety checks, UTF-8), parse, validate, compile to
//! a matcher, match and explain (see `rules_load` in `tests/it/fuzz_checks.rs`).
//!
//! Run: see "Fuzzing" in CONTRIBUTING.md.

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::rules_load(checks_dir(), data));

fn checks_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("pinnerd-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz dir");
        d
    })
}
