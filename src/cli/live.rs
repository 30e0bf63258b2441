//! `pinnerd plan --live`: what the rules would do to the running system, changing
//! nothing, printed. The settings and rules are loaded here, the dry run itself is
//! `crate::dry_run` (the daemon's own manager and plan over a full /proc rescan, with
//! affinity calls that only record), and the running containers are read here
//! (`live_containers`, the daemon asked on the bus).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::exit::ConfigInvalid;
use crate::dry_run;
use crate::memory::{MemoryView, ReadError};
use crate::plan::{Plan, PlanState};
use crate::rules::{load_dirs, LoadPolicy, LoadReport};
use crate::settings::Settings;

/// What `plan --live` is given.
#[derive(Debug, Clone)]
pub struct LiveArgs {
    /// Rule directories; empty = the settings' `rule-dirs`.
    pub rules: Vec<PathBuf>,
    /// The daemon's settings file.
    pub config: PathBuf,
    /// Root of the sysfs tree, or a captured machine directory holding `sys/` and
    /// `proc/` (as `plan --sysfs` takes it); processes are always this machine's.
    pub sysfs: PathBuf,
    /// A latency matrix measured on this machine's CPUs.
    pub matrix: Option<PathBuf>,
    /// Where the daemon stores this machine's matrix (`None`: the daemon's own state
    /// directory): without `--matrix`, the plan is made on it, as the daemon's is.
    pub state_dir: Option<PathBuf>,
    pub json: bool,
    /// The daemon's bus, for its record of containers.
    pub bus: crate::dbus::BusTarget,
    /// Where containerd's task files and the kubelet's state are read (`/`).
    pub container_files: PathBuf,
}

pub fn run(args: &LiveArgs) -> anyhow::Result<ExitCode> {
    let policy = LoadPolicy::for_current_process();
    let settings = Settings::load_or_default(&args.config, &policy)
        .map_err(|e| ConfigInvalid(e.to_string()))?;
    let dirs = if args.rules.is_empty() {
        settings.rule_dirs.clone()
    } else {
        args.rules.clone()
    };
    for d in &dirs {
        if !d.is_dir() {
            return Err(ConfigInvalid(format!(
                "{}: no such rule directory (give --rules DIR)",
                d.display()
            ))
            .into());
        }
    }
    let report = load_dirs(&dirs, &policy);
    let asked = dry_run::Asked {
        sysfs: &args.sysfs,
        matrix: args.matrix.as_deref(),
        state_dir: args.state_dir.as_deref(),
        runtime_dir: Path::new(super::daemon::DEFAULT_RUNTIME),
    };
    let run = dry_run::run(&report.rules, &settings, &asked, &mut |w| {
        eprintln!("pinnerd: {w}")
    })?;
    let containers = super::live_containers::running(
        &run.root,
        &args.container_files,
        run.mgr.plan(),
        Some(&run.topology),
        || daemon_containers(&args.bus),
    );
    let found = DryRun {
        run,
        report: &report,
        containers,
    };
    let out = if args.json {
        found.json()?
    } else {
        found.human()
    };
    super::output::write_stdout(format_args!("{out}"))?;
    if !report.errors.is_empty() {
        for e in &report.errors {
            eprintln!("{e}");
        }
        return Err(ConfigInvalid(format!(
            "{} problem(s) in the rule files; the dry run used the rules that loaded",
            report.errors.len()
        ))
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// `plan --live --json`: where placement came from, the rule errors, the plan's units,
/// each matching process and what it would get, the protected processes.
#[derive(serde::Serialize)]
struct LiveJson<'a> {
    placement_from: &'a str,
    /// The line saying latency placement is off (an unstable matrix), or null.
    latency_off: Option<&'static str>,
    rule_errors: Vec<String>,
    plans: &'a [crate::plan::UnitPlan],
    processes: Vec<LiveProcessJson<'a>>,
    protected: Vec<ProtectedJson<'a>>,
    /// The running containers (left out when there are none): the cpuset each has,
    /// what it would get, who set it.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    containers: &'a [super::live_containers::RunningContainer],
    /// Always `true`: a dry run.
    changed_nothing: bool,
}

/// A process in `plan --live --json`.
#[derive(serde::Serialize)]
struct LiveProcessJson<'a> {
    pid: u32,
    comm: &'a str,
    rule: &'a str,
    /// The CPUs it would get, and those it has now.
    would_get: &'a str,
    now: String,
    state: &'a str,
    /// Its cgroup cpuset, as the daemon would confine the choice.
    cpuset: Option<String>,
    /// Bytes of its memory per NUMA node, as `plan --pid` gives them; `{}` on one
    /// node, `null` when it could not be read.
    memory_nodes: Option<crate::memory::NodeBytes>,
}

/// A process a rule matches but pinnerd never pins, and why.
#[derive(serde::Serialize)]
struct ProtectedJson<'a> {
    pid: i32,
    comm: &'a str,
    rule: &'a str,
    why: &'a str,
}

