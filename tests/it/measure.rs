//! `pinnerd measure` and the measurement library on the real machine (≥ 2 CPUs), and
//! matrix import of the published matrices.

use std::path::Path;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pinnerd::matrix::{render, LatencyMatrix};
use pinnerd::measure::{self, MeasureConfig, Mode, Phase, Primitive};
use pinnerd::CpuSet;

use super::helper::pinnerd;

/// Two CPUs this process may use, as a kernel list.
fn two_cpus() -> (u32, u32, String) {
    let ids: Vec<u32> = measure::allowed_cpus().unwrap().iter().collect();
    assert!(ids.len() >= 2, "these tests need two usable CPUs");
    (ids[0], ids[1], format!("{},{}", ids[0], ids[1]))
}

fn hypervisor_flag() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
}

#[test]
fn json_output_is_a_complete_matrix() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (a, b, list) = two_cpus();
    let o = pinnerd(&[
        "measure",
        "--cpus",
        &list,
        "--idle-threshold",
        "0",
        "--json",
    ]);
    assert!(o.status.success(), "{}", o.stderr);
    let text = o.stdout;
    let m = LatencyMatrix::from_json(&text, Path::new("stdout")).unwrap();
    assert_eq!(m.cpus, vec![a, b]);
    let v = m.between(a, b).expect("the pair has a figure");
    assert!(v > 0.0 && v < 100_000.0, "{v}");
    assert_eq!(m.at(0, 0), None);
    assert_eq!(m.primitive.as_deref(), Some("cas"));
    assert_eq!(m.mode.as_deref(), Some("serial"));
    assert!(m.first_touch.as_deref().unwrap().starts_with("initiator"));
    assert!(m.measured_at_us.unwrap() > 1_600_000_000_000_000);
    assert_eq!(m.fingerprint.as_ref().map(|f| f.len()), Some(16));
    let s = m.stats_for(a, b).expect("stats for the pair");
    assert!(s.samples >= 1 && s.round_trips >= 16, "{s:?}");
    assert!(s.p10_ns <= s.median_ns && s.median_ns <= s.p90_ns);
    // The figure is the p10 of the batches (or their minimum below ten batches).
    assert!(v <= s.median_ns);
    // This machine's VM status is stated when, and only when, it is a VM.
    let vm_warned = m.warnings.iter().any(|w| w.contains("virtual machine"));
    assert_eq!(vm_warned, hypervisor_flag(), "{:?}", m.warnings);
}

#[test]
fn csv_svg_and_out_files() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (_, _, list) = two_cpus();
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("m.svg");
    let out = dir.path().join("m.json");
    let o = pinnerd(&[
        "measure",
        "--cpus",
        &list,
        "--idle-threshold",
        "0",
        "--csv",
        "--svg",
        svg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--primitive",
        "load-store",
    ]);
    assert!(o.status.success(), "{}", o.stderr);
    let csv = o.stdout;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], ",", "first row empty: {csv}");
    assert!(lines[1].ends_with(','), "{csv}");
    let from_csv = LatencyMatrix::from_csv(&csv, Path::new("stdout")).unwrap();
    let saved = LatencyMatrix::load(&out).unwrap();
    assert_eq!(saved.primitive.as_deref(), Some("load-store"));
    // serde_json's float parser may be one ulp off; the CSV is exact.
    let (x, y) = (from_csv.at(1, 0).unwrap(), saved.at(1, 0).unwrap());
    assert!((x - y).abs() <= x * 1e-12, "{x} vs {y}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg"));
    assert!(picture.contains("load-store, 2 CPUs"));
}

