//! What [`State`](super::State) leaves for the shell to carry out.

use crate::api::Signal;

use super::super::worker::Job;
use super::memory;

/// Something the shell must do for the loop.
#[derive(Debug)]
pub enum Action {
    Emit(Signal),
    Measure(Box<Job>),
    /// Start a `memory = "follow"` job on a thread of its own.
    Follow(Box<crate::memory::follow::FollowJob>),
    /// Read these command lines off the loop (`daemon::readers`); each comes back as
    /// [`Event::Cmdline`](super::event::Event::Cmdline).
    ReadCmdlines(Vec<crate::manager::cmdlines::CmdlineWanted>),
    /// Read where a process's memory is off the loop (`daemon::readers`); the read
    /// answers its callers itself, and comes back as [`Event::Memory`](super::event::Event::Memory) when the manager
    /// asked for it.
    ReadMemory(Box<memory::MemoryRead>),
    /// A `STATUS=` line for systemd.
    Status(String),
    /// `WATCHDOG=1`: the loop is alive.
    Watchdog,
    /// `RELOADING=1` … then `READY=1` once reloaded.
    Reloading,
    Ready,
    /// Hold these units (see `hold`): sent to the holder thread, which answers with
    /// [`Event::Held`](super::event::Event::Held).
    Hold(Vec<crate::hold::Want>),
    /// Masks are restored; stop.
    Exit,
}

impl PartialEq for Action {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Action::Emit(a), Action::Emit(b)) => a == b,
            (Action::Measure(a), Action::Measure(b)) => a.id == b.id,
            (Action::Follow(a), Action::Follow(b)) => a.pid == b.pid && a.target == b.target,
            (Action::ReadCmdlines(a), Action::ReadCmdlines(b)) => a == b,
            (Action::ReadMemory(a), Action::ReadMemory(b)) => {
                use crate::daemon::readers::Read;
                a.pid() == b.pid()
            }
            (Action::Status(a), Action::Status(b)) => a == b,
            (Action::Hold(a), Action::Hold(b)) => a == b,
            (Action::Watchdog, Action::Watchdog)
            | (Action::Reloading, Action::Reloading)
            | (Action::Ready, Action::Ready)
            | (Action::Exit, Action::Exit) => true,
            _ => false,
        }
    }
}
