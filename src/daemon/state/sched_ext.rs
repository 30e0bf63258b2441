//! sched_ext awareness of [`State`]: whether a sched_ext scheduler runs (read at start
//! and on every rescan tick), handed to every plan the daemon makes (`plan::making`
//! applies the `[sched-ext] policy` while one runs), and what that did, logged. Split from `state/mod.rs`; same state, same loop.

use crate::manager;
use crate::sched_ext::{self, SchedExt};

use super::State;

impl State {
    /// Reads the sched_ext state. When it changed since the last read, says so and makes
    /// the plan again (so `widen` and `pause` take effect, or end). Before the manager
    /// exists (at start) it only records the state.
    pub(super) fn check_sched_ext(&mut self) {
        let now = match sched_ext::read(&self.cfg.sysroot) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the sched_ext state ({e}); keeping the last one");
                return;
            }
        };
        if now.as_ref() == self.sharing.sched_ext() {
            return;
        }
        let policy = self.loaded.sched_ext_policy();
        match &now {
            Some(s) => tracing::warn!(
                scheduler = %s.ops, state = %s.state, %policy,
                "a sched_ext scheduler runs ({}, {}): partial affinity masks may be \
                 second-class under it; [sched-ext] policy = \"{policy}\"",
                s.ops, s.state
            ),
            None => tracing::info!("no sched_ext scheduler runs any more"),
        }
        self.sharing.sched_ext_changed(now);
        if self.managed.manager().is_some() {
            let planned = self.new_plan();
            self.hand_down(planned, manager::Input::RulesChanged);
            self.status();
        }
    }

    /// The running sched_ext scheduler, for `status`, the snapshot and `topology`.
    pub fn sched_ext(&self) -> Option<&SchedExt> {
        self.sharing.sched_ext()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Instant;

    use super::super::{Config, State, Timing};
    use crate::cpuset::CpuSet;
    use crate::plan::PlanState;
    use crate::rules::LoadPolicy;
    use crate::sched_ext::{Policy, SchedExt, WidenTo};
    use crate::settings::Settings;
    use crate::sysroot::SysRoot;

    /// The Ryzen 2700X fixture (LLC groups 0-3,8-11 and 4-7,12-15, one node) with a
    /// sched_ext state of `state` (`None`: a kernel without sched_ext), and the real
    /// /proc.
    fn machine(dir: &Path, state: Option<&str>) -> SysRoot {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/ryzen-2700x/sys");
        let sys = dir.join("sys");
        if !sys.exists() {
            let st = std::process::Command::new("cp")
                .arg("-a")
                .arg(&fixture)
                .arg(&sys)
                .status()
                .unwrap();
            assert!(st.success());
        }
        set_state(&sys, state);
        SysRoot::new(sys, "/proc")
    }

    fn set_state(sys: &Path, state: Option<&str>) {
        let d = sys.join("kernel/sched_ext");
        match state {
            None => {
                let _ = std::fs::remove_dir_all(&d);
            }
            Some(s) => {
                std::fs::create_dir_all(d.join("root")).unwrap();
                std::fs::write(d.join("state"), format!("{s}\n")).unwrap();
                std::fs::write(d.join("root/ops"), "layered\n").unwrap();
            }
        }
    }

    /// A started daemon state on that machine with `settings` and one rule.
    fn started(dir: &Path, state: Option<&str>, settings: Settings, rule: &str) -> State {
        let cfg = Config {
            settings: dir.join("absent.toml"),
            rule_dirs: Some(vec![dir.join("rules")]),
            state_dir: dir.join("state"),
            runtime_dir: dir.join("runtime"),
            sysroot: machine(dir, state),
            observe_only: false,
        };
        for d in ["rules", "state", "runtime"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("rules/scx.toml"), rule).unwrap();
        let mut s = State::new(cfg, settings, Timing::default(), Instant::now());
        s.loaded.policy = LoadPolicy::unchecked();
        s.start().unwrap();
        s
    }

    fn with(policy: Policy, widen_to: WidenTo) -> Settings {
        let mut s = Settings::default();
        s.sched_ext.policy = policy;
        s.sched_ext.widen_to = widen_to;
        s
    }

    const TWO: &str = "[[rule]]\nname = \"scx\"\n[rule.match]\ncomm = \"pd-no-such\"\n[rule.place]\ncount = 2\nsmt = \"avoid\"\n";

    fn placed(s: &State) -> CpuSet {
        match s.managed.manager.as_ref().unwrap().plan_of("scx", None) {
            Some(PlanState::Placed { cpus }) => cpus.clone(),
            other => panic!("{other:?}"),
        }
    }

    use crate::cpuset::set;

    #[test]
    fn the_scheduler_is_seen_at_start_and_when_it_stops() {
        let d = tempfile::tempdir().unwrap();
        let mut s = started(d.path(), Some("enabled"), Settings::default(), TWO);
        let layered = SchedExt {
            state: "enabled".into(),
            ops: "layered".into(),
        };
        assert_eq!(s.sched_ext(), Some(&layered));
        assert_eq!(s.snapshot().sched_ext, Some(layered));
        set_state(&d.path().join("sys"), Some("disabled"));
        s.check_sched_ext();
        assert_eq!(s.snapshot().sched_ext, None);
        set_state(&d.path().join("sys"), None);
        s.check_sched_ext();
        assert_eq!(s.snapshot().sched_ext, None);
    }

    #[test]
    fn warn_pins_as_usual_and_warns_once_per_rule() {
        let d = tempfile::tempdir().unwrap();
        let mut s = started(d.path(), Some("enabled"), Settings::default(), TWO);
        let cpus = placed(&s);
        assert_eq!(cpus.len(), 2, "{cpus}");
        assert!(s.sharing.sched_ext.warned.contains("scx"));
        // The same rule planned again is not warned about again; a new scheduler is.
        let _ = s.new_plan();
        assert_eq!(s.sharing.sched_ext.warned.len(), 1);
        set_state(&d.path().join("sys"), Some("disabled"));
        s.check_sched_ext();
        assert!(s.sharing.sched_ext.warned.is_empty());
        assert_eq!(placed(&s), cpus, "pinned as usual whether or not it runs");
    }

    #[test]
    fn widen_rounds_up_to_whole_llc_groups_or_nodes() {
        let d = tempfile::tempdir().unwrap();
        let mut s = started(
            d.path(),
            Some("enabled"),
            with(Policy::Widen, WidenTo::Llc),
            TWO,
        );
        let cpus = placed(&s);
        assert!(
            cpus == set("0-3,8-11") || cpus == set("4-7,12-15"),
            "not one whole LLC group: {cpus}"
        );
        // It stops: masks as chosen again.
        set_state(&d.path().join("sys"), Some("disabled"));
        s.check_sched_ext();
        assert_eq!(placed(&s).len(), 2);
        let d = tempfile::tempdir().unwrap();
        let s = started(
            d.path(),
            Some("enabled"),
            with(Policy::Widen, WidenTo::Node),
            TWO,
        );
        assert_eq!(placed(&s), set("0-15"));
        // No scheduler: widen changes nothing.
        let d = tempfile::tempdir().unwrap();
        let s = started(d.path(), None, with(Policy::Widen, WidenTo::Node), TWO);
        assert_eq!(placed(&s).len(), 2);
    }

    /// A real child process named `pd-scx-pause` with its mask.
    fn child(dir: &Path) -> (std::process::Child, i32) {
        let link = dir.join("pd-scx-pause");
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let c = std::process::Command::new(&link).arg("60").spawn().unwrap();
        let pid = c.id() as i32;
        (c, pid)
    }

    fn mask(pid: i32) -> CpuSet {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        st.lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn pause_releases_every_rule_until_the_scheduler_stops() {
        let d = tempfile::tempdir().unwrap();
        let (mut c, pid) = child(d.path());
        let original = mask(pid);
        // A process planned inside its own mask (no cgroup cpuset in the fixture): one
        // CPU of what it may use.
        let rule = "[[rule]]\nname = \"scx\"\n[rule.match]\ncomm = \"pd-scx-pause\"\n[rule.place]\ncount = 1\n";
        let mut s = started(
            d.path(),
            Some("disabled"),
            with(Policy::Pause, WidenTo::Llc),
            rule,
        );
        let pinned = mask(pid);
        assert_eq!(pinned.len(), 1, "pinned while no scheduler runs: {pinned}");
        assert!(pinned.is_subset(&original));
        set_state(&d.path().join("sys"), Some("enabled"));
        s.check_sched_ext();
        assert_eq!(mask(pid), original, "released while it runs");
        assert_eq!(s.snapshot().managed_processes, 0);
        set_state(&d.path().join("sys"), Some("disabled"));
        s.check_sched_ext();
        assert_eq!(mask(pid), pinned, "applied again once it stops");
        assert_eq!(s.snapshot().managed_processes, 1);
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
