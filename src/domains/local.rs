//! Levels that exist in one part of the machine only, and SMT pairs hidden by one cell.
//!
//! Global cuts of the merge heights lose a level whose scale differs from part to part:
//! E-core clusters (45 ns inside) beside a P-core ring (30 ns), or a CCD split on one
//! socket of two. [`refine_partial_levels`] looks, in each level, for the groups that
//! did not grow from the finer level (bare cores beside grown groups) and clusters
//! them among themselves, inside each group of the next coarser level, at their own
//! scale: a jump of [`CUT_RATIO`] in their own merge heights, kept only when most pairs
//! inside the groups it makes are faster than most pairs towards everything else in
//! the coarser group.
//!
//! [`siblings_by_pattern`] pairs two CPUs that every other SMT pair's numbering says
//! are siblings (i and i+32, or 2k and 2k+1), that see the rest of the machine alike,
//! but whose one cell says otherwise: the cell is reported and repaired.
//!
//! Must not touch: anything but numbers (no OS, no files).

use crate::cpuset::CpuSet;
use crate::stats::percentile;

use super::cluster::*;
use super::{Finding, FindingKind, Trust, CUT_RATIO, SMT_MAX_NS};

/// Whether a first level is SMT-like: groups of at most two, typically under
/// [`SMT_MAX_NS`].
pub(super) fn smt_like(dense: &Dense, first: &[u32]) -> bool {
    group_sizes(first).iter().all(|&s| s <= 2)
        && percentile(&joined_cells(dense, None, first), 0.5).is_some_and(|v| v <= SMT_MAX_NS)
}

/// Gives the stalled parts of each level (finest first) their own groups where they
/// have a clean level of their own; drops a level that becomes equal to the next.
pub(super) fn refine_partial_levels(dense: &Dense, parts: &mut Vec<(Vec<u32>, f64)>) {
    let n = dense.n;
    let mut i = 0;
    while i < parts.len() {
        if i == 0 && smt_like(dense, &parts[0].0) {
            i += 1;
            continue;
        }
        let finer: Vec<u32> = if i == 0 {
            (0..n as u32).collect()
        } else {
            parts[i - 1].0.clone()
        };
        let coarser: Vec<u32> = parts
            .get(i + 1)
            .map(|p| p.0.clone())
            .unwrap_or_else(|| vec![0; n]);
        if let Some(new) = local_groups(dense, &finer, &parts[i].0, &coarser) {
            parts[i].0 = new;
            if parts
                .get(i + 1)
                .is_some_and(|next| same_partition(&next.0, &parts[i].0))
            {
                // Its coarser level is now the one above: look at this level again.
                parts.remove(i + 1);
                continue;
            }
        }
        i += 1;
    }
}

