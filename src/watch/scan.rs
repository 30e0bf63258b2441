//! Reading processes from procfs: a cheap pass over every `/proc/PID/stat`, and full
//! snapshots (exe, uid, cgroup, threads) only for the processes that can match a rule
//! or that are managed already. A command line is read on its own
//! ([`ProcSource::cmdline`]), never in a snapshot: reading one can wait on the
//! process's memory-map lock, so the daemon reads it off its loop (`daemon::readers`).
//!
//! Everything takes its root from a [`SysRoot`], so tests read fixture trees.

use std::fs;
use std::io::Read;
use std::path::PathBuf;

use crate::affinity::{parse_stat, Tid, PF_KTHREAD};
use crate::cpuset::CpuSet;
use crate::rules::{ProcessInfo, ThreadInfo};
use crate::sysroot::SysRoot;

/// What the cheap pass learns about every process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: i32,
    pub comm: String,
    pub ppid: i32,
    pub start_time: u64,
    pub kernel_thread: bool,
    /// Threads in the process (`stat` field 20).
    pub num_threads: u32,
}

/// A full snapshot: what the matcher needs, plus identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSnapshot {
    pub info: ProcessInfo,
    /// Clock ticks after boot; with the pidfd, the process's identity.
    pub start_time: u64,
    pub kernel_thread: bool,
}

impl ProcessSnapshot {
    pub fn pid(&self) -> i32 {
        self.info.pid as i32
    }
}

/// Where the manager gets process data from: procfs, or a fake in unit tests.
pub trait ProcSource {
    /// Every process, cheaply (one `stat` read each).
    fn list(&self) -> Vec<ProcEntry>;
    /// The cheap entry of one process; `None` when it is gone.
    fn entry(&self, pid: i32) -> Option<ProcEntry>;
    /// A full snapshot of one process, its command line left empty; `None` when it is
    /// gone. Nothing it reads waits on the process's memory-map lock.
    fn snapshot(&self, pid: i32) -> Option<ProcessSnapshot>;
    /// The command line of process `pid`, split at NULs, if it is still the process
    /// that started at `start_time`; `None` when it is gone or another process. Reading
    /// it takes the process's memory-map lock, which a process whose map is busy (a
    /// page migration, a large unmap, an `mprotect` loop) holds for as long as that
    /// lasts: the daemon reads it on a thread of its own, never on its loop.
    fn cmdline(&self, pid: i32, start_time: u64) -> Option<Vec<String>>;
    /// The comm of one thread; `None` when it is gone.
    fn thread_comm(&self, pid: i32, tid: Tid) -> Option<String>;
    /// The thread ids of one process (a directory listing, no per-thread reads);
    /// `None` when it is gone.
    fn tasks(&self, pid: i32) -> Option<Vec<Tid>>;
    /// Whether task `tid` is a thread of process `pid` now. A tid is a pid too: once
    /// its thread has exited, another process may hold the number.
    fn is_task_of(&self, pid: i32, tid: Tid) -> bool;
    /// The cgroup cpuset of one process; `None` when it is gone or has none that can be
    /// read (the manager then uses its allowed mask at first contact).
    fn cpuset(&self, pid: i32) -> Option<crate::cgroup::Cpuset> {
        let _ = pid;
        None
    }
    /// Resident bytes per NUMA node of one process, on a machine with `nodes`
    /// (`memory::read`: a page-table walk under the process's memory-map lock, so only
    /// on demand, and never on the daemon's loop); `None` when it is gone, the machine
    /// has one node or it cannot be read.
    fn memory(&self, pid: i32, nodes: &[u32]) -> Option<crate::memory::NodeBytes> {
        let _ = (pid, nodes);
        None
    }
}

/// The real procfs under a [`SysRoot`].
#[derive(Debug, Clone, Default)]
pub struct ProcFs {
    root: SysRoot,
}

impl ProcFs {
    pub fn new(root: SysRoot) -> Self {
        ProcFs { root }
    }

