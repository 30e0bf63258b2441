//! The event source that lives on the tokio runtime and feeds the loop's channel: the
//! rule directories (inotify, debounced).
//!
//! Must not touch: daemon state. Each source only sends [`Event`]s.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask};
use tokio::sync::mpsc;

use super::{Event, ReloadCause};

/// How long the rule directories must be quiet before a reload: editors write a temp
/// file, then rename it, and packages drop several files at once.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Watches the rule directories; after changes and [`DEBOUNCE`] of quiet, sends one
/// reload. Directories that do not exist are skipped with a warning.
pub fn rule_watcher(dirs: &[PathBuf]) -> std::io::Result<Inotify> {
    let inotify = Inotify::init()?;
    let mask = WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM;
    for dir in dirs {
        match inotify.watches().add(dir, mask) {
            Ok(_) => tracing::debug!(dir = %dir.display(), "watching rules"),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch rule directory")
            }
        }
    }
    Ok(inotify)
}

/// Runs the debounced reload loop on an [`Inotify`] from [`rule_watcher`].
pub async fn rule_changes(inotify: Inotify, events: mpsc::Sender<Event>) -> std::io::Result<()> {
    let mut stream = inotify.into_event_stream(vec![0u8; 4096])?;
    loop {
        // The first change…
        match stream.next().await {
            Some(ev) => {
                ev?;
            }
            None => return Ok(()),
        }
        // …then wait for quiet.
        while let Ok(more) = tokio::time::timeout(DEBOUNCE, stream.next()).await {
            match more {
                Some(ev) => {
                    ev?;
                }
                None => return Ok(()),
            }
        }
        if events
            .send(Event::Reload(ReloadCause::Inotify))
            .await
            .is_err()
        {
            return Ok(());
        }
    }
}
