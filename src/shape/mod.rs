//! Shaping a request by what the CPUs are and where a device sits: `core-type`,
//! `prefer` and `near` narrow the CPUs a count request may take before latency chooses
//! among them (`placement`).
//!
//! ```text
//! Topology ─► Facts (kinds, LLC groups with L3 per core and rankings, nodes) ─┐
//! devices::resolve ─► Devices (name → node and local CPUs, or why not) ───────┼─► narrow
//! Shape (core-type, prefer, near) + the free CPUs + how many are wanted ──────┘     │
//!                                       candidates + what shaped them (Shaped) ◄────┘
//!                                       place_shaped: narrow, then placement::place
//! ```
//!
//! Order: `core-type` keeps only CPUs of that kind (a request the kind cannot hold is
//! refused, never widened); `near` keeps the device's local CPUs, adding the nearest
//! nodes by distance when those cannot hold the request; `prefer` keeps the
//! last-level-cache group that can hold the request with the most L3 per core
//! (`cache`) or the highest preferred-core ranking, else maximum frequency
//! (`frequency`). Latency then decides within what is left.
//!
//! The keys themselves ([`Shape`], [`Prefer`], the `core-type` words) are defined in
//! `placement` beside the request they shape, so that `rules` reads them without
//! depending on this module; they are handed on from here.
//!
//! Must not touch: files and syscalls (facts and devices come in as values), the
//! latency choice itself (`placement`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::placement::{self, Placement, PlacementError, Request, SmtPolicy};
pub use crate::placement::{core_type_word, kind_word, Prefer, Shape};
use crate::plan::{Choose, Chosen};
use crate::rules::{PlacementRequest, RuleSet};
use crate::topology::{CoreType, LlcGroup, Node, Topology};

/// Where a device sits, as sysfs says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Locality {
    /// The name as given.
    pub device: String,
    /// The device directory that reports the node, relative to the sysfs root.
    pub path: String,
    /// `numa_node`; `None` where it reads -1.
    pub node: Option<u32>,
    /// `local_cpulist`, where present.
    pub local_cpus: Option<CpuSet>,
}

/// Devices resolved before planning: name → where it sits, or why it could not be
/// found (the message names the device).
pub type Devices = BTreeMap<String, Result<Locality, String>>;

/// The facts shaping needs, taken from the topology once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// Online CPU → (kind, its core's first CPU).
    cpus: BTreeMap<u32, (CoreType, u32)>,
    /// Whether the machine reports more than one kind.
    two_kinds: bool,
    llc: Vec<LlcGroup>,
    nodes: Vec<Node>,
}

impl Facts {
    pub fn from_topology(t: &Topology) -> Facts {
        Facts {
            cpus: t
                .cpus
                .iter()
                .map(|c| {
                    let kind = c.core_type.unwrap_or(CoreType::Performance);
                    (c.cpu, (kind, c.siblings.first().unwrap_or(c.cpu)))
                })
                .collect(),
            two_kinds: t.core_types_from.is_some(),
            llc: t.llc_summary(),
            nodes: t.nodes.clone(),
        }
    }

    /// CPUs, or cores when `per_core`, among `set`.
    fn capacity(&self, set: &CpuSet, per_core: bool) -> usize {
        if !per_core {
            return set.len();
        }
        let mut cores: Vec<u32> = set
            .iter()
            .map(|c| self.cpus.get(&c).map_or(c, |&(_, core)| core))
            .collect();
        cores.sort_unstable();
        cores.dedup();
        cores.len()
    }

    fn of_kind(&self, kind: CoreType) -> CpuSet {
        self.cpus
            .iter()
            .filter(|(_, &(k, _))| k == kind)
            .map(|(&c, _)| c)
            .collect()
    }
}

/// One key that shaped the choice, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShapedBy {
    /// `core-type`, `near` or `prefer`.
    pub key: &'static str,
    /// The value asked for.
    pub value: String,
    /// The CPUs left after this key.
    pub cpus: CpuSet,
    /// What it did, in words.
    pub note: String,
}

/// The candidates after shaping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shaped {
    pub candidates: CpuSet,
    /// Taken first, whole, when `near` had to add nodes: the device's own usable CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first: Option<CpuSet>,
    pub by: Vec<ShapedBy>,
    /// Keys that could not apply (a device without a node).
    pub warnings: Vec<String>,
}

/// A shaped request that cannot be met (defined beside the placement errors that carry
/// it, so that placing does not depend on shaping).
pub use crate::placement::ShapeError;

