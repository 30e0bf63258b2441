//! Sparse measurement: on published matrices through the simulated measurer (targets:
//! pairs, cells within 10%, domains, compact plans), under numbering that lies, and on
//! this machine's real pairs through `pinnerd measure --mode sparse`.

use std::path::Path;

use pinnerd::domains::Domains;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::measure::simulate::Simulated;
use pinnerd::measure::sparse::{run_sparse, SparseConfig};
use pinnerd::CpuSet;

#[path = "../../benches/sparse_eval.rs"]
pub(crate) mod sparse_eval;

use sparse_eval::{data_dir, score, score_with, to_matrix, usable, Score};

/// The usable published matrix named `name`.
fn published<'a>(files: &'a [(String, LatencyMatrix)], name: &str) -> &'a LatencyMatrix {
    files
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("{name} is not among the usable matrices"))
}

/// The targets of a run: pairs (≤ 5% from 256 CPUs, ≤ 15% from 64, none below), cells
/// within 10%, domains and compact plans.
fn assert_targets(s: &Score, ctx: &str) {
    if s.n >= 64 {
        let target = if s.n >= 256 { 0.05 } else { 0.15 };
        assert!(s.share() <= target, "{ctx}");
    }
    assert!(s.within_10 >= 0.95, "{ctx}");
    assert!(s.domains_equal, "{ctx}");
    assert!(s.worst_plan() <= 1.05, "{ctx}");
}

/// The published matrices checked in CI (the bench covers every one): Intel two-socket
/// with SMT, AMD with CCX groups and a NUMA-home artefact, tile pairs without SMT, and a
/// Broadwell ring whose cores differ inside one level (met through per-CPU factors), and
/// two EPYC 7742 sockets whose CCX pairs hold scattered exceptions (one cell in ten at
/// 100 ns among 122: filled from the level, not measured fully, at 256 CPUs).
const CHECKED: &[&str] = &[
    "Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
    "Intel_Xeon_CPU_E5-2695_v4_at_2.10GHz.csv",
    "Intel_Xeon_Platinum_8275CL_CPU_at_3.00GHz.csv",
    "AMD_EPYC_7R13_48-Core_Processor.csv",
    "Intel_Xeon_Phi_CPU_7210_at_1.30GHz.csv",
    "Dual_AMD_EPYC_7742_64-Core_Processor.csv",
];

#[test]
fn simulated_sparse_meets_the_targets_on_published_matrices() {
    let files = usable(32);
    for name in CHECKED {
        let m = published(&files, name);
        for seed in [1, 2, 3] {
            let s = score(m, 0.02, seed);
            let ctx = format!("{name} seed {seed}: {}", s.summary());
            assert_targets(&s, &ctx);
            // Every cell has a figure, and the counts match the cells.
            let measured = (0..s.n)
                .flat_map(|i| (0..i).map(move |j| (i, j)))
                .filter(|&(i, j)| s.out.measured[i * s.n + j])
                .count();
            assert_eq!(measured, s.pairs_measured, "{ctx}");
            assert!((0..s.n).all(|i| (0..s.n).all(|j| i == j || s.out.at(i, j).is_some())));
        }
    }
}

/// Machines the first pairs show to be smooth, mapped by the mesh model
/// (`sparse/mesh.rs`): the Graviton2 and Graviton3 meshes, 88.0% and 85.4% within 10%
/// from a tree, and the Kunpeng 920's clusters on a ring, 330 pairs (16.4%) from a tree.
const MESHES: &[&str] = &[
    "AWS_Graviton2.csv",
    "AWS_Graviton3.csv",
    "HiSilicon_Kunpeng_920-6426_at_2.6GHz.csv",
];

#[test]
fn smooth_machines_are_mapped_by_the_mesh_model_within_the_targets() {
    let files = usable(32);
    for name in MESHES {
        let m = published(&files, name);
        for seed in [1, 2, 3] {
            let s = score(m, 0.02, seed);
            let ctx = format!("{name} seed {seed}: {}", s.summary());
            assert!(s.out.mesh, "{ctx}: not mapped by the model");
            assert_targets(&s, &ctx);
            assert_eq!(s.out.levels.len(), 1, "{ctx}: a mesh has no tree");
        }
    }
}

