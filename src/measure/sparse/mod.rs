//! Sparse measurement: recover the hierarchy with few pairs, spot-check every block of
//! it, measure fully only the blocks that disagree, and fill the rest from their block.
//!
//! ```text
//! prior (sysfs groups)  ──or──  first pairs: chain i–(i−1) and i–(i+n/2), in rounds
//!                 │                        │ smooth (no 10% gaps: a mesh, 32–128 CPUs)?
//!                 │                        │    ── yes ─► mesh model from random pairs,
//!                 │                        │       checked on fresh ones ── holds ─► fill
//!                 │                        │       from it, go to plan verification
//!                 │                        ▼ no, or refused
//!                 │             insertion (each CPU joins the tree by a few guessed pairs)
//!                 └──────► tree of nested groups (levels)
//!                                   │
//!             blocks: per group, the pairs joined there (between its child groups)
//!                                   │ random spot checks (a seeded sample), in rounds
//!             agree with the block's median within the tolerance? ── yes ─► fill, mark inferred
//!                                   │ no
//!             split into child pairs, spot-check again ── no ─► measure that block fully
//!   (below `held_out_below` CPUs: fresh pairs of each block to fill, against its fill ── a
//!    miss ─► measure that block fully)
//!   (from `pair_terms_from` CPUs: every pair of regions, the CCDs, measured ten times,
//!    its fill moved to the level its figures agree on)
//!                                   │
//!             plan verification: compact plans (K = 2, 4, 8) from the filled cells,
//!             their unmeasured cells measured, planned again until measured through;
//!             then their runners-up (unmeasured cells taken 3% lower), within a bound
//! ```
//!
//! Works on any [`PairMeasurer`]: the real spinner
//! ([`super::sparse_real::EngineMeasurer`]) or the simulated one
//! ([`super::simulate::Simulated`]). Pure apart from the measurer; every random choice
//! comes from the seed.
//!
//! Must not touch: the OS (the measurer does), files, the daemon.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rng::Rng;
use super::schedule::Costs;
use super::{MeasureError, Mode};
use fill::{fill_tree, Filled};
use mesh::MeshModel;
use run::Run;
use tree::{first_pairs, insert_all, prior_tree, Tree};

mod block;
mod fill;
mod fit;
mod held_out;
mod mesh;
mod outcome;
mod regions;
mod rowcol;
mod run;
mod tree;
mod verify;
use crate::cpuset::CpuSet;

pub use outcome::SparseOutcome;

/// Measures pairs of CPUs. Sparse measurement asks for one round at a time: the pairs
/// of a round share no CPU, so they may run at once.
pub trait PairMeasurer {
    /// One figure (one-way ns) per pair of the round, `None` when the pair gave none.
    fn measure_round(&mut self, round: &[(u32, u32)]) -> Result<Vec<Option<f64>>, MeasureError>;
}

/// From this many CPUs on, the daemon measures sparsely by default (the default of the
/// `measure.sparse-from-cpus` setting, which the daemon reads): the smallest size where
/// sparse mode is several times faster than a full matrix in rounds while meeting its
/// targets (cells within 10%, compact plans within 5%) on every published matrix.
/// Below it a full matrix takes little longer and leaves no cell inferred. Figures:
/// `benches/README.md`, "Where the daemon switches to sparse".
pub const SPARSE_FROM_CPUS: usize = 128;

impl Mode {
    /// The daemon's mode for a machine of `cpus` CPUs: sparse from `sparse_from` on
    /// (the `measure.sparse-from-cpus` setting, [`SPARSE_FROM_CPUS`] by default), else
    /// a full matrix in serial order.
    pub fn default_for(cpus: usize, sparse_from: usize) -> Mode {
        if cpus >= sparse_from {
            Mode::Sparse
        } else {
            Mode::Serial
        }
    }
}

