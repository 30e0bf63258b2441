//! Run-time pins in the rule vocabulary (`PinProcess`, `PinProcessWith`, `Plan`,
//! `PlanWith`, what `pinnerd run` and `pinnerd pin` ask for: one path for all), their
//! release, and the owner checks polkit decisions rest on. Split from
//! `state/mod.rs` to keep each file readable; same state, same loop.

use crate::api::{CommandError, PinRequest, PlaceSpec, ReleaseRequest};
use crate::cpuset::CpuSet;
use crate::plan::Choose;
use crate::rules::{CpuTarget, PlacementRequest};
use crate::shape::Shaper;

use super::State;

impl State {
    /// `PinProcess` and `PinProcessWith`: every thread of the process pinned to the CPUs
    /// its placement gets now, which are returned.
    pub(super) fn pin(&mut self, pin: PinRequest) -> Result<CpuSet, CommandError> {
        let PinRequest {
            pid,
            place,
            follow,
            for_owner,
            sched,
        } = pin;
        self.check_owner(pid, for_owner)?;
        let request = self.resolve_place(&place)?;
        let rule_follows = matches!(&place, PlaceSpec::Rule(name)
            if self.rules().get(name).is_some_and(|r| r.memory_follow));
        let follow = follow.map(|f| f || rule_follows);
        let pid_i = i32::try_from(pid).map_err(|_| CommandError::NoSuchProcess(pid))?;
        let cpus = self.runtime_cpus(&request, |source| CommandError::Pin { pid, source })?;
        let m = self.managed.manager_mut().ok_or(CommandError::Starting)?;
        let mut changes = m
            .pin_with(pid_i, &cpus, sched)
            .map_err(|e| CommandError::from_manager(pid, e))?;
        changes.extend(self.managed.settle());
        let (memory, said) = match follow {
            Some(true) => ("follow", "; its memory follows its CPUs"),
            Some(false) => ("stay", "; its memory stays where it is"),
            None => ("unchanged", ""),
        };
        tracing::info!(pid, %cpus, memory, "pid {pid} pinned at run time to CPUs {cpus}{said}");
        if let Some(follow) = follow {
            self.sharing.set_follow(pid_i, follow);
        }
        self.after_manager(changes);
        Ok(cpus)
    }

    /// `ReleaseProcess`: a process pinned at run time gets its original masks back.
    pub(super) fn release(&mut self, release: ReleaseRequest) -> Result<(), CommandError> {
        let ReleaseRequest { pid, for_owner } = release;
        self.check_owner(pid, for_owner)?;
        let pid_i = i32::try_from(pid).map_err(|_| CommandError::NotManaged(pid))?;
        let m = self.managed.manager_mut().ok_or(CommandError::Starting)?;
        let mut changes = m
            .unpin(pid_i)
            .map_err(|e| CommandError::from_manager(pid, e))?;
        changes.extend(self.managed.settle());
        tracing::info!(pid, "pid {pid} released at run time: its masks given back");
        self.after_manager(changes);
        Ok(())
    }

    /// `Plan` and `PlanWith`: the CPUs [`State::pin`] would choose now.
    pub(super) fn plan_with(&mut self, place: &PlaceSpec) -> Result<CpuSet, CommandError> {
        let request = self.resolve_place(place)?;
        self.runtime_cpus(&request, |e| CommandError::InvalidArgs(e.to_string()))
    }

    /// For a pin or release authorized as the owner's (`for_owner`): the process still
    /// belongs to them, checked in the step that acts.
    fn check_owner(&self, pid: u32, for_owner: Option<u32>) -> Result<(), CommandError> {
        let Some(uid) = for_owner else {
            return Ok(());
        };
        let owner = self.owner(pid)?;
        if owner != uid {
            tracing::warn!(
                pid,
                uid,
                owner,
                "refused for uid {uid}: pid {pid} changed hands (its owner is uid {owner} now)"
            );
            return Err(CommandError::NotOwner { pid, uid });
        }
        Ok(())
    }

    /// The real uid of process `pid`.
    pub(super) fn owner(&self, pid: u32) -> Result<u32, CommandError> {
        let m = self.managed.manager().ok_or(CommandError::Starting)?;
        i32::try_from(pid)
            .ok()
            .filter(|&p| p > 0)
            .and_then(|p| m.owner(p))
            .ok_or(CommandError::NoSuchProcess(pid))
    }

    /// The request a placement names: its own keys, checked against this machine, or
    /// the `[rule.place]` of a loaded rule (never exclusive: a run-time pin holds
    /// nothing against the rules).
    fn resolve_place(&self, place: &PlaceSpec) -> Result<PlacementRequest, CommandError> {
        let mut request = match place {
            PlaceSpec::Rule(name) => {
                let rule = self.rules().get(name).ok_or_else(|| {
                    CommandError::NoRule(format!("no loaded rule is named {name:?}"))
                })?;
                rule.place_request()
                    .map_err(|e| CommandError::NoRule(e.to_string()))?
            }
            PlaceSpec::Request(r) => r.clone(),
        };
        request.exclusive = false;
        match &request.target {
            CpuTarget::Count(n) => {
                let usable = self.machine.usable().len();
                if *n == 0 || *n as usize > usable {
                    return Err(CommandError::InvalidArgs(format!(
                        "count {n}: must be between 1 and the {usable} usable CPUs"
                    )));
                }
            }
            CpuTarget::Cpus(c) => {
                let online = self.machine.online();
                if c.is_empty() || !c.is_subset(&online) {
                    return Err(CommandError::InvalidArgs(format!(
                        "cpus {c}: not all online (online: {online})"
                    )));
                }
            }
        }
        Ok(request)
    }

    /// The CPUs a run-time pin of `request` gets now: among those online, not reserved
    /// for housekeeping and held by no exclusive rule (see [`crate::plan::Plan::pin`]).
    /// `refused` says why none could be chosen.
    fn runtime_cpus(
        &mut self,
        request: &PlacementRequest,
        refused: impl FnOnce(crate::plan::PinError) -> CommandError,
    ) -> Result<CpuSet, CommandError> {
        self.machine.domains()?;
        let m = self.managed.manager().ok_or(CommandError::Starting)?;
        if request.shape.is_empty() {
            let d = self.machine.domains_made().map(|d| d as &dyn Choose);
            return m.plan().pin(request, d).map_err(refused);
        }
        // `core-type`, `prefer`, `near`: the machine's facts and the device, now.
        let (facts, devices) = self.shaping_inputs(request.shape.near.as_deref());
        let facts = facts.ok_or(CommandError::Starting)?;
        let domains = self.machine.domains_made().ok_or(CommandError::Starting)?;
        let shaper = Shaper {
            domains,
            facts: &facts,
            devices: &devices,
        };
        m.plan().pin(request, Some(&shaper)).map_err(refused)
    }
}
