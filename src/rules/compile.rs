//! From a parsed file to validated, compiled rules: globs and regexes built, users
//! resolved, placements checked and resolved to [`PlacementRequest`]s. Pure apart from
//! the user lookup, which the [`LoadPolicy`](super::LoadPolicy) supplies.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use std::sync::OnceLock;

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};
use toml::Spanned;

use super::error::{echo, LineIndex, Location, RuleError, RuleErrorKind};
use super::format::{MatchSpec, OneOrMany, PlaceKeys, RuleFile, RuleSpec, ThreadSpec, UserSpec};
use crate::affinity::sched::{Sched, SchedPolicy, RT_PRIORITY_MAX};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, Shape, SmtPolicy};

/// The longest name the kernel keeps in `comm` (TASK_COMM_LEN - 1).
pub const COMM_MAX: usize = 15;
/// Longest rule name: names travel over D-Bus, where non-root callers' strings are
/// capped at 64 bytes.
pub const NAME_MAX: usize = 64;
/// Compiled size cap for one `cmdline` regex, so a hostile file cannot eat memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// What the `cmdline` regexes of the whole rule set may take compiled, together (see
/// [`RegexBudget`]).
pub const REGEX_SET_BUDGET: usize = 16 << 20;
/// The lazy DFA cache each `cmdline` regex may fill while matching (the regex crate's
/// default is 2 MiB; a command line is short, and a pattern whose DFA needs more is
/// matched without it).
const REGEX_DFA_CACHE: usize = 16 << 10;

/// The bytes left for the `cmdline` regexes of one rule set. A regex costs its
/// compiled automaton twice (the regex keeps a forward and a reverse one) plus the
/// DFA cache it may fill: so a thousand rules of `\w{20}` (350 KB each) are refused
/// at the 23rd instead of taking gigabytes, while 900 simple patterns fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexBudget {
    pub left: usize,
}

impl Default for RegexBudget {
    fn default() -> Self {
        RegexBudget {
            left: REGEX_SET_BUDGET,
        }
    }
}

/// Why a `cmdline` regex was not charged to a [`RegexBudget`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncharged {
    /// It does not compile (or is over [`REGEX_SIZE_LIMIT`] on its own).
    Bad(String),
    /// It would take more than the `left` bytes still free (`at_least` bytes or more).
    Over { at_least: usize, left: usize },
}

impl RegexBudget {
    /// Measures `pattern` compiled and takes its cost from what is left. The
    /// automaton is built only up to what is left, so an exhausted budget refuses a
    /// big pattern at once instead of building it first.
    pub fn charge(&mut self, pattern: &str) -> Result<usize, Uncharged> {
        use regex_automata::nfa::thompson::NFA;
        let room = (self.left.saturating_sub(REGEX_DFA_CACHE) / 2).min(REGEX_SIZE_LIMIT);
        let built = NFA::compiler()
            .configure(NFA::config().nfa_size_limit(Some(room)))
            .build(pattern);
        let nfa = match built {
            Ok(nfa) => nfa,
            Err(e) if e.size_limit().is_some() && room < REGEX_SIZE_LIMIT => {
                return Err(Uncharged::Over {
                    at_least: 2 * room + REGEX_DFA_CACHE,
                    left: self.left,
                })
            }
            Err(e) => return Err(Uncharged::Bad(one_line(&e.to_string()))),
        };
        let cost = 2 * nfa.memory_usage() + REGEX_DFA_CACHE;
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                Ok(cost)
            }
            None => Err(Uncharged::Over {
                at_least: cost,
                left: self.left,
            }),
        }
    }
}

/// Where a rule should run, resolved from `[rule.place]` or `[[rule.threads]]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlacementRequest {
    pub target: CpuTarget,
    /// With [`CpuTarget::Count`]: the CPUs to choose from (`None`: any usable CPU).
    pub within: Option<CpuSet>,
    /// Meaningful with [`CpuTarget::Count`]; [`Policy::Compact`] by default.
    pub policy: Policy,
    /// Meaningful with [`CpuTarget::Count`]; [`SmtPolicy::Allow`] by default.
    pub smt: SmtPolicy,
    /// No other rule may be given these CPUs while this rule holds them.
    pub exclusive: bool,
    /// With [`CpuTarget::Count`]: `core-type`, `prefer` and `near` (empty by default).
    pub shape: Shape,
}

