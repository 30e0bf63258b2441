//! Completion of a sparse map: on every published matrix of 64 CPUs and more through the
//! simulated measurer (every cell measured, within noise of the file, the file's
//! domains, no pair measured twice beyond the figures that disagree), and
//! `pinnerd measure --complete` with `--simulate`.

use std::collections::BTreeMap;
use std::path::Path;

use pinnerd::domains::Domains;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::measure::complete::{self, MAX_FIGURES};
use pinnerd::measure::simulate::Simulated;
use pinnerd::measure::sparse::{run_sparse, SparseConfig};
use pinnerd::CpuSet;

use crate::sparse::sparse_eval;

fn groups(d: &Domains) -> Vec<Vec<CpuSet>> {
    d.levels().iter().map(|l| l.groups.clone()).collect()
}

#[test]
fn completion_measures_every_published_matrix_of_64_cpus_and_more_through() {
    let files = sparse_eval::usable(64);
    assert!(files.len() >= 8, "{} matrices", files.len());
    for (name, truth) in &files {
        let cfg = SparseConfig::default();
        let mut sim = Simulated::new(truth, 0.02, cfg.seed);
        let out = run_sparse(&truth.cpus, None, &mut sim, &cfg).unwrap();
        let sparse_answers = sim.answered;
        let mut m = out.to_matrix(&BTreeMap::new(), &cfg.costs);
        let pending = complete::pending(&m);
        assert_eq!(
            pending.len() + out.pairs_measured,
            out.pairs_total(),
            "{name}"
        );
        let slice = complete::default_slice(m.len());
        let done = complete::complete(&mut m, &mut sim, slice, |_| BTreeMap::new()).unwrap();
        let ctx = format!(
            "{name}: {} of {} measured sparsely, then {done:?}",
            out.pairs_measured,
            out.pairs_total()
        );
        // Every pair measured, none inferred, the counts say so.
        assert!(complete::pending(&m).is_empty(), "{ctx}");
        assert!(m.stats.iter().all(|s| !s.inferred), "{name}");
        assert_eq!(m.inferred_count(), 0, "{name}");
        let sp = m.sparse.as_ref().unwrap();
        assert_eq!(sp.pairs_measured, sp.pairs_total, "{name}");
        m.validate().unwrap();
        // Each pending pair got its figures from completion, no other pair did: the
        // pairs measured in all are the pairs of the matrix.
        assert_eq!(done.pairs, pending.len(), "{ctx}");
        assert_eq!(done.pairs + out.pairs_measured, out.pairs_total(), "{ctx}");
        assert_eq!(sim.answered - sparse_answers, done.measurements, "{name}");
        // Beyond one figure per pair, only those that disagreed with their inferred
        // cell were measured again (at most MAX_FIGURES each).
        let again = done.measurements - done.pairs;
        let far = done
            .corrections
            .iter()
            .filter(|c| (c.measured_ns / c.inferred_ns).ln().abs() > 1.1f64.ln())
            .count();
        assert!(done.measurements <= done.pairs * MAX_FIGURES, "{ctx}");
        assert!(
            again <= MAX_FIGURES * (far + done.rechecked) + done.pairs / 20,
            "{name}: {again} repeats for {far} cells off their inferred figure"
        );
        // Within noise of the file (2% lognormal noise: 10% is five sigma).
        let mut off = Vec::new();
        for i in 0..m.len() {
            for j in 0..i {
                let (t, v) = (truth.at(i, j).unwrap(), m.at(i, j).unwrap());
                if (v / t).ln().abs() > 1.1f64.ln() {
                    off.push(format!("{}–{}: {v:.1} for {t:.1}", m.cpus[i], m.cpus[j]));
                }
            }
        }
        assert!(off.is_empty(), "{name}: cells off the file: {off:?}");
        // The domains are the full matrix's.
        let dt = Domains::from_matrix(truth).unwrap();
        let dm = Domains::from_matrix(&m).unwrap();
        assert_eq!(groups(&dt), groups(&dm), "{name}");
    }
}

