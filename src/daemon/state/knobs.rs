//! Knobs set while CPUs are held (`knobs`), kept in [`KnobsKept`]: the resume-latency
//! limits of `idle-limit-us` rules, unbound workqueues and kernel threads off the CPUs
//! of `exclusive` rules, each given back when the hold ends, the rule changes, the
//! daemon stops, or at the next start after a crash (`knobs.json`). Handed the root,
//! the affinity seam, the runtime directory and what is held; imports nothing of the
//! state.

use std::collections::BTreeSet;
use std::path::Path;

use crate::affinity::AffinityOps;
use crate::cpuset::CpuSet;
use crate::knobs::{self, idle, kthreads, Io, Journal, Knobs};
use crate::sysroot::SysRoot;

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

impl KnobsKept {
    /// At start: gives back what a previous run that died left set.
    pub(super) fn recover(root: &SysRoot, ops: &dyn AffinityOps, runtime_dir: &Path) {
        let io = Io { root, ops };
        match Knobs::recover(&io, &Journal::new(runtime_dir)) {
            Ok(done) => {
                if !done.given_back.is_empty() || !done.failed.is_empty() {
                    tracing::info!(
                        given_back = done.given_back.len(),
                        failed = done.failed.len(),
                        "knobs left set by a previous run: {} given back, {} not",
                        done.given_back.len(),
                        done.failed.len()
                    );
                }
                knobs::log(&done, "left by a previous run");
            }
            Err(e) => tracing::error!(error = %e, "knob journal not used: {e}"),
        }
    }

    /// Sets the knobs for what is held now (`idle`: each `idle-limit-us` rule's limit
    /// and CPUs; `away`: the CPUs kernel work keeps off; `isolated`: the CPUs isolated
    /// for holds) and gives back the others. Does nothing while those stay, unless
    /// `recheck` (new kernel threads, a partition change that widened a per-node
    /// thread: the minute's check, a hold's report).
    pub(super) fn sync(
        &mut self,
        root: &SysRoot,
        ops: &dyn AffinityOps,
        runtime_dir: &Path,
        held: HeldNow,
        recheck: bool,
    ) {
        if !recheck && self.for_.as_ref() == Some(&held) {
            return;
        }
        // A partition made or released since the last look may have widened a per-node
        // kernel thread.
        let partitions = !held.2.is_empty()
            || self
                .for_
                .as_ref()
                .is_some_and(|(_, _, was)| !was.is_empty());
        let now = held;
        let (idle, away, _) = &now;
        let (mut wants, missing) = idle::wanted(root, idle);
        if !missing.is_empty() {
            self.say(format!(
                "CPUs {missing} have no resume-latency limit file \
                 (devices/system/cpu/cpuN/power/pm_qos_resume_latency_us): idle-limit-us \
                 cannot be set there"
            ));
        }
        let k = kthreads::wanted(root, ops, away, &self.knobs, partitions);
        for n in k.notes {
            self.say(n);
        }
        wants.extend(k.wants);
        let io = Io { root, ops };
        let done = self.knobs.sync(&io, &Journal::new(runtime_dir), wants);
        knobs::log(&done, "held CPUs");
        self.for_ = Some(now);
    }

    /// Says `line` once while it stays true.
    fn say(&mut self, line: String) {
        if self.said.insert(line.clone()) {
            tracing::warn!("{line}");
        }
    }

    /// At stop: every knob given back.
    pub(super) fn release(&mut self, root: &SysRoot, ops: &dyn AffinityOps, runtime_dir: &Path) {
        let io = Io { root, ops };
        let done = self.knobs.release(&io, &Journal::new(runtime_dir));
        knobs::log(&done, "stopping");
        self.for_ = None;
    }

    /// The lines `explain` shows for CPUs a process holds: each CPU's idle states under
    /// its limit, and the knobs set on its behalf.
    pub(super) fn lines(&self, root: &SysRoot, held: &CpuSet) -> Vec<String> {
        let mut out: Vec<String> = held
            .iter()
            .map(|cpu| format!("idle: {}", idle::line(root, cpu)))
            .collect();
        let away = self
            .for_
            .as_ref()
            .map(|(_, a, _)| a.clone())
            .unwrap_or_default();
        if !away.intersection(held).is_empty() {
            let (mut masks, mut threads) = (0, 0);
            for k in self.knobs.kept() {
                match k.knob {
                    knobs::Knob::Kthread { .. } => threads += 1,
                    knobs::Knob::Mask { .. } => masks += 1,
                    knobs::Knob::File { .. } => {}
                }
            }
            out.push(format!(
                "kernel work: kept off CPUs {away}: {} and {} narrowed",
                crate::words::count(masks, "workqueue mask"),
                crate::words::count(threads, "kernel thread")
            ));
        }
        out
    }
}
