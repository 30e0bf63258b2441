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

#[test]
fn a_service_is_confined_isolated_and_given_back_its_own_values() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // The unit had values of its own.
    units
        .set_allowed("md.service", Some(&"0-7".parse().unwrap()), None)
        .unwrap();
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(r.len(), 1);
    assert!(r[0].confined && r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("md.service"));
    assert_eq!(
        r[0].line(),
        "unit md.service: AllowedCPUs=6-7 (set by pinnerd); CPUs 6-7 isolated (cpuset partition)"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
    assert!(run.path().join(JOURNAL_FILE).exists());
    // The same want again changes nothing.
    let before = units.calls().len();
    h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(units.calls().len(), before);
    // Let go: partition undone, the unit's own 0-7 back, the journal gone.
    let r = h.reconcile(&[]);
    assert!(r.is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(units.allowed_of("md.service").cpus, "0-7".parse().unwrap());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_service_in_a_slice_the_units_do_not_allow_is_refused_before_anything_changes() {
    let (_d, cg2) = tree();
    for cg in ["trading.slice", "trading.slice/md.service"] {
        let d = cg2.dir(cg);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
        std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
    }
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        10,
        "md.service",
        "/trading.slice/md.service",
        "trading.slice",
    );
    let shipped = partition::MountView::Shipped {
        mount: cg2.mount().to_path_buf(),
    };
    let mut h = holder(&units, &cg2, run.path()).with_mounts(shipped.clone());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    let slice = cg2.dir("trading.slice");
    let why = format!(
        "{}/cpuset.cpus.exclusive: read-only file system: pinnerd may write only below the slices its units' ReadWritePaths= name; ReadWritePaths=-{} in a drop-in of pinnerd.service and of pinnerd-partition@.service allows this one (docs/sharing.md, \"A slice of its own\")",
        slice.display(),
        slice.display()
    );
    assert_eq!(
        r[0].line(),
        format!("not isolated: {why}; the rule stays merely exclusive")
    );
    assert!(!r[0].confined && !r[0].isolated, "{r:?}");
    // Nothing was asked of systemd, nothing written.
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "");
    // The dry run says the same, in the same words.
    let info = unit_of_cgroup("/trading.slice/md.service").unwrap();
    let w = Want {
        vouch: Vouch {
            users: vec![0],
            unit: true,
        },
        ..want("feed", 10, "6-7", true)
    };
    let root = |_| {
        Ok(Owner {
            real: 0,
            effective: 0,
        })
    };
    let cannot = cg2
        .writable_on_the_way(&info.cgroup, &shipped)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        dry_line(&w, Ok(info), cannot.as_deref(), &root),
        format!("unit md.service: not isolated: {why}; the rule stays merely exclusive")
    );
    // A drop-in naming the slice (the daemon's own view here: a writable tree):
    // isolated as any other.
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].confined && r[0].isolated, "{r:?}");
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "6-7");
    assert_eq!(
        file(&cg2, "/trading.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/trading.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_process_of_a_login_session_gets_a_scope_of_its_own_in_the_same_slice() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        20,
        "session-3.scope",
        "/user.slice/user-1000.slice/session-3.scope",
        "user-1000.slice",
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 20, "3", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("pinnerd-feed-20.scope"));
    assert!(
        units.calls()[0].starts_with("adopt pinnerd-feed-20.scope in user-1000.slice pid 20"),
        "{:?}",
        units.calls()
    );
    assert_eq!(
        file(
            &cg2,
            "/user.slice/user-1000.slice/pinnerd-feed-20.scope",
            "cpuset.cpus.partition"
        ),
        "isolated"
    );
    // The session scope itself was never confined.
    assert!(!units.calls().iter().any(|c| c.contains("session-3.scope")));
    // Wanted again, the process is found in its scope: nothing is redone.
    let n = units.calls().len();
    let r = h.reconcile(&[want("feed", 20, "3", true)]);
    assert!(r[0].isolated);
    assert_eq!(units.calls().len(), n);
}

#[test]
fn init_scope_is_never_confined_and_two_rules_do_not_share_a_unit() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(1, "init.scope", "/init.scope", "-.slice");
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want("a", 1, "1", false),
        want("b", 10, "2", false),
        want("c", 11, "3", false),
    ]);
    assert!(
        r[0].problem.as_deref().unwrap().contains("init.scope"),
        "{r:?}"
    );
    assert!(!r[0].confined);
    assert!(r[1].confined);
    assert_eq!(
        r[2].problem.as_deref(),
        Some("unit md.service is already held for rule b")
    );
}

#[test]
fn two_processes_of_one_rule_in_one_service_hold_it_together() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("a", 10, "2", false), want("a", 11, "3", false)]);
    assert_eq!(r[0].cpus, "2-3".parse().unwrap());
    assert_eq!(r[1].cpus, "2-3".parse().unwrap());
    assert_eq!(units.allowed_of("md.service").cpus, "2-3".parse().unwrap());
}

