//! Placement: pure logic from latency domains and a request to a CPU set.
//!
//! [`place`] takes [`Domains`] (from a matrix, from sysfs, or both reconciled), a
//! [`Request`] and the CPUs still available, and returns the chosen CPUs with their
//! worst and mean pairwise latency and an [`Explanation`]: which domain, its cost, and
//! what the autopilot choice (the K lowest-numbered CPUs) would cost.
//!
//! - `compact` finds the finest level with a group able to hold the request, runs a
//!   greedy min-max selection from every seed inside each such group, and keeps the
//!   cheapest; among equal costs the group with the fewest free CPUs wins (best-fit:
//!   big free domains stay intact, as in the kubelet's CPU manager).
//! - `spread` takes one CPU per group at the coarsest level that has enough groups,
//!   round-robin over their parents.
//! - SMT: `avoid` never takes two CPUs of one core; `prefer-siblings` fills whole cores.
//!   `exclusive` takes only fully free cores and reserves their idle siblings.
//!
//! - slots (`slots`): one set of CPUs per thread of a `[[rule.threads]]` entry,
//!   planned together so that `policy` and `smt` hold across the slots.
//!
//! Deterministic: every tie is broken by CPU or group order, never by a hash.
//! Must not touch: the OS (no files, no syscalls, no clocks).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::domains::{Domains, Trust};

mod slots;
pub use slots::{slots, Slot, SlotPlanner, MAX_SLOTS};

/// How to choose CPUs for a request of `count` CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Minimise the worst latency among the chosen CPUs: threads that talk.
    #[default]
    Compact,
    /// One CPU per domain at the coarsest level with enough domains: independent workers.
    Spread,
}

/// What to do with SMT siblings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SmtPolicy {
    /// Siblings are ordinary candidates.
    #[default]
    Allow,
    /// Never choose two siblings of one core.
    Avoid,
    /// Fill whole cores, siblings first.
    PreferSiblings,
}

/// An unknown policy or SMT word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}: expected one of {expected}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub given: String,
    pub expected: &'static str,
}

impl Policy {
    pub const fn as_str(self) -> &'static str {
        match self {
            Policy::Compact => "compact",
            Policy::Spread => "spread",
        }
    }
}

impl SmtPolicy {
    pub const fn as_str(self) -> &'static str {
        match self {
            SmtPolicy::Allow => "allow",
            SmtPolicy::Avoid => "avoid",
            SmtPolicy::PreferSiblings => "prefer-siblings",
        }
    }
}

impl FromStr for Policy {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "compact" => Ok(Policy::Compact),
            "spread" => Ok(Policy::Spread),
            _ => Err(UnknownWord {
                what: "policy",
                given: s.to_string(),
                expected: "compact, spread",
            }),
        }
    }
}

impl FromStr for SmtPolicy {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "allow" => Ok(SmtPolicy::Allow),
            "avoid" => Ok(SmtPolicy::Avoid),
            "prefer-siblings" => Ok(SmtPolicy::PreferSiblings),
            _ => Err(UnknownWord {
                what: "smt policy",
                given: s.to_string(),
                expected: "allow, avoid, prefer-siblings",
            }),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for SmtPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to place.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// CPUs wanted (ignored when `cpus` is given).
    pub count: usize,
    pub policy: Policy,
    pub smt: SmtPolicy,
    /// CPUs never to choose (housekeeping, isolated, another rule's).
    pub exclude: CpuSet,
    /// Take whole free cores only, and reserve the idle siblings of the chosen CPUs.
    pub exclusive: bool,
    /// An explicit list: validated and passed through.
    pub cpus: Option<CpuSet>,
}

/// Pairwise cost of a CPU set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Worst one-way latency between two chosen CPUs (ns); `None` without a trusted
    /// matrix, or for a single CPU.
    pub worst_ns: Option<f64>,
    /// Mean over all pairs (ns).
    pub mean_ns: Option<f64>,
    /// The coarsest level any two chosen CPUs only share (e.g. `llc`, `machine`).
    pub worst_level: String,
}

