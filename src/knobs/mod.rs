//! Knobs set while CPUs are held and given back after: the per-CPU resume-latency
//! limits of `idle-limit-us` rules (`idle`), the unbound workqueues' cpumasks and the
//! unbound kernel threads' masks kept off `exclusive` CPUs (`kthreads`).
//!
//! ```text
//!   wanted knobs (idle::wanted, kthreads::wanted) ─► Knobs::sync ─► knobs.json, then writes
//!   hold ended / rule changed / stop ─► Knobs::sync(nothing) or release ─► values before
//!   start after a crash ─► Knobs::recover ─► values before (from knobs.json)
//! ```
//!
//! Owns: what was there before each knob was first set, and what was written; the
//! journal `knobs.json` in the runtime directory, written before every write, so a
//! daemon dying halfway leaves every knob it may have changed on record.
//! Must not touch: which CPUs are held (the state hands them in), thread masks of
//! managed processes (`manager`), IRQs (`irq`).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::affinity::AffinityOps;
use crate::cpuset::CpuSet;
use crate::journal::ListFile;
use crate::sysroot::SysRoot;

pub mod idle;
pub mod kthreads;

/// File name of the knob journal under the runtime directory.
pub const JOURNAL_FILE: &str = "knobs.json";

/// One thing set while CPUs are held.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Knob {
    /// A sysfs file holding a word (`pm_qos_resume_latency_us`), relative to the sysfs
    /// root; compared as text.
    File { path: String },
    /// A sysfs file holding a hexadecimal CPU mask (a workqueue's `cpumask`), relative
    /// to the sysfs root; compared as CPUs (the kernel pads and groups the digits).
    Mask { path: String },
    /// The CPU mask of a kernel thread, as a CPU list; `start_time` tells a reused pid
    /// from the thread, which is never touched then.
    Kthread {
        pid: i32,
        start_time: u64,
        comm: String,
    },
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Knob::File { path } | Knob::Mask { path } => write!(f, "/sys/{path}"),
            Knob::Kthread { pid, comm, .. } => write!(f, "kernel thread {comm} (pid {pid})"),
        }
    }
}

/// A knob to set, and the value it should be given back (`None`: what it holds before
/// it is first set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub knob: Knob,
    pub value: String,
    /// Given back instead of what was there: a kernel thread's node CPUs, when a
    /// partition change had already widened its mask (`kthreads`).
    pub before: Option<String>,
}

/// A knob set: what it held before and what it read back after the write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub knob: Knob,
    pub before: String,
    pub wrote: String,
}

/// A knob could not be read or written; every error names it.
#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    #[error("{knob}: {message}")]
    Io { knob: Knob, message: String },
    /// The kernel thread exited, or its pid is another task's now.
    #[error("{knob}: gone")]
    Gone { knob: Knob },
}

/// Reads and writes knobs: sysfs files under the root, kernel threads' masks through the
/// affinity seam (a recording fake in tests).
pub struct Io<'a> {
    pub root: &'a SysRoot,
    pub ops: &'a dyn AffinityOps,
}

impl Io<'_> {
    /// The knob's value now.
    pub fn read(&self, knob: &Knob) -> Result<String, KnobError> {
        let io = |message: String| KnobError::Io {
            knob: knob.clone(),
            message,
        };
        match knob {
            Knob::File { path } | Knob::Mask { path } => {
                crate::sysroot::read_bounded(self.root.sys_path(path))
                    .map(|s| s.trim().to_string())
                    .map_err(|e| io(e.to_string()))
            }
            Knob::Kthread { pid, .. } => {
                self.same_thread(knob)?;
                self.ops
                    .get_affinity(*pid)
                    .map(|c| c.to_string())
                    .map_err(|e| io(e.to_string()))
            }
        }
    }

    /// Writes `value`, then reads it back (the kernel's own spelling).
    pub fn write(&self, knob: &Knob, value: &str) -> Result<String, KnobError> {
        let io = |message: String| KnobError::Io {
            knob: knob.clone(),
            message,
        };
        match knob {
            Knob::File { path } | Knob::Mask { path } => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(self.root.sys_path(path))
                    .map_err(|e| io(sandboxed(e)))?;
                f.write_all(format!("{value}\n").as_bytes())
                    .map_err(|e| io(format!("cannot write {value:?}: {e}")))?;
            }
            Knob::Kthread { pid, .. } => {
                self.same_thread(knob)?;
                let cpus: CpuSet = value.parse().map_err(|e| io(format!("{e}")))?;
                self.ops
                    .set_affinity(*pid, &cpus)
                    .map_err(|e| io(format!("cannot set CPUs {cpus}: {e}")))?;
            }
        }
        self.read(knob)
    }

    /// A kernel thread knob names the thread that runs under its pid now.
    fn same_thread(&self, knob: &Knob) -> Result<(), KnobError> {
        if let Knob::Kthread {
            pid, start_time, ..
        } = knob
        {
            let stat = crate::sysroot::read_bounded(self.root.proc_path(format!("{pid}/stat")))
                .ok()
                .and_then(|t| crate::affinity::parse_stat(&t));
            if stat.is_none_or(|s| s.start_time != *start_time) {
                return Err(KnobError::Gone { knob: knob.clone() });
            }
        }
        Ok(())
    }
}

/// An error opening a knob, with what to do when the unit's sandbox keeps it read-only.
fn sandboxed(e: std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EROFS) {
        format!(
            "{e}: the service's sandbox keeps it read-only (a drop-in with ReadWritePaths= \
             for it allows it: docs/sharing.md)"
        )
    } else {
        e.to_string()
    }
}

