//! A table's placement keys (`[rule.place]` or a `[[rule.threads]]` entry) checked and
//! resolved: its CPUs to a [`PlacementRequest`], its `sched-policy`, `sched-priority`
//! and `nice` to a [`Sched`], and who may ask for a privileged class. Errors are said
//! through the file's [`Ctx`] where the keys are written.

use std::ops::Range;

use toml::Spanned;

use super::Ctx;
use crate::affinity::sched::{Sched, SchedPolicy, RT_PRIORITY_MAX};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, Shape, SmtPolicy};
use crate::rules::error::{echo, RuleErrorKind};
use crate::rules::format::{MatchSpec, PlaceKeys, RuleSpec};

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

/// The request a table's placement keys make, or `None` with the errors said;
/// `table_span` is where a table with neither `cpus` nor `count` is pointed at.
pub(super) fn place_request(
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

/// A real-time policy or a negative nice value is what only a privileged user may give
/// a thread: what triggers it must be something no user can imitate, as for a hold
/// ([`super::hold_needs_owner`]). Said at the first such key.
pub(super) fn sched_needs_owner(cx: &mut Ctx<'_>, name: &str, m: &MatchSpec, spec: &RuleSpec) {
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
pub(super) fn sched_of(cx: &mut Ctx<'_>, section: &'static str, f: PlaceKeys<'_>) -> Option<Sched> {
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
