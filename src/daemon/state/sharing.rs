//! What the daemon changes beside thread masks, kept between events: interrupts moved
//! away, units held, the sched_ext scheduler seen, memory that follows its CPUs, knobs
//! set while CPUs are held. Each is a type declared and implemented in its own file
//! (`irqs.rs`, `holds.rs`, `following.rs`, `knobs.rs`; the sched_ext state here);
//! [`Sharing`]'s methods act on them, handed by the state what they need from the
//! other parts (`syncing.rs`, `sched_ext.rs`). Imports nothing of the state.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::affinity::AffinityOps;
use crate::cpuset::CpuSet;
use crate::hold::{HoldReport, Want};
use crate::memory::follow::{self, FollowJob};
use crate::metrics::MemoryCounters;
use crate::plan::SchedExtStep;
use crate::sched_ext::SchedExt;
use crate::sysroot::SysRoot;

use super::following::{self, Following};
use super::holds::Holds;
use super::irqs::IrqsAway;
use super::knobs::KnobsKept;

/// What the daemon changes beside thread masks.
#[derive(Debug, Default)]
pub(super) struct Sharing {
    /// IRQs moved off the CPUs of `irqs = "away"` rules (`state/irqs.rs`).
    pub(super) irqs: IrqsAway,
    /// Units held for `isolate` and `unit-cpuset` rules (`state/holds.rs`).
    pub(super) holds: Holds,
    /// Whether a sched_ext scheduler runs (`state/sched_ext.rs`).
    pub(super) sched_ext: SchedExtKept,
    /// `memory = "follow"`: the processes whose memory follows their CPUs
    /// (`state/following.rs`).
    pub(super) follow: Following,
    /// Idle limits, workqueue and kernel thread masks set while CPUs are held
    /// (`state/knobs.rs`).
    pub(super) knobs: KnobsKept,
}

/// What the daemon knows about sched_ext.
#[derive(Debug, Default)]
pub(super) struct SchedExtKept {
    /// The scheduler running now; `None` when none does.
    pub now: Option<SchedExt>,
    /// Rules already warned about while this scheduler runs (`warn`).
    pub warned: BTreeSet<String>,
}

impl Sharing {
    /// Sets the idle limits of `idle_limits` and keeps kernel work off `kernel_away`
    /// and the CPUs isolated for holds, giving back what is no longer held (`knobs.rs`);
    /// `recheck` looks at the kernel threads again.
    pub(super) fn sync_knobs(
        &mut self,
        root: &SysRoot,
        ops: &dyn AffinityOps,
        runtime_dir: &Path,
        (idle_limits, kernel_away): (Vec<(u32, CpuSet)>, CpuSet),
        recheck: bool,
    ) {
        let held = (idle_limits, kernel_away, self.holds.isolated_cpus());
        self.knobs.sync(root, ops, runtime_dir, held, recheck);
    }

    /// What `Explain` says of the knobs set on `held`.
    pub(super) fn knob_lines(&self, root: &SysRoot, held: &CpuSet) -> Vec<String> {
        self.knobs.lines(root, held)
    }

    /// Moves IRQs off `wanted` and back from the CPUs no longer wanted (`irqs.rs`), and
    /// tells irqbalance to keep off those and the CPUs isolated for holds; `recheck`
    /// looks for an irqbalance started since it was last told.
    pub(super) fn sync_irqs(
        &mut self,
        root: &SysRoot,
        runtime_dir: &Path,
        wanted: CpuSet,
        online: &CpuSet,
        recheck: bool,
    ) {
        self.irqs.sync(root, runtime_dir, wanted, online);
        let banned = self.irqs.away.union(&self.holds.isolated_cpus());
        self.irqs.tell_irqbalance(root, banned, recheck);
    }

    /// What to send the holder, when that changed or a hold is due to be tried again
    /// (`holds.rs`).
    pub(super) fn send_holds(&mut self, wants: Vec<Want>, now: Instant) -> Option<Vec<Want>> {
        self.holds.sending(wants, now)
    }

    /// What the holder did; true when a unit's CPUs changed (`holds.rs`).
    pub(super) fn holds_reported(&mut self, reports: Vec<HoldReport>) -> bool {
        self.holds.reported(reports)
    }

    /// The processes whose hold is not made yet.
    pub(super) fn unsettled(&self) -> BTreeSet<i32> {
        self.holds.unsettled()
    }

    /// The `held:` line of `Explain` for `pid`.
    pub(super) fn hold_line(&self, pid: u32) -> Option<String> {
        self.holds.line(pid)
    }

    /// The memory-follow jobs to start now (`following.rs`).
    pub(super) fn sync_follow(
        &mut self,
        now: following::Now<'_>,
        counts: &mut MemoryCounters,
    ) -> Vec<FollowJob> {
        self.follow.sync(now, counts)
    }

    /// A memory-follow job ended.
    pub(super) fn followed(&mut self, f: follow::Finished, counts: &mut MemoryCounters) {
        self.follow.ended(f, counts);
    }

    /// The `memory follow:` line of `Explain` for `pid`.
    pub(super) fn follow_line(&self, pid: i32, now: Instant, interval: Duration) -> String {
        self.follow.line(pid, now, interval)
    }

    /// Whether `pid`'s memory follows its CPUs, as pinned at run time.
    pub(super) fn set_follow(&mut self, pid: i32, follow: bool) {
        self.follow.set_runtime(pid, follow);
    }

    /// The sched_ext scheduler running, as read last.
    pub(super) fn sched_ext(&self) -> Option<&SchedExt> {
        self.sched_ext.now.as_ref()
    }

    /// The sched_ext state read now, a change: what was warned of is forgotten.
    pub(super) fn sched_ext_changed(&mut self, now: Option<SchedExt>) {
        self.sched_ext = SchedExtKept {
            now,
            warned: BTreeSet::new(),
        };
    }
}

impl SchedExtKept {
    /// Says what the `[sched-ext]` step of a plan did (`plan::making`): `pause`
    /// releasing the rules, and under `warn` each rule that pins a partial mask, once
    /// per rule while this scheduler runs.
    pub(super) fn say_step(&mut self, step: &SchedExtStep) {
        let Some(s) = &self.now else {
            return;
        };
        match step {
            SchedExtStep::Paused => {
                tracing::info!(scheduler = %s.ops, "sched-ext policy pause: rules released until the sched_ext scheduler {} stops", s.ops)
            }
            SchedExtStep::Warned(partial) => {
                for (rule, cpus) in partial {
                    if self.warned.insert(rule.clone()) {
                        tracing::warn!(
                            rule = %rule, cpus = %cpus, scheduler = %s.ops,
                            "rule {rule} pins a partial mask (CPUs {cpus}) while the sched_ext \
                             scheduler {} runs (set [sched-ext] policy = \"widen\" or \"pause\" \
                             to adapt)",
                            s.ops
                        );
                    }
                }
            }
            SchedExtStep::Widened | SchedExtStep::NoScheduler => {}
        }
    }
}
