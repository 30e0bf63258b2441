//! What the daemon would hold, without asking systemd or changing anything: for
//! `check` and `plan --live`.

use super::partition::Cgroup2;
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
/// `cannot` why nothing can be isolated here, `owner_of` tells processes' owners.
pub fn dry_line(
    w: &Want,
    unit: Result<UnitInfo, String>,
    cannot: Option<&str>,
    owner_of: &OwnerOf,
) -> String {
    let place = match unit.and_then(|u| place_for(&u, &w.rule, w.pid)) {
        Ok(p) => p,
        Err(why) => return format!("not held: {why}"),
    };
    // Without systemd the main process is not known: a process the rule's users do not
    // own is held only if it is its service's main process, which the line says.
    let mut unless = None;
    if let Err(why) = vouch(&place, w, owner_of, |_| Ok(Vec::new())) {
        match &place {
            Place::Unit(u) if w.vouch.unit && u.name.ends_with(".service") => {
                unless = Some(format!(
                    " — only if pid {} is the main process of {}",
                    w.pid, u.name
                ));
            }
            _ => return format!("not held: {why}"),
        }
    }
    let mut s = match &place {
        Place::Unit(u) => format!("unit {}", u.name),
        Place::Adopt { scope, slice } => format!("unit {scope} (a scope of its own in {slice})"),
    };
    let confined = !w.isolate || cannot.is_none();
    if confined {
        s.push_str(&format!(": AllowedCPUs={}", w.cpus));
        if let Some(m) = &w.mems {
            s.push_str(&format!(", AllowedMemoryNodes={m}"));
        }
        s.push_str(" (would be set by pinnerd)");
    }
    match (w.isolate, cannot) {
        (true, None) => s.push_str(&format!(
            "; CPUs {} would be isolated (cpuset partition)",
            w.cpus
        )),
        (true, Some(why)) => s.push_str(&format!(
            ": not isolated: {why}; the rule stays merely exclusive"
        )),
        (false, _) => {}
    }
    s.push_str(unless.as_deref().unwrap_or(""));
    s
}
