//! `memory = "follow"`: once a process's threads run inside a set of NUMA nodes
//! smaller than the machine, its pages outside those nodes are moved in.
//!
//! Owns: the decision ([`decide`], pure: memory per node, target nodes, free memory,
//! bounds → what to do), the interval between moves ([`wait_left`]), free memory per
//! node (`nodeN/meminfo`), the `migrate_pages(2)` call, [`run`]: one job, read →
//! decide → move → read again, and [`MoveQueue`]: the jobs, one at a time, on one thread.
//! Must not touch: which CPUs a process gets, the event loop (the daemon queues one job
//! per process at a time and takes its [`Finished`] back as an event).
//!
//! ```text
//!   daemon: pinned CPUs ─► nodes ─► FollowJob ─► MoveQueue ─► thread "pinnerd-mem"
//!        memory::read ─► decide ─► migrate_pages(pid, {node s}, target) per source node
//!        memory::read again ─► Finished { outcome } ─► daemon: explain, log, metrics
//! ```
//!
//! Why `migrate_pages` and not the cgroup: writing `cpuset.mems` moves a whole cgroup's
//! memory, blocks the writer until done and changes the cgroup's configuration (its
//! owner's, often systemd's); `migrate_pages` moves one process, changes no policy, and
//! returns how many pages it could not move. Pages shared with other processes move only
//! with CAP_SYS_NICE; page cache that is never mapped does not move at all.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::sysroot::{self, SysRoot};

use super::parse::{NodeBytes, MAX_NODES};
use super::policy::node_list;
use super::{Bytes, MemoryView, ReadError};

/// What to do about a process's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to move, and why.
    Nothing(String),
    /// Not moved, and why (no room, too large).
    Refused(String),
    /// Move the memory on `from` to `to` (`bytes` of it).
    Move {
        from: BTreeSet<u32>,
        to: BTreeSet<u32>,
        bytes: u64,
    },
}

/// The fraction of a target node's free memory a move may use: the rest stays free for
/// the node's own allocations.
pub const FREE_SHARE: f64 = 0.9;

/// What to do with a process holding `memory` per node whose CPUs are on the `target`
/// nodes of a machine with `all_nodes`, when the target nodes have `free` bytes free
/// and processes over `max_bytes` are not moved.
pub fn decide(
    memory: &NodeBytes,
    target: &BTreeSet<u32>,
    all_nodes: &[u32],
    free: &NodeBytes,
    max_bytes: u64,
) -> Decision {
    if all_nodes.len() <= 1 {
        return Decision::Nothing("one node: all of its memory is local".into());
    }
    if all_nodes.iter().all(|n| target.contains(n)) {
        return Decision::Nothing("its CPUs span every node: nothing to follow".into());
    }
    if target.is_empty() {
        return Decision::Nothing("its CPUs are on no known node".into());
    }
    let total: u64 = memory.values().sum();
    let from: BTreeSet<u32> = memory
        .iter()
        .filter(|(n, b)| **b > 0 && !target.contains(n))
        .map(|(n, _)| *n)
        .collect();
    let outside: u64 = from.iter().map(|n| memory[n]).sum();
    let to = words(target);
    if outside == 0 {
        return Decision::Nothing(format!("all of its {} is on {to} already", Bytes(total)));
    }
    if total > max_bytes {
        return Decision::Refused(format!(
            "its {} is over memory.follow-max-size-mib ({})",
            Bytes(total),
            Bytes(max_bytes)
        ));
    }
    let room: u64 = target
        .iter()
        .map(|n| free.get(n).copied().unwrap_or(0))
        .sum();
    let usable = (room as f64 * FREE_SHARE) as u64;
    if outside > usable {
        return Decision::Refused(format!(
            "{to} has {} free, too little for the {} on {} (a move may use {:.0}% of it)",
            Bytes(room),
            Bytes(outside),
            words(&from),
            FREE_SHARE * 100.0
        ));
    }
    Decision::Move {
        from,
        to: target.clone(),
        bytes: outside,
    }
}

/// How long a process whose memory last moved `since_last` ago waits before the next
/// move with `interval`: `None` when it may move now.
pub fn wait_left(since_last: Option<Duration>, interval: Duration) -> Option<Duration> {
    match since_last {
        Some(d) if d < interval => Some(interval - d),
        _ => None,
    }
}

