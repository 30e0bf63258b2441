//! Holding: each target not held yet is checked against what is held (one isolated
//! unit per CPU), then made — journal first, the unit confined, the partition made and
//! read back — or refused with why, a refusal tried again after its backoff.

use std::collections::{BTreeMap, HashMap};

use crate::cpuset::CpuSet;

use super::error::HoldError;
use super::partition::{Cgroup2, Direct, Partition, PartitionWriter, Unable};
use super::systemd::{self, Allowed, UnitInfo, Units};
use super::{
    slice_path, Hold, Holder, Outcome, Place, Refusal, Target, REFUSAL_RETRY, REFUSAL_RETRY_MAX,
};

/// What came of applying one target.
pub(super) enum Applied {
    /// Held, and what falls short of the rule, if anything (systemd gives other CPUs).
    Held(Box<Hold>, Option<HoldError>),
    /// Not held, and why; `touched`: the unit was changed on the way (and taken back).
    Refused { why: HoldError, touched: bool },
}

/// Where a target is held and what its unit had before.
struct Spot {
    unit: String,
    cgroup: String,
    /// A scope pinnerd makes (its values before are "not set").
    adopted: bool,
    /// The unit's own `AllowedCPUs=`/`AllowedMemoryNodes=` (see [`Holder::own_values`]).
    before: Allowed,
}

impl Holder {
    /// Why target `t` of unit `key` may not be held while other units are, if so: its
    /// CPUs overlap those of another unit held with isolation (or it would isolate CPUs
    /// another unit is confined to), or those of a partition whose undo is put off.
    /// Confining it would have systemd write the unit's `cpuset.cpus` over another
    /// partition's exclusive CPUs, which Linux 6.12 answers with a warning in
    /// `update_parent_effective_cpumask` and, once the partition's cgroup goes, with
    /// CPUs left isolated for nobody (seen in the VM: one rule's explicit CPUs wanted
    /// by each of its short-lived services).
    pub(super) fn clash(&self, key: &str, t: &Target) -> Option<HoldError> {
        let others = self
            .held
            .iter()
            .chain(&self.recovered)
            .chain(&self.leftover)
            .filter(|h| h.unit != key);
        for h in others {
            let isolating = h.partition.is_some() || (h.isolate && !h.emptied);
            let common = h.cpus.intersection(&t.cpus);
            if (isolating || t.isolate) && !common.is_empty() {
                return Some(HoldError::Clash {
                    cpus: common,
                    unit: h.unit.clone(),
                    rule: h.rule.clone(),
                    isolating,
                });
            }
        }
        self.settle
            .borrow()
            .put_off_cpus()
            .into_iter()
            .find_map(|(cgroup, cpus)| {
                let common = cpus.intersection(&t.cpus);
                (!common.is_empty()).then_some(HoldError::BeingUndone {
                    cpus: common,
                    cgroup,
                })
            })
    }

    /// Applies every target not held yet (a refusal stands while wanted the same way,
    /// until its backoff has passed); what came of each, by unit.
    pub(super) fn apply_new(
        &mut self,
        targets: &BTreeMap<String, Target>,
    ) -> HashMap<String, Outcome> {
        let mut outcome = HashMap::new();
        for (key, t) in targets {
            if let Some(h) = self.held.iter().find(|h| &h.unit == key) {
                // Held: nothing of it is refused (nor due to be tried again).
                self.refused.remove(key);
                let isolated = h.partition.is_some();
                let problem = (t.isolate && !isolated).then(|| {
                    if h.emptied {
                        HoldError::Emptied {
                            unit: h.unit.clone(),
                        }
                    } else {
                        HoldError::RefusedEarlier
                    }
                });
                outcome.insert(
                    key.clone(),
                    Outcome {
                        unit: Some(h.unit.clone()),
                        confined: h.confined,
                        isolated,
                        problem,
                    },
                );
                continue;
            }
            // A CPU is isolated for one unit at a time: nothing is changed for a unit
            // whose CPUs another held unit isolates, or that would isolate CPUs another
            // unit is confined to (see `clash`).
            if let Some(why) = self.clash(key, t) {
                outcome.insert(key.clone(), Outcome::not_held(Some(why)));
                continue;
            }
            let before = self
                .refused
                .get(key)
                .filter(|r| r.signature == t.signature())
                .cloned();
            if let Some(r) = &before {
                if (self.clock)() < r.retry_at {
                    outcome.insert(key.clone(), Outcome::not_held(Some(r.why.clone())));
                    continue;
                }
                tracing::debug!(unit = %key, after = ?r.wait, "a refused hold tried again");
            }
            let (hold, problem) = match self.apply(t) {
                Applied::Held(hold, problem) => {
                    self.refused.remove(key);
                    (Some(*hold), problem)
                }
                Applied::Refused { why, touched: true } => {
                    let wait = before
                        .as_ref()
                        .map_or(REFUSAL_RETRY, |r| (r.wait * 2).min(REFUSAL_RETRY_MAX));
                    tracing::debug!(unit = %key, problem = %why, retry_in = ?wait, "hold refused");
                    self.refused.insert(
                        key.clone(),
                        Refusal {
                            signature: t.signature(),
                            why: why.clone(),
                            retry_at: (self.clock)() + wait,
                            wait,
                        },
                    );
                    (None, Some(why))
                }
                Applied::Refused {
                    why,
                    touched: false,
                } => {
                    self.refused.remove(key);
                    (None, Some(why))
                }
            };
            let entry = match &hold {
                Some(h) => Outcome {
                    unit: Some(h.unit.clone()),
                    confined: h.confined,
                    isolated: h.partition.is_some(),
                    problem,
                },
                None => Outcome::not_held(problem),
            };
            if let Some(h) = hold {
                self.held.push(h);
            }
            self.save();
            outcome.insert(key.clone(), entry);
        }
        outcome
    }

