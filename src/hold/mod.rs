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
//! Owns: the decisions above, the journal, the order of steps. Must not touch: the
//! plan (it is given CPUs), task placement inside the unit (the manager's), the bus
//! connection's details (see `systemd`), cgroup files' details (see `partition`).

mod dry;
mod journal;
mod names;
pub mod partition;
mod settle;
pub mod systemd;
mod vouch;

pub use dry::{cannot_isolate_here, dry_line, unit_of_cgroup};
pub use journal::{Journal, JOURNAL_FILE};
pub use vouch::{owner_of, Owner, OwnerOf, Vouch};

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use partition::{Cgroup2, Partition, Unable};
use systemd::{Allowed, UnitError, UnitInfo, Units};

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
}

/// What holding one process came to, for `explain`, `status`, `plan --live` and the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldReport {
    pub rule: String,
    pub pid: u32,
    /// The unit confined (`md-feed.service`, or the scope pinnerd made).
    pub unit: Option<String>,
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
    /// `AllowedCPUs=` (and `AllowedMemoryNodes=`) are set on the unit.
    pub confined: bool,
    /// The rule asked for isolation.
    pub isolate: bool,
    /// The CPUs are an isolated partition now.
    pub isolated: bool,
    /// What could not be done, in one line.
    pub problem: Option<String>,
}

impl HoldReport {
    /// One line: what is held and how, or why not.
    pub fn line(&self) -> String {
        let mut s = String::new();
        if let (true, Some(unit)) = (self.confined, &self.unit) {
            s.push_str(&format!("unit {unit}: AllowedCPUs={}", self.cpus));
            if let Some(m) = &self.mems {
                s.push_str(&format!(", AllowedMemoryNodes={m}"));
            }
            s.push_str(" (set by pinnerd)");
        }
        if self.isolated {
            if !s.is_empty() {
                s.push_str("; ");
            }
            s.push_str(&format!("CPUs {} isolated (cpuset partition)", self.cpus));
        }
        if let Some(p) = &self.problem {
            if !s.is_empty() {
                s.push_str("; ");
            }
            if self.isolate && !self.isolated {
                s.push_str(&format!(
                    "not isolated: {p}; the rule stays merely exclusive"
                ));
            } else {
                s.push_str(&format!("unit not confined: {p}"));
            }
        }
        s
    }
}

/// What came of one unit's target in a reconcile.
struct Outcome {
    unit: Option<String>,
    confined: bool,
    isolated: bool,
    problem: Option<String>,
}

