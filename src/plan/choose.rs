//! How a plan chooses CPUs for a count request: the [`Choose`] seam, the placement
//! engine behind it on latency domains ([`Domains`]), or a stand-in in tests. The plan
//! decides precedence and exclusivity; a chooser only picks among the CPUs it is given.

use std::sync::Arc;

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::placement::{self, PlacementError};
use crate::rules::{CpuTarget, PlacementRequest};

/// Chooses CPUs for a count request among `available`: the placement engine over
/// latency domains, or a stand-in in tests.
pub trait Choose {
    /// The CPUs chosen, and those they hold (a superset: an exclusive request also
    /// keeps the idle SMT siblings of its CPUs free).
    fn choose(&self, req: &PlacementRequest, available: &CpuSet) -> Result<Chosen, PlacementError>;

    /// One set of `count` CPUs per thread of a non-shared thread entry, in the order
    /// threads take them, planned together (see `placement::slots`). The error is the
    /// first slot's. By default each slot is chosen alone among what the earlier ones
    /// left (a stand-in's way).
    fn slots(
        &self,
        req: &PlacementRequest,
        available: &CpuSet,
    ) -> Result<Vec<Chosen>, PlacementError> {
        let mut slots = Vec::new();
        let mut left = available.clone();
        while slots.len() < placement::MAX_SLOTS {
            match self.choose(req, &left) {
                Ok(c) if !c.cpus.is_empty() => {
                    left = left.difference(&c.held);
                    slots.push(c);
                }
                Ok(_) => break,
                Err(e) if slots.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(slots)
    }

    /// What `cpus` cost together (mean pair latency, ns), for weighing memory against
    /// latency; `None` when unknown (then memory decides between equal choices).
    fn cost(&self, cpus: &CpuSet) -> Option<f64> {
        let _ = cpus;
        None
    }
}

/// The placement engine's request for a count `req` (`None` for explicit CPUs).
pub fn engine_request(req: &PlacementRequest) -> Option<placement::Request> {
    match &req.target {
        CpuTarget::Count(n) => Some(placement::Request {
            count: *n as usize,
            policy: req.policy,
            smt: req.smt,
            exclude: CpuSet::new(),
            exclusive: req.exclusive,
            cpus: None,
        }),
        CpuTarget::Cpus(_) => None,
    }
}

/// A chooser the daemon keeps with the plan it applies, to make that plan again for
/// what the manager reports ([`Plan::again`]).
pub type SharedChoose = Arc<dyn Choose + Send + Sync>;

/// What [`Choose::choose`] picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub cpus: CpuSet,
    /// `cpus` and the idle siblings an exclusive request keeps free.
    pub held: CpuSet,
}

impl From<placement::Placement> for Chosen {
    fn from(p: placement::Placement) -> Chosen {
        Chosen {
            held: p.reserved.union(&p.cpus),
            cpus: p.cpus,
        }
    }
}

impl From<placement::Slot> for Chosen {
    fn from(s: placement::Slot) -> Chosen {
        Chosen {
            held: s.reserved.union(&s.cpus),
            cpus: s.cpus,
        }
    }
}

impl Choose for Domains {
    fn choose(&self, req: &PlacementRequest, available: &CpuSet) -> Result<Chosen, PlacementError> {
        let count = match &req.target {
            CpuTarget::Count(_) if !req.shape.is_empty() => {
                return Err(crate::placement::ShapeError::NoFacts {
                    keys: req.shape.describe(),
                }
                .into())
            }
            CpuTarget::Count(n) => *n as usize,
            CpuTarget::Cpus(c) => {
                return Ok(Chosen {
                    cpus: c.clone(),
                    held: c.clone(),
                })
            }
        };
        let r = placement::Request {
            count,
            policy: req.policy,
            smt: req.smt,
            exclude: CpuSet::new(),
            exclusive: req.exclusive,
            cpus: None,
        };
        Ok(placement::place(self, &r, available)?.into())
    }

    fn slots(
        &self,
        req: &PlacementRequest,
        available: &CpuSet,
    ) -> Result<Vec<Chosen>, PlacementError> {
        let Some(r) = engine_request(req) else {
            return Ok(vec![self.choose(req, available)?]);
        };
        if !req.shape.is_empty() {
            return Err(crate::placement::ShapeError::NoFacts {
                keys: req.shape.describe(),
            }
            .into());
        }
        Ok(placement::slots(self, &r, available)?
            .into_iter()
            .map(Chosen::from)
            .collect())
    }

    fn cost(&self, cpus: &CpuSet) -> Option<f64> {
        let idx: Option<Vec<usize>> = cpus.iter().map(|c| self.index_of(c)).collect();
        placement::set_cost(self, &idx?).mean_ns
    }
}