/// Narrows `free` for a request of `wanted` CPUs (cores when `per_core`).
pub fn narrow(
    facts: &Facts,
    devices: &Devices,
    shape: &Shape,
    free: &CpuSet,
    wanted: usize,
    per_core: bool,
) -> Result<Shaped, ShapeError> {
    let mut cands = free.clone();
    let mut first = None;
    let mut by = Vec::new();
    let mut warnings = Vec::new();
    let unit = if per_core { "cores" } else { "CPUs" };
    if let Some(kind) = shape.core_type {
        let of_kind = facts.of_kind(kind);
        let here = cands.intersection(&of_kind);
        let usable = facts.capacity(&here, per_core);
        if usable < wanted {
            let why = if of_kind.is_empty() {
                "this machine has one kind of core, and all of them are performance cores"
                    .to_string()
            } else {
                format!(
                    "{} cores: CPUs {of_kind}; {} of them free, {usable} {unit}",
                    kind_word(kind),
                    here.len()
                )
            };
            return Err(ShapeError::KindTooSmall {
                kind: kind_word(kind),
                wanted,
                usable,
                why,
            });
        }
        let note = if facts.two_kinds {
            format!("only {} cores: CPUs {here}", kind_word(kind))
        } else {
            "one kind of core on this machine: every core counts as performance".to_string()
        };
        cands = here;
        by.push(ShapedBy {
            key: "core-type",
            value: kind_word(kind).to_string(),
            cpus: cands.clone(),
            note,
        });
    }
    if let Some(name) = &shape.near {
        let loc = match devices.get(name) {
            Some(Ok(loc)) => loc,
            Some(Err(why)) => {
                return Err(ShapeError::Device {
                    device: name.clone(),
                    why: why.clone(),
                })
            }
            None => {
                return Err(ShapeError::Device {
                    device: name.clone(),
                    why: "not resolved before planning".to_string(),
                })
            }
        };
        match loc.node {
            None => warnings.push(format!(
                "near {name}: {} reports no NUMA node (numa_node -1); CPUs not restricted",
                loc.path
            )),
            Some(node) => {
                let (kept, local, note) = near(facts, loc, node, &cands, wanted, per_core, unit);
                first = local;
                cands = kept;
                by.push(ShapedBy {
                    key: "near",
                    value: name.clone(),
                    cpus: cands.clone(),
                    note,
                });
            }
        }
    }
    if let Some(prefer) = shape.prefer {
        let (kept, note) = prefer_group(facts, prefer, &cands, wanted, per_core);
        cands = kept;
        by.push(ShapedBy {
            key: "prefer",
            value: prefer.to_string(),
            cpus: cands.clone(),
            note,
        });
    }
    // A cache group chosen by `prefer` may leave out part of the device's CPUs.
    let first = first
        .map(|f: CpuSet| f.intersection(&cands))
        .filter(|f| !f.is_empty());
    Ok(Shaped {
        candidates: cands,
        first,
        by,
        warnings,
    })
}

/// The device's local CPUs among `cands`, widened node by node (nearest first by
/// `node/distance`, then by id) until they can hold the request; when widened, also the
/// local CPUs, to be taken first.
fn near(
    facts: &Facts,
    loc: &Locality,
    node: u32,
    cands: &CpuSet,
    wanted: usize,
    per_core: bool,
    unit: &str,
) -> (CpuSet, Option<CpuSet>, String) {
    let node_cpus = |id: u32| facts.nodes.iter().find(|n| n.id == id).map(|n| &n.cpus);
    let local = loc
        .local_cpus
        .clone()
        .or_else(|| node_cpus(node).cloned())
        .unwrap_or_default();
    let mut kept = cands.intersection(&local);
    let held = facts.capacity(&kept, per_core);
    if held >= wanted {
        return (
            kept.clone(),
            None,
            format!(
                "{} is on node {node}: its local CPUs {local}; {kept} usable",
                loc.path
            ),
        );
    }
    let distances = facts
        .nodes
        .iter()
        .find(|n| n.id == node)
        .map(|n| n.distances.clone())
        .unwrap_or_default();
    let local_usable = kept.clone();
    let mut others: Vec<(u32, u32)> = facts
        .nodes
        .iter()
        .filter(|n| n.id != node)
        .map(|n| (distances.get(&n.id).copied().unwrap_or(u32::MAX), n.id))
        .collect();
    others.sort_unstable();
    let mut added = Vec::new();
    for (distance, id) in others {
        if facts.capacity(&kept, per_core) >= wanted {
            break;
        }
        if let Some(cpus) = node_cpus(id) {
            kept = kept.union(&cands.intersection(cpus));
            added.push(if distance == u32::MAX {
                format!("node {id}")
            } else {
                format!("node {id} (distance {distance})")
            });
        }
    }
    let note = format!(
        "{} is on node {node}: its local CPUs {local} hold only {held} usable {unit} of {wanted}; added {}",
        loc.path,
        if added.is_empty() {
            "no other node (none known)".to_string()
        } else {
            added.join(", ")
        }
    );
    (kept, Some(local_usable), note)
}

