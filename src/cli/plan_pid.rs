//! `pinnerd plan --pid PID`: one request planned for a running process — its rule's
//! request (or the flags'), inside its cgroup cpuset, with its memory weighed
//! (`plan::memory`). Changes nothing. One request for one process, not the rules' plan
//! (`plan::making`): no other rule's exclusive CPUs, no `[sched-ext]` policy.
//!
//! ```text
//!   /proc/PID ─► rule (or --count …) ─► request ─┐
//!   its cgroup cpuset, housekeeping CPUs ─► exclude ─► plan::plan ─► best CPUs
//!   memory::read (numa_stat / numa_maps) ─► plan::memory::prefer_memory ─► CPUs + reason
//! ```

use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::json;

use super::plan::{plan, Advice, PlanArgs};
use super::ConfigInvalid;
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
}

pub fn run(args: &PlanArgs, pid: u32) -> anyhow::Result<ExitCode> {
    let p = plan_pid(args, pid)?;
    super::print_answer(args.json, || p.json(), || p.human())
}

fn plan_pid(args: &PlanArgs, pid: u32) -> anyhow::Result<PidPlan> {
    let root = super::topology::resolve_roots(Some(&args.sysfs), None);
    let procs = ProcFs::new(SysRoot {
        sys: root.sys.clone(),
        ..SysRoot::default()
    });
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
    let policy = LoadPolicy::for_current_process();
    let settings = Settings::load_or_default(&args.config, &policy)
        .map_err(|e| ConfigInvalid(e.to_string()))?;
    let (request, rule) = match args.count {
        Some(n) => (
            PlacementRequest {
                target: CpuTarget::Count(n),
                within: None,
                policy: args.policy,
                smt: args.smt,
                exclusive: false,
                shape: args.place.shape(),
            },
            None,
        ),
        None => {
            let dirs = if args.rules.is_empty() {
                settings.rule_dirs.clone()
            } else {
                args.rules.clone()
            };
            let report = load_dirs(&dirs, &policy);
            let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            let m = report.rules.match_process(&snap.info).with_context(|| {
                let absent: Vec<&str> = dirs
                    .iter()
                    .zip(&shown)
                    .filter(|(d, _)| !d.exists())
                    .map(|(_, s)| s.as_str())
                    .collect();
                if absent.len() == dirs.len() {
                    format!(
                        "pid {pid} ({}): no rules: {} {} not exist; give --count",
                        snap.info.comm,
                        shown.join(", "),
                        if shown.len() == 1 { "does" } else { "do" }
                    )
                } else {
                    format!(
                        "pid {pid} ({}): no rule in {} matches it; give --count",
                        snap.info.comm,
                        shown.join(", ")
                    )
                }
            })?;
            let req = m.rule.place.clone().with_context(|| {
                format!(
                    "rule {:?} has no [rule.place] (it places threads by name only)",
                    m.rule.name
                )
            })?;
            (req, Some(m.rule.name.clone()))
        }
    };
    let count = match &request.target {
        CpuTarget::Count(n) => *n,
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
    let mut pool = usable.clone();
    if let Some(c) = &cpuset {
        pool = pool.intersection(c);
    }
    if let Some(w) = &request.within {
        pool = pool.intersection(w);
    }
    pool = pool.difference(&settings.placement.housekeeping_cpus);
    if let Some(x) = &args.exclude {
        pool = pool.difference(x);
    }
    let sub_args = |pool: &CpuSet| PlanArgs {
        count: Some(count),
        policy: request.policy,
        smt: request.smt,
        exclude: Some(usable.difference(pool)),
        place: super::place_flags::ShapeFlags {
            core_type: request.shape.core_type,
            prefer: request.shape.prefer,
            near: request.shape.near.clone(),
        },
        matrix: args.matrix.clone(),
        sysfs: args.sysfs.clone(),
        json: args.json,
        live: false,
        pid: None,
        measure_off_by: None,
        rules: Vec::new(),
        config: args.config.clone(),
        state_dir: args.state_dir.clone(),
        measure_budget: args.measure_budget,
        no_measure: args.no_measure,
        idle_threshold: args.idle_threshold,
    };
    let mut advice = plan(&sub_args(&pool), count as usize)?;
    let mp = MemoryPlanning::new(&topology, &settings);
    let memory = memory::read(&procs_root(&root), pid as i32, &mp.node_ids())
        .with_context(|| format!("pid {pid}: where its memory is"))?;
    let mut reason = None;
    if let MemoryView::Nodes { nodes, .. } = &memory {
        if request.shape.is_empty() {
            let best = Chosen {
                cpus: advice.placement.cpus.clone(),
                held: advice.placement.cpus.clone(),
            };
            let (chosen, why) = prefer_memory(&advice.domains, &request, &pool, best, nodes, &mp);
            reason = why;
            if chosen.cpus != advice.placement.cpus {
                // The same engine inside the chosen node, for its whole explanation.
                let node_cpus = mp
                    .nodes
                    .iter()
                    .filter(|(_, c)| !c.intersection(&chosen.cpus).is_empty())
                    .fold(CpuSet::new(), |a, (_, c)| a.union(c));
                advice = plan(&sub_args(&pool.intersection(&node_cpus)), count as usize)?;
            }
        }
    }
    Ok(PidPlan {
        pid,
        comm: snap.info.comm.clone(),
        rule,
        cpuset,
        advice,
        memory,
        reason,
    })
}

/// The real /proc: a process is always the running machine's.
fn procs_root(root: &SysRoot) -> SysRoot {
    SysRoot {
        sys: root.sys.clone(),
        ..SysRoot::default()
    }
}

impl PidPlan {
    fn json(&self) -> serde_json::Value {
        let mut v = self.advice.json();
        let nodes: serde_json::Map<String, serde_json::Value> = match &self.memory {
            MemoryView::OneNode => Default::default(),
            MemoryView::Nodes { nodes, .. } => nodes
                .iter()
                .map(|(n, b)| (n.to_string(), json!(b)))
                .collect(),
        };
        v["pid"] = json!(self.pid);
        v["comm"] = json!(self.comm);
        v["rule"] = json!(self.rule);
        v["cpuset"] = json!(self.cpuset.as_ref().map(|c| c.to_string()));
        v["memory_nodes"] = serde_json::Value::Object(nodes);
        v["memory_reason"] = json!(match (&self.memory, &self.reason) {
            (MemoryView::OneNode, _) => Some("one node".to_string()),
            (_, r) => r.clone(),
        });
        v
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
        s
    }
}
