//! The threads the loop hands work to, made once by the shell's start and handed to
//! the loop: the reader threads (command lines, `numa_maps`), the memory mover and the
//! holder.
//!
//! The mover and the holder start at their first use, by the function they were made
//! with: a daemon that never follows memory nor holds a unit starts neither thread (and
//! so never connects to systemd's unit API for holds, nor probes the cgroup partitions).
//! [`Workers::system`] makes the real ones.
//!
//! Must not touch: the daemon's state. Workers report back as events on the loop's
//! channel.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::manager::cmdlines::{CmdlineRead, CmdlineWanted};
use crate::memory::follow::{self, FollowJob, MoveQueue};
use crate::sysroot::SysRoot;
use crate::watch::{ProcFs, ProcSource};

use super::super::holding::{self, HolderThread};
use super::super::readers::{Readers, READERS};
use super::super::state::event::Event;
use super::super::state::memory::MemoryRead;
use super::super::watchers::Doorbell;

/// A worker thread started the first time it is needed, by the function it was made
/// with; a start that failed is tried again at the next need.
pub struct OnFirstUse<T> {
    running: Option<T>,
    start: Box<dyn FnMut() -> Result<T, String>>,
}

impl<T> OnFirstUse<T> {
    pub fn new(start: impl FnMut() -> Result<T, String> + 'static) -> OnFirstUse<T> {
        OnFirstUse {
            running: None,
            start: Box::new(start),
        }
    }

    /// The running worker, started now if it is not running; why not, if it cannot
    /// start.
    pub fn get(&mut self) -> Result<&mut T, String> {
        if self.running.is_none() {
            self.running = Some((self.start)()?);
        }
        Ok(self.running.as_mut().expect("started above"))
    }

    /// The worker, if it was ever started.
    pub fn running(&mut self) -> Option<&mut T> {
        self.running.as_mut()
    }
}

/// The threads the loop hands work to.
pub struct Workers {
    /// Reads that can wait on a process's locks, off the loop: command lines…
    pub cmdlines: Readers<CmdlineWanted>,
    /// …and where a process's memory is (`Explain`), answered by the reader.
    pub memory: Readers<MemoryRead>,
    /// Memory moves, one at a time on one thread.
    pub moves: OnFirstUse<MoveQueue>,
    /// Units held for `isolate` and `unit-cpuset` rules, on a thread of its own.
    pub holder: OnFirstUse<HolderThread>,
    /// The hold journal: when a previous run left it, the holder starts at once to
    /// recover what it held. `None` for a daemon that holds nothing.
    pub hold_journal: Option<PathBuf>,
}

impl Workers {
    /// The real workers of a daemon reading under `root`, keeping its holds' journal in
    /// `runtime_dir`: what they find goes to the loop's channel `tx`; the holder rings
    /// `bell` when it has ended. The reader threads start now.
    pub fn system(
        root: &SysRoot,
        runtime_dir: &std::path::Path,
        tx: &mpsc::Sender<Event>,
        bell: &Arc<Doorbell>,
    ) -> std::io::Result<Workers> {
        Ok(Workers {
            cmdlines: cmdline_readers(root, tx)?,
            memory: memory_readers(tx)?,
            moves: OnFirstUse::new(mover(tx.clone())),
            holder: OnFirstUse::new(holder(root.clone(), runtime_dir.into(), tx, bell)),
            hold_journal: Some(runtime_dir.join(crate::hold::JOURNAL_FILE)),
        })
    }

    /// The workers of a daemon that observes another machine (`daemon --machine`):
    /// readers under `root` as [`Workers::system`]'s, but a mover and a holder that
    /// refuse every job, saying why; no journal of holds is looked for.
    pub fn observing(root: &SysRoot, tx: &mpsc::Sender<Event>) -> std::io::Result<Workers> {
        Ok(Workers {
            cmdlines: cmdline_readers(root, tx)?,
            memory: memory_readers(tx)?,
            moves: OnFirstUse::new(|| {
                Err("a daemon that observes another machine (--machine) moves no memory".into())
            }),
            holder: OnFirstUse::new(|| {
                Err("a daemon that observes another machine (--machine) holds no unit".into())
            }),
            hold_journal: None,
        })
    }

    /// Queues `job` for the mover thread; why not, if not.
    pub fn queue_move(&mut self, job: FollowJob) -> Result<(), String> {
        self.moves.get()?.push(job).map_err(|e| e.to_string())
    }
}

/// The command line readers: each sends what it read to the loop.
fn cmdline_readers(
    root: &SysRoot,
    tx: &mpsc::Sender<Event>,
) -> std::io::Result<Readers<CmdlineWanted>> {
    let procs = ProcFs::new(root.clone());
    let tx = tx.clone();
    Readers::start("cmdline", READERS, move |wanted: CmdlineWanted| {
        let read = CmdlineRead {
            wanted,
            args: procs.cmdline(wanted.pid, wanted.start_time),
        };
        let _ = tx.blocking_send(Event::Cmdline(read));
    })
}

/// The memory readers: a read answers its callers, and sends what it found to the loop.
fn memory_readers(tx: &mpsc::Sender<Event>) -> std::io::Result<Readers<MemoryRead>> {
    let tx = tx.clone();
    Readers::start("memory", READERS, move |read: MemoryRead| {
        read.run(|found| {
            let _ = tx.blocking_send(Event::Memory(found));
        })
    })
}

/// Starts the memory mover on the kernel, its moves done sent to the loop.
fn mover(tx: mpsc::Sender<Event>) -> impl FnMut() -> Result<MoveQueue, String> {
    move || {
        let tx = tx.clone();
        MoveQueue::start(follow::Kernel, move |done| {
            let _ = tx.blocking_send(Event::Followed(Box::new(done)));
        })
        .map_err(|e| format!("cannot start the memory mover thread: {e}"))
    }
}

/// Starts the holder of the system (systemd, the cgroup v2 hierarchy under `root`, the
/// journal in `runtime_dir`), its reports sent to the loop.
fn holder(
    root: SysRoot,
    runtime_dir: PathBuf,
    tx: &mpsc::Sender<Event>,
    bell: &Arc<Doorbell>,
) -> impl FnMut() -> Result<HolderThread, String> {
    let (tx, bell) = (tx.clone(), bell.clone());
    move || {
        let (root, runtime_dir) = (root.clone(), runtime_dir.clone());
        let (tx, bell) = (tx.clone(), bell.clone());
        HolderThread::start(
            move || holding::system_holder(&root, &runtime_dir),
            move |reports, notes| {
                let _ = tx.blocking_send(Event::Held(reports));
                let _ = tx.blocking_send(Event::HoldNotes(notes));
            },
            move || bell.ring(),
        )
        .map_err(|e| format!("cannot start the holder thread: {e}"))
    }
}