#[test]
fn isolation_the_kernel_cannot_give_leaves_the_unit_as_it_was_and_says_why() {
    let (_d, cg2) = tree();
    std::fs::remove_file(cg2.mount().join("cpuset.cpus.isolated")).unwrap();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    assert!(h
        .cannot_isolate()
        .unwrap()
        .contains("remote cpuset partitions"));
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].confined && !r[0].isolated);
    let line = r[0].line();
    assert!(
        line.starts_with("not isolated: the kernel has no remote cpuset partitions"),
        "{line}"
    );
    assert!(line.ends_with("the rule stays merely exclusive"), "{line}");
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // Without isolation, unit-cpuset alone still confines.
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert!(r[0].confined && r[0].problem.is_none(), "{r:?}");
}

#[test]
fn a_refused_property_is_said_and_nothing_is_held() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.0.lock().unwrap().refuse_set = true;
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(
        r[0].problem.as_deref().unwrap().contains("Access denied"),
        "{r:?}"
    );
    assert!(h.held().is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_crash_leaves_a_journal_the_next_start_keeps_while_wanted_and_undoes_otherwise() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut first = holder(&units, &cg2, run.path());
    first.reconcile(&[want("feed", 10, "6-7", true)]);
    drop(first); // killed: nothing undone
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );

    // The next start keeps it (the service still runs) and takes it over untouched.
    let mut second = holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    let lines = second.recover(t0);
    assert!(
        lines[0].starts_with("kept what a previous run held for rule feed"),
        "{lines:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    let calls = units.calls().len();
    let r = second.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated);
    assert_eq!(units.calls().len(), calls, "taken over without a change");
    drop(second);

    // A start that never wants it again undoes it once the grace has passed.
    let mut third = holder(&units, &cg2, run.path());
    third.recover(t0);
    assert!(third.expire(t0 + RECOVERY_GRACE / 2).is_empty());
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    let lines = third.expire(t0 + RECOVERY_GRACE);
    assert!(lines[0].contains("not wanted again"), "{lines:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(!run.path().join(JOURNAL_FILE).exists());

    // A journal whose unit has no process left is undone at once.
    let mut fourth = holder(&units, &cg2, run.path());
    fourth.reconcile(&[want("feed", 10, "6-7", true)]);
    drop(fourth);
    std::fs::write(cg2.dir("/system.slice/md.service").join("cgroup.procs"), "").unwrap();
    let mut fifth = holder(&units, &cg2, run.path());
    let lines = fifth.recover(t0);
    assert!(
        lines[0].starts_with("undid what a previous run held"),
        "{lines:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
}

#[test]
fn slices_are_laid_out_as_systemd_does() {
    assert_eq!(slice_path("user-1000.slice"), "user.slice/user-1000.slice");
    assert_eq!(slice_path("system.slice"), "system.slice");
    assert_eq!(slice_path("a-b-c.slice"), "a.slice/a-b.slice/a-b-c.slice");
    assert_eq!(slice_path("-.slice"), "");
}

#[test]
fn a_dry_run_names_the_unit_from_the_cgroup_path_and_what_would_be_set() {
    let u = unit_of_cgroup("/system.slice/md-feed.service").unwrap();
    assert_eq!(
        (u.name.as_str(), u.slice.as_str()),
        ("md-feed.service", "system.slice")
    );
    let u = unit_of_cgroup("/user.slice/user-1000.slice/session-3.scope").unwrap();
    assert_eq!(
        (u.name.as_str(), u.slice.as_str()),
        ("session-3.scope", "user-1000.slice")
    );
    // A container's cgroups below its scope are the scope's.
    let u = unit_of_cgroup("/system.slice/docker-ab.scope/init.scope").unwrap();
    assert_eq!(
        (u.name.as_str(), u.cgroup.as_str()),
        ("docker-ab.scope", "/system.slice/docker-ab.scope")
    );
    assert!(unit_of_cgroup("/").is_none());

    let root = |_: u32| {
        Ok(Owner {
            real: 0,
            effective: 0,
        })
    };
    let mut w = want("feed", 42, "4-7", false);
    w.mems = Some("1".parse().unwrap());
    let info = unit_of_cgroup("/system.slice/md-feed.service").ok_or_else(String::new);
    assert_eq!(
        dry_line(&w, info.clone(), None, &root),
        "unit md-feed.service: AllowedCPUs=4-7, AllowedMemoryNodes=1 (would be set by pinnerd)"
    );
    w.isolate = true;
    assert_eq!(
        dry_line(
            &w,
            info.clone(),
            Some("no cgroup v2 hierarchy (cgroup v1 only)"),
            &root
        ),
        "unit md-feed.service: not isolated: no cgroup v2 hierarchy (cgroup v1 only); the rule stays merely exclusive"
    );
    assert!(dry_line(&w, info.clone(), None, &root)
        .ends_with("; CPUs 4-7 would be isolated (cpuset partition)"));
    let session =
        unit_of_cgroup("/user.slice/user-1000.slice/session-3.scope").ok_or_else(String::new);
    assert!(dry_line(&w, session.clone(), None, &root).starts_with(
        "unit pinnerd-feed-42.scope (a scope of its own in user-1000.slice): AllowedCPUs=4-7"
    ));
    // A process of a user the rule does not name: not held; a unit rule's process is
    // held only if it is the main process, which the dry run cannot know.
    let user = |_: u32| {
        Ok(Owner {
            real: 4343,
            effective: 4343,
        })
    };
    assert_eq!(
        dry_line(&w, session, None, &user),
        "not held: pid 42 (uid 4343) runs in a login session in user-1000.slice, and the rule's user is uid 0: only a process of the rule's users is held there"
    );
    let by_unit = want_of("feed", 42, "4-7", &[], true);
    assert_eq!(
        dry_line(&by_unit, info, None, &user),
        "unit md-feed.service: AllowedCPUs=4-7 (would be set by pinnerd); CPUs 4-7 would be isolated (cpuset partition) — only if pid 42 is the main process of md-feed.service"
    );
}

#[test]
fn a_partition_the_kernel_refuses_the_daemon_is_made_by_the_helper_unit_and_undone_by_it() {
    let (_d, mut cg2) = tree();
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    assert!(units
        .calls()
        .contains(&"start pinnerd-partition@isolated:system.slice-md.service.service".to_string()));
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");

    // Without systemd to start the helper, the refusal is said as the kernel put it.
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = Holder::new(
        Err(UnitError::NoSystemd("no bus".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    );
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("systemd is not on the system bus: no bus")
    );
}

#[test]
fn a_container_is_held_whole_by_its_scope_and_nothing_is_adopted() {
    let (_d, cg2) = tree();
    let d = cg2.dir("/system.slice/docker-ab.scope");
    std::fs::create_dir_all(&d).unwrap();
    for f in [
        "cpuset.cpus.exclusive",
        "cpuset.cpus.partition",
        "cgroup.procs",
    ] {
        std::fs::write(
            d.join(f),
            if f.ends_with("partition") {
                "member\n"
            } else {
                "\n"
            },
        )
        .unwrap();
    }
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    // What systemd answers for a process of a container: the container's scope, with
    // Delegate= (its runtime's cgroups below it are not units).
    units.0.lock().unwrap().by_pid.insert(
        30,
        UnitInfo {
            name: "docker-ab.scope".into(),
            cgroup: "/system.slice/docker-ab.scope".into(),
            slice: "system.slice".into(),
            delegate: true,
            main_pid: None,
        },
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("db", 30, "4", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(r[0].unit.as_deref(), Some("docker-ab.scope"));
    assert!(
        !units.calls().iter().any(|c| c.starts_with("adopt")),
        "{:?}",
        units.calls()
    );
    assert_eq!(
        file(
            &cg2,
            "/system.slice/docker-ab.scope",
            "cpuset.cpus.partition"
        ),
        "isolated"
    );
}

#[test]
fn a_unit_not_found_and_a_systemd_not_there_are_asked_again_at_the_next_reconcile() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    let later = units.clone();
    let tries = Arc::new(Mutex::new(0));
    let counted = tries.clone();
    let mut h = Holder::new(
        Err(UnitError::NoSystemd("not yet".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    )
    .with_owners(owners_of(&units))
    .reconnecting(Box::new(move || {
        *counted.lock().unwrap() += 1;
        Ok(Box::new(later.clone()) as Box<dyn Units>)
    }));
    // Connected at this reconcile; the process's unit is not known to systemd yet.
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert_eq!(*tries.lock().unwrap(), 1);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("GetUnitByPID(10)"),
        "{r:?}"
    );
    // Now it is: asked again, held; the connection is not made again.
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let r = h.reconcile(&[want("feed", 10, "6-7", false)]);
    assert!(r[0].confined && r[0].problem.is_none(), "{r:?}");
    assert_eq!(*tries.lock().unwrap(), 1);
}

#[test]
fn a_partition_refused_after_the_unit_was_confined_is_not_tried_again_before_its_backoff_unless_wanted_otherwise(
) {
    let (_d, mut cg2) = tree();
    // The kernel refuses the daemon, and no helper unit is installed.
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    let why = r[0].problem.clone().unwrap();
    assert!(
        why.contains("not permitted") && why.contains("not found"),
        "{why}"
    );
    assert_eq!(
        units.allowed_of("md.service").cpus,
        CpuSet::new(),
        "confinement taken back"
    );
    let calls = units.calls().len();
    // The same want again (the daemon's retry, before the backoff): said again, the unit
    // not confined again.
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert_eq!(r[0].problem.as_deref(), Some(why.as_str()));
    assert_eq!(units.calls().len(), calls, "{:?}", units.calls());
    // Wanted otherwise (other CPUs): tried again.
    h.reconcile(&[want("feed", 10, "5-7", true)]);
    assert!(units.calls().len() > calls);
    // A property systemd refused changed nothing: tried again at once.
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.0.lock().unwrap().refuse_set = true;
    let mut h = holder(&units, &cg2, run.path());
    h.reconcile(&[want("feed", 10, "6-7", false)]);
    h.reconcile(&[want("feed", 10, "6-7", false)]);
    let sets = units
        .calls()
        .iter()
        .filter(|c| c.starts_with("set md.service cpus=6-7"))
        .count();
    assert_eq!(sets, 2, "{:?}", units.calls());
}

/// Nothing a user can imitate is enough: a process named like an isolate rule's, of a
/// uid the rule does not name, in a login session or in a service, is never adopted,
/// confined or isolated, whatever its comm and command line.
#[test]
fn a_users_process_that_imitates_a_rule_is_never_held() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(
        40,
        "session-9.scope",
        "/user.slice/user-4343.slice/session-9.scope",
        "user-4343.slice",
    );
    units.own(40, 4343);
    units.add_main(30, "md.service", "/system.slice/md.service", "system.slice");
    units.add(41, "md.service", "/system.slice/md.service", "system.slice");
    units.own(41, 4343);
    // A set-uid program run by the user: effective root, real 4343.
    units.add(
        42,
        "session-9.scope",
        "/user.slice/user-4343.slice/session-9.scope",
        "user-4343.slice",
    );
    units.0.lock().unwrap().owners.insert(
        42,
        Owner {
            real: 4343,
            effective: 0,
        },
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want_of("feed", 40, "6-7", &[1001], false),
        want_of("feed", 41, "4-5", &[], true),
        want_of("root-feed", 42, "2-3", &[0], false),
    ]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("pid 40 (uid 4343) runs in a login session in user-4343.slice, and the rule's user is uid 1001: only a process of the rule's users is held there")
    );
    assert_eq!(
        r[1].problem.as_deref(),
        Some("pid 41 (uid 4343) is not held: the rule names no `user`, and it is not the main process of md.service (pid 30); a hold is made only for a process of the rule's users or for the main process of a system service the rule's `unit` names")
    );
    assert!(
        r[2].problem
            .as_deref()
            .unwrap()
            .starts_with("pid 42 (uid 4343) runs in a login session"),
        "{r:?}"
    );
    assert!(r.iter().all(|r| !r.confined && !r.isolated), "{r:?}");
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

/// A unit is held whole, so only for what may hold all of it: its main process (a
/// rule naming the unit), or a process of the rule's users while every process of the
/// unit is theirs. A user's job inside a root service (cron) confines nothing.
#[test]
fn a_unit_is_held_only_for_its_main_process_or_when_all_of_it_is_the_rules_users() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add_main(
        30,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    units.add(
        31,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    units.own(31, 4343);
    let mut h = holder(&units, &cg2, run.path());
    // The user's job matched a rule naming the unit: it is not the main process.
    let r = h.reconcile(&[want_of("job", 31, "2-3", &[], true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("not the main process of cron.service (pid 30)"),
        "{r:?}"
    );
    // Root's cron matched a rule naming root: the unit also runs the user's job.
    let r = h.reconcile(&[want_of("cron", 30, "2-3", &[0], false)]);
    assert_eq!(
        r[0].problem.as_deref(),
        Some("cron.service is held whole and also runs pid 31 of uid 4343, which the rule does not name (the rule's user is uid 0): not held")
    );
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // The rule's users own all of it: held.
    let r = h.reconcile(&[want_of("cron", 30, "2-3", &[0, 4343], false)]);
    assert!(r[0].isolated && r[0].problem.is_none(), "{r:?}");
    // The main process of a unit the rule names: held, and a child of it the rule
    // does not vouch for is in that hold without adding its CPUs.
    h.reconcile(&[]);
    let r = h.reconcile(&[
        want_of("cron", 30, "2-3", &[], true),
        want_of("cron", 31, "4-5", &[], true),
    ]);
    assert!(r[0].isolated && r[1].isolated, "{r:?}");
    assert!(r[1].problem.is_none(), "{r:?}");
    assert_eq!(r[1].cpus, "2-3".parse().unwrap());
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "2-3");
    // A user's manager is no system service, whoever its main process is.
    units.add_main(
        50,
        "user@4343.service",
        "/user.slice/user-4343.slice/user@4343.service",
        "user-4343.slice",
    );
    units.own(50, 4343);
    let r = h.reconcile(&[want_of("mgr", 50, "6", &[], true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("user@4343.service is a user's unit"),
        "{r:?}"
    );
}

/// A service's cgroup in `tree()`'s hierarchy, with one process.
fn service_cgroup(cg2: &Cgroup2, name: &str) {
    let d = cg2.dir(&format!("/system.slice/{name}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
    std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
    std::fs::write(d.join("cgroup.procs"), "10\n").unwrap();
}

#[test]
fn a_stop_undoes_holds_until_its_deadline_and_leaves_the_rest_in_the_journal() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    for (pid, name) in [(11, "a.service"), (12, "b.service")] {
        service_cgroup(&cg2, name);
        units.add(pid, name, &format!("/system.slice/{name}"), "system.slice");
    }
    let clock = FakeClock::new();
    let mut h = holder(&units, &cg2, run.path()).with_clock(clock.boxed());
    let r = h.reconcile(&[
        want("a", 11, "2", false),
        want("b", 12, "3", false),
        want("feed", 10, "6-7", true),
    ]);
    assert!(r.iter().all(|r| r.confined) && r[2].isolated, "{r:?}");
    // From now on systemd takes 6 s per call; the stop has 10 s.
    units.0.lock().unwrap().slow = Some((clock.clone(), Duration::from_secs(6)));
    let lines = h.release_all(clock.now() + Duration::from_secs(10));
    // The partition went first, then one more unit; the last was not reached.
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(units.allowed_of("md.service").cpus, CpuSet::new());
    assert_eq!(units.allowed_of("a.service").cpus, CpuSet::new());
    assert_eq!(units.allowed_of("b.service").cpus, "3".parse().unwrap());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("b.service") && lines[0].contains("left in the journal"),
        "{lines:?}"
    );
    let left = Journal::new(run.path()).load().unwrap();
    assert_eq!(
        left.iter().map(|h| h.unit.as_str()).collect::<Vec<_>>(),
        ["b.service"]
    );

    // The next start finds it there and, not wanted, undoes it after the grace.
    units.0.lock().unwrap().slow = None;
    let mut next = holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    next.recover(t0);
    next.expire(t0 + RECOVERY_GRACE);
    assert_eq!(units.allowed_of("b.service").cpus, CpuSet::new());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_partition_no_record_names_is_undone_and_its_values_are_not_taken_as_the_units_own() {
    // What a run whose journal was removed left: md.service isolated on 6-7, granted
    // down from the slice, and AllowedCPUs=6-7 set by pinnerd.
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units
        .set_allowed("md.service", Some(&"6-7".parse().unwrap()), None)
        .unwrap();
    for cg in ["/system.slice", "/system.slice/md.service"] {
        std::fs::write(cg2.dir(cg).join("cpuset.cpus.exclusive"), "6-7\n").unwrap();
    }
    std::fs::write(
        cg2.dir("/system.slice/md.service")
            .join("cpuset.cpus.partition"),
        "isolated\n",
    )
    .unwrap();
    let mut h = holder(&units, &cg2, run.path());
    assert!(h.recover(Instant::now()).is_empty(), "no journal");
    let r = h.reconcile(&[want("feed", 10, "4-5", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(h.held()[0].before_cpus, CpuSet::new());
    // The old partition's grants went with it: only the new CPUs are granted.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "4-5");
    // Let go: nothing of either run is left.
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.exclusive"),
        ""
    );
    assert_eq!(units.allowed_of("md.service").cpus, CpuSet::new());
}

#[test]
fn a_hold_a_previous_run_left_that_cannot_be_undone_stays_on_record_and_is_not_taken_as_the_units_own(
) {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // The unit's own value.
    units
        .set_allowed("md.service", Some(&"0-7".parse().unwrap()), None)
        .unwrap();
    let mut first = holder(&units, &cg2, run.path());
    first.reconcile(&[want("feed", 10, "6-7", false)]);
    drop(first); // killed
                 // The next start has no systemd yet, and the unit has no process: the undo cannot
                 // give AllowedCPUs= back, so the hold stays on record.
    std::fs::write(cg2.dir("/system.slice/md.service").join("cgroup.procs"), "").unwrap();
    let later = units.clone();
    let mut second = Holder::new(
        Err(UnitError::NoSystemd("not yet".into())),
        Ok(cg2.clone()),
        Journal::new(run.path()),
        Box::new(|_, _, _, _| 0),
    )
    .with_owners(owners_of(&units))
    .reconnecting(Box::new(move || {
        Ok(Box::new(later.clone()) as Box<dyn Units>)
    }));
    let lines = second.recover(Instant::now());
    assert!(
        lines[0].starts_with("could not fully undo what a previous run held")
            && lines[0].ends_with("kept in the journal"),
        "{lines:?}"
    );
    assert_eq!(Journal::new(run.path()).load().unwrap().len(), 1);
    // Wanted again once systemd is there, which refuses the property at first: nothing
    // changed, so the hold left stays on record as it was.
    std::fs::write(
        cg2.dir("/system.slice/md.service").join("cgroup.procs"),
        "10\n",
    )
    .unwrap();
    units.0.lock().unwrap().refuse_set = true;
    let r = second.reconcile(&[want("feed", 10, "5-7", false)]);
    assert!(!r[0].confined, "{r:?}");
    let left = Journal::new(run.path()).load().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].cpus, "6-7".parse().unwrap());
    // Then accepted: 6-7 is pinnerd's, not the unit's own.
    units.0.lock().unwrap().refuse_set = false;
    let r = second.reconcile(&[want("feed", 10, "5-7", false)]);
    assert!(r[0].confined, "{r:?}");
    assert_eq!(second.held()[0].before_cpus, "0-7".parse().unwrap());
    assert_eq!(Journal::new(run.path()).load().unwrap().len(), 1);
    second.reconcile(&[]);
    assert_eq!(units.allowed_of("md.service").cpus, "0-7".parse().unwrap());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_refused_partition_is_tried_again_after_a_backoff_that_doubles_up_to_its_bound() {
    let (_d, mut cg2) = tree();
    // The kernel refuses the daemon, and the helper unit is not there (yet).
    cg2.deny_partition = true;
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let clock = FakeClock::new();
    let mut h = holder(&units, &cg2, run.path()).with_clock(clock.boxed());
    let wants = [want("feed", 10, "6-7", true)];
    let tries = |u: &FakeUnits| {
        u.calls()
            .iter()
            .filter(|c| c.starts_with("start pinnerd-partition@isolated"))
            .count()
    };
    let r = h.reconcile(&wants);
    assert!(
        r[0].problem.as_deref().unwrap().contains("not found"),
        "{r:?}"
    );
    assert_eq!(tries(&units), 1);
    let mut expected = 1;
    for wait in [30, 60, 120, 240, 480, 600, 600] {
        let wait = Duration::from_secs(wait);
        assert_eq!(h.deadline(), Some(clock.now() + wait));
        clock.advance(wait - Duration::from_secs(1));
        assert!(!h.retry_due());
        let r = h.reconcile(&wants);
        assert!(r[0].problem.is_some() && !r[0].confined, "{r:?}");
        assert_eq!(tries(&units), expected, "not tried before {wait:?}");
        clock.advance(Duration::from_secs(1));
        assert!(h.retry_due());
        h.reconcile(&wants);
        expected += 1;
        assert_eq!(tries(&units), expected, "tried again after {wait:?}");
    }
    // The helper unit installed: the next try makes the partition.
    units.0.lock().unwrap().tree = Some(cg2.clone());
    clock.advance(REFUSAL_RETRY_MAX);
    let r = h.reconcile(&wants);
    assert!(r[0].isolated && r[0].problem.is_none(), "{r:?}");
    assert_eq!(h.deadline(), None);
}

/// The root's `cpuset.cpus.isolated` as the kernel would list it.
fn isolated_now(cg2: &Cgroup2, cpus: &str) {
    std::fs::write(
        cg2.mount().join("cpuset.cpus.isolated"),
        format!("{cpus}\n"),
    )
    .unwrap();
}

#[test]
fn no_partition_is_written_while_a_removed_one_still_has_cpus_isolated() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    // isolcpus=1 was there before pinnerd: never in the way.
    isolated_now(&cg2, "1");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    // A partition's cgroup was removed and the kernel still lists its CPUs 2-3.
    isolated_now(&cg2, "1-3");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].isolated && !r[0].confined, "{r:?}");
    let why = r[0].problem.as_deref().unwrap();
    assert!(why.contains("CPUs 2-3 are still isolated"), "{why}");
    // Nothing was written: no grant, no partition, the unit not even confined.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert!(units.calls().is_empty(), "{:?}", units.calls());
    // The kernel let go: the same want is made at the next try.
    isolated_now(&cg2, "1");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
}

#[test]
fn cpus_the_kernel_keeps_isolated_after_a_release_are_said_and_their_grants_wait() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(11, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    isolated_now(&cg2, "6-7");
    // Let go: `member` is written, and the kernel keeps listing 6-7.
    h.reconcile(&[]);
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(
        h.notes(),
        vec![
            "CPUs 6-7 still isolated after the partition of /system.slice/md.service \
             was released: the kernel kept them"
                .to_string()
        ]
    );
    // The ancestors' grants stay while the kernel keeps the CPUs, on record for the
    // next start, and no partition is made meanwhile.
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "6-7");
    let journal = Journal::new(run.path()).load().unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(
        journal[0].partition.as_ref().unwrap().cgroup,
        "/system.slice/md.service"
    );
    let r = h.reconcile(&[want("feed", 11, "4", true)]);
    assert!(!r[0].isolated, "{r:?}");
    // The kernel lets go: the grants are taken back at the next try, the note goes.
    isolated_now(&cg2, "");
    let later = Instant::now() + Duration::from_secs(60);
    h.expire(later);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    assert!(h.notes().is_empty());
    assert!(h.deadline().is_none());
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

#[test]
fn a_partition_is_undone_as_soon_as_its_cgroup_reports_no_process() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let events = cg2.dir("/system.slice/md.service").join("cgroup.events");
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    // The main process exits: the cgroup says so before systemd removes it, and before
    // the daemon has seen the exit (the same want comes again).
    std::fs::write(&events, "populated 0\nfrozen 0\n").unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(!r[0].isolated, "{r:?}");
    assert!(
        r[0].problem.as_deref().unwrap().contains("no process left"),
        "{r:?}"
    );
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    // The unit starts again (populated anew): held anew, isolated again.
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    // Let go for good: nothing is left.
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_partition_someone_else_made_after_the_start_is_not_taken_for_a_removed_one() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    h.recover(Instant::now());
    // An administrator's partition of CPU 4, made after pinnerd started.
    let other = cg2.dir("/system.slice/other.service");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("cpuset.cpus.partition"), "isolated\n").unwrap();
    std::fs::write(other.join("cpuset.cpus.exclusive.effective"), "4\n").unwrap();
    isolated_now(&cg2, "4");
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    // Once it is gone (its CPUs still listed), it is a removed partition.
    h.reconcile(&[]);
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    std::fs::remove_dir_all(&other).unwrap();
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(
        r[0].problem
            .as_deref()
            .unwrap()
            .contains("CPUs 4 are still isolated"),
        "{r:?}"
    );
}

#[test]
fn the_holder_thread_undoes_a_partition_when_its_watched_cgroup_empties() {
    use crate::daemon::holding::HolderThread;
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let events = cg2.dir("/system.slice/md.service").join("cgroup.events");
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (u, c, r) = (units.clone(), cg2.clone(), run.path().to_path_buf());
    let mut t = HolderThread::start(
        move || holder(&u, &c, &r),
        move |reports, _notes| {
            let _ = tx.send(reports);
        },
        || {},
    )
    .unwrap();
    t.want(vec![want("feed", 10, "6-7", true)]);
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(first[0].isolated, "{first:?}");
    // The unit's last process exits: nothing is sent to the thread, the kernel's
    // cgroup.events change is what wakes it.
    // `fs::write` truncates before it writes: the thread may wake on the empty file
    // (not known to be empty, so still held) and report once more before the
    // `populated 0` it then reads; the kernel changes the file in one step.
    std::fs::write(&events, "populated 0\nfrozen 0\n").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut next = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    while next[0].isolated && std::time::Instant::now() < until {
        next = rx
            .recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
            .unwrap();
    }
    assert!(!next[0].isolated, "{next:?}");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(file(&cg2, "/system.slice", "cpuset.cpus.exclusive"), "");
    t.stop(Duration::from_secs(5));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !t.ended() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(t.ended(), "the holder thread ended after its stop");
}

/// One rule's explicit CPUs wanted by each of its services (short-lived services of a
/// template, several instances): the first is held and isolated, the others are left
/// as they are, with a line naming the first, and nothing is confined for them
/// (confining one over another's partition made Linux 6.12 warn and leave the CPUs
/// isolated for nobody). When the first lets go, the next is held.
#[test]
fn a_cpu_is_isolated_for_one_unit_at_a_time() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add(
        30,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[want("feed", 10, "6-7", true), want("feed", 30, "6-7", true)]);
    assert!(r[1].isolated, "{r:?}");
    assert_eq!(r[1].unit.as_deref(), Some("cron.service"));
    assert_eq!(
        r[0].problem.as_deref(),
        Some("CPUs 6-7 are held for cron.service (rule feed) as an isolated partition: a CPU is held for one unit at a time where one of them isolates it")
    );
    assert!(
        !units.calls().iter().any(|c| c.contains("md.service")),
        "{:?}",
        units.calls()
    );
    // A unit-cpuset hold beside it on the same CPUs is refused too, and one on other
    // CPUs is not.
    let mut confine = want("other", 10, "7", false);
    confine.vouch.users = vec![0];
    let r = h.reconcile(&[want("feed", 30, "6-7", true), confine]);
    assert!(r[1]
        .problem
        .as_deref()
        .unwrap()
        .starts_with("CPUs 7 are held for cron.service"));
    let r = h.reconcile(&[want("feed", 30, "6-7", true), want("other", 10, "5", false)]);
    assert!(r[1].confined && r[1].problem.is_none(), "{r:?}");
    // The first lets go: the next is held.
    h.reconcile(&[]);
    let r = h.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
}

/// `systemctl restart` of the daemon (or an upgrade): what is held stays, on record,
/// and the next start takes it over untouched, as after a crash; a plain stop undoes it.
#[test]
fn a_restart_of_the_daemon_keeps_what_is_held_for_the_next_start() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add(10, "md.service", "/system.slice/md.service", "system.slice");
    let mut h = holder(&units, &cg2, run.path());
    assert!(h.reconcile(&[want("feed", 10, "6-7", true)])[0].isolated);
    // Not restarting: nothing kept, the stop undoes.
    assert_eq!(h.keep_for_restart(), None);
    units.0.lock().unwrap().restarting = true;
    let calls = units.calls().len();
    assert_eq!(
        h.keep_for_restart(),
        Some(vec![
            "the daemon restarts: 1 hold kept for the next start to take over".to_string()
        ])
    );
    assert_eq!(units.calls().len(), calls, "nothing undone");
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    // The next daemon takes it over untouched when it wants it the same way.
    let mut next = holder(&units, &cg2, run.path());
    std::fs::write(
        cg2.dir("/system.slice/md.service").join("cgroup.procs"),
        "10\n",
    )
    .unwrap();
    next.recover(std::time::Instant::now());
    let r = next.reconcile(&[want("feed", 10, "6-7", true)]);
    assert!(r[0].isolated, "{r:?}");
    assert_eq!(units.calls().len(), calls, "taken over without a change");
    // A plain stop of that one undoes.
    units.0.lock().unwrap().restarting = false;
    assert_eq!(next.keep_for_restart(), None);
    next.release_all(std::time::Instant::now() + Duration::from_secs(10));
    assert_eq!(
        file(&cg2, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
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

/// Two isolate rules let go in one reconcile: each unit's AllowedCPUs= reset, the
/// cpuset.cpus systemd leaves behind on the first (its slice keeps the controller for
/// the second) widened — short of the second's partition while it stands, to every CPU
/// once it goes — and each unit's tasks handed their masks from before pinnerd.
#[test]
fn two_holds_let_go_at_once_both_give_back_their_masks_and_cpus() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    units.add_main(
        11,
        "cron.service",
        "/system.slice/cron.service",
        "system.slice",
    );
    let (mut h, given) = recording_holder(&units, &cg2, run.path());
    let r = h.reconcile(&[
        want_with("a", 10, "6-7", &[(10, "0-7"), (12, "1-7")]),
        want_with("b", 11, "4-5", &[(11, "0-7")]),
    ]);
    assert!(r.iter().all(|r| r.isolated), "{r:?}");
    assert_eq!(file(&cg2, "/system.slice/md.service", "cpuset.cpus"), "6-7");
    h.reconcile(&[]);
    for (unit, cg) in [
        ("md.service", "/system.slice/md.service"),
        ("cron.service", "/system.slice/cron.service"),
    ] {
        assert!(units.allowed_of(unit).cpus.is_empty(), "{unit}");
        assert_eq!(file(&cg2, cg, "cpuset.cpus.partition"), "member", "{unit}");
        assert_eq!(
            file(&cg2, cg, "cpuset.cpus"),
            "0-7",
            "{unit}: the CPUs left widened"
        );
    }
    let given = given.lock().unwrap().clone();
    let set = |s: &str| s.parse::<CpuSet>().unwrap();
    assert_eq!(
        given,
        vec![
            (
                "/system.slice/cron.service".to_string(),
                set("4-5"),
                BTreeMap::from([(11, set("0-7"))])
            ),
            // Widened to 0-5 only while md held 6-7: its tasks left there get their
            // masks back again once md lets go.
            (
                "/system.slice/cron.service".to_string(),
                set("0-5"),
                BTreeMap::from([(11, set("0-7"))])
            ),
            (
                "/system.slice/md.service".to_string(),
                set("6-7"),
                BTreeMap::from([(10, set("0-7")), (12, set("1-7"))])
            ),
        ]
    );
    assert!(!run.path().join(JOURNAL_FILE).exists());
}

/// The masks from before pinnerd are on record with the hold: a hold a killed daemon
/// left, not wanted again, gives them back when the next start lets it go.
#[test]
fn a_hold_left_by_a_crash_gives_back_the_masks_from_before_pinnerd() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.0.lock().unwrap().tree = Some(cg2.clone());
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    let (mut first, _) = recording_holder(&units, &cg2, run.path());
    first.reconcile(&[want_with("a", 10, "6-7", &[(10, "0-7"), (12, "3")])]);
    drop(first); // killed: nothing undone
    let (mut second, given) = recording_holder(&units, &cg2, run.path());
    let t0 = Instant::now();
    second.recover(t0);
    second.reconcile(&[]);
    assert!(given.lock().unwrap().is_empty(), "kept for the grace");
    second.expire(t0 + RECOVERY_GRACE);
    let set = |s: &str| s.parse::<CpuSet>().unwrap();
    assert_eq!(
        given.lock().unwrap().clone(),
        vec![(
            "/system.slice/md.service".to_string(),
            set("6-7"),
            BTreeMap::from([(10, set("0-7")), (12, set("3"))])
        )]
    );
    assert_eq!(file(&cg2, "/system.slice/md.service", "cpuset.cpus"), "0-7");
}

/// Letting go leaves the unit as its files say: the runtime drop-ins set-property wrote
/// for the hold are removed, and one the administrator had set at run time before the
/// hold is put back as it was.
#[test]
fn letting_go_removes_the_runtime_dropins_of_the_hold_and_keeps_the_admins() {
    let (_d, cg2) = tree();
    let run = tempfile::tempdir().unwrap();
    let units = FakeUnits::default();
    units.add_main(10, "md.service", "/system.slice/md.service", "system.slice");
    // The administrator's own run-time value, before pinnerd.
    units
        .set_allowed("md.service", None, Some(&"0-1".parse().unwrap()))
        .unwrap();
    let key = |p: &str| ("md.service".to_string(), p.to_string());
    let admins = units
        .0
        .lock()
        .unwrap()
        .dropins
        .get(&key("AllowedMemoryNodes"))
        .cloned();
    assert!(admins.is_some());
    let mut h = holder(&units, &cg2, run.path());
    let r = h.reconcile(&[Want {
        mems: Some("1".parse().unwrap()),
        ..want("feed", 10, "6-7", true)
    }]);
    assert!(r[0].confined, "{r:?}");
    assert!(units
        .0
        .lock()
        .unwrap()
        .dropins
        .contains_key(&key("AllowedCPUs")));
    h.reconcile(&[]);
    let w = units.0.lock().unwrap();
    assert_eq!(
        w.dropins.get(&key("AllowedCPUs")),
        None,
        "pinnerd's drop-in left"
    );
    assert_eq!(w.dropins.get(&key("AllowedMemoryNodes")), admins.as_ref());
}

#[test]
fn runtime_dropins_are_removed_written_back_and_never_outside_their_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("md.service.d/50-AllowedCPUs.conf");
    assert_eq!(
        systemd::runtime_dropin(d, "md.service", "AllowedCPUs").unwrap(),
        path
    );
    assert_eq!(
        systemd::read_runtime_dropin(d, "md.service", "AllowedCPUs").unwrap(),
        None
    );
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "[Service]\nAllowedCPUs=6-7\n").unwrap();
    std::fs::write(d.join("md.service.d/50-MemoryMax.conf"), "x").unwrap();
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    assert!(!path.exists());
    assert!(
        d.join("md.service.d/50-MemoryMax.conf").exists(),
        "another's kept"
    );
    systemd::restore_runtime_dropin(d, "md.service", "MemoryMax", None).unwrap();
    assert!(
        !d.join("md.service.d").exists(),
        "the emptied directory goes"
    );
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", Some("a")).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a");
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    systemd::restore_runtime_dropin(d, "md.service", "AllowedCPUs", None).unwrap();
    for bad in ["../x.service", "", ".service", "a/b.service"] {
        assert!(
            systemd::runtime_dropin(d, bad, "AllowedCPUs").is_err(),
            "{bad}"
        );
    }
}
