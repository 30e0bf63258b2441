//! Interrupts away from the CPUs of `irqs = "away"` rules, kept in [`IrqsAway`]: moving
//! IRQs off the CPUs those rules hold now and back as that changes, the IRQ journal
//! (restored at start after a crash, and at stop), and irqbalance's banned CPUs. Handed
//! the root, the runtime directory and the CPUs; imports nothing of the state.

use std::path::Path;

use crate::cpuset::CpuSet;
use crate::irq;
use crate::sysroot::SysRoot;

use super::sharing::IrqsAway;

impl IrqsAway {
    /// At start: gives back what a previous run that died left moved.
    pub(super) fn recover(root: &SysRoot, runtime_dir: &Path) {
        let journal = irq::Journal::new(runtime_dir);
        match journal.load() {
            Ok(moved) if !moved.is_empty() => {
                let failed = irq::restore(root, &moved);
                for (n, why) in &failed {
                    tracing::warn!(irq = n, %why, "IRQ {n}: its mask left by a previous run not restored: {why}");
                }
                tracing::info!(
                    irqs = moved.len(),
                    failed = failed.len(),
                    "IRQ masks left by a previous run restored: {} IRQs given back, {} not",
                    moved.len().saturating_sub(failed.len()),
                    failed.len()
                );
                if let Err(e) = journal.save(&[]) {
                    tracing::warn!(error = %e, "cannot clear the IRQ journal: {e}");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "IRQ journal not used: {e}"),
        }
    }

    /// Moves IRQs off `wanted`, the CPUs `irqs = "away"` rules hold now, and back from
    /// CPUs they let go; `online` are the CPUs they may go to. Called after every
    /// manager change; does nothing while those CPUs stay.
    pub(super) fn sync(
        &mut self,
        root: &SysRoot,
        runtime_dir: &Path,
        wanted: CpuSet,
        online: &CpuSet,
    ) {
        if wanted == self.away {
            return;
        }
        let journal = irq::Journal::new(runtime_dir);
        for (n, why) in irq::restore(root, &self.moved) {
            tracing::warn!(irq = n, %why, "IRQ mask not restored: IRQ {n}: {why}");
        }
        self.moved.clear();
        if !wanted.is_empty() {
            // On record before the first write: a crash halfway leaves nothing unknown.
            if let Ok(plan) = irq::plan_away(root, &wanted, online) {
                if let Err(e) = journal.save(&plan.moved) {
                    tracing::warn!(error = %e, "cannot write the IRQ journal: {e}");
                }
            }
            match irq::move_away(root, &wanted, online) {
                Ok(away) => {
                    for (n, why) in &away.unmovable {
                        if self.reported.insert(*n) {
                            tracing::warn!(irq = n, %why, cpus = %wanted,
                                "IRQ {n} cannot leave CPUs {wanted}, those of an irqs = \"away\" rule: {why}");
                        }
                    }
                    tracing::info!(
                        cpus = %wanted, moved = away.moved.len(), unmovable = away.unmovable.len(),
                        "IRQs moved away from CPUs {wanted}: {} moved, {} could not move",
                        away.moved.len(), away.unmovable.len()
                    );
                    self.moved = away.moved;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot move IRQs away from CPUs {wanted}: {e}")
                }
            }
        } else {
            tracing::info!(cpus = %self.away, "IRQs given back to CPUs {}", self.away);
        }
        if let Err(e) = journal.save(&self.moved) {
            tracing::warn!(error = %e, "cannot write the IRQ journal: {e}");
        }
        if let Some(pid) = irq::irqbalance_pid(root) {
            match irq::irqbalance_ban(pid, &wanted) {
                Ok(()) => {
                    tracing::info!(pid, banned = %wanted, "irqbalance (pid {pid}) told to keep IRQs off CPUs {wanted}")
                }
                Err(e) => {
                    tracing::warn!(pid, error = %e, "cannot tell irqbalance the banned CPUs: it may move IRQs back (pid {pid}: {e})")
                }
            }
        }
        self.away = wanted;
    }

    /// At stop: every IRQ moved goes back.
    pub(super) fn release(&mut self, root: &SysRoot, runtime_dir: &Path) {
        if self.away.is_empty() {
            return;
        }
        for (n, why) in irq::restore(root, &self.moved) {
            tracing::warn!(irq = n, %why, "IRQ mask not restored: IRQ {n}: {why}");
        }
        self.moved.clear();
        if let Err(e) = irq::Journal::new(runtime_dir).save(&[]) {
            tracing::warn!(error = %e, "cannot clear the IRQ journal: {e}");
        }
        if let Some(pid) = irq::irqbalance_pid(root) {
            if let Err(e) = irq::irqbalance_ban(pid, &CpuSet::new()) {
                tracing::warn!(pid, error = %e, "cannot lift irqbalance's ban (pid {pid}): {e}");
            }
        }
        self.away = CpuSet::new();
    }
}
