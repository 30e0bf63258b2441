//! Any bytes as the restore journal (see `tests/it/fuzz_checks.rs`).

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::restore_journal(checks_dir(), data));

fn checks_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("pinnerd-fuzz-journal-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz dir");
        d
    })
}
