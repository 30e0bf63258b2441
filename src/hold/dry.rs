//! What the daemon would hold, without asking systemd or changing anything: for
//! `check` and `plan --live`, said in the holder's words (`report`'s [`HoldState`]) as
//! what would be done.

use super::partition::{Cgroup2, MountView};
use super::report::{Confined, HoldState, Mood, Shortfall};
use super::systemd::UnitInfo;
use super::vouch::{vouch, OwnerOf};
use super::{place_for, Place, Want};

/// Why nothing can be isolated on the machine under `root`, if so: the cgroup v2
/// hierarchy, its cpuset controller and remote partitions (for `check`, `plan --live`).
pub fn cannot_isolate_here(root: &crate::sysroot::SysRoot) -> Option<String> {
    match Cgroup2::find(root) {
        Err(e) => Some(e.to_string()),
        Ok(c) => c.probe().err().map(|e| e.to_string()),
    }
}

/// Why the daemon would refuse to make `cgroup` a partition for want of a writable file,
/// if so, in its words (see [`Cgroup2::writable_on_the_way`]): told by the running
/// daemon's mount table (a process of `pinnerd.service`, whose cgroup only systemd
/// fills), else by what the shipped units allow.
pub fn cannot_write_partition(root: &crate::sysroot::SysRoot, cgroup: &str) -> Option<String> {
    let c = Cgroup2::find(root).ok()?;
    c.writable_on_the_way(cgroup, &daemon_view(root, &c))
        .err()
        .map(|e| e.to_string())
}

/// The running daemon's mount table, else the shipped units' sandbox.
fn daemon_view(root: &crate::sysroot::SysRoot, c: &Cgroup2) -> MountView {
    let procs = c.dir("/system.slice/pinnerd.service").join("cgroup.procs");
    crate::sysroot::read_bounded(procs)
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .and_then(|pid| {
            crate::sysroot::read_bounded(root.proc_path(format!("{pid}/mountinfo"))).ok()
        })
        .map_or_else(
            || MountView::Shipped {
                mount: c.mount().to_path_buf(),
            },
            MountView::Mountinfo,
        )
}

/// The unit a cgroup path is in, as systemd lays units out: its innermost `.service`
/// or `.scope` component, in the slice above it (for dry runs, without asking systemd).
pub fn unit_of_cgroup(path: &str) -> Option<UnitInfo> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let i = parts
        .iter()
        .rposition(|p| p.ends_with(".service") || p.ends_with(".scope"))?;
    // The unit systemd knows is the outermost unit component: a container's own
    // cgroups below its scope are not units.
    let i = parts[..=i]
        .iter()
        .position(|p| p.ends_with(".service") || p.ends_with(".scope"))
        .unwrap_or(i);
    let slice = parts[..i]
        .iter()
        .rev()
        .find(|p| p.ends_with(".slice"))
        .map_or("-.slice".to_string(), |s| s.to_string());
    Some(UnitInfo {
        name: parts[i].to_string(),
        cgroup: format!("/{}", parts[..=i].join("/")),
        slice,
        delegate: false,
        main_pid: None,
    })
}

