//! Whom a hold may be made for. A hold changes the machine for everyone: a unit
//! confined, a process adopted into a scope of its own, CPUs taken from every other
//! task. So it rests only on what an unprivileged user cannot imitate — never on a
//! process's comm, command line, executable path, cgroup or slice names, which are
//! whoever starts it's to choose:
//!
//! - **the owner**: the process's real and effective uid are both among the rule's
//!   `user`s (a set-uid program run by another user keeps that user's real uid). A
//!   unit held whole (a service, a container's scope) is held only while *every*
//!   process of it is such a user's, so that a user's job inside a root service (a
//!   cron job in `cron.service`) never confines the service;
//! - **the unit**: the process is the main process (`MainPID`) of a system service
//!   the rule matched with `unit`, outside the users' slices — systemd starts it, and
//!   no user can enter a system service or become its main process.
//!
//! `check` refuses a holding rule that names neither (see `rules::compile`); this is
//! the same promise kept at run time, for each process and each reconcile.

use super::error::{HoldError, OwnerError};
use super::systemd::{UnitError, UnitInfo};
use super::{Place, Want};

/// What a rule names that a user cannot imitate, on which its holds rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vouch {
    /// The rule's `user`s, as uids: their processes may be held.
    pub users: Vec<u32>,
    /// The rule matches with `unit`: the main process of a system service it matched
    /// may be held.
    pub unit: bool,
}

/// A process's real and effective uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub real: u32,
    pub effective: u32,
}

/// A process's owner, or why it cannot be told (it is gone).
pub type OwnerOf = dyn Fn(u32) -> Result<Owner, OwnerError> + Send;

/// The real [`OwnerOf`]: the `Uid:` line of `/proc/PID/status`.
pub fn owner_of(pid: u32) -> Result<Owner, OwnerError> {
    let path = format!("/proc/{pid}/status");
    let text = crate::sysroot::read_bounded(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => OwnerError::Exited { pid },
        _ => OwnerError::Unreadable {
            pid,
            path: path.clone(),
            error: std::sync::Arc::new(e),
        },
    })?;
    parse_owner(&text).ok_or(OwnerError::NoUid { pid, path })
}

fn parse_owner(status: &str) -> Option<Owner> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|u| u.parse::<u32>().ok());
    Some(Owner {
        real: ids.next()??,
        effective: ids.next()??,
    })
}

/// A unit of the users' slices (`user.slice`, `user-UID.slice`): a login session, a
/// user's manager `user@UID.service` and what runs below it.
fn users_unit(info: &UnitInfo) -> bool {
    info.slice == "user.slice" || info.slice.starts_with("user-")
}

impl Vouch {
    fn names(&self, o: Owner) -> bool {
        self.users.contains(&o.real) && self.users.contains(&o.effective)
    }

    fn users_line(&self) -> String {
        match self.users.as_slice() {
            [] => "the rule names no `user`".to_string(),
            [u] => format!("the rule's user is uid {u}"),
            us => format!(
                "the rule's users are uids {}",
                us.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// `Ok` when `w`'s rule may hold `place` for `w.pid`, else why not, in one line.
/// `processes` lists the pids of a unit held whole (asked only when needed).
pub(super) fn vouch(
    place: &Place,
    w: &Want,
    owner_of: &OwnerOf,
    processes: impl FnOnce(&str) -> Result<Vec<u32>, UnitError>,
) -> Result<(), HoldError> {
    let v = &w.vouch;
    let pid = w.pid;
    let owner = owner_of(pid)?;
    let unit = match place {
        Place::Adopt { .. } if v.names(owner) => return Ok(()),
        Place::Adopt { slice, .. } => {
            return Err(HoldError::Unvouched(format!(
                "pid {pid} (uid {}) runs in a login session in {slice}, and {}: only a process of the rule's users is held there",
                owner.real,
                v.users_line()
            )))
        }
        Place::Unit(u) => u,
    };
    if v.unit && unit.main_pid == Some(pid) && !users_unit(unit) {
        return Ok(());
    }
    if !v.names(owner) {
        let main = match (v.unit, unit.main_pid) {
            (false, _) => String::new(),
            (true, _) if users_unit(unit) => format!(", and {} is a user's unit", unit.name),
            (true, Some(m)) => format!(
                ", and it is not the main process of {} (pid {m})",
                unit.name
            ),
            (true, None) => format!(", and {} has no main process", unit.name),
        };
        return Err(HoldError::Unvouched(format!(
            "pid {pid} (uid {}) is not held: {}{main}; a hold is made only for a process of the rule's users or for the main process of a system service the rule's `unit` names",
            owner.real,
            v.users_line()
        )));
    }
    // Held whole: every process of the unit must be the rule's users'.
    for other in processes(&unit.name)? {
        if other == pid {
            continue;
        }
        match owner_of(other) {
            Ok(o) if !v.names(o) => {
                return Err(HoldError::Unvouched(format!(
                    "{} is held whole and also runs pid {other} of uid {}, which the rule does not name ({}): not held",
                    unit.name,
                    o.real,
                    v.users_line()
                )))
            }
            // Gone meanwhile, or one of the users'.
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_read_from_the_uid_line() {
        let status = "Name:\tsleep\nUmask:\t0022\nUid:\t4343\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
        assert_eq!(
            parse_owner(status),
            Some(Owner {
                real: 4343,
                effective: 0
            })
        );
        assert_eq!(parse_owner("Name:\tx\n"), None);
        assert_eq!(parse_owner("Uid:\tx\t0\n"), None);
        assert_eq!(
            owner_of(u32::MAX).unwrap_err().to_string(),
            format!("pid {} has exited", u32::MAX)
        );
        let me = owner_of(std::process::id()).unwrap();
        assert_eq!(me.real, nix::unistd::getuid().as_raw());
        assert_eq!(me.effective, nix::unistd::geteuid().as_raw());
    }
}
