use super::*;
use crate::api::{
    Call, CommandError, Explained, MatrixReply, PinRequest, PlaceSpec, Reloaded, ReplyTo,
};
use crate::cpuset::CpuSet;
use crate::daemon::worker::JobError;
use crate::daemon::worker::{Finished, Job, JobKind, Product};
use crate::measure;
use crate::measure::Probe;
use crate::placement::{Policy, SmtPolicy};
use crate::plan::tests::count_request;
use crate::rules::{CpuTarget, LoadPolicy, PlacementRequest};
use crate::settings::SettingsError;

mod around;
mod containers;
mod held;
mod knobs;
mod machine;
mod measuring;
mod processes;

/// A state on this machine's /sys, its manager acting through fakes: no real process is
/// seen or pinned. [`state_on_system`] for the tests that pin real processes.
fn state(timing: Timing) -> (State, tempfile::TempDir) {
    let (s, d, _ops, _procs) = state_with_fakes(timing);
    (s, d)
}

/// [`state`], its manager acting on this machine's real processes.
fn state_on_system(timing: Timing) -> (State, tempfile::TempDir) {
    let (cfg, dir) = config();
    let ops = managed::Ops::system(&cfg.sysroot);
    (
        unchecked(State::with_ops(
            cfg,
            Settings::default(),
            timing,
            Instant::now(),
            ops,
        )),
        dir,
    )
}

/// [`state`], its manager acting through fakes handed in: no real process is pinned.
fn state_with_fakes(
    timing: Timing,
) -> (
    State,
    tempfile::TempDir,
    std::sync::Arc<crate::affinity::FakeOps>,
    std::sync::Arc<crate::watch::scan::FakeProcs>,
) {
    let (cfg, dir) = config();
    let ops = std::sync::Arc::new(crate::affinity::FakeOps::new());
    let procs = std::sync::Arc::new(crate::watch::scan::FakeProcs::new());
    let fakes = managed::Ops {
        affinity: ops.clone(),
        procs: procs.clone(),
    };
    let s = State::with_ops(cfg, Settings::default(), timing, Instant::now(), fakes);
    (unchecked(s), dir, ops, procs)
}

/// Directories of a daemon in a new temporary directory, on this machine's /sys.
fn config() -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        settings: dir.path().join("absent.toml"),
        rule_dirs: Some(vec![dir.path().join("rules")]),
        state_dir: dir.path().join("state"),
        runtime_dir: dir.path().join("runtime"),
        sysroot: SysRoot::default(),
        observe_only: false,
    };
    for d in [
        dir.path().join("rules"),
        cfg.state_dir.clone(),
        cfg.runtime_dir.clone(),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    (cfg, dir)
}

/// `s` loading rule files whoever owns them (the test's temporary directory).
fn unchecked(mut s: State) -> State {
    s.loaded.policy = LoadPolicy::unchecked();
    s
}

/// Makes one call of `s` as a bus caller would (a memory read made on this thread) and
/// takes its answer.
fn ask<T>(s: &mut State, call: impl FnOnce(ReplyTo<T>) -> Call) -> Result<T, CommandError> {
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    s.call_here(call(reply));
    answer.try_recv().expect("answered at once")
}

/// `PlanWith` of `place`.
fn plan_with(s: &mut State, place: PlaceSpec) -> Result<CpuSet, CommandError> {
    ask(s, |reply| Call::PlanWith { place, reply })
}

/// `PinProcessWith` of `pid` to `place`, for its owner `for_owner` if given.
fn pin(
    s: &mut State,
    pid: u32,
    place: PlaceSpec,
    follow: Option<bool>,
    for_owner: Option<u32>,
) -> Result<CpuSet, CommandError> {
    let pin = PinRequest {
        sched: None,
        pid,
        place,
        follow,
        for_owner,
    };
    ask(s, |reply| Call::Pin { pin, reply })
}

