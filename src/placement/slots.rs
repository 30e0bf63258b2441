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
//! (the planner's and the manager's concern). The costs to the slots so far are kept
//! as slots are added ([`SlotPlanner`]), so planning every slot of an n-CPU machine is
//! O(n²). Pure, like the rest of `placement`.

use super::place::place;
use super::request::{PlacementError, Policy, Request, SmtPolicy};
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
    let mut planner = SlotPlanner::new(d, req);
    let mut left = available.difference(&req.exclude);
    while planner.slots().len() < MAX_SLOTS {
        let next = if planner.slots().is_empty() {
            let p = place(d, req, &left)?;
            Slot {
                cpus: p.cpus,
                reserved: p.reserved,
            }
        } else {
            match planner.next(&left) {
                Some(s) => s,
                None => break,
            }
        };
        left = left.difference(&planner.spent(&next));
        planner.push(next);
    }
    Ok(planner.into_slots())
}

/// The slots of one entry so far, with each CPU's worst, least and summed cost to
/// them: what choosing the next slot needs.
pub struct SlotPlanner<'a> {
    d: &'a Domains,
    req: &'a Request,
    /// CPU index → its core (itself without SMT).
    core: Vec<usize>,
    /// Core → its CPU indices.
    members: Vec<Vec<usize>>,
    maxd: Vec<f64>,
    mind: Vec<f64>,
    sumd: Vec<f64>,
    /// The worst pair among the slots' CPUs.
    worst: f64,
    core_taken: Vec<bool>,
    slots: Vec<Slot>,
}

impl<'a> SlotPlanner<'a> {
    pub fn new(d: &'a Domains, req: &'a Request) -> SlotPlanner<'a> {
        let n = d.cpus().len();
        let smt = d.smt_level();
        let core: Vec<usize> = (0..n)
            .map(|i| smt.map_or(i, |l| d.group_of(l, i)))
            .collect();
        let mut members = vec![Vec::new(); n];
        for (i, &c) in core.iter().enumerate() {
            members[c].push(i);
        }
        SlotPlanner {
            d,
            req,
            core,
            members,
            maxd: vec![0.0; n],
            mind: vec![f64::INFINITY; n],
            sumd: vec![0.0; n],
            worst: 0.0,
            core_taken: vec![false; n],
            slots: Vec::new(),
        }
    }

    /// The slots so far, slot 0 first.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub fn into_slots(self) -> Vec<Slot> {
        self.slots
    }

    /// Adds `slot` (from [`SlotPlanner::next`], or slot 0 from wherever it came).
    pub fn push(&mut self, slot: Slot) {
        for c in slot.cpus.iter() {
            let Some(i) = self.d.index_of(c) else {
                continue;
            };
            self.worst = self.worst.max(self.maxd[i]);
            self.core_taken[self.core[i]] = true;
            note(self.d, i, &mut self.maxd, &mut self.mind, &mut self.sumd);
        }
        self.slots.push(slot);
    }

    /// The CPUs no later slot may take after `slot`: its reserved CPUs, and under
    /// `smt = avoid` its whole cores.
    pub fn spent(&self, slot: &Slot) -> CpuSet {
        let mut out = slot.reserved.union(&slot.cpus);
        if self.req.smt == SmtPolicy::Avoid {
            for c in slot.cpus.iter() {
                if let Some(i) = self.d.index_of(c) {
                    out.extend(self.members[self.core[i]].iter().map(|&s| self.d.cpus()[s]));
                }
            }
        }
        out
    }

    /// The next slot among `left` (CPUs no earlier slot spent), or `None` when fewer
    /// than `count` CPUs fit.
    pub fn next(&self, left: &CpuSet) -> Option<Slot> {
        let (d, req) = (self.d, self.req);
        let n = d.cpus().len();
        let free: Vec<bool> = d
            .cpus()
            .iter()
            .map(|&c| left.contains(c) && !req.exclude.contains(c))
            .collect();
        let usable: Vec<bool> = (0..n)
            .map(|i| {
                free[i] && (!req.exclusive || self.members[self.core[i]].iter().all(|&s| free[s]))
            })
            .collect();
        let mut free_in_core = vec![0usize; n];
        for i in (0..n).filter(|&i| usable[i]) {
            free_in_core[self.core[i]] += 1;
        }
        // Inside the slot its own CPUs count too: copies, for a slot of several CPUs.
        let (mut maxd, mut mind, mut sumd) =
            (self.maxd.clone(), self.mind.clone(), self.sumd.clone());
        let mut worst = self.worst;
        let mut core_taken = self.core_taken.clone();
        let mut taken = vec![false; n];
        let mut mine: Vec<usize> = Vec::with_capacity(req.count);
        while mine.len() < req.count {
            let mut best: Option<(usize, CandidateKey)> = None;
            for q in 0..n {
                if !usable[q] || taken[q] {
                    continue;
                }
                let sibling = core_taken[self.core[q]];
                if req.smt == SmtPolicy::Avoid && sibling {
                    continue;
                }
                // prefer-siblings: a core an earlier CPU started comes first.
                let rank = u8::from(req.smt == SmtPolicy::PreferSiblings && !sibling);
                let key = match req.policy {
                    Policy::Compact => (
                        rank,
                        worst.max(maxd[q]),
                        sumd[q],
                        free_in_core[self.core[q]],
                        q,
                    ),
                    Policy::Spread => (rank, -mind[q], -sumd[q], 0, q),
                };
                if best.as_ref().is_none_or(|(_, b)| key < *b) {
                    best = Some((q, key));
                }
            }
            let (q, _) = best?;
            worst = worst.max(maxd[q]);
            taken[q] = true;
            core_taken[self.core[q]] = true;
            mine.push(q);
            if mine.len() < req.count {
                note(d, q, &mut maxd, &mut mind, &mut sumd);
            }
        }
        let cpus: CpuSet = mine.iter().map(|&i| d.cpus()[i]).collect();
        let mut reserved = cpus.clone();
        if req.exclusive {
            for &i in &mine {
                reserved.extend(self.members[self.core[i]].iter().map(|&s| d.cpus()[s]));
            }
        }
        Some(Slot { cpus, reserved })
    }
}

/// How a candidate CPU ranks, lowest first: prefer-siblings rank, then the policy's
/// two costs, then best fit, then its index.
type CandidateKey = (u8, f64, f64, usize, usize);

/// Folds CPU `i` into every CPU's worst, least and summed cost to the chosen ones.
fn note(d: &Domains, i: usize, maxd: &mut [f64], mind: &mut [f64], sumd: &mut [f64]) {
    for q in 0..maxd.len() {
        let c = d.cost(i, q);
        maxd[q] = maxd[q].max(c);
        mind[q] = mind[q].min(c);
        sumd[q] += c;
    }
}
