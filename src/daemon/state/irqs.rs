//! Interrupts away from the CPUs of `irqs = "away"` rules, for [`State`]: which CPUs
//! they hold now, moving IRQs off them and back as that changes, the IRQ journal
//! (restored at start after a crash, and at stop), and irqbalance's banned CPUs.
//! Split from `state/mod.rs` to keep each file readable; same state, same loop.

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;
use crate::irq;

use super::State;

impl State {
    /// The CPUs of `irqs = "away"` rules that hold CPUs with a managed process now.
    fn irqs_wanted_away(&self) -> CpuSet {
        let Some(m) = &self.managed.manager else {
            return CpuSet::new();
        };
        if !m.rules().rules().iter().any(|r| r.irqs_away) {
            return CpuSet::new();
        }
        let holding: BTreeSet<String> = m.list_managed().into_iter().map(|r| r.rule).collect();
        let rules: BTreeSet<&str> = m
            .rules()
            .rules()
            .iter()
            .filter(|r| r.irqs_away && holding.contains(&r.name))
            .map(|r| r.name.as_str())
            .collect();
        m.plan()
            .units()
            .iter()
            .filter(|u| rules.contains(u.rule.as_str()))
            .fold(CpuSet::new(), |acc, u| acc.union(&u.state.held()))
    }

    /// At start: gives back what a previous run that died left moved.
    pub(super) fn recover_irqs(&mut self) {
        let journal = irq::Journal::new(&self.cfg.runtime_dir);
        match journal.load() {
            Ok(moved) if !moved.is_empty() => {
                let failed = irq::restore(&self.cfg.sysroot, &moved);
                for (n, why) in &failed {
                    tracing::warn!(irq = n, %why, "IRQ mask left by a previous run not restored");
                }
                tracing::info!(
                    irqs = moved.len(),
                    failed = failed.len(),
                    "IRQ masks left by a previous run restored"
                );
                if let Err(e) = journal.save(&[]) {
                    tracing::warn!(error = %e, "cannot clear the IRQ journal");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "IRQ journal not used"),
        }
    }

    /// Moves IRQs off the CPUs `irqs = "away"` rules hold now, and back from CPUs they
    /// let go. Called after every manager change; does nothing while those CPUs stay.
    pub(super) fn sync_irqs(&mut self) {
        let wanted = self.irqs_wanted_away();
        if wanted == self.sharing.irqs.away {
            return;
        }
        let root = self.cfg.sysroot.clone();
        let journal = irq::Journal::new(&self.cfg.runtime_dir);
        for (n, why) in irq::restore(&root, &self.sharing.irqs.moved) {
            tracing::warn!(irq = n, %why, "IRQ mask not restored");
        }
        self.sharing.irqs.moved.clear();
        if !wanted.is_empty() {
            // On record before the first write: a crash halfway leaves nothing unknown.
            if let Ok(plan) = irq::plan_away(&root, &wanted, &self.machine.online()) {
                if let Err(e) = journal.save(&plan.moved) {
                    tracing::warn!(error = %e, "cannot write the IRQ journal");
                }
            }
            match irq::move_away(&root, &wanted, &self.machine.online()) {
                Ok(away) => {
                    for (n, why) in &away.unmovable {
                        if self.sharing.irqs.reported.insert(*n) {
                            tracing::warn!(irq = n, %why, cpus = %wanted, "IRQ cannot leave the CPUs of an irqs = \"away\" rule");
                        }
                    }
                    tracing::info!(cpus = %wanted, moved = away.moved.len(), unmovable = away.unmovable.len(), "IRQs moved away");
                    self.sharing.irqs.moved = away.moved;
                }
                Err(e) => tracing::warn!(error = %e, "cannot move IRQs"),
            }
        } else {
            tracing::info!(cpus = %self.sharing.irqs.away, "IRQs given back");
        }
        if let Err(e) = journal.save(&self.sharing.irqs.moved) {
            tracing::warn!(error = %e, "cannot write the IRQ journal");
        }
        if let Some(pid) = irq::irqbalance_pid(&root) {
            match irq::irqbalance_ban(pid, &wanted) {
                Ok(()) => tracing::info!(pid, banned = %wanted, "irqbalance told the banned CPUs"),
                Err(e) => {
                    tracing::warn!(pid, error = %e, "cannot tell irqbalance the banned CPUs: it may move IRQs back")
                }
            }
        }
        self.sharing.irqs.away = wanted;
    }

    /// At stop: every IRQ moved goes back.
    pub(super) fn release_irqs(&mut self) {
        if self.sharing.irqs.away.is_empty() {
            return;
        }
        for (n, why) in irq::restore(&self.cfg.sysroot, &self.sharing.irqs.moved) {
            tracing::warn!(irq = n, %why, "IRQ mask not restored");
        }
        self.sharing.irqs.moved.clear();
        if let Err(e) = irq::Journal::new(&self.cfg.runtime_dir).save(&[]) {
            tracing::warn!(error = %e, "cannot clear the IRQ journal");
        }
        if let Some(pid) = irq::irqbalance_pid(&self.cfg.sysroot) {
            if let Err(e) = irq::irqbalance_ban(pid, &CpuSet::new()) {
                tracing::warn!(pid, error = %e, "cannot lift irqbalance's ban");
            }
        }
        self.sharing.irqs.away = CpuSet::new();
    }
}
