//! Holding CPUs for a rule's units: systemd's `AllowedCPUs=`/`AllowedMemoryNodes=` on
//! the unit its process runs in (`unit-cpuset = true`: what the unit starts later is
//! born on the rule's CPUs and memory), and an isolated cpuset partition of them
//! (`isolate = true`: no other task runs there).
//!
//! ```text
//!   Want { rule, pid, cpus, mems, isolate }     (the daemon, after every change)
//!     │  systemd: GetUnitByPID ─► the unit, or a scope of its own for a process in a
//!     │           login session (StartTransientUnit PIDs=, same slice)
//!     ▼
//!   Target per unit ─► diff with what is held ─► release / apply
//!     apply:   journal first ─► AllowedCPUs=/AllowedMemoryNodes= (runtime) ─►
//!              partition (see `partition`) ─► read back ─► HoldReport
//!     release: partition undone ─► the unit's own values back ─► masks systemd left
//!              on the CPUs given back (systemd #43846) ─► journal
//!     every partition write waits while a removed partition is pending, every release
//!     is checked in the root's cpuset.cpus.isolated, a unit whose cgroup.events reads
//!     `populated 0` has its partition undone at once (see `settle`)
//!   holds.json (runtime directory, kept across every stop): a crash, kill -9 or a
//!   stop cut short leaves it; the next start keeps what still has its processes until
//!   the daemon wants it again, and undoes the rest
//! ```
//!
//! For whom: only a process the rule vouches for with what a user cannot imitate, its
//! owner (`user`) or its being a system service's main process (`unit`); see `vouch`.
//!
//! A value pinnerd wrote is never taken as a unit's own. What a hold puts back is what
//! the unit had before it, read when the hold is made, except:
//! - a partition is always undone to `member` (on a systemd without `CPUSetPartition=`
//!   only pinnerd makes partitions);
//! - a unit whose cgroup is already a partition that systemd did not make (its
//!   `CPUSetPartition=` absent or `member`) carries pinnerd's leftovers from a run whose
//!   record is gone: that partition is undone first (with the grants of its CPUs in
//!   the ancestors) and the unit's `AllowedCPUs=`/`AllowedMemoryNodes=` are taken as
//!   not set;
//! - a unit that still has what a hold whose undo did not finish set (this run's, or a
//!   journal entry of a previous run that could not be undone at start: such holds
//!   stay in the journal, see `leftover`) gets that hold's own values back instead.
//!
//! At stop, holds are undone (partitions first) until a deadline the daemon sets below
//! its unit's stop timeout; what is not undone by then stays in the journal for the
//! next start, and the log says which. A hold refused after the unit was changed for it
//! is tried again after [`REFUSAL_RETRY`], doubling up to [`REFUSAL_RETRY_MAX`].
//!
//! Which cgroup becomes the partition: the unit's. A service is held whole (all its
//! processes, the main one never moved out of its cgroup); a process of a login session
//! (`session-N.scope`, the user's slice) is moved into a scope of its own
//! (`pinnerd-RULE-PID.scope`, in the same slice) so that the shell beside it is not
//! confined; any other scope (a container's, `systemd-run --scope`) is held whole, and
//! so is a container: its processes are confined together. `init.scope` never.
//!
//! Where: for whom (`vouch`), making holds (`apply`), letting go and the stop
//! (`release`), the kernel's pace with partitions (`settle`), what a hold came to and
//! its words (`report`: [`HoldState`]); here the types, the
//! grouping of wants by unit and the reconcile that runs them in order.
//!
//! Owns: the decisions above, the journal, the order of steps. Must not touch: the
//! plan (it is given CPUs), task placement inside the unit (the manager's), the bus
//! connection's details (see `systemd`), cgroup files' details (see `partition`).

mod apply;
mod dry;
mod error;
mod journal;
mod names;
pub mod partition;
mod release;
mod report;
mod settle;
pub mod systemd;
mod vouch;

pub use dry::{cannot_isolate_here, cannot_write_partition, dry_line, unit_of_cgroup};
pub use error::{HoldError, OwnerError};
pub use journal::{Journal, JOURNAL_FILE};
pub use report::{Confined, HoldReport, HoldState, Shortfall};
pub use vouch::{owner_of, Owner, OwnerOf, Vouch};

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use partition::{Cgroup2, Partition, Unable};
use systemd::{UnitError, UnitInfo, Units};

