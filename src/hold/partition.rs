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
//! Owns: the cgroup v2 files of partitions (through a mount directory, so tests run on
//! fixture trees). Must not touch: systemd (see `systemd`; the cgroup's `cpuset.cpus`
//! is systemd's `AllowedCPUs=`, set there so that systemd does not undo it), tasks.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::{self, SysRoot};

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

/// The slices whose subtrees the shipped units' `ReadWritePaths=` name
/// (`systemd/pinnerd.service`, `systemd/pinnerd-partition@.service`): what the daemon
/// may write unless a drop-in names more (docs/sharing.md, "A slice of its own").
pub const WRITABLE_SLICES: [&str; 3] = ["system.slice", "user.slice", "machine.slice"];

/// Which files the daemon finds on a read-only mount: by its own `access(2)`, by the
/// mount table of the running daemon (`/proc/PID/mountinfo`, read by a dry run), or,
/// with no daemon to read, by what the shipped units allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountView {
    /// This process's own view: `access(2)` answers `EROFS` (the daemon, inside its
    /// unit's sandbox).
    Here,
    /// Another process's mount table (`/proc/PID/mountinfo`).
    Mountinfo(String),
    /// The shipped units: writable only below [`WRITABLE_SLICES`] of `mount`.
    Shipped { mount: PathBuf },
}

impl MountView {
    /// Whether `path` is on a read-only mount in this view.
    pub fn read_only(&self, path: &Path) -> bool {
        match self {
            MountView::Here => matches!(
                nix::unistd::access(existing(path), nix::unistd::AccessFlags::W_OK),
                Err(nix::errno::Errno::EROFS)
            ),
            MountView::Mountinfo(text) => read_only_in(text, path),
            MountView::Shipped { mount } => !WRITABLE_SLICES
                .iter()
                .any(|s| path.starts_with(mount.join(s))),
        }
    }
}

/// `path` if it exists, else the nearest directory above it that does: a file not there
/// yet (a slice's cpuset files appear only once systemd enables the controller for it,
/// when a unit in it is confined) is on the mount of the directory it will be made in.
fn existing(path: &Path) -> &Path {
    path.ancestors().find(|p| p.exists()).unwrap_or(path)
}