#[test]
fn human_output_has_heatmap_and_summary() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (a, b, list) = two_cpus();
    let o = pinnerd(&["measure", "--cpus", &list, "--idle-threshold", "0"]);
    assert!(o.status.success(), "{}", o.stderr);
    let text = o.stdout;
    let lines: Vec<&str> = text.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, vec![a.to_string(), b.to_string()], "{text}");
    assert!(lines[1].starts_with(&format!("{a} ")), "{text}");
    assert!(lines[2].starts_with(&format!("{b} ")), "{text}");
    assert!(text.contains("one-way latency: min"), "{text}");
    assert!(text.contains("levels:"), "{text}");
    assert!(text.contains("warnings:"), "{text}");
    assert!(text.contains("primitive cas, mode serial"), "{text}");
    // Not a terminal: no colour codes.
    assert!(!text.contains('\x1b'), "{text}");
}

#[test]
fn bad_cpu_lists_are_clear_errors() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    for (list, want) in [
        ("", "the CPU list is empty"),
        ("0", "at least two CPUs, got only CPU 0"),
        ("0,4000", "CPU 4000 is not online on this machine"),
        ("0-1,7998-7999", "CPUs 7998-7999 are not online"),
        (
            "0-1,9998-9999",
            "invalid CPU list token \"9998-9999\": CPU id too large",
        ),
        ("zero", "invalid CPU list token \"zero\""),
    ] {
        let o = pinnerd(&["measure", "--cpus", list, "--idle-threshold", "0"]);
        assert!(!o.status.success(), "{list:?} accepted");
        assert!(o.stderr.contains(want), "{list:?}: {}", o.stderr);
    }
    let o = pinnerd(&["measure", "--budget", "0"]);
    assert!(
        o.stderr.contains("--budget must be more than 0"),
        "{}",
        o.stderr
    );
    let o = pinnerd(&["measure", "--idle-threshold", "150"]);
    assert!(
        o.stderr.contains("percentage from 0 to 100"),
        "{}",
        o.stderr
    );
}

#[test]
fn load_guard_refuses_a_busy_cpu() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (a, _, list) = two_cpus();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let spinner = std::thread::spawn(move || {
        pinnerd::measure::pinned::pin_current(a).unwrap();
        while !s.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    let o = pinnerd(&[
        "measure",
        "--cpus",
        &list,
        "--idle-threshold",
        "90",
        "--idle-wait",
        "0",
    ]);
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    assert!(!o.status.success());
    assert!(o.stderr.contains("is busy"), "{}", o.stderr);
    assert!(o.stderr.contains("below the 90% threshold"), "{}", o.stderr);
}

#[test]
fn library_rounds_mode_with_cross_check_and_progress() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (a, b, _) = two_cpus();
    let mut cfg = MeasureConfig::new([a, b].into_iter().collect::<CpuSet>());
    cfg.mode = Mode::Rounds;
    cfg.primitive = Primitive::Cas;
    cfg.guard.min_idle = 0.0;
    cfg.warmup = Duration::from_millis(10);
    let mut phases = Vec::new();
    let m = measure::run_detailed(&cfg, |p| phases.push(p.phase)).unwrap();
    assert_eq!(m.matrix.mode.as_deref(), Some("rounds"));
    assert!(m.matrix.between(a, b).is_some());
    assert!(phases.contains(&Phase::Guard));
    assert!(phases.contains(&Phase::Warmup));
    assert!(phases.contains(&Phase::Pass(1)));
    assert!(phases.contains(&Phase::Pass(2)));
    assert!(phases.contains(&Phase::SerialCheck), "{phases:?}");
    assert_eq!(m.report.cross_check.len(), 1, "{:?}", m.report);
    assert!(m.report.pass_estimates[&(a, b)].len() >= 2);
    m.matrix.validate().unwrap();
}

#[test]
fn more_cpus_than_a_matrix_may_have_are_refused_before_measuring() {
    // An 8193-CPU machine: refused up front, in full and in sparse mode, with the one
    // bound the store and the reader keep too.
    let cpus: CpuSet = (0..=pinnerd::matrix::MAX_MATRIX_CPUS as u32).collect();
    for mode in [Mode::Serial, Mode::Sparse] {
        let mut cfg = MeasureConfig::new(cpus.clone());
        cfg.mode = mode;
        cfg.guard.min_idle = 0.0;
        cfg.budget = Duration::from_secs(1);
        let e = measure::run(&cfg, |_| {}).unwrap_err();
        assert!(
            matches!(e, measure::MeasureError::TooManyCpus(_)),
            "{mode:?}: {e}"
        );
        assert_eq!(
            e.to_string(),
            "8193 CPUs to measure: pinnerd measures, stores and reads matrices of at most 8192 CPUs"
        );
    }
}