    pub fn root(&self) -> &SysRoot {
        &self.root
    }

    /// Reads a small procfs file whole: open, reads into a stack buffer until end of
    /// file, close (`read_to_string` would also `statx` and `lseek` for a size hint
    /// procfs does not have — two more system calls per file, thousands per rescan).
    fn read_small(&self, rel: &str, buf: &mut String) -> bool {
        buf.clear();
        // Non-blocking (a FIFO in a captured tree does not hang the open) and bounded
        // (nor does `/dev/zero` fill memory), without a stat per file.
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(mut f) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(self.root.proc_path(rel))
        else {
            return false;
        };
        let mut chunk = [0u8; 1024];
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            match f.read(&mut chunk) {
                Ok(0) => break,
                Ok(_) if bytes.len() as u64 >= crate::sysroot::MAX_PSEUDO_FILE => return false,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        match String::from_utf8(bytes) {
            Ok(s) => {
                *buf = s;
                true
            }
            Err(_) => false,
        }
    }

    fn entry_with(&self, pid: i32, buf: &mut String) -> Option<ProcEntry> {
        if !self.read_small(&format!("{pid}/stat"), buf) {
            return None;
        }
        let s = parse_stat(buf)?;
        // A zombie has no threads left to place: to the manager it is gone, so pinning
        // it is refused and a managed one is dropped at its exit, not at a rescan.
        if s.has_exited() {
            return None;
        }
        // kthreadd is pid 2; its children are kernel threads. The flag is the
        // authority, the parent a fallback for trees that lack it.
        let kernel_thread = s.flags & PF_KTHREAD != 0 || pid == 2 || s.ppid == 2;
        Some(ProcEntry {
            pid,
            comm: s.comm,
            ppid: s.ppid,
            start_time: s.start_time,
            kernel_thread,
            num_threads: s.num_threads,
        })
    }

    /// The cgroup path a rule matches (see [`ProcCgroups::rule_path`](crate::cgroup::ProcCgroups::rule_path)).
    fn cgroup(&self, pid: i32) -> Option<String> {
        crate::cgroup::proc_cgroups(&self.root, pid)
            .ok()
            .flatten()?
            .rule_path()
            .map(str::to_string)
    }

    fn real_uid(&self, pid: i32) -> Option<u32> {
        let text =
            crate::sysroot::read_bounded(self.root.proc_path(format!("{pid}/status"))).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

impl ProcSource for ProcFs {
    fn memory(&self, pid: i32, nodes: &[u32]) -> Option<crate::memory::NodeBytes> {
        use crate::memory::{MemoryView, ReadError};
        match crate::memory::read(&self.root, pid, nodes) {
            Ok(MemoryView::Nodes { nodes, .. }) => Some(nodes),
            Ok(MemoryView::OneNode) | Err(ReadError::Gone { .. }) => None,
            Err(e) => {
                tracing::warn!(pid, error = %e, "cannot read where the memory of pid {pid} is: {e}");
                None
            }
        }
    }

    fn cpuset(&self, pid: i32) -> Option<crate::cgroup::Cpuset> {
        match crate::cgroup::process_cpuset(&self.root, pid) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(pid, error = %e, "cannot read the cgroup cpuset of pid {pid}: {e}");
                None
            }
        }
    }

    fn is_task_of(&self, pid: i32, tid: Tid) -> bool {
        if self.root == SysRoot::default() {
            // On the live system the kernel answers directly: `tgkill(pid, tid, 0)`
            // fails with ESRCH unless `tid` is a thread of `pid`; EPERM means it is
            // (someone else's). 4–6x cheaper than the procfs lookup (benches/README.md).
            // SAFETY: signal 0 sends nothing; the call only checks the ids.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
            return rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        }
        fs::symlink_metadata(self.root.proc_path(format!("{pid}/task/{tid}"))).is_ok()
    }

    fn list(&self) -> Vec<ProcEntry> {
        let Ok(dir) = fs::read_dir(&self.root.proc) else {
            return Vec::new();
        };
        let mut buf = String::with_capacity(512);
        let mut out = Vec::with_capacity(1024);
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Some(entry) = self.entry_with(pid, &mut buf) {
                out.push(entry);
            }
        }
        out
    }