    /// Applies one target: checked, put on record, the unit confined, read back and,
    /// with `isolate`, its cgroup made a partition; a target isolation fails for is
    /// taken back (merely exclusive, as before: the unit is not left confined for
    /// nothing).
    pub(super) fn apply(&mut self, t: &Target) -> Applied {
        let spot = match self.spot(t) {
            Ok(spot) => spot,
            Err(why) => {
                return Applied::Refused {
                    why,
                    touched: false,
                }
            }
        };
        let (mut hold, replaced) = self.on_record(t, spot);
        if let Err(why) = self.confine(t, &mut hold) {
            // Nothing was changed (the call failed): tried again at the next retry.
            hold.confined = false;
            self.undo_or_keep(hold);
            // Nothing was changed: the leftover stays on record as it was.
            self.leftover.extend(replaced);
            return Applied::Refused {
                why,
                touched: false,
            };
        }
        let mut problem = self.given(&hold.unit, &t.cpus).err();
        if t.isolate && problem.is_none() {
            match self.partition(&hold) {
                Ok((p, by_systemd)) => {
                    hold.partition = Some(p);
                    hold.by_systemd = by_systemd;
                }
                Err(e) => problem = Some(e.into()),
            }
        }
        match problem {
            Some(why) if t.isolate && hold.partition.is_none() => {
                self.undo_or_keep(hold);
                Applied::Refused { why, touched: true }
            }
            problem => Applied::Held(Box::new(hold), problem),
        }
    }

    /// Where target `t` is held and what its unit had, once nothing stands in the way
    /// of it; what does (systemd, isolation that cannot work here, a removed partition
    /// pending, a read-only partition file) is said before anything is changed.
    fn spot(&self, t: &Target) -> Result<Spot, HoldError> {
        let units = self.units.as_ref().map_err(Clone::clone)?;
        if t.isolate {
            self.isolation_possible()?;
        }
        let spot = match &t.place {
            Place::Unit(u) => {
                let read = units.allowed(&u.name)?;
                Spot {
                    unit: u.name.clone(),
                    cgroup: u.cgroup.clone(),
                    adopted: false,
                    before: self.own_values(units.as_ref(), u, read),
                }
            }
            Place::Adopt { scope, slice } => Spot {
                unit: scope.clone(),
                cgroup: format!("/{}/{scope}", slice_path(slice)),
                adopted: true,
                before: Allowed::default(),
            },
        };
        // A partition's files on a read-only mount (a slice its unit's ReadWritePaths=
        // does not name) are said as `plan --live` says them.
        if let (true, Ok(c)) = (t.isolate, &self.cg2) {
            c.writable_on_the_way(&spot.cgroup, &self.mounts)?;
        }
        Ok(spot)
    }

    /// Whether a partition can be made now: the kernel and its cgroups can isolate,
    /// and no removed partition is pending (tried again at the next retry, as a hold
    /// not made).
    fn isolation_possible(&self) -> Result<(), Unable> {
        self.cg2.as_ref().map_err(Clone::clone)?.probe()?;
        self.settled(None)
    }

