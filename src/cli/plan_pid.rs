//! `pinnerd plan --pid PID`: one request planned for a running process — its rule's
//! request (or the flags'), inside its cgroup cpuset, with its memory weighed
//! (`plan::memory`). Changes nothing. One request for one process, not the rules' plan
//! (`plan::making`): no other rule's exclusive CPUs, no `[sched-ext]` policy.
//!
//! ```text
//!   /proc/PID ─► rule (or --count …) ─► request ─┐
//!   its cgroup cpuset, housekeeping CPUs ─► advice::request_pool ─► advice ─► best CPUs
//!   memory::read (numa_stat / numa_maps) ─► plan::memory::prefer_memory ─► CPUs + reason
//! ```

use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Serialize;

use super::exit::ConfigInvalid;
use super::plan::PlanArgs;
use crate::advice::{self, Advice, AdviceJson};
use crate::cpuset::CpuSet;
use crate::memory::{self, MemoryView};
use crate::plan::memory::prefer_memory;
use crate::plan::{Chosen, MemoryPlanning};
use crate::rules::{load_dirs, CpuTarget, LoadPolicy, PlacementRequest};
use crate::settings::Settings;
use crate::sysroot::SysRoot;
use crate::topology::Topology;
use crate::watch::{ProcFs, ProcSource};

/// The plan for one process.
struct PidPlan {
    pid: u32,
    comm: String,
    /// The rule whose request was planned; `None`: the flags'.
    rule: Option<String>,
    cpuset: Option<CpuSet>,
    advice: Advice,
    memory: MemoryView,
    reason: Option<String>,
    /// The class its threads would get: the flags' (`--sched-policy`, …), else its
    /// rule's `[rule.place]` keys of those names.
    sched: Option<crate::affinity::sched::Sched>,
}

pub fn run(args: &PlanArgs, pid: u32) -> anyhow::Result<ExitCode> {
    let p = plan_pid(args, pid)?;
    super::output::print_answer(args.json, || p.json(), || p.human())
}

/// The process, its request, the CPUs it may take, the best of them, then memory
/// weighed: each a step below.
fn plan_pid(args: &PlanArgs, pid: u32) -> anyhow::Result<PidPlan> {
    let root = SysRoot::resolve(Some(&args.sysfs), None);
    let snap = process(&root, pid)?;
    let policy = LoadPolicy::for_current_process();
    let settings = Settings::load_or_default(&args.config, &policy)
        .map_err(|e| ConfigInvalid(e.to_string()))?;
    let flags_sched = args.sched.sched()?;
    let (request, rule, rule_sched) = match args.count {
        Some(n) => (flags_request(args, n), None, None),
        None => {
            let (req, name, sched) = rule_request(args, &settings, &policy, pid, &snap.info)?;
            (req, Some(name), sched)
        }
    };
    let sched = flags_sched.or(rule_sched);
    let count = match &request.target {
        CpuTarget::Count(n) => *n as usize,
        CpuTarget::Cpus(c) => bail!(
            "rule {:?} names its CPUs ({c}): nothing to plan",
            rule.unwrap_or_default()
        ),
    };
    let topology = Topology::discover(&root).context("reading the CPU topology")?;
    let usable = topology.usable();
    // As the daemon: inside its cgroup cpuset and `within`, off housekeeping CPUs.
    let cpuset = crate::cgroup::process_cpuset(&procs_root(&root), pid as i32)
        .with_context(|| format!("pid {pid}: its cgroup cpuset"))?
        .map(|c| c.cpus)
        .filter(|c| !c.is_empty());
    let pool = advice::request_pool(
        &usable,
        &[cpuset.as_ref(), request.within.as_ref()],
        &[
            Some(&settings.placement.housekeeping_cpus),
            args.exclude.as_ref(),
        ],
    );
    let spec = super::plan::ground_spec(args)?;
    let advise_in = |pool: &CpuSet| {
        let req =
            advice::count_request(count, request.policy, request.smt, usable.difference(pool));
        advice::advise(&spec, &req, &request.shape)
    };
    let advice = advise_in(&pool)?;
    let mp = MemoryPlanning::new(&topology, &settings);
    let memory = memory::read(&procs_root(&root), pid as i32, &mp.node_ids())
        .with_context(|| format!("pid {pid}: where its memory is"))?;
    let (advice, reason) = weigh_memory(advice, &memory, &request, &pool, &mp, advise_in)?;
    Ok(PidPlan {
        pid,
        comm: snap.info.comm.clone(),
        rule,
        cpuset,
        advice,
        memory,
        reason,
        sched,
    })
}

/// The process `pid` with its command line; a kernel thread is refused.
fn process(root: &SysRoot, pid: u32) -> anyhow::Result<crate::watch::ProcessSnapshot> {
    let procs = ProcFs::new(procs_root(root));
    let mut snap = procs
        .snapshot(pid as i32)
        .with_context(|| format!("pid {pid}: no such process"))?;
    snap.info.cmdline = procs
        .cmdline(pid as i32, snap.start_time)
        .with_context(|| format!("pid {pid}: no such process"))?;
    if snap.kernel_thread {
        bail!(
            "pid {pid} ({}): a kernel thread; never pinned",
            snap.info.comm
        );
    }
    Ok(snap)
}

