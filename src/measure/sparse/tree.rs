//! The tree of nested groups: from the prior, or built by inserting the CPUs one by
//! one with a few guessed pairs each.

use std::collections::{BTreeMap, BTreeSet};

use super::run::Run;
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::cpuset::CpuSet;

/// Nested groups, built by insertion or from the prior: `group[level][cpu]`.
#[derive(Debug, Clone)]
pub(super) struct Tree {
    /// Typical figure of each level (insertion only), ascending.
    pub(super) lat: Vec<Vec<f64>>,
    pub(super) group: Vec<Vec<usize>>,
    pub(super) next: usize,
}

pub(super) const NONE: usize = usize::MAX;

impl Tree {
    pub(super) fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next
    }

    /// The distinct group sizes of each level, finest first, for the log.
    pub(super) fn shape(&self) -> Vec<Vec<usize>> {
        self.group
            .iter()
            .map(|part| {
                let mut size: BTreeMap<usize, usize> = BTreeMap::new();
                for &g in part {
                    *size.entry(g).or_default() += 1;
                }
                let mut v: Vec<usize> = size.into_values().collect();
                v.sort_unstable();
                v.dedup();
                v
            })
            .collect()
    }

    /// Whether a level holds a group of two or more CPUs that is not the whole
    /// machine.
    pub(super) fn has_groups(&self) -> bool {
        self.group.iter().any(|part| {
            let groups = part.iter().collect::<BTreeSet<_>>().len();
            groups > 1 && groups < part.len()
        })
    }

    /// Level `k`'s figure: the upper median of the figures it holds (one of them).
    pub(super) fn typical(&self, k: usize) -> f64 {
        crate::stats::upper_median(&self.lat[k]).expect("every level holds a figure")
    }

    /// The level a figure belongs to, adding a level when it is near none.
    pub(super) fn classify(&mut self, v: f64, ratio: f64, inserted: &[usize]) -> usize {
        let best = (0..self.lat.len())
            .map(|k| (k, (v / self.typical(k)).ln().abs()))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((k, d)) = best {
            if d <= ratio.ln() {
                self.lat[k].push(v);
                return k;
            }
        }
        // A new level: its partition starts as the finer one's (no joins there yet).
        let pos = (0..self.lat.len())
            .find(|&k| self.typical(k) > v)
            .unwrap_or(self.lat.len());
        let part = if pos == 0 {
            let n = self.group.first().map_or(0, Vec::len);
            let mut p = vec![NONE; n];
            for &i in inserted {
                p[i] = self.fresh();
            }
            p
        } else {
            self.group[pos - 1].clone()
        };
        self.group.insert(pos, part);
        self.lat.insert(pos, vec![v]);
        pos
    }

    /// [`Tree::classify`] for a figure of `q`'s; a level it adds gives `q` an id there
    /// (no joins yet).
    pub(super) fn place(&mut self, q: usize, v: f64, ratio: f64, inserted: &[usize]) -> usize {
        let k = self.classify(v, ratio, inserted);
        for l in 0..self.group.len() {
            if self.group[l][q] == NONE {
                self.group[l][q] = self.fresh();
            }
        }
        k
    }

    /// `q` joins `p` at level `k`: same groups from `k` up.
    pub(super) fn join(&mut self, q: usize, p: usize, k: usize) {
        for l in k..self.group.len() {
            self.group[l][q] = self.group[l][p];
        }
    }
}

