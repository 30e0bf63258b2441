//! What the daemon changes beside thread masks, kept between events: interrupts moved
//! away, units held, the sched_ext scheduler seen, memory that follows its CPUs. The
//! state acts on them (`irqs.rs`, `holds.rs`, `sched_ext.rs`, `following.rs`); this
//! file only holds them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::affinity::AffinityOps;
use crate::cpuset::CpuSet;
use crate::hold::{HoldReport, Want};
use crate::irq::Moved;
use crate::memory::follow::{self, FollowJob, Outcome};
use crate::metrics::MemoryCounters;
use crate::plan::SchedExtStep;
use crate::sched_ext::SchedExt;
use crate::sysroot::SysRoot;

use super::following;

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

/// What the knobs are set for: each `idle-limit-us` rule's limit and CPUs, the CPUs
/// kernel work keeps off, the CPUs isolated for holds.
pub(super) type HeldNow = (Vec<(u32, CpuSet)>, CpuSet, CpuSet);

/// What the daemon set beside thread masks while CPUs are held (`knobs`).
#[derive(Debug, Default)]
pub(super) struct KnobsKept {
    pub(super) knobs: crate::knobs::Knobs,
    /// What the last sync was for: the idle limits of the CPUs held, the CPUs kernel work
    /// keeps off, the CPUs isolated for holds.
    pub(super) for_: Option<HeldNow>,
    /// What was said once and not again while it stays: CPUs without a resume-latency
    /// file, masks left alone.
    pub(super) said: BTreeSet<String>,
}

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

/// What the daemon asked the holder for and what it said.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The wants last sent; `None` before the first.
    pub(super) sent: Option<Vec<Want>>,
    /// The holder's last report per managed pid.
    pub(super) reports: BTreeMap<u32, HoldReport>,
    /// Problems already logged (rule, pid, line): said once, not at every report.
    pub(super) logged: BTreeSet<(String, u32, String)>,
    /// While a hold has a problem, the same wants are sent again from then on (a unit
    /// not found yet, systemd not reachable yet).
    pub(super) retry_at: Option<Instant>,
    /// CPUs the kernel kept isolated after a partition was released (the holder's
    /// lines), for `status` and `explain`.
    pub(super) notes: Vec<String>,
}

/// What the daemon knows about sched_ext.
#[derive(Debug, Default)]
pub(super) struct SchedExtKept {
    /// The scheduler running now; `None` when none does.
    pub now: Option<SchedExt>,
    /// Rules already warned about while this scheduler runs (`warn`).
    pub warned: BTreeSet<String>,
}

/// One process whose memory follows its CPUs.
#[derive(Debug, Default)]
pub(super) struct Entry {
    /// The nodes its memory was last moved to (or found on); empty: not yet.
    pub(super) done_for: BTreeSet<u32>,
    /// A job runs for it now, towards these nodes.
    pub(super) running: Option<BTreeSet<u32>>,
    /// When its last job ended.
    pub(super) last_at: Option<Instant>,
    /// What its last job did.
    pub(super) last: Option<Outcome>,
    /// Its CPUs moved to these nodes, and the interval holds the next job back.
    pub(super) waiting: Option<BTreeSet<u32>>,
}

/// Every following process.
#[derive(Debug, Default)]
pub(super) struct Following {
    pub(super) entries: BTreeMap<i32, Entry>,
    /// Processes pinned at run time with `memory = "follow"`.
    pub(super) runtime: BTreeSet<i32>,
    /// The processes whose jobs are queued, in the order they were queued: the shell's
    /// [`follow::MoveQueue`] runs them one at a time in this order, so the first is
    /// moving and the others wait.
    pub(super) queued: VecDeque<i32>,
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

impl Following {
    /// Whether the memory of `pid`, pinned at run time, follows its CPUs.
    pub(super) fn set_runtime(&mut self, pid: i32, follow: bool) {
        if follow {
            self.runtime.insert(pid);
        } else {
            self.runtime.remove(&pid);
        }
    }
}

impl Holds {
    /// The CPUs isolated for holds now (the holder's last reports).
    pub(super) fn isolated_cpus(&self) -> CpuSet {
        self.reports
            .values()
            .filter(|r| r.isolated)
            .fold(CpuSet::new(), |a, r| a.union(&r.cpus))
    }

    /// For `status`: units confined, CPUs isolated, holds refused.
    pub(super) fn summary(&self) -> Option<String> {
        if self.reports.is_empty() {
            return (!self.notes.is_empty()).then(|| self.notes.join("; "));
        }
        let confined = self.reports.values().filter(|r| r.confined).count();
        let isolated = self.isolated_cpus();
        let mut s = format!("{} confined", crate::words::count(confined, "unit"));
        if !isolated.is_empty() {
            s.push_str(&format!(", CPUs {isolated} isolated"));
        }
        // Each distinct reason once, by rule: what `check` and the log say, no pids.
        let problems: std::collections::BTreeSet<String> = self
            .reports
            .values()
            .filter(|r| r.problem.is_some())
            .map(|r| {
                let line = r.line();
                format!("rule {}: {line}", r.rule)
            })
            .collect();
        for p in problems.iter().chain(self.notes.iter()) {
            s.push_str(&format!("; {p}"));
        }
        Some(s)
    }

    /// The hold line for `explain`: what is held for `pid` and how, or why not, and
    /// what the kernel kept isolated after a release.
    pub(super) fn line(&self, pid: u32) -> Option<String> {
        self.reports.get(&pid).map(|r| {
            let mut line = r.line();
            for n in &self.notes {
                line.push_str(&format!("; {n}"));
            }
            line
        })
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
