use std::path::Path;
use std::sync::{Arc, Mutex};

use super::systemd::Allowed;
use super::*;

/// systemd as the holder sees it, in memory: units by pid, their allowed sets, calls.
#[derive(Default)]
struct World {
    by_pid: HashMap<u32, UnitInfo>,
    allowed: HashMap<String, Allowed>,
    calls: Vec<String>,
    refuse_set: bool,
    /// systemd is restarting the daemon's unit.
    restarting: bool,
    /// Owners by pid (uid 0, root, for any other pid).
    owners: HashMap<u32, Owner>,
    /// What the helper unit writes: where the cgroup tree is.
    tree: Option<Cgroup2>,
    /// Each `set_allowed` takes this long on this clock (a loaded systemd).
    slow: Option<(FakeClock, Duration)>,
    /// The runtime drop-ins set-property leaves, by unit and property.
    dropins: HashMap<(String, String), String>,
}

/// A clock that moves only when told.
#[derive(Clone)]
struct FakeClock(Arc<Mutex<Instant>>);

impl FakeClock {
    fn new() -> FakeClock {
        FakeClock(Arc::new(Mutex::new(Instant::now())))
    }
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
    fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
    fn boxed(&self) -> Box<Clock> {
        let c = self.clone();
        Box::new(move || c.now())
    }
}

#[derive(Clone, Default)]
struct FakeUnits(Arc<Mutex<World>>);

impl FakeUnits {
    fn add(&self, pid: u32, name: &str, cgroup: &str, slice: &str) {
        let mut w = self.0.lock().unwrap();
        let main_pid = w
            .by_pid
            .values()
            .find(|i| i.name == name)
            .and_then(|i| i.main_pid);
        w.by_pid.insert(
            pid,
            UnitInfo {
                name: name.into(),
                cgroup: cgroup.into(),
                slice: slice.into(),
                delegate: false,
                main_pid,
            },
        );
    }
    /// `pid`, owned by `uid`, the main process of the service `name`.
    fn add_main(&self, pid: u32, name: &str, cgroup: &str, slice: &str) {
        self.add(pid, name, cgroup, slice);
        let mut w = self.0.lock().unwrap();
        for info in w.by_pid.values_mut().filter(|i| i.name == name) {
            info.main_pid = Some(pid);
        }
    }
    fn own(&self, pid: u32, uid: u32) {
        self.0.lock().unwrap().owners.insert(
            pid,
            Owner {
                real: uid,
                effective: uid,
            },
        );
    }
    fn owner(&self, pid: u32) -> Result<Owner, super::error::OwnerError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .owners
            .get(&pid)
            .copied()
            .unwrap_or(Owner {
                real: 0,
                effective: 0,
            }))
    }
    fn calls(&self) -> Vec<String> {
        self.0.lock().unwrap().calls.clone()
    }
    fn allowed_of(&self, unit: &str) -> Allowed {
        self.0
            .lock()
            .unwrap()
            .allowed
            .get(unit)
            .cloned()
            .unwrap_or_default()
    }
}