/// Whether `path` is on a read-only mount by the mount table `mountinfo`: the options of
/// the mount whose mount point is the longest that contains it (the last listed of
/// those, which is on top).
pub fn read_only_in(mountinfo: &str, path: &Path) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for line in mountinfo.lines() {
        let (mine, sb) = line.split_once(" - ").unwrap_or((line, ""));
        let f: Vec<&str> = mine.split(' ').collect();
        let (Some(point), Some(opts)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let point = PathBuf::from(unescape_mountinfo(point));
        if !path.starts_with(&point) {
            continue;
        }
        let depth = point.components().count();
        let ro = |o: &str| o.split(',').any(|x| x == "ro");
        let sb_opts = sb.split(' ').nth(2).unwrap_or("");
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, ro(opts) || ro(sb_opts)));
        }
    }
    best.is_some_and(|(_, ro)| ro)
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

    /// Makes `cgroup` an isolated partition of `cpus`: [`grant`](Self::grant), then
    /// `isolated` written and read back. On any failure what was done is undone and
    /// the reason returned. `cpuset.cpus` of the cgroup must already be `cpus`
    /// (systemd's `AllowedCPUs=`).
    pub fn isolate(&self, cgroup: &str, cpus: &CpuSet) -> Result<Partition, Unable> {
        let p = self.grant(cgroup, cpus)?;
        match self.write_partition(cgroup, "isolated") {
            Ok(state) if state == "isolated" => Ok(p),
            Ok(state) => {
                let _ = self.undo(&p);
                Err(Unable::Invalid {
                    cgroup: cgroup.to_string(),
                    state,
                })
            }
            Err(e) => {
                let _ = self.undo(&p);
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

    /// The partition's cgroup back to `member` (never to [`Partition::before`], which
    /// may be a leftover of pinnerd's own), when it still exists.
    pub fn unpartition(&self, p: &Partition) -> Result<(), Unable> {
        if !self.dir(&p.cgroup).is_dir() {
            return Ok(());
        }
        match self.write_partition(&p.cgroup, "member") {
            Ok(state) if state.split_whitespace().next() == Some("member") => Ok(()),
            Ok(state) => Err(Unable::Invalid {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake hierarchy: the root with cpuset, `system.slice` and one service.
    fn tree(isolated_file: bool) -> (tempfile::TempDir, Cgroup2) {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().to_path_buf();
        let m = m.as_path();
        std::fs::write(m.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        if isolated_file {
            std::fs::write(m.join("cpuset.cpus.isolated"), "\n").unwrap();
        }
        for cg in ["system.slice", "system.slice/md.service"] {
            let d = m.join(cg);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
            std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
            std::fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        (dir, Cgroup2::at(m))
    }

    fn read(c: &Cgroup2, cg: &str, f: &str) -> String {
        std::fs::read_to_string(c.dir(cg).join(f))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn ancestors_are_listed_top_down_without_the_root() {
        assert_eq!(
            ancestors("/a.slice/b.service"),
            vec!["/a.slice", "/a.slice/b.service"]
        );
        assert!(ancestors("/").is_empty());
        assert!(!valid_cgroup("/a/../b"));
        assert!(!valid_cgroup("/"));
        assert!(!valid_cgroup("a/b"));
        assert!(valid_cgroup("/a/b"));
    }

    #[test]
    fn a_partition_grants_down_writes_isolated_and_undoes_only_its_own_cpus() {
        let (_d, c) = tree(true);
        // Another partition's CPU is already granted to the slice.
        std::fs::write(c.dir("/system.slice").join("cpuset.cpus.exclusive"), "2\n").unwrap();
        let cpus: CpuSet = "6-7".parse().unwrap();
        let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2,6-7");
        assert_eq!(
            read(&c, "/system.slice/md.service", "cpuset.cpus.exclusive"),
            "6-7"
        );
        assert_eq!(
            read(&c, "/system.slice/md.service", "cpuset.cpus.partition"),
            "isolated"
        );
        assert_eq!(p.before, "member");
        assert_eq!(p.granted.len(), 2);
        assert!(c.holds(&p));
        assert!(c.undo(&p).is_empty());
        assert_eq!(
            read(&c, "/system.slice/md.service", "cpuset.cpus.partition"),
            "member"
        );
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2");
        assert_eq!(
            read(&c, "/system.slice/md.service", "cpuset.cpus.exclusive"),
            ""
        );
    }

    /// The unit gone, systemd turns the cpuset controller off in its slice when no unit
    /// there needs it: the slice's cpuset files vanish with what was granted to it.
    #[test]
    fn a_grant_to_a_slice_whose_cpuset_files_are_gone_is_undone_already() {
        let (_d, c) = tree(true);
        let cpus: CpuSet = "6-7".parse().unwrap();
        let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
        std::fs::remove_dir_all(c.dir("/system.slice/md.service")).unwrap();
        for f in ["cpuset.cpus.exclusive", "cpuset.cpus.exclusive.effective"] {
            let _ = std::fs::remove_file(c.dir("/system.slice").join(f));
        }
        assert_eq!(c.ungrant(&p), vec![]);
    }

    #[test]
    fn what_the_kernel_cannot_do_is_said_and_nothing_is_left_written() {
        let (_d, c) = tree(false);
        let cpus: CpuSet = "6-7".parse().unwrap();
        let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
        assert!(matches!(e, Unable::NoRemotePartitions { .. }), "{e}");
        assert!(e.to_string().contains("6.7"), "{e}");
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");

        let (_d, c) = tree(true);
        std::fs::write(c.mount().join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
        assert!(matches!(e, Unable::CpusetNotOnV2 { .. }), "{e}");

        let (_d, c) = tree(true);
        std::fs::remove_file(
            c.dir("/system.slice/md.service")
                .join("cpuset.cpus.exclusive"),
        )
        .unwrap();
        let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
        assert_eq!(
            e,
            Unable::NoCpuset {
                cgroup: "/system.slice/md.service".into()
            }
        );
        // The slice's grant, made before the failure, was taken back.
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
    }

    #[test]
    fn an_undo_writes_member_whatever_the_cgroup_read_before() {
        // A partition pinnerd left (its record gone): the next grant reads it as the
        // state before, which must not be what the undo puts back.
        let (_d, c) = tree(true);
        let cg = "/system.slice/md.service";
        std::fs::write(c.dir(cg).join("cpuset.cpus.partition"), "isolated\n").unwrap();
        let cpus: CpuSet = "6-7".parse().unwrap();
        let p = c.isolate(cg, &cpus).unwrap();
        assert_eq!(p.before, "isolated");
        assert!(c.undo(&p).is_empty());
        assert_eq!(read(&c, cg, "cpuset.cpus.partition"), "member");
    }

    #[test]
    fn a_partition_no_record_names_is_found_with_its_grants() {
        let (_d, c) = tree(true);
        let cg = "/system.slice/md.service";
        assert_eq!(c.found_partition(cg), None);
        // Another partition's CPU 2 in the slice stays out of what is found.
        std::fs::write(
            c.dir("/system.slice").join("cpuset.cpus.exclusive"),
            "2,4-5\n",
        )
        .unwrap();
        std::fs::write(c.dir(cg).join("cpuset.cpus.exclusive"), "4-5\n").unwrap();
        std::fs::write(c.dir(cg).join("cpuset.cpus.partition"), "isolated\n").unwrap();
        let p = c.found_partition(cg).unwrap();
        assert_eq!(p.cpus, "4-5".parse().unwrap());
        assert_eq!(
            p.granted,
            vec![
                Granted {
                    cgroup: "/system.slice".into(),
                    added: "4-5".parse().unwrap()
                },
                Granted {
                    cgroup: cg.into(),
                    added: "4-5".parse().unwrap()
                },
            ]
        );
        assert!(c.undo(&p).is_empty());
        assert_eq!(read(&c, cg, "cpuset.cpus.partition"), "member");
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2");
        assert_eq!(read(&c, cg, "cpuset.cpus.exclusive"), "");
    }

    #[test]
    fn an_undo_of_a_cgroup_that_is_gone_is_nothing_to_undo() {
        let (_d, c) = tree(true);
        let cpus: CpuSet = "6".parse().unwrap();
        let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
        std::fs::remove_dir_all(c.dir("/system.slice/md.service")).unwrap();
        assert!(!c.holds(&p));
        assert!(c.undo(&p).is_empty());
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
    }

    /// The daemon's mount table as systemd 257 makes it for the shipped unit: the
    /// hierarchy read-only (ProtectControlGroups=yes), the three slices bound writable.
    const DAEMON_MOUNTINFO: &str = "\
24 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
25 24 0:22 / /sys ro,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
27 26 0:23 /system.slice /sys/fs/cgroup/system.slice rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
28 26 0:23 /user.slice /sys/fs/cgroup/user.slice rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
29 24 0:40 / /run/a\\040b ro,relatime - tmpfs tmpfs rw
30 26 0:23 /system.slice/x.service /sys/fs/cgroup/system.slice/x.service ro,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn read_only_files_are_told_by_the_mount_on_top_of_them() {
        let ro = |p: &str| read_only_in(DAEMON_MOUNTINFO, Path::new(p));
        assert!(ro("/sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive"));
        assert!(ro("/sys/fs/cgroup/cgroup.subtree_control"));
        assert!(!ro(
            "/sys/fs/cgroup/system.slice/md.service/cpuset.cpus.partition"
        ));
        assert!(!ro("/sys/fs/cgroup/user.slice/cpuset.cpus.exclusive"));
        // A component is a whole name: system.slicex is not below system.slice.
        assert!(ro("/sys/fs/cgroup/system.slicex/cpuset.cpus.exclusive"));
        // A mount on top of a writable one, and an escaped mount point.
        assert!(ro(
            "/sys/fs/cgroup/system.slice/x.service/cpuset.cpus.partition"
        ));
        assert!(ro("/run/a b/c"));
        assert!(!ro("/var/lib/x"));
        assert!(!read_only_in("", Path::new("/sys")));

        let (_d, c) = tree(true);
        let shipped = MountView::Shipped {
            mount: c.mount().to_path_buf(),
        };
        assert_eq!(
            c.writable_on_the_way("/system.slice/md.service", &shipped),
            Ok(())
        );
        let e = c
            .writable_on_the_way("/trading.slice/md.service", &shipped)
            .unwrap_err();
        assert_eq!(
            e,
            Unable::ReadOnly {
                path: c.dir("/trading.slice").join("cpuset.cpus.exclusive"),
                slice: c.dir("trading.slice"),
            }
        );
        assert!(e.to_string().contains("ReadWritePaths=-"), "{e}");
        // The daemon's own view of a writable fixture tree: nothing read-only.
        assert_eq!(
            c.writable_on_the_way("/trading.slice/md.service", &MountView::Here),
            Ok(())
        );
        // A file not made yet is judged by the directory it will be made in.
        let slice = c.dir("trading.slice");
        std::fs::create_dir_all(&slice).unwrap();
        let file = slice.join("cpuset.cpus.exclusive");
        assert_eq!(existing(&file), slice.as_path());
        std::fs::write(&file, "").unwrap();
        assert_eq!(existing(&file), file.as_path());
    }

    #[test]
    fn the_shipped_units_allow_the_slices_the_dry_run_assumes() {
        for unit in [
            include_str!("../../systemd/pinnerd.service"),
            include_str!("../../systemd/pinnerd-partition@.service"),
        ] {
            let paths: Vec<&str> = unit
                .lines()
                .filter_map(|l| l.strip_prefix("ReadWritePaths="))
                .flat_map(str::split_whitespace)
                .filter(|p| p.trim_start_matches('-').starts_with("/sys/fs/cgroup"))
                .collect();
            let want: Vec<String> = WRITABLE_SLICES
                .iter()
                .map(|s| format!("-/sys/fs/cgroup/{s}"))
                .collect();
            assert_eq!(paths, want);
        }
    }

    #[test]
    fn the_hierarchy_is_found_where_systemd_mounts_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::with_sys(dir.path());
        assert_eq!(Cgroup2::find(&root), Err(Unable::NoCgroup2));
        std::fs::create_dir_all(dir.path().join("fs/cgroup/unified")).unwrap();
        std::fs::write(dir.path().join("fs/cgroup/unified/cgroup.controllers"), "").unwrap();
        assert_eq!(
            Cgroup2::find(&root).unwrap().mount(),
            dir.path().join("fs/cgroup/unified")
        );
        std::fs::write(dir.path().join("fs/cgroup/cgroup.controllers"), "cpuset").unwrap();
        assert_eq!(
            Cgroup2::find(&root).unwrap().mount(),
            dir.path().join("fs/cgroup")
        );
    }

    #[test]
    fn kernels_without_the_dying_partition_fix_are_refused_by_release() {
        for bad in [
            "6.7.0",
            "6.8.0-87-generic",
            "6.11.11-arch1-1",
            "6.12.22+deb13-cloud-amd64",
            "6.13.11",
            "6.14.2-300.fc42.x86_64",
        ] {
            assert!(unsafe_kernel(bad).is_some(), "{bad}");
        }
        for good in [
            "6.12.24",
            "6.12.117+deb13-cloud-amd64",
            "6.13.12",
            "6.14.3",
            "6.15.0",
            "7.0.1",
            "6.6.58",
            "5.14.0-570.el9.x86_64",
            "not a release",
        ] {
            assert!(unsafe_kernel(good).is_none(), "{good}");
        }
        let (_d, c) = tree(true);
        let c = c.on_release(Some("6.12.22+deb13-amd64".into()));
        let e = c
            .isolate("/system.slice/md.service", &"6".parse().unwrap())
            .unwrap_err();
        assert!(matches!(e, Unable::UnsafeKernel { .. }), "{e}");
        assert!(e.to_string().contains("6.12.24"), "{e}");
        assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
    }

    #[test]
    fn populated_is_read_from_cgroup_events_and_a_cgroup_gone_is_empty() {
        let (_d, c) = tree(true);
        let cg = "/system.slice/md.service";
        assert_eq!(c.populated_events(cg), None, "no cgroup.events: not known");
        std::fs::write(c.events_file(cg), "populated 1\nfrozen 0\n").unwrap();
        assert_eq!(c.populated_events(cg), Some(true));
        std::fs::write(c.events_file(cg), "populated 0\nfrozen 0\n").unwrap();
        assert_eq!(c.populated_events(cg), Some(false));
        std::fs::remove_dir_all(c.dir(cg)).unwrap();
        assert_eq!(c.populated_events(cg), Some(false));
    }
}