/// A `sleep 30` started as `program`, killed and reaped when dropped, so that a test
/// that fails leaves no process behind.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn spawn(program: impl AsRef<std::ffi::OsStr>) -> Sleeper {
        Sleeper(
            std::process::Command::new(program)
                .arg("30")
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn jobs(actions: &[Action]) -> Vec<Job> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Measure(j) => Some((**j).clone()),
            _ => None,
        })
        .collect()
}

fn finished(actions: &[Action]) -> Vec<(u64, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(Signal::MeasurementFinished { job, ok, .. }) => Some((*job, *ok)),
            _ => None,
        })
        .collect()
}

/// A matrix over the CPUs the job asked for, every pair 40 ns.
fn matrix_for(job: &Job) -> LatencyMatrix {
    let mut m = LatencyMatrix::from_fn(job.cfg.cpus.iter().collect(), |_, _| 40.0);
    m.measured_at_us = Some(1_700_000_000_000_000);
    m.fingerprint = job.cfg.fingerprint.clone();
    m
}

fn ok_matrix(job: &Job) -> Event {
    Event::Measured(Box::new(Finished {
        id: job.id,
        result: Ok(Product::Matrix(Box::new(matrix_for(job)))),
    }))
}

fn probes(job: &Job, ns: f64) -> Event {
    let JobKind::Drift { pairs, .. } = &job.kind else {
        panic!("not a probe: {job:?}")
    };
    Event::Measured(Box::new(Finished {
        id: job.id,
        result: Ok(Product::Probes(
            pairs
                .iter()
                .map(|&(a, b)| Probe {
                    a,
                    b,
                    estimate_ns: Some(ns),
                    samples: 10,
                    discarded: 0,
                })
                .collect(),
        )),
    }))
}

/// Writes rule `j`: processes named `comm` on every online CPU of this machine.
fn rule_on_every_online_cpu(dir: &std::path::Path, comm: &str) {
    let online: CpuSet = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    write_rule(
        dir,
        "j",
        &format!(
            "[[rule]]\nname = \"j\"\n[rule.match]\ncomm = \"{comm}\"\n[rule.place]\ncpus = \"{online}\"\n"
        ),
    );
}

/// Writes `text` as the rule file `name`.toml in the state's rule directory.
fn write_rule(dir: &std::path::Path, name: &str, text: &str) {
    std::fs::write(dir.join("rules").join(format!("{name}.toml")), text).unwrap();
}

#[test]
fn the_journal_lags_process_events_by_at_most_the_delay() {
    let (mut s, d) = state_on_system(Timing::default());
    rule_on_every_online_cpu(d.path(), "pd-journal");
    s.start().unwrap();
    let journal = d
        .path()
        .join("runtime")
        .join(crate::affinity::restore::JOURNAL_FILE);
    assert!(!journal.exists());
    let link = d.path().join("pd-journal");
    std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
    let child = Sleeper::spawn(&link);
    let pid = child.pid() as i32;
    let t0 = Instant::now();
    s.handle(Event::Proc(vec![crate::watch::ProcMsg::Exec { pid }]));
    let due = s.deadline().expect("a deferred journal write");
    assert!(due > t0 && due <= Instant::now() + JOURNAL_DELAY, "{due:?}");
    assert!(!journal.exists(), "written at once");
    s.handle(Event::Tick(due - Duration::from_millis(1)));
    assert!(!journal.exists(), "written before it was due");
    s.handle(Event::Tick(due));
    let text = std::fs::read_to_string(&journal).expect("written when due");
    assert!(text.contains(&format!("\"pid\": {pid}")), "{text}");
    assert_eq!(s.deadline(), None);
}