    /// The hold of `t` at `spot`, on record before the first change (a crash halfway
    /// leaves nothing unknown), and the unit's leftovers it replaces: the hold carries
    /// their values, and the drop-ins a hold not fully undone left are not the unit's
    /// own, that hold's record of them is.
    fn on_record(&mut self, t: &Target, spot: Spot) -> (Hold, Vec<Hold>) {
        let (replaced, rest): (Vec<Hold>, Vec<Hold>) = std::mem::take(&mut self.leftover)
            .into_iter()
            .partition(|l| l.unit == spot.unit);
        self.leftover = rest;
        let dropins = match (replaced.first(), spot.adopted, &self.units) {
            (Some(l), _, _) => l.dropins.clone(),
            (None, true, _) => systemd::HELD_PROPERTIES
                .iter()
                .map(|p| (p.to_string(), None))
                .collect(),
            (None, false, Ok(units)) => runtime_dropins_before(units.as_ref(), &spot.unit),
            (None, false, Err(_)) => BTreeMap::new(),
        };
        let hold = Hold {
            rule: t.rule.clone(),
            unit: spot.unit,
            cgroup: spot.cgroup,
            pids: t.pids.clone(),
            adopted: spot.adopted,
            cpus: t.cpus.clone(),
            mems: t.mems.clone(),
            before_cpus: spot.before.cpus,
            before_mems: spot.before.mems,
            confined: true,
            isolate: t.isolate,
            partition: None,
            by_systemd: false,
            emptied: false,
            originals: t.originals.clone(),
            dropins,
        };
        self.held.push(hold.clone());
        self.save();
        self.held.pop();
        (hold, replaced)
    }

    /// Confines the unit: its `AllowedCPUs=`/`AllowedMemoryNodes=` set, or a scope of
    /// its own made for the process (whose cgroup is then read as systemd made it).
    fn confine(&mut self, t: &Target, hold: &mut Hold) -> Result<(), HoldError> {
        let units = self.units.as_ref().map_err(Clone::clone)?;
        match &t.place {
            Place::Unit(_) => units.set_allowed(&hold.unit, Some(&t.cpus), t.mems.as_ref())?,
            Place::Adopt { scope, slice } => units.adopt(
                scope,
                slice,
                t.pids[0],
                &Allowed {
                    cpus: t.cpus.clone(),
                    mems: t.mems.clone().unwrap_or_default(),
                },
                &format!("pinnerd: rule {} holds pid {}", t.rule, t.pids[0]),
            )?,
        }
        if hold.adopted {
            if let Some(cgroup) = scope_cgroup(units.as_ref(), t.pids[0], &hold.unit) {
                hold.cgroup = cgroup;
            }
            // The process now runs in the new scope.
            self.units_of.remove(&t.pids[0]);
        }
        Ok(())
    }

    /// Whether systemd gives `unit` the CPUs `cpus`, as it reads them back.
    fn given(&self, unit: &str, cpus: &CpuSet) -> Result<(), HoldError> {
        let units = self.units.as_ref().map_err(Clone::clone)?;
        let eff = units.effective(unit)?;
        if &eff.cpus != cpus {
            return Err(HoldError::NotGiven {
                unit: unit.to_string(),
                got: eff.cpus,
                want: cpus.clone(),
            });
        }
        Ok(())
    }

    /// The unit's own `AllowedCPUs=`/`AllowedMemoryNodes=`, of what systemd reads now:
    /// a value a leftover hold set on the unit is that hold's value before; a unit whose
    /// cgroup is a partition systemd did not make carries pinnerd's leftovers from a run
    /// whose record is gone: the partition is undone here, and the values read are not
    /// the unit's own (nothing set).
    pub(super) fn own_values(&self, units: &dyn Units, u: &UnitInfo, read: Allowed) -> Allowed {
        let mut own = read.clone();
        let left = self
            .leftover
            .iter()
            .find(|l| l.unit == u.name && l.confined);
        if let Some(l) = left {
            if read.cpus == l.cpus {
                own.cpus = l.before_cpus.clone();
            }
            if l.mems.as_ref() == Some(&read.mems) {
                own.mems = l.before_mems.clone();
            }
        }
        let Ok(cg2) = &self.cg2 else { return own };
        let Some(p) = cg2.found_partition(&u.cgroup) else {
            return own;
        };
        // Only where systemd has no partition of its own on the unit (and says so).
        let pinnerds = match units.partition_property(&u.name) {
            Ok(None) => true,
            Ok(Some(v)) => v.is_empty() || v == "member",
            Err(_) => false,
        };
        if !pinnerds {
            return own;
        }
        tracing::warn!(
            unit = %u.name, cpus = %p.cpus, state = %p.before, allowed_cpus = %read.cpus,
            "a partition no record names (pinnerd's, from a run whose record is gone) undone; the unit's AllowedCPUs= and AllowedMemoryNodes= are not taken as its own"
        );
        for e in self.undo_partition(cg2, &p) {
            tracing::warn!(unit = %u.name, problem = %e, "unit {}: the partition an earlier run left not fully undone: {e}", u.name);
        }
        if left.is_none() {
            own = Allowed::default();
        }
        own
    }