impl Outcome {
    fn not_held(problem: Option<String>) -> Outcome {
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
fn place_for(info: &UnitInfo, rule: &str, pid: u32) -> Result<Place, String> {
    let name = info.name.as_str();
    if name == "init.scope" || info.cgroup == "/" || info.cgroup.is_empty() {
        return Err(format!(
            "pid {pid} runs in {name} (cgroup {:?}), which pinnerd does not confine",
            info.cgroup
        ));
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
    Err(format!(
        "pid {pid} runs in {name}, not in a service or a scope"
    ))
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
/// reset (systemd #43846): every task of `cgroup` whose mask is exactly `held` gets the
/// effective CPUs of the cgroup, or of its nearest ancestor that has a cpuset. Returns
/// how many were given back.
pub type GiveBack = dyn Fn(&Cgroup2, &str, &CpuSet) -> usize + Send;

/// The real [`GiveBack`]: `cgroup.threads` and `sched_setaffinity`.
pub fn give_back_masks(cg2: &Cgroup2, cgroup: &str, held: &CpuSet) -> usize {
    use crate::affinity::AffinityOps;
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
    let ops = crate::affinity::SystemOps::new(crate::sysroot::SysRoot::default());
    let mut n = 0;
    for tid in threads
        .split_whitespace()
        .filter_map(|t| t.parse::<i32>().ok())
    {
        if ops.get_affinity(tid).is_ok_and(|m| &m == held)
            && ops.set_affinity(tid, &effective).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// The holder: owns every hold and the journal. Runs on a thread of its own (its calls
/// to systemd may wait); the daemon sends it wants and gets reports.
pub struct Holder {
    units: Result<Box<dyn Units>, String>,
    cg2: Result<Cgroup2, Unable>,
    journal: Journal,
    give_back: Box<GiveBack>,
    held: Vec<Hold>,
    /// Holds a previous run left whose processes still run, kept until `grace_until`.
    recovered: Vec<Hold>,
    grace_until: Option<Instant>,
    /// Each wanted pid's unit, asked once.
    units_of: HashMap<u32, Result<UnitInfo, String>>,
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
}

/// A hold refused after something was changed for it.
#[derive(Debug, Clone)]
struct Refusal {
    /// What the unit was wanted for: a change is tried at once.
    signature: Signature,
    why: String,
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
pub type Connect = dyn Fn() -> Result<Box<dyn Units>, String> + Send;

impl Holder {
    pub fn new(
        units: Result<Box<dyn Units>, String>,
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
        }
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

    /// At start: reads what a previous run left. Holds whose unit still has processes
    /// are kept (isolation is never left for nobody, nor dropped under a running
    /// process) until the daemon wants them again or `RECOVERY_GRACE` passes; the rest
    /// are undone now. Returns lines for the log.
    pub fn recover(&mut self, now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        let left = match self.journal.load() {
            Ok(left) => left,
            Err(e) => {
                self.note_baseline(&[]);
                return vec![format!("hold journal not used: {e}")];
            }
        };
        // What is isolated now and none of the journal's partitions: not pinnerd's.
        self.note_baseline(&left);
        let (alive, dead): (Vec<Hold>, Vec<Hold>) = left
            .into_iter()
            .partition(|h| self.cg2.as_ref().is_ok_and(|c| c.populated(&h.cgroup)));
        for h in alive {
            lines.push(format!(
                "kept what a previous run held for rule {} in {} until it is wanted again",
                h.rule, h.unit
            ));
            self.recovered.push(h);
        }
        for h in dead {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            lines.push(if problems.is_empty() {
                format!("undid what a previous run held for rule {rule} in {unit}")
            } else {
                format!(
                    "could not fully undo what a previous run held for rule {rule} in {unit} ({}); kept in the journal",
                    problems.join("; ")
                )
            });
        }
        if !self.recovered.is_empty() {
            self.grace_until = Some(now + RECOVERY_GRACE);
        }
        self.save();
        lines
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

    /// Recovered holds nobody wanted within the grace: undone. Undos put off are tried
    /// again.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        if self.retry_unreleased(now) {
            self.save();
        }
        let Some(until) = self.grace_until else {
            return Vec::new();
        };
        if now < until {
            return Vec::new();
        }
        self.grace_until = None;
        let mut lines = Vec::new();
        while let Some(h) = self.recovered.pop() {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            lines.push(format!(
                "undid what a previous run held for rule {rule} in {unit}: not wanted again{}",
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(" ({}; kept in the journal)", problems.join("; "))
                }
            ));
        }
        self.save();
        lines
    }

    fn unit_of(&mut self, pid: u32) -> Result<UnitInfo, String> {
        if let Some(known) = self.units_of.get(&pid) {
            return known.clone();
        }
        let units = self.units.as_ref().map_err(|e| e.clone())?;
        let got = units.unit_of_pid(pid).map_err(|e| e.to_string());
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
                r.problem = o.problem.clone();
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
                .and_then(|info| place_for(&info, &w.rule, w.pid))
            {
                Ok(p) => p,
                Err(why) => {
                    reports[i].problem = Some(why);
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
                    reports[i].problem =
                        Some(format!("unit {key} is already held for rule {}", t.rule));
                    continue;
                }
                Some(t) => {
                    t.pids.push(w.pid);
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
                    target_of[i] = Some(key);
                }
                _ => reports[i].problem = Some(why),
            }
        }
        (targets, target_of)
    }

    /// Why target `t` of unit `key` may not be held while other units are, if so: its
    /// CPUs overlap those of another unit held with isolation (or it would isolate CPUs
    /// another unit is confined to), or those of a partition whose undo is put off.
    /// Confining it would have systemd write the unit's `cpuset.cpus` over another
    /// partition's exclusive CPUs, which Linux 6.12 answers with a warning in
    /// `update_parent_effective_cpumask` and, once the partition's cgroup goes, with
    /// CPUs left isolated for nobody (seen in the VM: one rule's explicit CPUs wanted
    /// by each of its short-lived services).
    fn clash(&self, key: &str, t: &Target) -> Option<String> {
        let others = self
            .held
            .iter()
            .chain(&self.recovered)
            .chain(&self.leftover)
            .filter(|h| h.unit != key);
        for h in others {
            let isolating = h.partition.is_some() || (h.isolate && !h.emptied);
            let common = h.cpus.intersection(&t.cpus);
            if (isolating || t.isolate) && !common.is_empty() {
                return Some(format!(
                    "CPUs {common} are held for {} (rule {}){}: a CPU is held for one unit at a time where one of them isolates it",
                    h.unit,
                    h.rule,
                    if isolating { " as an isolated partition" } else { "" }
                ));
            }
        }
        self.settle
            .borrow()
            .put_off_cpus()
            .into_iter()
            .find_map(|(cgroup, cpus)| {
                let common = cpus.intersection(&t.cpus);
                (!common.is_empty()).then(|| {
                    format!("CPUs {common} are still a partition of {cgroup} being undone")
                })
            })
    }

    /// Whether `w`'s rule may hold `place` for `w.pid` (see `vouch`), or why not.
    fn vouched(&self, place: &Place, w: &Want) -> Result<(), String> {
        let processes = |unit: &str| match &self.units {
            Ok(units) => units.processes(unit).map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        vouch::vouch(place, w, &*self.owner_of, processes)
    }

    /// Lets go of what is no longer wanted as it is held, or whose unit emptied and has
    /// processes again (a new start of it: held anew). The holds kept stay on record
    /// while the others are undone: their partitions are live ones.
    fn release_unwanted(&mut self, targets: &BTreeMap<String, Target>) {
        let cg2 = self.cg2.as_ref().ok();
        let (kept, gone): (Vec<Hold>, Vec<Hold>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| {
                let refilled =
                    h.emptied && cg2.and_then(|c| c.populated_events(&h.cgroup)) == Some(true);
                targets
                    .get(&h.unit)
                    .is_some_and(|t| h.same_target(t) && !refilled)
            });
        self.held = kept;
        for h in gone {
            let (rule, unit, cpus) = (h.rule.clone(), h.unit.clone(), h.cpus.clone());
            for p in self.undo_or_keep(h) {
                tracing::warn!(rule = %rule, unit = %unit, problem = %p, "rule {rule}: the hold of {unit} not fully undone ({p}); kept in the journal");
            }
            tracing::info!(rule = %rule, unit = %unit, cpus = %cpus, "rule {rule}: unit {unit} let go, CPUs {cpus} given back and its own AllowedCPUs= with them");
        }
    }

    /// Holds a previous run left that are wanted as they are: taken over, untouched;
    /// wanted otherwise: undone; not wanted (yet): kept until the grace ends.
    fn take_over_recovered(&mut self, targets: &BTreeMap<String, Target>) {
        let mut undo = Vec::new();
        for h in std::mem::take(&mut self.recovered) {
            match targets.get(&h.unit) {
                Some(t) if h.same_target(t) && !self.held.iter().any(|k| k.unit == h.unit) => {
                    tracing::info!(rule = %h.rule, unit = %h.unit, "rule {}: the hold of {} left by a previous run taken over", h.rule, h.unit);
                    self.held.push(h);
                }
                Some(_) => undo.push(h),
                None => self.recovered.push(h),
            }
        }
        for h in undo {
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            for p in self.undo_or_keep(h) {
                tracing::warn!(rule = %rule, unit = %unit, problem = %p, "rule {rule}: the hold of {unit} left by a previous run not fully undone ({p}); kept in the journal");
            }
        }
        if self.recovered.is_empty() {
            self.grace_until = None;
        }
    }

    /// Applies every target not held yet (a refusal stands while wanted the same way,
    /// until its backoff has passed); what came of each, by unit.
    fn apply_new(&mut self, targets: &BTreeMap<String, Target>) -> HashMap<String, Outcome> {
        let mut outcome = HashMap::new();
        for (key, t) in targets {
            if let Some(h) = self.held.iter().find(|h| &h.unit == key) {
                // Held: nothing of it is refused (nor due to be tried again).
                self.refused.remove(key);
                let isolated = h.partition.is_some();
                let problem = (t.isolate && !isolated).then(|| {
                    if h.emptied {
                        format!(
                            "unit {} has no process left: its partition was undone before \
                             its cgroup goes",
                            h.unit
                        )
                    } else {
                        "the partition was refused earlier".to_string()
                    }
                });
                outcome.insert(
                    key.clone(),
                    Outcome {
                        unit: Some(h.unit.clone()),
                        confined: h.confined,
                        isolated,
                        problem,
                    },
                );
                continue;
            }
            // A CPU is isolated for one unit at a time: nothing is changed for a unit
            // whose CPUs another held unit isolates, or that would isolate CPUs another
            // unit is confined to (see `clash`).
            if let Some(why) = self.clash(key, t) {
                outcome.insert(key.clone(), Outcome::not_held(Some(why)));
                continue;
            }
            let before = self
                .refused
                .get(key)
                .filter(|r| r.signature == t.signature())
                .cloned();
            if let Some(r) = &before {
                if (self.clock)() < r.retry_at {
                    outcome.insert(key.clone(), Outcome::not_held(Some(r.why.clone())));
                    continue;
                }
                tracing::debug!(unit = %key, after = ?r.wait, "a refused hold tried again");
            }
            let (hold, problem, touched) = self.apply(t);
            match (&hold, &problem, touched) {
                (None, Some(why), true) => {
                    let wait = before
                        .as_ref()
                        .map_or(REFUSAL_RETRY, |r| (r.wait * 2).min(REFUSAL_RETRY_MAX));
                    tracing::debug!(unit = %key, problem = %why, retry_in = ?wait, "hold refused");
                    self.refused.insert(
                        key.clone(),
                        Refusal {
                            signature: t.signature(),
                            why: why.clone(),
                            retry_at: (self.clock)() + wait,
                            wait,
                        },
                    );
                }
                _ => {
                    self.refused.remove(key);
                }
            }
            let entry = match &hold {
                Some(h) => Outcome {
                    unit: Some(h.unit.clone()),
                    confined: h.confined,
                    isolated: h.partition.is_some(),
                    problem,
                },
                None => Outcome::not_held(problem),
            };
            if let Some(h) = hold {
                self.held.push(h);
            }
            self.save();
            outcome.insert(key.clone(), entry);
        }
        outcome
    }

    /// Applies one target: the hold made (if anything was done), what could not be, and
    /// whether anything was changed on the way (and taken back) before it failed.
    fn apply(&mut self, t: &Target) -> (Option<Hold>, Option<String>, bool) {
        let units = match &self.units {
            Ok(u) => u,
            Err(e) => return (None, Some(e.clone()), false),
        };
        // Isolation that cannot work is said before anything is changed.
        let cannot = if t.isolate {
            match &self.cg2 {
                Err(e) => Some(e.to_string()),
                Ok(c) => c.probe().err().map(|e| e.to_string()),
            }
        } else {
            None
        };
        if let (true, Some(why)) = (t.isolate, &cannot) {
            return (None, Some(why.clone()), false);
        }
        // Nor is anything changed for a partition while a removed one is pending: tried
        // again at the next retry, as a hold not made.
        if t.isolate {
            if let Err(e) = self.settled(None) {
                return (None, Some(e.to_string()), false);
            }
        }
        let (unit, cgroup, adopted, before) = match &t.place {
            Place::Unit(u) => match units.allowed(&u.name) {
                Ok(read) => {
                    let own = self.own_values(units.as_ref(), u, read);
                    (u.name.clone(), u.cgroup.clone(), false, own)
                }
                Err(e) => return (None, Some(e.to_string()), false),
            },
            Place::Adopt { scope, slice } => {
                let cgroup = format!("/{}/{scope}", slice_path(slice));
                (scope.clone(), cgroup, true, Allowed::default())
            }
        };
        let mut hold = Hold {
            rule: t.rule.clone(),
            unit: unit.clone(),
            cgroup,
            pids: t.pids.clone(),
            adopted,
            cpus: t.cpus.clone(),
            mems: t.mems.clone(),
            before_cpus: before.cpus,
            before_mems: before.mems,
            confined: true,
            isolate: t.isolate,
            partition: None,
            by_systemd: false,
            emptied: false,
        };
        // On record before the first change: a crash halfway leaves nothing unknown. The
        // unit's leftover, if any, is replaced by this hold, which carries its values.
        let (replaced, rest): (Vec<Hold>, Vec<Hold>) = std::mem::take(&mut self.leftover)
            .into_iter()
            .partition(|l| l.unit == unit);
        self.leftover = rest;
        self.held.push(hold.clone());
        self.save();
        self.held.pop();
        let confined = match &t.place {
            Place::Unit(_) => units.set_allowed(&unit, Some(&t.cpus), t.mems.as_ref()),
            Place::Adopt { scope, slice } => units.adopt(
                scope,
                slice,
                t.pids[0],
                &Allowed {
                    cpus: t.cpus.clone(),
                    mems: t.mems.clone().unwrap_or_default(),
                },
                &format!("pinnerd: rule {} holds pid {}", t.rule, t.pids[0]),
            ),
        };
        if let Err(e) = confined {
            let why = e.to_string();
            // Nothing was changed (the call failed): tried again at the next retry.
            hold.confined = false;
            self.undo_or_keep(hold);
            // Nothing was changed: the leftover stays on record as it was.
            self.leftover.extend(replaced);
            return (None, Some(why), false);
        }
        if adopted {
            // The process now runs in the new scope: its cgroup as systemd made it.
            self.units_of.remove(&t.pids[0]);
            match units.unit_of_pid(t.pids[0]) {
                Ok(info) if info.name == unit => hold.cgroup = info.cgroup,
                Ok(info) => {
                    tracing::warn!(pid = t.pids[0], unit = %info.name, scope = %unit, "pid {} is not in the scope {unit} made for it (it is in {})", t.pids[0], info.name);
                }
                Err(e) => {
                    tracing::warn!(pid = t.pids[0], error = %e, "cannot read the scope made for pid {}: {e}", t.pids[0])
                }
            }
        }
        let mut problem = None;
        match units.effective(&unit) {
            Ok(eff) if eff.cpus != t.cpus => {
                problem = Some(format!(
                    "systemd gives unit {unit} CPUs {} instead of {}",
                    eff.cpus, t.cpus
                ));
            }
            Ok(_) => {}
            Err(e) => problem = Some(e.to_string()),
        }
        if t.isolate && problem.is_none() {
            match self.partition(&hold) {
                Ok((p, by_systemd)) => {
                    hold.partition = Some(p);
                    hold.by_systemd = by_systemd;
                }
                Err(e) => problem = Some(e.to_string()),
            }
        }
        if t.isolate && hold.partition.is_none() {
            // Merely exclusive, as before: the unit is not left confined for nothing.
            self.undo_or_keep(hold);
            return (None, problem, true);
        }
        (Some(hold), problem, true)
    }

    /// The unit's own `AllowedCPUs=`/`AllowedMemoryNodes=`, of what systemd reads now:
    /// a value a leftover hold set on the unit is that hold's value before; a unit whose
    /// cgroup is a partition systemd did not make carries pinnerd's leftovers from a run
    /// whose record is gone: the partition is undone here, and the values read are not
    /// the unit's own (nothing set).
    fn own_values(&self, units: &dyn Units, u: &UnitInfo, read: Allowed) -> Allowed {
        let mut own = read.clone();
        let left = self
            .leftover
            .iter()
            .find(|l| l.unit == u.name && l.confined);
        if let Some(l) = left {
            if read.cpus == l.cpus {
                own.cpus = l.before_cpus.clone();
            }
            if l.mems.as_ref() == Some(&read.mems) {
                own.mems = l.before_mems.clone();
            }
        }
        let Ok(cg2) = &self.cg2 else { return own };
        let Some(p) = cg2.found_partition(&u.cgroup) else {
            return own;
        };
        // Only where systemd has no partition of its own on the unit (and says so).
        let pinnerds = match units.partition_property(&u.name) {
            Ok(None) => true,
            Ok(Some(v)) => v.is_empty() || v == "member",
            Err(_) => false,
        };
        if !pinnerds {
            return own;
        }
        tracing::warn!(
            unit = %u.name, cpus = %p.cpus, state = %p.before, allowed_cpus = %read.cpus,
            "a partition no record names (pinnerd's, from a run whose record is gone) undone; the unit's AllowedCPUs= and AllowedMemoryNodes= are not taken as its own"
        );
        for e in self.undo_partition(cg2, &p) {
            tracing::warn!(unit = %u.name, problem = %e, "unit {}: the partition an earlier run left not fully undone: {e}", u.name);
        }
        if left.is_none() {
            own = Allowed::default();
        }
        own
    }

    /// Makes the hold's cgroup an isolated partition: through systemd's own
    /// `CPUSetPartition=` where it has it and that is read back as isolated, else by
    /// the cgroup files: the CPUs granted down, then `isolated` written by the daemon,
    /// or, where the kernel refuses it that (a remote partition takes `CAP_SYS_ADMIN`,
    /// which the daemon's unit does not have), by the helper unit
    /// `pinnerd-partition@isolated:PATH.service`; read back either way.
    fn partition(&self, h: &Hold) -> Result<(Partition, bool), Unable> {
        let cg2 = self.cg2.as_ref().map_err(Clone::clone)?;
        self.settled(None)?;
        if let Ok(units) = &self.units {
            if let Ok(Some(_)) = units.partition_property(&h.unit) {
                if units.set_partition(&h.unit, "isolated").is_ok() {
                    let p = Partition {
                        cgroup: h.cgroup.clone(),
                        cpus: h.cpus.clone(),
                        before: "member".into(),
                        granted: Vec::new(),
                    };
                    if cg2.holds(&p) {
                        return Ok((p, true));
                    }
                    let _ = units.set_partition(&h.unit, "member");
                }
            }
        }
        let p = cg2.grant(&h.cgroup, &h.cpus)?;
        let state = match self.write_partition(cg2, &h.cgroup, "isolated") {
            Ok(state) => state,
            Err(e) => {
                cg2.ungrant(&p);
                return Err(e);
            }
        };
        if state == "isolated" {
            return Ok((p, false));
        }
        self.undo_partition(cg2, &p);
        Err(Unable::Invalid {
            cgroup: h.cgroup.clone(),
            state,
        })
    }

    /// Writes `mode` into a cgroup's `cpuset.cpus.partition` and returns what it reads
    /// back: by the daemon, then by the helper unit when the kernel refused the daemon
    /// for want of a privilege.
    fn write_partition(&self, cg2: &Cgroup2, cgroup: &str, mode: &str) -> Result<String, Unable> {
        let state = cg2.write_partition(cgroup, mode)?;
        if state.split_whitespace().next() == Some(mode) && !state.contains("invalid") {
            return Ok(state);
        }
        if !state.contains("not permitted") {
            return Ok(state);
        }
        let Ok(units) = &self.units else {
            return Ok(state);
        };
        let Some(helper) = systemd::partition_helper_unit(mode, cgroup) else {
            return Ok(state);
        };
        units
            .run_oneshot(&helper)
            .map_err(|e| Unable::Other(format!("{state}; the helper failed: {e}")))?;
        cg2.partition_state(cgroup)
    }

    /// Takes a partition back: `member` again (by the helper where the daemon may
    /// not; never the state read before, which may be a leftover of pinnerd's), then —
    /// once the kernel no longer lists its CPUs as isolated — the granted CPUs out of
    /// the ancestors. Nothing is written while another removed partition is pending,
    /// and the grants stay while the kernel keeps the CPUs: either way the rest is put
    /// off and tried again (see `settle`). Returns what was not undone.
    fn undo_partition(&self, cg2: &Cgroup2, p: &Partition) -> Vec<String> {
        if let Err(e) = self.settled(Some(p)) {
            self.put_off(p, false);
            return vec![format!(
                "undo of the partition of {} put off: {e}",
                p.cgroup
            )];
        }
        let mut problems = Vec::new();
        if cg2.dir(&p.cgroup).is_dir() {
            match self.write_partition(cg2, &p.cgroup, "member") {
                Ok(state) if state.split_whitespace().next() == Some("member") => {}
                Ok(state) => problems.push(format!("cgroup {} stays {state}", p.cgroup)),
                Err(_) if !cg2.dir(&p.cgroup).is_dir() => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
        if !problems.is_empty() {
            problems.extend(cg2.ungrant(p).into_iter().map(|e| e.to_string()));
            return problems;
        }
        if let Err(kept) = self.released(p) {
            self.put_off(p, true);
            return vec![kept];
        }
        problems.extend(cg2.ungrant(p).into_iter().map(|e| e.to_string()));
        problems
    }

    /// Undoes a hold: partition, then the unit's own values, then masks systemd left.
    /// Returns what could not be undone of the partition and of the unit, apart.
    fn undo_parts(&self, h: &Hold) -> (Vec<String>, Vec<String>) {
        let mut partition = Vec::new();
        if let (Some(p), Ok(cg2)) = (&h.partition, &self.cg2) {
            if h.by_systemd {
                if let Ok(u) = &self.units {
                    if let Err(e) = u.set_partition(&h.unit, "member") {
                        partition.push(e.to_string());
                    }
                }
            }
            partition.extend(self.undo_partition(cg2, p));
        }
        let mut problems = Vec::new();
        if h.confined {
            let gone = || !self.cg2.as_ref().is_ok_and(|c| c.dir(&h.cgroup).is_dir());
            match &self.units {
                Ok(u) => {
                    let mems = h.mems.as_ref().map(|_| &h.before_mems);
                    match u.set_allowed(&h.unit, Some(&h.before_cpus), mems) {
                        Ok(()) => {}
                        // A unit that is gone holds nothing any more.
                        Err(e) if gone() => {
                            tracing::debug!(unit = %h.unit, error = %e, "unit gone before it was let go");
                        }
                        Err(e) => problems.push(e.to_string()),
                    }
                }
                Err(_) if gone() => {}
                Err(e) => problems.push(format!("AllowedCPUs= not given back: {e}")),
            }
            if let Ok(cg2) = &self.cg2 {
                if cg2.dir(&h.cgroup).is_dir() {
                    let n = (self.give_back)(cg2, &h.cgroup, &h.cpus);
                    if n > 0 {
                        tracing::info!(unit = %h.unit, tasks = n, "unit {}: the masks systemd left on CPUs {} given back to {n} tasks", h.unit, h.cpus);
                    }
                }
            }
        }
        (partition, problems)
    }

    /// Undoes a hold; one not fully undone is kept as a leftover (in the journal),
    /// less a partition whose undo waits for the kernel: that one is on record with
    /// `settle`, which tries it again. Returns what could not be undone.
    fn undo_or_keep(&mut self, mut h: Hold) -> Vec<String> {
        let (mut problems, unit) = self.undo_parts(&h);
        let put_off = h
            .partition
            .as_ref()
            .is_some_and(|p| self.settle.borrow().tracks(&p.cgroup));
        if !unit.is_empty() || (!problems.is_empty() && !put_off) {
            if put_off {
                h.partition = None;
            }
            self.leftover.push(h);
        }
        problems.extend(unit);
        problems
    }

    /// At stop: everything held (and every leftover) is undone, partitions first, one
    /// hold after another until `until`; the journal is rewritten after each, so what is
    /// not undone by then — or could not be — stays in it for the next start. Returns
    /// lines for the log (warnings), one per hold left.
    pub fn release_all(&mut self, until: Instant) -> Vec<String> {
        let mut todo: Vec<Hold> = std::mem::take(&mut self.held)
            .into_iter()
            .chain(std::mem::take(&mut self.recovered))
            .chain(std::mem::take(&mut self.leftover))
            .collect();
        // CPUs isolated for nobody are the costliest leftover: partitions first.
        todo.sort_by_key(|h| h.partition.is_none());
        self.grace_until = None;
        let mut lines = Vec::new();
        let mut todo = std::collections::VecDeque::from(todo);
        while let Some(h) = todo.pop_front() {
            if (self.clock)() >= until {
                todo.push_front(h);
                lines.extend(todo.iter().map(|h| {
                    format!(
                        "hold for rule {} in {} not undone before the stop's deadline; left in the journal for the next start",
                        h.rule, h.unit
                    )
                }));
                break;
            }
            // Still in the journal while it is undone.
            let (rule, unit) = (h.rule.clone(), h.unit.clone());
            let problems = self.undo_or_keep(h);
            if !problems.is_empty() {
                lines.push(format!(
                    "hold for rule {rule} in {unit} not fully undone at stop ({}); left in the journal for the next start",
                    problems.join("; ")
                ));
            }
            let left: Vec<Hold> = self
                .leftover
                .iter()
                .chain(&todo)
                .cloned()
                .chain(self.settle.borrow().journal_holds())
                .collect();
            if let Err(e) = self.journal.save(&left) {
                tracing::warn!(error = %e, "cannot write the hold journal: {e}");
            }
        }
        self.leftover.extend(todo);
        // Undos put off for the kernel: tried once more while the deadline allows.
        if (self.clock)() < until {
            self.retry_unreleased(Instant::now() + UNRELEASED_RETRY);
        }
        self.save();
        lines
    }

    /// At stop, when systemd is restarting the daemon's own unit (`systemctl restart`,
    /// a package upgrade): everything held stays as it is and on record, for the next
    /// start to take over untouched as after a crash, so that isolation does not lapse
    /// across the restart. `None` when it is no restart (or systemd cannot say): then
    /// the stop undoes what is held ([`release_all`](Self::release_all)). Returns lines
    /// for the log.
    pub fn keep_for_restart(&mut self) -> Option<Vec<String>> {
        let units = self.units.as_ref().ok()?;
        let held = self.held.len() + self.recovered.len();
        if held == 0 || !units.restarting(std::process::id()).unwrap_or(false) {
            return None;
        }
        self.save();
        Some(vec![format!(
            "the daemon restarts: {} kept for the next start to take over",
            crate::words::count(held, "hold")
        )])
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
