//! The daemon planning inside a real cgroup cpuset: this machine's cgroup v1 cpuset
//! hierarchy (`/sys/fs/cgroup/cpuset`), a child cpuset of one CPU, and a `count` rule.

use std::path::PathBuf;
use std::time::Duration;

use pinnerd::sysroot::SysRoot;
use pinnerd::CpuSet;

use super::daemon::*;
use super::helper::Helper;

/// A v1 cpuset child cgroup of `cpus`; its processes go back to the root cpuset and
/// the cgroup is removed on drop.
struct V1Cpuset {
    dir: PathBuf,
    root: PathBuf,
}

impl V1Cpuset {
    fn new(name: &str, cpus: &CpuSet) -> V1Cpuset {
        let root = SysRoot::default().sys_path("fs/cgroup/cpuset");
        assert!(
            root.join("cpuset.effective_cpus").is_file(),
            "no cgroup v1 cpuset hierarchy at {}",
            root.display()
        );
        let dir = root.join(name);
        let _ = std::fs::create_dir(&dir);
        let mems = std::fs::read_to_string(root.join("cpuset.mems")).unwrap();
        // v1 wants CPUs and memory nodes before it takes tasks.
        std::fs::write(dir.join("cpuset.cpus"), cpus.to_string()).unwrap();
        std::fs::write(dir.join("cpuset.mems"), mems.trim()).unwrap();
        V1Cpuset { dir, root }
    }

    fn add(&self, pid: i32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for V1Cpuset {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

#[test]
fn a_process_in_a_one_cpu_cpuset_gets_that_cpu_applied_not_refused() {
    let _cpus = super::cpus_stay_online();
    let online = super::affinity::online();
    let one: CpuSet = std::iter::once(online.last().unwrap()).collect();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-cpuset");
    let cg = V1Cpuset::new(&format!("pinnerd-it-{}", h.pid), &one);
    cg.add(h.pid);
    dirs.write_rule(
        "10-boxed.toml",
        "[[rule]]\nname = \"boxed\"\n[rule.match]\ncomm = \"pd-cpuset\"\n[rule.place]\ncount = 1\n",
    );
    let d = Daemon::start(&bus, &dirs);
    let row = format!(
        "a(ussss) 1 {} \"pd-cpuset\" \"boxed\" \"{one}\" \"applied\"",
        h.pid
    );
    bus.wait_for("the boxed process applied", Duration::from_secs(30), || {
        bus.call("ListManaged", &[]) == row
    });
    let why = bus.call("Explain", &["u", &h.pid.to_string()]);
    let from = format!(
        "cpuset {one} (from {}/cpuset.effective_cpus)",
        cg.dir.display()
    );
    assert!(why.contains(&from), "{why}");
    assert!(why.contains(&format!("plan place: cpus {one}")), "{why}");
    assert!(d.stop().success());
    drop(h);
    drop(cg);
}

#[test]
fn plan_live_shows_the_cpuset_each_process_is_planned_in() {
    let _cpus = super::cpus_stay_online();
    let online = super::affinity::online();
    let one: CpuSet = std::iter::once(online.last().unwrap()).collect();
    let dirs = Dirs::new();
    let h = Helper::spawn(dirs.root.path(), "pd-cs-live");
    let cg = V1Cpuset::new(&format!("pinnerd-it-{}", h.pid), &one);
    cg.add(h.pid);
    dirs.write_rule(
        "10-live.toml",
        "[[rule]]\nname = \"cs-live\"\n[rule.match]\ncomm = \"pd-cs-live\"\n[rule.place]\ncount = 1\n",
    );
    let rules = dirs.rules();
    let settings = dirs.settings();
    let args = [
        "plan",
        "--live",
        "--json",
        "--rules",
        rules.to_str().unwrap(),
        "--config",
        settings.to_str().unwrap(),
    ];
    let r = super::helper::pinnerd(&args);
    assert!(r.ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let me = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == h.pid)
        .unwrap_or_else(|| panic!("not listed: {v}"));
    assert_eq!(me["would_get"], one.to_string());
    assert_eq!(
        me["cpuset"],
        format!("{one} (from {}/cpuset.effective_cpus)", cg.dir.display())
    );
    let instance = v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["rule"] == "cs-live")
        .unwrap();
    assert_eq!(instance["cpuset"], one.to_string(), "{v}");
    assert_eq!(instance["cpus"], one.to_string(), "{v}");
    let text = super::helper::pinnerd(
        &args[..2]
            .iter()
            .chain(&args[3..])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(
        text.stdout
            .contains(&format!("cs-live in cpuset {one} (priority 0): cpus {one}")),
        "{}",
        text.stdout
    );
    drop(h);
    drop(cg);
}

#[test]
fn a_cpuset_edited_under_a_managed_process_is_followed_at_the_next_rescan() {
    let _cpus = super::cpus_stay_online();
    let online = super::affinity::online();
    assert!(online.len() >= 2, "needs two CPUs, has {online}");
    let last: CpuSet = std::iter::once(online.last().unwrap()).collect();
    let first: CpuSet = std::iter::once(online.first().unwrap()).collect();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    dirs.write_settings("[watch]\nrescan-interval = \"1s\"\n");
    let h = Helper::spawn(dirs.root.path(), "pd-cs-edit");
    let cg = V1Cpuset::new(&format!("pinnerd-it-{}", h.pid), &last);
    cg.add(h.pid);
    dirs.write_rule(
        "10-edit.toml",
        "[[rule]]\nname = \"edit\"\n[rule.match]\ncomm = \"pd-cs-edit\"\n[rule.place]\ncount = 1\n",
    );
    let d = Daemon::start(&bus, &dirs);
    let row = |cpus: &CpuSet| {
        format!(
            "a(ussss) 1 {} \"pd-cs-edit\" \"edit\" \"{cpus}\" \"applied\"",
            h.pid
        )
    };
    bus.wait_for(
        "applied in the first cpuset",
        Duration::from_secs(30),
        || bus.call("ListManaged", &[]) == row(&last),
    );
    // The administrator gives the cgroup another CPU; the kernel moves the task there.
    std::fs::write(cg.dir.join("cpuset.cpus"), first.to_string()).unwrap();
    bus.wait_for(
        "planned again in the edited cpuset",
        Duration::from_secs(30),
        || bus.call("ListManaged", &[]) == row(&first),
    );
    let why = bus.call("Explain", &["u", &h.pid.to_string()]);
    assert!(why.contains(&format!("cpuset {first} (from ")), "{why}");
    assert!(d.log().contains("cpuset changed"), "{}", d.log());
    assert!(
        !d.log().contains("someone else changed"),
        "taken for someone else's change:\n{}",
        d.log()
    );
    assert!(d.stop().success());
    drop(h);
    drop(cg);
}
