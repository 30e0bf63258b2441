//! Blocks: the pairs joined inside one group of the tree, between its child groups.

use std::collections::BTreeMap;

use super::super::rng::Rng;
use super::tree::Tree;

/// Cells a pair of units must hold on average for a block to have units: two CCDs of
/// 16 CPUs hold 256, two SMT pairs below cores 4.
const UNIT_CELLS: usize = 32;
/// Pairs of units a block may have: two spot checks each fill the largest sample
/// (8 × [`super::SparseConfig::samples`] of 8).
const UNIT_PAIRS: usize = 32;

/// Two child groups of an irregular block (rows, columns) and their pairs.
pub(super) type SubPair<'a> = (&'a [usize], &'a [usize], Vec<(usize, usize)>);

/// One block: the pairs joined inside one group, between two of its child groups (at
/// the finest level the children are single CPUs).
pub(super) struct Block {
    /// The child groups' CPUs (row indices).
    pub(super) kids: Vec<Vec<usize>>,
    /// Child of each CPU of the block.
    pub(super) kid_of: BTreeMap<usize, usize>,
    /// The block's units: the group of each CPU one level below the children (a CCD
    /// inside a child that is half a socket). Empty where the block has none: without
    /// `pair_terms`, below the finest children, where the units are a few CPUs each
    /// or where they make more than [`UNIT_PAIRS`] pairs.
    pub(super) unit_of: BTreeMap<usize, usize>,
    /// The fill may give each pair of units (of children where there are none) a
    /// term of its own ([`super::SparseConfig::pair_terms_from`]).
    pub(super) pair_terms: bool,
}

impl Block {
    pub(super) fn cells(&self) -> usize {
        let total: usize = self.kids.iter().map(Vec::len).sum();
        let inside: usize = self.kids.iter().map(|k| k.len() * k.len()).sum();
        (total * total - inside) / 2
    }

    /// Every pair between child groups `a` and `b`.
    pub(super) fn between(&self, a: usize, b: usize) -> Vec<(usize, usize)> {
        self.kids[a]
            .iter()
            .flat_map(|&i| self.kids[b].iter().map(move |&j| (i.min(j), i.max(j))))
            .collect()
    }

    /// Every pair of the block.
    pub(super) fn pairs(&self) -> Vec<(usize, usize)> {
        (0..self.kids.len())
            .flat_map(|a| (0..a).map(move |b| (a, b)))
            .flat_map(|(a, b)| self.between(a, b))
            .collect()
    }

    /// The pairs of units in different children (two CCDs in two halves of a
    /// socket): each pair's CPUs, rows and columns.
    pub(super) fn unit_pairs(&self) -> Vec<(Vec<usize>, Vec<usize>)> {
        unit_pairs(&self.unit_of, &self.kid_of)
    }

    /// `k` pairs: where the block has units, each pair of units in turn (in a random
    /// order), so every pair the fill has a term for is seen; else each child group in
    /// turn on one side and a random CPU of another group on the other, so every group
    /// is seen.
    pub(super) fn sample(&self, k: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
        let mut units = self.unit_pairs();
        if !units.is_empty() {
            for x in (1..units.len()).rev() {
                units.swap(x, rng.below(x + 1));
            }
            return (0..k)
                .map(|r| {
                    let (u, v) = &units[r % units.len()];
                    let i = u[rng.below(u.len())];
                    let j = v[rng.below(v.len())];
                    (i.min(j), i.max(j))
                })
                .collect();
        }
        let m = self.kids.len();
        (0..k)
            .map(|r| {
                let a = r % m;
                let b = (a + 1 + rng.below(m - 1)) % m;
                let i = self.kids[a][rng.below(self.kids[a].len())];
                let j = self.kids[b][rng.below(self.kids[b].len())];
                (i.min(j), i.max(j))
            })
            .collect()
    }
}

/// The pairs of units (`unit_of`) in different children (`kid_of`).
fn unit_pairs(
    unit_of: &BTreeMap<usize, usize>,
    kid_of: &BTreeMap<usize, usize>,
) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut units: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (&i, &g) in unit_of {
        units.entry(g).or_default().push(i);
    }
    let units: Vec<Vec<usize>> = units.into_values().collect();
    let mut out = Vec::new();
    for (a, u) in units.iter().enumerate() {
        for v in &units[..a] {
            if kid_of[&u[0]] != kid_of[&v[0]] {
                out.push((u.clone(), v.clone()));
            }
        }
    }
    out
}

/// The blocks of a tree; with `pair_terms`, with units and pair terms
/// ([`Block::pair_terms`]).
pub(super) fn blocks(tree: &Tree, pair_terms: bool) -> Vec<Block> {
    let mut out = Vec::new();
    for (k, part) in tree.group.iter().enumerate() {
        let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, &g) in part.iter().enumerate() {
            members.entry(g).or_default().push(i);
        }
        for cpus in members.values() {
            let mut children: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for &i in cpus {
                let child = if k == 0 { i } else { tree.group[k - 1][i] };
                children.entry(child).or_default().push(i);
            }
            if children.len() < 2 {
                continue;
            }
            let kids: Vec<Vec<usize>> = children.into_values().collect();
            let kid_of = kids
                .iter()
                .enumerate()
                .flat_map(|(x, k)| k.iter().map(move |&i| (i, x)))
                .collect();
            let mut unit_of: BTreeMap<usize, usize> = BTreeMap::new();
            if pair_terms && k >= 2 {
                unit_of = cpus.iter().map(|&i| (i, tree.group[k - 2][i])).collect();
                let pairs = unit_pairs(&unit_of, &kid_of);
                let cells: usize = pairs.iter().map(|(u, v)| u.len() * v.len()).sum();
                if pairs.len() > UNIT_PAIRS || cells < UNIT_CELLS * pairs.len() {
                    unit_of.clear();
                }
            }
            out.push(Block {
                kids,
                kid_of,
                unit_of,
                pair_terms,
            });
        }
    }
    out
}
