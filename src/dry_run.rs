//! `pinnerd plan --live`'s facts: what the rules would do to the running system,
//! changing nothing. The daemon's own manager, built from the daemon's settings, runs
//! over a full /proc rescan with affinity calls that only record what they would set.
//! The plan is the daemon's, made by the same function (`rules_plan::make`) from the
//! same inputs: the CPUs it plans for, the stored matrix (or the topology), memory
//! weighed from the settings' `[memory]`, and the `[sched-ext]` policy while the sysfs
//! root says a sched_ext scheduler runs; the holds the daemon made (its hold journal)
//! are noted as the daemon notes them. Each matching process's memory per node is read
//! (`memory::read`, on demand).
//!
//! ```text
//!   sysfs tree ─► Topology ─► matrix to plan on (--matrix, else stored) ─► domains::select
//!   rules + Settings + devices + sched_ext ─► rules_plan::make ─► Manager (DryRunOps)
//!   hold journal ─► note_hold;  /proc ─► read_here ─► rows, memory per row ─► DryRun
//! ```
//!
//! Must not touch: anything on the system (the operations only record), the daemon's
//! bus and containers (the command line asks them), what is printed (`cli::live`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use crate::affinity::DryRunOps;
use crate::devices;
use crate::domains::{self, Misfit};
use crate::manager::{Input, ManagedRow, Manager};
use crate::matrix::LatencyMatrix;
use crate::memory::{self, MemoryView, ReadError};
use crate::plan::{Choose, MemoryPlanning, SchedExtStep};
use crate::rules::RuleSet;
use crate::rules_plan::{self, MachineRead};
use crate::sched_ext::SchedExt;
use crate::settings::Settings;
use crate::shape;
use crate::sysroot::SysRoot;
use crate::topology::Topology;
use crate::watch::ProcFs;

/// Where the dry run reads the machine and the daemon's files.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// Root of the sysfs tree, or a captured machine directory holding `sys/` and
    /// `proc/`; processes are always this machine's.
    pub sysfs: &'a Path,
    /// A latency matrix measured on this machine's CPUs.
    pub matrix: Option<&'a Path>,
    /// Where the daemon stores this machine's matrix (`None`: the daemon's own state
    /// directory): without `matrix`, the plan is made on it, as the daemon's is.
    pub state_dir: Option<&'a Path>,
    /// The daemon's runtime directory, where its hold journal is.
    pub runtime_dir: &'a Path,
}

/// What the dry run found.
pub struct DryRun {
    /// Where placement came from, in words.
    pub source: String,
    /// The matrix is unstable: placement from the topology, said first.
    pub latency_off: Option<&'static str>,
    /// What a running sched_ext scheduler did to the plan, in one line.
    pub sched_ext: Option<String>,
    /// The daemon's manager after the rescan, the plan handed down.
    pub mgr: Manager,
    /// The operations it went through, which only recorded what they would set.
    pub ops: Arc<DryRunOps>,
    /// The machine's sysfs tree with this machine's /proc.
    pub root: SysRoot,
    pub topology: Topology,
    /// The managed processes.
    pub rows: Vec<ManagedRow>,
    /// Each row's memory per node.
    pub memory: Vec<Result<MemoryView, ReadError>>,
    /// The machine's NUMA nodes.
    pub node_ids: Vec<u32>,
}

/// The dry run of `rules` with `settings` on the machine `asked` names; `warn` hears
/// what was wrong with the stored matrices on the way.
pub fn run(
    rules: &RuleSet,
    settings: &Settings,
    asked: &Asked<'_>,
    warn: &mut dyn FnMut(&str),
) -> anyhow::Result<DryRun> {
    // The topology from the tree given (a captured machine's `proc/` included); the
    // processes from this machine's /proc.
    let machine = SysRoot::resolve(Some(asked.sysfs), None);
    let root = SysRoot::with_sys(&machine.sys);
    let topology = Topology::discover(&machine)
        .with_context(|| format!("reading the CPU topology under {}", asked.sysfs.display()))?;
    let (matrix, source, misfit) = matrix_to_plan_on(asked, &root, &topology, warn)?;
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
    let devices = devices::resolve_all(&root, shape::near_names(rules));
    let sched_ext = crate::sched_ext::read(&root).context("reading the sched_ext state")?;
    let ops = Arc::new(DryRunOps::new(root.clone()));
    let procs = Arc::new(ProcFs::new(root.clone()));
    // The daemon's manager and plan, on the CPUs it plans for.
    let mut mgr = Manager::from_settings(
        ops.clone(),
        procs.clone(),
        topology.online.clone(),
        settings,
    );
    let node_ids = MemoryPlanning::new(&topology, settings).node_ids();
    let planned = rules_plan::make(
        rules,
        settings,
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
    let journal = crate::hold::Journal::new(asked.runtime_dir);
    for h in journal.load().unwrap_or_default() {
        mgr.note_hold(&h.rule, &h.cpus);
    }
    let input = Input::RulesChanged(planned.plan);
    crate::daemon::replan::hand_down(&mut mgr, input, choose);
    crate::daemon::replan::read_here(&mut mgr, procs.as_ref(), choose);
    let rows = mgr.list_managed();
    let memory = rows
        .iter()
        .map(|r| memory::read(&root, r.pid as i32, &node_ids))
        .collect();
    Ok(DryRun {
        source,
        latency_off,
        sched_ext: sched_ext_line(sched_ext.as_ref(), &planned.sched_ext),
        mgr,
        ops,
        root,
        topology,
        rows,
        memory,
        node_ids,
    })
}

/// What the first line adds to the stored matrix's name.
const AS_THE_DAEMON: &str = ", as the daemon plans";

/// The matrix the dry run plans on, what to call it, and what to do when it does not
/// fit: `--matrix` (not fitting is the user's error), else the one the daemon stored for
/// this machine in the state directory, taken as the daemon takes it (the topology where
/// it does not fit); a captured tree is another machine, which no stored matrix is.
fn matrix_to_plan_on(
    asked: &Asked<'_>,
    root: &SysRoot,
    topology: &Topology,
    warn: &mut dyn FnMut(&str),
) -> anyhow::Result<(Option<LatencyMatrix>, String, Misfit)> {
    if let Some(path) = asked.matrix {
        let m = LatencyMatrix::load(path)?;
        return Ok((
            Some(m),
            format!("matrix {}", path.display()),
            Misfit::Refuse,
        ));
    }
    let dir = asked
        .state_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::advice::default_state_dir);
    let mut warnings = Vec::new();
    let stored = root
        .is_live_sys()
        .then(|| crate::advice::stored_matrix(&dir, root, Some(topology), &mut warnings))
        .flatten();
    for w in &warnings {
        warn(w);
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