/// Why these CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub policy: Policy,
    pub smt: SmtPolicy,
    /// Where the costs come from.
    pub trust: Trust,
    /// The level the choice was made at.
    pub level: String,
    /// The level's typical latency.
    pub level_latency_ns: Option<f64>,
    /// The group(s) of that level the CPUs came from.
    pub domains: Vec<CpuSet>,
    /// The cost of the chosen set.
    pub cost: Cost,
    /// The autopilot choice, the K lowest-numbered CPUs, and its cost.
    pub autopilot: Option<(CpuSet, Cost)>,
    /// Further reasons, in words.
    pub notes: Vec<String>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The CPUs to pin to.
    pub cpus: CpuSet,
    /// `cpus` plus idle siblings held back for an exclusive request.
    pub reserved: CpuSet,
    pub explanation: Explanation,
}

/// A request that cannot be satisfied; each says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("the explicit CPU list is empty")]
    EmptyList,
    #[error("asked for {wanted} CPUs but only {usable} are usable ({why})")]
    NotEnough {
        wanted: usize,
        usable: usize,
        why: String,
    },
    #[error("CPUs {cpus} are not online CPUs of this machine ({online})")]
    UnknownCpus { cpus: CpuSet, online: CpuSet },
    #[error("CPUs {cpus} are excluded or already taken")]
    Unavailable { cpus: CpuSet },
    #[error("CPUs {a} and {b} are SMT siblings but the request says smt = avoid")]
    SiblingsGiven { a: u32, b: u32 },
    #[error("CPU {cpu} shares its core with CPUs that are not free ({busy}), but the request is exclusive")]
    CoreNotFree { cpu: u32, busy: CpuSet },
    /// `core-type`, `prefer` or `near` (see `shape`) refused the request.
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

/// A request shaped by `core-type`, `prefer` or `near` (see `shape`) that cannot be met;
/// each says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The kind asked for cannot hold the request; it is not widened.
    #[error("asked for {wanted} {kind} CPUs but only {usable} are usable ({why}); core-type is never widened")]
    KindTooSmall {
        kind: &'static str,
        wanted: usize,
        usable: usize,
        why: String,
    },
    /// The device could not be resolved.
    #[error("near {device:?}: {why}")]
    Device { device: String, why: String },
    /// Shaping keys reached a chooser without the machine's facts.
    #[error("{keys}: this planner has no topology facts to honour them")]
    NoFacts { keys: String },
}

/// Chooses CPUs for `req` among `available` (the CPUs not taken by others).
pub fn place(d: &Domains, req: &Request, available: &CpuSet) -> Result<Placement, PlacementError> {
    let n = d.cpus().len();
    let online: CpuSet = d.cpus().iter().copied().collect();
    let free: Vec<bool> = d
        .cpus()
        .iter()
        .map(|&c| available.contains(c) && !req.exclude.contains(c))
        .collect();
    let cores = Cores::new(d);

    if let Some(list) = &req.cpus {
        return explicit(d, req, list, &online, &free, &cores);
    }
    let k = req.count;
    if k == 0 {
        return Err(PlacementError::ZeroCount);
    }
    // Which CPUs may be chosen at all.
    let usable: Vec<bool> = (0..n)
        .map(|i| free[i] && (!req.exclusive || cores.siblings(i).iter().all(|&s| free[s])))
        .collect();
    let chooser = Chooser {
        d,
        req,
        k,
        usable,
        cores: &cores,
    };
    let total = chooser.capacity(0..n);
    if total < k {
        let why = match (req.smt, req.exclusive) {
            (SmtPolicy::Avoid, _) => {
                "one CPU per core with smt = avoid, after exclusions".to_string()
            }
            (_, true) => "whole free cores only, the request is exclusive".to_string(),
            _ => format!("{} online, the rest excluded or taken", n),
        };
        return Err(PlacementError::NotEnough {
            wanted: k,
            usable: total,
            why,
        });
    }

    let mut notes = Vec::new();
    let (chosen, level, domains) = match req.policy {
        Policy::Compact => chooser.compact(&mut notes),
        Policy::Spread => chooser.spread(&mut notes),
    };
    let cpus: CpuSet = chosen.iter().map(|&i| d.cpus()[i]).collect();
    let mut reserved = cpus.clone();
    if req.exclusive {
        for &i in &chosen {
            reserved.extend(cores.siblings(i).into_iter().map(|s| d.cpus()[s]));
        }
        if reserved != cpus {
            notes.push(format!(
                "exclusive: idle siblings {} are reserved with the chosen CPUs",
                reserved.difference(&cpus)
            ));
        }
    }
    let explanation = explain(d, req, &chosen, level, domains, notes);
    Ok(Placement {
        cpus,
        reserved,
        explanation,
    })
}

