//! How long the loop's steps take: a step (one event handled, with the actions it asked
//! for and the snapshot it published) that takes over [`SLOW_STEP`] is logged as a
//! warning naming it, so that a stall explains itself in the journal:
//!
//! ```text
//!   loop step 'replan after the hold report on md-feed.service' took 1.8 s
//! ```
//!
//! The loop is the thread that pings systemd's watchdog and answers the bus: a step
//! that takes seconds delays both. A step that never ends is named too: a watch
//! thread says `loop step '…' still running after 5.0 s` (and every 5 s after), which
//! the watchdog's kill at 30 s cannot prevent being written. Naming a step costs a few
//! words per event (a hold report's unit names, a tick's due work) and two uncontended
//! locks; the text is made only for a slow one.
//!
//! Must not touch: daemon state. It is given an event's name and how long it took.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::Call;

use super::state::event::{Event, ReloadCause};

/// A loop step over this is logged as a warning naming it.
pub const SLOW_STEP: Duration = Duration::from_secs(1);
/// A step still running after this is said to be, while it runs (and again after each
/// as long): well inside half of a 30 s `WatchdogSec=`, so that a step that ends only
/// with a watchdog kill is named before it.
pub const STILL_RUNNING: Duration = Duration::from_secs(5);
/// How often the watch thread looks at the running step.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Unit names a hold report's step name lists, at most (then "and N more").
const UNITS_NAMED: usize = 3;

/// What one loop step handled, kept cheap until it must be said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepName {
    /// Starting: the machine, the stored matrix, the rules, every running process.
    Start,
    /// A bus call, by its method name.
    Call(&'static str),
    Reload(ReloadCause),
    Terminate,
    /// The once-a-second tick, with the periodic work due in it.
    Tick(Vec<&'static str>),
    Measured(u64),
    Followed(i32),
    /// The holder's report, with the units it names.
    Held(Vec<String>),
    Cmdline(i32),
    Memory(i32),
    /// A batch of this many proc connector messages.
    Proc(usize),
    Hotplug,
    Watch(bool),
    /// What the holder says the kernel kept (CPUs still isolated after a release).
    HoldNotes,
    /// A question or news from the NRI plugin.
    Nri,
}

impl StepName {
    /// The step that handles `ev`; `due` says the work a tick at that instant does
    /// (`State::due_at_tick`), asked only for a tick.
    pub fn of(ev: &Event, due: impl FnOnce(Instant) -> Vec<&'static str>) -> StepName {
        match ev {
            Event::Command(call) => StepName::Call(method(call)),
            Event::Reload(cause) => StepName::Reload(*cause),
            Event::Terminate => StepName::Terminate,
            Event::Tick(now) => StepName::Tick(due(*now)),
            Event::Measured(f) => StepName::Measured(f.id),
            Event::Followed(f) => StepName::Followed(f.pid),
            Event::Held(reports) => {
                let mut units: Vec<String> = Vec::new();
                for r in reports {
                    let unit = r.unit.clone().unwrap_or_else(|| format!("pid {}", r.pid));
                    if !units.contains(&unit) {
                        units.push(unit);
                    }
                }
                StepName::Held(units)
            }
            Event::Cmdline(read) => StepName::Cmdline(read.wanted.pid),
            Event::Memory((pid, _, _)) => StepName::Memory(*pid),
            Event::Proc(msgs) => StepName::Proc(msgs.len()),
            Event::Hotplug => StepName::Hotplug,
            Event::Watch(r) => StepName::Watch(r.is_ok()),
            Event::HoldNotes(_) => StepName::HoldNotes,
            Event::Nri(_) => StepName::Nri,
        }
    }
}

/// The bus method a call came from.
fn method(call: &Call) -> &'static str {
    match call {
        Call::Remeasure(_) => "Remeasure",
        Call::Reload(_) => "Reload",
        Call::GetMatrix(_) => "GetMatrix",
        Call::GetMatrixRows { .. } => "GetMatrixRows",
        Call::Metrics(_) => "Metrics",
        Call::ListManaged { .. } => "ListManaged",
        Call::Explain { .. } => "Explain",
        Call::Memory { .. } => "ExplainJson",
        Call::PlanWith { .. } => "Plan",
        Call::Pin { .. } => "PinProcess",
        Call::Release { .. } => "ReleaseProcess",
        Call::Owner { .. } => "the owner check of PinProcess",
        Call::Container { .. } => "ExplainJson",
    }
}