/// How sparse measurement decides.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseConfig {
    /// A spot check further than this (relative) from its block's median disagrees.
    pub tolerance: f64,
    /// Spot checks per block (fewer when the block has fewer pairs).
    pub samples: usize,
    /// Blocks of at most this many pairs are measured fully.
    pub small_block: usize,
    /// Pairs tried per CPU while inserting it, beyond the first.
    pub search: usize,
    /// Two figures further apart than this ratio are different levels when inserting.
    pub level_ratio: f64,
    /// Below this many CPUs, fresh pairs of every filled block are checked against
    /// its fill and a block they miss is measured fully (`sparse/held_out.rs`). From
    /// it on, where the pair targets apply, a pair of child groups that is one level
    /// with scattered exceptions is filled from its median instead of measured fully.
    pub held_out_below: usize,
    /// From this many CPUs on, a block's fill takes a factor per unit (the groups one
    /// level below its children, where they are large: a CCD in half a socket) and a
    /// term per pair of units, and its spot checks visit every pair of units
    /// (`sparse/block.rs`, `sparse/fit.rs`). 64: where the pair targets apply.
    pub pair_terms_from: usize,
    /// The first pairs' smooth share from which the mesh model is tried
    /// (`sparse/mesh.rs`, `mesh::MESH_SHARE` by default). Above 1: never.
    pub mesh_share: f64,
    /// Seed of the spot-check sample.
    pub seed: u64,
    /// The time model's costs, for [`SparseOutcome::modelled`].
    pub costs: Costs,
    /// Compact plans of these sizes are verified: every cell among the CPUs the
    /// reconstruction's plan chooses is measured, and planned again (empty: none).
    /// 2, 4 and 8 are the sizes the targets judge; they stand for a pair of
    /// communicating threads, a small pool sharing a cache and a half-CCD/CCX-sized
    /// one, and a plan of 3 or 6 is cut from the same groups.
    pub verify_counts: Vec<usize>,
    /// Verification stops before it measures more than this share of all pairs; the
    /// plans then stand on the cells known so far.
    pub verify_share: f64,
    /// Once every verified choice is measured throughout, its runners-up: unmeasured
    /// cells are taken this much (relative) lower and planned on, and a choice that
    /// wins there is measured too, where all it lacks fits in the bound (0: none). A
    /// choice whose fill sits a little above the measured choice's figures would never
    /// win on the fill alone; the figures decide. 0.03: the K = 4 and 8 plans come
    /// closer to the full matrix's for about 3% more pairs (`benches/README.md`,
    /// "Runners-up in plan verification").
    pub verify_runner_up: f64,
    /// From [`SparseConfig::pair_terms_from`] CPUs on, every pair of regions (the
    /// finest level of 3–12 groups of 4 CPUs and more: the CCDs of an EPYC) is
    /// measured up to this many times, and its filled cells scaled where the figures
    /// agree on a level more than 4% off the fill (`sparse/regions.rs`; 0: never).
    /// The cells of a pair of CCDs spread about their level CPU by CPU, so a few
    /// figures' median can move the fill the wrong way; 10 is the fewest that kept
    /// every seed's cells within target (`benches/README.md`, "Region pairs").
    pub region_figures: usize,
}

impl Default for SparseConfig {
    fn default() -> SparseConfig {
        SparseConfig {
            tolerance: 0.10,
            samples: 8,
            small_block: 4,
            search: 3,
            level_ratio: 1.18,
            held_out_below: 64,
            pair_terms_from: 64,
            mesh_share: mesh::MESH_SHARE,
            seed: 1,
            costs: MODEL_COSTS,
            verify_counts: vec![2, 4, 8],
            verify_share: 0.0125,
            verify_runner_up: 0.03,
            region_figures: 10,
        }
    }
}

/// The build VM's costs from `benches/README.md` ("Time model"): 7.30 ms per pair-pass,
/// 210.2 µs per pair of a parallel round, 300 ms fixed (warm-up and guard).
pub const MODEL_COSTS: Costs = Costs {
    per_pair: Duration::from_micros(7_300),
    per_round_pair: Duration::from_nanos(210_200),
    fixed: Duration::from_millis(300),
    passes: 1,
    serial_check: 0,
};