/// What the dry run found, to print.
struct DryRun<'a> {
    /// The dry run itself.
    run: dry_run::DryRun,
    report: &'a LoadReport,
    /// The running containers of the kubelet's tree.
    containers: Vec<super::live_containers::RunningContainer>,
}

impl DryRun<'_> {
    /// `--json`: the plan units, the processes and what they would get.
    fn json(&self) -> anyhow::Result<String> {
        let processes = self
            .run
            .rows
            .iter()
            .zip(&self.run.memory)
            .map(|(r, mem)| LiveProcessJson {
                pid: r.pid,
                comm: &r.comm,
                rule: &r.rule,
                would_get: &r.cpus,
                now: self
                    .run
                    .ops
                    .real_mask(r.pid as i32)
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                state: &r.state,
                cpuset: self.run.mgr.cpuset_of(r.pid as i32),
                memory_nodes: match mem {
                    Ok(MemoryView::Nodes { nodes, .. }) => Some(nodes.clone()),
                    Ok(MemoryView::OneNode) => Some(Default::default()),
                    Err(_) => None,
                },
            })
            .collect();
        let protected = self.run.mgr.protected();
        let j = LiveJson {
            placement_from: &self.run.source,
            latency_off: self.run.latency_off,
            rule_errors: self.report.error_strings(),
            plans: self.run.mgr.plan().units(),
            processes,
            protected: protected
                .iter()
                .map(|p| ProtectedJson {
                    pid: p.pid,
                    comm: &p.comm,
                    rule: &p.rule,
                    why: p.why.describe(),
                })
                .collect(),
            containers: &self.containers,
            changed_nothing: true,
        };
        // Through a `Value`: the keys in alphabetical order, as they have always been.
        Ok(serde_json::to_string_pretty(&serde_json::to_value(&j)?)? + "\n")
    }

    /// Each rule's plan units, with what the daemon would hold for them.
    fn write_rules(&self, out: &mut String, cannot: Option<&str>) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "\nrules ({}):", self.report.rules.len());
        for p in self.run.mgr.plan().units() {
            let unit = match p.thread_entry {
                None => String::new(),
                Some(i) => format!(" threads[{i}]"),
            };
            let online = &self.run.mgr.plan().cpus().online;
            let state = match &p.state {
                PlanState::Placed { cpus } => match p.state.offline_note(online) {
                    Some(note) => format!("cpus {cpus}: {note}"),
                    None => format!("cpus {cpus}"),
                },
                PlanState::Slots { slots, held_slots } => format!(
                    "per thread, slot 0 first: {}",
                    crate::plan::slots_in_words(slots, *held_slots)
                ),
                PlanState::Lost { to, cpus } => format!("CONFLICT: lost CPUs {cpus} to {to}"),
                PlanState::Unplaceable { reason } => format!("NOT PLACED: {reason}"),
            };
            let excl = if p.exclusive { " exclusive" } else { "" };
            let within = match &p.cpuset {
                Some(c) => format!(" in cpuset {c}"),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "  {}{unit}{within} (priority {}{excl}): {state}",
                p.rule, p.priority
            );
            if let Some(why) = &p.memory {
                let _ = writeln!(out, "    {why}");
            }
            if let Some(line) = hold_rule_line(&self.report.rules, p, cannot) {
                let _ = writeln!(out, "    {line}");
            }
            if let Some(line) = container_rule_line(&self.report.rules, p) {
                let _ = writeln!(out, "    {line}");
            }
            if let Some(line) = sched_rule_line(&self.report.rules, p) {
                let _ = writeln!(out, "    {line}");
            }
            if let Some(line) = p
                .thread_entry
                .and_then(|i| p.slots_line(self.run.mgr.entry_threads(&p.rule, i)))
            {
                let _ = writeln!(out, "    {line}");
            }
        }
        if let Some(line) = no_cpu_to_measure(self.run.mgr.plan()) {
            let _ = writeln!(out, "\n{line}");
        }
        self.write_knobs(out);
    }

    /// What the daemon would set while the rules with a matching process hold their
    /// CPUs (`knobs`): each resume-latency limit and workqueue mask, now and then, and
    /// the kernel threads that would leave those CPUs.
    fn write_knobs(&self, out: &mut String) {
        use crate::knobs::{idle, kthreads, Io, Knob, Knobs};
        use std::fmt::Write as _;
        let holding: std::collections::BTreeSet<&str> =
            self.run.rows.iter().map(|r| r.rule.as_str()).collect();
        let (mut limits, mut away) = (Vec::new(), crate::cpuset::CpuSet::new());
        for p in self.run.mgr.plan().units() {
            let Some(rule) = self.report.rules.get(&p.rule) else {
                continue;
            };
            if !p.exclusive || !holding.contains(p.rule.as_str()) {
                continue;
            }
            let held = p.state.held();
            if let Some(us) = rule.idle_limit_us {
                limits.push((us, held.clone()));
            }
            if rule.owned() {
                away = away.union(&held);
            }
        }
        if limits.is_empty() && away.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nwhile held (set when the rules hold their CPUs, given back after):"
        );
        let (wants, missing) = idle::wanted(&self.run.root, &limits);
        let k = kthreads::wanted(
            &self.run.root,
            self.run.ops.as_ref(),
            &away,
            &Knobs::default(),
            false,
        );
        let io = Io {
            root: &self.run.root,
            ops: self.run.ops.as_ref(),
        };
        let mut threads = Vec::new();
        for w in wants.iter().chain(k.wants.iter()) {
            if let Knob::Kthread { comm, .. } = &w.knob {
                threads.push(comm.as_str());
                continue;
            }
            let now = io
                .read(&w.knob)
                .unwrap_or_else(|e| format!("unreadable ({e})"));
            let _ = writeln!(out, "  {}: {now} -> {}", w.knob, w.value);
        }
        if !threads.is_empty() {
            let _ = writeln!(
                out,
                "  {} would leave CPUs {away}: {}",
                crate::words::count(threads.len(), "unbound kernel thread"),
                threads.join(", ")
            );
        }
        if !missing.is_empty() {
            let _ = writeln!(
                out,
                "  CPUs {missing}: no resume-latency limit file; idle-limit-us cannot be set there"
            );
        }
        for n in &k.notes {
            let _ = writeln!(out, "  {n}");
        }
    }

    /// The plan per rule, then the matching processes, for a human.
    fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let cannot = crate::hold::cannot_isolate_here(&self.run.root);
        let node_of = |cpu: u32| self.run.topology.node_of(cpu);
        let protected = self.run.mgr.protected();
        let _ = writeln!(
            out,
            "dry run: nothing was changed; placement from {}",
            self.run.source
        );
        if let Some(line) = &self.run.sched_ext {
            let _ = writeln!(out, "{line}");
        }
        if self.run.node_ids.len() <= 1 {
            let _ = writeln!(out, "memory: one node (all of it is local; not weighed)");
        }
        self.write_rules(&mut out, cannot.as_deref());
        let _ = writeln!(out, "\nmatching processes ({}):", self.run.rows.len());
        if !self.run.rows.is_empty() {
            let _ = writeln!(
                out,
                "  {:>8}  {:<16} {:<20} {:<12} {:<12} STATE",
                "PID", "COMM", "RULE", "WOULD GET", "NOW"
            );
        }
        for (r, mem) in self.run.rows.iter().zip(&self.run.memory) {
            let now = self
                .run
                .ops
                .real_mask(r.pid as i32)
                .map(|m| m.to_string())
                .unwrap_or_else(|_| "gone".into());
            let _ = writeln!(
                out,
                "  {:>8}  {:<16} {:<20} {:<12} {:<12} {}",
                r.pid, r.comm, r.rule, r.cpus, now, r.state
            );
            if self.run.mgr.cpuset_key_of(r.pid as i32).is_some() {
                if let Some(c) = self.run.mgr.cpuset_of(r.pid as i32) {
                    let _ = writeln!(out, "  {:>8}  in cpuset {c}", "");
                }
            }
            if let Some(w) = self.run.mgr.hold_want(r, &node_of) {
                let unit = crate::cgroup::proc_cgroups(&self.run.root, r.pid as i32)
                    .ok()
                    .flatten()
                    .and_then(|c| c.v2)
                    .and_then(|p| crate::hold::unit_of_cgroup(&p))
                    .ok_or_else(|| format!("pid {} is in no systemd unit", r.pid));
                // What the daemon finds where it runs: a slice its unit may not write.
                let why = match (&cannot, &unit) {
                    (None, Ok(u)) if w.isolate => {
                        crate::hold::cannot_write_partition(&self.run.root, &u.cgroup)
                    }
                    _ => cannot.clone(),
                };
                let _ = writeln!(
                    out,
                    "  {:>8}  {}",
                    "",
                    crate::hold::dry_line(&w, unit, why.as_deref(), &crate::hold::owner_of)
                );
            }
            match mem {
                Ok(MemoryView::OneNode) | Err(ReadError::Gone { .. }) => {}
                Ok(v) => {
                    let _ = writeln!(out, "  {:>8}  {v}", "");
                }
                Err(e) => {
                    let _ = writeln!(out, "  {:>8}  memory: cannot be read: {e}", "");
                }
            }
        }
        if !protected.is_empty() {
            let _ = writeln!(out, "\nmatched but not managed ({}):", protected.len());
            for p in &protected {
                let _ = writeln!(
                    out,
                    "  {:>8}  {:<16} {:<20} {}",
                    p.pid,
                    p.comm,
                    p.rule,
                    p.why.describe()
                );
            }
        }
        if !self.containers.is_empty() {
            let _ = writeln!(out, "\nrunning containers ({}):", self.containers.len());
            for c in &self.containers {
                let _ = writeln!(out, "  {}", c.line());
            }
        }
        out
    }
}

