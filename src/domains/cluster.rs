//! Clustering a latency matrix: the dense array, average-linkage merges, cuts into
//! partitions, and the checks between partitions and the sysfs layout.
//!
//! Must not touch: anything but numbers (no OS, no files).

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::stats::percentile;

use super::{DomainError, Domains, Finding, FindingKind, Layout, LevelKind, Trust, SMT_MAX_NS};

/// The matrix as a dense n×n array in its row order, zero and missing cells imputed.
#[derive(Debug, Clone)]
pub(super) struct Dense {
    pub(super) n: usize,
    pub(super) d: Vec<f64>,
}

impl Dense {
    /// The matrix with rows in ascending CPU id order, and those ids.
    pub(super) fn from_matrix(m: &LatencyMatrix) -> Result<(Dense, Vec<u32>), DomainError> {
        m.validate().map_err(DomainError::InvalidMatrix)?;
        let n = m.len();
        if n < 2 {
            return Err(DomainError::TooSmall(n));
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| m.cpus[i]);
        let cpus: Vec<u32> = order.iter().map(|&i| m.cpus[i]).collect();
        let mut d = vec![f64::NAN; n * n];
        let mut missing = 0;
        let mut example = (0, 0);
        for i in 0..n {
            d[i * n + i] = 0.0;
            for j in 0..i {
                // A zero cell is a timer too coarse to see anything: unknown.
                match m.at(order[i], order[j]) {
                    Some(v) if v > 0.0 => {
                        d[i * n + j] = v;
                        d[j * n + i] = v;
                    }
                    _ => {
                        if missing == 0 {
                            example = (cpus[j], cpus[i]);
                        }
                        missing += 1;
                    }
                }
            }
        }
        let total = n * (n - 1) / 2;
        if missing * 10 > total {
            return Err(DomainError::TooSparse {
                missing,
                total,
                example,
            });
        }
        if missing > 0 {
            // Impute from the two rows: the median of what both CPUs see.
            let fill: Vec<(usize, usize, f64)> = (0..n)
                .flat_map(|i| (0..i).map(move |j| (i, j)))
                .filter(|&(i, j)| d[i * n + j].is_nan())
                .map(|(i, j)| {
                    let mut row: Vec<f64> = (0..n)
                        .filter(|&k| k != i && k != j)
                        .flat_map(|k| [d[i * n + k], d[j * n + k]])
                        .filter(|v| !v.is_nan())
                        .collect();
                    row.sort_by(f64::total_cmp);
                    (i, j, row.get(row.len() / 2).copied().unwrap_or(1.0))
                })
                .collect();
            for (i, j, v) in fill {
                d[i * n + j] = v;
                d[j * n + i] = v;
            }
        }
        Ok((Dense { n, d }, cpus))
    }

    #[inline]
    pub(super) fn at(&self, i: usize, j: usize) -> f64 {
        self.d[i * self.n + j]
    }
}

/// Average-linkage clustering by nearest-neighbour chain: `(a, b, height)` per merge,
/// where `a` and `b` are member leaves of the two clusters.
pub(super) fn upgma(dense: &Dense) -> Vec<(usize, usize, f64)> {
    let n = dense.n;
    let mut d = dense.d.clone();
    let mut size = vec![1usize; n];
    let mut active = vec![true; n];
    let mut merges = Vec::with_capacity(n.saturating_sub(1));
    let mut chain: Vec<usize> = Vec::new();
    let mut left = n;
    while left > 1 {
        if chain.is_empty() {
            chain.push(active.iter().position(|&a| a).unwrap_or(0));
        }
        let (x, y) = loop {
            let x = chain[chain.len() - 1];
            let prev = if chain.len() >= 2 {
                Some(chain[chain.len() - 2])
            } else {
                None
            };
            let mut best = usize::MAX;
            let mut best_d = f64::INFINITY;
            if let Some(p) = prev {
                best = p;
                best_d = d[x * n + p];
            }
            for k in 0..n {
                if k == x || !active[k] {
                    continue;
                }
                let v = d[x * n + k];
                if v < best_d || (v == best_d && Some(k) != prev && k < best && Some(best) != prev)
                {
                    best = k;
                    best_d = v;
                }
            }
            if Some(best) == prev {
                chain.pop();
                chain.pop();
                break (x, best);
            }
            chain.push(best);
        };
        let h = d[x * n + y];
        let (keep, gone) = (x.min(y), x.max(y));
        let (sk, sg) = (size[keep] as f64, size[gone] as f64);
        for k in 0..n {
            if !active[k] || k == keep || k == gone {
                continue;
            }
            let v = (sk * d[keep * n + k] + sg * d[gone * n + k]) / (sk + sg);
            d[keep * n + k] = v;
            d[k * n + keep] = v;
        }
        size[keep] += size[gone];
        active[gone] = false;
        left -= 1;
        merges.push((keep, gone, h));
    }
    merges.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    merges
}

