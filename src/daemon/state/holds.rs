//! Units held for `isolate` and `unit-cpuset` rules, kept in [`Holds`]: what to send
//! the holder thread (see `hold`) of what the manager wants held, and what the holder
//! reports back (for `explain`, `status` and the log). Imports nothing of the state.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::api::{HoldRefused, HoldsView};
use crate::cpuset::CpuSet;
use crate::hold::{HoldReport, Want};

/// What the daemon asked the holder for and what it said.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The wants last sent; `None` before the first.
    pub(super) sent: Option<Vec<Want>>,
    /// The holder's last report per managed pid.
    pub(super) reports: BTreeMap<u32, HoldReport>,
    /// Problems already logged (rule, pid, line): said once, not at every report.
    pub(super) logged: BTreeSet<(String, u32, String)>,
    /// While a hold has a problem, the same wants are sent again from then on (a unit
    /// not found yet, systemd not reachable yet).
    pub(super) retry_at: Option<Instant>,
    /// CPUs the kernel kept isolated after a partition was released (the holder's
    /// lines), for `status` and `explain`.
    pub(super) notes: Vec<String>,
}

impl Holds {
    /// The CPUs isolated for holds now (the holder's last reports).
    pub(super) fn isolated_cpus(&self) -> CpuSet {
        self.reports
            .values()
            .filter(|r| r.isolated)
            .fold(CpuSet::new(), |a, r| a.union(&r.cpus))
    }

    /// For the `HoldsJson` property: units confined, CPUs isolated, each distinct
    /// refusal once by rule (what `check` and the log say, no pids), the kernel's notes.
    pub(super) fn view(&self) -> HoldsView {
        let refused: BTreeSet<HoldRefused> = self
            .reports
            .values()
            .filter(|r| r.problem.is_some())
            .map(|r| HoldRefused {
                rule: r.rule.clone(),
                line: r.line(),
            })
            .collect();
        HoldsView {
            units_confined: self.reports.values().filter(|r| r.confined).count() as u32,
            cpus_isolated: self.isolated_cpus(),
            refused: refused.into_iter().collect(),
            notes: self.notes.clone(),
        }
    }

    /// For `status` and the `Holds` property: [`view`](Self::view) in one line.
    pub(super) fn summary(&self) -> Option<String> {
        if self.reports.is_empty() {
            return (!self.notes.is_empty()).then(|| self.notes.join("; "));
        }
        let v = self.view();
        let confined = v.units_confined as usize;
        let mut s = format!("{} confined", crate::words::count(confined, "unit"));
        if !v.cpus_isolated.is_empty() {
            s.push_str(&format!(", CPUs {} isolated", v.cpus_isolated));
        }
        let problems: BTreeSet<String> = v
            .refused
            .iter()
            .map(|r| format!("rule {}: {}", r.rule, r.line))
            .collect();
        for p in problems.iter().chain(v.notes.iter()) {
            s.push_str(&format!("; {p}"));
        }
        Some(s)
    }

    /// The hold line for `explain`: what is held for `pid` and how, or why not, and
    /// what the kernel kept isolated after a release.
    pub(super) fn line(&self, pid: u32) -> Option<String> {
        self.reports.get(&pid).map(|r| {
            let mut line = r.line();
            for n in &self.notes {
                line.push_str(&format!("; {n}"));
            }
            line
        })
    }
}

/// How often holds that could not be made are tried again.
pub(super) const HOLD_RETRY: Duration = Duration::from_secs(30);

impl Holds {
    /// What to send the holder, of `wants` (what should be held now): when it changed,
    /// and again every [`HOLD_RETRY`] while a hold has a problem; `None`: nothing to
    /// send. Asked after every manager change (a rescan is one).
    pub(super) fn sending(&mut self, wants: Vec<Want>, now: Instant) -> Option<Vec<Want>> {
        let retry = self.retry_at.is_some_and(|t| now >= t)
            && self.reports.values().any(|r| r.problem.is_some());
        if self.sent.as_ref() == Some(&wants) && !retry {
            return None;
        }
        self.retry_at = Some(now + HOLD_RETRY);
        // Nothing was ever held and nothing is wanted: the holder has nothing to do.
        if self.sent.is_none() && wants.is_empty() {
            return None;
        }
        self.sent = Some(wants.clone());
        Some(wants)
    }

