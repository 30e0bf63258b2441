//! The kernel event sources, read on the loop thread itself: the proc connector, the
//! uevent socket, and a doorbell that the loop's channel rings. The loop sleeps in one
//! `poll(2)` over the three, so a process event reaches the manager without a thread
//! hop, and nothing wakes while the machine is quiet.
//!
//! Must not touch: daemon state or affinity. A loop that falls behind lets the kernel
//! drop connector messages; the next read reports ENOBUFS, which becomes an `Overrun`
//! and a rescan in the manager — the safe answer to a storm.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::task::Wake;
use std::time::Duration;

use crate::watch::{Connector, ProcMsg, UeventSocket};

use super::state::event::Event;

/// How long the kernel may take to acknowledge the connector subscription.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Receive buffer asked for the connector socket.
pub const CONNECTOR_BUFFER: usize = 8 << 20;
/// Messages handed to the manager at once, at most.
pub const BATCH: usize = 1024;

/// An eventfd that wakes the loop's `poll` when its channel has something: the waker
/// given to the channel's receiver.
#[derive(Debug)]
pub struct Doorbell(OwnedFd);

impl Doorbell {
    pub fn new() -> std::io::Result<Doorbell> {
        // SAFETY: eventfd with valid flags; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(Doorbell(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Takes the rings so far, so that the next `poll` sleeps until a new one.
    pub fn clear(&self) {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a u64 from our own non-blocking eventfd; EAGAIN
        // (nothing rung) is the only expected failure and needs nothing.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Wakes the `poll` (also from a thread that has no channel to send on).
    pub fn ring(&self) {
        let v = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our own eventfd. It can only fail when
        // the counter is about to overflow, which means it is rung already.
        unsafe { libc::write(self.0.as_raw_fd(), (&v as *const u64).cast(), 8) };
    }
}

impl Wake for Doorbell {
    fn wake(self: Arc<Self>) {
        self.ring();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ring();
    }
}

/// What a [`KernelSources::wait`] found ready.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub bell: bool,
    pub proc: bool,
    pub hotplug: bool,
}

/// The proc connector and the uevent socket, either of which may be missing.
#[derive(Debug, Default)]
pub struct KernelSources {
    proc: Option<Connector>,
    hotplug: Option<UeventSocket>,
}

impl KernelSources {
    /// Subscribes to both. Returns the sources and the events that say how that went
    /// (`Event::Watch`), for the loop to handle first.
    pub fn open() -> (KernelSources, Vec<Event>) {
        let mut events = Vec::new();
        let proc = match Connector::open(SUBSCRIBE_TIMEOUT, CONNECTOR_BUFFER)
            .and_then(|c| c.set_nonblocking().map(|()| c))
        {
            Ok(c) => {
                events.push(Event::Watch(Ok(())));
                Some(c)
            }
            Err(e) => {
                events.push(Event::Watch(Err(e.to_string())));
                None
            }
        };
        let hotplug = match UeventSocket::open() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no CPU hotplug events ({e}); the periodic check still sees changes");
                None
            }
        };
        (KernelSources { proc, hotplug }, events)
    }

    /// Sleeps until the doorbell rings, a source is readable, or `timeout` passes.
    pub fn wait(&self, bell: &Doorbell, timeout: Duration) -> Ready {
        // A missing source polls fd -1, which poll(2) ignores.
        let mut fds = [
            pollfd(bell.0.as_raw_fd()),
            pollfd(self.proc.as_ref().map_or(-1, |c| c.as_raw_fd())),
            pollfd(self.hotplug.as_ref().map_or(-1, |s| s.as_raw_fd())),
        ];
        // Rounded up, so that a deadline a few µs away does not spin.
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: three valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return Ready::default();
        }
        // Errors count as readable: the read then reports them.
        let hit = |p: &libc::pollfd| p.fd >= 0 && p.revents != 0;
        Ready {
            bell: hit(&fds[0]),
            proc: hit(&fds[1]),
            hotplug: hit(&fds[2]),
        }
    }

    /// Drains what the connector has queued, up to [`BATCH`] messages. When the
    /// connector fails for good it is closed and the returned event says so (the daemon
    /// goes on with rescans).
    pub fn read_proc(&mut self, batch: &mut Vec<ProcMsg>) -> Option<Event> {
        let conn = self.proc.as_mut()?;
        while batch.len() < BATCH {
            match conn.read(batch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "proc connector failed ({e}); closing it");
                    self.proc = None;
                    // What was missed is found by the rescan that `Watch(Err)` starts.
                    return Some(Event::Watch(Err(format!("proc connector failed: {e}"))));
                }
            }
        }
        None
    }

    /// Reads the uevent socket: `Some(Event::Hotplug)` when a CPU changed (or changes
    /// may have been lost).
    pub fn read_hotplug(&mut self) -> Option<Event> {
        let sock = self.hotplug.as_mut()?;
        match sock.read_changes() {
            Ok(Some(changes)) if changes.is_empty() => None,
            Ok(Some(_)) | Ok(None) => Some(Event::Hotplug),
            Err(e) => {
                tracing::warn!(error = %e, "uevent socket failed ({e}); hotplug events stop");
                self.hotplug = None;
                None
            }
        }
    }
}

fn pollfd(fd: libc::c_int) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll, Waker};

    #[test]
    fn the_doorbell_wakes_a_poll_when_the_channel_gets_an_event() {
        let bell = Arc::new(Doorbell::new().unwrap());
        let sources = KernelSources::default();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(4);
        let waker = Waker::from(bell.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(rx.poll_recv(&mut cx).is_pending());
        // Nothing rung: the wait times out.
        assert_eq!(
            sources.wait(&bell, Duration::from_millis(20)),
            Ready::default()
        );
        let kept = tx.clone();
        let sender = std::thread::spawn(move || tx.blocking_send(7).unwrap());
        let ready = sources.wait(&bell, Duration::from_secs(10));
        assert!(ready.bell, "{ready:?}");
        sender.join().unwrap();
        bell.clear();
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(7)));
        assert!(rx.poll_recv(&mut cx).is_pending());
        // Cleared: quiet again.
        assert_eq!(
            sources.wait(&bell, Duration::from_millis(20)),
            Ready::default()
        );
        // The last sender gone rings too, and the receiver then says so.
        drop(kept);
        assert!(sources.wait(&bell, Duration::from_secs(10)).bell);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(None));
    }
}