    fn entry(&self, pid: i32) -> Option<ProcEntry> {
        self.entry_with(pid, &mut String::with_capacity(512))
    }

    fn cmdline(&self, pid: i32, start_time: u64) -> Option<Vec<String>> {
        if self.entry(pid)?.start_time != start_time {
            return None;
        }
        let process =
            procfs::process::Process::new_with_root(self.root.proc_path(pid.to_string())).ok()?;
        let args = process.cmdline().unwrap_or_default();
        // The pid may have been reused while we waited: the start time says.
        (self.entry(pid)?.start_time == start_time).then_some(args)
    }

    fn snapshot(&self, pid: i32) -> Option<ProcessSnapshot> {
        let entry = self.entry(pid)?;
        let process =
            procfs::process::Process::new_with_root(self.root.proc_path(pid.to_string())).ok()?;
        let exe = process.exe().ok();
        let uid = self.real_uid(pid)?;
        let cgroup = self.cgroup(pid);
        let mut threads = Vec::new();
        let mut buf = String::with_capacity(32);
        for tid in crate::affinity::list_tids(&self.root, pid) {
            if self.read_small(&format!("{pid}/task/{tid}/comm"), &mut buf) {
                threads.push(ThreadInfo {
                    tid: tid as u32,
                    comm: buf.trim_end_matches('\n').to_string(),
                });
            }
        }
        // The process may have exec'd or died while we read: the start time is the
        // check that all of this belongs to one process.
        let again = self.entry(pid)?;
        if again.start_time != entry.start_time {
            return None;
        }
        Some(ProcessSnapshot {
            info: ProcessInfo {
                pid: pid as u32,
                comm: again.comm,
                exe,
                cmdline: Vec::new(),
                uid,
                cgroup,
                threads,
                container: None,
            },
            start_time: entry.start_time,
            kernel_thread: entry.kernel_thread,
        })
    }

    fn thread_comm(&self, pid: i32, tid: Tid) -> Option<String> {
        let mut buf = String::with_capacity(32);
        self.read_small(&format!("{pid}/task/{tid}/comm"), &mut buf)
            .then(|| buf.trim_end_matches('\n').to_string())
    }

    fn tasks(&self, pid: i32) -> Option<Vec<Tid>> {
        let dir = fs::read_dir(self.root.proc_path(format!("{pid}/task"))).ok()?;
        Some(
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect(),
        )
    }
}

/// A [`ProcSource`] over in-memory snapshots, for unit tests of the manager.
#[derive(Debug, Default)]
pub struct FakeProcs {
    procs: std::sync::Mutex<std::collections::BTreeMap<i32, ProcessSnapshot>>,
    reads: std::sync::atomic::AtomicUsize,
    snapshots: std::sync::atomic::AtomicUsize,
    /// Command lines read.
    cmdlines: std::sync::atomic::AtomicUsize,
    /// pid → its cgroup cpuset, for the processes given one.
    cpusets: std::sync::Mutex<std::collections::BTreeMap<i32, CpuSet>>,
    /// pid → its resident bytes per node, for the processes given some.
    memory: std::sync::Mutex<std::collections::BTreeMap<i32, crate::memory::NodeBytes>>,
}

impl FakeProcs {
    pub fn new() -> Self {
        FakeProcs::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<i32, ProcessSnapshot>> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<i32, ProcessSnapshot>> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock()
    }