impl fmt::Display for StepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepName::Start => f.write_str("start: machine, matrix, rules, running processes"),
            StepName::Call(m) => write!(f, "bus call {m}"),
            StepName::Reload(ReloadCause::Signal) => f.write_str("reload on SIGHUP"),
            StepName::Reload(ReloadCause::Inotify) => {
                f.write_str("reload after a rule directory change")
            }
            StepName::Reload(ReloadCause::Bus) => f.write_str("reload by bus call"),
            StepName::Terminate => f.write_str("stop: masks given back"),
            StepName::Nri => f.write_str("a container question from the NRI plugin"),
            StepName::Tick(due) if due.is_empty() => f.write_str("tick"),
            StepName::Tick(due) => write!(f, "tick: {}", due.join(", ")),
            StepName::Measured(id) => write!(f, "result of measurement job {id}"),
            StepName::Followed(pid) => write!(f, "end of the memory move of pid {pid}"),
            StepName::Held(units) if units.is_empty() => {
                f.write_str("replan after the hold report (nothing held)")
            }
            StepName::Held(units) => {
                let named = units.len().min(UNITS_NAMED);
                write!(
                    f,
                    "replan after the hold report on {}",
                    units[..named].join(", ")
                )?;
                if units.len() > named {
                    write!(f, " and {} more", units.len() - named)?;
                }
                Ok(())
            }
            StepName::Cmdline(pid) => write!(f, "command line of pid {pid}"),
            StepName::Memory(pid) => write!(f, "memory read of pid {pid}"),
            StepName::Proc(1) => f.write_str("1 process event"),
            StepName::Proc(n) => write!(f, "{n} process events"),
            StepName::Hotplug => f.write_str("CPU hotplug: replan"),
            StepName::Watch(true) => f.write_str("proc connector subscribed: rescan"),
            StepName::Watch(false) => f.write_str("proc connector down"),
            StepName::HoldNotes => f.write_str("the holder's notes"),
        }
    }
}

/// The loop's step timer: times each step and warns about a slow one once it ends;
/// with a watch thread ([`Steps::watch`]), also while it still runs.
#[derive(Debug)]
pub struct Steps {
    slow: Duration,
    running: Arc<Mutex<Running>>,
}

/// The step the loop is in, as the watch thread sees it.
#[derive(Debug, Default)]
struct Running {
    /// Counts the steps begun: the watch thread tells one long step from two.
    seq: u64,
    step: Option<(StepName, Instant)>,
    /// The loop has dropped its timer: the watch thread ends.
    closed: bool,
}

impl Default for Steps {
    fn default() -> Self {
        Steps::new(SLOW_STEP)
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        lock(&self.running).closed = true;
    }
}

fn lock(m: &Mutex<Running>) -> std::sync::MutexGuard<'_, Running> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Steps {
    /// Warns about steps over `slow`, once they end.
    pub fn new(slow: Duration) -> Steps {
        Steps {
            slow,
            running: Arc::default(),
        }
    }

    /// Also warns while a step runs: a thread (`pinnerd-steps`) looks every `look` and
    /// says so of a step running for `still` and each `still` after, so that a step
    /// that never ends (until the watchdog kills the daemon) names itself too. It only
    /// looks and logs: the watchdog ping stays the loop's own.
    pub fn watch(&self, still: Duration, look: Duration) -> std::io::Result<()> {
        let running = self.running.clone();
        // The thread logs where the caller's logs go (a test's subscriber included).
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::Builder::new()
            .name("pinnerd-steps".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || watch(&running, still, look))
            })?;
        Ok(())
    }

    /// Runs `f` as the step `name`, timed (see [`Steps::finished`]).
    pub fn timed<T>(&self, name: StepName, f: impl FnOnce() -> T) -> T {
        {
            let mut r = lock(&self.running);
            r.seq += 1;
            r.step = Some((name, Instant::now()));
        }
        let out = f();
        let step = lock(&self.running).step.take();
        if let Some((name, started)) = step {
            self.finished(&name, started.elapsed());
        }
        out
    }

    /// A step `name` took `took`: over the threshold, a warning naming it. True when it
    /// warned.
    pub fn finished(&self, name: &StepName, took: Duration) -> bool {
        if took <= self.slow {
            return false;
        }
        tracing::warn!(
            step = %name,
            took_ms = took.as_millis() as u64,
            "loop step '{name}' took {:.1} s",
            took.as_secs_f64()
        );
        true
    }
}

