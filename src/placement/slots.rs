//! Slots: the CPUs of the threads of one non-shared `[[rule.threads]]` entry, planned
//! together so that the request's `policy` and `smt` hold across slots, not only inside
//! each one.
//!
//! Slot 0 is [`place`]'s own choice of `count` CPUs. Each next slot is chosen with the
//! slots before it in view, one CPU at a time:
//! - `compact`: the CPU that keeps the worst pair of all slots so far lowest (then the
//!   lowest sum of latencies to them, then the core with the fewest free CPUs, then the
//!   lowest number): slots fill a cache group, then a socket, before leaving it;
//! - `spread`: the CPU farthest from the slots so far (the highest minimum, then the
//!   highest sum, then the lowest number): slots alternate between the coarsest groups;
//! - `smt = avoid`: no two slots share a core (a slot spends its whole cores);
//!   `prefer-siblings`: a slot fills the core of an earlier slot first;
//! - `exclusive`: only whole free cores, whose idle siblings the slot reserves.
//!
//! Slots end when no CPU is left for one more; threads past the last slot wrap around
//! (the planner's and the manager's concern). Pure, like the rest of `placement`.

use super::{place, PlacementError, Policy, Request, SmtPolicy};
use crate::cpuset::CpuSet;
use crate::domains::Domains;

/// Most slots one entry is given.
pub const MAX_SLOTS: usize = 4096;

/// One thread's CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub cpus: CpuSet,
    /// `cpus` and the idle siblings an exclusive request keeps free.
    pub reserved: CpuSet,
}

/// Every slot `req` (`count` CPUs per thread) gets among `available`, in the order
/// threads take them. The error is slot 0's: not even one thread fits.
pub fn slots(d: &Domains, req: &Request, available: &CpuSet) -> Result<Vec<Slot>, PlacementError> {
    let mut left = available.difference(&req.exclude);
    let mut out: Vec<Slot> = Vec::new();
    while out.len() < MAX_SLOTS {
        let next = if out.is_empty() {
            let p = place(d, req, &left)?;
            Slot {
                cpus: p.cpus,
                reserved: p.reserved,
            }
        } else {
            match next_slot(d, req, &out, &left) {
                Some(s) => s,
                None => break,
            }
        };
        left = left.difference(&spent(d, req, &next));
        out.push(next);
    }
    Ok(out)
}

/// The CPUs no later slot of the same entry may take after `slot`: its reserved CPUs,
/// and under `smt = avoid` its whole cores.
pub fn spent(d: &Domains, req: &Request, slot: &Slot) -> CpuSet {
    let mut out = slot.reserved.union(&slot.cpus);
    if req.smt == SmtPolicy::Avoid {
        if let Some(l) = d.smt_level() {
            for c in slot.cpus.iter() {
                if let Some(i) = d.index_of(c) {
                    out.extend(d.levels()[l].groups[d.group_of(l, i)].iter());
                }
            }
        }
    }
    out
}

/// The slot after `prior` among `left` (CPUs no earlier slot spent), or `None` when
/// fewer than `count` CPUs fit.
pub fn next_slot(d: &Domains, req: &Request, prior: &[Slot], left: &CpuSet) -> Option<Slot> {
    let n = d.cpus().len();
    let smt = d.smt_level();
    let core = |i: usize| smt.map_or(i, |l| d.group_of(l, i));
    let members = |i: usize| -> Vec<usize> {
        match smt {
            Some(l) => d.levels()[l].groups[d.group_of(l, i)]
                .iter()
                .filter_map(|c| d.index_of(c))
                .collect(),
            None => vec![i],
        }
    };
    let free: Vec<bool> = d
        .cpus()
        .iter()
        .map(|&c| left.contains(c) && !req.exclude.contains(c))
        .collect();
    let usable: Vec<bool> = (0..n)
        .map(|i| free[i] && (!req.exclusive || members(i).iter().all(|&s| free[s])))
        .collect();
    let mut free_in_core = vec![0usize; n];
    for i in (0..n).filter(|&i| usable[i]) {
        free_in_core[core(i)] += 1;
    }
    let mut chosen: Vec<usize> = prior
        .iter()
        .flat_map(|s| s.cpus.iter())
        .filter_map(|c| d.index_of(c))
        .collect();
    let mut core_taken = vec![false; n];
    for &i in &chosen {
        core_taken[core(i)] = true;
    }
    // Per candidate: worst, least and summed cost to every CPU chosen so far.
    let mut maxd = vec![0.0f64; n];
    let mut mind = vec![f64::INFINITY; n];
    let mut sumd = vec![0.0f64; n];
    let note = |i: usize, maxd: &mut [f64], mind: &mut [f64], sumd: &mut [f64]| {
        for q in 0..n {
            let c = d.cost(i, q);
            maxd[q] = maxd[q].max(c);
            mind[q] = mind[q].min(c);
            sumd[q] += c;
        }
    };
    let mut worst = 0.0f64;
    for (a, &i) in chosen.iter().enumerate() {
        for &j in &chosen[..a] {
            worst = worst.max(d.cost(i, j));
        }
        note(i, &mut maxd, &mut mind, &mut sumd);
    }
    let mut taken = vec![false; n];
    let mut mine: Vec<usize> = Vec::with_capacity(req.count);
    while mine.len() < req.count {
        let mut best: Option<(usize, (u8, f64, f64, usize, usize))> = None;
        for q in 0..n {
            if !usable[q] || taken[q] {
                continue;
            }
            let sibling = core_taken[core(q)];
            if req.smt == SmtPolicy::Avoid && sibling {
                continue;
            }
            // prefer-siblings: a core an earlier CPU started comes first.
            let rank = u8::from(req.smt == SmtPolicy::PreferSiblings && !sibling);
            let key = match req.policy {
                Policy::Compact => (rank, worst.max(maxd[q]), sumd[q], free_in_core[core(q)], q),
                Policy::Spread => (rank, -mind[q], -sumd[q], 0, q),
            };
            if best.as_ref().is_none_or(|(_, b)| key < *b) {
                best = Some((q, key));
            }
        }
        let (q, _) = best?;
        worst = worst.max(maxd[q]);
        taken[q] = true;
        core_taken[core(q)] = true;
        mine.push(q);
        chosen.push(q);
        note(q, &mut maxd, &mut mind, &mut sumd);
    }
    let cpus: CpuSet = mine.iter().map(|&i| d.cpus()[i]).collect();
    let mut reserved = cpus.clone();
    if req.exclusive {
        for &i in &mine {
            reserved.extend(members(i).into_iter().map(|s| d.cpus()[s]));
        }
    }
    Some(Slot { cpus, reserved })
}
