//! Isolated cpuset partitions on cgroup v2: what the kernel offers, making one of a
//! cgroup, and undoing it.
//!
//! ```text
//!   root cgroup ── cgroup.controllers has cpuset? cpuset.cpus.isolated exists (6.7+)?
//!        │                                         └─► probe: Ok, or the reason not
//!        ▼  for each ancestor below the root, top down (the kernel wants a child's
//!   system.slice/cpuset.cpus.exclusive        exclusive CPUs inside its parent's)
//!   system.slice/X.service/cpuset.cpus.exclusive   += CPUs (only those not there yet)
//!   system.slice/X.service/cpuset.cpus.partition   = isolated, read back
//!        │                                         └─► "isolated invalid (why)": undone
//!        ▼
//!   Partition { cgroup, cpus, writes } ──► journal ──► undo (bottom up, CPUs taken
//!                                                     back out, never whole files)
//! ```
//!
//! A remote partition (kernel 6.7+) lets a cgroup deep in systemd's tree be the
//! partition while its ancestors stay ordinary members: they only grant the CPUs down
//! through `cpuset.cpus.exclusive`. The partition's CPUs then leave every other cgroup's
//! effective set, the scheduler stops load-balancing onto them and, on kernels that can,
//! unbound workqueues leave them; the root's `cpuset.cpus.isolated` lists them.
//!
//! One path makes and undoes a partition ([`Cgroup2::isolate_by`],
//! [`Cgroup2::unpartition_by`]); who writes `cpuset.cpus.partition` is a
//! [`PartitionWriter`]: the daemon ([`Direct`]), or the holder's helper unit and
//! systemd's `CPUSetPartition=` (see `apply`). Which files the daemon may write:
//! [`MountView`] (`mounts`).
//!
//! Owns: the cgroup v2 files of partitions (through a mount directory, so tests run on
//! fixture trees). Must not touch: systemd (see `systemd`; the cgroup's `cpuset.cpus`
//! is systemd's `AllowedCPUs=`, set there so that systemd does not undo it), tasks.

mod mounts;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::{self, SysRoot};

#[cfg(test)]
use mounts::existing;
pub use mounts::{read_only_in, MountView, WRITABLE_SLICES};

/// Why CPUs cannot be isolated here; said in one line wherever a rule asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unable {
    /// No cgroup v2 hierarchy is mounted where systemd mounts it.
    NoCgroup2,
    /// The cpuset controller is bound to cgroup v1 (or compiled out).
    CpusetNotOnV2 { mount: PathBuf },
    /// The kernel predates remote partitions (6.7): no `cpuset.cpus.isolated`.
    NoRemotePartitions { mount: PathBuf },
    /// A cgroup on the way has no cpuset files: its parent does not enable the cpuset
    /// controller for it.
    NoCpuset { cgroup: String },
    /// A cgroup file could not be read or written.
    File { path: PathBuf, error: String },
    /// A file the partition writes is on a read-only mount where the daemon runs: its
    /// unit's `ReadWritePaths=` does not name the leading slice `slice` (a directory of
    /// the hierarchy) it is below.
    ReadOnly { path: PathBuf, slice: PathBuf },
    /// The kernel refused the partition: what it reported.
    Invalid { cgroup: String, state: String },
    /// The kernel kept the partition when told `member`: what it reads.
    Stays { cgroup: String, state: String },
    /// The kernel release is one whose cpusets are known to corrupt themselves when a
    /// partition's cgroup is removed while another is made (see [`unsafe_kernel`]).
    UnsafeKernel { release: String, why: String },
    /// CPUs are still isolated by a partition pinnerd no longer holds (a removed
    /// cgroup the kernel has not let go of yet): no partition is written meanwhile.
    Pending { cpus: CpuSet },
    /// Anything else, in words (systemd's refusals, the unit a process is in).
    Other(String),
}