#[test]
fn complete_flag_prints_the_sparse_summary_and_writes_the_completed_matrix() {
    let file = sparse_eval::data_dir().join("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("m.json");
    let o = super::helper::pinnerd_command()
        .args(["measure", "--mode", "sparse", "--complete", "--simulate"])
        .arg(&file)
        .args(["--seed", "2", "--json", "--out"])
        .arg(&saved)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("sparse map:"), "{err}");
    assert!(
        err.contains("pairs measured (") && err.contains("inferred"),
        "{err}"
    );
    assert!(err.contains("every pair measured"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pairs_measured"], 2016);
    assert_eq!(v["pairs_total"], 2016);
    assert!(
        !text.contains("\"inferred\": true"),
        "an inferred cell is left"
    );
    let m = LatencyMatrix::from_json(&text, Path::new("stdout")).unwrap();
    assert_eq!(m.cells().len(), 2016);
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), text);
    // Human output: the sparse map's summary, what completion did, the full matrix.
    let o = super::helper::pinnerd_command()
        .args(["measure", "--complete", "--simulate"])
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let sparse_at = out.find("sparse map:").expect("sparse summary");
    let completion_at = out.find("completion: ").expect("completion line");
    let done_at = out
        .find("sparse, then completed: all 2016 pairs measured")
        .expect("the completed matrix's summary");
    assert!(
        sparse_at < completion_at && completion_at < done_at,
        "{out}"
    );
    // Without a sparse map there is nothing to complete.
    let bad = super::helper::pinnerd_command()
        .args(["measure", "--complete", "--mode", "rounds"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--complete completes a sparse map"));
}

/// The modelled time to the first map (the sparse run) and to completion at the
/// daemon's default pace (`measure.complete-slice` unset: 512 pairs on these machines,
/// `complete-pause` 1 s, the load guard's 200 ms sample per slice, the spinners of a
/// slice started once and fed each round) on the 128-, 256- and 512-CPU machines, as written
/// in `benches/README.md` ("Completion"). Deterministic: the time model, not a clock.
#[test]
fn completion_of_512_cpus_is_modelled_in_minutes() {
    let files = sparse_eval::usable(128);
    let named = |n: &str| {
        files
            .iter()
            .find(|(f, _)| f == n)
            .map(|(_, m)| m.clone())
            .unwrap()
    };
    let machines = [
        ("AMD EPYC 7773X (128)", named("AMD_EPYC_7773X.csv")),
        (
            "Xeon Platinum 8375C (128)",
            named("Intel_Xeon_Platinum_8375C_CPU_at_2.90GHz.csv"),
        ),
        (
            "2 × EPYC 7742 (256)",
            named("Dual_AMD_EPYC_7742_64-Core_Processor.csv"),
        ),
        ("tiled 2 × 128 cores, SMT (512)", sparse_eval::tiled_512()),
    ];
    let guard = pinnerd::measure::LoadGuard::default().sample;
    for (name, truth) in machines {
        let cfg = SparseConfig::default();
        let mut sim = Simulated::new(&truth, 0.02, cfg.seed);
        let out = run_sparse(&truth.cpus, None, &mut sim, &cfg).unwrap();
        let mut m = out.to_matrix(&BTreeMap::new(), &cfg.costs);
        let slice = complete::default_slice(m.len());
        let done = complete::complete(&mut m, &mut sim, slice, |_| BTreeMap::new()).unwrap();
        let first = out.modelled(&cfg.costs);
        let rest = done.modelled(&complete::MODEL_COSTS, guard, complete::DEFAULT_PAUSE);
        println!(
            "{name}: first map {:.1} s ({} of {} pairs), completion {:.0} s more ({} pairs, {} slices, {} measurements)",
            first.as_secs_f64(),
            out.pairs_measured,
            out.pairs_total(),
            rest.as_secs_f64(),
            done.pairs,
            done.slices,
            done.measurements
        );
        assert!(complete::pending(&m).is_empty(), "{name}");
        // Minutes, not hours: the bound the docs state for 512 CPUs.
        assert!(rest.as_secs() < 6 * 60, "{name}: {rest:?}");
    }
}

/// A real daemon on this machine, sparse from 2 CPUs: ready from the sparse map; then,
/// restarted on a stored matrix whose pair is still inferred (as if stopped in the middle
/// of completion), it uses that matrix without measuring it again, spins no thread while
/// an exclusive rule holds one of the pair's CPUs, and completes the pair once the rule
/// is gone: the stored matrix ends fully measured and `PairsMeasured` says so.
#[test]
fn the_daemon_completes_a_stored_sparse_matrix_after_a_restart_and_never_on_an_exclusive_cpu() {
    use super::daemon::{Bus, Daemon, Dirs, Policy};
    use std::time::{Duration, Instant};
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("sparse-from-cpus = 2\ncomplete-pause = \"1s\"\n");
    let d = Daemon::start(&bus, &dirs);
    let measured = d.wait_measured(&bus, "");
    assert_eq!(bus.get("State"), "s \"ready\"");
    let path = dirs.state().join("matrix.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["mode"], "sparse", "the first map is a sparse one");
    let total = v["pairs_total"].as_u64().unwrap();
    assert_eq!(bus.get("PairsMeasured"), format!("u {total}"));
    assert!(d.stop().success());

    // Stopped in the middle of completion: every pair inferred in the store.
    let stats = v["stats"].as_array_mut().unwrap();
    assert_eq!(stats.len() as u64, total);
    for s in stats.iter_mut() {
        s["inferred"] = true.into();
        s["samples"] = 0.into();
    }
    v["pairs_measured"] = 0.into();
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();

    // An exclusive rule holds CPU 1: completion waits, no measurement thread runs.
    dirs.write_rule(
        "hold.toml",
        "[[rule]]\nname = \"hold\"\n[rule.match]\ncomm = \"no-such-task\"\n[rule.place]\ncpus = \"1\"\nexclusive = true\n",
    );
    let d = Daemon::start(&bus, &dirs);
    assert_eq!(bus.get("MeasuredAt"), measured, "the stored matrix is used");
    assert_eq!(bus.get("PairsMeasured"), "u 0");
    assert_eq!(bus.get("PairsTotal"), format!("u {total}"));
    let pid = d.child.id();
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("pinnerd-job") || n.starts_with("pinnerd-spin")),
            "a measurement runs while CPU 1 is held: {names:?}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(bus.get("PairsMeasured"), "u 0", "log:\n{}", d.log());

    // The rule goes: completion measures the pair, in use and stored.
    std::fs::remove_file(dirs.rules().join("hold.toml")).unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while bus.get("PairsMeasured") != format!("u {total}") {
        assert!(Instant::now() < end, "not completed; log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pairs_measured"], v["pairs_total"]);
    assert!(!text.contains("\"inferred\": true"), "{text}");
    assert_eq!(
        bus.get("MeasuredAt"),
        measured,
        "completed, not measured again"
    );
}