/// How long holds a previous run left (their processes still running) wait for the
/// daemon to want them again before they are undone.
pub const RECOVERY_GRACE: Duration = Duration::from_secs(5);
/// How long a unit let go may take to widen its cpuset before masks are given back.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(2);
/// A hold refused after something was changed for it is tried again this long after
/// the refusal, then twice as long after each further refusal, up to
/// [`REFUSAL_RETRY_MAX`].
pub const REFUSAL_RETRY: Duration = Duration::from_secs(30);
/// The longest wait between two tries of a refused hold.
pub const REFUSAL_RETRY_MAX: Duration = Duration::from_secs(600);
/// How long a partition write waits for the kernel to let go of the CPUs of a partition
/// being removed (a removed cgroup's, or one just set back to `member`) before it is
/// refused (a new partition) or put off (an undo). The kernel lets go at once where it
/// has the fix [`partition::unsafe_kernel`] asks for; after an RCU grace period without.
pub const SETTLE_WAIT: Duration = Duration::from_secs(3);
/// How often the wait above looks again.
const SETTLE_POLL: Duration = Duration::from_millis(50);
/// How often an undo put off (CPUs the kernel kept isolated) is tried again.
const UNRELEASED_RETRY: Duration = Duration::from_secs(5);

/// What the daemon wants held for one managed process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub rule: String,
    pub pid: u32,
    /// The CPUs the rule holds for it.
    pub cpus: CpuSet,
    /// With `memory = "follow"`: the nodes of those CPUs.
    pub mems: Option<CpuSet>,
    /// `isolate = true`: the CPUs become an isolated partition.
    pub isolate: bool,
    /// What the rule names that a user cannot imitate: the hold is made only for a
    /// process it vouches for (see `vouch`).
    pub vouch: Vouch,
    /// The mask each of its tasks (by tid) had before pinnerd first touched it: what
    /// a task the hold narrowed gets back when the hold lets go (see [`GiveBack`]).
    pub originals: BTreeMap<u32, CpuSet>,
}

/// A unit's cgroup whose `cpuset.cpus` was widened short of every CPU at its let-go (a
/// sibling still held some), to be widened again, and its tasks' masks given back
/// again, after each later undo.
#[derive(Debug, Clone)]
struct Widened {
    unit: String,
    /// The CPUs it was widened to.
    cpus: CpuSet,
    /// The masks from before pinnerd of its tasks, by tid.
    originals: BTreeMap<u32, CpuSet>,
}

/// What came of one unit's target in a reconcile.
struct Outcome {
    unit: Option<String>,
    confined: bool,
    isolated: bool,
    problem: Option<HoldError>,
}

impl Outcome {
    fn not_held(problem: Option<HoldError>) -> Outcome {
        Outcome {
            unit: None,
            confined: false,
            isolated: false,
            problem,
        }
    }
}

impl HoldReport {
    /// The report of a want before anything is known of it.
    fn wanted(w: &Want) -> HoldReport {
        HoldReport {
            rule: w.rule.clone(),
            pid: w.pid,
            unit: None,
            cpus: w.cpus.clone(),
            mems: w.mems.clone(),
            confined: false,
            isolate: w.isolate,
            isolated: false,
            problem: None,
        }
    }
}

/// Where a process's hold lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// The unit itself (a service, a container's or pinnerd's own scope).
    Unit(UnitInfo),
    /// A scope pinnerd makes for the process, in this slice.
    Adopt { scope: String, slice: String },
}

/// The cgroup a process's hold uses, or why there is none.
fn place_for(info: &UnitInfo, rule: &str, pid: u32) -> Result<Place, HoldError> {
    let name = info.name.as_str();
    if name == "init.scope" || info.cgroup == "/" || info.cgroup.is_empty() {
        return Err(HoldError::NotConfinable {
            pid,
            unit: name.to_string(),
            cgroup: info.cgroup.clone(),
        });
    }
    let session = name.ends_with(".scope")
        && !name.starts_with("pinnerd-")
        && (name.starts_with("session-")
            || info.slice.starts_with("user-")
            || info.slice == "user.slice");
    if session {
        return Ok(Place::Adopt {
            scope: systemd::scope_name(rule, pid),
            slice: info.slice.clone(),
        });
    }
    if name.ends_with(".service") || name.ends_with(".scope") {
        return Ok(Place::Unit(info.clone()));
    }
    Err(HoldError::NotAServiceOrScope {
        pid,
        unit: name.to_string(),
    })
}

