//! Where a process's memory is, for `Explain` and `ExplainJson` (`memory`). Read on
//! demand only: `numa_maps` walks the process's page tables.

use crate::memory::{self, MemoryView, ReadError};

use super::State;

impl State {
    /// The memory of process `pid` per node of the machine; `None` before the topology
    /// is known.
    pub(super) fn memory_of(&self, pid: i32) -> Option<Result<MemoryView, ReadError>> {
        let nodes: Vec<u32> = self.topology.as_ref()?.nodes.iter().map(|n| n.id).collect();
        Some(memory::read(&self.cfg.sysroot, pid, &nodes))
    }

    /// The `memory:` line of `Explain`.
    pub(super) fn memory_line(&self, pid: i32) -> String {
        match self.memory_of(pid) {
            None => "memory: not seen yet (the topology is not read)\n".to_string(),
            Some(Ok(v)) => format!("{v}\n"),
            Some(Err(ReadError::Gone { .. })) => "memory: the process exited\n".to_string(),
            Some(Err(e)) => {
                tracing::warn!(pid, error = %e, "cannot read where a process's memory is");
                format!("memory: cannot be read: {e}\n")
            }
        }
    }
}
