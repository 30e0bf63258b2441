//! Any bytes as a rule file: load (safety checks, UTF-8), parse, validate, compile to
//! a matcher, match and explain. Nothing may panic, hang or blow up; whatever loads
//! must survive a print-and-parse round trip.
//!
//! Run: see "Fuzzing the rule loader" in the README.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pinnerd::rules::{self, format, LoadPolicy, ProcessInfo, ThreadInfo};

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("pinnerd-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz dir");
        d
    })
}

fn processes() -> Vec<ProcessInfo> {
    let base = ProcessInfo {
        pid: 1,
        comm: "md-feed".into(),
        exe: Some("/opt/md/bin/md-feed".into()),
        cmdline: vec!["md-feed".into(), "--venue=X".into()],
        uid: 0,
        cgroup: Some("/system.slice/md-feed.service".into()),
        threads: vec![
            ThreadInfo {
                tid: 1,
                comm: "md-feed".into(),
            },
            ThreadInfo {
                tid: 2,
                comm: "rx-0".into(),
            },
        ],
    };
    vec![
        base.clone(),
        ProcessInfo {
            comm: "a".into(),
            exe: None,
            cgroup: None,
            ..base.clone()
        },
        ProcessInfo {
            comm: "".into(),
            cmdline: vec![],
            uid: 1000,
            ..base
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let dir = dir();
    let file = dir.join("fuzz.toml");
    std::fs::write(&file, data).expect("write fuzz input");
    let report = rules::load_dirs(std::slice::from_ref(dir), &LoadPolicy::unchecked());
    for e in &report.errors {
        // Every error names the file.
        assert!(e.to_string().starts_with(&file.display().to_string()));
    }
    for p in processes() {
        let m = report.rules.match_process(&p);
        let why = report.rules.explain(&p);
        assert_eq!(
            m.map(|m| m.rule.name.clone()),
            why.winner.map(|w| w.rule.name.clone())
        );
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(parsed) = format::parse(text) {
            let printed = format::to_toml(&parsed).expect("a parsed file prints");
            let again = format::parse(&printed).expect("a printed file parses");
            assert_eq!(again, parsed);
        }
    }
});