#[test]
fn a_failed_journal_write_is_tried_again_until_it_succeeds() {
    let (mut s, d) = state_on_system(Timing::default());
    rule_on_every_online_cpu(d.path(), "pd-jretry");
    s.start().unwrap();
    let runtime = d.path().join("runtime");
    let journal = runtime.join(crate::affinity::restore::JOURNAL_FILE);
    // A directory where the temp file goes makes every write fail.
    let blocker = runtime.join("restore.json.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let link = d.path().join("pd-jretry");
    std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
    let child = Sleeper::spawn(&link);
    let pid = child.pid() as i32;
    s.handle(Event::Proc(vec![crate::watch::ProcMsg::Exec { pid }]));
    let due = s.deadline().expect("a deferred journal write");
    s.handle(Event::Tick(due));
    assert!(!journal.exists());
    let retry = s.deadline().expect("a failed write is tried again");
    std::fs::remove_dir(&blocker).unwrap();
    s.handle(Event::Tick(retry));
    let text = std::fs::read_to_string(&journal).expect("written on the retry");
    assert!(text.contains(&format!("\"pid\": {pid}")), "{text}");
    assert_eq!(s.deadline(), None);
}

/// Starts `s` without a stored matrix: its one job, a full measurement.
fn first_job(s: &mut State) -> Job {
    s.start().unwrap();
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1, "no stored matrix: one full measurement");
    assert!(matches!(j[0].kind, JobKind::Full));
    j[0].clone()
}

fn started(timing: Timing) -> (State, tempfile::TempDir, Job) {
    let (mut s, d) = state(timing);
    let job = first_job(&mut s);
    (s, d, job)
}

/// [`started`], its manager acting on this machine's real processes.
fn started_on_system(timing: Timing) -> (State, tempfile::TempDir, Job) {
    let (mut s, d) = state_on_system(timing);
    let job = first_job(&mut s);
    (s, d, job)
}

/// Starts `s` without a stored matrix and ends its first full measurement well: the job.
fn measured_first(s: &mut State) -> Job {
    let job = first_job(s);
    s.handle(ok_matrix(&job));
    s.take_actions();
    job
}