impl fmt::Display for Unable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unable::NoCgroup2 => write!(f, "no cgroup v2 hierarchy (cgroup v1 only)"),
            Unable::CpusetNotOnV2 { mount } => write!(
                f,
                "the cpuset controller is not available on cgroup v2 ({} has none; it is bound to cgroup v1)",
                mount.display()
            ),
            Unable::NoRemotePartitions { mount } => write!(
                f,
                "the kernel has no remote cpuset partitions (no {}/cpuset.cpus.isolated; Linux 6.7 or later needed)",
                mount.display()
            ),
            Unable::NoCpuset { cgroup } => {
                write!(f, "cgroup {cgroup} has no cpuset controller enabled")
            }
            Unable::File { path, error } => write!(f, "{}: {error}", path.display()),
            Unable::ReadOnly { path, slice } => write!(
                f,
                "{}: read-only file system: pinnerd may write only below the slices its units' \
                 ReadWritePaths= name; ReadWritePaths=-{} in a drop-in of pinnerd.service and \
                 of pinnerd-partition@.service allows this one (docs/sharing.md, \"A slice of \
                 its own\")",
                path.display(),
                slice.display()
            ),
            Unable::Invalid { cgroup, state } => {
                write!(f, "the kernel made cgroup {cgroup} an invalid partition: {state}")
            }
            Unable::Stays { cgroup, state } => write!(f, "cgroup {cgroup} stays {state}"),
            Unable::UnsafeKernel { release, why } => write!(
                f,
                "kernel {release} lacks a cpuset fix isolation needs ({why})"
            ),
            Unable::Pending { cpus } => write!(
                f,
                "CPUs {cpus} are still isolated by a partition that is being removed; \
                 no partition is made or undone until the kernel lets go of them"
            ),
            Unable::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Unable {}

/// The most cgroups [`Cgroup2::partitions_live`] reads (a machine with tens of
/// thousands of cgroups is judged on the first ones).
pub const WALK_LIMIT: usize = 20_000;

/// The cgroup v2 hierarchy, by its mount directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2 {
    mount: PathBuf,
    /// The running kernel's release (`/proc/sys/kernel/osrelease`), when known: a
    /// release known unsafe for partitions is refused by [`probe`](Self::probe).
    release: Option<String>,
    /// Tests: a partition write reads back as the kernel's refusal without
    /// `CAP_SYS_ADMIN` (as the daemon's own unit gets it).
    #[cfg(test)]
    pub(crate) deny_partition: bool,
}

/// One cgroup file pinnerd added CPUs to: `added` are taken back out on undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The cgroup, as systemd names it (`/system.slice`).
    pub cgroup: String,
    pub added: CpuSet,
}

/// An isolated partition pinnerd made: enough to undo it after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// The partition's cgroup (`/system.slice/md-feed.service`).
    pub cgroup: String,
    pub cpus: CpuSet,
    /// `cpuset.cpus.partition` as it read before (normally `member`): for the record
    /// only. Undoing always writes `member`: on a systemd without `CPUSetPartition=`
    /// only pinnerd makes partitions, so anything else read here is its own leftover.
    pub before: String,
    /// `cpuset.cpus.exclusive` grants, top down.
    pub granted: Vec<Granted>,
}

/// Who writes a cgroup's `cpuset.cpus.partition` for [`Cgroup2::isolate_by`] and
/// [`Cgroup2::unpartition_by`]: the daemon itself ([`Direct`]), or a writer of the
/// holder's (the helper unit where the kernel refuses the daemon, systemd's
/// `CPUSetPartition=`).
pub trait PartitionWriter {
    /// Whether the CPUs are granted down the ancestors' `cpuset.cpus.exclusive` before
    /// the write (systemd's `CPUSetPartition=` grants its own).
    fn grants(&self) -> bool {
        true
    }
    /// Writes `mode` and returns what the cgroup's `cpuset.cpus.partition` reads back
    /// (`isolated`, `member`, or `isolated invalid (why)`).
    fn write(&self, cg2: &Cgroup2, cgroup: &str, mode: &str) -> Result<String, Unable>;
}

/// The daemon writes the file itself.
pub struct Direct;

impl PartitionWriter for Direct {
    fn write(&self, cg2: &Cgroup2, cgroup: &str, mode: &str) -> Result<String, Unable> {
        cg2.write_partition(cgroup, mode)
    }
}