impl Units for FakeUnits {
    fn unit_of_pid(&self, pid: u32) -> Result<UnitInfo, UnitError> {
        let w = self.0.lock().unwrap();
        w.by_pid.get(&pid).cloned().ok_or(UnitError::Call {
            what: format!("GetUnitByPID({pid})"),
            message: "no unit".into(),
        })
    }
    fn allowed(&self, unit: &str) -> Result<Allowed, UnitError> {
        Ok(self.allowed_of(unit))
    }
    fn effective(&self, unit: &str) -> Result<Allowed, UnitError> {
        Ok(self.allowed_of(unit))
    }
    fn set_allowed(
        &self,
        unit: &str,
        cpus: Option<&CpuSet>,
        mems: Option<&CpuSet>,
    ) -> Result<(), UnitError> {
        let mut w = self.0.lock().unwrap();
        if let Some((clock, took)) = &w.slow {
            clock.advance(*took);
        }
        w.calls.push(format!(
            "set {unit} cpus={} mems={}",
            cpus.map_or("-".into(), |c| c.to_string()),
            mems.map_or("-".into(), |c| c.to_string())
        ));
        if w.refuse_set {
            return Err(UnitError::Call {
                what: format!("SetUnitProperties({unit})"),
                message: "Access denied".into(),
            });
        }
        // systemd writes the unit's cpuset.cpus for a value set, and nothing for a
        // reset: the old value stays while the slice keeps the controller (#43846).
        let cgroup = w
            .by_pid
            .values()
            .find(|i| i.name == unit)
            .map(|i| i.cgroup.clone());
        if let (Some(tree), Some(cg), Some(c)) = (&w.tree, cgroup, cpus) {
            if !c.is_empty() {
                std::fs::write(tree.dir(&cg).join("cpuset.cpus"), format!("{c}\n")).unwrap();
            }
        }
        for (property, value) in [("AllowedCPUs", cpus), ("AllowedMemoryNodes", mems)] {
            if let Some(v) = value {
                w.dropins.insert(
                    (unit.to_string(), property.to_string()),
                    format!("# created via systemctl set-property\n[Service]\n{property}={v}\n"),
                );
            }
        }
        let a = w.allowed.entry(unit.to_string()).or_default();
        if let Some(c) = cpus {
            a.cpus = c.clone();
        }
        if let Some(m) = mems {
            a.mems = m.clone();
        }
        Ok(())
    }
    fn adopt(
        &self,
        scope: &str,
        slice: &str,
        pid: u32,
        allowed: &Allowed,
        _d: &str,
    ) -> Result<(), UnitError> {
        let mut w = self.0.lock().unwrap();
        w.calls.push(format!(
            "adopt {scope} in {slice} pid {pid} cpus={}",
            allowed.cpus
        ));
        w.allowed.insert(scope.to_string(), allowed.clone());
        w.by_pid.insert(
            pid,
            UnitInfo {
                name: scope.into(),
                cgroup: format!("/{}/{scope}", slice_path(slice)),
                slice: slice.into(),
                delegate: false,
                main_pid: None,
            },
        );
        Ok(())
    }
    fn partition_property(&self, _unit: &str) -> Result<Option<String>, UnitError> {
        Ok(None)
    }
    fn runtime_dropin(&self, unit: &str, property: &str) -> Result<Option<String>, UnitError> {
        let w = self.0.lock().unwrap();
        Ok(w.dropins
            .get(&(unit.to_string(), property.to_string()))
            .cloned())
    }
    fn restore_runtime_dropin(
        &self,
        unit: &str,
        property: &str,
        text: Option<&str>,
    ) -> Result<(), UnitError> {
        let mut w = self.0.lock().unwrap();
        let key = (unit.to_string(), property.to_string());
        match text {
            Some(t) => w.dropins.insert(key, t.to_string()),
            None => w.dropins.remove(&key),
        };
        Ok(())
    }
    fn restarting(&self, _pid: u32) -> Result<bool, UnitError> {
        Ok(self.0.lock().unwrap().restarting)
    }
    fn processes(&self, unit: &str) -> Result<Vec<u32>, UnitError> {
        let w = self.0.lock().unwrap();
        let mut pids: Vec<u32> = w
            .by_pid
            .iter()
            .filter(|(_, i)| i.name == unit)
            .map(|(p, _)| *p)
            .collect();
        pids.sort();
        Ok(pids)
    }
    fn set_partition(&self, unit: &str, value: &str) -> Result<(), UnitError> {
        self.0
            .lock()
            .unwrap()
            .calls
            .push(format!("partition {unit} {value}"));
        Ok(())
    }
    /// The helper unit, as `pinnerd cpuset-partition` does it with its privilege.
    fn run_oneshot(&self, unit: &str) -> Result<(), UnitError> {
        let mut w = self.0.lock().unwrap();
        w.calls.push(format!("start {unit}"));
        let instance = unit
            .strip_prefix(systemd::PARTITION_HELPER)
            .and_then(|u| u.strip_suffix(".service"))
            .unwrap();
        let (mode, path) = instance.split_once(':').unwrap();
        let cgroup = systemd::unescape_path(path).unwrap();
        let Some(tree) = w.tree.clone() else {
            return Err(UnitError::Call {
                what: format!("StartUnit({unit})"),
                message: "Unit pinnerd-partition@.service not found.".into(),
            });
        };
        std::fs::write(tree.dir(&cgroup).join("cpuset.cpus.partition"), mode).unwrap();
        Ok(())
    }
}

