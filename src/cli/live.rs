//! `pinnerd plan --live`: what the rules would do to the running system, changing
//! nothing. It runs the daemon's own manager, built from the daemon's settings, over a
//! full /proc rescan with affinity calls that only record what they would set. The plan
//! is the daemon's, made by the same function (`rules_plan::make`) from the same inputs:
//! the CPUs it plans for, the stored matrix (or the topology), memory weighed from the
//! settings' `[memory]`, and the `[sched-ext]` policy while the sysfs root says a
//! sched_ext scheduler runs. Each matching process's memory per node is shown
//! (`memory::read`, on demand).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use super::exit::ConfigInvalid;
use crate::affinity::DryRunOps;
use crate::devices;
use crate::domains::{self, Misfit};
use crate::manager::{Input, ManagedRow, Manager};
use crate::matrix::LatencyMatrix;
use crate::memory::{self, MemoryView, ReadError};
use crate::plan::{Choose, MemoryPlanning, Plan, PlanState, SchedExtStep};
use crate::rules::{load_dirs, LoadPolicy, LoadReport};
use crate::rules_plan::{self, MachineRead};
use crate::sched_ext::SchedExt;
use crate::settings::Settings;
use crate::shape;
use crate::sysroot::SysRoot;
use crate::topology::Topology;
use crate::watch::ProcFs;

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
    // The topology from the tree given (a captured machine's `proc/` included); the
    // processes from this machine's /proc.
    let machine = crate::sysroot::SysRoot::resolve(Some(&args.sysfs), None);
    let root = SysRoot::with_sys(&machine.sys);
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
    let topology = Topology::discover(&machine)
        .with_context(|| format!("reading the CPU topology under {}", args.sysfs.display()))?;
    let (matrix, source, misfit) = matrix_to_plan_on(args, &root, &topology)?;
    // The matrix alone, without what the first line says of it.
    let bare = source.strip_suffix(AS_THE_DAEMON).unwrap_or(&source);
    let name = format!("the {}", bare.strip_prefix("the ").unwrap_or(bare));
    let selected = domains::select(matrix.as_ref(), Some(&topology), misfit)
        .with_context(|| format!("{name} does not fit this machine"))?;
    let (domains, latency_off) = (selected.domains, selected.latency_off);
    // The daemon would place on the topology: the first line says so, and why.
    let source = match latency_off {
        Some(line) => format!("sysfs topology: {line} ({name} did not hold when measured again)"),
        None => source,
    };
    let devices = devices::resolve_all(&root, shape::near_names(&report.rules));
    let sched_ext = crate::sched_ext::read(&root).context("reading the sched_ext state")?;
    let ops = Arc::new(DryRunOps::new(root.clone()));
    let procs = Arc::new(ProcFs::new(root.clone()));
    // The daemon's manager and plan, on the CPUs it plans for.
    let mut mgr = Manager::from_settings(
        ops.clone(),
        procs.clone(),
        topology.online.clone(),
        &settings,
    );
    let node_ids = MemoryPlanning::new(&topology, &settings).node_ids();
    let planned = rules_plan::make(
        &report.rules,
        &settings,
        MachineRead {
            topology: Some(&topology),
            online: topology.online.clone(),
            domains: Some(domains),
            devices,
            sched_ext: sched_ext.clone(),
        },
    );
    let choose = planned.choose.as_deref().map(|c| c as &dyn Choose);
    // The holds the daemon made (its hold journal, where this user may read it): the
    // cpusets they made are the rules' own, planned as without them, as the daemon does.
    let journal = crate::hold::Journal::new(std::path::Path::new(super::daemon::DEFAULT_RUNTIME));
    for h in journal.load().unwrap_or_default() {
        mgr.note_hold(&h.rule, &h.cpus);
    }
    let input = Input::RulesChanged(planned.plan);
    crate::daemon::replan::hand_down(&mut mgr, input, choose);
    crate::daemon::replan::read_here(&mut mgr, procs.as_ref(), choose);
    let rows = mgr.list_managed();
    let containers = super::live_containers::running(
        &root,
        &args.container_files,
        mgr.plan(),
        Some(&topology),
        || daemon_containers(&args.bus),
    );
    let memory = rows
        .iter()
        .map(|r| memory::read(&root, r.pid as i32, &node_ids))
        .collect();
    let found = DryRun {
        source,
        latency_off,
        report: &report,
        sched_ext: sched_ext_line(sched_ext.as_ref(), &planned.sched_ext),
        mgr,
        ops,
        root: &root,
        topology: &topology,
        rows,
        memory,
        node_ids,
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
    /// Where placement came from, in words.
    source: String,
    /// The matrix is unstable: placement from the topology, said first.
    latency_off: Option<&'static str>,
    report: &'a LoadReport,
    /// What a running sched_ext scheduler did to the plan (`sched_ext_line`).
    sched_ext: Option<String>,
    mgr: Manager,
    ops: Arc<DryRunOps>,
    root: &'a SysRoot,
    topology: &'a Topology,
    rows: Vec<ManagedRow>,
    /// Each row's memory per node.
    memory: Vec<Result<MemoryView, ReadError>>,
    node_ids: Vec<u32>,
    /// The running containers of the kubelet's tree.
    containers: Vec<super::live_containers::RunningContainer>,
}

