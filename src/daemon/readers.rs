//! Reads that can wait on a process's locks, off the loop: command lines (`cmdline`
//! takes the process's memory-map lock, which its owner can keep busy for as long as
//! they like) and where its memory is (`numa_maps` walks its page tables under that
//! lock). Each kind has [`READERS`] named threads (`pinnerd-cmdline-N`,
//! `pinnerd-memory-N`) that take them from one queue keyed by pid and send each result
//! on: back to the loop as an event, or to the caller waiting for it.
//!
//! ```text
//!   loop ─Action::ReadCmdlines─► Readers::ask ─► queue (one entry per pid) ─► reader threads
//!    ▲                                                                              │
//!    └──────────────────── Event::Cmdline (over the loop's channel) ◄───────────────┘
//! ```
//!
//! A pid has at most one read waiting, besides one being read: asking again for a pid
//! that waits joins that read (a command line: the newest ask wins; memory: one read
//! answers every caller), so a burst of events or calls for one process costs at most
//! two reads. A pid being read is not taken by a second thread, so
//! a read that blocks holds one thread; the others go on with other pids.
//!
//! Must not touch: daemon state. A reader reads and sends, nothing else.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::manager::cmdlines::CmdlineWanted;

/// How many reader threads for command lines, and for memory.
pub const READERS: usize = 2;

/// A read of one process, as the queue keeps it.
pub trait Read: Send + 'static {
    /// The process read.
    fn pid(&self) -> i32;
    /// Another ask for the same process while this one waits: one read serves both.
    fn merge(&mut self, newer: Self);
}

impl Read for CmdlineWanted {
    fn pid(&self) -> i32 {
        self.pid
    }
    /// The newest ask wins (its generation is the one the manager waits for).
    fn merge(&mut self, newer: Self) {
        *self = newer;
    }
}

/// The queue: pids in the order first asked, what is asked for each, and which are
/// being read.
#[derive(Debug)]
pub struct Queue<W> {
    order: VecDeque<i32>,
    waiting: HashMap<i32, W>,
    reading: HashSet<i32>,
    closed: bool,
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Queue {
            order: VecDeque::new(),
            waiting: HashMap::new(),
            reading: HashSet::new(),
            closed: false,
        }
    }
}

impl<W: Read> Queue<W> {
    /// Asks for `w`; a read already waiting for its pid takes it in, keeping its place.
    pub fn push(&mut self, w: W) {
        let pid = w.pid();
        match self.waiting.get_mut(&pid) {
            Some(old) => old.merge(w),
            None => {
                self.waiting.insert(pid, w);
                self.order.push_back(pid);
            }
        }
    }

    /// The oldest read whose pid is not being read, now being read.
    pub fn pop(&mut self) -> Option<W> {
        let at = self.order.iter().position(|p| !self.reading.contains(p))?;
        let pid = self.order.remove(at)?;
        self.reading.insert(pid);
        self.waiting.remove(&pid)
    }

    /// The read of `pid` is over.
    pub fn done(&mut self, pid: i32) {
        self.reading.remove(&pid);
    }

    /// How many reads wait (not counting those being read).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[derive(Debug)]
struct Shared<W> {
    queue: Mutex<Queue<W>>,
    ready: Condvar,
}

impl<W> Shared<W> {
    fn lock(&self) -> MutexGuard<'_, Queue<W>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The reader threads and their queue. Dropping it lets idle threads end (one in a
/// read that never returns ends with the process).
#[derive(Debug)]
pub struct Readers<W> {
    shared: Arc<Shared<W>>,
}

impl<W: Read> Readers<W> {
    /// Starts `threads` readers named `pinnerd-NAME-N`: each read is `run(read)`,
    /// which reads and sends its result on.
    pub fn start(
        name: &str,
        threads: usize,
        run: impl Fn(W) + Send + Sync + 'static,
    ) -> std::io::Result<Readers<W>> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let run = Arc::new(run);
        for n in 0..threads.max(1) {
            let (shared, run) = (shared.clone(), run.clone());
            std::thread::Builder::new()
                .name(format!("pinnerd-{name}-{n}"))
                .spawn(move || serve(&shared, |w| run(w)))?;
        }
        Ok(Readers { shared })
    }

    /// Asks for the reads of `wanted` (coalesced per pid, see the module doc).
    pub fn ask(&self, wanted: impl IntoIterator<Item = W>) {
        let mut q = self.shared.lock();
        for w in wanted {
            q.push(w);
        }
        drop(q);
        self.shared.ready.notify_all();
    }

    /// How many reads wait for a thread.
    pub fn waiting(&self) -> usize {
        self.shared.lock().waiting()
    }
}

impl<W> Drop for Readers<W> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

fn serve<W: Read>(shared: &Shared<W>, run: impl Fn(W)) {
    let mut q = shared.lock();
    loop {
        if let Some(w) = q.pop() {
            let pid = w.pid();
            drop(q);
            run(w);
            q = shared.lock();
            q.done(pid);
            // A pid that waited behind this read may be taken now.
            shared.ready.notify_all();
            continue;
        }
        if q.closed {
            return;
        }
        q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::cmdlines::CmdlineRead;
    use std::sync::mpsc;
    use std::time::Duration;

    fn want(pid: i32, generation: u64) -> CmdlineWanted {
        CmdlineWanted {
            pid,
            start_time: 7,
            generation,
        }
    }

    #[test]
    fn a_pid_waits_once_and_is_never_read_twice_at_a_time() {
        let mut q: Queue<CmdlineWanted> = Queue::default();
        for g in 0..1000 {
            q.push(want(10, g));
        }
        q.push(want(20, 1));
        assert_eq!(q.waiting(), 2);
        assert_eq!(q.pop(), Some(want(10, 999)), "the newest ask for pid 10");
        q.push(want(10, 1000));
        // 10 is being read: 20 comes first, then nothing until 10's read is over.
        assert_eq!(q.pop(), Some(want(20, 1)));
        assert_eq!(q.pop(), None);
        q.done(10);
        assert_eq!(q.pop(), Some(want(10, 1000)));
        assert_eq!(q.pop(), None);
    }

    /// A read that does not return holds one thread: another pid is read meanwhile,
    /// and the asks for the blocked pid made meanwhile become one more read.
    #[test]
    fn a_read_that_blocks_holds_one_thread_and_its_asks_coalesce() {
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Mutex::new(gate_rx);
        let (in_tx, in_rx) = mpsc::channel::<()>();
        let in_tx = Mutex::new(in_tx);
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let readers = Readers::start("test-read", 2, move |w: CmdlineWanted| {
            if w.pid == 10 {
                in_tx.lock().unwrap().send(()).unwrap();
                let _ = gate.lock().unwrap().recv();
            }
            tx.lock()
                .unwrap()
                .send(CmdlineRead {
                    wanted: w,
                    args: Some(vec![format!("p{}", w.pid)]),
                })
                .unwrap();
        })
        .unwrap();
        readers.ask([want(10, 1)]);
        in_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        for g in 2..500 {
            readers.ask([want(10, g)]);
        }
        readers.ask([want(20, 1)]);
        let r = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!(r.wanted, want(20, 1), "another pid is read while 10 blocks");
        assert_eq!(readers.waiting(), 1, "the asks for pid 10 wait as one");
        gate_tx.send(()).unwrap();
        gate_tx.send(()).unwrap();
        let a = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let b = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!((a.wanted, b.wanted), (want(10, 1), want(10, 499)));
        assert_eq!(readers.waiting(), 0);
    }
}
