//! The event source that lives on the tokio runtime and feeds the loop's channel: the
//! rule directories (inotify, debounced; directories that appear later are picked up;
//! a directory moved away or a symlink pointed elsewhere is followed by its path).
//!
//! Must not touch: daemon state. Each source only sends [`Event`]s.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use tokio::sync::mpsc;

use super::state::event::{Event, ReloadCause};
use crate::watch::rule_dirs::{leads_elsewhere, DirId};

/// How long the rule directories must be quiet before a reload: editors write a temp
/// file, then rename it, and packages drop several files at once.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// How often a rule directory that does not exist (yet, or any more) is looked for, and
/// each watched path is checked to lead to the directory watched (a swapped symlink).
pub const MISSING_POLL: Duration = Duration::from_secs(2);

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVE_SELF
        | WatchMask::DELETE_SELF
        | WatchMask::ONLYDIR
}

/// The rule directories' inotify watches, and the directories that could not be watched
/// because they do not exist.
#[derive(Debug)]
pub struct RuleWatch {
    inotify: Inotify,
    /// Each watch, its path, and the directory the path led to when watched.
    watched: Vec<(WatchDescriptor, PathBuf, Option<DirId>)>,
    missing: Vec<PathBuf>,
}

/// Watches the rule directories. One that does not exist is looked for every
/// [`MISSING_POLL`] and watched (with a reload) once it appears.
pub fn rule_watcher(dirs: &[PathBuf]) -> std::io::Result<RuleWatch> {
    let inotify = Inotify::init()?;
    let mut w = RuleWatch {
        watched: Vec::new(),
        missing: Vec::new(),
        inotify,
    };
    for dir in dirs {
        let id = DirId::of(dir);
        match w.inotify.watches().add(dir, mask()) {
            Ok(wd) => {
                tracing::debug!(dir = %dir.display(), "watching rules");
                w.watched.push((wd, dir.clone(), id));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(dir = %dir.display(), "rule directory {} does not exist; its rules are read once it does", dir.display());
                w.missing.push(dir.clone());
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch rule directory {}: {e}; SIGHUP still reloads it", dir.display())
            }
        }
    }
    Ok(w)
}

/// Runs the debounced reload loop: after changes and [`DEBOUNCE`] of quiet, sends one
/// reload. A rule directory that appears is watched from then on; one that goes away
/// (its watch ends) is looked for again.
pub async fn rule_changes(w: RuleWatch, events: mpsc::Sender<Event>) -> std::io::Result<()> {
    let RuleWatch {
        inotify,
        mut watched,
        mut missing,
    } = w;
    let mut stream = inotify.into_event_stream(vec![0u8; 4096])?;
    let mut watches = stream.watches();
    let mut look = tokio::time::interval(MISSING_POLL);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The first change (or a directory that appeared)…
        tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => note(&ev?, &mut watched, &mut missing, &mut watches),
                None => return Ok(()),
            },
            _ = look.tick() => {
                let before = missing.len();
                // A path that leads elsewhere now (a symlink swapped, the directory
                // replaced) is watched again from its path.
                let mut moved = false;
                for i in (0..watched.len()).rev() {
                    if leads_elsewhere(&watched[i].1, watched[i].2) {
                        let (wd, dir, _) = watched.swap_remove(i);
                        let _ = watches.remove(wd);
                        tracing::info!(dir = %dir.display(), "rule directory path {} leads to another directory now", dir.display());
                        missing.push(dir);
                        moved = true;
                    }
                }
                let mut still = Vec::new();
                for dir in missing.drain(..) {
                    let id = DirId::of(&dir);
                    match watches.add(&dir, mask()) {
                        Ok(wd) => {
                            tracing::info!(dir = %dir.display(), "rule directory {} appeared; watching it", dir.display());
                            watched.push((wd, dir, id));
                        }
                        Err(_) => still.push(dir),
                    }
                }
                missing = still;
                if !moved && missing.len() == before {
                    continue;
                }
            }
        }
        // …then wait for quiet.
        while let Ok(more) = tokio::time::timeout(DEBOUNCE, stream.next()).await {
            match more {
                Some(ev) => note(&ev?, &mut watched, &mut missing, &mut watches),
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

/// A removed watch (its directory deleted or unmounted) or a watched directory moved
/// away (the watch would follow it, not the path) moves the path to `missing`.
fn note<S>(
    ev: &inotify::Event<S>,
    watched: &mut Vec<(WatchDescriptor, PathBuf, Option<DirId>)>,
    missing: &mut Vec<PathBuf>,
    watches: &mut inotify::Watches,
) {
    if ev
        .mask
        .intersects(EventMask::IGNORED | EventMask::MOVE_SELF)
    {
        if let Some(i) = watched.iter().position(|(wd, _, _)| *wd == ev.wd) {
            let (wd, dir, _) = watched.swap_remove(i);
            if ev.mask.contains(EventMask::MOVE_SELF) {
                let _ = watches.remove(wd);
            }
            tracing::warn!(dir = %dir.display(), "rule directory {} gone; its rules are read again once it is back", dir.display());
            missing.push(dir);
        }
    }
}