/// Whether two values of `knob` are the same setting.
fn same(knob: &Knob, a: &str, b: &str) -> bool {
    match knob {
        Knob::File { .. } => a.trim() == b.trim(),
        Knob::Mask { .. } => match (CpuSet::parse_hex_mask(a), CpuSet::parse_hex_mask(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => a.trim() == b.trim(),
        },
        Knob::Kthread { .. } => match (a.parse::<CpuSet>(), b.parse::<CpuSet>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a.trim() == b.trim(),
        },
    }
}

/// The journal of knobs: what to give back if the daemon dies.
#[derive(Debug, Clone)]
pub struct Journal(ListFile<Kept>);

impl Journal {
    pub fn new(runtime_dir: &Path) -> Journal {
        Journal(ListFile::new(runtime_dir, JOURNAL_FILE, "knob journal"))
    }

    fn save(&self, kept: &[Kept]) {
        if let Err(e) = self.0.save(kept) {
            tracing::warn!(error = %e, "cannot write the knob journal: {e}");
        }
    }
}

/// What one sync or release did, for the log and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Knobs set now: the knob, its value before, the value set.
    pub set: Vec<(Knob, String, String)>,
    /// Knobs given back: the knob and the value it holds again.
    pub given_back: Vec<(Knob, String)>,
    /// Knobs that could not be set or given back, and why.
    pub failed: Vec<String>,
}

/// The knobs set now.
#[derive(Debug, Default)]
pub struct Knobs {
    kept: BTreeMap<Knob, Kept>,
}

impl Knobs {
    /// What `knob` held before it was set, while it is.
    pub fn before(&self, knob: &Knob) -> Option<&str> {
        self.kept.get(knob).map(|k| k.before.as_str())
    }

    /// Every knob set now.
    pub fn kept(&self) -> impl Iterator<Item = &Kept> {
        self.kept.values()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Sets every knob of `wanted` and gives back every knob set before that is not
    /// wanted now. A knob that already holds its value is not written (nor kept: the
    /// kernel did it, `isolate`'s workqueues). The journal holds every knob about to be
    /// written before the first write.
    pub fn sync(&mut self, io: &Io<'_>, journal: &Journal, wanted: Vec<Want>) -> Done {
        let mut done = Done::default();
        let wanted: BTreeMap<Knob, Want> =
            wanted.into_iter().map(|w| (w.knob.clone(), w)).collect();
        let gone: Vec<Knob> = self
            .kept
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for knob in gone {
            let kept = self.kept.remove(&knob).expect("listed");
            give_back(io, &kept, &mut done);
        }
        // What is to be written, with what it holds now, on record first.
        let mut writes = Vec::new();
        for (knob, want) in wanted {
            if let Some(k) = self.kept.get(&knob) {
                if same(&knob, &k.wrote, &want.value) {
                    continue;
                }
            }
            let now = match io.read(&knob) {
                Ok(v) => v,
                Err(KnobError::Gone { .. }) => {
                    self.kept.remove(&knob);
                    continue;
                }
                Err(e) => {
                    done.failed.push(e.to_string());
                    continue;
                }
            };
            if !self.kept.contains_key(&knob) && same(&knob, &now, &want.value) {
                continue;
            }
            let before = match self.kept.get(&knob) {
                Some(k) => k.before.clone(),
                None => want.before.clone().unwrap_or(now),
            };
            self.kept.insert(
                knob.clone(),
                Kept {
                    knob: knob.clone(),
                    before,
                    wrote: want.value.clone(),
                },
            );
            writes.push((knob, want.value));
        }
        if !writes.is_empty() || !done.given_back.is_empty() || !done.failed.is_empty() {
            journal.save(&self.kept.values().cloned().collect::<Vec<_>>());
        }
        let wrote_any = !writes.is_empty();
        for (knob, value) in writes {
            match io.write(&knob, &value) {
                Ok(read_back) => {
                    let k = self.kept.get_mut(&knob).expect("kept above");
                    k.wrote = read_back.clone();
                    done.set.push((knob, k.before.clone(), read_back));
                }
                Err(e) => {
                    // Not changed: nothing to give back.
                    self.kept.remove(&knob);
                    done.failed.push(e.to_string());
                }
            }
        }
        if wrote_any {
            journal.save(&self.kept.values().cloned().collect::<Vec<_>>());
        }
        done
    }

    /// At stop: every knob given back, the journal cleared.
    pub fn release(&mut self, io: &Io<'_>, journal: &Journal) -> Done {
        let mut done = Done::default();
        for (_, kept) in std::mem::take(&mut self.kept) {
            give_back(io, &kept, &mut done);
        }
        journal.save(&[]);
        done
    }

    /// At start: gives back what a previous run that died left set.
    pub fn recover(io: &Io<'_>, journal: &Journal) -> Result<Done, String> {
        let kept = journal.0.load().map_err(|e| e.to_string())?;
        let mut done = Done::default();
        for k in &kept {
            give_back(io, k, &mut done);
        }
        if !kept.is_empty() {
            journal.save(&[]);
        }
        Ok(done)
    }
}

fn give_back(io: &Io<'_>, kept: &Kept, done: &mut Done) {
    match io.write(&kept.knob, &kept.before) {
        Ok(now) => done.given_back.push((kept.knob.clone(), now)),
        Err(KnobError::Gone { .. }) => {}
        Err(e) => done.failed.push(e.to_string()),
    }
}

/// Logs what a sync, release or recovery did.
pub fn log(done: &Done, why: &str) {
    for (knob, before, now) in &done.set {
        tracing::info!(knob = %knob, before = %before, now = %now, "{knob} set to {now} (was {before}): {why}");
    }
    for (knob, now) in &done.given_back {
        tracing::info!(knob = %knob, now = %now, "{knob} given back: {now}");
    }
    for f in &done.failed {
        tracing::warn!(problem = %f, "{f}");
    }
}

#[cfg(test)]
mod tests;