/// `level` with its stalled groups (groups that are one group of `finer`) regrouped
/// inside each group of `coarser`; `None` when nothing changes.
fn local_groups(dense: &Dense, finer: &[u32], level: &[u32], coarser: &[u32]) -> Option<Vec<u32>> {
    let n = dense.n;
    let (sizes, finer_sizes) = (group_sizes(level), group_sizes(finer));
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); sizes.len()];
    for i in 0..n {
        members[level[i] as usize].push(i);
    }
    let stalled: Vec<bool> = members
        .iter()
        .map(|m| finer_sizes[finer[m[0]] as usize] == m.len())
        .collect();
    if stalled.iter().all(|&s| s) {
        return None;
    }
    let mut label = level.to_vec();
    let mut changed = false;
    for c in 0..count_groups(coarser) as u32 {
        let units: Vec<&Vec<usize>> = (0..sizes.len())
            .filter(|&g| stalled[g] && coarser[members[g][0]] == c)
            .map(|g| &members[g])
            .collect();
        if units.len() < 2 {
            continue;
        }
        let in_c = coarser.iter().filter(|&&x| x == c).count();
        let stalled_cpus: usize = units.iter().map(|u| u.len()).sum();
        if stalled_cpus == in_c {
            // Nothing grew in this coarser group: it has no level between the finer
            // one and itself, so at this level it is already whole.
            for u in &units[1..] {
                for &i in u.iter() {
                    label[i] = level[units[0][0]];
                }
            }
            changed = true;
            continue;
        }
        let Some(local) = cluster_units(dense, &units) else {
            continue;
        };
        // Clean: most pairs inside a new group faster than most of its members' pairs
        // with the rest of the coarser group (other new groups, grown groups, other
        // cores); quartiles, so one ruined cell in a group of four does not decide.
        let mut local_of: Vec<Option<u32>> = vec![None; n];
        for (ua, u) in units.iter().enumerate() {
            for &i in u.iter() {
                local_of[i] = Some(local[ua]);
            }
        }
        let (mut within, mut outside) = (Vec::new(), Vec::new());
        for (ua, u) in units.iter().enumerate() {
            for &i in u.iter() {
                for j in (0..n).filter(|&j| coarser[j] == c && j != i) {
                    match local_of[j] {
                        Some(g) if g == local[ua] => {
                            if level[j] != level[i] {
                                within.push(dense.at(i, j));
                            }
                        }
                        _ => outside.push(dense.at(i, j)),
                    }
                }
            }
        }
        let clean = match (percentile(&within, 0.75), percentile(&outside, 0.25)) {
            (Some(w), Some(o)) => w < o,
            _ => false,
        };
        if !clean {
            continue;
        }
        for (ua, u) in units.iter().enumerate() {
            let first = units[local.iter().position(|&g| g == local[ua]).unwrap_or(ua)];
            for &i in u.iter() {
                label[i] = level[first[0]];
            }
        }
        changed = true;
    }
    changed.then(|| relabel(&label))
}

/// Average linkage over the units (groups of CPUs), cut at the first jump of their own
/// merge heights; a label per unit, or `None` without a jump or without a group of two.
fn cluster_units(dense: &Dense, units: &[&Vec<usize>]) -> Option<Vec<u32>> {
    let k = units.len();
    let mut d = vec![0.0; k * k];
    for a in 0..k {
        for b in 0..a {
            let mut sum = 0.0;
            for &i in units[a] {
                for &j in units[b] {
                    sum += dense.at(i, j);
                }
            }
            let v = sum / (units[a].len() * units[b].len()) as f64;
            d[a * k + b] = v;
            d[b * k + a] = v;
        }
    }
    let merges = upgma(&Dense { n: k, d });
    let mut heights: Vec<f64> = merges.iter().map(|m| m.2).collect();
    heights.sort_by(f64::total_cmp);
    let jump = |lo: f64, hi: f64| hi / lo.max(1e-9) >= CUT_RATIO && hi - lo >= 1.0;
    // The first jump; else the first jump over one merge in between (a unit joined late
    // because one of its cells is ruined), cut above that merge. The clean check of the
    // caller decides whether the groups are real.
    let t = heights
        .windows(2)
        .find(|w| jump(w[0], w[1]))
        .map(|w| (w[0].max(1e-9) * w[1]).sqrt())
        .or_else(|| {
            heights
                .windows(3)
                .find(|w| jump(w[0], w[2]))
                .map(|w| (w[1].max(1e-9) * w[2]).sqrt())
        })?;
    let local = cut(&merges, k, t);
    let groups = count_groups(&local);
    (groups > 1 && groups < k).then_some(local)
}

/// Median over the other CPUs of how differently CPUs `a` and `b` see them, relative.
fn row_difference(dense: &Dense, a: usize, b: usize) -> f64 {
    let diffs: Vec<f64> = (0..dense.n)
        .filter(|&k| k != a && k != b)
        .map(|k| {
            let (x, y) = (dense.at(a, k), dense.at(b, k));
            (x - y).abs() / x.min(y).max(1e-9)
        })
        .collect();
    percentile(&diffs, 0.5).unwrap_or(f64::INFINITY)
}

