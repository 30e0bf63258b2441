//! Rule loading and matching at scale: 1,000 rules.
//!
//! Run: `cargo bench --bench rules`. Figures are in benches/README.md.

use std::fs;
use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use pinnerd::rules::{self, LoadPolicy, ProcessInfo, ThreadInfo};

/// Rule `i` of a realistic mix: every rule matches on comm (literal, prefix or
/// character-class globs), a third also on exe, a fifth on a cmdline regex, a seventh on
/// a uid; a quarter place threads by name.
fn rule(i: usize) -> String {
    let comm = match i % 3 {
        0 => format!("svc{i:04}"),
        1 => format!("wk{i:04}-*"),
        _ => format!("[a-c]job{i:04}"),
    };
    let mut s = format!(
        "[[rule]]\nname = \"rule-{i:04}\"\npriority = {}\n[rule.match]\ncomm = \"{comm}\"\n",
        i % 7
    );
    if i % 3 == 0 {
        s += &format!("exe = \"/opt/app{i}/bin/*\"\n");
    }
    if i % 5 == 0 {
        s += &format!("cmdline = \"--instance={i}( |$)\"\n");
    }
    if i % 7 == 0 {
        s += &format!("user = {}\n", 1000 + i);
    }
    s += "[rule.place]\ncount = 2\npolicy = \"compact\"\nsmt = \"avoid\"\n";
    if i % 4 == 0 {
        s += "[[rule.threads]]\ncomm = [\"rx-*\", \"tx-*\"]\ncount = 1\n";
    }
    s
}

/// Like [`rule`] but without `comm`: every rule is a candidate for every process (the
/// first-pass filter cannot help).
fn rule_without_comm(i: usize) -> String {
    format!(
        "[[rule]]\nname = \"nocomm-{i:04}\"\n[rule.match]\ncgroup = \"/system.slice/app{i}.service*\"\n\
         [rule.place]\ncount = 1\n"
    )
}

fn write_dir(n_files: usize, per_file: usize, f: fn(usize) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in 0..n_files {
        let text: String = (0..per_file).map(|j| f(file * per_file + j)).collect();
        fs::write(dir.path().join(format!("{file:03}.toml")), text).unwrap();
    }
    dir
}

fn process(comm: &str) -> ProcessInfo {
    ProcessInfo {
        pid: 4242,
        comm: comm.into(),
        exe: Some("/opt/app999/bin/server".into()),
        cmdline: vec![
            "/opt/app999/bin/server".into(),
            "--instance=999".into(),
            "--config=/etc/app.toml".into(),
        ],
        uid: 1000,
        cgroup: Some("/system.slice/app-unmatched.service".into()),
        threads: (0..8)
            .map(|t| ThreadInfo {
                tid: 4242 + t,
                comm: if t % 2 == 0 {
                    format!("rx-{t}")
                } else {
                    format!("worker-{t}")
                },
            })
            .collect(),
        container: None,
    }
}

fn load(c: &mut Criterion) {
    let policy = LoadPolicy::unchecked();
    let dir = write_dir(10, 100, rule);
    let dirs = [PathBuf::from(dir.path())];
    let report = rules::load_dirs(&dirs, &policy);
    assert!(report.is_clean(), "{:?}", report.error_strings());
    assert_eq!(report.rules.len(), 1000);
    c.bench_function("load 1000 rules from 10 files", |b| {
        b.iter(|| black_box(rules::load_dirs(black_box(&dirs), &policy)))
    });
    let one = write_dir(1, 1000, rule);
    let one_dirs = [PathBuf::from(one.path())];
    c.bench_function("load 1000 rules from 1 file", |b| {
        b.iter(|| black_box(rules::load_dirs(black_box(&one_dirs), &policy)))
    });
}

fn matching(c: &mut Criterion) {
    let policy = LoadPolicy::unchecked();
    let dir = write_dir(10, 100, rule);
    let set = rules::load_dirs(&[PathBuf::from(dir.path())], &policy).rules;
    // Matches rule 999's comm ("svc0999"... is i%3==0 → 999 % 3 == 0), exe and cmdline.
    let hit = process("svc0999");
    assert_eq!(set.match_process(&hit).unwrap().rule.name, "rule-0999");
    let miss = process("postgres");
    assert!(set.match_process(&miss).is_none());
    let glob_hit = process("bjob0998");
    assert_eq!(set.match_process(&glob_hit).unwrap().rule.name, "rule-0998");
    c.bench_function("match 1 process vs 1000 rules: hit (8 threads)", |b| {
        b.iter(|| black_box(set.match_process(black_box(&hit))))
    });
    c.bench_function("match 1 process vs 1000 rules: class glob hit", |b| {
        b.iter(|| black_box(set.match_process(black_box(&glob_hit))))
    });
    c.bench_function("match 1 process vs 1000 rules: miss", |b| {
        b.iter(|| black_box(set.match_process(black_box(&miss))))
    });
    c.bench_function("explain 1 process vs 1000 rules", |b| {
        b.iter(|| black_box(set.explain(black_box(&hit))))
    });

    let nocomm = write_dir(10, 100, rule_without_comm);
    let set = rules::load_dirs(&[PathBuf::from(nocomm.path())], &policy).rules;
    assert!(set.match_process(&miss).is_none());
    c.bench_function("match 1 process vs 1000 rules without comm: miss", |b| {
        b.iter(|| black_box(set.match_process(black_box(&miss))))
    });
}

criterion_group!(benches, load, matching);
criterion_main!(benches);
