//! The kernel event sources that need blocking reads: the proc connector and the uevent
//! socket, each on its own named OS thread, sending batches into the loop's channel.
//!
//! Must not touch: daemon state or affinity. A full channel blocks the reader; the
//! kernel then drops connector messages and reports ENOBUFS, which becomes an
//! `Overrun` and a rescan in the manager — the safe answer to a storm.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::watch::{Connector, ProcMsg, UeventSocket};

use super::Event;

/// How long the kernel may take to acknowledge the connector subscription.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Receive buffer asked for the connector socket.
pub const CONNECTOR_BUFFER: usize = 8 << 20;
/// Messages sent to the loop in one event, at most.
const BATCH: usize = 1024;

/// Starts the proc connector thread. It reports `Event::Watch(Ok)` once subscribed (or
/// `Err` with the reason, and ends), then forwards messages until the loop is gone.
pub fn spawn_proc_watcher(events: mpsc::Sender<Event>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("pinnerd-proc".into())
        .spawn(move || {
            let mut conn = match Connector::open(SUBSCRIBE_TIMEOUT, CONNECTOR_BUFFER) {
                Ok(c) => c,
                Err(e) => {
                    let _ = events.blocking_send(Event::Watch(Err(e.to_string())));
                    return;
                }
            };
            if let Err(e) = conn.set_nonblocking() {
                let _ = events.blocking_send(Event::Watch(Err(e.to_string())));
                return;
            }
            if events.blocking_send(Event::Watch(Ok(()))).is_err() {
                return;
            }
            let mut batch: Vec<ProcMsg> = Vec::new();
            loop {
                if !conn.wait(Duration::from_secs(1)) {
                    if events.is_closed() {
                        return;
                    }
                    continue;
                }
                // Drain what is queued, up to a batch.
                while batch.len() < BATCH {
                    match conn.read(&mut batch) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "proc connector read failed; rescanning");
                            batch.push(ProcMsg::Overrun);
                            break;
                        }
                    }
                }
                if !batch.is_empty()
                    && events
                        .blocking_send(Event::Proc(std::mem::take(&mut batch)))
                        .is_err()
                {
                    return;
                }
            }
        })
        .map(|_| ())
}

/// Starts the CPU hotplug thread (uevents). Without the socket, hotplug is still
/// noticed by the periodic fingerprint check (the online set is part of it).
pub fn spawn_hotplug_watcher(events: mpsc::Sender<Event>) -> std::io::Result<()> {
    let mut sock = match UeventSocket::open() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "no CPU hotplug events; the periodic check still sees changes");
            return Ok(());
        }
    };
    std::thread::Builder::new()
        .name("pinnerd-hotplug".into())
        .spawn(move || loop {
            if !sock.wait(Duration::from_secs(1)) {
                if events.is_closed() {
                    return;
                }
                continue;
            }
            match sock.read_changes() {
                Ok(Some(changes)) if changes.is_empty() => {}
                Ok(Some(_)) | Ok(None) => {
                    if events.blocking_send(Event::Hotplug).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "uevent socket failed; hotplug events stop");
                    return;
                }
            }
        })
        .map(|_| ())
}