/// On an SMT-like first level where pairs cover at least 90% of the CPUs and all follow
/// one numbering (`hi = lo + d` with `lo mod 2d < d`: i/i+32, 2k/2k+1), pairs two lone
/// CPUs that the numbering makes siblings, that share their next-level group and see
/// the rest of the machine as alike as known siblings do. Their cell is replaced by the
/// siblings' median; each recovered pair is a finding naming the cell.
pub(super) fn siblings_by_pattern(
    dense: &mut Dense,
    cpus: &[u32],
    first: &mut Vec<u32>,
    next: &[u32],
) -> Vec<Finding> {
    let n = dense.n;
    let sizes = group_sizes(first);
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut seen: Vec<Option<usize>> = vec![None; sizes.len()];
    for (i, &g) in first.iter().enumerate() {
        let g = g as usize;
        if sizes[g] == 2 {
            match seen[g] {
                Some(a) => pairs.push((a, i)),
                None => seen[g] = Some(i),
            }
        }
    }
    if pairs.len() < 4 || pairs.len() * 2 * 10 < n * 9 {
        return Vec::new();
    }
    let d = cpus[pairs[0].1] - cpus[pairs[0].0];
    let fits = |lo: u32, hi: u32| hi == lo + d && lo % (2 * d) < d;
    if d == 0 || !pairs.iter().all(|&(a, b)| fits(cpus[a], cpus[b])) {
        return Vec::new();
    }
    let sibling_cells: Vec<f64> = pairs.iter().map(|&(a, b)| dense.at(a, b)).collect();
    let Some(typical) = percentile(&sibling_cells, 0.5) else {
        return Vec::new();
    };
    let known: Vec<f64> = pairs
        .iter()
        .map(|&(a, b)| row_difference(dense, a, b))
        .collect();
    let tolerance = (2.0 * percentile(&known, 0.9).unwrap_or(0.0)).max(0.05);
    let mut findings = Vec::new();
    for i in 0..n {
        if sizes[first[i] as usize] != 1 || !fits(cpus[i], cpus[i] + d) {
            continue;
        }
        let Ok(j) = cpus.binary_search(&(cpus[i] + d)) else {
            continue;
        };
        if sizes[first[j] as usize] != 1 || next[i] != next[j] {
            continue;
        }
        let rows = row_difference(dense, i, j);
        if rows > tolerance {
            continue;
        }
        let cell = dense.at(i, j);
        first[j] = first[i];
        dense.d[i * n + j] = typical;
        dense.d[j * n + i] = typical;
        let set: CpuSet = [cpus[i], cpus[j]].into_iter().collect();
        findings.push(Finding {
            kind: FindingKind::OutlierCell,
            trusted: Trust::Matrix,
            cpus: set,
            message: format!(
                "the cell of CPUs {} and {} reads {cell:.1} ns, but the other {} SMT pairs all follow the numbering i and i+{d} at {typical:.1} ns, and these two see the rest of the machine alike ({:.1}% apart, within the {:.1}% allowed): the cell is taken as a measurement outlier, the CPUs as SMT siblings costing {typical:.1} ns",
                cpus[i],
                cpus[j],
                pairs.len(),
                rows * 100.0,
                tolerance * 100.0
            ),
        });
    }
    if !findings.is_empty() {
        *first = relabel(first);
    }
    findings
}

#[cfg(test)]
mod tests {
    use crate::cpuset::CpuSet;
    use crate::domains::{Domains, FindingKind, Layout, LevelKind, Trust};
    use crate::matrix::LatencyMatrix;
    use crate::placement::{place, Policy, Request, SmtPolicy};

    /// A small deterministic jitter in [0, 1) per pair, so no two levels are flat.
    fn jitter(i: usize, j: usize) -> f64 {
        ((i * 7 + j * 13) % 10) as f64 / 10.0
    }