/// Explicit CPUs, or a number of CPUs for placement to choose.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CpuTarget {
    Cpus(CpuSet),
    Count(u32),
}

/// A list of globs, any of which may match. `*` matches any run of characters,
/// `/` included; `?` one character; `[...]` a class; `{a,b}` alternatives.
#[derive(Debug, Clone)]
pub struct GlobList {
    pub patterns: Vec<String>,
    pub(super) compiled: Vec<Pattern>,
}

/// One glob, sorted by how cheaply it can be matched. Most real patterns are literals
/// or `prefix*`, which need no regex at all; the rest compile theirs on first use
/// (validation at load only parses them).
#[derive(Debug, Clone)]
pub(super) enum Pattern {
    Literal(String),
    Prefix(String),
    Suffix(String),
    Any,
    Complex(Box<Complex>),
}

#[derive(Debug, Clone)]
pub(super) struct Complex {
    pub(super) glob: Glob,
    matcher: OnceLock<GlobMatcher>,
}

impl Pattern {
    /// Classifies a pattern that already parsed as a glob.
    fn new(p: &str, glob: Glob) -> Pattern {
        let plain = |s: &str| !has_glob_meta(s);
        if plain(p) {
            Pattern::Literal(p.to_string())
        } else if p == "*" {
            Pattern::Any
        } else if let Some(prefix) = p.strip_suffix('*').filter(|s| plain(s)) {
            Pattern::Prefix(prefix.to_string())
        } else if let Some(suffix) = p.strip_prefix('*').filter(|s| plain(s)) {
            Pattern::Suffix(suffix.to_string())
        } else {
            Pattern::Complex(Box::new(Complex {
                glob,
                matcher: OnceLock::new(),
            }))
        }
    }

    pub(super) fn is_match(&self, text: &str) -> bool {
        match self {
            Pattern::Literal(l) => text == l,
            Pattern::Prefix(p) => text.starts_with(p.as_str()),
            Pattern::Suffix(s) => text.ends_with(s.as_str()),
            Pattern::Any => true,
            Pattern::Complex(c) => c
                .matcher
                .get_or_init(|| c.glob.compile_matcher())
                .is_match(text),
        }
    }
}

impl GlobList {
    pub fn is_match(&self, text: &str) -> bool {
        self.compiled.iter().any(|p| p.is_match(text))
    }
}

/// Everything `[rule.match]` asks of a process; `None` means "not asked".
#[derive(Debug, Clone, Default)]
pub struct ProcessMatcher {
    pub comm: Option<GlobList>,
    pub exe: Option<GlobList>,
    pub cmdline: Option<Regex>,
    /// Resolved uids.
    pub users: Option<Vec<u32>>,
    pub cgroup: Option<GlobList>,
    pub unit: Option<GlobList>,
    /// The container keys; `None` for a rule that names no container.
    pub container: Option<ContainerMatcher>,
}

/// `container`, `pod`, `pod-namespace` and `pod-labels` of `[rule.match]`.
#[derive(Debug, Clone, Default)]
pub struct ContainerMatcher {
    pub name: Option<GlobList>,
    pub pod: Option<GlobList>,
    pub namespace: Option<GlobList>,
    /// Label name and the glob its value must match.
    pub labels: Vec<(String, GlobList)>,
}

impl ProcessMatcher {
    /// Whether only container keys are given: such a rule can be decided at a
    /// container's creation, before any of its processes exists.
    pub fn container_only(&self) -> bool {
        self.container.is_some()
            && self.comm.is_none()
            && self.exe.is_none()
            && self.cmdline.is_none()
            && self.users.is_none()
            && self.cgroup.is_none()
            && self.unit.is_none()
    }
}

/// One `[[rule.threads]]`.
#[derive(Debug, Clone)]
pub struct ThreadRule {
    pub comm: GlobList,
    pub request: PlacementRequest,
    /// With a count: all matching threads share one set of CPUs (`true`), or each gets
    /// its own (`false`).
    pub shared: bool,
    /// Where its `comm` is written in the file.
    pub at: Location,
    /// `isolate = true`: its CPUs are an isolated cpuset partition while held.
    pub isolate: bool,
    /// `sched-policy`, `sched-priority`, `nice`: the class its threads get.
    pub sched: Option<Sched>,
}