#[test]
fn metrics_answer_and_the_textfile_is_written_each_period() {
    let (mut s, d, job) = started(Timing::default());
    let text = ask(&mut s, Call::Metrics).unwrap();
    assert!(
        text.contains("pinnerd_state{state=\"measuring\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("pinnerd_matrix_trusted 0\n"), "{text}");
    assert!(!text.contains("pinnerd_matrix_age_seconds"), "{text}");
    s.handle(ok_matrix(&job));
    let dir = d.path().join("textfile");
    std::fs::create_dir(&dir).unwrap();
    s.loaded.settings.metrics.textfile_dir = dir.clone();
    s.loaded.settings.metrics.textfile_period =
        crate::settings::HumanDuration(Duration::from_secs(15));
    let t0 = Instant::now();
    s.handle(Event::Tick(t0));
    let file = dir.join("pinnerd.prom");
    let first = std::fs::read_to_string(&file).unwrap();
    assert!(
        first.contains("pinnerd_state{state=\"ready\"} 1\n"),
        "{first}"
    );
    assert!(first.contains("pinnerd_matrix_age_seconds "), "{first}");
    assert!(first.contains("pinnerd_rescans_total "), "{first}");
    std::fs::remove_file(&file).unwrap();
    s.handle(Event::Tick(t0 + Duration::from_secs(14)));
    assert!(!file.exists(), "written before its period");
    s.handle(Event::Tick(t0 + Duration::from_secs(15)));
    assert!(file.exists());
}

#[test]
fn watchdog_pings_come_from_ticks() {
    let t0 = Instant::now();
    let timing = Timing {
        watchdog_every: Some(Duration::from_secs(5)),
        ..Timing::default()
    };
    let (mut s, _d, _job) = started(timing);
    s.handle(Event::Tick(t0 + Duration::from_secs(1)));
    assert!(!s.take_actions().contains(&Action::Watchdog));
    s.handle(Event::Tick(t0 + Duration::from_secs(6)));
    assert!(s.take_actions().contains(&Action::Watchdog));
}

#[test]
fn reload_keeps_good_rules_of_a_file_gone_bad_and_reports_it() {
    let (mut s, d, _job) = started(Timing::default());
    let rules = d.path().join("rules");
    std::fs::write(
        rules.join("a.toml"),
        "[[rule]]\nname = \"a\"\n[rule.match]\ncomm = \"x\"\n[rule.place]\ncpus = \"0\"\n",
    )
    .unwrap();
    assert_eq!(
        ask(&mut s, Call::Reload).unwrap(),
        Reloaded {
            rules: 1,
            errors: vec![]
        }
    );
    std::fs::write(rules.join("a.toml"), "[[rule]]\nname = \"a\"\nbogus = 1\n").unwrap();
    let Ok(Reloaded { rules: n, errors }) = ask(&mut s, Call::Reload) else {
        panic!()
    };
    assert_eq!(n, 1, "previous rules kept");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("a.toml:3:1"), "{errors:?}");
    assert_eq!(s.snapshot().rule_errors, errors);
    let a = s.take_actions();
    assert!(a
        .iter()
        .any(|a| matches!(a, Action::Emit(Signal::RulesReloaded { rules: 1, .. }))));
}

#[test]
fn a_state_directory_that_cannot_hold_the_store_is_a_typed_error_naming_its_path() {
    let (mut s, d) = state(Timing::default());
    let state_dir = d.path().join("state");
    std::fs::remove_dir(&state_dir).unwrap();
    std::fs::write(&state_dir, "a file, not a directory").unwrap();
    match s.start() {
        Err(crate::matrix::store::StoreError::Dir { path, .. }) => {
            assert_eq!(path, state_dir.join("history"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_settings_file_on_reload_keeps_the_old_settings() {
    let (mut s, d, _job) = started(Timing::default());
    let path = d.path().join("absent.toml");
    std::fs::write(&path, "[measure]\nbudget = \"fast\"\n").unwrap();
    s.handle(Event::Reload(ReloadCause::Signal));
    let errs = s.snapshot().rule_errors;
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].contains("absent.toml:2:10: invalid duration"),
        "{errs:?}"
    );
    // Kept typed, with its file, line and column.
    match &s.loaded.settings_error {
        Some(SettingsError::Invalid { path: p, at, .. }) => {
            assert_eq!(p, &path);
            assert_eq!((at.line, at.col), (2, 10));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.loaded.settings, Settings::default());
    let a = s.take_actions();
    assert_eq!(a.first(), Some(&Action::Reloading));
    assert_eq!(a.last(), Some(&Action::Ready));
}

#[test]
fn plan_uses_sysfs_until_a_matrix_exists_and_checks_its_arguments() {
    let (mut s, _d, job) = started(Timing::default());
    let usable = s.machine.usable();
    let n = usable.len() as u32;
    let plan = |s: &mut State, count, policy| {
        plan_with(
            s,
            crate::api::PlaceSpec::count(count, policy, SmtPolicy::Allow),
        )
    };
    // No matrix yet: the topology alone places.
    assert_eq!(plan(&mut s, n, Policy::Compact).unwrap(), usable.clone());
    s.handle(ok_matrix(&job));
    assert_eq!(plan(&mut s, n, Policy::Spread).unwrap(), usable.clone());
    let Ok(one) = plan(&mut s, 1, Policy::Compact) else {
        panic!()
    };
    assert_eq!(one.len(), 1);
    assert!(one.is_subset(&usable));
    // Unknown words never reach the loop: `dbus` refuses them.
    for (count, want) in [
        (0, "count 0: must be between 1"),
        (n + 1, "must be between 1 and the"),
    ] {
        match plan(&mut s, count, Policy::Compact) {
            Err(CommandError::InvalidArgs(m)) => assert!(m.contains(want), "{m}"),
            other => panic!("{count}: {other:?}"),
        }
    }
}

#[test]
fn without_proc_events_the_daemon_is_degraded_and_rescans() {
    let (mut s, _d, job) = started(Timing::default());
    s.handle(ok_matrix(&job));
    assert_eq!(s.snapshot().state, Phase::Ready);
    assert_eq!(s.snapshot().state_reason, "");
    s.handle(Event::Watch(Err("not in the initial namespace".into())));
    assert_eq!(s.snapshot().state, Phase::Degraded);
    assert!(
        s.snapshot().state_reason.starts_with(
            "no process events (not in the initial namespace): new processes are found only by rescans"
        ),
        "{}",
        s.snapshot().state_reason
    );
    assert!(
        s.timers.next_rescan.is_some(),
        "rescans cannot be off without events"
    );
    s.handle(Event::Watch(Ok(())));
    assert_eq!(s.snapshot().state, Phase::Ready);
}

fn fixture(name: &str) -> SysRoot {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name);
    SysRoot {
        sys: dir.join("sys"),
        proc: dir.join("proc"),
    }
}

/// A writable copy of a fixture tree, so a test can take CPUs offline in it.
fn fixture_copy(name: &str, into: &std::path::Path) -> SysRoot {
    let from = fixture(name);
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.sys.parent().unwrap())
        .arg(into.join("machine"))
        .status()
        .unwrap();
    assert!(st.success());
    SysRoot {
        sys: into.join("machine/sys"),
        proc: into.join("machine/proc"),
    }
}

/// A state on a writable copy of the Xeon E5620 tree (16 CPUs, two sockets).
fn on_e5620_copy(timing: Timing) -> (State, tempfile::TempDir) {
    let (mut s, d) = state(timing);
    s.cfg.sysroot = fixture_copy("xeon-e5620", d.path());
    (s, d)
}

fn set_online(root: &SysRoot, list: &str) {
    std::fs::write(root.sys.join("devices/system/cpu/online"), list).unwrap();
}

fn set_asides(s: &State) -> Vec<String> {
    std::fs::read_dir(&s.cfg.state_dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("foreign") || n.contains("corrupt"))
        .collect()
}

#[test]
fn terminate_exits() {
    let (mut s, _d, _job) = started(Timing::default());
    s.handle(Event::Terminate);
    assert_eq!(s.take_actions().last(), Some(&Action::Exit));
}

fn summaries(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(Signal::MeasurementFinished { summary, .. }) => Some(summary.clone()),
            _ => None,
        })
        .collect()
}

fn no_interval() -> Timing {
    Timing {
        remeasure_min_interval: Duration::ZERO,
        ..Timing::default()
    }
}

fn remeasure_job(s: &mut State) -> Job {
    let Ok(id) = ask(s, Call::Remeasure) else {
        panic!("no job")
    };
    let j = jobs(&s.take_actions());
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(j[0].id, id);
    j[0].clone()
}

/// The status line counts in words: one rule is "1 rule", none managed "0 processes".
#[test]
fn the_status_line_says_one_of_a_thing_in_the_singular() {
    let (mut s, d) = state(Timing::default());
    write_rule(
        d.path(),
        "one",
        "[[rule]]\nname = \"one\"\n[rule.match]\ncomm = \"pd-status-none\"\n[rule.place]\ncount = 1\n",
    );
    measured_first(&mut s);
    ask(&mut s, Call::Reload).unwrap();
    let status: Vec<String> = s
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Status(t) => Some(t),
            _ => None,
        })
        .collect();
    let last = status.last().expect("a status line after the reload");
    assert!(
        last.contains(": 1 rule, 0 errors, 0 processes managed, "),
        "{status:?}"
    );
}

/// `remeasure --wait` prints the job's summary: a warning is said in words there, not
/// counted.
#[test]
fn a_measurement_summary_says_its_warnings_in_words() {
    let (mut s, _d, job) = started(Timing::default());
    let mut m = matrix_for(&job);
    m.warnings = vec!["CPU 1 was busy during 3 of 40 batches".into()];
    s.handle(Event::Measured(Box::new(Finished {
        id: job.id,
        result: Ok(Product::Matrix(Box::new(m))),
    })));
    let got = summaries(&s.take_actions());
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].ends_with("; warning: CPU 1 was busy during 3 of 40 batches"),
        "{got:?}"
    );
    assert!(!got[0].contains("1 warnings"), "{got:?}");
}
