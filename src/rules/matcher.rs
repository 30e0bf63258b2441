//! The matcher: a process snapshot and the compiled rules in, the winning rule and
//! each thread's placement out — plus, for `Explain`, why every rule did or did not
//! match. Pure: no I/O, no clocks.
//!
//! Precedence is total and independent of files: higher `priority` first, then the
//! rule name in byte order. A first pass on `comm` (one combined [`GlobSet`] over every
//! rule's `comm` globs) narrows 1,000 rules to the few that can match, so a storm of
//! new processes costs a hash lookup or two each.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use std::collections::HashMap;

use globset::{GlobSet, GlobSetBuilder};

use super::compile::{ContainerMatcher, PlacementRequest, Rule};
use super::patterns::{GlobList, Pattern};

/// What the matcher needs to know about a process, as read from /proc by the watcher.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// `/proc/PID/comm`, without the trailing newline.
    pub comm: String,
    /// `/proc/PID/exe`; `None` when it could not be read (no CAP_SYS_PTRACE, kernel thread).
    pub exe: Option<PathBuf>,
    /// `/proc/PID/cmdline`, split at NULs.
    pub cmdline: Vec<String>,
    /// Real uid.
    pub uid: u32,
    /// The cgroup path, e.g. `/system.slice/md-feed.service` (the v2 `0::` entry, or
    /// the v1 hierarchy the watcher chose); `None` when unknown.
    pub cgroup: Option<String>,
    pub threads: Vec<ThreadInfo>,
    /// The container the process runs in, when known (from the runtime over NRI, or
    /// from what the runtime leaves on disk); `None` for a process in no container.
    pub container: Option<ContainerInfo>,
}

/// What the container keys of `[rule.match]` are matched against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The CRI metadata name.
    pub name: String,
    pub pod: String,
    pub namespace: String,
    /// The pod's labels; `None` when unknown (known only from the runtime over NRI): a
    /// rule with `pod-labels` does not match then.
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

