//! Rules that cannot mean what they say on the machine a plan was made for, for
//! `pinnerd check`: thread entries whose slots run out (one slot for every thread, or
//! `smt = "avoid"` leaving fewer slots than CPUs), and exclusive units that take, or
//! could take as threads appear, more than half the usable CPUs; explicit `cpus` this
//! machine does not have online.
//!
//! Must not touch: anything but the plan and its rules (pure, like `plan`).

use super::{Plan, PlanState, SlotsFrom};
use crate::placement::SmtPolicy;

/// One doubt about one rule: where it is written and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    /// `FILE:LINE:COL` of the rule's name, or of the thread entry's `comm`.
    pub at: String,
    pub message: String,
}

impl std::fmt::Display for Doubt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: warning: {}", self.at, self.message)
    }
}

/// Every doubt about the units of `plan`, in precedence order.
pub fn doubts(plan: &Plan) -> Vec<Doubt> {
    let usable = plan.cpus().online.difference(&plan.cpus().reserved);
    let half = usable.len() / 2;
    let mut out = Vec::new();
    for u in plan.units().iter().filter(|u| u.cpuset.is_none()) {
        let Some(rule) = plan.rules().get(&u.rule) else {
            continue;
        };
        let (at, req) = match u.thread_entry {
            None => match &rule.place {
                Some(p) => (rule.origin(), p),
                None => continue,
            },
            Some(i) => match rule.threads.get(i) {
                Some(t) => (format!("{}:{}", rule.file.display(), t.at), &t.request),
                None => continue,
            },
        };
        let unit = u.name();
        match &u.state {
            PlanState::Slots { slots, .. } => {
                let n = slots.len();
                let from = u
                    .slots_from
                    .as_ref()
                    .map_or_else(String::new, |f| format!(" {}", f.describe()));
                let taken: usize = slots.iter().map(|s| s.len()).sum();
                let pool = match &u.slots_from {
                    Some(SlotsFrom::Within(c) | SlotsFrom::Place(c)) => Some(c),
                    _ => None,
                };
                if n == 1 {
                    out.push(Doubt {
                        at: at.clone(),
                        message: format!(
                            "{unit}: 1 slot{from}: every thread of the entry shares its CPUs (give it more CPUs, or `within`)"
                        ),
                    });
                } else if let (SmtPolicy::Avoid, Some(pool)) = (req.smt, pool) {
                    if taken < pool.len() {
                        out.push(Doubt {
                            at: at.clone(),
                            message: format!(
                                "{unit}: smt = \"avoid\" leaves {n} slots{from} (one per core): threads past slot {} share a core",
                                n - 1
                            ),
                        });
                    }
                }
                if u.exclusive {
                    let all = slots
                        .iter()
                        .fold(crate::cpuset::CpuSet::new(), |a, s| a.union(s));
                    let left = usable.difference(&all).len();
                    if all.len() > half {
                        out.push(Doubt {
                            at,
                            message: format!(
                                "{unit} is exclusive: its {n} slots could take {} of the {} usable CPUs as threads appear (more than half){}",
                                all.len(),
                                usable.len(),
                                if left < 2 {
                                    "; with every slot taken no CPU pair is left to measure latencies on"
                                } else {
                                    ""
                                }
                            ),
                        });
                    }
                }
            }
            PlanState::Placed { .. } if u.state.offline_note(&plan.cpus().online).is_some() => {
                let note = u
                    .state
                    .offline_note(&plan.cpus().online)
                    .unwrap_or_default();
                out.push(Doubt {
                    at,
                    message: format!("{unit}: `cpus`: {note}"),
                });
            }
            PlanState::Placed { cpus } if u.exclusive && cpus.len() > half => {
                let left = usable.difference(cpus).len();
                out.push(Doubt {
                    at,
                    message: format!(
                        "{unit} is exclusive and takes {} of the {} usable CPUs (more than half){}",
                        cpus.len(),
                        usable.len(),
                        if left < 2 {
                            "; no CPU pair is left to measure latencies on"
                        } else {
                            ""
                        }
                    ),
                });
            }
            _ => {}
        }
    }
    out
}