pub(super) fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// The partition (group label per index, labels in order of first appearance) after
/// every merge at or below `t`.
pub(super) fn cut(merges: &[(usize, usize, f64)], n: usize, t: f64) -> Vec<u32> {
    let mut parent: Vec<usize> = (0..n).collect();
    for &(a, b, h) in merges {
        if h > t {
            break;
        }
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let roots: Vec<usize> = (0..n).map(|i| find(&mut parent, i)).collect();
    relabel(&roots)
}

/// Labels renumbered 0.. in order of first appearance.
pub(super) fn relabel<T: Copy + PartialEq>(labels: &[T]) -> Vec<u32> {
    let mut seen: Vec<T> = Vec::new();
    labels
        .iter()
        .map(|l| match seen.iter().position(|s| s == l) {
            Some(p) => p as u32,
            None => {
                seen.push(*l);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

pub(super) fn count_groups(p: &[u32]) -> usize {
    p.iter().max().map(|&m| m as usize + 1).unwrap_or(0)
}

pub(super) fn group_sizes(p: &[u32]) -> Vec<usize> {
    let mut s = vec![0; count_groups(p)];
    for &g in p {
        s[g as usize] += 1;
    }
    s
}

pub(super) fn same_partition(a: &[u32], b: &[u32]) -> bool {
    refines(a, b) && refines(b, a)
}

/// Every group of `fine` lies inside one group of `coarse`.
pub(super) fn refines(fine: &[u32], coarse: &[u32]) -> bool {
    let mut map: Vec<Option<u32>> = vec![None; count_groups(fine)];
    fine.iter().zip(coarse).all(|(&f, &c)| {
        let slot = &mut map[f as usize];
        *slot.get_or_insert(c) == c
    })
}

/// The first group of `coarse` that `fine` splits or straddles, as CPU ids.
pub(super) fn first_split_group(coarse: &[u32], fine: &[u32], cpus: &[u32]) -> CpuSet {
    for g in 0..count_groups(coarse) as u32 {
        let members: Vec<usize> = (0..coarse.len()).filter(|&i| coarse[i] == g).collect();
        let labels: Vec<u32> = members.iter().map(|&i| fine[i]).collect();
        let uniform = labels.iter().all(|&l| l == labels[0]);
        let closed = members.len() == fine.iter().filter(|&&f| f == labels[0]).count();
        if !uniform || !closed {
            return members.iter().map(|&i| cpus[i]).collect();
        }
    }
    CpuSet::new()
}

/// Cells of pairs in one group of `coarse` but different groups of `finer` (or any two
/// distinct CPUs when `finer` is `None`).
pub(super) fn joined_cells(dense: &Dense, finer: Option<&Vec<u32>>, coarse: &[u32]) -> Vec<f64> {
    let n = dense.n;
    let mut out = Vec::new();
    for i in 0..n {
        for j in 0..i {
            if coarse[i] == coarse[j] && finer.is_none_or(|f| f[i] != f[j]) {
                out.push(dense.at(i, j));
            }
        }
    }
    out
}

/// For a sysfs level (by index into `group_of`, which uses ascending-id positions that
/// equal the matrix rows once checked): cells inside its groups and cells joined only at
/// the next coarser level.
pub(super) fn level_cells(dense: &Dense, group_of: &[Vec<u32>], li: usize) -> (Vec<f64>, Vec<f64>) {
    let finer = if li == 0 {
        None
    } else {
        Some(&group_of[li - 1])
    };
    let within = joined_cells(dense, finer, &group_of[li]);
    let coarser = group_of.get(li + 1).unwrap_or(&group_of[li]);
    let between = joined_cells(dense, Some(&group_of[li]), coarser);
    (within, between)
}

/// A level where some groups grew (relative to the finer level) and others stalled:
/// when the stalled ones add up to whole copies of the grown size, group them so, and
/// report the latency gap (the NUMA-home artefact when it is large).
pub(super) fn complete_by_symmetry(
    dense: &Dense,
    finer: Option<&Vec<u32>>,
    part: &[u32],
    cpus: &[u32],
) -> Option<(Vec<u32>, Vec<Finding>, f64)> {
    let n = dense.n;
    // Only above a level of real groups: singletons that stay alone (E-cores next to
    // SMT pairs) are not a symmetry to complete.
    let finer = finer?;
    let sizes = group_sizes(part);
    let finer_sizes = group_sizes(finer);
    // A group stalled if it is also a group of the finer level.
    let stalled: Vec<bool> = (0..sizes.len())
        .map(|g| {
            let i = part.iter().position(|&p| p as usize == g).unwrap_or(0);
            finer_sizes[finer[i] as usize] == sizes[g]
        })
        .collect();
    let grown: Vec<usize> = (0..sizes.len()).filter(|&g| !stalled[g]).collect();
    let still: Vec<usize> = (0..sizes.len()).filter(|&g| stalled[g]).collect();
    if grown.is_empty() || still.len() < 2 || still.iter().any(|&g| sizes[g] < 2) {
        return None;
    }
    let s = sizes[grown[0]];
    if grown.iter().any(|&g| sizes[g] != s) {
        return None;
    }
    let total: usize = still.iter().map(|&g| sizes[g]).sum();
    if total % s != 0 || still.iter().any(|&g| s % sizes[g] != 0) {
        return None;
    }
    // Agglomerate stalled groups by average latency, never beyond size s.
    let mut clusters: Vec<Vec<usize>> = still.iter().map(|&g| vec![g]).collect();
    let members = |gs: &[usize]| -> Vec<usize> {
        (0..n)
            .filter(|&i| gs.contains(&(part[i] as usize)))
            .collect()
    };
    let avg = |a: &[usize], b: &[usize]| -> f64 {
        let (ma, mb) = (members(a), members(b));
        let sum: f64 = ma
            .iter()
            .flat_map(|&i| mb.iter().map(move |&j| (i, j)))
            .map(|(i, j)| dense.at(i, j))
            .sum();
        sum / (ma.len() * mb.len()) as f64
    };
    let csize = |c: &[usize]| c.iter().map(|&g| sizes[g]).sum::<usize>();
    while clusters.len() > total / s {
        let mut best: Option<(f64, usize, usize)> = None;
        for a in 0..clusters.len() {
            for b in 0..a {
                if csize(&clusters[a]) + csize(&clusters[b]) > s {
                    continue;
                }
                let v = avg(&clusters[a], &clusters[b]);
                if best.is_none_or(|(bv, _, _)| v < bv) {
                    best = Some((v, a, b));
                }
            }
        }
        let (_, a, b) = best?;
        let taken = clusters.remove(a);
        clusters[b].extend(taken);
    }
    if clusters.iter().any(|c| csize(c) != s) {
        return None;
    }
    // New labels: grown groups keep theirs, each cluster takes its first group's label.
    let mut label: Vec<u32> = part.to_vec();
    for c in &clusters {
        let l = c[0] as u32;
        for i in 0..n {
            if c.contains(&(part[i] as usize)) {
                label[i] = l;
            }
        }
    }
    let completed = relabel(&label);
    let fast_cells: Vec<f64> = {
        let fast_part: Vec<u32> = part.to_vec();
        joined_cells(dense, Some(finer), &fast_part)
    };
    let slow_cells = {
        let base = part.to_vec();
        joined_cells(dense, Some(&base), &completed)
    };
    let fast_set: CpuSet = (0..n)
        .filter(|&i| grown.contains(&(part[i] as usize)))
        .map(|i| cpus[i])
        .collect();
    let slow_set: CpuSet = (0..n)
        .filter(|&i| still.contains(&(part[i] as usize)))
        .map(|i| cpus[i])
        .collect();
    let (fast, slow) = (percentile(&fast_cells, 0.5)?, percentile(&slow_cells, 0.5)?);
    let mut findings = vec![];
    if slow >= 1.5 * fast {
        findings.push(Finding {
            kind: FindingKind::NumaHome,
            trusted: Trust::Matrix,
            cpus: slow_set.clone(),
            message: format!(
                "CPUs {slow_set} look like one socket (or die) whose inner cross-group pairs cost {slow:.0} ns, {:.1}x the {fast:.0} ns inside {fast_set}: the NUMA-home artefact (the measured cache line lived in the other socket's memory); grouped by symmetry, placement uses the measured costs",
                slow / fast
            ),
        });
    } else {
        findings.push(Finding {
            kind: FindingKind::Uneven,
            trusted: Trust::Matrix,
            cpus: slow_set.clone(),
            message: format!(
                "CPUs {slow_set} did not group at the level of {fast_set} ({slow:.0} vs {fast:.0} ns); grouped by symmetry"
            ),
        });
    }
    Some((completed, findings, fast))
}

/// With sysfs sockets: one socket whose cross-LLC pairs cost ≥1.5x the other's.
pub(super) fn numa_home_by_layout(dense: &Dense, t: &Domains) -> Option<Finding> {
    let pkg = t
        .levels
        .iter()
        .position(|l| l.kind == LevelKind::Package || l.also.contains(&LevelKind::Package))?;
    if t.levels[pkg].groups.len() < 2 || pkg == 0 {
        return None;
    }
    let finer = &t.group_of[pkg - 1];
    let mut per: Vec<(f64, CpuSet)> = Vec::new();
    for (g, set) in t.levels[pkg].groups.iter().enumerate() {
        let cells: Vec<f64> = (0..dense.n)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .filter(|&(i, j)| {
                t.group_of[pkg][i] as usize == g
                    && t.group_of[pkg][j] as usize == g
                    && finer[i] != finer[j]
            })
            .map(|(i, j)| dense.at(i, j))
            .collect();
        per.push((percentile(&cells, 0.5)?, set.clone()));
    }
    let lo = per.iter().min_by(|a, b| a.0.total_cmp(&b.0))?;
    let hi = per.iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
    (hi.0 >= 1.5 * lo.0).then(|| Finding {
        kind: FindingKind::NumaHome,
        trusted: Trust::Topology,
        cpus: hi.1.clone(),
        message: format!(
            "socket {} pays {:.0} ns between its {} groups, {:.1}x the {:.0} ns of socket {}: the NUMA-home artefact of the measurement, not the hardware; sysfs sockets are kept",
            hi.1,
            hi.0,
            t.levels[pkg - 1].kind,
            hi.0 / lo.0,
            lo.0,
            lo.1
        ),
    })
}

/// Per sysfs level, group labels over the ascending CPU list; checks each is a partition.
pub(super) fn layout_partitions(
    layout: &Layout,
    cpus: &[u32],
) -> Result<Vec<(LevelKind, Vec<u32>)>, DomainError> {
    let mut out = Vec::new();
    for (kind, groups) in &layout.levels {
        if *kind == LevelKind::Machine {
            continue;
        }
        let mut label = vec![u32::MAX; cpus.len()];
        for (g, set) in groups.iter().enumerate() {
            for c in set {
                let Ok(i) = cpus.binary_search(&c) else {
                    return Err(DomainError::BadLayout {
                        kind: *kind,
                        cpus: layout.cpus.clone(),
                        detail: format!("CPU {c} is not online"),
                    });
                };
                if label[i] != u32::MAX {
                    return Err(DomainError::BadLayout {
                        kind: *kind,
                        cpus: layout.cpus.clone(),
                        detail: format!("CPU {c} is in two groups"),
                    });
                }
                label[i] = g as u32;
            }
        }
        if let Some(i) = label.iter().position(|&l| l == u32::MAX) {
            return Err(DomainError::BadLayout {
                kind: *kind,
                cpus: layout.cpus.clone(),
                detail: format!("CPU {} is in no group", cpus[i]),
            });
        }
        out.push((*kind, relabel(&label)));
    }
    // The levels must nest.
    for a in &out {
        for b in &out {
            if !refines(&a.1, &b.1) && !refines(&b.1, &a.1) {
                return Err(DomainError::BadLayout {
                    kind: a.0,
                    cpus: layout.cpus.clone(),
                    detail: format!("its groups straddle the {} groups", b.0),
                });
            }
        }
    }
    Ok(out)
}

/// Pairs up singletons of an SMT-like first level that are each other's nearest CPU
/// with a latency under 0.6x both their next partners and under [`SMT_MAX_NS`].
pub(super) fn add_lone_siblings(dense: &Dense, part: &mut Vec<u32>, next: &[u32]) {
    let n = dense.n;
    let sizes = group_sizes(part);
    let lone: Vec<bool> = (0..n).map(|i| sizes[part[i] as usize] == 1).collect();
    let nearest = |i: usize| -> (usize, f64, f64) {
        let (mut b, mut bd, mut second) = (usize::MAX, f64::INFINITY, f64::INFINITY);
        for k in (0..n).filter(|&k| k != i) {
            let v = dense.at(i, k);
            if v < bd {
                second = bd;
                b = k;
                bd = v;
            } else if v < second {
                second = v;
            }
        }
        (b, bd, second)
    };
    let mut changed = false;
    for i in 0..n {
        if !lone[i] || part[i] == u32::MAX {
            continue;
        }
        let (j, d, s_i) = nearest(i);
        if j == usize::MAX || !lone[j] || j < i {
            continue;
        }
        let (back, _, s_j) = nearest(j);
        if back == i && next[i] == next[j] && d <= SMT_MAX_NS && d < 0.6 * s_i && d < 0.6 * s_j {
            part[j] = part[i];
            changed = true;
        }
    }
    if changed {
        *part = relabel(part);
    }
}