impl ContainerMatcher {
    /// `Ok(())` when every container key matches `c`, else the first that does not.
    pub fn check(&self, c: Option<&ContainerInfo>) -> Result<(), String> {
        let Some(c) = c else {
            return Err("the process is in no known container".into());
        };
        let keys = [
            ("container", &self.name, &c.name),
            ("pod", &self.pod, &c.pod),
            ("pod-namespace", &self.namespace, &c.namespace),
        ];
        for (key, glob, value) in keys {
            if let Some(g) = glob {
                if !g.is_match(value) {
                    return Err(format!("{key} {value:?} {}", not_any(g)));
                }
            }
        }
        if self.labels.is_empty() {
            return Ok(());
        }
        let Some(labels) = &c.labels else {
            return Err("pod labels are unknown (known only through NRI)".into());
        };
        for (label, g) in &self.labels {
            match labels.get(label) {
                None => return Err(format!("pod label {label:?} is not set")),
                Some(v) if !g.is_match(v) => {
                    return Err(format!("pod label {label}={v:?} {}", not_any(g)));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// One thread of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    /// `/proc/PID/task/TID/comm`.
    pub comm: String,
}

/// Where one thread of a matched process goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadPlacement {
    /// The rule's `[rule.place]`.
    Process,
    /// `[[rule.threads]]` entry number `n` (0-based, in file order).
    Thread(usize),
}

/// A thread and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadAssignment {
    pub tid: u32,
    pub placement: ThreadPlacement,
}

/// The rule that won for a process, and what it does with each thread. Threads that
/// neither a `[[rule.threads]]` entry nor `[rule.place]` covers are left out.
#[derive(Debug, Clone)]
pub struct Match {
    pub rule: Arc<Rule>,
    pub threads: Vec<ThreadAssignment>,
}

impl Match {
    /// The placement request behind a thread assignment.
    pub fn request(&self, placement: ThreadPlacement) -> Option<&PlacementRequest> {
        self.rule.request(placement)
    }
}

impl Rule {
    /// Where a thread named `comm` goes under this rule: the first `[[rule.threads]]`
    /// entry whose glob matches, else `[rule.place]`, else nowhere. Used for threads
    /// that appear or rename themselves after the process was matched.
    pub fn thread_placement(&self, comm: &str) -> Option<ThreadPlacement> {
        self.threads
            .iter()
            .position(|t| t.comm.is_match(comm))
            .map(ThreadPlacement::Thread)
            .or(self.place.as_ref().map(|_| ThreadPlacement::Process))
    }

    /// The scheduling class the rule gives the threads of a [`ThreadPlacement`]: an
    /// entry's own (not `[rule.place]`'s), or `[rule.place]`'s for the threads no entry
    /// takes.
    pub fn sched_for(&self, placement: ThreadPlacement) -> Option<crate::affinity::sched::Sched> {
        match placement {
            ThreadPlacement::Process => self.place_sched,
            ThreadPlacement::Thread(i) => self.threads.get(i).and_then(|t| t.sched),
        }
    }

    /// The placement request behind a [`ThreadPlacement`].
    pub fn request(&self, placement: ThreadPlacement) -> Option<&PlacementRequest> {
        match placement {
            ThreadPlacement::Process => self.place.as_ref(),
            ThreadPlacement::Thread(i) => self.threads.get(i).map(|t| &t.request),
        }
    }

    /// Whether every key of `[rule.match]` matches `p`, without building explanations.
    /// `comm_known` skips the `comm` test (the index already did it); `cmdline` caches
    /// the joined command line across rules.
    fn matches(&self, p: &ProcessInfo, comm_known: bool, cmdline: &mut Option<String>) -> bool {
        let m = &self.matcher;
        if !comm_known && m.comm.as_ref().is_some_and(|g| !g.is_match(&p.comm)) {
            return false;
        }
        if let Some(g) = &m.exe {
            match &p.exe {
                Some(exe) if g.is_match(&exe.to_string_lossy()) => {}
                _ => return false,
            }
        }
        if m.users
            .as_ref()
            .is_some_and(|u| u.binary_search(&p.uid).is_err())
        {
            return false;
        }
        if let Some(g) = &m.cgroup {
            match &p.cgroup {
                Some(cg) if g.is_match(cg) => {}
                _ => return false,
            }
        }
        if let Some(g) = &m.unit {
            let cg = p.cgroup.as_deref().unwrap_or("");
            if !(unit_of_cgroup(cg).is_some_and(|u| g.is_match(u))
                || slices_of_cgroup(cg).any(|s| g.is_match(s)))
            {
                return false;
            }
        }
        if let Some(re) = &m.cmdline {
            let line = cmdline.get_or_insert_with(|| p.cmdline.join(" "));
            if !re.is_match(line) {
                return false;
            }
        }
        if let Some(c) = &m.container {
            if c.check(p.container.as_ref()).is_err() {
                return false;
            }
        }
        true
    }

    /// `Ok(())` when every key of `[rule.match]` matches `p`, else the first key that
    /// does not, and why.
    pub fn check(&self, p: &ProcessInfo) -> Result<(), String> {
        let m = &self.matcher;
        if let Some(g) = &m.comm {
            if !g.is_match(&p.comm) {
                return Err(format!("comm {:?} {}", p.comm, not_any(g)));
            }
        }
        if let Some(g) = &m.exe {
            match &p.exe {
                None => return Err("exe is unknown (not readable)".into()),
                Some(exe) => {
                    let s = exe.to_string_lossy();
                    if !g.is_match(&s) {
                        return Err(format!("exe {s:?} {}", not_any(g)));
                    }
                }
            }
        }
        if let Some(u) = &m.users {
            if u.binary_search(&p.uid).is_err() {
                return Err(format!("uid {} is not {}", p.uid, list(u)));
            }
        }
        if let Some(g) = &m.cgroup {
            match &p.cgroup {
                None => return Err("cgroup is unknown".into()),
                Some(cg) if !g.is_match(cg) => {
                    return Err(format!("cgroup {cg:?} {}", not_any(g)));
                }
                Some(_) => {}
            }
        }
        if let Some(g) = &m.unit {
            let cg = p.cgroup.as_deref().unwrap_or("");
            let unit = unit_of_cgroup(cg);
            let hit =
                unit.is_some_and(|u| g.is_match(u)) || slices_of_cgroup(cg).any(|s| g.is_match(s));
            if !hit {
                return Err(match unit {
                    None if p.cgroup.is_none() => "unit is unknown (cgroup unknown)".into(),
                    None => format!("cgroup {cg:?} is in no unit, {}", not_any(g)),
                    Some(u) => format!("unit {u:?} {}", not_any(g)),
                });
            }
        }
        if let Some(re) = &m.cmdline {
            let line = p.cmdline.join(" ");
            if !re.is_match(&line) {
                return Err(format!("cmdline {line:?} does not match /{}/", re.as_str()));
            }
        }
        if let Some(c) = &m.container {
            c.check(p.container.as_ref())?;
        }
        Ok(())
    }
}

fn not_any(g: &GlobList) -> String {
    if g.patterns.len() == 1 {
        format!("does not match {:?}", g.patterns[0])
    } else {
        format!("matches none of {:?}", g.patterns)
    }
}

fn list(u: &[u32]) -> String {
    u.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The systemd unit a cgroup path belongs to, as the system manager derives it: the
/// component right after the leading slices, when it is a unit name and not a slice.
/// `/system.slice/md.service/x` → `md.service`;
/// `/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope` →
/// `user@1000.service` (what runs below a user's manager is that user's, whatever its
/// own units are called); `/docker/abc` → none.
pub fn unit_of_cgroup(cgroup: &str) -> Option<&str> {
    cgroup
        .split('/')
        .filter(|c| !c.is_empty())
        .find(|c| !is_slice(c))
        .filter(|c| is_unit_name(c))
}

/// The system manager's slices a cgroup path passes through, outermost first, so
/// `unit = "batch.slice"` matches every process below that slice. Only the leading
/// slices count: a slice below the first other component (`batch.slice` made by a
/// user's own manager under `user@1000.service`, or by anyone inside a unit's
/// delegated subtree) is not the system's and matches nothing.
pub fn slices_of_cgroup(cgroup: &str) -> impl Iterator<Item = &str> {
    cgroup
        .split('/')
        .filter(|c| !c.is_empty())
        .take_while(|c| is_slice(c))
}

fn is_slice(c: &str) -> bool {
    c.ends_with(".slice") && is_unit_name(c)
}

fn is_unit_name(c: &str) -> bool {
    const SUFFIXES: [&str; 11] = [
        ".service",
        ".scope",
        ".slice",
        ".socket",
        ".mount",
        ".swap",
        ".target",
        ".timer",
        ".path",
        ".device",
        ".automount",
    ];
    SUFFIXES.iter().any(|s| c.len() > s.len() && c.ends_with(s))
}

/// The compiled rules of every loaded file, in precedence order, with the `comm` index.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// Sorted: priority descending, then name ascending.
    rules: Vec<Arc<Rule>>,
    index: CommIndex,
    /// Whether a rule matches on the command line (see [`RuleSet::reads_cmdline`]).
    reads_cmdline: bool,
}

/// The first pass: which rules can match a process, from its `comm` alone. Literal
/// and `prefix*`/`*suffix` globs are hash lookups (a comm has at most 15 bytes, so at
/// most 16 prefixes and suffixes to try); other globs share one [`GlobSet`]. Rules
/// found here have had their `comm` tested exactly.
#[derive(Debug, Clone, Default)]
struct CommIndex {
    literal: HashMap<String, Vec<u32>>,
    prefix: HashMap<String, Vec<u32>>,
    suffix: HashMap<String, Vec<u32>>,
    complex: GlobSet,
    /// Glob number in `complex` → rule index.
    complex_owner: Vec<u32>,
    /// Rules whose `comm` matches anything.
    any: Vec<u32>,
    /// Rules the index cannot decide (no `comm` key): candidates for every process,
    /// every key still to be tested.
    no_comm: Vec<u32>,
}

impl Default for RuleSet {
    fn default() -> Self {
        RuleSet::new(Vec::new())
    }
}

impl RuleSet {
    /// Builds the set; the order of `rules` does not matter.
    pub fn new(rules: Vec<Rule>) -> RuleSet {
        RuleSet::from_arcs(rules.into_iter().map(Arc::new).collect())
    }

    /// Builds the set from shared rules; the order does not matter.
    pub fn from_arcs(mut rules: Vec<Arc<Rule>>) -> RuleSet {
        rules.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut index = CommIndex::default();
        let mut complex = GlobSetBuilder::new();
        for (i, r) in rules.iter().enumerate() {
            let i = i as u32;
            let Some(g) = &r.matcher.comm else {
                index.no_comm.push(i);
                continue;
            };
            for p in &g.compiled {
                match p {
                    Pattern::Literal(l) => index.literal.entry(l.clone()).or_default().push(i),
                    Pattern::Prefix(l) => index.prefix.entry(l.clone()).or_default().push(i),
                    Pattern::Suffix(l) => index.suffix.entry(l.clone()).or_default().push(i),
                    Pattern::Any => index.any.push(i),
                    Pattern::Complex(c) => {
                        complex.add(c.glob.clone());
                        index.complex_owner.push(i);
                    }
                }
            }
        }
        match complex.build() {
            Ok(set) => index.complex = set,
            Err(e) => {
                // Only a combined regex over the size limit gets here (each glob
                // parsed alone already). Slower, still right: test those rules one by
                // one, `comm` included.
                tracing::warn!(error = %e, "comm globs too many to combine ({e}); matching them one by one");
                index.no_comm.append(&mut index.complex_owner);
                index.no_comm.sort_unstable();
                index.no_comm.dedup();
            }
        }
        let reads_cmdline = rules.iter().any(|r| r.matcher.cmdline.is_some());
        RuleSet {
            rules,
            index,
            reads_cmdline,
        }
    }

    /// Whether matching needs processes' command lines: some rule has a `cmdline` key.
    /// Without one nothing reads them (see [`crate::watch::ProcSource::snapshot`]).
    pub fn reads_cmdline(&self) -> bool {
        self.reads_cmdline
    }

    /// Whether the command line of a process named `comm` can decide which rule matches
    /// it: a rule with a `cmdline` key can match that name.
    pub fn cmdline_matters(&self, comm: &str) -> bool {
        self.reads_cmdline
            && self
                .candidates(comm)
                .into_iter()
                .any(|(i, _)| self.rules[i as usize].matcher.cmdline.is_some())
    }

    /// Rules in precedence order.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Rule>> {
        self.rules.iter().find(|r| r.name == name)
    }

    /// Rules that can match a process named `comm`, in precedence order, each with
    /// whether its `comm` is already known to match.
    fn candidates(&self, comm: &str) -> Vec<(u32, bool)> {
        let ix = &self.index;
        let mut out: Vec<(u32, bool)> = Vec::new();
        let mut add = |rules: Option<&Vec<u32>>| {
            if let Some(rules) = rules {
                out.extend(rules.iter().map(|&r| (r, true)));
            }
        };
        add(ix.literal.get(comm));
        if !ix.prefix.is_empty() || !ix.suffix.is_empty() {
            for (at, _) in comm
                .char_indices()
                .chain(std::iter::once((comm.len(), ' ')))
            {
                add(ix.prefix.get(&comm[..at]));
                add(ix.suffix.get(&comm[at..]));
            }
        }
        if !ix.complex_owner.is_empty() {
            for g in ix.complex.matches(comm) {
                out.push((ix.complex_owner[g], true));
            }
        }
        out.extend(ix.any.iter().map(|&r| (r, true)));
        out.extend(ix.no_comm.iter().map(|&r| (r, false)));
        out.sort_unstable();
        out.dedup_by_key(|c| c.0);
        out
    }

    /// The winning rule for `p`, if any, with each thread's placement.
    pub fn match_process(&self, p: &ProcessInfo) -> Option<Match> {
        let mut cmdline = None;
        let rule = self
            .candidates(&p.comm)
            .into_iter()
            .map(|(i, known)| (&self.rules[i as usize], known))
            .find(|(r, known)| r.matches(p, *known, &mut cmdline))?
            .0;
        Some(Match {
            rule: Arc::clone(rule),
            threads: assign_threads(rule, p),
        })
    }

    /// The rule that gives a container its cpuset at creation: the first, in precedence
    /// order, whose `[rule.match]` has only container keys and all of them match. A
    /// rule that also names the process (comm, exe, …) places the container's
    /// processes once they run, not the container.
    pub fn match_container(&self, c: &ContainerInfo) -> Option<&Arc<Rule>> {
        self.rules.iter().find(|r| {
            r.matcher.container_only()
                && r.matcher
                    .container
                    .as_ref()
                    .is_some_and(|m| m.check(Some(c)).is_ok())
        })
    }

    /// Why each rule did or did not match `p`, in precedence order.
    pub fn explain(&self, p: &ProcessInfo) -> Explanation {
        let mut winner: Option<&Arc<Rule>> = None;
        let verdicts = self
            .rules
            .iter()
            .map(|r| {
                let outcome = match (r.check(p), winner) {
                    (Err(why), _) => Standing::NoMatch(why),
                    (Ok(()), None) => {
                        winner = Some(r);
                        Standing::Won
                    }
                    (Ok(()), Some(w)) => Standing::Lost {
                        to: w.name.clone(),
                        why: if w.priority > r.priority {
                            format!("priority {} < {}", r.priority, w.priority)
                        } else {
                            format!(
                                "same priority {}, and {:?} sorts first by name",
                                r.priority, w.name
                            )
                        },
                    },
                };
                Verdict {
                    rule: r.name.clone(),
                    origin: r.origin(),
                    priority: r.priority,
                    outcome,
                }
            })
            .collect();
        Explanation {
            pid: p.pid,
            comm: p.comm.clone(),
            winner: winner.map(|w| Match {
                rule: Arc::clone(w),
                threads: assign_threads(w, p),
            }),
            verdicts,
        }
    }
}

fn assign_threads(rule: &Rule, p: &ProcessInfo) -> Vec<ThreadAssignment> {
    p.threads
        .iter()
        .filter_map(|t| {
            rule.thread_placement(&t.comm)
                .map(|placement| ThreadAssignment {
                    tid: t.tid,
                    placement,
                })
        })
        .collect()
}

/// The answer to "why did this process get (or not get) this rule?".
#[derive(Debug, Clone)]
pub struct Explanation {
    pub pid: u32,
    pub comm: String,
    pub winner: Option<Match>,
    /// One per rule, in precedence order.
    pub verdicts: Vec<Verdict>,
}

/// What one rule made of the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub rule: String,
    /// `FILE:LINE:COL` of the rule.
    pub origin: String,
    pub priority: i32,
    pub outcome: Standing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Matched and has the highest precedence among the rules that matched.
    Won,
    /// Matched, but another rule comes first.
    Lost { to: String, why: String },
    /// A key did not match.
    NoMatch(String),
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.winner {
            None => writeln!(f, "pid {} ({}): no rule matches", self.pid, self.comm)?,
            Some(m) => {
                writeln!(
                    f,
                    "pid {} ({}): rule {:?} ({}, priority {})",
                    self.pid,
                    self.comm,
                    m.rule.name,
                    m.rule.origin(),
                    m.rule.priority
                )?;
                for t in &m.threads {
                    let what = match t.placement {
                        ThreadPlacement::Process => "[rule.place]".to_string(),
                        ThreadPlacement::Thread(i) => format!("threads[{i}]"),
                    };
                    writeln!(f, "  thread {} -> {what}", t.tid)?;
                }
            }
        }
        for v in &self.verdicts {
            match &v.outcome {
                Standing::Won => writeln!(f, "  {}: matched, wins", v.rule)?,
                Standing::Lost { to, why } => {
                    writeln!(f, "  {}: matched, loses to {to:?} ({why})", v.rule)?
                }
                Standing::NoMatch(why) => writeln!(f, "  {}: no match: {why}", v.rule)?,
            }
        }
        Ok(())
    }
}