    /// How many reads (of any kind: list, entry, snapshot, thread comm, tasks) were made.
    pub fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many full snapshots were taken.
    pub fn snapshots(&self) -> usize {
        self.snapshots.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many command lines were read.
    pub fn cmdlines(&self) -> usize {
        self.cmdlines.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Gives process `pid` the command line `args`.
    pub fn set_cmdline(&self, pid: i32, args: &[&str]) {
        if let Some(s) = self.lock().get_mut(&pid) {
            s.info.cmdline = args.iter().map(|a| a.to_string()).collect();
        }
    }

    /// Puts process `pid` in cgroup `path`.
    pub fn set_cgroup(&self, pid: i32, path: &str) {
        if let Some(s) = self.lock().get_mut(&pid) {
            s.info.cgroup = Some(path.to_string());
        }
    }

    /// Adds or replaces process `pid` with `comm`, threads `(tid, comm)` (the main
    /// thread is added automatically) and start time.
    pub fn put(&self, pid: i32, comm: &str, start_time: u64, threads: &[(Tid, &str)]) {
        let mut all = vec![ThreadInfo {
            tid: pid as u32,
            comm: comm.to_string(),
        }];
        all.extend(threads.iter().map(|(t, c)| ThreadInfo {
            tid: *t as u32,
            comm: c.to_string(),
        }));
        self.lock().insert(
            pid,
            ProcessSnapshot {
                info: ProcessInfo {
                    pid: pid as u32,
                    comm: comm.to_string(),
                    exe: Some(PathBuf::from(format!("/usr/bin/{comm}"))),
                    cmdline: vec![comm.to_string()],
                    uid: 0,
                    cgroup: Some("/system.slice/test.service".into()),
                    threads: all,
                    container: None,
                },
                start_time,
                kernel_thread: false,
            },
        );
    }

    /// Gives process `pid` resident memory: bytes per node.
    pub fn set_memory(&self, pid: i32, bytes: &[(u32, u64)]) {
        let mut map = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(pid, bytes.iter().copied().collect());
    }

    /// Puts process `pid` in a cgroup cpuset of `cpus` (`None`: in none).
    pub fn set_cpuset(&self, pid: i32, cpus: Option<CpuSet>) {
        let mut map = self.cpusets.lock().unwrap_or_else(|p| p.into_inner());
        match cpus {
            Some(c) => map.insert(pid, c),
            None => map.remove(&pid),
        };
    }

    /// Marks process `pid` as a kernel thread.
    pub fn set_kernel_thread(&self, pid: i32) {
        if let Some(s) = self.lock().get_mut(&pid) {
            s.kernel_thread = true;
            s.info.exe = None;
            s.info.cmdline.clear();
        }
    }

    /// Adds a thread to process `pid`.
    pub fn add_thread(&self, pid: i32, tid: Tid, comm: &str) {
        if let Some(s) = self.lock().get_mut(&pid) {
            s.info.threads.push(ThreadInfo {
                tid: tid as u32,
                comm: comm.to_string(),
            });
        }
    }

    /// Renames a task (the main thread renames the process).
    pub fn rename(&self, pid: i32, tid: Tid, comm: &str) {
        if let Some(s) = self.lock().get_mut(&pid) {
            if tid == pid {
                s.info.comm = comm.to_string();
            }
            for t in &mut s.info.threads {
                if t.tid == tid as u32 {
                    t.comm = comm.to_string();
                }
            }
        }
    }

    /// Removes a thread, or the whole process when `tid == pid`.
    pub fn remove(&self, pid: i32, tid: Tid) {
        let mut procs = self.lock();
        if tid == pid {
            procs.remove(&pid);
        } else if let Some(s) = procs.get_mut(&pid) {
            s.info.threads.retain(|t| t.tid != tid as u32);
        }
    }
}

impl ProcSource for FakeProcs {
    fn memory(&self, pid: i32, nodes: &[u32]) -> Option<crate::memory::NodeBytes> {
        if nodes.len() <= 1 {
            return None;
        }
        let map = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&pid).cloned()
    }

    fn cpuset(&self, pid: i32) -> Option<crate::cgroup::Cpuset> {
        let map = self.cpusets.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&pid).map(|c| crate::cgroup::Cpuset {
            cpus: c.clone(),
            file: format!("/sys/fs/cgroup/fake-{pid}/cpuset.cpus.effective").into(),
        })
    }