/// One unit held: enough to undo it after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub rule: String,
    pub unit: String,
    pub cgroup: String,
    pub pids: Vec<u32>,
    /// The unit is a scope pinnerd made (its values before are "not set").
    pub adopted: bool,
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
    /// The unit's own `AllowedCPUs=`/`AllowedMemoryNodes=` before (empty: not set).
    pub before_cpus: CpuSet,
    pub before_mems: CpuSet,
    /// `AllowedCPUs=` was set (journalled before the call).
    pub confined: bool,
    pub isolate: bool,
    pub partition: Option<Partition>,
    /// The partition was made through systemd's `CPUSetPartition=`.
    #[serde(default)]
    pub by_systemd: bool,
    /// The unit's cgroup reported no process left, and its partition was undone then,
    /// before systemd could remove the cgroup (what else is held stays until the
    /// daemon lets the unit go).
    #[serde(default)]
    pub emptied: bool,
    /// The mask each task of its processes (by tid) had before pinnerd first touched
    /// it, as the daemon last wanted it held: given back when the hold lets go, also
    /// after a crash (see [`GiveBack`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub originals: BTreeMap<u32, CpuSet>,
    /// The unit's runtime drop-ins of [`systemd::HELD_PROPERTIES`] before the hold, by
    /// property (`None`: there was none): put back as they were when it lets go. A
    /// property whose drop-in could not be read is not listed, and never touched.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropins: BTreeMap<String, Option<String>>,
}

impl Hold {
    fn same_target(&self, t: &Target) -> bool {
        self.rule == t.rule
            && self.unit == t.unit_name()
            && self.cpus == t.cpus
            && self.mems == t.mems
            && self.isolate == t.isolate
    }
}

/// What one unit should hold.
#[derive(Debug, Clone)]
struct Target {
    rule: String,
    place: Place,
    pids: Vec<u32>,
    cpus: CpuSet,
    mems: Option<CpuSet>,
    isolate: bool,
    /// Its processes' tasks' masks from before pinnerd (see [`Want::originals`]).
    originals: BTreeMap<u32, CpuSet>,
}

impl Target {
    fn signature(&self) -> Signature {
        (
            self.rule.clone(),
            self.cpus.clone(),
            self.mems.clone(),
            self.isolate,
        )
    }

    fn unit_name(&self) -> &str {
        match &self.place {
            Place::Unit(u) => &u.name,
            Place::Adopt { scope, .. } => scope,
        }
    }
}

/// Gives back the masks systemd leaves on a unit's tasks when its `AllowedCPUs=` is
/// reset (systemd #43846): every task of `cgroup` whose mask is exactly `held` (or its
/// original narrowed to `held`) gets its original from `originals` (by tid: the mask
/// before pinnerd first touched it), else the effective CPUs of the cgroup, or of its
/// nearest ancestor that has a cpuset. Returns how many were given back.
pub type GiveBack = dyn Fn(&Cgroup2, &str, &CpuSet, &BTreeMap<u32, CpuSet>) -> usize + Send;

/// The real [`GiveBack`]: the tasks of `cgroup.threads`, their masks given back by
/// [`crate::affinity::give_back`] through the kernel, `/proc` read under `root`.
pub fn give_back_masks(root: crate::sysroot::SysRoot) -> Box<GiveBack> {
    Box::new(move |cg2, cgroup, held, originals| {
        let ops = crate::affinity::SystemOps::new(root.clone());
        give_back_in(&ops, cg2, cgroup, held, originals)
    })
}