/// The watch thread: every `look`, a step running for `still` (and each `still` after)
/// is a warning naming it.
fn watch(running: &Mutex<Running>, still: Duration, look: Duration) {
    // The step last warned about, and how many times.
    let mut warned: (u64, u32) = (0, 0);
    loop {
        std::thread::sleep(look);
        let r = lock(running);
        if r.closed {
            return;
        }
        let Some((name, started)) = &r.step else {
            continue;
        };
        let times = if warned.0 == r.seq { warned.1 } else { 0 };
        let so_far = started.elapsed();
        if so_far >= still * (times + 1) {
            tracing::warn!(
                step = %name,
                took_ms = so_far.as_millis() as u64,
                "loop step '{name}' still running after {:.1} s",
                so_far.as_secs_f64()
            );
            warned = (r.seq, times + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::HoldReport;

    fn report(pid: u32, unit: Option<&str>) -> HoldReport {
        HoldReport {
            rule: "md".into(),
            pid,
            unit: unit.map(String::from),
            cpus: crate::cpuset::set("6-7"),
            mems: None,
            confined: true,
            isolate: true,
            isolated: true,
            problem: None,
        }
    }

    /// A subscriber that keeps what is logged at warning level and above, without
    /// colours, in the buffer returned with it.
    fn capturing() -> (Arc<Mutex<Vec<u8>>>, impl tracing::Subscriber + Send + Sync) {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .without_time()
            .with_writer(move || Sink(sink.clone()))
            .finish();
        (buf, subscriber)
    }

    fn lines(buf: &Mutex<Vec<u8>>) -> Vec<String> {
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        text.lines().map(String::from).collect()
    }

    /// What `f` logged at warning level and above, one line each.
    fn warnings(f: impl FnOnce()) -> Vec<String> {
        let (buf, subscriber) = capturing();
        tracing::subscriber::with_default(subscriber, f);
        lines(&buf)
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// One slow step among quick ones: exactly one warning, naming the step and how
    /// long it took.
    #[test]
    fn a_slow_step_is_one_warning_that_names_it() {
        let steps = Steps::default();
        let held = StepName::of(
            &Event::Held(vec![
                report(41, Some("md-feed.service")),
                report(42, Some("md-feed.service")),
            ]),
            |_| Vec::new(),
        );
        let lines = warnings(|| {
            assert!(!steps.finished(&StepName::Proc(12), Duration::from_millis(30)));
            assert!(steps.finished(&held, Duration::from_millis(1800)));
            assert!(!steps.finished(&StepName::Tick(vec!["rescan"]), SLOW_STEP));
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].ends_with(
                "loop step 'replan after the hold report on md-feed.service' took 1.8 s \
                 step=replan after the hold report on md-feed.service took_ms=1800"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
    }

    /// A step really run through the timer: over a threshold of zero it warns once, with
    /// its name; under an hour it does not.
    #[test]
    fn a_timed_step_runs_once_and_is_judged_by_the_threshold() {
        let mut runs = 0;
        let lines = warnings(|| {
            let out = Steps::new(Duration::ZERO).timed(StepName::Call("ListManaged"), || {
                std::thread::sleep(Duration::from_millis(2));
                runs += 1;
                7
            });
            assert_eq!(out, 7);
            Steps::new(Duration::from_secs(3600)).timed(StepName::Hotplug, || runs += 1);
        });
        assert_eq!(runs, 2);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("loop step 'bus call ListManaged' took"),
            "{lines:?}"
        );
    }

    /// A step that does not end (here: until the watch thread has named it twice) is
    /// named while it runs, each time after as long again; it never pings anything.
    #[test]
    fn a_step_that_does_not_end_is_named_while_it_runs() {
        let (buf, subscriber) = capturing();
        let still = |buf: &Mutex<Vec<u8>>| {
            lines(buf)
                .into_iter()
                .filter(|l| l.contains("still running"))
                .collect::<Vec<_>>()
        };
        tracing::subscriber::with_default(subscriber, || {
            let steps = Steps::new(Duration::from_secs(3600));
            steps
                .watch(Duration::from_millis(50), Duration::from_millis(5))
                .unwrap();
            let name = StepName::Held(vec!["md-feed.service".into()]);
            steps.timed(name, || {
                let until = Instant::now() + Duration::from_secs(60);
                while still(&buf).len() < 2 {
                    assert!(Instant::now() < until, "never named while it ran");
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        });
        let said = still(&buf);
        assert!(said.len() >= 2, "{said:?}");
        for l in &said {
            assert!(
                l.contains(
                    "loop step 'replan after the hold report on md-feed.service' still running after"
                ),
                "{l}"
            );
        }
        let after = |l: &str| -> f64 {
            let s = l.split("still running after ").nth(1).unwrap();
            s.split(' ').next().unwrap().parse().unwrap()
        };
        assert!(
            after(&said[1]) >= 0.1,
            "the second after twice the time: {said:?}"
        );
        assert!(
            lines(&buf).iter().all(|l| !l.contains("' took ")),
            "under an hour"
        );
    }

    #[test]
    fn steps_are_named_for_what_they_handle() {
        let held = |reports| StepName::of(&Event::Held(reports), |_| Vec::new()).to_string();
        assert_eq!(
            held(vec![
                report(1, Some("a.service")),
                report(2, None),
                report(3, Some("b.scope")),
                report(4, Some("c.service")),
                report(5, Some("a.service")),
            ]),
            "replan after the hold report on a.service, pid 2, b.scope and 1 more"
        );
        let tick = StepName::of(&Event::Tick(Instant::now()), |_| {
            vec!["rescan", "fingerprint check"]
        });
        assert_eq!(tick.to_string(), "tick: rescan, fingerprint check");
        assert_eq!(
            StepName::of(&Event::Proc(vec![]), |_| unreachable!()).to_string(),
            "0 process events"
        );
        assert_eq!(
            StepName::of(&Event::Reload(ReloadCause::Inotify), |_| unreachable!()).to_string(),
            "reload after a rule directory change"
        );
    }
}