/// A validated, compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub priority: i32,
    /// The file it came from.
    pub file: PathBuf,
    /// Where its name is written in that file.
    pub at: Location,
    pub matcher: ProcessMatcher,
    /// Placement for the process's threads that no `[[rule.threads]]` entry takes.
    pub place: Option<PlacementRequest>,
    pub threads: Vec<ThreadRule>,
    /// `latency-critical = true` in `[rule.place]`: no measurement spins on the CPUs
    /// its managed threads hold.
    pub latency_critical: bool,
    /// `irqs = "away"` in `[rule.place]`: interrupts leave its CPUs while it holds them.
    pub irqs_away: bool,
    /// `memory = "follow"` in `[rule.place]`: its processes' memory is moved to the
    /// nodes of their CPUs.
    pub memory_follow: bool,
    /// `isolate = true` in `[rule.place]`: its CPUs are an isolated cpuset partition
    /// while held (see `hold`).
    pub isolate: bool,
    /// `unit-cpuset = true` in `[rule.place]`: its processes' systemd unit is confined
    /// to its CPUs (see `hold`).
    pub unit_cpuset: bool,
    /// `sched-policy`, `sched-priority`, `nice` in `[rule.place]`: the class of the
    /// threads no `[[rule.threads]]` entry takes.
    pub place_sched: Option<Sched>,
    /// `idle-limit-us` in `[rule.place]`: the resume-latency limit of the CPUs it holds
    /// (see `knobs::idle`).
    pub idle_limit_us: Option<u32>,
}

impl Rule {
    /// Its `[rule.match]` names `user` or `unit`: whoever starts a matching process is
    /// not anyone. Only such `exclusive` rules move kernel threads and workqueues off
    /// their CPUs (see `knobs::kthreads`).
    pub fn owned(&self) -> bool {
        self.matcher.users.is_some() || self.matcher.unit.is_some()
    }

    /// `FILE:LINE:COL` of the rule's name.
    pub fn origin(&self) -> String {
        format!("{}:{}", self.file.display(), self.at)
    }

    /// Its `[rule.place]`, as `run --rule`, `pin --rule` and `plan --pid` take it for
    /// one process; a rule that places threads by name only has none.
    pub fn place_request(&self) -> Result<PlacementRequest, NoPlace> {
        self.place.clone().ok_or_else(|| NoPlace(self.name.clone()))
    }
}

/// A rule asked for its `[rule.place]` has none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule {0:?} has no [rule.place] (it places threads by name only)")]
pub struct NoPlace(pub String);

/// Resolves user names to uids.
pub type UserLookup = fn(&str) -> Option<u32>;

/// The system's user database, through NSS.
pub fn system_user_lookup(name: &str) -> Option<u32> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
}

struct Ctx<'a> {
    path: &'a Path,
    lines: LineIndex<'a>,
    errors: Vec<RuleError>,
    regex_budget: &'a mut RegexBudget,
}

impl Ctx<'_> {
    fn err(&mut self, span: &Range<usize>, kind: RuleErrorKind) {
        self.errors.push(RuleError {
            path: self.path.to_path_buf(),
            at: Some(self.lines.locate(span.start)),
            kind,
        });
    }
}