/// [`give_back_masks`] through `ops`: the tasks of `cgroup` get their masks back once
/// its cpuset has let go of the held CPUs; the fallback is the effective CPUs of the
/// cgroup, or of its nearest ancestor that has a cpuset.
fn give_back_in(
    ops: &dyn crate::affinity::AffinityOps,
    cg2: &Cgroup2,
    cgroup: &str,
    held: &CpuSet,
    originals: &BTreeMap<u32, CpuSet>,
) -> usize {
    let dir = cg2.dir(cgroup);
    // The unit's own cpuset files may be gone with its AllowedCPUs= (systemd turns the
    // controller off for it): what binds it then is its nearest ancestor's.
    let effective = || {
        dir.ancestors()
            .take_while(|d| d.starts_with(cg2.mount()))
            .find_map(|d| {
                crate::sysroot::read_bounded(d.join("cpuset.cpus.effective"))
                    .ok()
                    .and_then(|t| t.trim().parse::<CpuSet>().ok())
            })
    };
    // systemd answers before it has realised the unit's cgroup anew: wait (bounded) for
    // the cpuset to let go of the held CPUs.
    let mut waited = Duration::ZERO;
    let effective = loop {
        match effective() {
            Some(e) if !e.is_empty() && &e != held => break e,
            _ if waited >= GIVE_BACK_WAIT => return 0,
            _ => {
                std::thread::sleep(Duration::from_millis(20));
                waited += Duration::from_millis(20);
            }
        }
    };
    let Ok(threads) = crate::sysroot::read_bounded(dir.join("cgroup.threads")) else {
        return 0;
    };
    let tids = threads
        .split_whitespace()
        .filter_map(|t| t.parse::<crate::affinity::Tid>().ok());
    crate::affinity::give_back(ops, tids, held, originals, &effective)
}

/// The holder: owns every hold and the journal. Runs on a thread of its own (its calls
/// to systemd may wait); the daemon sends it wants and gets reports.
pub struct Holder {
    units: Result<Box<dyn Units>, UnitError>,
    cg2: Result<Cgroup2, Unable>,
    journal: Journal,
    give_back: Box<GiveBack>,
    held: Vec<Hold>,
    /// Holds a previous run left whose processes still run, kept until `grace_until`.
    recovered: Vec<Hold>,
    grace_until: Option<Instant>,
    /// Each wanted pid's unit, asked once.
    units_of: HashMap<u32, Result<UnitInfo, UnitError>>,
    /// Connects to systemd again while it is not there (see [`Holder::reconnecting`]).
    connect: Option<Box<Connect>>,
    /// Targets refused after something was changed for them (the unit confined, then
    /// the partition refused), by unit: tried again only after a backoff while wanted
    /// the same way, since every try confines the unit and takes it back (which can
    /// reset the masks of other units' tasks in its slice).
    refused: HashMap<String, Refusal>,
    /// Holds whose undo did not finish (systemd not reachable, a call refused, the
    /// stop's deadline): kept in the journal, undone again at stop and at the next
    /// start, and what they set is not taken as their unit's own.
    leftover: Vec<Hold>,
    /// The time, for the refusals' backoff and the stop's deadline (tests step it).
    clock: Box<Clock>,
    /// A process's owner (see `vouch`).
    owner_of: Box<OwnerOf>,
    /// What the kernel isolates that is not pinnerd's, and the partitions whose undo
    /// waits for the kernel (see `settle`).
    settle: std::cell::RefCell<settle::Settle>,
    /// The `cgroup.events` watches of held partitions, when the holder thread watches.
    watch: Option<settle::Watch>,
    /// Units let go whose `cpuset.cpus` systemd left could not have every CPU yet (a
    /// sibling held some exclusively): by cgroup, the unit and what was written,
    /// widened again after each later undo.
    widened: std::cell::RefCell<BTreeMap<String, Widened>>,
    /// Where the daemon may write cgroup files: its own view (tests: another).
    mounts: partition::MountView,
}

/// A hold refused after something was changed for it.
#[derive(Debug, Clone)]
struct Refusal {
    /// What the unit was wanted for: a change is tried at once.
    signature: Signature,
    why: HoldError,
    /// Not tried again before this.
    retry_at: Instant,
    /// The wait before `retry_at`; the next one is twice as long, at most
    /// [`REFUSAL_RETRY_MAX`].
    wait: Duration,
}

/// The holder's clock.
pub type Clock = dyn Fn() -> Instant + Send;

/// What a unit is wanted for: a refusal stands until this changes.
type Signature = (String, CpuSet, Option<CpuSet>, bool);

/// A connection to systemd's manager, or why there is none.
pub type Connect = dyn Fn() -> Result<Box<dyn Units>, UnitError> + Send;

impl Holder {
    pub fn new(
        units: Result<Box<dyn Units>, UnitError>,
        cg2: Result<Cgroup2, Unable>,
        journal: Journal,
        give_back: Box<GiveBack>,
    ) -> Holder {
        Holder {
            units,
            cg2,
            journal,
            give_back,
            held: Vec::new(),
            recovered: Vec::new(),
            grace_until: None,
            units_of: HashMap::new(),
            connect: None,
            refused: HashMap::new(),
            leftover: Vec::new(),
            clock: Box::new(Instant::now),
            owner_of: Box::new(owner_of),
            settle: std::cell::RefCell::new(settle::Settle::new(SETTLE_WAIT)),
            watch: None,
            widened: Default::default(),
            mounts: partition::MountView::Here,
        }
    }

