//! Run-time pins (`PinProcess`, `UnpinProcess`): a process pinned without a rule to
//! CPUs the caller chose (see [`Plan::pin`](crate::plan::Plan::pin)), with a
//! scheduling class if asked, until it is unpinned; then rules apply to it again.
//!
//! Must not touch: how the CPUs are chosen (the plan's), processes `protect` keeps.

use super::{Change, ManagedThread, Manager, ManagerError, Source};
use crate::cpuset::CpuSet;
use crate::rules::ThreadPlacement;

impl Manager {
    /// Pins process `pid` at run time, without a rule, to `cpus` (see
    /// [`Plan::pin`](crate::plan::Plan::pin) for choosing them).
    pub fn pin(&mut self, pid: i32, cpus: &CpuSet) -> Result<Vec<Change>, ManagerError> {
        self.pin_with(pid, cpus, None)
    }

    /// [`Manager::pin`], with a scheduling class for every thread while pinned (given
    /// back as a rule's is).
    pub fn pin_with(
        &mut self,
        pid: i32,
        cpus: &CpuSet,
        sched: Option<crate::affinity::sched::Sched>,
    ) -> Result<Vec<Change>, ManagerError> {
        let snap = self.process(pid).ok_or(ManagerError::NoProcess { pid })?;
        if snap.kernel_thread {
            return Err(ManagerError::KernelThread { pid });
        }
        if let Some(why) = super::protect::protected_at_runtime(pid, &snap.info.comm, self.own_pid)
        {
            return Err(ManagerError::Protected { pid, why });
        }
        let mut out = Vec::new();
        // An earlier pin or rule of this same process: its claim goes, but every mask it
        // remembered from first contact stays (the masks now on the threads are ours).
        let earlier = self
            .managed
            .remove(&pid)
            .filter(|m| m.handle.start_time == snap.start_time);
        let original = earlier.as_ref().map(|m| m.original.clone());
        if !self.start_managing(&snap, Source::Runtime(cpus.clone()), original) {
            return Err(ManagerError::NoProcess { pid });
        }
        if let Some(m) = self.managed.get_mut(&pid) {
            m.runtime_sched = sched;
        }
        if let (Some(earlier), Some(m)) = (earlier, self.managed.get_mut(&pid)) {
            for (tid, t) in earlier.threads {
                if t.released {
                    // Someone else's mask now: first contact again, like a new thread.
                    continue;
                }
                m.threads.insert(
                    tid,
                    ManagedThread {
                        placement: ThreadPlacement::Process,
                        slot: 0,
                        stale: true,
                        ..t
                    },
                );
            }
        }
        self.reconcile(snap, &mut out);
        Ok(out)
    }

    /// Ends a run-time pin: the process gets its original masks back (and rules apply
    /// again at the next look).
    pub fn unpin(&mut self, pid: i32) -> Result<Vec<Change>, ManagerError> {
        match self.managed.get(&pid) {
            Some(m) if matches!(m.source, Source::Runtime(_)) => {}
            _ => return Err(ManagerError::NotPinned { pid }),
        }
        let mut out = Vec::new();
        self.release(pid, "released at run time", &mut out);
        self.consider(pid, None, &mut out);
        Ok(out)
    }
}
