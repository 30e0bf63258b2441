//! Interrupts away from the CPUs of `irqs = "away"` rules, kept in [`IrqsAway`]: moving
//! IRQs off the CPUs those rules hold now and back as that changes, the IRQ journal
//! (restored at start after a crash, and at stop), and irqbalance's banned CPUs (those
//! and the CPUs isolated for holds, told again when irqbalance restarts). Handed
//! the root, the runtime directory and the CPUs; imports nothing of the state.

use std::collections::BTreeSet;
use std::path::Path;

use crate::cpuset::CpuSet;
use crate::irq::{self, Moved};
use crate::sysroot::SysRoot;

/// What the daemon has done to interrupts.
#[derive(Debug, Default)]
pub(super) struct IrqsAway {
    /// The CPUs IRQs were moved off.
    pub(super) away: CpuSet,
    /// The IRQs moved, with their masks before (restored when the CPUs are let go).
    pub(super) moved: Vec<Moved>,
    /// IRQs already reported as unmovable: said once, not retried in a loop.
    pub(super) reported: BTreeSet<u32>,
    /// The CPUs irqbalance is to keep IRQs off: those of `irqs = "away"` rules and those
    /// isolated for holds (it reads only the boot's isolated CPUs by itself).
    pub(super) banned: CpuSet,
    /// The irqbalance told and what it was told; told again when either changes.
    pub(super) told: Option<(i32, CpuSet)>,
}

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
        self.away = wanted;
    }

    /// Tells a running irqbalance to keep IRQs off `banned` (the CPUs of `irqs = "away"`
    /// rules and those isolated for holds) when that changed since it was last told —
    /// or, with `recheck`, when irqbalance is another process than the one told (it
    /// restarted, and starts from its own settings). Without `recheck` an unchanged
    /// `banned` costs nothing (no look at /proc): called after every manager change.
    pub(super) fn tell_irqbalance(&mut self, root: &SysRoot, banned: CpuSet, recheck: bool) {
        if !recheck && banned == self.banned {
            return;
        }
        self.banned = banned;
        let Some(pid) = irq::irqbalance_pid(root) else {
            self.told = None;
            return;
        };
        let banned = &self.banned;
        // A new irqbalance bans nothing of ours: nothing to tell it while nothing is.
        let told = self.told.as_ref().map_or(banned.is_empty(), |(p, cpus)| {
            cpus == banned && (*p == pid || banned.is_empty())
        });
        if told {
            return;
        }
        match irq::irqbalance_ban(pid, banned) {
            Ok(()) if banned.is_empty() => {
                tracing::info!(
                    pid,
                    "irqbalance (pid {pid}) told it may use every CPU again"
                );
                self.told = Some((pid, banned.clone()));
            }
            Ok(()) => {
                tracing::info!(pid, banned = %banned, "irqbalance (pid {pid}) told to keep IRQs off CPUs {banned}");
                self.told = Some((pid, banned.clone()));
            }
            Err(e) => {
                tracing::warn!(pid, error = %e, "cannot tell irqbalance (pid {pid}) to keep IRQs off CPUs {banned}: {e}; it may move IRQs there (tried again at the next check)")
            }
        }
    }

    /// At stop: every IRQ moved goes back, and irqbalance may use every CPU again.
    pub(super) fn release(&mut self, root: &SysRoot, runtime_dir: &Path) {
        self.tell_irqbalance(root, CpuSet::new(), true);
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
        self.away = CpuSet::new();
    }
}

/// A stand-in irqbalance for the tests of the state.
#[cfg(test)]
pub(super) mod fake {
    use std::io::Read;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    use std::path::Path;
    use std::sync::mpsc;

    /// A stand-in irqbalance: `proc/PID/comm` of a fixture root names it, and it listens
    /// on the abstract socket irqbalance reads its settings from, sending on what it is
    /// told. Its pid is made up (no process has /run/irqbalance/irqbalancePID.sock).
    pub(in crate::daemon::state) struct FakeIrqbalance {
        told: mpsc::Receiver<String>,
    }

    impl FakeIrqbalance {
        pub(in crate::daemon::state) fn start(proc_root: &Path, pid: i32) -> FakeIrqbalance {
            let dir = proc_root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), "irqbalance\n").unwrap();
            let name = format!("irqbalance{pid}.sock");
            let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            let listener = UnixListener::bind_addr(&addr).unwrap();
            let (tx, told) = mpsc::channel();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let mut line = String::new();
                    conn.unwrap().read_to_string(&mut line).unwrap();
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
            FakeIrqbalance { told }
        }

        /// What it was told next.
        pub(in crate::daemon::state) fn next(&self) -> String {
            self.told
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("irqbalance told nothing")
        }
    }

    /// A pid no process of this machine has, unique per test run.
    pub(in crate::daemon::state) fn pid(n: i32) -> i32 {
        3_000_000 + (std::process::id() as i32 % 100_000) * 10 + n
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{pid as fake_pid, FakeIrqbalance};
    use super::*;
    use crate::cpuset::set;

    #[test]
    fn irqbalance_is_told_what_to_keep_off_when_it_changes_and_again_when_it_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::machine(dir.path());
        let procs = dir.path().join("proc");
        let first_pid = fake_pid(1);
        let first = FakeIrqbalance::start(&procs, first_pid);
        let mut irqs = IrqsAway::default();
        // Nothing banned and nothing told yet: nothing to say.
        irqs.tell_irqbalance(&root, CpuSet::new(), true);
        assert_eq!(irqs.told, None);
        irqs.tell_irqbalance(&root, set("6-7"), false);
        assert_eq!(first.next(), "settings cpus 6-7");
        // The same CPUs: not again, whether or not it looks for a new irqbalance (the
        // next thing it hears is the change).
        irqs.tell_irqbalance(&root, set("6-7"), false);
        irqs.tell_irqbalance(&root, set("6-7"), true);
        irqs.tell_irqbalance(&root, set("4-7"), false);
        assert_eq!(first.next(), "settings cpus 4-7");
        // irqbalance restarted (another pid): only a look finds it, and tells it again.
        std::fs::remove_dir_all(procs.join(first_pid.to_string())).unwrap();
        let second_pid = fake_pid(2);
        let second = FakeIrqbalance::start(&procs, second_pid);
        irqs.tell_irqbalance(&root, set("4-7"), false);
        assert_eq!(
            irqs.told,
            Some((first_pid, set("4-7"))),
            "told without a look"
        );
        irqs.tell_irqbalance(&root, set("4-7"), true);
        assert_eq!(second.next(), "settings cpus 4-7");
        assert_eq!(irqs.told, Some((second_pid, set("4-7"))));
        // Let go: it may use every CPU again.
        irqs.tell_irqbalance(&root, CpuSet::new(), false);
        assert_eq!(second.next(), "settings cpus NULL");
    }
}