/// The daemon's record of the containers it placed (its `Containers` property), or why
/// it was not read.
fn daemon_containers(bus: &crate::dbus::BusTarget) -> super::live_containers::DaemonSays {
    let asked = super::client::block_on(async {
        let ask = async {
            let p = super::client::proxy(bus).await?;
            Ok::<_, anyhow::Error>(p.containers().await?)
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), ask)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within 5 s"))?
    });
    asked.map_err(|e: anyhow::Error| format!("the daemon did not answer on the bus: {e:#}"))
}

/// What the daemon would hold for a rule's unit plan, in one line: `isolate` and
/// `unit-cpuset` (see `hold`); `None` for rules with neither.
/// The scheduling class a unit's threads would get (`sched-policy`, `sched-priority`,
/// `nice`).
fn sched_rule_line(rules: &crate::rules::RuleSet, p: &crate::plan::UnitPlan) -> Option<String> {
    let placement = match p.thread_entry {
        None => crate::rules::ThreadPlacement::Process,
        Some(i) => crate::rules::ThreadPlacement::Thread(i),
    };
    let sched = rules.get(&p.rule)?.sched_for(placement)?;
    Some(format!(
        "scheduling: {} for each thread it places, set when placed and given back when let go",
        sched.words()
    ))
}

fn hold_rule_line(
    rules: &crate::rules::RuleSet,
    p: &crate::plan::UnitPlan,
    cannot: Option<&str>,
) -> Option<String> {
    let rule = rules.get(&p.rule)?;
    let isolate = match p.thread_entry {
        None => rule.isolate,
        Some(i) => rule.threads.get(i).is_some_and(|t| t.isolate),
    };
    match (isolate, cannot) {
        (true, None) => Some(
            "isolate: its CPUs become an isolated cpuset partition of the unit while held".into(),
        ),
        (true, Some(why)) => Some(format!(
            "isolate: cannot isolate here: {why}; the rule stays merely exclusive"
        )),
        (false, _) if rule.unit_cpuset && p.thread_entry.is_none() => {
            Some("unit-cpuset: the unit of each process is confined to these CPUs".into())
        }
        _ => None,
    }
}

/// A container rule's line: its CPUs go to the containers it names at creation.
fn container_rule_line(rules: &crate::rules::RuleSet, p: &crate::plan::UnitPlan) -> Option<String> {
    let rule = rules.get(&p.rule)?;
    if p.thread_entry.is_some() || rule.matcher.container.is_none() {
        return None;
    }
    Some(if rule.matcher.container_only() {
        "container rule: the containers it names get these CPUs as their cpuset at creation (NRI)"
            .into()
    } else {
        "container rule: places the processes of the containers it names once they run".into()
    })
}

/// A warning when the exclusive units leave no CPU a measurement may spin on.
pub fn no_cpu_to_measure(plan: &Plan) -> Option<String> {
    let cpus = plan.cpus();
    let exclusive = plan.exclusive_cpus();
    let left = cpus.online.difference(&exclusive);
    (left.len() < 2).then(|| {
        format!(
            "warning: exclusive rules hold CPUs {exclusive} of {}: {} left to measure latencies on (a measurement needs 2)",
            cpus.online,
            if left.is_empty() { "none".to_string() } else { format!("only {left}") }
        )
    })
}