#[test]
fn probe_pairs_for_drift() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let (a, b, _) = two_cpus();
    let mut cfg = MeasureConfig::new([a, b].into_iter().collect::<CpuSet>());
    cfg.guard.min_idle = 0.0;
    let probes = measure::probe_pairs(&cfg, &[(a, b), (b, a)], Duration::from_secs(2)).unwrap();
    assert_eq!(probes.len(), 2);
    assert_eq!((probes[1].a, probes[1].b), (b, a));
    assert!(probes.iter().any(|p| p.estimate_ns.is_some()), "{probes:?}");
    let e = measure::probe_pairs(&cfg, &[(a, a)], Duration::from_secs(1)).unwrap_err();
    assert!(e.to_string().contains("at least two CPUs"), "{e}");
}

#[test]
fn published_matrices_import_with_their_flaws() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/c2c"));
    let atom = LatencyMatrix::load(&dir.join("Intel_Atom_CPU_D510_at_1.66GHz.csv")).unwrap();
    assert_eq!(atom.len(), 4);
    assert_eq!(atom.between(3, 1), Some(10.666490666666666));
    let w = atom.import_warnings(&"0-7".parse().unwrap());
    assert!(
        w.iter().any(|w| w.contains("too small for this machine")),
        "{w:?}"
    );
    // Every published matrix the repository carries.
    let shared = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/c2c-data/nviennot"
    ));
    {
        let entries = std::fs::read_dir(shared).expect("tests/fixtures/c2c-data/nviennot");
        let mut n = 0;
        let mut quantised = 0;
        for e in entries {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "csv") {
                continue;
            }
            let m =
                LatencyMatrix::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            m.validate().unwrap();
            quantised += m.warnings.iter().any(|w| w.contains("quantised")) as usize;
            // Every one renders: a header and one row per CPU.
            let text = render::terminal_heatmap(&m, false);
            assert_eq!(text.lines().count(), m.len() + 1, "{}", path.display());
            if m.len() <= 64 {
                let svg = render::svg_heatmap(&m, "t").unwrap();
                assert!(svg.matches("<rect").count() >= m.len() * m.len());
            }
            let s = m.summary();
            assert_eq!(s.pairs, m.len() * (m.len() - 1) / 2, "{}", path.display());
            assert!(!s.levels.is_empty());
            n += 1;
        }
        assert!(n >= 30, "{n} matrices");
        assert!(quantised >= 1, "the quantised matrices are flagged");
    }
}

#[test]
fn truncated_and_garbage_matrix_files_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("t.csv");
    std::fs::write(&truncated, ",,,\n86.6,,,\n11.9,86.6,,\n").unwrap();
    let e = LatencyMatrix::load(&truncated).unwrap_err().to_string();
    assert!(
        e.contains("t.csv:4: the file ends after 3 of 4 rows"),
        "{e}"
    );
    std::fs::write(&truncated, ",,,\n86.6,,,\n11.9,86.6\n1,2,3,\n").unwrap();
    let e = LatencyMatrix::load(&truncated).unwrap_err().to_string();
    assert!(
        e.contains("t.csv:3: expected 4 comma-separated cells"),
        "{e}"
    );
    let garbage = dir.path().join("g.json");
    std::fs::write(&garbage, "{\"cpus\": [0, 1],\n\"latency_ns\": oops}").unwrap();
    let e = LatencyMatrix::load(&garbage).unwrap_err().to_string();
    assert!(e.contains("g.json:2:"), "{e}");
}
