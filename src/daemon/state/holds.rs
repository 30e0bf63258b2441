//! Units held for `isolate` and `unit-cpuset` rules, for [`State`]: what the daemon
//! wants held after every manager change (sent to the holder thread, see `hold`), and
//! what the holder reports back (for `explain`, `status` and the log).
//! Split from `state/mod.rs` to keep each file readable; same state, same loop.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::hold::{HoldReport, Want};

use super::{Action, State};

/// How often holds that could not be made are tried again.
pub(super) const HOLD_RETRY: Duration = Duration::from_secs(30);

impl State {
    /// What should be held now: [`Manager::hold_want`](crate::manager::Manager::hold_want)
    /// of every managed process.
    pub(super) fn holds_wanted(&self) -> Vec<Want> {
        let Some(m) = &self.managed.manager else {
            return Vec::new();
        };
        let rules = m.rules().rules();
        if !rules
            .iter()
            .any(|r| r.isolate || r.unit_cpuset || r.threads.iter().any(|t| t.isolate))
        {
            return Vec::new();
        }
        let topology = self.machine.topology.as_ref();
        let node_of = |cpu: u32| topology.and_then(|t| t.node_of(cpu));
        let mut wants: Vec<Want> = m
            .list_managed()
            .iter()
            .filter_map(|row| m.hold_want(row, &node_of))
            .collect();
        wants.sort_by_key(|w| w.pid);
        wants
    }

    /// Sends the holder what should be held, when it changed, and again every
    /// [`HOLD_RETRY`] while a hold has a problem. Called after every manager change (a
    /// rescan is one).
    pub(super) fn sync_holds(&mut self) {
        let wants = self.holds_wanted();
        let now = Instant::now();
        let retry = self.sharing.holds.retry_at.is_some_and(|t| now >= t)
            && self
                .sharing
                .holds
                .reports
                .values()
                .any(|r| r.problem.is_some());
        if self.sharing.holds.sent.as_ref() == Some(&wants) && !retry {
            return;
        }
        self.sharing.holds.retry_at = Some(now + HOLD_RETRY);
        // Nothing was ever held and nothing is wanted: the holder has nothing to do.
        if self.sharing.holds.sent.is_none() && wants.is_empty() {
            return;
        }
        self.sharing.holds.sent = Some(wants.clone());
        self.actions.push(Action::Hold(wants));
    }

    /// What the holder did: kept for `explain`, logged once per problem. When a unit's
    /// CPUs changed, every managed thread is applied again at once (systemd turning the
    /// cpuset controller on or off for a slice resets the masks of every task in the
    /// slice's other units, which a later look would take for someone else's change),
    /// then every process is looked at again (the held one's cpuset changed).
    pub(super) fn held(&mut self, reports: Vec<HoldReport>) {
        let mut changed = false;
        let mut now = BTreeMap::new();
        for r in reports {
            let before = self.sharing.holds.reports.get(&r.pid);
            if before.is_none_or(|b| {
                b.confined != r.confined || b.isolated != r.isolated || b.cpus != r.cpus
            }) {
                changed = true;
            }
            match &r.problem {
                Some(p)
                    if self
                        .sharing
                        .holds
                        .logged
                        .insert((r.rule.clone(), r.pid, p.clone())) =>
                {
                    tracing::warn!(rule = %r.rule, pid = r.pid, "{}", r.line());
                }
                Some(_) => {}
                None => tracing::info!(rule = %r.rule, pid = r.pid, "{}", r.line()),
            }
            now.insert(r.pid, r);
        }
        if self
            .sharing
            .holds
            .reports
            .keys()
            .any(|p| !now.contains_key(p))
        {
            changed = true;
        }
        self.sharing
            .holds
            .logged
            .retain(|(_, pid, _)| now.contains_key(pid));
        self.sharing.holds.reports = now;
        if changed {
            if let Some(plan) = self.managed.manager.as_ref().map(|m| m.plan().clone()) {
                self.manager_event(crate::manager::Input::PlanChanged(plan));
            }
            self.manager_event(crate::manager::Input::Rescan);
        }
    }
}