/// Validates and compiles every rule of one parsed file. Returns every problem found
/// (the file is then rejected whole) or the compiled rules.
pub fn compile_file(
    path: &Path,
    text: &str,
    file: &RuleFile,
    users: UserLookup,
    regex_budget: &mut RegexBudget,
) -> Result<Vec<Rule>, Vec<RuleError>> {
    let start_budget = *regex_budget;
    let mut cx = Ctx {
        path,
        lines: LineIndex::new(text),
        errors: Vec::new(),
        regex_budget,
    };
    let mut rules: Vec<Rule> = Vec::new();
    // Every name seen in this file (valid rule or not) → where it was first written.
    let mut seen: HashMap<&str, Location> = HashMap::new();
    for spec in &file.rules {
        let rule_span = spec.span();
        let spec = spec.get_ref();
        let name = spec.name.get_ref();
        let name_span = spec.name.span();
        let before = cx.errors.len();
        check_name(&mut cx, &mut seen, name, &name_span);
        let matcher = match &spec.matches {
            None => {
                cx.err(&rule_span, RuleErrorKind::NoMatch { name: echo(name) });
                ProcessMatcher::default()
            }
            Some(m) if is_empty_match(m.get_ref()) => {
                cx.err(&m.span(), RuleErrorKind::EmptyMatch { name: echo(name) });
                ProcessMatcher::default()
            }
            Some(m) => compile_match(&mut cx, m.get_ref(), users),
        };
        if spec.place.is_none() && spec.threads.is_empty() {
            cx.err(&rule_span, RuleErrorKind::NoPlacement { name: echo(name) });
        }
        let place = spec
            .place
            .as_ref()
            .and_then(|p| place_request(&mut cx, "[rule.place]", p.get_ref().keys(), p.span()));
        let place_sched = spec
            .place
            .as_ref()
            .and_then(|p| sched_of(&mut cx, "[rule.place]", p.get_ref().keys()));
        let mut threads = Vec::new();
        for t in &spec.threads {
            if let Some(tr) = compile_thread(&mut cx, t.get_ref()) {
                threads.push(tr);
            }
            // The partition is the process's unit, so every CPU the process is placed
            // on becomes part of it: [rule.place]'s must be the rule's alone too.
            let isolate = t.get_ref().isolate.as_ref().filter(|i| *i.get_ref());
            if let (Some(isolate), Some(p)) = (isolate, &place) {
                if !p.exclusive {
                    cx.err(&isolate.span(), RuleErrorKind::IsolateNeedsExclusivePlace);
                }
            }
        }
        let idle_limit_us = idle_limit_of(&mut cx, name, spec);
        if let Some(m) = &spec.matches {
            if !container_holds_nothing(&mut cx, name, m.get_ref(), spec) {
                hold_needs_owner(&mut cx, name, m.get_ref(), spec);
            }
            sched_needs_owner(&mut cx, name, m.get_ref(), spec);
        }
        if cx.errors.len() == before {
            rules.push(Rule {
                name: name.clone(),
                priority: spec.priority.as_ref().map_or(0, |p| *p.get_ref()),
                file: path.to_path_buf(),
                at: cx.lines.locate(name_span.start),
                matcher,
                place,
                threads,
                latency_critical: spec
                    .place
                    .as_ref()
                    .and_then(|p| p.get_ref().latency_critical.as_ref())
                    .is_some_and(|l| *l.get_ref()),
                irqs_away: spec
                    .place
                    .as_ref()
                    .and_then(|p| p.get_ref().irqs.as_ref())
                    .is_some_and(|i| *i.get_ref() == super::format::Irqs::Away),
                memory_follow: spec
                    .place
                    .as_ref()
                    .and_then(|p| p.get_ref().memory.as_ref())
                    .is_some_and(|m| *m.get_ref() == super::format::Memory::Follow),
                isolate: spec
                    .place
                    .as_ref()
                    .and_then(|p| p.get_ref().isolate.as_ref())
                    .is_some_and(|i| *i.get_ref()),
                unit_cpuset: spec
                    .place
                    .as_ref()
                    .and_then(|p| p.get_ref().unit_cpuset.as_ref())
                    .is_some_and(|u| *u.get_ref()),
                place_sched,
                idle_limit_us,
            });
        }
    }
    if cx.errors.is_empty() {
        Ok(rules)
    } else {
        // A rejected file's regexes are not kept: what they took is left for others.
        *cx.regex_budget = start_budget;
        Err(cx.errors)
    }
}

/// A rule's name is not empty, is made of the allowed characters and is the first of
/// its kind in the file (`seen`: every name so far, where it was first written).
fn check_name<'a>(
    cx: &mut Ctx<'_>,
    seen: &mut HashMap<&'a str, Location>,
    name: &'a str,
    name_span: &Range<usize>,
) {
    if name.is_empty() {
        cx.err(name_span, RuleErrorKind::EmptyName);
    } else if !valid_name(name) {
        cx.err(name_span, RuleErrorKind::BadName { name: echo(name) });
    } else if let Some(first) = seen.get(name) {
        cx.err(
            name_span,
            RuleErrorKind::DuplicateName {
                name: echo(name),
                first: format!("{}:{first}", cx.path.display()),
            },
        );
    } else {
        seen.insert(name, cx.lines.locate(name_span.start));
    }
}