    fn is_task_of(&self, pid: i32, tid: Tid) -> bool {
        // Not counted in `reads`: the real check is one `stat`, not a file read.
        self.lock()
            .get(&pid)
            .is_some_and(|s| tid == pid || s.info.threads.iter().any(|t| t.tid == tid as u32))
    }

    fn list(&self) -> Vec<ProcEntry> {
        self.read().values().map(entry_of).collect()
    }

    fn entry(&self, pid: i32) -> Option<ProcEntry> {
        self.read().get(&pid).map(entry_of)
    }

    fn snapshot(&self, pid: i32) -> Option<ProcessSnapshot> {
        self.snapshots
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut s = self.read().get(&pid).cloned()?;
        s.info.cmdline.clear();
        Some(s)
    }

    fn cmdline(&self, pid: i32, start_time: u64) -> Option<Vec<String>> {
        self.cmdlines
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let procs = self.read();
        let s = procs.get(&pid).filter(|s| s.start_time == start_time)?;
        Some(s.info.cmdline.clone())
    }

    fn tasks(&self, pid: i32) -> Option<Vec<Tid>> {
        Some(
            self.read()
                .get(&pid)?
                .info
                .threads
                .iter()
                .map(|t| t.tid as Tid)
                .collect(),
        )
    }

    fn thread_comm(&self, pid: i32, tid: Tid) -> Option<String> {
        self.read()
            .get(&pid)?
            .info
            .threads
            .iter()
            .find(|t| t.tid == tid as u32)
            .map(|t| t.comm.clone())
    }
}

