//! The choosers: `compact` (greedy min-max growth inside the finest groups able to hold
//! the request, best-fit among equals) and `spread` (one CPU per group at the coarsest
//! level with enough groups, round-robin over their parents).

use super::request::{Request, SmtPolicy};
use crate::cpuset::CpuSet;
use crate::domains::Domains;

/// Cores (SMT groups) and siblings by CPU index, worked out once: the choosers ask for
/// them often.
pub(super) struct Cores {
    core_of: Vec<usize>,
    members: Vec<Vec<usize>>,
}

impl Cores {
    pub(super) fn new(d: &Domains) -> Self {
        let n = d.cpus().len();
        let smt = d.smt_level();
        let core_of: Vec<usize> = (0..n)
            .map(|i| smt.map(|l| d.group_of(l, i)).unwrap_or(i))
            .collect();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, &c) in core_of.iter().enumerate() {
            members[c].push(i);
        }
        Cores { core_of, members }
    }

    /// The core of CPU index `i`.
    fn core(&self, i: usize) -> usize {
        self.core_of[i]
    }

    /// The other CPU indices of `i`'s core.
    pub(super) fn siblings(&self, i: usize) -> Vec<usize> {
        self.members[self.core_of[i]]
            .iter()
            .copied()
            .filter(|&k| k != i)
            .collect()
    }
}

/// What `compact` and `spread` choose from: `k` CPUs for `req` among the `usable`
/// indices of `d`.
pub(super) struct Chooser<'a> {
    pub(super) d: &'a Domains,
    pub(super) req: &'a Request,
    pub(super) k: usize,
    pub(super) usable: Vec<bool>,
    pub(super) cores: &'a Cores,
}