fn valid_name(name: &str) -> bool {
    name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':'))
}

fn is_empty_match(m: &MatchSpec) -> bool {
    m.comm.is_none()
        && m.exe.is_none()
        && m.cmdline.is_none()
        && m.user.is_none()
        && m.cgroup.is_none()
        && m.unit.is_none()
        && !m.names_container()
}

fn compile_match(cx: &mut Ctx<'_>, m: &MatchSpec, users: UserLookup) -> ProcessMatcher {
    ProcessMatcher {
        comm: m.comm.as_ref().and_then(|g| globs(cx, "comm", g, true)),
        exe: m.exe.as_ref().and_then(|g| globs(cx, "exe", g, false)),
        cmdline: m.cmdline.as_ref().and_then(|r| {
            // Measured and charged before the regex itself is built. One that does not
            // compile is left to the regex crate, whose message is the clearer.
            match cx.regex_budget.charge(r.get_ref()) {
                Ok(_) | Err(Uncharged::Bad(_)) => {}
                Err(Uncharged::Over { at_least, left }) => {
                    cx.err(
                        &r.span(),
                        RuleErrorKind::RegexBudget {
                            pattern: echo(r.get_ref()),
                            cost: at_least,
                            left,
                            budget: REGEX_SET_BUDGET,
                        },
                    );
                    return None;
                }
            }
            RegexBuilder::new(r.get_ref())
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_DFA_CACHE)
                .build()
                .map_err(|e| {
                    cx.err(
                        &r.span(),
                        RuleErrorKind::BadRegex {
                            pattern: echo(r.get_ref()),
                            reason: one_line(&e.to_string()),
                        },
                    )
                })
                .ok()
        }),
        users: m.user.as_ref().map(|u| {
            let mut uids = Vec::new();
            for spec in u.get_ref().as_slice() {
                match spec {
                    UserSpec::Uid(uid) => uids.push(*uid),
                    UserSpec::Name(name) => match users(name) {
                        Some(uid) => uids.push(uid),
                        None => cx.err(&u.span(), RuleErrorKind::UnknownUser(echo(name))),
                    },
                }
            }
            uids.sort_unstable();
            uids.dedup();
            uids
        }),
        cgroup: m
            .cgroup
            .as_ref()
            .and_then(|g| globs(cx, "cgroup", g, false)),
        unit: m.unit.as_ref().and_then(|g| globs(cx, "unit", g, false)),
        container: compile_container(cx, m),
    }
}

fn compile_container(cx: &mut Ctx<'_>, m: &MatchSpec) -> Option<ContainerMatcher> {
    if !m.names_container() {
        return None;
    }
    let mut labels = Vec::new();
    for (label, glob) in m.pod_labels.iter().flat_map(|l| l.get_ref()) {
        if label.is_empty() {
            cx.err(
                &glob.span(),
                RuleErrorKind::BadGlob {
                    key: "pod-labels",
                    pattern: echo(label),
                    reason: "empty label name".into(),
                },
            );
            continue;
        }
        let one = Spanned::new(glob.span(), OneOrMany::One(glob.get_ref().clone()));
        if let Some(g) = globs(cx, "pod-labels", &one, false) {
            labels.push((label.clone(), g));
        }
    }
    Some(ContainerMatcher {
        name: m
            .container
            .as_ref()
            .and_then(|g| globs(cx, "container", g, false)),
        pod: m.pod.as_ref().and_then(|g| globs(cx, "pod", g, false)),
        namespace: m
            .pod_namespace
            .as_ref()
            .and_then(|g| globs(cx, "pod-namespace", g, false)),
        labels,
    })
}

