//! The calling process's own memory policy, as `numactl --membind` / `--preferred` set
//! it before exec: `pinnerd run --memory bind|preferred` sets it on itself, then execs
//! the command, which inherits it (and so do its children).
//!
//! No syscall sets another process's policy; for a running process see `migrate`.

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;
use crate::topology::Topology;

use super::parse::MAX_NODES;

/// `run --memory`: what the command's memory does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RunMemory {
    /// Allocate only on the nodes of the chosen CPUs (`numactl --membind`); an
    /// allocation those nodes cannot satisfy fails (or swaps) instead of spilling.
    Bind,
    /// Prefer the nodes of the chosen CPUs, spill elsewhere when they are full
    /// (`numactl --preferred`; several nodes need Linux 5.15's MPOL_PREFERRED_MANY).
    Preferred,
    /// Leave the memory policy alone (the default: memory follows the CPU that
    /// allocates, the kernel's "local" policy).
    #[default]
    Leave,
}

/// The NUMA nodes of `cpus` on `topology`.
pub fn nodes_of(topology: &Topology, cpus: &CpuSet) -> BTreeSet<u32> {
    cpus.iter().filter_map(|c| topology.node_of(c)).collect()
}

/// Why a memory policy could not be set.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("no NUMA node holds CPUs {0}")]
    NoNodes(CpuSet),
    #[error("set_mempolicy({mode}, nodes {nodes}): {source}")]
    Syscall {
        mode: &'static str,
        nodes: String,
        source: std::io::Error,
    },
}

// From <linux/mempolicy.h>.
const MPOL_PREFERRED: libc::c_int = 1;
const MPOL_BIND: libc::c_int = 2;
const MPOL_PREFERRED_MANY: libc::c_int = 5;

/// The node list in the kernel's form: `0-1,3`.
pub fn node_list(nodes: &BTreeSet<u32>) -> String {
    nodes.iter().copied().collect::<CpuSet>().to_string()
}

/// Sets the calling thread's memory policy to `what` on `nodes` (the whole process when
/// it has one thread, as before an exec). Returns a note for the reader when the
/// kernel had to be asked for less (one preferred node of several on a kernel without
/// MPOL_PREFERRED_MANY). `Leave` does nothing.
pub fn set_own(what: RunMemory, nodes: &BTreeSet<u32>) -> Result<Option<String>, PolicyError> {
    let list = node_list(nodes);
    let first = match nodes.first() {
        Some(n) => *n,
        None if what == RunMemory::Leave => return Ok(None),
        None => return Err(PolicyError::NoNodes(CpuSet::new())),
    };
    match what {
        RunMemory::Leave => Ok(None),
        RunMemory::Bind => set_mempolicy(MPOL_BIND, "MPOL_BIND", nodes).map(|_| None),
        RunMemory::Preferred if nodes.len() == 1 => {
            set_mempolicy(MPOL_PREFERRED, "MPOL_PREFERRED", nodes).map(|_| None)
        }
        RunMemory::Preferred => {
            match set_mempolicy(MPOL_PREFERRED_MANY, "MPOL_PREFERRED_MANY", nodes) {
                Ok(()) => Ok(None),
                Err(PolicyError::Syscall { source, .. })
                    if source.raw_os_error() == Some(libc::EINVAL) =>
                {
                    let one = BTreeSet::from([first]);
                    set_mempolicy(MPOL_PREFERRED, "MPOL_PREFERRED", &one)?;
                    Ok(Some(format!(
                        "this kernel has no MPOL_PREFERRED_MANY (Linux 5.15): memory prefers node {first} only, not nodes {list}"
                    )))
                }
                Err(e) => Err(e),
            }
        }
    }
}

fn set_mempolicy(
    mode: libc::c_int,
    name: &'static str,
    nodes: &BTreeSet<u32>,
) -> Result<(), PolicyError> {
    const WORDS: usize = MAX_NODES as usize / 64;
    let mut mask = [0u64; WORDS];
    for &n in nodes.iter().filter(|n| **n < MAX_NODES) {
        mask[n as usize / 64] |= 1 << (n % 64);
    }
    // SAFETY: `mask` is a live array of WORDS u64 words, i.e. MAX_NODES bits; the
    // kernel reads at most `maxnode - 1` bits from it (its historical off-by-one,
    // which numactl also allows for) and writes nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            mode,
            mask.as_ptr(),
            MAX_NODES as libc::c_ulong + 1,
        )
    };
    if rc != 0 {
        return Err(PolicyError::Syscall {
            mode: name,
            nodes: node_list(nodes),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leave_with_no_nodes_does_nothing_and_bind_with_none_is_an_error() {
        assert!(set_own(RunMemory::Leave, &BTreeSet::new())
            .unwrap()
            .is_none());
        assert!(matches!(
            set_own(RunMemory::Bind, &BTreeSet::new()),
            Err(PolicyError::NoNodes(_))
        ));
    }

    #[test]
    fn a_thread_of_its_own_binds_to_node_0_and_numa_maps_says_so() {
        // On a thread of its own: a policy is per thread until exec.
        std::thread::spawn(|| {
            set_own(RunMemory::Bind, &BTreeSet::from([0])).unwrap();
            let mut mode: libc::c_int = -1;
            let mut mask = [0u64; 16];
            // SAFETY: both pointers are live; maxnode matches the mask's bits + 1.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_get_mempolicy,
                    &mut mode as *mut libc::c_int,
                    mask.as_mut_ptr(),
                    1025 as libc::c_ulong,
                    0usize,
                    0 as libc::c_ulong,
                )
            };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            assert_eq!((mode, mask[0]), (MPOL_BIND, 1));
            set_own(RunMemory::Preferred, &BTreeSet::from([0])).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_node_the_machine_lacks_is_refused_with_the_nodes_named() {
        let e = std::thread::spawn(|| set_own(RunMemory::Bind, &BTreeSet::from([1000])))
            .join()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("set_mempolicy(MPOL_BIND, nodes 1000): "),
            "{e}"
        );
    }
}
