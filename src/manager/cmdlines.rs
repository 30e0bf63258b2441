//! Command lines, read off the loop. Reading `/proc/PID/cmdline` takes the process's
//! memory-map lock, which its owner can keep busy (an `mprotect` loop, a page
//! migration) for as long as they like: the manager never reads one. When a rule's
//! `cmdline` key can decide a process ([`RuleSet::cmdline_matters`]) and its command line
//! is not known, the manager asks for it ([`CmdlineWanted`]) and leaves the process as it
//! is; the daemon reads it on a thread of its own and hands the result back
//! ([`Input::Cmdline`](super::Input::Cmdline)), and the process is considered then.
//!
//! ```text
//!   consider(pid) ─► known? ─yes─► match
//!                      │no
//!                      ▼
//!   ask (one pending per process; more events for it wait for that one)
//!      └─► take_asked() ─► daemon reader thread ─► CmdlineRead ─► arrived() ─► consider(pid)
//! ```
//!
//! A command line is known for one process (pid and start time) and one image: an exec
//! forgets it, so does the process's exit. A rescan asks again for those of the
//! processes it looks at afresh (one no rule manages may have rewritten its arguments
//! in place), deciding meanwhile with the one known; a read that brings the same line
//! changes nothing.
//!
//! Must not touch: procfs (the daemon reads), matching (see `rules`).
//!
//! [`RuleSet::cmdline_matters`]: crate::rules::RuleSet::cmdline_matters

use std::collections::HashMap;

/// A command line the manager waits for: process `pid`, started at `start_time`.
/// `generation` tells a read asked before an exec from one asked after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdlineWanted {
    pub pid: i32,
    pub start_time: u64,
    pub generation: u64,
}

/// What the reader found for a [`CmdlineWanted`]: the arguments, or `None` when the
/// process was gone (or another process had its pid) by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdlineRead {
    pub wanted: CmdlineWanted,
    pub args: Option<Vec<String>>,
}

#[derive(Debug)]
struct Pending {
    start_time: u64,
    generation: u64,
    /// The managed parent of a new process considered with it (its inherited mask is
    /// given back when no rule matches it).
    parent: Option<i32>,
}

/// The known command lines, the reads asked for and not answered yet.
#[derive(Debug, Default)]
pub(super) struct Cmdlines {
    /// pid → (start time, arguments).
    known: HashMap<i32, (u64, Vec<String>)>,
    pending: HashMap<i32, Pending>,
    asked: Vec<CmdlineWanted>,
    generation: u64,
}

impl Cmdlines {
    /// The command line of process `pid` that started at `start_time`, if known.
    pub(super) fn known(&self, pid: i32, start_time: u64) -> Option<&[String]> {
        self.known
            .get(&pid)
            .filter(|(s, _)| *s == start_time)
            .map(|(_, a)| a.as_slice())
    }

    /// Asks for the command line of `pid` unless a read for that process is pending
    /// already (then only a parent is noted): one read per process at a time, however
    /// many events name it.
    pub(super) fn ask(&mut self, pid: i32, start_time: u64, parent: Option<i32>) {
        if let Some(p) = self.pending.get_mut(&pid) {
            if p.start_time == start_time {
                p.parent = p.parent.or(parent);
                return;
            }
        }
        self.generation += 1;
        let wanted = CmdlineWanted {
            pid,
            start_time,
            generation: self.generation,
        };
        self.pending.insert(
            pid,
            Pending {
                start_time,
                generation: wanted.generation,
                parent,
            },
        );
        self.asked.push(wanted);
    }

    /// Forgets what is known or asked about `pid` (an exec, an exit): a read asked
    /// before is ignored when it arrives.
    pub(super) fn forget(&mut self, pid: i32) {
        self.known.remove(&pid);
        self.pending.remove(&pid);
    }

    /// Forgets every known command line (new rules: they are read again as needed).
    pub(super) fn forget_known(&mut self) {
        self.known.clear();
    }

    /// Keeps only what concerns the processes `alive` accepts (pid, start time).
    pub(super) fn retain(&mut self, alive: impl Fn(i32, u64) -> bool) {
        self.known.retain(|pid, (start, _)| alive(*pid, *start));
        self.pending.retain(|pid, p| alive(*pid, p.start_time));
    }

    /// The reads asked for since the last call, oldest first.
    pub(super) fn take_asked(&mut self) -> Vec<CmdlineWanted> {
        std::mem::take(&mut self.asked)
    }

    /// Takes a read's result. `Some(parent)` when the process must be considered again:
    /// the read was the one pending for it and brought a command line not known before.
    /// A read for an earlier image or process, or one that found it gone, changes nothing.
    pub(super) fn arrived(&mut self, read: CmdlineRead) -> Option<Option<i32>> {
        let w = read.wanted;
        let current = self
            .pending
            .get(&w.pid)
            .is_some_and(|p| p.generation == w.generation && p.start_time == w.start_time);
        if !current {
            return None;
        }
        let parent = self.pending.remove(&w.pid).and_then(|p| p.parent);
        let args = read.args?;
        let same = self.known(w.pid, w.start_time) == Some(args.as_slice());
        self.known.insert(w.pid, (w.start_time, args));
        (!same).then_some(parent)
    }

    /// How many command lines are known and how many reads are pending.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.known.len(), self.pending.len())
    }
}
