//! `PropertiesChanged`: which properties differ between two snapshots, and the task
//! that signals every change of the loop's snapshot. The property getters themselves
//! are on the object (`interface`).

use std::borrow::Cow;
use std::collections::HashMap;

use tokio::sync::watch;
use zbus::fdo;
use zbus::object_server::SignalEmitter;
use zbus::Connection;

use super::interface::{container_lines, holds_json, sched_ext_pair};
use super::serving::{INTERFACE, OBJECT_PATH};
use crate::api::Snapshot;

/// Emits `PropertiesChanged` for whatever differs between `old` and `new`, in one signal.
pub async fn properties_changed(
    conn: &Connection,
    old: &Snapshot,
    new: &Snapshot,
) -> zbus::Result<()> {
    let changed = changed_properties(old, new);
    if changed.is_empty() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, OBJECT_PATH)?;
    let iface = zbus::names::InterfaceName::from_static_str_unchecked(INTERFACE);
    fdo::Properties::properties_changed(&emitter, iface, changed, Cow::Borrowed(&[])).await
}

/// The properties whose values differ between `old` and `new`, by bus name, with their
/// new values: what one `PropertiesChanged` carries. Every property but the constant
/// `Version` is here (checked against the introspection by `tests/it/generated.rs`).
pub fn changed_properties<'a>(
    old: &Snapshot,
    new: &'a Snapshot,
) -> HashMap<&'static str, zbus::Variant<'a>> {
    use zbus::Variant as Value;
    let mut changed: HashMap<&'static str, Value<'a>> = HashMap::new();
    if old.state != new.state {
        changed.insert("State", Value::from(new.state.as_str()));
    }
    if old.measured_at_us != new.measured_at_us {
        changed.insert("MeasuredAt", Value::from(new.measured_at_us));
    }
    if old.fingerprint != new.fingerprint {
        changed.insert("Fingerprint", Value::from(new.fingerprint.as_str()));
    }
    if old.cpu_count != new.cpu_count {
        changed.insert("CpuCount", Value::from(new.cpu_count));
    }
    if old.rule_count != new.rule_count {
        changed.insert("RuleCount", Value::from(new.rule_count));
    }
    if old.managed_processes != new.managed_processes {
        changed.insert("ManagedProcesses", Value::from(new.managed_processes));
    }
    if old.managed_threads != new.managed_threads {
        changed.insert("ManagedThreads", Value::from(new.managed_threads));
    }
    if old.rule_errors != new.rule_errors {
        changed.insert("RuleErrors", Value::from(new.rule_errors.clone()));
    }
    if old.matrix_measured.0 != new.matrix_measured.0 {
        changed.insert("PairsMeasured", Value::from(new.matrix_measured.0));
    }
    if old.matrix_measured.1 != new.matrix_measured.1 {
        changed.insert("PairsTotal", Value::from(new.matrix_measured.1));
    }
    if old.sched_ext != new.sched_ext {
        changed.insert("SchedExt", Value::from(sched_ext_pair(&new.sched_ext)));
    }
    if old.latency_off != new.latency_off {
        changed.insert("LatencyOff", Value::from(new.latency_off.clone()));
    }
    if old.holds != new.holds {
        changed.insert("Holds", Value::from(new.holds.clone()));
    }
    if old.holds_view != new.holds_view {
        changed.insert("HoldsJson", Value::from(holds_json(&new.holds_view)));
    }
    if old.nri != new.nri {
        changed.insert("Nri", Value::from(new.nri.clone()));
    }
    if old.containers != new.containers {
        // Every subscriber gets the signal: the lines as anyone may read them.
        changed.insert("Containers", Value::from(container_lines(new, false)));
    }
    if old.state_reason != new.state_reason {
        changed.insert("StateReason", Value::from(new.state_reason.clone()));
    }
    changed
}

/// Publishes every change of the loop's snapshot as `PropertiesChanged`, until the
/// snapshot's sender goes away. Bursts coalesce: only the latest value is sent.
pub async fn publish_properties(conn: Connection, mut snapshot: watch::Receiver<Snapshot>) {
    let mut last = snapshot.borrow_and_update().clone();
    while snapshot.changed().await.is_ok() {
        let new = snapshot.borrow_and_update().clone();
        if let Err(e) = properties_changed(&conn, &last, &new).await {
            tracing::warn!(error = %e, "cannot emit PropertiesChanged: {e}");
        }
        last = new;
    }
}
