//! From a parsed file to validated, compiled rules: globs and regexes built, users
//! resolved, placements checked and resolved to [`PlacementRequest`]s. Pure apart from
//! the user lookup, which the [`LoadPolicy`](super::LoadPolicy) supplies.
//!
//! Inside: `place` (a table's placement keys → [`PlacementRequest`] and scheduling
//! class); the patterns themselves are built in `rules::patterns`.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use globset::GlobBuilder;
use regex::Regex;
use toml::Spanned;

use super::error::{echo, LineIndex, Location, RuleError, RuleErrorKind};
use super::format::{MatchSpec, OneOrMany, RuleFile, RuleSpec, ThreadSpec, UserSpec};
use super::patterns::{cmdline_regex, has_glob_meta, GlobList, Pattern, RegexBudget};
use crate::affinity::sched::Sched;

mod place;

use place::{place_request, sched_needs_owner, sched_of};
pub use place::{CpuTarget, PlacementRequest};

/// The longest name the kernel keeps in `comm` (TASK_COMM_LEN - 1).
pub const COMM_MAX: usize = 15;
/// Longest rule name: names travel over D-Bus, where non-root callers' strings are
/// capped at 64 bytes.
pub const NAME_MAX: usize = 64;

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
            cmdline_regex(r.get_ref(), cx.regex_budget)
                .map_err(|kind| cx.err(&r.span(), kind))
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