fn entry_of(s: &ProcessSnapshot) -> ProcEntry {
    ProcEntry {
        pid: s.pid(),
        comm: s.info.comm.clone(),
        ppid: 1,
        start_time: s.start_time,
        kernel_thread: s.kernel_thread,
        num_threads: s.info.threads.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (tempfile::TempDir, ProcFs) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let stat = |pid: i32, comm: &str, ppid: i32, flags: u64, start: u64| {
            format!(
                "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"
            )
        };
        let mk = |pid: i32, comm: &str, ppid: i32, flags: u64, start: u64| {
            let d = p.join(pid.to_string());
            fs::create_dir_all(d.join(format!("task/{pid}"))).unwrap();
            fs::write(d.join("stat"), stat(pid, comm, ppid, flags, start)).unwrap();
            fs::write(d.join(format!("task/{pid}/comm")), format!("{comm}\n")).unwrap();
            fs::write(d.join("status"), "Name:\tx\nUid:\t1000\t1000\t1000\t1000\n").unwrap();
            fs::write(
                d.join("cgroup"),
                "12:cpuset:/\n1:name=systemd:/system.slice/md.service\n0::/\n",
            )
            .unwrap();
            fs::write(d.join("cmdline"), format!("{comm}\0--venue=X\0")).unwrap();
        };
        mk(1, "init", 0, 0x400100, 5);
        mk(2, "kthreadd", 0, 0x208040, 6);
        mk(3, "kworker/0:0", 2, 0x4208060, 7);
        mk(4242, "md feed (x)", 1, 0x400000, 900);
        let d = p.join("4242");
        fs::create_dir_all(d.join("task/4243")).unwrap();
        fs::write(d.join("task/4243/comm"), "rx-0\n").unwrap();
        fs::write(p.join("self"), "not a pid").unwrap();
        let root = SysRoot {
            sys: p.join("sys"),
            proc: p.to_path_buf(),
        };
        (dir, ProcFs::new(root))
    }

    #[test]
    fn a_task_belongs_to_its_process_only() {
        // A fixture tree: the procfs lookup.
        let (_d, procs) = fixture();
        assert!(procs.is_task_of(4242, 4243));
        assert!(procs.is_task_of(4242, 4242));
        assert!(!procs.is_task_of(1, 4243));
        assert!(!procs.is_task_of(4242, 4244));
        // The live system: the kernel's answer.
        let live = ProcFs::default();
        let me = std::process::id() as i32;
        let tid = crate::affinity::own_tid();
        assert!(live.is_task_of(me, tid));
        assert!(live.is_task_of(me, me));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let other = child.id() as i32;
        assert!(live.is_task_of(other, other));
        assert!(
            !live.is_task_of(me, other),
            "another process is not our thread"
        );
        assert!(!live.is_task_of(other, tid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!live.is_task_of(other, other), "reaped");
    }

    #[test]
    fn the_cheap_pass_sees_every_process_and_kernel_threads() {
        let (_d, fs) = fixture();
        let mut list = fs.list();
        list.sort_by_key(|e| e.pid);
        let pids: Vec<i32> = list.iter().map(|e| e.pid).collect();
        assert_eq!(pids, vec![1, 2, 3, 4242]);
        let k: Vec<bool> = list.iter().map(|e| e.kernel_thread).collect();
        assert_eq!(k, vec![false, true, true, false]);
        assert_eq!(list[3].comm, "md feed (x)");
        assert_eq!(list[3].start_time, 900);
        assert_eq!(list[3].num_threads, 1);
    }

    /// A snapshot never opens the command line: here it is a FIFO, which would block a
    /// reader as a process whose memory map is held blocks one.
    #[test]
    fn a_snapshot_without_the_command_line_never_opens_it() {
        let (d, fs) = fixture();
        let cmdline = d.path().join("4242/cmdline");
        std::fs::remove_file(&cmdline).unwrap();
        nix::unistd::mkfifo(&cmdline, nix::sys::stat::Mode::S_IRUSR).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fs.clone();
        std::thread::spawn(move || tx.send(reader.snapshot(4242)).unwrap());
        let s = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the snapshot opened the command line")
            .unwrap();
        assert!(s.info.cmdline.is_empty(), "{:?}", s.info.cmdline);
        assert_eq!((s.info.uid, s.start_time), (1000, 900));
        assert_eq!(s.info.threads.len(), 2);
    }

    #[test]
    fn a_snapshot_has_threads_uid_and_cgroup_and_the_command_line_is_read_alone() {
        let (_d, fs) = fixture();
        let s = fs.snapshot(4242).unwrap();
        assert_eq!(s.start_time, 900);
        assert_eq!(s.info.uid, 1000);
        assert!(s.info.cmdline.is_empty(), "{:?}", s.info.cmdline);
        assert_eq!(
            fs.cmdline(4242, 900),
            Some(vec!["md feed (x)".to_string(), "--venue=X".to_string()])
        );
        assert_eq!(fs.cmdline(4242, 901), None, "another process by that pid");
        assert_eq!(s.info.cgroup.as_deref(), Some("/system.slice/md.service"));
        let t: Vec<(u32, &str)> = s
            .info
            .threads
            .iter()
            .map(|t| (t.tid, t.comm.as_str()))
            .collect();
        assert_eq!(t, vec![(4242, "md feed (x)"), (4243, "rx-0")]);
        assert!(fs.snapshot(999).is_none());
        assert_eq!(fs.thread_comm(4242, 4243).as_deref(), Some("rx-0"));
        let mut tids = fs.tasks(4242).unwrap();
        tids.sort_unstable();
        assert_eq!(tids, vec![4242, 4243]);
        assert!(fs.tasks(999).is_none());
    }

    #[test]
    fn a_real_zombie_is_gone_and_a_running_child_is_not() {
        let procfs = ProcFs::new(SysRoot::default());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(procfs.entry(pid).is_some(), "a running child is there");
        child.kill().unwrap();
        // Not reaped: it stays a zombie until `wait`.
        let stat = format!("/proc/{pid}/stat");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !fs::read_to_string(&stat).unwrap().contains(") Z ") {
            assert!(
                std::time::Instant::now() < deadline,
                "never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(procfs.entry(pid), None);
        assert_eq!(procfs.snapshot(pid), None);
        assert!(procfs.list().iter().all(|e| e.pid != pid));
        child.wait().unwrap();
    }
}