/// The prior as nested partitions of row indices, finest first: levels that do not nest
/// in the finer ones are dropped, equal ones merged; the whole machine comes last.
pub(super) fn prior_tree(ids: &[u32], prior: &[Vec<CpuSet>]) -> Tree {
    let n = ids.len();
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let mut levels: Vec<&Vec<CpuSet>> = prior.iter().collect();
    levels.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for level in levels {
        let mut part = vec![NONE; n];
        for (g, set) in level.iter().enumerate() {
            for (i, &c) in ids.iter().enumerate() {
                if set.contains(c) {
                    part[i] = g;
                }
            }
        }
        // CPUs the prior does not list sit alone.
        for (i, p) in part.iter_mut().enumerate() {
            if *p == NONE {
                *p = level.len() + i;
            }
        }
        let nests = parts.last().is_none_or(|finer| {
            let mut up = BTreeMap::new();
            (0..n).all(|i| *up.entry(finer[i]).or_insert(part[i]) == part[i])
        });
        if nests && parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    let machine = vec![0; n];
    if parts.last() != Some(&machine) {
        parts.push(machine);
    }
    Tree {
        lat: vec![Vec::new(); parts.len()],
        group: parts,
        next: 0,
    }
}

/// The partners to try first for the CPU at index `q` (lower indices only): the previous
/// CPU, and the one half the machine below (where Linux numbers SMT siblings and
/// second sockets).
pub(super) fn guesses(q: usize, n: usize) -> Vec<usize> {
    let mut g = Vec::new();
    if q >= 1 {
        g.push(q - 1);
    }
    if q >= n / 2 && n / 2 > 1 {
        g.push(q - n / 2);
    }
    if q >= 2 {
        g.push(q - 2);
    }
    g
}

/// The first guesses of every CPU, measured before insertion in parallel rounds: the
/// chain and the half-offset.
pub(super) fn first_pairs(n: usize) -> Vec<(usize, usize)> {
    (1..n)
        .flat_map(|q| guesses(q, n).into_iter().take(2).map(move |p| (p, q)))
        .collect()
}

/// Builds the tree by inserting the CPUs one by one: each joins the tree where its first
/// partner says, then looks for a closer group among its guesses and the other groups of
/// the level it joined, trying at most `search` more pairs. The [`first_pairs`] are
/// measured already.
pub(super) fn insert_all<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cfg: &SparseConfig,
) -> Result<Tree, MeasureError> {
    let n = run.n();
    let mut tree = Tree {
        lat: Vec::new(),
        group: Vec::new(),
        next: 0,
    };
    let mut inserted: Vec<usize> = vec![0];
    // Offsets that found a CPU's closest partner, most recent first.
    let mut offsets: Vec<usize> = Vec::new();
    let mut found: BTreeMap<usize, usize> = BTreeMap::new();
    for q in 1..n {
        for l in 0..tree.group.len() {
            tree.group[l][q] = tree.fresh();
        }
        let mut cands: Vec<usize> = offsets
            .iter()
            .filter(|&&d| d <= q)
            .map(|&d| q - d)
            .collect();
        cands.extend(guesses(q, n));
        let mut seen = BTreeSet::new();
        cands.retain(|c| seen.insert(*c));
        // The closest partner with a figure already places q; else the first that
        // gives one.
        let mut placed = cands
            .iter()
            .filter_map(|&c| Some((c, run.get(c, q)?)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        if placed.is_none() {
            for &c in &cands {
                if let Some(v) = run.figure(c, q)? {
                    placed = Some((c, v));
                    break;
                }
            }
        }
        let Some((mut best, v)) = placed else {
            return Err(MeasureError::NothingMeasured {
                reason: format!("CPU {}: no pair with a lower CPU gave a figure", run.ids[q]),
            });
        };
        if tree.group.is_empty() {
            tree.group.push(vec![NONE; n]);
            tree.group[0][0] = tree.fresh();
            tree.group[0][q] = tree.fresh();
            tree.lat.push(vec![v]);
        }
        let mut level = tree.place(q, v, cfg.level_ratio, &inserted);
        tree.join(q, best, level);
        let mut tried: BTreeSet<usize> = cands
            .iter()
            .copied()
            .filter(|&c| run.get(c, q).is_some())
            .collect();
        tried.insert(best);
        let mut extra = 0;
        while level > 0 {
            // q is in `best`'s group at `level`, not (yet) in any group below it:
            // candidates are CPUs of that group in another child group.
            let g = tree.group[level][q];
            let known: Vec<usize> = cands
                .iter()
                .copied()
                .filter(|&c| run.get(c, q).is_some() && tree.group[level][c] == g)
                .collect();
            // A cached figure already says q is closer to one of them.
            let mut moved = false;
            for c in known {
                let w = run.get(c, q).expect("filtered");
                let k = tree.place(q, w, cfg.level_ratio, &inserted);
                if k < level {
                    level = k;
                    best = c;
                    tree.join(q, best, level);
                    moved = true;
                    break;
                }
            }
            if moved {
                continue;
            }
            if extra >= cfg.search {
                break;
            }
            // The guesses not measured yet, then the other child groups, most recently
            // created first (numbering order).
            let mut reps: Vec<usize> = cands
                .iter()
                .copied()
                .filter(|&c| tree.group[level][c] == g && c != best)
                .collect();
            let mut children = BTreeSet::new();
            for &c in inserted.iter().rev() {
                if tree.group[level][c] == g && children.insert(tree.group[level - 1][c]) {
                    reps.push(c);
                }
            }
            let Some(&c) = reps.iter().find(|c| !tried.contains(c)) else {
                break;
            };
            tried.insert(c);
            extra += 1;
            let Some(w) = run.figure(c, q)? else {
                continue;
            };
            let k = tree.place(q, w, cfg.level_ratio, &inserted);
            if k < level {
                level = k;
                best = c;
                tree.join(q, best, level);
            }
        }
        if best < q {
            *found.entry(q - best).or_insert(0usize) += 1;
            let mut ranked: Vec<(usize, usize)> = found.iter().map(|(&d, &c)| (c, d)).collect();
            ranked.sort_by(|x, y| y.cmp(x));
            offsets = ranked.into_iter().take(3).map(|(_, d)| d).collect();
        }
        inserted.push(q);
    }
    let top = tree.group.last().expect("two CPUs make a level");
    if top.iter().any(|&g| g != top[0]) {
        tree.group.push(vec![0; n]);
        tree.lat.push(Vec::new());
    }
    Ok(tree)
}