/// `/a/b/c` → `["/a", "/a/b", "/a/b/c"]`; the root itself is not listed.
pub fn ancestors(cgroup: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = String::new();
    for part in cgroup.split('/').filter(|p| !p.is_empty()) {
        path.push('/');
        path.push_str(part);
        out.push(path.clone());
    }
    out
}

/// Whether a cgroup path is one pinnerd may write under: absolute, no `.` or `..`
/// components, not the root.
pub fn valid_cgroup(cgroup: &str) -> bool {
    cgroup.starts_with('/')
        && cgroup.len() < 4096
        && cgroup
            .split('/')
            .skip(1)
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

impl Cgroup2 {
    /// The hierarchy under `root`'s sysfs: `fs/cgroup` when it is cgroup v2 (it has
    /// `cgroup.controllers`), else `fs/cgroup/unified` (a hybrid system).
    pub fn find(root: &SysRoot) -> Result<Cgroup2, Unable> {
        for rel in ["fs/cgroup", "fs/cgroup/unified"] {
            let mount = root.sys_path(rel);
            if mount.join("cgroup.controllers").is_file() {
                let release = sysroot::read_bounded(root.proc_path("sys/kernel/osrelease"))
                    .ok()
                    .map(|r| r.trim().to_string());
                return Ok(Cgroup2::at(mount).on_release(release));
            }
        }
        Err(Unable::NoCgroup2)
    }

    /// A hierarchy mounted at `mount` (tests, and hosts that mount it elsewhere).
    pub fn at(mount: impl Into<PathBuf>) -> Cgroup2 {
        Cgroup2 {
            mount: mount.into(),
            release: None,
            #[cfg(test)]
            deny_partition: false,
        }
    }

    /// The same hierarchy on a kernel of this release (`None`: not known, not gated).
    pub fn on_release(mut self, release: Option<String>) -> Cgroup2 {
        self.release = release;
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Whether this kernel can make isolated partitions below systemd's slices.
    pub fn probe(&self) -> Result<(), Unable> {
        let controllers = self.read("", "cgroup.controllers")?;
        if !controllers.split_whitespace().any(|c| c == "cpuset") {
            return Err(Unable::CpusetNotOnV2 {
                mount: self.mount.clone(),
            });
        }
        if !self.mount.join("cpuset.cpus.isolated").is_file() {
            return Err(Unable::NoRemotePartitions {
                mount: self.mount.clone(),
            });
        }
        if let Some(release) = &self.release {
            if let Some(why) = unsafe_kernel(release) {
                return Err(Unable::UnsafeKernel {
                    release: release.clone(),
                    why: why.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Whether the cgroup has a process in it or below (`populated` of its
    /// `cgroup.events`): `Some(false)` also when the cgroup is gone; `None` when it
    /// exists without that file (not known).
    pub fn populated_events(&self, cgroup: &str) -> Option<bool> {
        if !self.dir(cgroup).is_dir() {
            return Some(false);
        }
        let text = self.read(cgroup, "cgroup.events").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("populated "))
            .map(|v| v.trim() != "0")
    }

    /// The CPUs of every valid partition in the hierarchy now (a cgroup whose
    /// `cpuset.cpus.partition` reads `root` or `isolated`: its
    /// `cpuset.cpus.exclusive.effective`, else its `cpuset.cpus.effective`), whoever
    /// made it. What the root's `cpuset.cpus.isolated` lists beyond these belongs to no
    /// live cgroup: a partition being removed. At most [`WALK_LIMIT`] cgroups are read.
    pub fn partitions_live(&self) -> CpuSet {
        let mut live = CpuSet::new();
        let mut stack = vec![self.mount.clone()];
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > WALK_LIMIT {
                break;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            if dir == self.mount {
                continue;
            }
            let read = |name: &str| {
                sysroot::read_bounded(dir.join(name))
                    .ok()
                    .map(|t| t.trim().to_string())
            };
            let valid =
                read("cpuset.cpus.partition").is_some_and(|s| s == "root" || s == "isolated");
            if !valid {
                continue;
            }
            let cpus = ["cpuset.cpus.exclusive.effective", "cpuset.cpus.effective"]
                .iter()
                .filter_map(|f| read(f).and_then(|t| t.parse::<CpuSet>().ok()))
                .find(|c| !c.is_empty());
            if let Some(c) = cpus {
                live = live.union(&c);
            }
        }
        live
    }

    /// The `cgroup.events` file of a cgroup (watched for `populated` changes).
    pub fn events_file(&self, cgroup: &str) -> PathBuf {
        self.file(cgroup, "cgroup.events")
    }

    /// The CPUs isolated by partitions now (the root's `cpuset.cpus.isolated`).
    pub fn isolated(&self) -> Result<CpuSet, Unable> {
        self.read_cpus("", "cpuset.cpus.isolated")
    }

    /// The directory of `cgroup` (`/system.slice/x.service`).
    pub fn dir(&self, cgroup: &str) -> PathBuf {
        self.mount.join(cgroup.trim_start_matches('/'))
    }

    /// Whether the cgroup exists and holds at least one process.
    pub fn populated(&self, cgroup: &str) -> bool {
        self.read(cgroup, "cgroup.procs")
            .is_ok_and(|t| t.split_whitespace().next().is_some())
    }

    fn file(&self, cgroup: &str, name: &str) -> PathBuf {
        self.dir(cgroup).join(name)
    }

    fn read(&self, cgroup: &str, name: &str) -> Result<String, Unable> {
        let path = self.file(cgroup, name);
        sysroot::read_bounded(&path)
            .map(|t| t.trim().to_string())
            .map_err(|e| file_error(path, &e))
    }

    fn read_cpus(&self, cgroup: &str, name: &str) -> Result<CpuSet, Unable> {
        let text = self.read(cgroup, name)?;
        text.parse()
            .map_err(|e: crate::cpuset::CpuListError| Unable::File {
                path: self.file(cgroup, name),
                error: e.to_string(),
            })
    }

    fn write(&self, cgroup: &str, name: &str, value: &str) -> Result<(), Unable> {
        let path = self.file(cgroup, name);
        // One write(2) per value, as `echo` does: the newline makes an empty list a
        // write at all (the kernel strips it); never created.
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
                return Err(self.read_only(cgroup, path))
            }
            Err(e) => return Err(file_error(path, &e)),
        };
        io::Write::write_all(&mut f, format!("{value}\n").as_bytes())
            .map_err(|e| file_error(path, &e))
    }

    /// The first file a partition of `cgroup` writes (the ancestors' and its own
    /// `cpuset.cpus.exclusive`, top down, then its `cpuset.cpus.partition`) that is on a
    /// read-only mount in `view`, as the refusal the daemon gives: said before anything
    /// is changed, and by the dry runs in the same words.
    pub fn writable_on_the_way(&self, cgroup: &str, view: &MountView) -> Result<(), Unable> {
        let mut files: Vec<PathBuf> = ancestors(cgroup)
            .iter()
            .map(|cg| self.file(cg, "cpuset.cpus.exclusive"))
            .collect();
        files.push(self.file(cgroup, "cpuset.cpus.partition"));
        match files.into_iter().find(|f| view.read_only(f)) {
            Some(path) => Err(self.read_only(cgroup, path)),
            None => Ok(()),
        }
    }

    /// The refusal of a write to `path`, a file of `cgroup` or one of its ancestors, on a
    /// read-only mount: it names the leading slice to allow.
    fn read_only(&self, cgroup: &str, path: PathBuf) -> Unable {
        let first = cgroup.split('/').find(|p| !p.is_empty()).unwrap_or("");
        Unable::ReadOnly {
            path,
            slice: self.dir(first),
        }
    }

    /// Makes `cgroup` an isolated partition of `cpus` as the daemon itself may:
    /// [`isolate_by`](Self::isolate_by) [`Direct`], undone on a refusal.
    pub fn isolate(&self, cgroup: &str, cpus: &CpuSet) -> Result<Partition, Unable> {
        self.isolate_by(cgroup, cpus, &Direct, |p| {
            let _ = self.undo(p);
        })
    }

    /// Makes `cgroup` an isolated partition of `cpus`: [`grant`](Self::grant) where
    /// `writer` [`grants`](PartitionWriter::grants), then `isolated` written by `writer`
    /// and read back. A write that fails takes the grants back; a partition the kernel
    /// refuses (it reads other than `isolated`) is handed to `undo` and the reason
    /// returned. `cpuset.cpus` of the cgroup must already be `cpus` (systemd's
    /// `AllowedCPUs=`).
    pub fn isolate_by(
        &self,
        cgroup: &str,
        cpus: &CpuSet,
        writer: &dyn PartitionWriter,
        undo: impl FnOnce(&Partition),
    ) -> Result<Partition, Unable> {
        let p = if writer.grants() {
            self.grant(cgroup, cpus)?
        } else {
            Partition {
                cgroup: cgroup.to_string(),
                cpus: cpus.clone(),
                before: "member".into(),
                granted: Vec::new(),
            }
        };
        match writer.write(self, cgroup, "isolated") {
            Ok(state) if state == "isolated" => Ok(p),
            Ok(state) => {
                undo(&p);
                Err(Unable::Invalid {
                    cgroup: cgroup.to_string(),
                    state,
                })
            }
            Err(e) => {
                self.ungrant(&p);
                Err(e)
            }
        }
    }

    /// The first half of a partition: the CPUs granted down from the root through every
    /// ancestor's `cpuset.cpus.exclusive` (only those not there yet), and the
    /// partition's state before. Undone on failure.
    pub fn grant(&self, cgroup: &str, cpus: &CpuSet) -> Result<Partition, Unable> {
        if !valid_cgroup(cgroup) {
            return Err(Unable::Other(format!(
                "{cgroup:?} is not a cgroup pinnerd may make a partition of"
            )));
        }
        if cpus.is_empty() {
            return Err(Unable::Other("no CPUs to isolate".into()));
        }
        self.probe()?;
        let mut done = Partition {
            cgroup: cgroup.to_string(),
            cpus: cpus.clone(),
            before: String::new(),
            granted: Vec::new(),
        };
        match self.grant_steps(cgroup, cpus, &mut done) {
            Ok(()) => Ok(done),
            Err(e) => {
                let _ = self.ungrant(&done);
                Err(e)
            }
        }
    }

    fn grant_steps(&self, cgroup: &str, cpus: &CpuSet, done: &mut Partition) -> Result<(), Unable> {
        for cg in ancestors(cgroup) {
            if !self.file(&cg, "cpuset.cpus.exclusive").is_file() {
                return Err(Unable::NoCpuset { cgroup: cg });
            }
            let now = self.read_cpus(&cg, "cpuset.cpus.exclusive")?;
            let added = cpus.difference(&now);
            if added.is_empty() {
                continue;
            }
            self.write(&cg, "cpuset.cpus.exclusive", &now.union(cpus).to_string())?;
            done.granted.push(Granted { cgroup: cg, added });
        }
        done.before = self.read(cgroup, "cpuset.cpus.partition")?;
        Ok(())
    }

    /// Writes `mode` into the cgroup's `cpuset.cpus.partition` and returns what it reads
    /// back (`isolated`, `member`, or `isolated invalid (why)`).
    pub fn write_partition(&self, cgroup: &str, mode: &str) -> Result<String, Unable> {
        #[cfg(test)]
        if self.deny_partition && mode != "member" {
            let refused = format!("{mode} invalid (Enable partition not permitted)");
            std::fs::write(self.file(cgroup, "cpuset.cpus.partition"), refused)
                .map_err(|e| file_error(self.file(cgroup, "cpuset.cpus.partition"), &e))?;
            return self.partition_state(cgroup);
        }
        self.write(cgroup, "cpuset.cpus.partition", mode)?;
        self.partition_state(cgroup)
    }

    /// The cgroup's `cpuset.cpus.partition` as it reads now.
    pub fn partition_state(&self, cgroup: &str) -> Result<String, Unable> {
        self.read(cgroup, "cpuset.cpus.partition")
    }

    /// Undoes a partition: the cgroup back to what it was (when it still exists), then
    /// [`ungrant`](Self::ungrant). Returns what could not be undone; a cgroup that is
    /// gone is nothing to undo.
    pub fn undo(&self, p: &Partition) -> Vec<Unable> {
        let mut failed = Vec::new();
        if let Err(e) = self.unpartition(p) {
            failed.push(e);
        }
        failed.extend(self.ungrant(p));
        failed
    }

    /// [`unpartition_by`](Self::unpartition_by) [`Direct`].
    pub fn unpartition(&self, p: &Partition) -> Result<(), Unable> {
        self.unpartition_by(p, &Direct)
    }

    /// The partition's cgroup back to `member` by `writer` (never to
    /// [`Partition::before`], which may be a leftover of pinnerd's own), when it still
    /// exists.
    pub fn unpartition_by(
        &self,
        p: &Partition,
        writer: &dyn PartitionWriter,
    ) -> Result<(), Unable> {
        if !self.dir(&p.cgroup).is_dir() {
            return Ok(());
        }
        match writer.write(self, &p.cgroup, "member") {
            Ok(state) if state.split_whitespace().next() == Some("member") => Ok(()),
            Ok(state) => Err(Unable::Stays {
                cgroup: p.cgroup.clone(),
                state,
            }),
            Err(_) if !self.dir(&p.cgroup).is_dir() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The granted CPUs taken back out of each ancestor, bottom up; another partition's
    /// grants in the same files stay.
    pub fn ungrant(&self, p: &Partition) -> Vec<Unable> {
        let mut failed = Vec::new();
        for g in p.granted.iter().rev() {
            // A cgroup gone, or one whose cpuset controller systemd turned off (no unit
            // in the slice needs it any more), has no exclusive CPUs left to take back.
            if !self.file(&g.cgroup, "cpuset.cpus.exclusive").is_file() {
                continue;
            }
            let now = match self.read_cpus(&g.cgroup, "cpuset.cpus.exclusive") {
                Ok(now) => now,
                Err(e) => {
                    failed.push(e);
                    continue;
                }
            };
            let left = now.difference(&g.added);
            if left != now {
                if let Err(e) = self.write(&g.cgroup, "cpuset.cpus.exclusive", &left.to_string()) {
                    if self.dir(&g.cgroup).is_dir() {
                        failed.push(e);
                    }
                }
            }
        }
        failed
    }

    /// A unit's `AllowedCPUs=` reset leaves its cgroup's `cpuset.cpus` as it was while
    /// its slice keeps the cpuset controller for another unit (systemd #43846: only a
    /// value set is written), and the kernel refuses to empty the `cpuset.cpus` of a
    /// cgroup with tasks (ENOSPC). So where it still reads `was`, every CPU is written
    /// there but those a sibling holds exclusively (the kernel refuses an overlap:
    /// EINVAL): the cgroup then has its parent's CPUs, as a reset means, and the kernel
    /// gives its tasks their own masks back. Returns what it has now, and whether that
    /// is every CPU (else it is to be widened again once the siblings let go); `None`
    /// when the cgroup has no such file or reads other CPUs.
    pub fn widen_left_cpus(
        &self,
        cgroup: &str,
        was: &CpuSet,
    ) -> Result<Option<(CpuSet, bool)>, Unable> {
        if !self.file(cgroup, "cpuset.cpus").is_file() {
            return Ok(None);
        }
        let now = self.read_cpus(cgroup, "cpuset.cpus")?;
        if &now != was {
            return Ok(None);
        }
        let all = self
            .read_cpus("/", "cpuset.cpus.effective")?
            .union(&self.isolated().unwrap_or_default());
        let mut taken = CpuSet::new();
        let (parent, own) = match cgroup.trim_end_matches('/').rsplit_once('/') {
            Some((p, o)) => (if p.is_empty() { "/" } else { p }, o),
            None => ("/", cgroup),
        };
        if let Ok(entries) = std::fs::read_dir(self.dir(parent)) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if name == own || !e.path().is_dir() {
                    continue;
                }
                let sibling = format!("{}/{name}", parent.trim_end_matches('/'));
                let exclusive = self.exclusive(&sibling).unwrap_or_default();
                if !exclusive.is_empty() {
                    taken = taken.union(&exclusive);
                } else if self
                    .partition_state(&sibling)
                    .is_ok_and(|s| s.split_whitespace().next() != Some("member"))
                {
                    taken =
                        taken.union(&self.read_cpus(&sibling, "cpuset.cpus").unwrap_or_default());
                }
            }
        }
        let want = all.difference(&taken);
        if want.is_empty() {
            return Ok(None);
        }
        if want != now {
            self.write(cgroup, "cpuset.cpus", &want.to_string())?;
        }
        Ok(Some((want, taken.intersection(&all).is_empty())))
    }

    /// The cgroup's `cpuset.cpus.exclusive`.
    pub fn exclusive(&self, cgroup: &str) -> Result<CpuSet, Unable> {
        self.read_cpus(cgroup, "cpuset.cpus.exclusive")
    }

    /// A partition found on `cgroup` that no record names (the cgroup reads other
    /// than `member`): as much of it as pinnerd would have made — the cgroup's own
    /// exclusive CPUs, granted through every ancestor that lists them — so that
    /// undoing it leaves nothing behind. `None` for a member.
    pub fn found_partition(&self, cgroup: &str) -> Option<Partition> {
        let state = self.partition_state(cgroup).ok()?;
        if state.split_whitespace().next() == Some("member") {
            return None;
        }
        let cpus = self.exclusive(cgroup).unwrap_or_default();
        let granted = ancestors(cgroup)
            .into_iter()
            .filter_map(|cg| {
                let added = self.exclusive(&cg).ok()?.intersection(&cpus);
                (!added.is_empty()).then_some(Granted { cgroup: cg, added })
            })
            .collect();
        Some(Partition {
            cgroup: cgroup.to_string(),
            cpus,
            before: state,
            granted,
        })
    }

    /// Whether `p` still holds: the cgroup exists and reads back `isolated`.
    pub fn holds(&self, p: &Partition) -> bool {
        self.read(&p.cgroup, "cpuset.cpus.partition")
            .is_ok_and(|s| s == "isolated")
    }
}

/// The cpuset fix a kernel must have before pinnerd makes partitions on it, by the
/// stable release that first carries it: upstream a22b3d54de94 "cgroup/cpuset: Fix race
/// between newly created partition and dying one" (Linux 6.15; 6.14.3, 6.13.12 and
/// 6.12.24 in stable). Without it a partition whose cgroup is removed keeps its CPUs in
/// the kernel's partition masks until the cgroup goes offline (after an RCU grace
/// period), and a partition made over the same CPUs meanwhile leaves those masks wrong
/// when it does. Partitions came in 6.7; 6.7 to 6.11 never got the fix.
const DYING_PARTITION_FIX: [(u32, u32); 3] = [(6, 12), (6, 13), (6, 14)];
const DYING_PARTITION_FIXED_AT: [u32; 3] = [24, 12, 3];

/// Why partitions are not safe on this kernel release (`uname -r`), if they are not.
/// Only mainline numbering is judged; a release below 6.7 with remote partitions is a
/// vendor's backport and is not second-guessed.
pub fn unsafe_kernel(release: &str) -> Option<&'static str> {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (nums.next(), nums.next()) else {
        return None;
    };
    let patch = nums.next().flatten().unwrap_or(0);
    const WHY: &str = "cgroup/cpuset: Fix race between newly created partition and dying one: \
         Linux 6.12.24, 6.13.12, 6.14.3 or 6.15 and later";
    if major != 6 || !(7..=14).contains(&minor) {
        return None;
    }
    match DYING_PARTITION_FIX
        .iter()
        .position(|&v| v == (major, minor))
    {
        Some(i) if patch >= DYING_PARTITION_FIXED_AT[i] => None,
        _ => Some(WHY),
    }
}

fn file_error(path: PathBuf, e: &io::Error) -> Unable {
    Unable::File {
        path,
        error: match e.raw_os_error() {
            Some(libc::EROFS) => {
                "read-only file system (the unit's ReadWritePaths= lacks it)".into()
            }
            _ => e.to_string(),
        },
    }
}
