//! What the loop hands [`State::handle`](super::State::handle): one [`Event`] per thing
//! that happened. The sources (`daemon::shell`, `daemon::watchers`, `daemon::sources`,
//! the worker and reader threads) make them; only the state reads them.

use crate::api::Call;

/// Why rules are being reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadCause {
    Signal,
    Inotify,
    Bus,
}

impl std::fmt::Display for ReloadCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReloadCause::Signal => "SIGHUP",
            ReloadCause::Inotify => "a rule directory changed",
            ReloadCause::Bus => "a Reload call",
        })
    }
}

/// Everything the loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// A D-Bus command; the reply goes back on its oneshot.
    Command(Call),
    /// SIGHUP or a change in a rule directory.
    Reload(ReloadCause),
    /// SIGTERM or SIGINT: restore masks and exit.
    Terminate,
    /// The loop's once-a-second clock; periodic work is due-checked against it.
    Tick(std::time::Instant),
    /// A measurement job ended.
    Measured(Box<crate::daemon::worker::Finished>),
    /// A `memory = "follow"` job ended.
    Followed(Box<crate::memory::follow::Finished>),
    /// What the holder thread did with the last [`Action::Hold`](super::Action::Hold).
    Held(Vec<crate::hold::HoldReport>),
    /// What the kernel kept isolated after the holder released a partition, one line
    /// each (empty: nothing), sent after every [`Event::Held`].
    HoldNotes(Vec<String>),
    /// A command line read off the loop (see `daemon::readers`).
    Cmdline(crate::manager::cmdlines::CmdlineRead),
    /// Where a process's memory is, read off the loop for the manager (see `daemon::readers`).
    Memory(super::memory::FirstContact),
    /// Messages from the proc connector, in order.
    Proc(Vec<crate::watch::ProcMsg>),
    /// A CPU went online or offline (the online set is re-read from sysfs).
    Hotplug,
    /// A question or news from the NRI plugin (see `nri::link`).
    Nri(crate::nri::link::Ask),
    /// The proc connector is subscribed (`Ok`), or cannot be (`Err`: rescans only).
    Watch(Result<(), String>),
}

impl From<Call> for Event {
    fn from(call: Call) -> Event {
        Event::Command(call)
    }
}