/// Worst and mean pairwise cost of a set of indices.
pub fn set_cost(d: &Domains, set: &[usize]) -> Cost {
    let mut worst = 0.0f64;
    let mut sum = 0.0;
    let mut pairs = 0usize;
    let mut worst_level = 0usize;
    for (a, &i) in set.iter().enumerate() {
        for &j in &set[..a] {
            let c = d.cost(i, j);
            worst = worst.max(c);
            sum += c;
            pairs += 1;
            worst_level = worst_level.max(d.shared_level(i, j));
        }
    }
    let ns = d.cost_is_ns() && pairs > 0;
    Cost {
        worst_ns: ns.then(|| round1(worst)),
        mean_ns: ns.then(|| round1(sum / pairs as f64)),
        worst_level: if pairs == 0 {
            "none".to_string()
        } else {
            d.levels()[worst_level].name()
        },
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn explain(
    d: &Domains,
    req: &Request,
    chosen: &[usize],
    level: usize,
    domains: Vec<CpuSet>,
    notes: Vec<String>,
) -> Explanation {
    let k = chosen.len();
    let autopilot = (k <= d.cpus().len()).then(|| {
        let idx: Vec<usize> = (0..k).collect();
        (
            idx.iter().map(|&i| d.cpus()[i]).collect::<CpuSet>(),
            set_cost(d, &idx),
        )
    });
    let lvl = &d.levels()[level];
    Explanation {
        policy: req.policy,
        smt: req.smt,
        trust: d.trust(),
        level: lvl.name(),
        level_latency_ns: lvl.latency_ns,
        domains,
        cost: set_cost(d, chosen),
        autopilot,
        notes,
    }
}

fn explicit(
    d: &Domains,
    req: &Request,
    list: &CpuSet,
    online: &CpuSet,
    free: &[bool],
    cores: &Cores,
) -> Result<Placement, PlacementError> {
    if list.is_empty() {
        return Err(PlacementError::EmptyList);
    }
    let unknown = list.difference(online);
    if !unknown.is_empty() {
        return Err(PlacementError::UnknownCpus {
            cpus: unknown,
            online: online.clone(),
        });
    }
    let idx: Vec<usize> = list.iter().filter_map(|c| d.index_of(c)).collect();
    let busy: CpuSet = idx
        .iter()
        .filter(|&&i| !free[i])
        .map(|&i| d.cpus()[i])
        .collect();
    if !busy.is_empty() {
        return Err(PlacementError::Unavailable { cpus: busy });
    }
    let mut reserved = list.clone();
    for &i in &idx {
        let sib = cores.siblings(i);
        if req.smt == SmtPolicy::Avoid {
            if let Some(&s) = sib.iter().find(|s| idx.contains(s)) {
                return Err(PlacementError::SiblingsGiven {
                    a: d.cpus()[i.min(s)],
                    b: d.cpus()[i.max(s)],
                });
            }
        }
        if req.exclusive {
            let not_free: CpuSet = sib
                .iter()
                .filter(|&&s| !free[s])
                .map(|&s| d.cpus()[s])
                .collect();
            if !not_free.is_empty() {
                return Err(PlacementError::CoreNotFree {
                    cpu: d.cpus()[i],
                    busy: not_free,
                });
            }
            reserved.extend(sib.iter().map(|&s| d.cpus()[s]));
        }
    }
    let level = (0..d.levels().len())
        .find(|&l| {
            idx.iter()
                .all(|&i| d.group_of(l, i) == d.group_of(l, idx[0]))
        })
        .unwrap_or(d.levels().len() - 1);
    let group = d.levels()[level].groups[d.group_of(level, idx[0])].clone();
    let explanation = explain(
        d,
        req,
        &idx,
        level,
        vec![group],
        vec!["explicit CPU list, validated and used as given".to_string()],
    );
    Ok(Placement {
        cpus: list.clone(),
        reserved,
        explanation,
    })
}

/// Cores (SMT groups) and siblings by CPU index, worked out once: the choosers ask for
/// them often.
struct Cores {
    core_of: Vec<usize>,
    members: Vec<Vec<usize>>,
}

impl Cores {
    fn new(d: &Domains) -> Self {
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
    fn siblings(&self, i: usize) -> Vec<usize> {
        self.members[self.core_of[i]]
            .iter()
            .copied()
            .filter(|&k| k != i)
            .collect()
    }
}

/// What `compact` and `spread` choose from: `k` CPUs for `req` among the `usable`
/// indices of `d`.
struct Chooser<'a> {
    d: &'a Domains,
    req: &'a Request,
    k: usize,
    usable: Vec<bool>,
    cores: &'a Cores,
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
    fn capacity(&self, members: impl Iterator<Item = usize>) -> usize {
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

    fn compact(&self, notes: &mut Vec<String>) -> (Vec<usize>, usize, Vec<CpuSet>) {
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

    fn spread(&self, notes: &mut Vec<String>) -> (Vec<usize>, usize, Vec<CpuSet>) {
        let (d, req, k, usable) = (self.d, self.req, self.k, &self.usable);
        let n = d.cpus().len();
        let levels = d.levels().len();
        // With prefer-siblings each domain gets a whole core: half as many domains.
        let per = if req.smt == SmtPolicy::PreferSiblings && d.smt_level().is_some() {
            2
        } else {
            1
        };
        let domains_needed = k.div_ceil(per);
        // Coarsest level (below the machine) with enough groups holding a usable CPU.
        let mut level = None;
        for l in (0..levels.saturating_sub(1)).rev() {
            let mut gs: Vec<usize> = (0..n)
                .filter(|&i| usable[i])
                .map(|i| d.group_of(l, i))
                .collect();
            gs.sort_unstable();
            gs.dedup();
            if gs.len() >= domains_needed {
                level = Some(l);
                break;
            }
        }
        let mut chosen: Vec<usize> = Vec::new();
        let Some(l) = level else {
            // Fewer usable cores than CPUs wanted: whole cores first, then their siblings.
            // Balanced over the coarsest groups: the k-th thread of each core, taken
            // round-robin across sockets.
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
            chosen.extend(order.into_iter().take(k));
            chosen.sort_unstable();
            notes.push(
                "fewer usable cores than CPUs wanted: one CPU per core, then siblings".into(),
            );
            let last = levels - 1;
            return (chosen, last, vec![d.levels()[last].groups[0].clone()]);
        };
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
        let mut used_cores: Vec<usize> = Vec::new();
        for &g in &picked {
            // Within the group: a CPU on the freest core, lowest id.
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
            if per == 2 && chosen.len() < k {
                if let Some(&s) = self.siblings(i).iter().find(|&&s| usable[s]) {
                    chosen.push(s);
                }
            }
        }
        if chosen.len() < k {
            // A picked core whose sibling is taken, or too few free CPUs in the picked
            // groups: complete with siblings of the chosen (prefer-siblings), then CPUs on
            // cores not yet used, then (unless smt = avoid) any free CPU.
            let mut rest: Vec<usize> = (0..n)
                .filter(|&i| usable[i] && !chosen.contains(&i))
                .collect();
            rest.sort_by_key(|&i| {
                let sibling_of_chosen = per == 2 && used_cores.contains(&self.core(i));
                (!sibling_of_chosen, used_cores.contains(&self.core(i)), i)
            });
            for i in rest {
                if chosen.len() == k {
                    break;
                }
                if req.smt == SmtPolicy::Avoid && used_cores.contains(&self.core(i)) {
                    continue;
                }
                chosen.push(i);
                used_cores.push(self.core(i));
            }
            notes.push("some picked groups had too few free CPUs; completed from the rest".into());
        }
        chosen.truncate(k);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::{Layout, LevelKind};

    /// 2 packages x 2 cores x 2 threads, siblings adjacent (QEMU's numbering).
    fn qemu() -> Domains {
        let sets = |s: &str| -> Vec<CpuSet> { s.split(' ').map(|g| g.parse().unwrap()).collect() };
        Domains::from_layout(&Layout {
            cpus: "0-7".parse().unwrap(),
            levels: vec![
                (LevelKind::Smt, sets("0-1 2-3 4-5 6-7")),
                (LevelKind::Package, sets("0-3 4-7")),
            ],
        })
        .unwrap()
    }

    #[test]
    fn best_fit_keeps_the_free_package_whole() {
        let d = qemu();
        let avail: CpuSet = "1-7".parse().unwrap();
        let req = Request {
            count: 2,
            smt: SmtPolicy::Avoid,
            ..Default::default()
        };
        let p = place(&d, &req, &avail).unwrap();
        assert_eq!(p.cpus.to_string(), "1-2");
        assert_eq!(p.explanation.level, "package");
        assert_eq!(p.explanation.cost.worst_ns, None);
        assert_eq!(p.explanation.cost.worst_level, "package");
    }

    #[test]
    fn exclusive_takes_whole_free_cores_and_reserves_siblings() {
        let d = qemu();
        let avail: CpuSet = "1-7".parse().unwrap();
        let req = Request {
            count: 1,
            exclusive: true,
            ..Default::default()
        };
        let p = place(&d, &req, &avail).unwrap();
        assert_eq!(p.cpus.to_string(), "2");
        assert_eq!(p.reserved.to_string(), "2-3");
        let req = Request {
            count: 7,
            exclusive: true,
            ..Default::default()
        };
        assert_eq!(
            place(&d, &req, &avail).unwrap_err().to_string(),
            "asked for 7 CPUs but only 6 are usable (whole free cores only, the request is exclusive)"
        );
    }

    #[test]
    fn spread_goes_one_per_package_then_one_per_core() {
        let d = qemu();
        let all: CpuSet = "0-7".parse().unwrap();
        let spread = |count| Request {
            count,
            policy: Policy::Spread,
            ..Default::default()
        };
        assert_eq!(place(&d, &spread(2), &all).unwrap().cpus.to_string(), "0,4");
        assert_eq!(
            place(&d, &spread(4), &all).unwrap().cpus.to_string(),
            "0,2,4,6"
        );
        assert_eq!(
            place(&d, &spread(6), &all).unwrap().cpus.to_string(),
            "0-2,4-6"
        );
    }

    #[test]
    fn words_round_trip() {
        for p in [Policy::Compact, Policy::Spread] {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
        }
        for s in [
            SmtPolicy::Allow,
            SmtPolicy::Avoid,
            SmtPolicy::PreferSiblings,
        ] {
            assert_eq!(s.to_string().parse::<SmtPolicy>().unwrap(), s);
        }
        let e = "tight".parse::<Policy>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown policy \"tight\": expected one of compact, spread"
        );
    }
}