impl DryRun<'_> {
    /// `--json`: the plan units, the processes and what they would get.
    fn json(&self) -> anyhow::Result<String> {
        let processes = self
            .rows
            .iter()
            .zip(&self.memory)
            .map(|(r, mem)| LiveProcessJson {
                pid: r.pid,
                comm: &r.comm,
                rule: &r.rule,
                would_get: &r.cpus,
                now: self
                    .ops
                    .real_mask(r.pid as i32)
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                state: &r.state,
                cpuset: self.mgr.cpuset_of(r.pid as i32),
                memory_nodes: match mem {
                    Ok(MemoryView::Nodes { nodes, .. }) => Some(nodes.clone()),
                    Ok(MemoryView::OneNode) => Some(Default::default()),
                    Err(_) => None,
                },
            })
            .collect();
        let protected = self.mgr.protected();
        let j = LiveJson {
            placement_from: &self.source,
            latency_off: self.latency_off,
            rule_errors: self.report.error_strings(),
            plans: self.mgr.plan().units(),
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
        for p in self.mgr.plan().units() {
            let unit = match p.thread_entry {
                None => String::new(),
                Some(i) => format!(" threads[{i}]"),
            };
            let online = &self.mgr.plan().cpus().online;
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
                .and_then(|i| p.slots_line(self.mgr.entry_threads(&p.rule, i)))
            {
                let _ = writeln!(out, "    {line}");
            }
        }
        if let Some(line) = no_cpu_to_measure(self.mgr.plan()) {
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
            self.rows.iter().map(|r| r.rule.as_str()).collect();
        let (mut limits, mut away) = (Vec::new(), crate::cpuset::CpuSet::new());
        for p in self.mgr.plan().units() {
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
        let (wants, missing) = idle::wanted(self.root, &limits);
        let k = kthreads::wanted(
            self.root,
            self.ops.as_ref(),
            &away,
            &Knobs::default(),
            false,
        );
        let io = Io {
            root: self.root,
            ops: self.ops.as_ref(),
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
        let cannot = crate::hold::cannot_isolate_here(self.root);
        let node_of = |cpu: u32| self.topology.node_of(cpu);
        let protected = self.mgr.protected();
        let _ = writeln!(
            out,
            "dry run: nothing was changed; placement from {}",
            self.source
        );
        if let Some(line) = &self.sched_ext {
            let _ = writeln!(out, "{line}");
        }
        if self.node_ids.len() <= 1 {
            let _ = writeln!(out, "memory: one node (all of it is local; not weighed)");
        }
        self.write_rules(&mut out, cannot.as_deref());
        let _ = writeln!(out, "\nmatching processes ({}):", self.rows.len());
        if !self.rows.is_empty() {
            let _ = writeln!(
                out,
                "  {:>8}  {:<16} {:<20} {:<12} {:<12} STATE",
                "PID", "COMM", "RULE", "WOULD GET", "NOW"
            );
        }
        for (r, mem) in self.rows.iter().zip(&self.memory) {
            let now = self
                .ops
                .real_mask(r.pid as i32)
                .map(|m| m.to_string())
                .unwrap_or_else(|_| "gone".into());
            let _ = writeln!(
                out,
                "  {:>8}  {:<16} {:<20} {:<12} {:<12} {}",
                r.pid, r.comm, r.rule, r.cpus, now, r.state
            );
            if self.mgr.cpuset_key_of(r.pid as i32).is_some() {
                if let Some(c) = self.mgr.cpuset_of(r.pid as i32) {
                    let _ = writeln!(out, "  {:>8}  in cpuset {c}", "");
                }
            }
            if let Some(w) = self.mgr.hold_want(r, &node_of) {
                let unit = crate::cgroup::proc_cgroups(self.root, r.pid as i32)
                    .ok()
                    .flatten()
                    .and_then(|c| c.v2)
                    .and_then(|p| crate::hold::unit_of_cgroup(&p))
                    .ok_or_else(|| format!("pid {} is in no systemd unit", r.pid));
                // What the daemon finds where it runs: a slice its unit may not write.
                let why = match (&cannot, &unit) {
                    (None, Ok(u)) if w.isolate => {
                        crate::hold::cannot_write_partition(self.root, &u.cgroup)
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

/// What the first line adds to the stored matrix's name.
const AS_THE_DAEMON: &str = ", as the daemon plans";

/// The matrix the dry run plans on, what to call it, and what to do when it does not
/// fit: `--matrix` (not fitting is the user's error), else the one the daemon stored for
/// this machine in the state directory, taken as the daemon takes it (the topology where
/// it does not fit); a captured tree is another machine, which no stored matrix is.
fn matrix_to_plan_on(
    args: &LiveArgs,
    root: &SysRoot,
    topology: &Topology,
) -> anyhow::Result<(Option<LatencyMatrix>, String, Misfit)> {
    if let Some(path) = &args.matrix {
        let m = LatencyMatrix::load(path)?;
        return Ok((
            Some(m),
            format!("matrix {}", path.display()),
            Misfit::Refuse,
        ));
    }
    let dir = args
        .state_dir
        .clone()
        .unwrap_or_else(crate::advice::default_state_dir);
    let mut warnings = Vec::new();
    let stored = root
        .is_live_sys()
        .then(|| crate::advice::stored_matrix(&dir, root, Some(topology), &mut warnings))
        .flatten();
    for w in &warnings {
        eprintln!("pinnerd: {w}");
    }
    let (matrix, source) = match stored {
        Some((path, m)) => (
            Some(m),
            format!("the stored matrix {}{AS_THE_DAEMON}", path.display()),
        ),
        None => (
            None,
            format!(
                "sysfs topology: no stored matrix for this machine in {} (give --matrix to plan on latencies)",
                dir.display()
            ),
        ),
    };
    Ok((matrix, source, Misfit::Topology))
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

/// What a running sched_ext scheduler did to the plan, in one line, as the daemon logs
/// it; `None` when none runs.
fn sched_ext_line(running: Option<&SchedExt>, step: &SchedExtStep) -> Option<String> {
    let s = running?.describe();
    Some(match step {
        SchedExtStep::NoScheduler => return None,
        SchedExtStep::Paused => {
            format!("sched_ext: {s} runs; policy pause: rules released until it stops")
        }
        SchedExtStep::Widened => {
            format!("sched_ext: {s} runs; policy widen: masks rounded up to whole groups")
        }
        SchedExtStep::Warned(partial) if partial.is_empty() => {
            format!("sched_ext: {s} runs; policy warn: no rule pins a partial mask")
        }
        SchedExtStep::Warned(partial) => {
            let rules: Vec<String> = partial.iter().map(|(r, c)| format!("{r} ({c})")).collect();
            format!(
                "sched_ext: {s} runs; policy warn: partial masks pinned as usual: {}",
                rules.join(", ")
            )
        }
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