/// Sparse measurement of `cpus` (docs/measurement.md, "Sparse mode"): the tree from
/// `prior` (nested groups of CPU ids, e.g. the sysfs levels) or, without one, a mesh
/// model or the tree by insertion; the fill of its blocks; from
/// [`SparseConfig::pair_terms_from`] CPUs the region pairs; then plan verification.
pub fn run_sparse<M: PairMeasurer>(
    cpus: &[u32],
    prior: Option<&[Vec<CpuSet>]>,
    meas: &mut M,
    cfg: &SparseConfig,
) -> Result<SparseOutcome, MeasureError> {
    let n = cpus.len();
    if n < 2 {
        return Err(MeasureError::TooFewCpus {
            cpus: cpus.iter().copied().collect(),
        });
    }
    let mut run = Run::new(cpus, meas);
    let Built {
        tree,
        mesh_model,
        used_prior,
    } = build_tree(&mut run, cpus, prior, cfg)?;
    let shape: Vec<String> = tree
        .shape()
        .iter()
        .map(|l| l.iter().map(usize::to_string).collect::<Vec<_>>().join("+"))
        .collect();
    tracing::debug!(
        pairs = run.distinct(),
        levels = %shape.join(" / "),
        mesh = mesh_model.is_some(),
        "sparse: tree built"
    );
    let Filled {
        mut cells,
        filled,
        full_blocks,
    } = match &mesh_model {
        Some(model) => fill_from_mesh(&run, model),
        None => fill_tree(&mut run, &tree, cfg)?,
    };
    if mesh_model.is_none() && n >= cfg.pair_terms_from {
        check_region_pairs(&mut run, &tree, &mut cells, cfg)?;
    }
    let v = verify::verify_plans(&mut run, &mut cells, cfg)?;
    tracing::debug!(
        pairs = v.pairs,
        rounds = v.rounds,
        settled = v.settled,
        analyses = v.analyses,
        "compact plans verified"
    );
    let pairs_measured = run.distinct();
    Ok(SparseOutcome {
        cpus: cpus.to_vec(),
        cells,
        measured: run.measured,
        pairs_measured,
        measurements: run.measurements,
        rounds: run.rounds,
        levels: levels(&tree, cpus),
        blocks_filled: filled,
        blocks_measured: full_blocks,
        used_prior,
        mesh: mesh_model.is_some(),
    })
}

/// The tree a sparse run fills, and how it was found.
struct Built {
    tree: Tree,
    /// The mesh model that fills every cell; the tree is then the machine alone.
    mesh_model: Option<MeshModel>,
    used_prior: bool,
}

/// The tree of nested groups: `prior`'s, where it has a group below the machine; else,
/// from the first pairs (measured twice, the lower kept), a mesh model where they look
/// smooth on a machine of the mesh model's size and the model holds; else the tree by
/// insertion.
fn build_tree<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cpus: &[u32],
    prior: Option<&[Vec<CpuSet>]>,
    cfg: &SparseConfig,
) -> Result<Built, MeasureError> {
    // A prior with no group of two or more CPUs below the machine (an Arm mesh's
    // sysfs: every core alone in one package) says nothing: insertion finds more, and
    // the first pairs show a mesh.
    if let Some(tree) = prior.map(|p| prior_tree(cpus, p)).filter(Tree::has_groups) {
        return Ok(Built {
            tree,
            mesh_model: None,
            used_prior: true,
        });
    }
    let n = cpus.len();
    let first = first_pairs(n);
    run.measure(&first, false)?;
    // Twice, keeping the lower: a preempted figure here would misplace a CPU (one SMT
    // sibling looking like a cache neighbour), and these rounds are cheap.
    run.measure(&first, true)?;
    let figures: Vec<f64> = first.iter().filter_map(|&(i, j)| run.get(i, j)).collect();
    let share = mesh::smooth_share(&figures, 1.0 + cfg.tolerance);
    tracing::debug!(share, "sparse: first pairs' smooth share");
    let mut mesh_model = None;
    if (mesh::MESH_FROM..=mesh::MESH_UP_TO).contains(&n) && share >= cfg.mesh_share {
        // Drawn apart, so a refused model leaves the other steps' draws as they would
        // be without it.
        let mut rng = Rng::new(cfg.seed ^ 0x6d65_7368);
        mesh_model = mesh::map_mesh(run, cfg, &mut rng)?;
    }
    let tree = if mesh_model.is_some() {
        Tree {
            lat: vec![Vec::new()],
            group: vec![vec![0; n]],
            next: 0,
        }
    } else {
        insert_all(run, cfg)?
    };
    Ok(Built {
        tree,
        mesh_model,
        used_prior: false,
    })
}