/// The first key of a rule that makes pinnerd hold CPUs for a unit (`isolate` or
/// `unit-cpuset` set true, in `[rule.place]` or a thread entry), with its span.
fn first_holding_key(spec: &RuleSpec) -> Option<(std::ops::Range<usize>, &'static str)> {
    let on = |b: &Option<Spanned<bool>>| b.as_ref().filter(|b| *b.get_ref()).map(Spanned::span);
    let place = spec.place.as_ref().map(Spanned::get_ref);
    place
        .and_then(|p| on(&p.isolate).map(|s| (s, "isolate")))
        .or_else(|| place.and_then(|p| on(&p.unit_cpuset).map(|s| (s, "unit-cpuset"))))
        .or_else(|| {
            spec.threads
                .iter()
                .find_map(|t| on(&t.get_ref().isolate).map(|s| (s, "isolate")))
        })
}

/// `idle-limit-us`: within bounds, on an `exclusive` rule (one that holds no CPU has
/// none to limit: refused, not ignored), and one that names its owners.
fn idle_limit_of(cx: &mut Ctx<'_>, name: &str, spec: &RuleSpec) -> Option<u32> {
    let place = spec.place.as_ref()?.get_ref();
    let limit = place.idle_limit_us.as_ref()?;
    let span = limit.span();
    let max = crate::knobs::idle::MAX_IDLE_LIMIT_US;
    let value = *limit.get_ref();
    let Some(us) = u32::try_from(value).ok().filter(|v| *v <= max) else {
        cx.err(&span, RuleErrorKind::IdleLimitRange { value, max });
        return None;
    };
    if !place.exclusive.as_ref().is_some_and(|e| *e.get_ref()) {
        cx.err(&span, RuleErrorKind::IdleLimitNeedsExclusive);
        return None;
    }
    let owned = spec
        .matches
        .as_ref()
        .is_some_and(|m| m.get_ref().user.is_some() || m.get_ref().unit.is_some());
    if !owned {
        cx.err(
            &span,
            RuleErrorKind::IdleLimitNeedsOwner { name: echo(name) },
        );
        return None;
    }
    Some(us)
}

/// `isolate` and `unit-cpuset` are not for container rules: the runtime owns a
/// container's cgroup, and pinnerd sets its cpuset through the runtime at creation.
fn container_holds_nothing(cx: &mut Ctx<'_>, name: &str, m: &MatchSpec, spec: &RuleSpec) -> bool {
    if !m.names_container() {
        return false;
    }
    if let Some((span, key)) = first_holding_key(spec) {
        cx.err(
            &span,
            RuleErrorKind::ContainerHold {
                name: echo(name),
                key,
            },
        );
    }
    true
}

/// The last line of a multi-line library message (regex errors draw a caret diagram).
fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(msg)
        .trim_start_matches("error: ")
        .to_string()
}