/// `node 1`, `nodes 0-1`.
pub fn words(nodes: &BTreeSet<u32>) -> String {
    if nodes.len() == 1 {
        format!("node {}", node_list(nodes))
    } else {
        format!("nodes {}", node_list(nodes))
    }
}

/// Free bytes of each node in `nodes`, from `devices/system/node/nodeN/meminfo`
/// (`Node N MemFree: K kB`); a node whose file is missing or unreadable counts 0.
pub fn free_memory(root: &SysRoot, nodes: &[u32]) -> NodeBytes {
    nodes
        .iter()
        .map(|&n| {
            let path = root.sys_path(format!("devices/system/node/node{n}/meminfo"));
            let free = match sysroot::read_optional(&path) {
                Ok(Some(text)) => parse_mem_free(&text).unwrap_or(0),
                _ => 0,
            };
            (n, free)
        })
        .collect()
}

/// The `MemFree` of a node's meminfo, in bytes.
pub fn parse_mem_free(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        // "Node", "0", "MemFree:", "123", "kB"
        let (_, _, key, v) = (w.next()?, w.next()?, w.next()?, w.next()?);
        (key == "MemFree:")
            .then(|| v.parse::<u64>().ok())?
            .map(|kb| kb.saturating_mul(1024))
    })
}

/// Why `migrate_pages` failed.
#[derive(Debug, thiserror::Error)]
#[error("migrate_pages(pid {pid}, {from} → {to}): {source}")]
pub struct MigrateError {
    pub pid: i32,
    pub from: String,
    pub to: String,
    pub source: std::io::Error,
}