/// A hierarchy taken for a mesh (the smooth share's bar set to 0) is refused by the
/// model's fit check and mapped by its tree: it costs the model's pairs, never cells.
/// (With the bar at 0 every published hierarchy is refused and keeps ≥ 95% of its
/// cells and its domains; the Xeon Phi's K = 8 plan goes to 1.094, `benches/README.md`.)
#[test]
fn a_hierarchy_tried_as_a_mesh_is_refused_and_mapped_by_its_tree() {
    let files = usable(32);
    for name in [
        "Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv",
        "Intel_Xeon_Platinum_8275CL_CPU_at_3.00GHz.csv",
    ] {
        let m = published(&files, name);
        let tried = score_with(
            m,
            0.02,
            &SparseConfig {
                mesh_share: 0.0,
                ..SparseConfig::default()
            },
        );
        let plain = score(m, 0.02, 1);
        let ctx = format!(
            "{name}: tried {}; plain {}",
            tried.summary(),
            plain.summary()
        );
        assert!(!tried.out.mesh, "{ctx}");
        assert!(!plain.out.mesh, "{ctx}");
        assert!(tried.within_10 >= 0.95, "{ctx}");
        assert!(tried.domains_equal, "{ctx}");
        assert!(tried.worst_plan() <= 1.05, "{ctx}");
        // The model's random and held-out pairs, 2 per CPU, come on top.
        assert!(tried.pairs_measured > plain.pairs_measured, "{ctx}");
    }
}

/// Matrices whose compact plans need plan verification (their cells inside a group
/// differ more than the fill keeps: 1.34, 1.06, 1.10 and 1.11 without it), checked for
/// the plan target only: these 32- and 48-CPU parts have no pair target
/// (`benches/README.md`).
const PLANS_CHECKED: &[&str] = &[
    "AMD_Ryzen_9_7950X.csv",
    "AMD_Ryzen_Threadripper_1950X.csv",
    "AMD_Ryzen_Threadripper_3960X_3.80GHz_24_Cores_Zen_2_3rd_Gen_2019-Q4.csv",
];

#[test]
fn compact_plans_from_the_verified_reconstruction_are_within_5_percent() {
    let files = usable(32);
    for name in PLANS_CHECKED {
        let m = published(&files, name);
        for seed in [1, 2, 3] {
            let s = score(m, 0.02, seed);
            let ctx = format!("{name} seed {seed}: {}", s.summary());
            assert!(s.worst_plan() <= 1.05, "{ctx}");
            assert!(s.domains_equal, "{ctx}");
        }
    }
}

/// Broadwell parts of two sockets below 64 CPUs (no pair target there): their cores
/// differ cell by cell inside a socket, so a filled block's spot checks, which made its
/// fit, say less than its fill misses. The held-out checks catch those blocks; without
/// them a seed misses the 95% mark (93.3% on the E5-2630 v4, 89.7% on the E5-2680 v4,
/// benches/README.md). With their blocks measured where the fill is off, plan
/// verification settles too: their compact plans are within 5%.
#[test]
fn held_out_checks_bring_the_dual_ring_parts_to_95_percent_and_their_plans_within_5() {
    let files = usable(32);
    for name in [
        "Dual_Intel_Xeon_CPU_E5-2630_v4_at_2.20GHz.csv",
        "Dual_Intel_Xeon_CPU_E5-2680_v4_at_2.40GHz.csv",
    ] {
        let m = published(&files, name);
        let mut without = f64::INFINITY;
        for seed in [1, 2, 3] {
            let cfg = SparseConfig {
                seed,
                ..SparseConfig::default()
            };
            assert!(m.len() < cfg.held_out_below, "{name}");
            let s = score_with(m, 0.02, &cfg);
            let ctx = format!("{name} seed {seed}: {}", s.summary());
            assert_targets(&s, &ctx);
            let off = SparseConfig {
                held_out_below: 0,
                ..cfg
            };
            without = without.min(score_with(m, 0.02, &off).within_10);
        }
        assert!(without < 0.95, "{name}: {without}");
    }
}

#[test]
fn the_512_cpu_machine_is_mapped_from_under_5_percent_of_its_pairs_in_under_10_s() {
    let m = sparse_eval::tiled_512();
    let s = score(&m, 0.02, 1);
    let ctx = s.summary();
    assert!(s.share() <= 0.05, "{ctx}");
    assert!(s.within_10 >= 0.95, "{ctx}");
    assert!(s.modelled.as_secs_f64() <= 10.0, "{ctx}");
    assert!(s.worst_plan() <= 1.05, "{ctx}");
}