impl Chooser<'_> {
    fn core(&self, i: usize) -> usize {
        self.cores.core(i)
    }

    fn siblings(&self, i: usize) -> Vec<usize> {
        self.cores.siblings(i)
    }

    /// How many of `members` one request may take: the usable ones, or their cores
    /// with `smt = avoid`.
    pub(super) fn capacity(&self, members: impl Iterator<Item = usize>) -> usize {
        let v: Vec<usize> = members.filter(|&i| self.usable[i]).collect();
        if self.req.smt == SmtPolicy::Avoid {
            let mut cores: Vec<usize> = v.iter().map(|&i| self.core(i)).collect();
            cores.sort_unstable();
            cores.dedup();
            cores.len()
        } else {
            v.len()
        }
    }

    /// Greedy min-max growth inside one group, from every seed (or one seed per sub-group
    /// when the group is large). Returns (worst, sum, chosen).
    fn grow(
        &self,
        members: &[usize],
        fit: &[usize],
        seeds: &[usize],
    ) -> Option<(f64, f64, Vec<usize>)> {
        let (d, req, k) = (self.d, self.req, self.k);
        let m = members.len();
        let mut best: Option<(f64, f64, Vec<usize>)> = None;
        let mut maxd = vec![0.0f64; m];
        let mut sumd = vec![0.0f64; m];
        let mut taken = vec![false; m];
        let pos = |i: usize| members.binary_search(&i).ok();
        for &seed in seeds {
            let Some(sp) = pos(seed) else { continue };
            maxd.iter_mut().for_each(|v| *v = 0.0);
            sumd.iter_mut().for_each(|v| *v = 0.0);
            taken.iter_mut().for_each(|v| *v = false);
            let mut chosen = Vec::with_capacity(k);
            let mut used_cores: Vec<usize> = Vec::new();
            let mut core_used = vec![false; d.cpus().len()];
            let (mut worst, mut sum) = (0.0f64, 0.0f64);
            let mut next = Some(sp);
            while chosen.len() < k {
                let Some(p) = next else { break };
                let i = members[p];
                worst = worst.max(maxd[p]);
                sum += sumd[p];
                chosen.push(i);
                taken[p] = true;
                used_cores.push(self.core(i));
                core_used[self.core(i)] = true;
                for q in 0..m {
                    let c = d.cost(i, members[q]);
                    if c > maxd[q] {
                        maxd[q] = c;
                    }
                    sumd[q] += c;
                }
                if chosen.len() == k {
                    break;
                }
                // prefer-siblings: finish the core first.
                if req.smt == SmtPolicy::PreferSiblings {
                    if let Some(s) = self
                        .siblings(i)
                        .into_iter()
                        .filter_map(pos)
                        .find(|&q| !taken[q])
                    {
                        next = Some(s);
                        continue;
                    }
                }
                next = None;
                let mut key = (f64::INFINITY, f64::INFINITY, usize::MAX, usize::MAX);
                for q in 0..m {
                    if taken[q] || (req.smt == SmtPolicy::Avoid && core_used[self.core(members[q])])
                    {
                        continue;
                    }
                    let cand = (worst.max(maxd[q]), sumd[q], fit[members[q]], members[q]);
                    if cand.0 < key.0
                        || (cand.0 == key.0
                            && (cand.1 < key.1
                                || (cand.1 == key.1 && (cand.2, cand.3) < (key.2, key.3))))
                    {
                        key = cand;
                        next = Some(q);
                    }
                }
            }
            if chosen.len() < k {
                continue;
            }
            let better = match &best {
                None => true,
                Some((bw, bs, _)) => worst < *bw || (worst == *bw && sum < *bs),
            };
            if better {
                chosen.sort_unstable();
                best = Some((worst, sum, chosen));
            }
        }
        best
    }

    pub(super) fn compact(&self, notes: &mut Vec<String>) -> (Vec<usize>, usize, Vec<CpuSet>) {
        let (d, k, usable) = (self.d, self.k, &self.usable);
        let n = d.cpus().len();
        // Best-fit key per CPU: free CPUs left in its core, then in its groups up the
        // levels — taking from already-broken domains first keeps whole ones intact.
        let mut free_in_core = vec![0usize; n];
        for i in (0..n).filter(|&i| usable[i]) {
            free_in_core[self.core(i)] += 1;
        }
        let fit: Vec<usize> = (0..n)
            .map(|i| {
                if usable[i] {
                    free_in_core[self.core(i)]
                } else {
                    usize::MAX
                }
            })
            .collect();
        for (l, level) in d.levels().iter().enumerate() {
            let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); level.groups.len()];
            for i in 0..n {
                buckets[d.group_of(l, i)].push(i);
            }
            let mut cands: Vec<(usize, Vec<usize>)> = Vec::new();
            for (g, members) in buckets.into_iter().enumerate() {
                if members.len() < k {
                    continue;
                }
                if self.capacity(members.iter().copied()) >= k {
                    cands.push((g, members.into_iter().filter(|&i| usable[i]).collect()));
                }
            }
            if cands.is_empty() {
                continue;
            }
            let mut best: Option<(f64, f64, usize, usize, Vec<usize>)> = None;
            for (g, members) in &cands {
                let seeds: Vec<usize> = if members.len() <= 32 || l == 0 {
                    members.clone()
                } else {
                    // One seed per sub-group of the level below (their CPUs are alike), at
                    // most 64, evenly spaced.
                    let mut s: Vec<usize> = Vec::new();
                    let mut seen = vec![false; n];
                    for &i in members {
                        let sg = d.group_of(l - 1, i);
                        if !seen[sg] {
                            seen[sg] = true;
                            s.push(i);
                        }
                    }
                    let step = s.len().div_ceil(64);
                    s.into_iter().step_by(step.max(1)).collect()
                };
                let Some((w, s, chosen)) = self.grow(members, &fit, &seeds) else {
                    continue;
                };
                let free_here = members.len();
                let tol = (w * 0.02).max(if d.cost_is_ns() { 0.5 } else { 0.0 });
                let better = match &best {
                    None => true,
                    Some((bw, bs, bf, _, _)) => {
                        if w < bw - tol {
                            true
                        } else if w > bw + tol {
                            false
                        } else {
                            // Equal cost: best-fit, then the lower mean.
                            free_here < *bf || (free_here == *bf && s < *bs)
                        }
                    }
                };
                if better {
                    best = Some((w, s, free_here, *g, chosen));
                }
            }
            if let Some((_, _, free_here, g, chosen)) = best {
                if cands.len() > 1 {
                    notes.push(format!(
                        "{} of the {} {} groups could hold {k}; chose the cheapest, preferring the fullest ({free_here} usable CPUs left in it)",
                        cands.len(),
                        level.groups.len(),
                        level.name()
                    ));
                }
                return (chosen, l, vec![level.groups[g].clone()]);
            }
        }
        // Unreachable when capacity was checked: the machine level holds everything.
        let all: Vec<usize> = (0..n).filter(|&i| usable[i]).take(k).collect();
        let last = d.levels().len() - 1;
        (all, last, vec![d.levels()[last].groups[0].clone()])
    }

    /// One CPU (or one core, with prefer-siblings) per group at the coarsest level with
    /// enough usable groups, the groups taken round-robin over their parents; completed
    /// from the rest when a group falls short.
    pub(super) fn spread(&self, notes: &mut Vec<String>) -> (Vec<usize>, usize, Vec<CpuSet>) {
        let d = self.d;
        // With prefer-siblings each domain gets a whole core: half as many domains.
        let per = if self.req.smt == SmtPolicy::PreferSiblings && d.smt_level().is_some() {
            2
        } else {
            1
        };
        let domains_needed = self.k.div_ceil(per);
        let Some(l) = self.spread_level(domains_needed) else {
            return self.one_per_core_then_siblings(notes);
        };
        let picked = self.groups_round_robin(l, domains_needed);
        let (mut chosen, mut used_cores) = self.one_per_group(l, &picked, per);
        if chosen.len() < self.k {
            self.complete_from_the_rest(&mut chosen, &mut used_cores, per);
            notes.push("some picked groups had too few free CPUs; completed from the rest".into());
        }
        chosen.truncate(self.k);
        chosen.sort_unstable();
        let lvl = &d.levels()[l];
        notes.push(format!(
            "{} is the coarsest level with at least {domains_needed} usable groups ({} in all); one {} per group",
            lvl.name(),
            lvl.groups.len(),
            if per == 2 { "core (both siblings)" } else { "CPU" }
        ));
        let doms = picked.iter().map(|&g| lvl.groups[g].clone()).collect();
        (chosen, l, doms)
    }

    /// The coarsest level (below the machine) with enough groups holding a usable CPU.
    fn spread_level(&self, domains_needed: usize) -> Option<usize> {
        let (d, usable) = (self.d, &self.usable);
        let n = d.cpus().len();
        let levels = d.levels().len();
        (0..levels.saturating_sub(1)).rev().find(|&l| {
            let mut gs: Vec<usize> = (0..n)
                .filter(|&i| usable[i])
                .map(|i| d.group_of(l, i))
                .collect();
            gs.sort_unstable();
            gs.dedup();
            gs.len() >= domains_needed
        })
    }

    /// Fewer usable cores than CPUs wanted: whole cores first, then their siblings.
    /// Balanced over the coarsest groups: the k-th thread of each core, taken
    /// round-robin across sockets.
    fn one_per_core_then_siblings(
        &self,
        notes: &mut Vec<String>,
    ) -> (Vec<usize>, usize, Vec<CpuSet>) {
        let (d, usable) = (self.d, &self.usable);
        let n = d.cpus().len();
        let levels = d.levels().len();
        let rank: Vec<usize> = (0..n)
            .map(|i| {
                self.siblings(i)
                    .iter()
                    .filter(|&&s| s < i && usable[s])
                    .count()
            })
            .collect();
        let top = levels.checked_sub(2);
        let parent = |i: usize| top.map(|t| d.group_of(t, i)).unwrap_or(0);
        let mut order: Vec<usize> = (0..n).filter(|&i| usable[i]).collect();
        let mut seen: std::collections::BTreeMap<(usize, usize), usize> = Default::default();
        let mut turn = vec![0usize; n];
        for &i in &order {
            let t = seen.entry((rank[i], parent(i))).or_insert(0);
            turn[i] = *t;
            *t += 1;
        }
        order.sort_by_key(|&i| (rank[i], turn[i], parent(i), i));
        let mut chosen: Vec<usize> = order.into_iter().take(self.k).collect();
        chosen.sort_unstable();
        notes.push("fewer usable cores than CPUs wanted: one CPU per core, then siblings".into());
        let last = levels - 1;
        (chosen, last, vec![d.levels()[last].groups[0].clone()])
    }

    /// `domains_needed` groups of level `l`: parents with the most free CPUs first, and
    /// within each parent the freest group, taken in turn from each parent.
    fn groups_round_robin(&self, l: usize, domains_needed: usize) -> Vec<usize> {
        let (d, usable) = (self.d, &self.usable);
        let n = d.cpus().len();
        let levels = d.levels().len();
        let parent = |i: usize| d.group_of((l + 1).min(levels - 1), i);
        // Groups with their free counts, bucketed by parent.
        let mut groups: Vec<(usize, usize, usize)> = Vec::new(); // (parent, group, free)
        for g in 0..d.levels()[l].groups.len() {
            let members: Vec<usize> = (0..n)
                .filter(|&i| d.group_of(l, i) == g && usable[i])
                .collect();
            if let Some(&first) = members.first() {
                groups.push((parent(first), g, members.len()));
            }
        }
        let mut parents: Vec<(usize, usize)> = Vec::new(); // (parent, free)
        for &(p, _, f) in &groups {
            match parents.iter_mut().find(|x| x.0 == p) {
                Some(x) => x.1 += f,
                None => parents.push((p, f)),
            }
        }
        parents.sort_by_key(|&(p, f)| (std::cmp::Reverse(f), p));
        let mut queues: Vec<Vec<(usize, usize)>> = parents
            .iter()
            .map(|&(p, _)| {
                let mut q: Vec<(usize, usize)> = groups
                    .iter()
                    .filter(|g| g.0 == p)
                    .map(|g| (g.1, g.2))
                    .collect();
                q.sort_by_key(|&(g, f)| (std::cmp::Reverse(f), g));
                q.reverse(); // pop from the end
                q
            })
            .collect();
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < domains_needed {
            let mut any = false;
            for q in queues.iter_mut() {
                if picked.len() == domains_needed {
                    break;
                }
                if let Some((g, _)) = q.pop() {
                    picked.push(g);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        picked
    }

    /// Within each picked group of level `l`: a CPU on the freest core, lowest id (and
    /// its sibling when `per` is 2). Returns the CPUs and the cores they are on.
    fn one_per_group(&self, l: usize, picked: &[usize], per: usize) -> (Vec<usize>, Vec<usize>) {
        let (d, usable) = (self.d, &self.usable);
        let n = d.cpus().len();
        let mut chosen: Vec<usize> = Vec::new();
        let mut used_cores: Vec<usize> = Vec::new();
        for &g in picked {
            let mut members: Vec<usize> = (0..n)
                .filter(|&i| {
                    d.group_of(l, i) == g && usable[i] && !used_cores.contains(&self.core(i))
                })
                .collect();
            members.sort_by_key(|&i| {
                let free_sibs = self.siblings(i).iter().filter(|&&s| usable[s]).count();
                (std::cmp::Reverse(free_sibs), i)
            });
            let Some(&i) = members.first() else { continue };
            chosen.push(i);
            used_cores.push(self.core(i));
            if per == 2 && chosen.len() < self.k {
                if let Some(&s) = self.siblings(i).iter().find(|&&s| usable[s]) {
                    chosen.push(s);
                }
            }
        }
        (chosen, used_cores)
    }

    /// A picked core whose sibling is taken, or too few free CPUs in the picked groups:
    /// complete with siblings of the chosen (prefer-siblings), then CPUs on cores not
    /// yet used, then (unless smt = avoid) any free CPU.
    fn complete_from_the_rest(
        &self,
        chosen: &mut Vec<usize>,
        used_cores: &mut Vec<usize>,
        per: usize,
    ) {
        let n = self.d.cpus().len();
        let mut rest: Vec<usize> = (0..n)
            .filter(|&i| self.usable[i] && !chosen.contains(&i))
            .collect();
        rest.sort_by_key(|&i| {
            let sibling_of_chosen = per == 2 && used_cores.contains(&self.core(i));
            (!sibling_of_chosen, used_cores.contains(&self.core(i)), i)
        });
        for i in rest {
            if chosen.len() == self.k {
                break;
            }
            if self.req.smt == SmtPolicy::Avoid && used_cores.contains(&self.core(i)) {
                continue;
            }
            chosen.push(i);
            used_cores.push(self.core(i));
        }
    }
}
