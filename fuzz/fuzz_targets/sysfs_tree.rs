//! Any bytes as edits of a captured machine's sysfs and procfs files, read as
//! `--sysfs` reads them (see `tests/it/fuzz_checks.rs`).

#![no_main]

#[path = "../../tests/it/fuzz_checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::sysfs_tree(checks_dir(), data));

fn checks_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("pinnerd-fuzz-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz dir");
        d
    })
}