/// The best last-level-cache group that can hold the request, or every candidate
/// when none can (or all able ones are alike).
fn prefer_group(
    facts: &Facts,
    prefer: Prefer,
    cands: &CpuSet,
    wanted: usize,
    per_core: bool,
) -> (CpuSet, String) {
    let able: Vec<(&LlcGroup, CpuSet)> = facts
        .llc
        .iter()
        .map(|g| (g, g.cpus.intersection(cands)))
        .filter(|(_, here)| facts.capacity(here, per_core) >= wanted)
        .collect();
    if able.is_empty() {
        return (
            cands.clone(),
            format!("no single last-level-cache group can hold {wanted}; not applied"),
        );
    }
    let any_ranking = able.iter().any(|(g, _)| g.best_ranking.is_some());
    let key = |g: &LlcGroup| -> (u64, u64, u64) {
        let rank = u64::from(g.best_ranking.unwrap_or(0));
        let freq = g.max_freq_khz.unwrap_or(0);
        let per_core = g.bytes_per_core.unwrap_or(0);
        match prefer {
            Prefer::Cache => (per_core, rank, freq),
            Prefer::Frequency if any_ranking => (rank, freq, per_core),
            Prefer::Frequency => (freq, per_core, 0),
        }
    };
    let best = able.iter().map(|(g, _)| key(g)).max().unwrap_or_default();
    let top: Vec<&(&LlcGroup, CpuSet)> = able.iter().filter(|(g, _)| key(g) == best).collect();
    if top.len() > 1 {
        let kept = top.iter().fold(CpuSet::new(), |a, (_, h)| a.union(h));
        return (
            kept,
            format!(
                "the {} last-level-cache groups able to hold {wanted} are alike; latency decides",
                top.len()
            ),
        );
    }
    let (g, here) = top[0];
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64);
    let what = match prefer {
        Prefer::Cache => format!(
            "{} of L{} over {} cores ({} per core), the most",
            g.size_bytes.map_or("unknown".into(), mib),
            g.level,
            g.cores,
            g.bytes_per_core.map_or("unknown".into(), mib),
        ),
        Prefer::Frequency if any_ranking => format!(
            "preferred-core ranking up to {}, the highest",
            g.best_ranking.unwrap_or(0)
        ),
        Prefer::Frequency => format!(
            "maximum frequency {:.2} GHz, the highest",
            g.max_freq_khz.unwrap_or(0) as f64 / 1e6
        ),
    };
    (
        here.clone(),
        format!(
            "last-level-cache group {}: {what} of the {} groups able to hold {wanted}",
            g.cpus,
            able.len()
        ),
    )
}

/// Shapes `req` with `shape`, then places it among the candidates; the shaping notes
/// join the placement's explanation.
pub fn place_shaped(
    d: &Domains,
    facts: &Facts,
    devices: &Devices,
    req: &Request,
    shape: &Shape,
    available: &CpuSet,
) -> Result<(Placement, Shaped), PlacementError> {
    let free = available.difference(&req.exclude);
    let per_core = req.smt == SmtPolicy::Avoid || req.exclusive;
    let shaped = narrow(facts, devices, shape, &free, req.count, per_core)?;
    let mut p = match &shaped.first {
        None => placement::place(d, req, &shaped.candidates)?,
        Some(first) => first_then_rest(d, facts, req, first, &shaped.candidates, per_core)?,
    };
    for s in &shaped.by {
        p.explanation
            .notes
            .push(format!("{} {}: {}", s.key, s.value, s.note));
    }
    Ok((p, shaped))
}

/// All the device's own CPUs (one per core when `per_core`), then the rest of the
/// request among the added nodes.
fn first_then_rest(
    d: &Domains,
    facts: &Facts,
    req: &Request,
    first: &CpuSet,
    candidates: &CpuSet,
    per_core: bool,
) -> Result<Placement, PlacementError> {
    let own = facts.capacity(first, per_core).min(req.count);
    if own == 0 || own == req.count || facts.capacity(candidates, per_core) < req.count {
        return placement::place(d, req, candidates);
    }
    let head = placement::place(
        d,
        &Request {
            count: own,
            ..req.clone()
        },
        first,
    )?;
    // The device's CPUs are spent (their siblings too, under smt = avoid).
    let rest_pool = candidates.difference(first);
    let mut p = placement::place(
        d,
        &Request {
            count: req.count - head.cpus.len(),
            ..req.clone()
        },
        &rest_pool,
    )?;
    p.cpus = p.cpus.union(&head.cpus);
    p.reserved = p.reserved.union(&head.reserved);
    let idx: Vec<usize> = p.cpus.iter().filter_map(|c| d.index_of(c)).collect();
    p.explanation.cost = placement::set_cost(d, &idx);
    let k = p.cpus.len().min(d.cpus().len());
    let lowest: Vec<usize> = (0..k).collect();
    p.explanation.autopilot = Some((
        d.cpus()[..k].iter().copied().collect(),
        placement::set_cost(d, &lowest),
    ));
    p.explanation.domains.insert(0, first.clone());
    p.explanation.notes.insert(
        0,
        format!(
            "the device's own CPUs {} first, the other {} from the added nodes",
            head.cpus,
            req.count - head.cpus.len()
        ),
    );
    Ok(p)
}