/// What the daemon would hold for `w`, in one line, for `plan --live`: `unit` is the
/// process's unit (or why it has none; its `main_pid` is not known without systemd),
/// `cannot` why nothing can be isolated here, `owner_of` tells processes' owners. The
/// words are the holder's report's, as what would be done ([`Mood::Would`]).
pub fn dry_line(
    w: &Want,
    unit: Result<UnitInfo, String>,
    cannot: Option<&str>,
    owner_of: &OwnerOf,
) -> String {
    let place = match unit.and_then(|u| place_for(&u, &w.rule, w.pid).map_err(|e| e.to_string())) {
        Ok(p) => p,
        Err(why) => return not_held(why),
    };
    // Without systemd the main process is not known: a process the rule's users do not
    // own is held only if it is its service's main process, which the line says.
    let mut unless = String::new();
    if let Err(why) = vouch(&place, w, owner_of, |_| Ok(Vec::new())) {
        match &place {
            Place::Unit(u) if w.vouch.unit && u.name.ends_with(".service") => {
                unless = format!(" — only if pid {} is the main process of {}", w.pid, u.name);
            }
            _ => return not_held(why.to_string()),
        }
    }
    let unit = match &place {
        Place::Unit(u) => u.name.clone(),
        Place::Adopt { scope, slice } => format!("{scope} (a scope of its own in {slice})"),
    };
    let state = would_be(w, &unit, cannot);
    let said = state.said(Mood::Would);
    match state {
        // Nothing would be confined: the line still names the unit.
        HoldState::Refused { confined: None, .. } => format!("unit {unit}: {said}{unless}"),
        _ => format!("{said}{unless}"),
    }
}

/// What the hold of `w` in `unit` would come to, where `cannot` says why nothing can be
/// isolated: isolation that cannot work leaves the unit alone, as the holder does.
fn would_be(w: &Want, unit: &str, cannot: Option<&str>) -> HoldState {
    let confined = Confined {
        unit: unit.to_string(),
        cpus: w.cpus.clone(),
        mems: w.mems.clone(),
    };
    match (w.isolate, cannot) {
        (false, _) => HoldState::Confined(confined),
        (true, None) => HoldState::Isolated {
            confined: Some(confined),
            cpus: w.cpus.clone(),
        },
        (true, Some(why)) => HoldState::Refused {
            confined: None,
            isolated: None,
            shortfall: Shortfall::NotIsolated(why.to_string()),
        },
    }
}

/// A process nothing would be held for, and why.
fn not_held(why: String) -> String {
    let state = HoldState::Refused {
        confined: None,
        isolated: None,
        shortfall: Shortfall::NotConfined(why),
    };
    state.said(Mood::Would).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dry_run_reads_what_the_running_daemon_may_write() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::sysroot::SysRoot::machine(dir.path());
        let cg = dir.path().join("sys/fs/cgroup");
        for d in ["trading.slice/md.service", "system.slice/pinnerd.service"] {
            std::fs::create_dir_all(cg.join(d)).unwrap();
        }
        std::fs::write(cg.join("cgroup.controllers"), "cpuset\n").unwrap();
        std::fs::write(cg.join("cpuset.cpus.isolated"), "\n").unwrap();
        let trading = "/trading.slice/md.service";
        // No daemon running: the shipped units' three slices.
        let why = cannot_write_partition(&root, trading).unwrap();
        assert!(
            why.starts_with(&format!(
                "{}/trading.slice/cpuset.cpus.exclusive: read-only file system",
                cg.display()
            )),
            "{why}"
        );
        assert_eq!(
            cannot_write_partition(&root, "/system.slice/md.service"),
            None
        );
        // The daemon runs (pid 77) with a drop-in naming trading.slice: its mount table.
        std::fs::write(cg.join("system.slice/pinnerd.service/cgroup.procs"), "77\n").unwrap();
        std::fs::create_dir_all(dir.path().join("proc/77")).unwrap();
        let c = cg.display();
        let table = format!(
            "1 0 254:1 / / rw - ext4 /dev/vda1 rw\n\
             2 1 0:23 / {c} ro,nosuid - cgroup2 cgroup2 rw\n\
             3 2 0:23 /system.slice {c}/system.slice rw,nosuid - cgroup2 cgroup2 rw\n"
        );
        std::fs::write(dir.path().join("proc/77/mountinfo"), &table).unwrap();
        assert_eq!(cannot_write_partition(&root, trading), Some(why));
        std::fs::write(
            dir.path().join("proc/77/mountinfo"),
            format!("{table}4 2 0:23 /trading.slice {c}/trading.slice rw - cgroup2 cgroup2 rw\n"),
        )
        .unwrap();
        assert_eq!(cannot_write_partition(&root, trading), None);
    }
}