    /// Tells read-only cgroup files by `mounts` instead of this process's own view
    /// (tests: the shipped units' sandbox on a fixture tree).
    pub fn with_mounts(mut self, mounts: partition::MountView) -> Holder {
        self.mounts = mounts;
        self
    }

    /// Reads the time from `clock` instead of [`Instant::now`].
    pub fn with_clock(mut self, clock: Box<Clock>) -> Holder {
        self.clock = clock;
        self
    }

    /// Tells processes' owners with `owner_of` instead of `/proc` (tests).
    pub fn with_owners(mut self, owner_of: Box<OwnerOf>) -> Holder {
        self.owner_of = owner_of;
        self
    }

    /// How long partition writes wait for the kernel to let go of a removed
    /// partition's CPUs (tests: short).
    pub fn settling(self, wait: Duration) -> Holder {
        self.settle.borrow_mut().wait = wait;
        self
    }

    /// While systemd is not reachable, each reconcile tries `connect` again (a daemon
    /// started before the bus, a systemd re-executing).
    pub fn reconnecting(mut self, connect: Box<Connect>) -> Holder {
        self.connect = Some(connect);
        self
    }

    /// Why nothing can be isolated on this machine, if so (for `check` and `status`).
    pub fn cannot_isolate(&self) -> Option<String> {
        match &self.cg2 {
            Err(e) => Some(e.to_string()),
            Ok(c) => c.probe().err().map(|e| e.to_string()),
        }
    }

    /// When the holder next needs to run without a new want: recovered holds expire
    /// ([`expire`](Self::expire)), a refused hold is due to be tried again
    /// ([`retry_due`](Self::retry_due)), an undo put off is tried again.
    pub fn deadline(&self) -> Option<Instant> {
        let retry = self.settle.borrow().retry_at();
        self.refused
            .values()
            .map(|r| r.retry_at)
            .chain(self.grace_until)
            .chain(retry)
            .min()
    }

    /// Whether a refused hold is due to be tried again (on the holder's clock): then the
    /// last wants are to be reconciled again.
    pub fn retry_due(&self) -> bool {
        let now = (self.clock)();
        self.refused.values().any(|r| now >= r.retry_at)
    }

    fn unit_of(&mut self, pid: u32) -> Result<UnitInfo, UnitError> {
        if let Some(known) = self.units_of.get(&pid) {
            return known.clone();
        }
        let units = self.units.as_ref().map_err(Clone::clone)?;
        let got = units.unit_of_pid(pid);
        self.units_of.insert(pid, got.clone());
        got
    }

    /// Makes what is held match `wants`: releases what is no longer wanted (or wanted
    /// otherwise), applies what is new. Returns a report per want, in order.
    pub fn reconcile(&mut self, wants: &[Want]) -> Vec<HoldReport> {
        // A unit not found is asked for again at the next reconcile (a race with the
        // process's start, a systemd that was restarting); a found one is kept.
        self.units_of
            .retain(|pid, u| u.is_ok() && wants.iter().any(|w| w.pid == *pid));
        if self.units.is_err() {
            if let Some(connect) = &self.connect {
                self.units = connect();
            }
        }
        self.retry_unreleased(Instant::now());
        self.release_emptied();
        let mut reports: Vec<HoldReport> = wants.iter().map(HoldReport::wanted).collect();
        let (targets, target_of) = self.group(wants, &mut reports);
        self.release_unwanted(&targets);
        self.take_over_recovered(&targets);
        self.refused.retain(|unit, _| targets.contains_key(unit));
        self.save();
        let outcome = self.apply_new(&targets);
        for (i, key) in target_of.iter().enumerate() {
            let (Some(key), r) = (key, &mut reports[i]) else {
                continue;
            };
            let Some(o) = outcome.get(key) else { continue };
            r.unit = o.unit.clone();
            r.confined = o.confined;
            r.isolated = o.isolated;
            // The unit's CPUs are the union of its processes': report them.
            if let Some(h) = self.held.iter().find(|h| &h.unit == key) {
                r.cpus = h.cpus.clone();
                r.mems = h.mems.clone();
            }
            if r.problem.is_none() {
                r.problem = o.problem.as_ref().map(ToString::to_string);
            }
        }
        self.sync_watches();
        reports
    }