fn has_glob_meta(p: &str) -> bool {
    p.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

fn globs(
    cx: &mut Ctx<'_>,
    key: &'static str,
    value: &Spanned<OneOrMany<String>>,
    is_comm: bool,
) -> Option<GlobList> {
    let span = value.span();
    let mut compiled = Vec::new();
    for p in value.get_ref().as_slice() {
        if p.is_empty() {
            cx.err(
                &span,
                RuleErrorKind::BadGlob {
                    key,
                    pattern: echo(p),
                    reason: "empty pattern".into(),
                },
            );
            continue;
        }
        if is_comm && !has_glob_meta(p) && p.len() > COMM_MAX {
            cx.err(
                &span,
                RuleErrorKind::CommTooLong {
                    key,
                    pattern: echo(p),
                },
            );
            continue;
        }
        match GlobBuilder::new(p).build() {
            Ok(g) => compiled.push(Pattern::new(p, g)),
            Err(e) => cx.err(
                &span,
                RuleErrorKind::BadGlob {
                    key,
                    pattern: echo(p),
                    reason: e.kind().to_string(),
                },
            ),
        }
    }
    let patterns = value.get_ref().as_slice();
    (compiled.len() == patterns.len()).then(|| GlobList {
        patterns: patterns.to_vec(),
        compiled,
    })
}

/// A rule that holds CPUs (`isolate`, `unit-cpuset`) acts for the whole machine: what
/// triggers it must be something no user can imitate, the owner (`user`) or a system
/// unit (`unit`). Said at the first such key.
fn hold_needs_owner(cx: &mut Ctx<'_>, name: &str, m: &MatchSpec, spec: &RuleSpec) {
    if m.user.is_some() || m.unit.is_some() {
        return;
    }
    if let Some((span, key)) = first_holding_key(spec) {
        cx.err(
            &span,
            RuleErrorKind::HoldNeedsOwner {
                name: echo(name),
                key,
            },
        );
    }
}

/// The request a table's placement keys make, or `None` with the errors said;
/// `table_span` is where a table with neither `cpus` nor `count` is pointed at.
fn place_request(
    cx: &mut Ctx<'_>,
    section: &'static str,
    f: PlaceKeys<'_>,
    table_span: Range<usize>,
) -> Option<PlacementRequest> {
    if let Some(isolate) = f.isolate.as_ref().filter(|i| *i.get_ref()) {
        if !f.exclusive.as_ref().is_some_and(|e| *e.get_ref()) {
            cx.err(
                &isolate.span(),
                RuleErrorKind::IsolateNeedsExclusive { section },
            );
            return None;
        }
    }
    let target = match (f.cpus, f.count) {
        (Some(cpus), Some(_)) => {
            cx.err(&cpus.span(), RuleErrorKind::CpusAndCount { section });
            return None;
        }
        (Some(cpus), None) => {
            if cpus.get_ref().is_empty() {
                cx.err(&cpus.span(), RuleErrorKind::EmptyCpus { section });
                return None;
            }
            let mut ok = true;
            for (key, span) in [
                ("within", f.within.as_ref().map(Spanned::span)),
                ("policy", f.policy.as_ref().map(Spanned::span)),
                ("smt", f.smt.as_ref().map(Spanned::span)),
                ("core-type", f.core_type.as_ref().map(Spanned::span)),
                ("prefer", f.prefer.as_ref().map(Spanned::span)),
                ("near", f.near.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = span {
                    cx.err(&span, RuleErrorKind::OnlyWithCount { section, key });
                    ok = false;
                }
            }
            if !ok {
                return None;
            }
            CpuTarget::Cpus(cpus.get_ref().clone())
        }
        (None, Some(count)) => {
            if *count.get_ref() == 0 {
                cx.err(&count.span(), RuleErrorKind::ZeroCount { section });
                return None;
            }
            if let Some(within) = f.within {
                let available = within.get_ref().len();
                if available == 0 {
                    cx.err(&within.span(), RuleErrorKind::EmptyCpus { section });
                    return None;
                }
                if *count.get_ref() as usize > available {
                    cx.err(
                        &count.span(),
                        RuleErrorKind::CountExceedsWithin {
                            section,
                            count: *count.get_ref(),
                            available,
                        },
                    );
                    return None;
                }
            }
            if let Some(near) = f.near {
                if let Err(reason) = crate::placement::check_device_name(near.get_ref()) {
                    cx.err(
                        &near.span(),
                        RuleErrorKind::BadDevice {
                            section,
                            device: near.get_ref().clone(),
                            reason,
                        },
                    );
                    return None;
                }
            }
            CpuTarget::Count(*count.get_ref())
        }
        (None, None) => {
            cx.err(&table_span, RuleErrorKind::NoCpusNorCount { section });
            return None;
        }
    };
    Some(PlacementRequest {
        within: match target {
            CpuTarget::Count(_) => f.within.as_ref().map(|w| w.get_ref().clone()),
            CpuTarget::Cpus(_) => None,
        },
        target,
        policy: f
            .policy
            .as_ref()
            .map_or_else(Policy::default, |p| *p.get_ref()),
        smt: f
            .smt
            .as_ref()
            .map_or_else(SmtPolicy::default, |s| *s.get_ref()),
        exclusive: f.exclusive.as_ref().is_some_and(|e| *e.get_ref()),
        shape: Shape {
            core_type: f.core_type.as_ref().map(|k| *k.get_ref()),
            prefer: f.prefer.as_ref().map(|p| *p.get_ref()),
            near: f.near.as_ref().map(|n| n.get_ref().clone()),
        },
    })
}

fn compile_thread(cx: &mut Ctx<'_>, t: &ThreadSpec) -> Option<ThreadRule> {
    let section = "[[rule.threads]]";
    let comm = globs(cx, "threads.comm", &t.comm, true);
    let request = place_request(cx, section, t.keys(), t.comm.span());
    if let (Some(shared), Some(_)) = (&t.shared, &t.cpus) {
        cx.err(
            &shared.span(),
            RuleErrorKind::OnlyWithCount {
                section,
                key: "shared",
            },
        );
        return None;
    }
    let sched = sched_of(cx, section, t.keys());
    let request = request?;
    Some(ThreadRule {
        comm: comm?,
        request,
        shared: t.shared.as_ref().is_some_and(|s| *s.get_ref()),
        at: cx.lines.locate(t.comm.span().start),
        isolate: t.isolate.as_ref().is_some_and(|i| *i.get_ref()),
        sched,
    })
}

/// A real-time policy or a negative nice value is what only a privileged user may give
/// a thread: what triggers it must be something no user can imitate, as for a hold
/// ([`hold_needs_owner`]). Said at the first such key.
fn sched_needs_owner(cx: &mut Ctx<'_>, name: &str, m: &MatchSpec, spec: &RuleSpec) {
    if m.user.is_some() || m.unit.is_some() {
        return;
    }
    let tables = spec
        .place
        .iter()
        .map(|p| p.get_ref().keys())
        .chain(spec.threads.iter().map(|t| t.get_ref().keys()));
    for k in tables {
        let realtime = k
            .sched_policy
            .as_ref()
            .filter(|p| p.get_ref().is_realtime())
            .map(|p| (p.span(), "sched-policy"));
        let raised = k
            .nice
            .as_ref()
            .filter(|n| *n.get_ref() < 0)
            .map(|n| (n.span(), "nice"));
        if let Some((span, key)) = realtime.or(raised) {
            let name = echo(name);
            cx.err(&span, RuleErrorKind::SchedNeedsOwner { name, key });
            return;
        }
    }
}

/// The scheduling class a table's `sched-policy`, `sched-priority` and `nice` give its
/// threads, or `None` (none given, or errors said). `nice` alone means `other`.
fn sched_of(cx: &mut Ctx<'_>, section: &'static str, f: PlaceKeys<'_>) -> Option<Sched> {
    if f.sched_policy.is_none() && f.sched_priority.is_none() && f.nice.is_none() {
        return None;
    }
    let policy = f
        .sched_policy
        .as_ref()
        .map_or(SchedPolicy::Other, |p| *p.get_ref());
    let policy_span = f.sched_policy.as_ref().map(Spanned::span);
    let before = cx.errors.len();
    let mut priority = 0;
    let mut nice = 0;
    if policy.is_realtime() {
        let span = policy_span.clone().unwrap_or_default();
        if !f.exclusive.as_ref().is_some_and(|e| *e.get_ref()) {
            let policy = policy.word();
            cx.err(
                &span,
                RuleErrorKind::RealtimeNeedsExclusive { section, policy },
            );
        }
        match f.sched_priority {
            None => {
                let policy = policy.word();
                cx.err(
                    &span,
                    RuleErrorKind::RealtimeNeedsPriority { section, policy },
                );
            }
            Some(p) => match u32::try_from(*p.get_ref()) {
                Ok(v) if (1..=RT_PRIORITY_MAX).contains(&v) => priority = v,
                _ => {
                    let value = *p.get_ref();
                    cx.err(&p.span(), RuleErrorKind::PriorityRange { section, value });
                }
            },
        }
    } else if let Some(p) = f.sched_priority {
        cx.err(&p.span(), RuleErrorKind::PriorityNeedsRealtime { section });
    }
    if let Some(n) = f.nice {
        if !matches!(policy, SchedPolicy::Other | SchedPolicy::Batch) {
            let policy = policy.word();
            cx.err(&n.span(), RuleErrorKind::NiceWithPolicy { section, policy });
        } else if !(-20..=19).contains(n.get_ref()) {
            let value = *n.get_ref();
            cx.err(&n.span(), RuleErrorKind::NiceRange { section, value });
        } else {
            nice = *n.get_ref() as i32;
        }
    }
    (cx.errors.len() == before).then_some(Sched {
        policy,
        priority,
        nice,
    })
}