/// `--count N` with the flags' policy, SMT and shape.
fn flags_request(args: &PlanArgs, n: u32) -> PlacementRequest {
    PlacementRequest {
        target: CpuTarget::Count(n),
        within: None,
        policy: args.policy,
        smt: args.smt,
        exclusive: false,
        shape: args.place.shape(),
    }
}

/// The `[rule.place]` of the rule that matches the process, and the rule's name.
fn rule_request(
    args: &PlanArgs,
    settings: &Settings,
    policy: &LoadPolicy,
    pid: u32,
    info: &crate::rules::ProcessInfo,
) -> anyhow::Result<(
    PlacementRequest,
    String,
    Option<crate::affinity::sched::Sched>,
)> {
    let dirs = settings.rule_dirs_or(&args.rules);
    let report = load_dirs(&dirs, policy);
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let m = report.rules.match_process(info).with_context(|| {
        let absent = dirs.iter().filter(|d| !d.exists()).count();
        if absent == dirs.len() {
            format!(
                "pid {pid} ({}): no rules: {} {} not exist; give --count",
                info.comm,
                shown.join(", "),
                if shown.len() == 1 { "does" } else { "do" }
            )
        } else {
            format!(
                "pid {pid} ({}): no rule in {} matches it; give --count",
                info.comm,
                shown.join(", ")
            )
        }
    })?;
    Ok((
        m.rule.place_request()?,
        m.rule.name.clone(),
        m.rule.place_sched,
    ))
}

/// Where its memory is weighed (a compact count without a shape, on several nodes):
/// the CPUs on the node holding most of it when they cost little more, planned again
/// inside that node for their whole explanation; with the reason in words.
fn weigh_memory(
    advice: Advice,
    memory: &MemoryView,
    request: &PlacementRequest,
    pool: &CpuSet,
    mp: &MemoryPlanning,
    advise_in: impl Fn(&CpuSet) -> anyhow::Result<Advice>,
) -> anyhow::Result<(Advice, Option<String>)> {
    let MemoryView::Nodes { nodes, .. } = memory else {
        return Ok((advice, None));
    };
    if !request.shape.is_empty() {
        return Ok((advice, None));
    }
    let best = Chosen {
        cpus: advice.placement.cpus.clone(),
        held: advice.placement.cpus.clone(),
    };
    let (chosen, why) = prefer_memory(&advice.domains, request, pool, best, nodes, mp);
    if chosen.cpus == advice.placement.cpus {
        return Ok((advice, why));
    }
    let node_cpus = mp
        .nodes
        .iter()
        .filter(|(_, c)| !c.intersection(&chosen.cpus).is_empty())
        .fold(CpuSet::new(), |a, (_, c)| a.union(c));
    Ok((advise_in(&pool.intersection(&node_cpus))?, why))
}

/// The real /proc: a process is always the running machine's.
fn procs_root(root: &SysRoot) -> SysRoot {
    SysRoot {
        sys: root.sys.clone(),
        ..SysRoot::default()
    }
}

/// `plan --pid --json`: `plan --json`'s fields, and the process's.
#[derive(Serialize)]
struct PidPlanJson<'a> {
    #[serde(flatten)]
    advice: AdviceJson<'a>,
    pid: u32,
    comm: &'a str,
    /// The rule whose request was planned; `null`: the flags'.
    rule: Option<&'a str>,
    /// Its cgroup cpuset; `null`: none (all CPUs).
    cpuset: Option<String>,
    /// Bytes of its memory per NUMA node; `{}` on one node.
    memory_nodes: crate::memory::NodeBytes,
    /// Why memory moved the choice or not; `one node` on one node.
    memory_reason: Option<String>,
    /// The scheduling class its threads would get (`fifo 50`, `batch nice 5`); `null`:
    /// their own.
    sched: Option<String>,
}

impl PidPlan {
    fn json(&self) -> serde_json::Value {
        let j = PidPlanJson {
            advice: self.advice.as_json(),
            pid: self.pid,
            comm: &self.comm,
            rule: self.rule.as_deref(),
            cpuset: self.cpuset.as_ref().map(|c| c.to_string()),
            memory_nodes: match &self.memory {
                MemoryView::OneNode => Default::default(),
                MemoryView::Nodes { nodes, .. } => nodes.clone(),
            },
            memory_reason: match (&self.memory, &self.reason) {
                (MemoryView::OneNode, _) => Some("one node".to_string()),
                (_, r) => r.clone(),
            },
            sched: self.sched.map(|s| s.words()),
        };
        serde_json::to_value(j).expect("plain data serializes")
    }

    fn human(&self) -> String {
        let mut s = self.advice.human();
        let by = match &self.rule {
            Some(r) => format!("rule {r}"),
            None => "the flags".to_string(),
        };
        s.push_str(&format!(
            "  for:       pid {} ({}), the request of {by}; cpuset {}\n",
            self.pid,
            self.comm,
            self.cpuset
                .as_ref()
                .map_or("none (all CPUs)".to_string(), |c| c.to_string())
        ));
        s.push_str(&format!("  {}\n", self.memory));
        if let Some(r) = &self.reason {
            s.push_str(&format!("  {r}\n"));
        }
        if let Some(c) = &self.sched {
            s.push_str(&format!(
                "  scheduling: {} for every thread it places (nothing is changed)\n",
                c.words()
            ));
        }
        s
    }
}