/// Every cell not measured taken from the mesh model: the machine is one block, filled.
fn fill_from_mesh<M: PairMeasurer>(run: &Run<'_, M>, model: &MeshModel) -> Filled {
    let n = run.n();
    let mut cells = run.cells.clone();
    for i in 0..n {
        for j in 0..n {
            if i != j && cells[i * n + j].is_nan() {
                cells[i * n + j] = model.predict(i, j);
            }
        }
    }
    Filled {
        cells,
        filled: 1,
        full_blocks: 0,
    }
}

/// Every pair of large groups (the CCDs) checked on `cfg.region_figures` figures of
/// its own, its fill moved where they agree on another level (`regions.rs`). Drawn
/// apart from the other steps.
fn check_region_pairs<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    tree: &Tree,
    cells: &mut [f64],
    cfg: &SparseConfig,
) -> Result<(), MeasureError> {
    let mut rng = Rng::new(cfg.seed ^ 0x7265_6769);
    let r = regions::correct_regions(run, tree, cells, cfg, &mut rng)?;
    tracing::debug!(
        regions = r.regions,
        pairs = r.pairs,
        moved = r.moved,
        "sparse: region pairs checked"
    );
    Ok(())
}

/// The tree's levels as sets of CPU ids, each level's groups in order of their first
/// CPU.
fn levels(tree: &Tree, cpus: &[u32]) -> Vec<Vec<CpuSet>> {
    tree.group
        .iter()
        .map(|part| {
            let mut groups: BTreeMap<usize, CpuSet> = BTreeMap::new();
            for (i, &g) in part.iter().enumerate() {
                groups.entry(g).or_default().insert(cpus[i]);
            }
            let mut v: Vec<CpuSet> = groups.into_values().collect();
            v.sort_by_key(|s| s.iter().next());
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;
    use crate::matrix::LatencyMatrix;
    use crate::measure::simulate::Simulated;

    /// 2 sockets × 2 CCX × 2 cores × 2 threads, siblings at +8: 16 CPUs, four levels.
    fn machine() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            let core = |x: usize| x % 8;
            if core(i) == core(j) {
                8.0
            } else if core(i) / 2 == core(j) / 2 {
                25.0
            } else if core(i) / 4 == core(j) / 4 {
                110.0
            } else {
                250.0
            }
        })
    }

    #[test]
    fn insertion_recovers_every_level_and_fills_the_rest() {
        let m = machine();
        let mut sim = Simulated::new(&m, 0.0, 3);
        let out = run_sparse(&m.cpus, None, &mut sim, &SparseConfig::default()).unwrap();
        let sizes: Vec<usize> = out.levels.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![8, 4, 2, 1], "{:?}", out.levels);
        assert_eq!(out.levels[0][0], set("0,8"));
        assert_eq!(out.levels[1][0], set("0-1,8-9"));
        assert_eq!(out.levels[2][0], set("0-3,8-11"));
        for i in 0..16 {
            for j in 0..16 {
                if i != j {
                    let (want, got) = (m.at(i, j).unwrap(), out.at(i, j).unwrap());
                    assert!((want - got).abs() <= 0.1 * want, "{i},{j}: {got} vs {want}");
                }
            }
        }
        assert!(
            out.pairs_measured < out.pairs_total(),
            "{}",
            out.pairs_measured
        );
        assert_eq!(out.pairs_total(), 120);
        // The matrix marks what was inferred.
        let mx = out.to_matrix(&BTreeMap::new(), &MODEL_COSTS);
        let inferred = mx.inferred_count();
        assert!(mx.stats.iter().all(|s| !s.inferred));
        assert_eq!(inferred + out.pairs_measured, 120);
        assert_eq!(
            mx.sparse.as_ref().unwrap().pairs_measured,
            out.pairs_measured
        );
        mx.validate().unwrap();
    }

    /// A sparse map holds its inferred pairs as bits, not statistics entries; its JSON
    /// (at most 1,024 CPUs) lists an entry for each, its binary form a record for each,
    /// and both read back into the same bits (the JSON written again byte for byte).
    #[test]
    fn a_sparse_maps_inferred_pairs_are_bits_through_json_and_binary() {
        // Eight CPUs are measured whole: sixteen leave pairs to infer.
        let truth = machine();
        let mut sim = Simulated::new(&truth, 0.0, 3);
        let out = run_sparse(&truth.cpus, None, &mut sim, &SparseConfig::default()).unwrap();
        let mx = out.to_matrix(&BTreeMap::new(), &MODEL_COSTS);
        mx.validate().unwrap();
        let inferred = mx.inferred_count();
        assert!(inferred > 0, "{}", out.pairs_measured);
        assert!(mx.stats.iter().all(|s| !s.inferred));
        assert_eq!(mx.stats.len(), out.pairs_measured);
        assert_eq!(mx.measured_pairs(), (out.pairs_measured, 120));
        assert_eq!(mx.inferred_pairs().count(), inferred);
        for (i, j) in (0..16).flat_map(|i| (i + 1..16).map(move |j| (i, j))) {
            let listed = mx.stats.iter().any(|s| (s.a, s.b) == (i as u32, j as u32));
            assert_ne!(mx.is_inferred(i, j), listed, "{i},{j}");
            assert_eq!(mx.is_inferred(i, j), mx.is_inferred(j, i));
        }
        let mut again = mx.clone();
        again.recount();
        assert_eq!(again.sparse, mx.sparse);

        // JSON: an entry per pair, the inferred ones with 0 samples, as before.
        let text = mx.to_json_text().unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let listed = v["stats"].as_array().unwrap();
        assert_eq!(listed.len(), 120);
        let marked = listed.iter().filter(|s| s["inferred"] == true);
        assert!(marked.clone().all(|s| s["samples"] == 0));
        assert_eq!(marked.count(), inferred);
        let back = LatencyMatrix::from_json(&text, std::path::Path::new("m.json")).unwrap();
        assert!(back.stats.iter().all(|s| !s.inferred));
        assert_eq!(back, mx);
        assert_eq!(back.to_json_text().unwrap(), text);

        // Binary: a record per pair, read back into the same bits.
        let mut bytes = Vec::new();
        mx.write_binary(&mut bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.bin");
        std::fs::write(&path, &bytes).unwrap();
        let back = LatencyMatrix::load(&path).unwrap();
        assert!(back.stats.iter().all(|s| !s.inferred));
        // Cells to a hundredth of a nanosecond; the rest as it was.
        assert_eq!((&back.stats, &back.inferred), (&mx.stats, &mx.inferred));
        assert_eq!(back.sparse, mx.sparse);
        assert_eq!(back.measured_pairs(), (out.pairs_measured, 120));
    }

    fn within_10(m: &LatencyMatrix, out: &SparseOutcome) -> f64 {
        let near = (0..16)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .filter(|&(i, j)| {
                let (want, got) = (m.at(i, j).unwrap(), out.at(i, j).unwrap());
                (want - got).abs() <= 0.1 * want
            })
            .count();
        near as f64 / 120.0
    }

    #[test]
    fn a_wrong_prior_is_caught_by_the_spot_checks_and_a_non_nesting_level_is_dropped() {
        let m = machine();
        let socket = vec![set("0-3,8-11"), set("4-7,12-15")];
        let ccx = vec![
            set("0-1,8-9"),
            set("2-3,10-11"),
            set("4-5,12-13"),
            set("6-7,14-15"),
        ];
        let smt: Vec<CpuSet> = (0..8).map(|c| set(&format!("{c},{}", c + 8))).collect();
        let right = vec![smt, ccx, socket.clone()];
        // Siblings said to be 2k and 2k+1 (Windows numbering): wrong here.
        let wrong_smt: Vec<CpuSet> = (0..8)
            .map(|k| set(&format!("{},{}", 2 * k, 2 * k + 1)))
            .collect();
        let wrong = vec![wrong_smt, socket, vec![set("0-5"), set("6-15")]];
        let t = prior_tree(&m.cpus, &wrong);
        assert_eq!(
            t.group.len(),
            3,
            "pairs, sockets, machine: the crossing level is dropped"
        );
        let cfg = SparseConfig::default();
        for seed in 1..=5 {
            let cfg = SparseConfig {
                seed,
                ..cfg.clone()
            };
            let with_prior = |prior: &[Vec<CpuSet>]| {
                run_sparse(
                    &m.cpus,
                    Some(prior),
                    &mut Simulated::new(&m, 0.0, seed),
                    &cfg,
                )
                .unwrap()
            };
            let (ok, bad) = (with_prior(&right), with_prior(&wrong));
            assert!(ok.used_prior && bad.used_prior);
            assert_eq!(within_10(&m, &ok), 1.0, "seed {seed}");
            assert!(
                within_10(&m, &bad) >= 0.9,
                "seed {seed}: {}",
                within_10(&m, &bad)
            );
        }
    }

    #[test]
    fn a_prior_of_lone_cpus_in_one_package_is_no_prior() {
        let m = machine();
        let alone: Vec<CpuSet> = (0..16).map(|c| set(&c.to_string())).collect();
        let flat = vec![alone, vec![set("0-15")]];
        let out = run_sparse(
            &m.cpus,
            Some(&flat),
            &mut Simulated::new(&m, 0.0, 1),
            &SparseConfig::default(),
        )
        .unwrap();
        assert!(!out.used_prior);
        assert_eq!(within_10(&m, &out), 1.0);
        assert_eq!(out.levels.len(), 4, "found by insertion: {:?}", out.levels);
    }

    #[test]
    fn two_cpus_are_one_measured_pair_and_fewer_is_an_error() {
        let m = LatencyMatrix::from_fn(vec![3, 5], |_, _| 40.0);
        let mut sim = Simulated::new(&m, 0.0, 1);
        let out = run_sparse(&[3, 5], None, &mut sim, &SparseConfig::default()).unwrap();
        assert_eq!((out.pairs_measured, out.pairs_total()), (1, 1));
        assert_eq!(out.at(0, 1), Some(40.0));
        let e = run_sparse(&[3], None, &mut sim, &SparseConfig::default()).unwrap_err();
        assert!(matches!(e, MeasureError::TooFewCpus { .. }), "{e}");
    }

    #[test]
    fn the_daemon_measures_sparsely_from_128_cpus_or_the_setting() {
        let by_default = |n| Mode::default_for(n, SPARSE_FROM_CPUS);
        assert_eq!(by_default(2), Mode::Serial);
        assert_eq!(by_default(SPARSE_FROM_CPUS - 1), Mode::Serial);
        assert_eq!(by_default(SPARSE_FROM_CPUS), Mode::Sparse);
        assert_eq!(by_default(512), Mode::Sparse);
        // `measure.sparse-from-cpus = 4`: a small machine gets the fast first map.
        assert_eq!(Mode::default_for(3, 4), Mode::Serial);
        assert_eq!(Mode::default_for(8, 4), Mode::Sparse);
    }

    #[test]
    fn the_model_counts_rounds() {
        let out = SparseOutcome {
            cpus: vec![0, 1],
            cells: vec![f64::NAN; 4],
            measured: vec![false; 4],
            pairs_measured: 0,
            measurements: 0,
            rounds: vec![1, 4],
            levels: Vec::new(),
            blocks_filled: 0,
            blocks_measured: 0,
            used_prior: false,
            mesh: false,
        };
        // 300 ms + 7.3 ms + (7.3 ms + 4 × 210.2 µs).
        let t = out.modelled(&MODEL_COSTS);
        assert_eq!(
            t,
            Duration::from_micros(300_000 + 7_300 + 7_300 + 840) + Duration::from_nanos(800)
        );
    }
}