    /// The processes whose hold was asked for and is not made yet: the holder has not
    /// reported it on those CPUs, and no problem stops it. Their placement has not
    /// settled (the hold may still change where they run), so their memory does not
    /// follow yet (`state/following.rs`).
    pub(super) fn unsettled(&self) -> BTreeSet<i32> {
        let Some(sent) = &self.sent else {
            return BTreeSet::new();
        };
        sent.iter()
            .filter(|w| {
                self.reports
                    .get(&w.pid)
                    .is_none_or(|r| r.problem.is_none() && r.cpus != w.cpus)
            })
            .map(|w| w.pid as i32)
            .collect()
    }

    /// What the kernel kept after a release, as the holder says it: logged when new.
    pub(super) fn noted(&mut self, notes: Vec<String>) {
        for n in notes.iter().filter(|n| !self.notes.contains(n)) {
            tracing::warn!("{n}");
        }
        self.notes = notes;
    }

    /// What the holder did: kept for `explain`, logged once per problem. True when a
    /// unit's CPUs changed (or a hold ended): then every managed thread must be applied
    /// again at once, see `State::held`.
    pub(super) fn reported(&mut self, reports: Vec<HoldReport>) -> bool {
        let mut changed = false;
        let mut now = BTreeMap::new();
        for r in reports {
            let before = self.reports.get(&r.pid);
            let moved = before.is_none_or(|b| {
                b.confined != r.confined || b.isolated != r.isolated || b.cpus != r.cpus
            });
            changed |= moved;
            match &r.problem {
                Some(p) if self.logged.insert((r.rule.clone(), r.pid, p.clone())) => {
                    tracing::warn!(rule = %r.rule, pid = r.pid, "{}", r.line());
                }
                Some(_) => {}
                // Once per change of what is held, not at every reconcile.
                None if moved || before.is_some_and(|b| b.unit != r.unit) => {
                    tracing::info!(rule = %r.rule, pid = r.pid, "{}", r.line())
                }
                None => {}
            }
            now.insert(r.pid, r);
        }
        if self.reports.keys().any(|p| !now.contains_key(p)) {
            changed = true;
        }
        self.logged.retain(|(_, pid, _)| now.contains_key(pid));
        self.reports = now;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;
    use crate::test_log::logged;

    fn want(pid: u32) -> Want {
        Want {
            rule: "md".into(),
            pid,
            cpus: set("2-3"),
            mems: None,
            isolate: false,
            vouch: crate::hold::Vouch::default(),
            originals: Default::default(),
        }
    }

    fn report(pid: u32, problem: Option<&str>) -> HoldReport {
        HoldReport {
            rule: "md".into(),
            pid,
            unit: Some("md-feed.service".into()),
            cpus: set("2-3"),
            mems: None,
            confined: problem.is_none(),
            isolate: false,
            isolated: false,
            problem: problem.map(String::from),
        }
    }

    /// A hold is said when it is made or changes, not at every reconcile of the many
    /// that a busy machine's changes bring.
    #[test]
    fn a_hold_is_logged_when_it_changes_not_at_every_report() {
        let mut h = Holds::default();
        let ((), log) = logged(|| {
            for _ in 0..5 {
                h.reported(vec![report(7, None)]);
            }
        });
        assert_eq!(log.matches("AllowedCPUs=2-3").count(), 1, "{log}");
        let mut wider = report(7, None);
        wider.cpus = set("2-5");
        let ((), log) = logged(|| {
            h.reported(vec![wider.clone()]);
            h.reported(vec![wider.clone()]);
        });
        assert_eq!(log.matches("AllowedCPUs=2-5").count(), 1, "{log}");
    }

    #[test]
    fn wants_are_sent_when_they_change_and_again_while_a_hold_has_a_problem() {
        let mut h = Holds::default();
        let t0 = Instant::now();
        assert_eq!(h.sending(vec![], t0), None, "nothing held, nothing wanted");
        assert_eq!(h.sending(vec![want(7)], t0), Some(vec![want(7)]));
        assert_eq!(h.sending(vec![want(7)], t0), None, "the same wants");
        // A hold that could not be made is asked for again once HOLD_RETRY has passed.
        assert!(h.reported(vec![report(7, Some("unit not found"))]));
        assert_eq!(h.sending(vec![want(7)], t0 + HOLD_RETRY / 2), None);
        let later = t0 + HOLD_RETRY + Duration::from_secs(1);
        assert_eq!(h.sending(vec![want(7)], later), Some(vec![want(7)]));
        // Made: not again; let go: an empty list goes to the holder.
        assert!(h.reported(vec![report(7, None)]));
        assert_eq!(h.sending(vec![want(7)], later + HOLD_RETRY * 2), None);
        assert_eq!(h.sending(vec![], later), Some(vec![]));
        assert!(h.reported(vec![]), "the hold ended");
        assert!(h.line(7).is_none() && h.summary().is_none());
    }

    #[test]
    fn cpus_the_kernel_kept_are_said_in_status_and_explain_until_they_go() {
        let mut h = Holds::default();
        let kept = "CPUs 6-7 still isolated after the partition of /system.slice/md.service \
                    was released: the kernel kept them";
        h.noted(vec![kept.to_string()]);
        assert_eq!(
            h.summary().as_deref(),
            Some(kept),
            "nothing held, still said"
        );
        assert!(h.reported(vec![report(7, None)]));
        assert!(h.summary().unwrap().ends_with(kept), "{:?}", h.summary());
        assert!(h.line(7).unwrap().ends_with(kept), "{:?}", h.line(7));
        h.noted(Vec::new());
        assert!(!h.summary().unwrap().contains("kernel kept"));
        assert!(!h.line(7).unwrap().contains("kernel kept"));
    }

    /// `HoldsJson` says what `Holds` says, as fields: the line is the view's parts.
    #[test]
    fn the_holds_view_has_the_holds_line_in_fields() {
        let mut h = Holds::default();
        assert_eq!(h.view(), HoldsView::default());
        let mut isolated = report(7, None);
        isolated.isolate = true;
        isolated.isolated = true;
        let mut other = report(9, Some("no partitions"));
        other.rule = "feed".into();
        other.isolate = true;
        h.reported(vec![isolated, other, report(8, Some("gone"))]);
        h.noted(vec!["the kernel kept CPUs 6".into()]);
        let v = h.view();
        assert_eq!(
            v,
            HoldsView {
                units_confined: 1,
                cpus_isolated: set("2-3"),
                refused: vec![
                    HoldRefused {
                        rule: "feed".into(),
                        line: "not isolated: no partitions; the rule stays merely exclusive".into()
                    },
                    HoldRefused {
                        rule: "md".into(),
                        line: "unit not confined: gone".into()
                    },
                ],
                notes: vec!["the kernel kept CPUs 6".into()],
            }
        );
        assert_eq!(
            h.summary().as_deref(),
            Some(
                "1 unit confined, CPUs 2-3 isolated; rule feed: not isolated: no partitions; \
                 the rule stays merely exclusive; rule md: unit not confined: gone; the kernel \
                 kept CPUs 6"
            )
        );
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            "{\"units_confined\":1,\"cpus_isolated\":\"2-3\",\"refused\":[{\"rule\":\"feed\",\
             \"line\":\"not isolated: no partitions; the rule stays merely exclusive\"},\
             {\"rule\":\"md\",\"line\":\"unit not confined: gone\"}],\
             \"notes\":[\"the kernel kept CPUs 6\"]}"
        );
    }
}