/// A cgroup v2 tree with remote partitions, `system.slice/md.service` (pid 10),
/// `system.slice/cron.service` and a login session (pid 20).
fn tree() -> (tempfile::TempDir, Cgroup2) {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().to_path_buf();
    let m = m.as_path();
    std::fs::write(m.join("cgroup.controllers"), "cpuset memory\n").unwrap();
    std::fs::write(m.join("cpuset.cpus.isolated"), "\n").unwrap();
    std::fs::write(m.join("cpuset.cpus.effective"), "0-7\n").unwrap();
    for cg in [
        "system.slice",
        "system.slice/md.service",
        "system.slice/cron.service",
        "user.slice",
        "user.slice/user-1000.slice",
        "user.slice/user-1000.slice/session-3.scope",
        "user.slice/user-1000.slice/pinnerd-feed-20.scope",
    ] {
        let d = m.join(cg);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
        std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
        std::fs::write(d.join("cgroup.procs"), "10\n").unwrap();
    }
    (dir, Cgroup2::at(m))
}

/// Processes' owners as `units` tells them, not this machine's `/proc`.
fn owners_of(units: &FakeUnits) -> Box<crate::hold::OwnerOf> {
    let owners = units.clone();
    Box::new(move |pid| owners.owner(pid))
}

fn holder(units: &FakeUnits, cg2: &Cgroup2, runtime: &Path) -> Holder {
    Holder::new(
        Ok(Box::new(units.clone())),
        Ok(cg2.clone()),
        Journal::new(runtime),
        Box::new(|_, _, _, _| 0),
    )
    .with_owners(owners_of(units))
    .settling(Duration::from_millis(30))
}

/// What `rule` wants held for `pid`; the rule names `user = "root"`.
fn want(rule: &str, pid: u32, cpus: &str, isolate: bool) -> Want {
    Want {
        rule: rule.into(),
        pid,
        cpus: cpus.parse().unwrap(),
        mems: None,
        isolate,
        vouch: Vouch {
            users: vec![0],
            unit: false,
        },
        originals: BTreeMap::new(),
    }
}

/// The same, for a rule that names `users` (uids) and, with `unit`, a unit.
fn want_of(rule: &str, pid: u32, cpus: &str, users: &[u32], unit: bool) -> Want {
    Want {
        vouch: Vouch {
            users: users.to_vec(),
            unit,
        },
        ..want(rule, pid, cpus, true)
    }
}

fn file(cg2: &Cgroup2, cg: &str, f: &str) -> String {
    std::fs::read_to_string(cg2.dir(cg).join(f))
        .unwrap()
        .trim()
        .to_string()
}

/// A service's cgroup in `tree()`'s hierarchy, with one process.
fn service_cgroup(cg2: &Cgroup2, name: &str) {
    let d = cg2.dir(&format!("/system.slice/{name}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
    std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
    std::fs::write(d.join("cgroup.procs"), "10\n").unwrap();
}

/// The root's `cpuset.cpus.isolated` as the kernel would list it.
fn isolated_now(cg2: &Cgroup2, cpus: &str) {
    std::fs::write(
        cg2.mount().join("cpuset.cpus.isolated"),
        format!("{cpus}\n"),
    )
    .unwrap();
}

/// What a holder gave back: unit cgroup, CPUs held, the originals handed down.
type GivenBack = Arc<Mutex<Vec<(String, CpuSet, BTreeMap<u32, CpuSet>)>>>;

/// A holder whose masks given back are recorded in the list it returns.
fn recording_holder(units: &FakeUnits, cg2: &Cgroup2, runtime: &Path) -> (Holder, GivenBack) {
    let given: GivenBack = Arc::default();
    let g = given.clone();
    let owners = units.clone();
    let h = Holder::new(
        Ok(Box::new(units.clone())),
        Ok(cg2.clone()),
        Journal::new(runtime),
        Box::new(move |_, cgroup, held, originals| {
            g.lock()
                .unwrap()
                .push((cgroup.to_string(), held.clone(), originals.clone()));
            originals.len()
        }),
    )
    .with_owners(Box::new(move |pid| owners.owner(pid)))
    .settling(Duration::from_millis(30));
    (h, given)
}

/// `want`, with the masks its tasks had before pinnerd.
fn want_with(rule: &str, pid: u32, cpus: &str, originals: &[(u32, &str)]) -> Want {
    Want {
        originals: originals
            .iter()
            .map(|(tid, m)| (*tid, m.parse().unwrap()))
            .collect(),
        ..want(rule, pid, cpus, true)
    }
}

mod confining;
mod partitions;
mod recovery;
