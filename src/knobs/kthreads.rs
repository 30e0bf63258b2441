//! Kernel threads and unbound workqueues off `exclusive` CPUs while they are held.
//!
//! - Unbound workqueues: `devices/virtual/workqueue/cpumask` (all of them) and the
//!   `cpumask` of each workqueue that has one (`writeback` and the others made with
//!   `WQ_SYSFS`) lose the held CPUs; a mask that would be left empty is not written
//!   (said). The kernel (6.10+) already keeps them off the CPUs of isolated partitions:
//!   a mask that already lacks the CPUs is not written at all.
//! - Unbound kernel threads: `PF_KTHREAD` without `PF_NO_SETAFFINITY` (kworkers follow
//!   their workqueue) and a mask of more than one CPU; a per-CPU kernel thread is never
//!   touched. Their masks lose the held CPUs.
//! - Per-node `kswapdN` and `kcompactdN`: before Linux 7.0 a partition change reset
//!   every top-cpuset task's mask, theirs included, to the top cpuset's CPUs. A mask
//!   with CPUs of other nodes is put back to its node's CPUs (less the held CPUs), and
//!   given back as the node's CPUs.

use super::{Knob, Knobs, Want};
use crate::affinity::{parse_stat, AffinityOps, PF_KTHREAD};
use crate::cpuset::CpuSet;
use crate::sysroot::{list_dir, read_bounded, SysRoot};

/// `PF_NO_SETAFFINITY` from include/linux/sched.h: the kernel refuses a new mask.
pub const PF_NO_SETAFFINITY: u64 = 0x0400_0000;

/// The workqueue directory, relative to the sysfs root.
pub const WORKQUEUE_DIR: &str = "devices/virtual/workqueue";

/// Writes a CPU set as the kernel's hexadecimal mask (`ff,ffffffff`).
pub fn hex_mask(cpus: &CpuSet) -> String {
    let mut groups: Vec<u32> = Vec::new();
    for w in cpus.as_words() {
        groups.push(*w as u32);
        groups.push((*w >> 32) as u32);
    }
    while groups.len() > 1 && groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        return "0".into();
    }
    let mut out = Vec::new();
    for (i, g) in groups.iter().rev().enumerate() {
        out.push(if i == 0 {
            format!("{g:x}")
        } else {
            format!("{g:08x}")
        });
    }
    out.join(",")
}

/// What to set so that nothing unbound of the kernel runs on `away`, and what could not
/// be (said by the caller).
#[derive(Debug, Default)]
pub struct Wanted {
    pub wants: Vec<Want>,
    pub notes: Vec<String>,
}

/// The workqueue masks and kernel thread masks to set for `away` (the CPUs `exclusive`
/// rules hold). `knobs` gives what each knob held before it was first set, the base a
/// mask is cut from. With nothing away, only the per-node threads a partition change
/// widened are wanted (put back to their node), and only when `partitions` says one
/// may have (a partition is held, or was at the last look): the kernel threads are not
/// looked at otherwise.
pub fn wanted(
    root: &SysRoot,
    ops: &dyn AffinityOps,
    away: &CpuSet,
    knobs: &Knobs,
    partitions: bool,
) -> Wanted {
    let mut out = Wanted::default();
    if !away.is_empty() {
        workqueues(root, away, knobs, &mut out);
    }
    let kept_threads = knobs.kept().any(|k| matches!(k.knob, Knob::Kthread { .. }));
    if !away.is_empty() || kept_threads || partitions {
        threads(root, ops, away, knobs, &mut out);
    }
    out
}

fn workqueues(root: &SysRoot, away: &CpuSet, knobs: &Knobs, out: &mut Wanted) {
    let mut paths = vec![format!("{WORKQUEUE_DIR}/cpumask")];
    if let Ok(Some(names)) = list_dir(&root.sys_path(WORKQUEUE_DIR)) {
        for n in names {
            let p = format!("{WORKQUEUE_DIR}/{n}/cpumask");
            if root.sys_path(&p).is_file() {
                paths.push(p);
            }
        }
    }
    for path in paths {
        let knob = Knob::Mask { path: path.clone() };
        let base = match knobs.before(&knob) {
            Some(b) => b.to_string(),
            None => match read_bounded(root.sys_path(&path)) {
                Ok(t) => t.trim().to_string(),
                Err(_) => continue,
            },
        };
        let Ok(cpus) = CpuSet::parse_hex_mask(&base) else {
            out.notes
                .push(format!("/sys/{path}: not a CPU mask: {base:?}; left alone"));
            continue;
        };
        let left = cpus.difference(away);
        if left.is_empty() {
            out.notes.push(format!(
                "/sys/{path}: CPUs {cpus} are all held exclusive (CPUs {away}): an unbound \
                 workqueue needs one CPU; left alone"
            ));
            continue;
        }
        out.wants.push(Want {
            knob,
            value: hex_mask(&left),
            before: None,
        });
    }
}

/// The node of a per-node kernel thread (`kswapd0`, `kcompactd1`).
fn node_of(comm: &str) -> Option<u32> {
    comm.strip_prefix("kswapd")
        .or_else(|| comm.strip_prefix("kcompactd"))?
        .parse()
        .ok()
}

fn node_cpus(root: &SysRoot, node: u32) -> Option<CpuSet> {
    let text =
        read_bounded(root.sys_path(format!("devices/system/node/node{node}/cpulist"))).ok()?;
    text.trim().parse().ok()
}

fn threads(root: &SysRoot, ops: &dyn AffinityOps, away: &CpuSet, knobs: &Knobs, out: &mut Wanted) {
    let Ok(Some(names)) = list_dir(&root.proc) else {
        return;
    };
    let online: Option<CpuSet> = read_bounded(root.sys_path("devices/system/cpu/online"))
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let nodes = list_dir(&root.sys_path("devices/system/node"))
        .ok()
        .flatten()
        .map_or(0, |n| n.iter().filter(|n| n.starts_with("node")).count());
    for name in names {
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        let Some(stat) = read_bounded(root.proc_path(format!("{pid}/stat")))
            .ok()
            .and_then(|t| parse_stat(&t))
        else {
            continue;
        };
        if stat.flags & PF_KTHREAD == 0 || stat.flags & PF_NO_SETAFFINITY != 0 {
            continue;
        }
        let knob = Knob::Kthread {
            pid,
            start_time: stat.start_time,
            comm: stat.comm.clone(),
        };
        let kept_before = knobs.before(&knob).and_then(|b| b.parse::<CpuSet>().ok());
        let Ok(now) = ops.get_affinity(pid) else {
            continue;
        };
        let mut base = kept_before.clone().unwrap_or_else(|| now.clone());
        let mut before = None;
        // A per-node thread a partition change widened: its node's CPUs are its own.
        if let Some(node) = node_of(&stat.comm).filter(|_| nodes > 1) {
            if let Some(mut own) = node_cpus(root, node) {
                if let Some(on) = &online {
                    own = own.intersection(on);
                }
                if !own.is_empty() && !base.is_subset(&own) {
                    base = own.clone();
                    before = Some(own.to_string());
                }
            }
        }
        // A per-CPU kernel thread keeps its CPU.
        if base.len() <= 1 {
            continue;
        }
        let left = base.difference(away);
        if left.is_empty() {
            continue;
        }
        // Nothing to take off (or given back now: not wanted).
        if left == base && before.is_none() {
            continue;
        }
        out.wants.push(Want {
            knob,
            value: left.to_string(),
            before,
        });
    }
}
