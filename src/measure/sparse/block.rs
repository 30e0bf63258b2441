//! Blocks: the pairs joined inside one group of the tree, between its child groups.

use std::collections::BTreeMap;

use super::super::rng::Rng;
use super::tree::Tree;

/// Two child groups of an irregular block (rows, columns) and their pairs.
pub(super) type SubPair<'a> = (&'a [usize], &'a [usize], Vec<(usize, usize)>);

/// One block: the pairs joined inside one group, between two of its child groups (at
/// the finest level the children are single CPUs).
pub(super) struct Block {
    /// The child groups' CPUs (row indices).
    pub(super) kids: Vec<Vec<usize>>,
    /// Child of each CPU of the block.
    pub(super) kid_of: BTreeMap<usize, usize>,
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

    /// `k` pairs, each child group in turn on one side and a random CPU of another
    /// group on the other, so every group is seen.
    pub(super) fn sample(&self, k: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
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

/// The blocks of a tree.
pub(super) fn blocks(tree: &Tree) -> Vec<Block> {
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
            out.push(Block { kids, kid_of });
        }
    }
    out
}