/// Every device the rules' placements are `near`, each once.
pub fn near_names(rules: &RuleSet) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for r in rules.rules() {
        let requests = r.place.iter().chain(r.threads.iter().map(|t| &t.request));
        names.extend(requests.filter_map(|q| q.shape.near.as_deref()));
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// The placement engine with the machine's facts: honours `core-type`, `prefer` and
/// `near` before latency chooses.
pub struct Shaper<'a> {
    pub domains: &'a Domains,
    pub facts: &'a Facts,
    pub devices: &'a Devices,
}

impl Shaper<'_> {
    /// [`place_shaped`] with this machine's facts and devices.
    fn place(
        &self,
        r: &Request,
        shape: &Shape,
        available: &CpuSet,
    ) -> Result<Placement, PlacementError> {
        let (p, _) = place_shaped(self.domains, self.facts, self.devices, r, shape, available)?;
        Ok(p)
    }
}

impl Choose for Shaper<'_> {
    fn choose(&self, req: &PlacementRequest, available: &CpuSet) -> Result<Chosen, PlacementError> {
        let Some(r) = crate::plan::engine_request(req) else {
            return self.domains.choose(req, available);
        };
        Ok(self.place(&r, &req.shape, available)?.into())
    }

    /// Slots planned together (`placement::slots`), each next one among the CPUs the
    /// shape keys leave of those the earlier slots did not spend: a `near` device's or
    /// a `prefer`red cache group's CPUs fill first, then the shape widens as it would
    /// for one request; `core-type` never widens.
    fn slots(
        &self,
        req: &PlacementRequest,
        available: &CpuSet,
    ) -> Result<Vec<Chosen>, PlacementError> {
        let Some(r) = crate::plan::engine_request(req) else {
            return Ok(vec![self.choose(req, available)?]);
        };
        if req.shape.is_empty() {
            return self.domains.slots(req, available);
        }
        let per_core = r.smt == SmtPolicy::Avoid || r.exclusive;
        let mut left = available.clone();
        let mut planner = placement::SlotPlanner::new(self.domains, &r);
        while planner.slots().len() < placement::MAX_SLOTS {
            let next = if planner.slots().is_empty() {
                let p = self.place(&r, &req.shape, &left)?;
                placement::Slot {
                    cpus: p.cpus,
                    reserved: p.reserved,
                }
            } else {
                let Ok(shaped) = narrow(
                    self.facts,
                    self.devices,
                    &req.shape,
                    &left,
                    r.count,
                    per_core,
                ) else {
                    break;
                };
                match planner.next(&shaped.candidates) {
                    Some(s) => s,
                    None => break,
                }
            };
            left = left.difference(&planner.spent(&next));
            planner.push(next);
        }
        let out = planner.into_slots();
        Ok(out.into_iter().map(Chosen::from).collect())
    }
}

/// A [`Shaper`] that owns what it reads, for the chooser the daemon keeps to plan again
/// in the processes' cgroup cpusets ([`crate::plan::Plan::again`]).
pub struct OwnedShaper {
    pub domains: Domains,
    pub facts: Facts,
    pub devices: Devices,
}

/// The chooser plans are made with: the shaper on `domains` when the topology's
/// `facts` are known, the bare domains when they are not, none without domains.
pub fn chooser(
    domains: Option<Domains>,
    facts: Option<Facts>,
    devices: Devices,
) -> Option<crate::plan::SharedChoose> {
    match (domains, facts) {
        (Some(domains), Some(facts)) => Some(std::sync::Arc::new(OwnedShaper {
            domains,
            facts,
            devices,
        })),
        (domains, _) => domains.map(|d| std::sync::Arc::new(d) as crate::plan::SharedChoose),
    }
}

impl OwnedShaper {
    fn shaper(&self) -> Shaper<'_> {
        Shaper {
            domains: &self.domains,
            facts: &self.facts,
            devices: &self.devices,
        }
    }
}

impl Choose for OwnedShaper {
    fn choose(&self, req: &PlacementRequest, available: &CpuSet) -> Result<Chosen, PlacementError> {
        self.shaper().choose(req, available)
    }

    fn slots(
        &self,
        req: &PlacementRequest,
        available: &CpuSet,
    ) -> Result<Vec<Chosen>, PlacementError> {
        self.shaper().slots(req, available)
    }
}

#[cfg(test)]
mod tests;