    /// Makes the hold's cgroup an isolated partition: through systemd's own
    /// `CPUSetPartition=` where it has it and that is read back as isolated, else by
    /// the cgroup files: the CPUs granted down, then `isolated` written by the daemon,
    /// or, where the kernel refuses it that (a remote partition takes `CAP_SYS_ADMIN`,
    /// which the daemon's unit does not have), by the helper unit
    /// `pinnerd-partition@isolated:PATH.service`; read back either way.
    pub(super) fn partition(&self, h: &Hold) -> Result<(Partition, bool), Unable> {
        let cg2 = self.cg2.as_ref().map_err(Clone::clone)?;
        self.settled(None)?;
        if let Ok(units) = &self.units {
            if let Ok(Some(_)) = units.partition_property(&h.unit) {
                let by = ByProperty {
                    units: units.as_ref(),
                    unit: &h.unit,
                };
                let made = cg2.isolate_by(&h.cgroup, &h.cpus, &by, |_| {
                    let _ = units.set_partition(&h.unit, "member");
                });
                if let Ok(p) = made {
                    return Ok((p, true));
                }
            }
        }
        let p = cg2.isolate_by(&h.cgroup, &h.cpus, &self.partition_writer(), |p| {
            self.undo_partition(cg2, p);
        })?;
        Ok((p, false))
    }

    /// Writes a cgroup's `cpuset.cpus.partition`: the daemon, else the helper unit.
    pub(super) fn partition_writer(&self) -> OrHelper<'_> {
        OrHelper {
            units: self.units.as_ref().ok().map(AsRef::as_ref),
        }
    }
}

/// systemd's `CPUSetPartition=` of `unit` as the writer of its cgroup's partition: set,
/// then read back (a file that cannot be read reads as nothing, not `isolated`).
struct ByProperty<'a> {
    units: &'a dyn systemd::Units,
    unit: &'a str,
}

impl PartitionWriter for ByProperty<'_> {
    fn grants(&self) -> bool {
        false
    }

    fn write(&self, cg2: &Cgroup2, cgroup: &str, mode: &str) -> Result<String, Unable> {
        self.units
            .set_partition(self.unit, mode)
            .map_err(|e| Unable::Other(e.to_string()))?;
        Ok(cg2.partition_state(cgroup).unwrap_or_default())
    }
}

/// The daemon writes the partition file, then, when the kernel refused the daemon for
/// want of a privilege, the helper unit `pinnerd-partition@MODE:PATH.service` does.
pub(super) struct OrHelper<'a> {
    units: Option<&'a dyn systemd::Units>,
}

impl PartitionWriter for OrHelper<'_> {
    fn write(&self, cg2: &Cgroup2, cgroup: &str, mode: &str) -> Result<String, Unable> {
        let state = Direct.write(cg2, cgroup, mode)?;
        if state.split_whitespace().next() == Some(mode) && !state.contains("invalid") {
            return Ok(state);
        }
        if !state.contains("not permitted") {
            return Ok(state);
        }
        let Some(units) = self.units else {
            return Ok(state);
        };
        let Some(helper) = systemd::partition_helper_unit(mode, cgroup) else {
            return Ok(state);
        };
        units
            .run_oneshot(&helper)
            .map_err(|e| Unable::Other(format!("{state}; the helper failed: {e}")))?;
        cg2.partition_state(cgroup)
    }
}

/// The runtime drop-ins of `unit` for the properties a hold sets, as they are before
/// it (`None`: absent), to be put back when it lets go; one that cannot be read is
/// said and left out.
fn runtime_dropins_before(
    units: &dyn systemd::Units,
    unit: &str,
) -> BTreeMap<String, Option<String>> {
    systemd::HELD_PROPERTIES
        .iter()
        .filter_map(|p| match units.runtime_dropin(unit, p) {
            Ok(text) => Some((p.to_string(), text)),
            Err(e) => {
                tracing::warn!(unit = %unit, property = p, error = %e, "unit {unit}: its runtime drop-in for {p} cannot be read ({e}); it will not be put back when the hold lets go");
                None
            }
        })
        .collect()
}

/// The cgroup of the scope `scope` systemd made for `pid`, as it reads now; `None`
/// (said) when the pid is elsewhere or cannot be read.
fn scope_cgroup(units: &dyn systemd::Units, pid: u32, scope: &str) -> Option<String> {
    match units.unit_of_pid(pid) {
        Ok(info) if info.name == scope => Some(info.cgroup),
        Ok(info) => {
            tracing::warn!(pid, unit = %info.name, scope = %scope, "pid {pid} is not in the scope {scope} made for it (it is in {})", info.name);
            None
        }
        Err(e) => {
            tracing::warn!(pid, error = %e, "cannot read the scope made for pid {pid}: {e}");
            None
        }
    }
}