    /// The wants grouped by the unit that holds them, and each want's unit (`None`:
    /// its report says why it has none).
    fn group(
        &mut self,
        wants: &[Want],
        reports: &mut [HoldReport],
    ) -> (BTreeMap<String, Target>, Vec<Option<String>>) {
        let mut targets: BTreeMap<String, Target> = BTreeMap::new();
        let mut target_of: Vec<Option<String>> = vec![None; wants.len()];
        let mut unvouched = Vec::new();
        for (i, w) in wants.iter().enumerate() {
            let place = match self
                .unit_of(w.pid)
                .map_err(HoldError::from)
                .and_then(|info| place_for(&info, &w.rule, w.pid))
            {
                Ok(p) => p,
                Err(why) => {
                    reports[i].problem = Some(why.to_string());
                    continue;
                }
            };
            let key = match &place {
                Place::Unit(u) => u.name.clone(),
                Place::Adopt { scope, .. } => scope.clone(),
            };
            if let Err(why) = self.vouched(&place, w) {
                unvouched.push((i, key, why));
                continue;
            }
            match targets.get_mut(&key) {
                Some(t) if t.rule != w.rule => {
                    let why = HoldError::HeldForAnother {
                        unit: key,
                        rule: t.rule.clone(),
                    };
                    reports[i].problem = Some(why.to_string());
                    continue;
                }
                Some(t) => {
                    t.pids.push(w.pid);
                    t.originals.extend(w.originals.clone());
                    t.cpus = t.cpus.union(&w.cpus);
                    t.mems = match (&t.mems, &w.mems) {
                        (Some(a), Some(b)) => Some(a.union(b)),
                        (a, b) => a.clone().or_else(|| b.clone()),
                    };
                    t.isolate |= w.isolate;
                }
                None => {
                    targets.insert(
                        key.clone(),
                        Target {
                            rule: w.rule.clone(),
                            place,
                            pids: vec![w.pid],
                            cpus: w.cpus.clone(),
                            mems: w.mems.clone(),
                            isolate: w.isolate,
                            originals: w.originals.clone(),
                        },
                    );
                }
            }
            target_of[i] = Some(key);
        }
        // A process the rule does not vouch for, in a unit held whole for one it does
        // (a child of the service's main process): in that hold, its CPUs not added.
        for (i, key, why) in unvouched {
            match targets.get_mut(&key) {
                Some(t) if t.rule == wants[i].rule && matches!(t.place, Place::Unit(_)) => {
                    t.pids.push(wants[i].pid);
                    t.originals.extend(wants[i].originals.clone());
                    target_of[i] = Some(key);
                }
                _ => reports[i].problem = Some(why.to_string()),
            }
        }
        (targets, target_of)
    }

    /// Whether `w`'s rule may hold `place` for `w.pid` (see `vouch`), or why not.
    fn vouched(&self, place: &Place, w: &Want) -> Result<(), HoldError> {
        let processes = |unit: &str| match &self.units {
            Ok(units) => units.processes(unit),
            Err(e) => Err(e.clone()),
        };
        vouch::vouch(place, w, &*self.owner_of, processes)
    }

    /// What is held now.
    pub fn held(&self) -> &[Hold] {
        &self.held
    }

    fn save(&self) {
        let all: Vec<Hold> = self
            .held
            .iter()
            .chain(&self.recovered)
            .chain(&self.leftover)
            .cloned()
            .chain(self.settle.borrow().journal_holds())
            .collect();
        if let Err(e) = self.journal.save(&all) {
            tracing::warn!(error = %e, "cannot write the hold journal: {e}");
        }
    }
}

/// `user-1000.slice` → `user.slice/user-1000.slice`: a slice's cgroup path, each dash
/// a level, as systemd lays slices out.
pub fn slice_path(slice: &str) -> String {
    if slice == "-.slice" || slice.is_empty() {
        return String::new();
    }
    let stem = slice.trim_end_matches(".slice");
    let mut parts = Vec::new();
    let mut acc = String::new();
    for piece in stem.split('-') {
        if !acc.is_empty() {
            acc.push('-');
        }
        acc.push_str(piece);
        parts.push(format!("{acc}.slice"));
    }
    parts.join("/")
}

impl From<UnitError> for Unable {
    fn from(e: UnitError) -> Unable {
        Unable::Other(e.to_string())
    }
}

#[cfg(test)]
mod tests;