/// The dual Gold 6242 matrix with its CPUs renumbered by a fixed shuffle: numbering
/// says nothing about distance any more.
fn shuffled() -> (LatencyMatrix, LatencyMatrix) {
    let m =
        LatencyMatrix::load(&data_dir().join("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv")).unwrap();
    let n = m.len();
    let perm: Vec<usize> = (0..n).map(|i| (i * 37 + 11) % n).collect();
    let lied = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
        m.at(perm[i], perm[j]).unwrap()
    });
    (m, lied)
}

fn within_10(truth: &LatencyMatrix, recon: &LatencyMatrix) -> f64 {
    let n = truth.len();
    let near = (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter(|&(i, j)| {
            let (t, r) = (truth.at(i, j).unwrap(), recon.at(i, j).unwrap());
            (r - t).abs() <= 0.10 * t
        })
        .count();
    near as f64 / (n * (n - 1) / 2) as f64
}

#[test]
fn numbering_that_lies_never_costs_correctness() {
    let (plain, lied) = shuffled();
    let cfg = SparseConfig::default();
    let honest = run_sparse(
        &plain.cpus,
        None,
        &mut Simulated::new(&plain, 0.02, 1),
        &cfg,
    )
    .unwrap();
    let out = run_sparse(&lied.cpus, None, &mut Simulated::new(&lied, 0.02, 1), &cfg).unwrap();
    let recon = to_matrix(&out);
    // Both within the pair target (the shuffled numbering's chain follows no group,
    // so insertion builds its tree from other pairs).
    for o in [&honest, &out] {
        assert!(
            o.pairs_measured * 100 <= 15 * lied.len() * (lied.len() - 1) / 2,
            "{} of {} pairs",
            o.pairs_measured,
            lied.len() * (lied.len() - 1) / 2
        );
    }
    let w = within_10(&lied, &recon);
    assert!(w >= 0.95, "{w}");
    let groups =
        |d: &Domains| -> Vec<Vec<CpuSet>> { d.levels().iter().map(|l| l.groups.clone()).collect() };
    assert_eq!(
        groups(&Domains::from_matrix(&recon).unwrap()),
        groups(&Domains::from_matrix(&lied).unwrap())
    );
    // A prior that is wrong (the honest numbering's groups, applied to the shuffled
    // machine) is caught by the spot checks: more pairs, same answer.
    let wrong: Vec<Vec<CpuSet>> = Domains::from_matrix(&plain)
        .unwrap()
        .levels()
        .iter()
        .map(|l| l.groups.clone())
        .collect();
    let out = run_sparse(
        &lied.cpus,
        Some(&wrong),
        &mut Simulated::new(&lied, 0.02, 1),
        &cfg,
    )
    .unwrap();
    assert!(out.used_prior);
    let w = within_10(&lied, &to_matrix(&out));
    assert!(w >= 0.95, "wrong prior: {w}");
    // The right prior needs fewer pairs than no prior at all.
    let right: Vec<Vec<CpuSet>> = Domains::from_matrix(&lied)
        .unwrap()
        .levels()
        .iter()
        .map(|l| l.groups.clone())
        .collect();
    let with = run_sparse(
        &lied.cpus,
        Some(&right),
        &mut Simulated::new(&lied, 0.02, 1),
        &cfg,
    )
    .unwrap();
    assert!(within_10(&lied, &to_matrix(&with)) >= 0.95);
    assert!(with.pairs_measured < out.pairs_measured);
}

#[test]
fn simulate_flag_prints_the_reconstruction_and_its_counts() {
    let file = data_dir().join("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv");
    let o = super::helper::pinnerd_command()
        .args(["measure", "--simulate"])
        .arg(&file)
        .args(["--noise", "0.01", "--seed", "4", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let m = LatencyMatrix::from_json(&text, Path::new("stdout")).unwrap();
    assert_eq!(m.len(), 64);
    assert_eq!(v["mode"], "sparse");
    assert_eq!(v["pairs_total"], 2016);
    let measured = v["pairs_measured"].as_u64().unwrap();
    assert!(measured > 0 && measured < 2016, "{measured}");
    assert!(v["modelled_seconds"].as_f64().unwrap() > 0.3);
    // The file lists every inferred pair (0 samples); in memory they are bits.
    let listed: Vec<&serde_json::Value> = v["stats"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["inferred"] == true)
        .collect();
    assert_eq!(listed.len() as u64 + measured, 2016);
    assert!(listed.iter().all(|s| s["samples"] == 0));
    assert_eq!(m.inferred_count(), listed.len());
    assert!(m.stats.iter().all(|s| !s.inferred));
    assert!(m.cells().len() == 2016);
    // The same seed gives the same run.
    let again = super::helper::pinnerd_command()
        .args(["measure", "--simulate"])
        .arg(&file)
        .args(["--noise", "0.01", "--seed", "4", "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
    // Bad input names the problem.
    let bad = super::helper::pinnerd_command()
        .args(["measure", "--simulate", "/nonexistent.csv"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent.csv"));
    let bad = super::helper::pinnerd_command()
        .args(["measure", "--simulate"])
        .arg(&file)
        .args(["--mode", "rounds"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot be simulated"));
}

#[test]
fn sparse_mode_measures_this_machines_real_pairs() {
    let _cpus = super::cpus_stay_online();
    let _spin = super::one_spinner_at_a_time();
    let ids: Vec<u32> = pinnerd::measure::allowed_cpus().unwrap().iter().collect();
    assert!(ids.len() >= 2, "this test needs two usable CPUs");
    let list = format!("{},{}", ids[0], ids[1]);
    let o = super::helper::pinnerd_command()
        .args([
            "measure",
            "--mode",
            "sparse",
            "--cpus",
            &list,
            "--idle-threshold",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let m = LatencyMatrix::from_json(&text, Path::new("stdout")).unwrap();
    assert_eq!(m.mode.as_deref(), Some("sparse"));
    let sp = m.sparse.as_ref().expect("sparse counts");
    assert_eq!((sp.pairs_measured, sp.pairs_total), (1, 1));
    let v = m.between(ids[0], ids[1]).expect("the pair has a figure");
    assert!(v > 0.0 && v < 100_000.0, "{v}");
    // Really measured: batches from the spinner, not a single simulated figure.
    let s = m.stats_for(ids[0], ids[1]).unwrap();
    assert!(!s.inferred);
    assert!(s.samples >= 2 && s.round_trips > 0, "{s:?}");
    assert_eq!(m.primitive.as_deref(), Some("cas"));
}

/// On the EPYC 7773X with `seeds`: every target met with the default configuration,
/// and the cells under 95% with `off` applied to it (a step turned off, named `what`).
/// The scores, with and without, per seed.
fn the_7773x_needs(
    seeds: &[u64],
    what: &str,
    off: impl Fn(SparseConfig) -> SparseConfig,
) -> Vec<(Score, Score)> {
    let files = usable(128);
    let m = published(&files, "AMD_EPYC_7773X.csv");
    seeds
        .iter()
        .map(|&seed| {
            let cfg = SparseConfig {
                seed,
                ..SparseConfig::default()
            };
            assert!(m.len() >= cfg.pair_terms_from);
            let s = score_with(m, 0.02, &cfg);
            assert_targets(&s, &format!("7773X seed {seed}: {}", s.summary()));
            let without = score_with(m, 0.02, &off(cfg));
            assert!(
                without.within_10 < 0.95,
                "seed {seed} without {what}: {}",
                without.summary()
            );
            (s, without)
        })
        .collect()
}

/// The EPYC 7773X's eight CCDs are 96–130 ns apart, in no hierarchy: insertion groups
/// them in halves or three and five, and one factor per child group leaves whole pairs
/// of CCDs 7% off. With a factor per CCD, a term per pair of CCDs and a spot check on
/// each pair (`pair_terms_from`), seeds where that missed the 95% mark meet it.
#[test]
fn pair_terms_map_the_7773x_ccds_that_child_factors_miss() {
    the_7773x_needs(&[4, 9], "pair terms", |cfg| SparseConfig {
        pair_terms_from: usize::MAX,
        ..cfg
    });
}

/// The EPYC 7773X's CCDs, grouped by insertion as three and five, left some pairs of
/// CCDs with one figure or none and their cells 5–8% off on seeds 13 and 17: with ten
/// figures per pair of CCDs they meet every target, and without them they miss 95%.
#[test]
fn region_pairs_set_the_7773x_ccd_pairs_insertion_nests_wrongly() {
    assert!(SparseConfig::default().region_figures > 0);
    let runs = the_7773x_needs(&[13, 17], "region pairs", |cfg| SparseConfig {
        region_figures: 0,
        ..cfg
    });
    for (with, without) in runs {
        assert!(without.pairs_measured < with.pairs_measured);
    }
}