    /// 8 P-cores with SMT (siblings 2k, 2k+1: CPUs 0-15) and 8 E-cores (16-23) in two
    /// clusters of 4 sharing an L2, numbered as Linux numbers an i9-12900K.
    pub(crate) fn hybrid() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..24).collect(), |i, j| {
            let (a, b) = (i.max(j), i.min(j));
            let e = |c: usize| c >= 16;
            let v = if !e(a) && a / 2 == b / 2 {
                4.5
            } else if !e(a) {
                30.0
            } else if !e(b) {
                50.0
            } else if (a - 16) / 4 == (b - 16) / 4 {
                45.0
            } else {
                62.0
            };
            v + jitter(a, b)
        })
    }

    /// 2 sockets x 8 cores x 2 threads, siblings i and i+16; socket 0 (cores 0-7) is two
    /// CCDs of 4 cores, socket 1 (cores 8-15) one ring.
    pub(crate) fn one_socket_ccds() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..32).collect(), |i, j| {
            let (a, b) = (i.max(j), i.min(j));
            let (ca, cb) = (a % 16, b % 16);
            let v = if ca == cb {
                9.0
            } else if ca / 8 != cb / 8 {
                200.0
            } else if ca >= 8 {
                40.0
            } else if ca / 4 == cb / 4 {
                22.0
            } else {
                85.0
            };
            v + jitter(a, b)
        })
    }

    /// 2 sockets x 16 cores x 2 threads, siblings i and i+32; the cell of siblings 5 and
    /// 37 ruined (preempted: 140 ns).
    pub(crate) fn smt_with_outlier() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..64).collect(), |i, j| {
            let (a, b) = (i.max(j), i.min(j));
            let (ca, cb) = (a % 32, b % 32);
            if (a, b) == (37, 5) {
                return 140.0;
            }
            let v = if ca == cb {
                6.0
            } else if ca / 16 == cb / 16 {
                45.0
            } else {
                130.0
            };
            v + jitter(a, b)
        })
    }

    fn all(d: &Domains) -> CpuSet {
        d.cpus().iter().copied().collect()
    }

    fn groups(d: &Domains, level: usize) -> Vec<String> {
        d.levels()[level]
            .groups
            .iter()
            .map(|g| g.to_string())
            .collect()
    }

    fn plan(d: &Domains, count: usize, policy: Policy, smt: SmtPolicy, avail: &CpuSet) -> CpuSet {
        let req = Request {
            count,
            policy,
            smt,
            ..Default::default()
        };
        place(d, &req, avail).unwrap().cpus
    }

    /// Deterministic multiplicative noise of ±3% on every cell, and one cell `factor`
    /// times too slow.
    fn noisy(m: &LatencyMatrix, ruined: (usize, usize), factor: f64) -> LatencyMatrix {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        LatencyMatrix::from_fn(m.cpus.clone(), |i, j| {
            let v = m.at(i, j).unwrap() * (0.97 + 0.06 * next());
            if (i.max(j), i.min(j)) == ruined {
                factor * v
            } else {
                v
            }
        })
    }

    #[test]
    fn a_hybrid_machine_gets_its_e_core_clusters_and_spread_uses_each_once() {
        // A global cut finds the P-core ring (30 ns) but not the E clusters (45 ns,
        // too close to the 50 ns between P and E): they are found at the E-cores' scale.
        // With ±3% noise and a ruined cell: P to E, or inside an E cluster (18 then
        // joins 16-19 late, over one merge height of its own). A cell inside a 4-core
        // cluster ruined 4x (180 ns) still hides that cluster: average linkage puts 18
        // farther from 16-19 than the clusters are from each other.
        for m in [
            hybrid(),
            noisy(&hybrid(), (20, 3), 4.0),
            noisy(&hybrid(), (18, 16), 1.5),
        ] {
            let (d, findings) = Domains::reconcile(&m, None).unwrap();
            let names: Vec<String> = d.levels().iter().map(|l| l.name()).collect();
            assert_eq!(names, ["smt", "llc", "machine"]);
            assert_eq!(
                groups(&d, 0),
                [
                    "0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12-13", "14-15", "16", "17", "18",
                    "19", "20", "21", "22", "23"
                ]
            );
            assert_eq!(groups(&d, 1), ["0-15", "16-19", "20-23"]);
            assert!(findings.is_empty(), "{findings:?}");
            for smt in [SmtPolicy::Allow, SmtPolicy::Avoid] {
                let p = plan(&d, 4, Policy::Spread, smt, &all(&d));
                assert_eq!(p.to_string(), "0,2,16,20", "{smt}");
                for k in 2..=4 {
                    let p = plan(&d, k, Policy::Spread, smt, &all(&d));
                    for cluster in ["16-19", "20-23"] {
                        let c: CpuSet = cluster.parse().unwrap();
                        assert!(p.intersection(&c).len() <= 1, "K={k} {smt}: {p}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_hybrid_matrix_and_its_sysfs_agree_and_the_matrix_is_kept() {
        let root = crate::sysroot::SysRoot::with_sys(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs/i9-12900k/sys"),
        );
        let t = crate::topology::Topology::discover(&root).unwrap();
        let s = crate::domains::select(Some(&hybrid()), Some(&t), crate::domains::Misfit::Refuse)
            .unwrap();
        assert_eq!(s.trusted, crate::domains::Trust::Matrix, "{:?}", s.findings);
        let d = &s.domains;
        let e_clusters = d
            .levels()
            .iter()
            .position(|l| l.groups.contains(&"16-19".parse().unwrap()))
            .unwrap();
        assert!(d.levels()[e_clusters]
            .groups
            .contains(&"20-23".parse().unwrap()));
        let p = plan(d, 4, Policy::Spread, SmtPolicy::Avoid, &all(d));
        let e1: CpuSet = "16-19".parse().unwrap();
        let e2: CpuSet = "20-23".parse().unwrap();
        assert!(
            p.intersection(&e1).len() <= 1 && p.intersection(&e2).len() <= 1,
            "{p}"
        );
    }

    #[test]
    fn a_ccd_split_on_one_socket_only_is_that_sockets_level() {
        for m in [one_socket_ccds(), noisy(&one_socket_ccds(), (27, 9), 4.0)] {
            let (d, findings) = Domains::reconcile(&m, None).unwrap();
            let names: Vec<String> = d.levels().iter().map(|l| l.name()).collect();
            assert_eq!(names, ["smt", "llc", "group", "machine"]);
            assert_eq!(d.levels()[0].groups.len(), 16);
            assert_eq!(groups(&d, 1), ["0-3,16-19", "4-7,20-23", "8-15,24-31"]);
            assert_eq!(groups(&d, 2), ["0-7,16-23", "8-15,24-31"]);
            // Socket 1's ring is not socket 0's CCDs "completed by symmetry", and no
            // NUMA-home artefact is claimed for socket 0's slower cross-CCD pairs.
            assert!(findings.is_empty(), "{findings:?}");
            let lat: Vec<f64> = d.levels().iter().filter_map(|l| l.latency_ns).collect();
            assert!(lat.windows(2).all(|w| w[0] < w[1]), "{lat:?}");
            let avail = all(&d);
            assert_eq!(
                plan(&d, 3, Policy::Spread, SmtPolicy::Avoid, &avail).to_string(),
                "0,4,8"
            );
            let p = plan(&d, 4, Policy::Compact, SmtPolicy::Avoid, &avail);
            let ccds: [CpuSet; 2] = ["0-3,16-19".parse().unwrap(), "4-7,20-23".parse().unwrap()];
            assert!(ccds.iter().any(|c| p.is_subset(c)), "{p}");
        }
    }

    #[test]
    fn an_smt_pair_hidden_by_one_cell_is_recovered_and_named() {
        let (d, findings) = Domains::reconcile(&smt_with_outlier(), None).unwrap();
        let smt = d.smt_level().unwrap();
        let pairs = &d.levels()[smt].groups;
        assert_eq!(pairs.len(), 32);
        assert!(pairs
            .iter()
            .enumerate()
            .all(|(i, g)| g.to_string() == format!("{i},{}", i + 32)));
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!(f.kind, FindingKind::OutlierCell);
        assert_eq!(f.cpus.to_string(), "5,37");
        assert!(
            f.message.starts_with("the cell of CPUs 5 and 37 reads 140.0 ns, but the other 31 SMT pairs all follow the numbering i and i+32 at 6."),
            "{f}"
        );
        // The repaired cell is what placement pays.
        let (a, b) = (d.index_of(5).unwrap(), d.index_of(37).unwrap());
        assert!(d.cost(a, b) < 7.0, "{}", d.cost(a, b));
        // smt = avoid never takes both 5 and 37, nor any other pair.
        let socket0: CpuSet = "0-15,32-47".parse().unwrap();
        for (avail, most) in [(all(&d), 32), (socket0.clone(), 16)] {
            for policy in [Policy::Compact, Policy::Spread] {
                for k in 1..=most {
                    let p = plan(&d, k, policy, SmtPolicy::Avoid, &avail);
                    for c in p.iter().filter(|&c| c < 32) {
                        assert!(!p.contains(c + 32), "{policy} K={k}: {p}");
                    }
                }
            }
            let req = Request {
                count: most + 1,
                smt: SmtPolicy::Avoid,
                ..Default::default()
            };
            let e = place(&d, &req, &avail).unwrap_err().to_string();
            assert!(
                e.contains(&format!("only {most} are usable (one CPU per core")),
                "{e}"
            );
        }
    }

    /// Siblings measured slower than real SMT (24 ns, as an emulator gives them), yet
    /// clearly the fastest pairs: the matrix is trusted and the level is sysfs's SMT, so
    /// `smt = "avoid"` keeps siblings apart (seen in the test VM: the level was named a
    /// cluster and two siblings were given to an `smt = "avoid"` rule).
    #[test]
    fn siblings_slower_than_real_smt_are_still_the_smt_level_when_sysfs_says_so() {
        let m = LatencyMatrix::from_fn((0..8).collect(), |i, j| {
            let (a, b) = (i.max(j), i.min(j));
            (if a / 2 == b / 2 { 24.0 } else { 118.0 }) + jitter(a, b)
        });
        let sets = |f: &dyn Fn(u32) -> u32, groups: u32| -> Vec<CpuSet> {
            (0..groups)
                .map(|g| (0..8).filter(|&c| f(c) == g).collect())
                .collect()
        };
        let layout = Layout {
            cpus: "0-7".parse().unwrap(),
            levels: vec![
                (LevelKind::Smt, sets(&|c| c / 2, 4)),
                (LevelKind::Package, sets(&|c| c / 4, 2)),
            ],
        };
        let (d, findings) = Domains::reconcile_layout(&m, Some(&layout)).unwrap();
        assert_eq!(d.trust(), Trust::Matrix, "{findings:?}");
        let smt = d.smt_level().expect("an SMT level");
        assert_eq!(d.levels()[smt].groups, sets(&|c| c / 2, 4));
        let req = Request {
            count: 2,
            policy: Policy::Compact,
            smt: SmtPolicy::Avoid,
            exclude: CpuSet::new(),
            exclusive: false,
            cpus: None,
        };
        let cpus = place(&d, &req, &"0-7".parse().unwrap()).unwrap().cpus;
        let c: Vec<u32> = cpus.iter().collect();
        assert_eq!(c.len(), 2);
        assert_ne!(c[0] / 2, c[1] / 2, "siblings given to smt = avoid: {cpus}");
    }

    #[test]
    fn the_recovered_pair_agrees_with_sysfs_so_the_matrix_is_trusted() {
        let sets = |f: &dyn Fn(u32) -> u32, groups: u32| -> Vec<CpuSet> {
            (0..groups)
                .map(|g| (0..64).filter(|&c| f(c) == g).collect())
                .collect()
        };
        let layout = Layout {
            cpus: "0-63".parse().unwrap(),
            levels: vec![
                (LevelKind::Smt, sets(&|c| c % 32, 32)),
                (LevelKind::Package, sets(&|c| (c % 32) / 16, 2)),
            ],
        };
        let (d, findings) = Domains::reconcile_layout(&smt_with_outlier(), Some(&layout)).unwrap();
        assert_eq!(d.trust(), Trust::Matrix, "{findings:?}");
        let kinds: Vec<FindingKind> = findings.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [FindingKind::OutlierCell]);
        // sysfs still wins where the matrix contradicts it: siblings numbered otherwise.
        let adjacent = Layout {
            cpus: "0-63".parse().unwrap(),
            levels: vec![(LevelKind::Smt, sets(&|c| c / 2, 32))],
        };
        let (d, findings) =
            Domains::reconcile_layout(&smt_with_outlier(), Some(&adjacent)).unwrap();
        assert_eq!(d.trust(), Trust::Topology);
        assert!(
            findings
                .iter()
                .any(|f| f.kind == FindingKind::CrossesGroups),
            "{findings:?}"
        );
    }

    #[test]
    fn lone_cpus_that_break_the_numbering_or_look_different_stay_alone() {
        // The hybrid's E-cores are lone beside pairs numbered 2k/2k+1, but pairs cover
        // only two thirds of the CPUs: no pattern is claimed (first test: 16..23 alone).
        // Here 5 and 37 follow the pattern but sit in different sockets: no pair.
        let m = LatencyMatrix::from_fn((0..64).collect(), |i, j| {
            let (a, b) = (i.max(j), i.min(j));
            let socket = |c: usize| {
                if c == 5 || c == 37 {
                    c / 32
                } else {
                    (c % 32) / 16
                }
            };
            let v = if a % 32 == b % 32 && socket(a) == socket(b) {
                6.0
            } else if socket(a) == socket(b) {
                45.0
            } else {
                130.0
            };
            v + jitter(a, b)
        });
        let (d, findings) = Domains::reconcile(&m, None).unwrap();
        assert!(
            findings.iter().all(|f| f.kind != FindingKind::OutlierCell),
            "{findings:?}"
        );
        let smt = &d.levels()[d.smt_level().unwrap()].groups;
        assert!(smt.contains(&"5".parse().unwrap()) && smt.contains(&"37".parse().unwrap()));
    }

    mod any_matrix {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            /// Blocks of cores with their own inner latency beside bare cores, SMT pairs
            /// by one numbering, a few ruined cells: levels stay nested partitions,
            /// latencies rise, and a recovered pair is one the numbering gives.
            #[test]
            fn levels_nest_whatever_the_parts_and_the_ruined_cells(
                cores in 2usize..24,
                smt in any::<bool>(),
                block in 1usize..6,
                inner in prop::collection::vec(10.0f64..80.0, 6),
                across in 20.0f64..200.0,
                ruined in prop::collection::vec((0usize..48, 0usize..48, 1.5f64..10.0), 0..3),
            ) {
                let n = if smt { 2 * cores } else { cores };
                let core = |c: usize| c % cores;
                let m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
                    let (a, b) = (i.max(j), i.min(j));
                    let (ca, cb) = (core(a), core(b));
                    let mut v = if ca == cb {
                        5.0
                    } else if ca / block == cb / block {
                        inner[(ca / block) % inner.len()]
                    } else {
                        across
                    } + jitter(a, b);
                    for &(x, y, f) in &ruined {
                        if (x.max(y), x.min(y)) == (a, b) {
                            v *= f;
                        }
                    }
                    v
                });
                let (d, findings) = Domains::reconcile(&m, None).unwrap();
                let levels = d.levels();
                prop_assert_eq!(levels.last().unwrap().groups.len(), 1);
                for w in levels.windows(2) {
                    for g in &w[0].groups {
                        prop_assert!(w[1].groups.iter().any(|h| g.is_subset(h)), "{} in {:?}", g, w[1].groups);
                    }
                    prop_assert!(w[0].groups.len() > w[1].groups.len());
                }
                for l in levels {
                    let total: usize = l.groups.iter().map(|g| g.len()).sum();
                    prop_assert_eq!(total, n);
                }
                for f in findings.iter().filter(|f| f.kind == FindingKind::OutlierCell) {
                    let c: Vec<u32> = f.cpus.iter().collect();
                    prop_assert!(smt && c.len() == 2 && c[1] == c[0] + cores as u32, "{}", f);
                }
            }
        }
    }
}
