//! Staying registered: dial the socket when it is there, run a session, and after the
//! runtime goes away (restart, upgrade) dial again once the socket is back.
//!
//! ```text
//! socket absent ──poll (250 ms doubling to 2 s)──► socket present ──dial──► session
//!       ▲                                                                     │ ends
//!       └──────────────────── NotConnected{why} to the loop ◄────────────────┘
//! ```
//!
//! A poll, not inotify: the socket's directory may itself appear and vanish with the
//! runtime, and a `stat` every 2 s at most costs nothing. A peer that is not root
//! (`SO_PEERCRED`) is left at once: what the runtime says decides what is placed where,
//! so it is taken from root only. Owns: the reconnection.
//! Must not touch: the protocol (`session`, `plugin`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::link::{Ask, Update};
use super::plugin::Service;
use super::{session, Enable, NriConfig};

const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// Keeps the daemon registered with the runtime at `config.socket` until `asks` closes.
pub async fn run(
    config: NriConfig,
    asks: mpsc::Sender<Ask>,
    mut updates: mpsc::Receiver<Vec<Update>>,
) {
    if config.enable == Enable::Off {
        return;
    }
    let mut wait = FIRST_WAIT;
    let mut last_reason = String::new();
    loop {
        if asks.is_closed() {
            return;
        }
        let reason = match attempt(&config, &asks, &mut updates).await {
            Attempt::NoSocket => format!("no socket at {}", config.socket.display()),
            Attempt::Dial(e) => format!("cannot connect to {}: {e}", config.socket.display()),
            Attempt::NotRoot(uid) => format!(
                "the process listening on {} runs as uid {uid}, not root: pinnerd takes containers only from a runtime running as root",
                config.socket.display()
            ),
            Attempt::Ended(end) => {
                wait = FIRST_WAIT;
                format!("{end}")
            }
        };
        if reason != last_reason {
            if config.enable == Enable::On && !matches!(reason.as_str(), "") {
                tracing::warn!("nri: not connected ({reason})");
            } else {
                tracing::info!("nri: not connected ({reason})");
            }
            let _ = asks
                .send(Ask::NotConnected {
                    reason: reason.clone(),
                })
                .await;
            last_reason = reason;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LONGEST_WAIT);
    }
}

enum Attempt {
    NoSocket,
    Dial(std::io::Error),
    /// The peer's uid (`SO_PEERCRED`) is not root's.
    NotRoot(u32),
    Ended(session::SessionEnd),
}

async fn attempt(
    config: &NriConfig,
    asks: &mpsc::Sender<Ask>,
    updates: &mut mpsc::Receiver<Vec<Update>>,
) -> Attempt {
    if !is_socket(&config.socket) {
        return Attempt::NoSocket;
    }
    let stream = match UnixStream::connect(&config.socket).await {
        Ok(s) => s,
        Err(e) => return Attempt::Dial(e),
    };
    // The names and pids it will send decide what pinnerd places: only root's.
    match stream.peer_cred() {
        Ok(c) if c.uid() == 0 => {}
        Ok(c) => return Attempt::NotRoot(c.uid()),
        Err(e) => return Attempt::Dial(e),
    }
    let service = Arc::new(Service::new(asks.clone()));
    Attempt::Ended(session::run(stream, &config.registration, service, updates).await)
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false)
}