/// Moves process `pid`'s pages on `from` nodes to `to` nodes; the number of pages it
/// could not move (shared without CAP_SYS_NICE, pinned, busy).
pub fn migrate_pages(
    pid: i32,
    from: &BTreeSet<u32>,
    to: &BTreeSet<u32>,
) -> Result<u64, MigrateError> {
    const WORDS: usize = MAX_NODES as usize / 64;
    let mask = |nodes: &BTreeSet<u32>| {
        let mut m = [0u64; WORDS];
        for &n in nodes.iter().filter(|n| **n < MAX_NODES) {
            m[n as usize / 64] |= 1 << (n % 64);
        }
        m
    };
    let (old, new) = (mask(from), mask(to));
    // SAFETY: both masks are live arrays of WORDS u64 words (MAX_NODES bits); the
    // kernel reads at most `maxnode - 1` bits of each and writes neither.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid as libc::c_long,
            MAX_NODES as libc::c_ulong + 1,
            old.as_ptr(),
            new.as_ptr(),
        )
    };
    if rc < 0 {
        return Err(MigrateError {
            pid,
            from: node_list(from),
            to: node_list(to),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(rc as u64)
}

/// One process's memory to follow its CPUs.
#[derive(Debug, Clone)]
pub struct FollowJob {
    pub pid: i32,
    /// The nodes of its CPUs now.
    pub target: BTreeSet<u32>,
    /// Every node of the machine.
    pub all_nodes: Vec<u32>,
    pub root: SysRoot,
    /// `memory.follow-max-size-mib`, in bytes.
    pub max_bytes: u64,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Moved {
        from: BTreeSet<u32>,
        to: BTreeSet<u32>,
        /// Bytes that left the `from` nodes.
        moved: u64,
        /// Bytes still outside the target nodes afterwards.
        left: u64,
        /// Pages `migrate_pages` reported it could not move.
        pages_left: u64,
        took: Duration,
    },
    Nothing(String),
    Refused(String),
    Failed(String),
    /// The process exited.
    Gone,
}

impl Outcome {
    /// The `outcome` label of `pinnerd_memory_migrations_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Moved { .. } => "moved",
            Outcome::Nothing(_) | Outcome::Gone => "nothing",
            Outcome::Refused(_) => "refused",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// "moved 2.9 GiB from node 0 to node 1 in 1.4 s; 0.1 GiB left (pages it could not move: 12)".
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Moved {
                from,
                to,
                moved,
                left,
                pages_left,
                took,
            } => {
                write!(
                    f,
                    "moved {} from {} to {} in {:.1} s",
                    Bytes(*moved),
                    words(from),
                    words(to),
                    took.as_secs_f64()
                )?;
                if *left > 0 {
                    write!(f, "; {} left", Bytes(*left))?;
                    if *pages_left > 0 {
                        write!(
                            f,
                            " (pages it could not move: {pages_left}, shared or in use)"
                        )?;
                    }
                }
                Ok(())
            }
            Outcome::Nothing(why) => write!(f, "nothing moved: {why}"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::Failed(why) => write!(f, "failed: {why}"),
            Outcome::Gone => f.write_str("the process exited"),
        }
    }
}

/// A job's result, for the daemon.
#[derive(Debug, Clone)]
pub struct Finished {
    pub pid: i32,
    pub target: BTreeSet<u32>,
    pub outcome: Outcome,
    pub at: Instant,
}

/// Runs `job` on the calling thread: reads the memory, decides, moves one source node
/// at a time, reads again.
pub fn run(job: &FollowJob) -> Outcome {
    let read = |pid| match super::read(&job.root, pid, &job.all_nodes) {
        Ok(MemoryView::Nodes { nodes, .. }) => Ok(nodes),
        Ok(MemoryView::OneNode) => Ok(NodeBytes::new()),
        Err(ReadError::Gone { .. }) => Err(Outcome::Gone),
        Err(e) => Err(Outcome::Failed(e.to_string())),
    };
    if job.all_nodes.len() <= 1 {
        return Outcome::Nothing("one node: all of its memory is local".into());
    }
    let before = match read(job.pid) {
        Ok(b) => b,
        Err(o) => return o,
    };
    let free = free_memory(&job.root, &job.all_nodes);
    let (from, to) = match decide(&before, &job.target, &job.all_nodes, &free, job.max_bytes) {
        Decision::Nothing(why) => return Outcome::Nothing(why),
        Decision::Refused(why) => return Outcome::Refused(why),
        Decision::Move { from, to, .. } => (from, to),
    };
    let started = Instant::now();
    let mut pages_left = 0u64;
    for s in &from {
        match migrate_pages(job.pid, &BTreeSet::from([*s]), &to) {
            Ok(n) => pages_left += n,
            Err(e) if e.source.raw_os_error() == Some(libc::ESRCH) => return Outcome::Gone,
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    }
    let took = started.elapsed();
    let after = match read(job.pid) {
        Ok(a) => a,
        Err(o) => return o,
    };
    let outside = |m: &NodeBytes| -> u64 {
        m.iter()
            .filter(|(n, _)| !to.contains(n))
            .map(|(_, b)| *b)
            .sum()
    };
    Outcome::Moved {
        moved: outside(&before).saturating_sub(outside(&after)),
        left: outside(&after),
        from,
        to,
        pages_left,
        took,
    }
}

/// What moves one process's memory: [`Kernel`] on the running machine; the queue's tests
/// give it moves of their own.
pub trait Mover: Send + 'static {
    fn run(&self, job: &FollowJob) -> Outcome;
}

/// The real mover: [`run`], `migrate_pages` on the running kernel.
pub struct Kernel;

impl Mover for Kernel {
    fn run(&self, job: &FollowJob) -> Outcome {
        run(job)
    }
}

/// The name of the thread that moves memory (15 bytes at most, as the kernel keeps them).
pub const MOVER_THREAD: &str = "pinnerd-mem";

/// Memory moves, one process at a time: jobs wait in the order they came for the one
/// thread ([`MOVER_THREAD`]) that serves them, so however many processes follow, one
/// `migrate_pages` runs at once. The daemon queues at most one job per process, so the
/// queue holds at most one job per following process. Dropping the queue lets the
/// thread end after the job it is on; the jobs still waiting are dropped unrun.
pub struct MoveQueue {
    jobs: std::sync::mpsc::Sender<FollowJob>,
}

/// The queue's thread has ended; the job was not queued.
#[derive(Debug, thiserror::Error)]
#[error("the memory mover thread has ended")]
pub struct QueueClosed(pub FollowJob);

impl MoveQueue {
    /// Starts the mover thread; `done` gets each job's result, in the order of the jobs.
    pub fn start(
        mover: impl Mover,
        done: impl Fn(Finished) + Send + 'static,
    ) -> std::io::Result<MoveQueue> {
        let (jobs, queued) = std::sync::mpsc::channel::<FollowJob>();
        std::thread::Builder::new()
            .name(MOVER_THREAD.into())
            .spawn(move || {
                for job in queued {
                    let outcome = mover.run(&job);
                    done(Finished {
                        pid: job.pid,
                        target: job.target,
                        outcome,
                        at: Instant::now(),
                    });
                }
            })?;
        Ok(MoveQueue { jobs })
    }

    /// Queues `job` behind those already waiting.
    pub fn push(&self, job: FollowJob) -> Result<(), QueueClosed> {
        self.jobs.send(job).map_err(|e| QueueClosed(e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(pairs: &[(u32, u64)]) -> NodeBytes {
        pairs.iter().copied().collect()
    }
    const GIB: u64 = 1 << 30;

    #[test]
    fn one_node_or_cpus_on_every_node_move_nothing() {
        let mem = bytes(&[(0, GIB)]);
        let d = decide(&mem, &BTreeSet::from([0]), &[0], &bytes(&[]), u64::MAX);
        assert_eq!(
            d,
            Decision::Nothing("one node: all of its memory is local".into())
        );
        let mem = bytes(&[(0, GIB), (1, GIB)]);
        let d = decide(
            &mem,
            &BTreeSet::from([0, 1]),
            &[0, 1],
            &bytes(&[]),
            u64::MAX,
        );
        assert!(matches!(d, Decision::Nothing(w) if w.contains("span every node")));
        let d = decide(
            &bytes(&[(0, 0), (1, GIB)]),
            &BTreeSet::from([1]),
            &[0, 1],
            &bytes(&[]),
            u64::MAX,
        );
        assert_eq!(
            d,
            Decision::Nothing("all of its 1.0 GiB is on node 1 already".into())
        );
    }

    #[test]
    fn memory_outside_the_target_moves_when_there_is_room() {
        let mem = bytes(&[(0, 3 * GIB), (1, GIB), (2, GIB)]);
        let d = decide(
            &mem,
            &BTreeSet::from([1]),
            &[0, 1, 2],
            &bytes(&[(1, 10 * GIB)]),
            u64::MAX,
        );
        assert_eq!(
            d,
            Decision::Move {
                from: BTreeSet::from([0, 2]),
                to: BTreeSet::from([1]),
                bytes: 4 * GIB
            }
        );
    }

    #[test]
    fn too_little_free_memory_or_too_large_a_process_is_refused() {
        let mem = bytes(&[(0, 4 * GIB), (1, 0)]);
        let d = decide(
            &mem,
            &BTreeSet::from([1]),
            &[0, 1],
            &bytes(&[(1, 4 * GIB)]),
            u64::MAX,
        );
        assert_eq!(
            d,
            Decision::Refused(
                "node 1 has 4.0 GiB free, too little for the 4.0 GiB on node 0 (a move may use 90% of it)"
                    .into()
            )
        );
        let d = decide(
            &mem,
            &BTreeSet::from([1]),
            &[0, 1],
            &bytes(&[(1, 64 * GIB)]),
            2 * GIB,
        );
        assert_eq!(
            d,
            Decision::Refused("its 4.0 GiB is over memory.follow-max-size-mib (2.0 GiB)".into())
        );
    }

    #[test]
    fn the_interval_holds_the_next_move_back() {
        let i = Duration::from_secs(300);
        assert_eq!(wait_left(None, i), None);
        assert_eq!(
            wait_left(Some(Duration::from_secs(100)), i),
            Some(Duration::from_secs(200))
        );
        assert_eq!(wait_left(Some(Duration::from_secs(300)), i), None);
    }

    #[test]
    fn mem_free_is_read_from_a_node_meminfo() {
        let text = "Node 1 MemTotal:        1048576 kB\nNode 1 MemFree:          524288 kB\nNode 1 MemUsed: 1 kB\n";
        assert_eq!(parse_mem_free(text), Some(512 << 20));
        assert_eq!(parse_mem_free("garbage\n"), None);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sys/devices/system/node/node1");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("meminfo"), text).unwrap();
        let root = SysRoot::machine(dir.path());
        assert_eq!(
            free_memory(&root, &[0, 1]),
            bytes(&[(0, 0), (1, 512 << 20)])
        );
    }

    #[test]
    fn the_outcome_reads_as_the_issue_says_it() {
        let o = Outcome::Moved {
            from: BTreeSet::from([0]),
            to: BTreeSet::from([1]),
            moved: 3_113_851_290,
            left: 107_374_182,
            pages_left: 0,
            took: Duration::from_millis(1400),
        };
        assert_eq!(
            o.to_string(),
            "moved 2.9 GiB from node 0 to node 1 in 1.4 s; 102 MiB left"
        );
        assert_eq!(o.label(), "moved");
    }

    /// A mover whose moves block until the test releases them, one release per move,
    /// counting the moves in flight at once and logging each start.
    struct Gated {
        in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        release: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
    }

    impl Mover for Gated {
        fn run(&self, job: &FollowJob) -> Outcome {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            let thread = std::thread::current().name().unwrap_or("").to_string();
            self.log
                .lock()
                .unwrap()
                .push(format!("start {} on {thread}", job.pid));
            let released = self.release.lock().unwrap().recv().is_ok();
            self.in_flight.fetch_sub(1, SeqCst);
            Outcome::Nothing(format!("released: {released}"))
        }
    }

    #[test]
    fn the_queue_moves_one_process_at_a_time_in_the_order_they_came() {
        use std::sync::{atomic::AtomicUsize, mpsc, Arc, Mutex};
        let (release_tx, release_rx) = mpsc::channel();
        let mover = Gated {
            in_flight: Arc::new(AtomicUsize::new(0)),
            most: Arc::new(AtomicUsize::new(0)),
            log: Arc::default(),
            release: Arc::new(Mutex::new(release_rx)),
        };
        let (most, log) = (mover.most.clone(), mover.log.clone());
        let (done_tx, done_rx) = mpsc::channel();
        let log_done = log.clone();
        let queue = MoveQueue::start(mover, move |f: Finished| {
            log_done
                .lock()
                .unwrap()
                .push(format!("end {} {}", f.pid, f.outcome));
            done_tx.send(f.pid).unwrap();
        })
        .unwrap();
        let pids = [11, 12, 13, 14, 15];
        for pid in pids {
            queue
                .push(FollowJob {
                    pid,
                    target: BTreeSet::from([1]),
                    all_nodes: vec![0, 1],
                    root: SysRoot::default(),
                    max_bytes: u64::MAX,
                })
                .unwrap();
        }
        // Released one by one: each move ends before the next one starts.
        let mut ended = Vec::new();
        for _ in pids {
            release_tx.send(()).unwrap();
            // A bound on the wait, so that a queue that never runs a job fails here
            // instead of hanging the test run.
            ended.push(
                done_rx
                    .recv_timeout(Duration::from_secs(60))
                    .expect("a released move ends"),
            );
        }
        assert_eq!(
            most.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "moves in flight at once; {:#?}",
            log.lock().unwrap()
        );
        assert_eq!(ended, pids);
        let want: Vec<String> = pids
            .iter()
            .flat_map(|p| {
                [
                    format!("start {p} on {MOVER_THREAD}"),
                    format!("end {p} nothing moved: released: true"),
                ]
            })
            .collect();
        assert_eq!(*log.lock().unwrap(), want);
        // Dropping the queue ends its thread; nothing is left running.
        drop(queue);
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(60)),
            Err(mpsc::RecvTimeoutError::Disconnected),
            "the mover thread ended"
        );
    }

    #[test]
    fn a_job_on_this_machine_moves_nothing_on_one_node_and_says_so() {
        // The real kernel: this process, its CPUs' nodes as the target.
        let root = SysRoot::default();
        let topo = crate::topology::Topology::discover(&root).unwrap();
        let all: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
        let job = FollowJob {
            pid: std::process::id() as i32,
            target: all.iter().copied().collect(),
            all_nodes: all.clone(),
            root,
            max_bytes: u64::MAX,
        };
        let o = run(&job);
        if all.len() <= 1 {
            assert_eq!(
                o,
                Outcome::Nothing("one node: all of its memory is local".into())
            );
        } else {
            assert!(matches!(o, Outcome::Nothing(w) if w.contains("span every node")));
        }
        // migrate_pages between the same node moves nothing and succeeds.
        let n = BTreeSet::from([all[0]]);
        assert_eq!(migrate_pages(std::process::id() as i32, &n, &n).unwrap(), 0);
    }
}
