//! What pinnerd knows, in the formats other engines read: Node Feature Discovery feature
//! files for Kubernetes (`nfd`) and hwloc distance matrices (`hwloc`), so OpenMPI,
//! Slurm's task binding and every other hwloc user see the measured latencies.
//!
//! Owns: pure renderers from a matrix, domains and topology to text, and the parser of
//! the one input they need from hwloc (the PU order of a topology XML).
//! Must not touch: files or processes (the CLI in `cli/export.rs` reads and runs them).

pub mod hwloc;
pub mod nfd;

use std::path::PathBuf;

/// An export that cannot be made. Every variant names the file or the CPUs.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The hwloc topology XML is malformed at a line.
    #[error("{path}:{line}: {message}")]
    Topology {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The matrix names a CPU the topology has no PU for.
    #[error("{path}: the matrix names CPU {cpu}, which is not a PU of this topology (its PUs' OS indexes: {available})")]
    UnknownCpu {
        path: PathBuf,
        cpu: u32,
        available: String,
    },
    /// A pair has no figure; hwloc needs every value.
    #[error("the matrix has no figure for CPUs {a} and {b}: hwloc needs every pair")]
    MissingPair { a: u32, b: u32 },
}
