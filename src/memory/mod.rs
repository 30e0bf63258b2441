//! Where a process's memory is, per NUMA node, and moving it.
//!
//! Owns: reading per-node resident memory (`parse` for the two files, [`read`] for the
//! choice of source), the words that describe it, and the memory-policy and
//! page-migration syscalls.
//! Must not touch: which CPUs a process gets (see `placement`, `plan`), the event loop.
//!
//! ```text
//!  one node (topology) ───────────────────────► MemoryView::OneNode (nothing read)
//!  /proc/PID/cgroup ─► its v2 cgroup holds it alone? ─► memory.numa_stat (no page walk)
//!                         └─ else ─► /proc/PID/numa_maps (walks page tables; on demand)
//! ```
//!
//! Read on demand (`explain`, planning a process), never per event and never on the
//! daemon's loop (`daemon::readers`): `numa_maps` walks the process's page tables under
//! its mm lock, which costs milliseconds per GiB, and which the process can keep busy.

pub mod follow;
pub mod parse;
pub mod policy;

use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cgroup;
use crate::sysroot::{self, SysRoot};

pub use parse::{NodeBytes, ParseError};

/// Where the figures came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The process's own cgroup (v2) holds it alone: its `memory.numa_stat`.
    NumaStat { file: PathBuf },
    /// `/proc/PID/numa_maps`.
    NumaMaps,
}

/// A process's resident memory per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryView {
    /// The machine has one node: nothing to see, nothing was read.
    OneNode,
    /// Bytes per node (every node of the machine listed, zeros included).
    Nodes { source: Source, nodes: NodeBytes },
}

impl MemoryView {
    /// Total resident bytes (0 on one node, where nothing was read).
    pub fn total(&self) -> u64 {
        match self {
            MemoryView::OneNode => 0,
            MemoryView::Nodes { nodes, .. } => nodes.values().sum(),
        }
    }

    /// The share of `node` in the total, 0.0 to 1.0 (0.0 when there is nothing).
    pub fn share(&self, node: u32) -> f64 {
        match self {
            MemoryView::OneNode => 0.0,
            MemoryView::Nodes { nodes, .. } => share(nodes, node),
        }
    }

    /// `ExplainJson`'s `memory`: `{"one_node": true, "nodes": []}`, or the source, the
    /// total and each node's bytes and share.
    pub fn to_json(&self) -> MemoryJson {
        match self {
            MemoryView::OneNode => MemoryJson::Read(NodesJson {
                nodes: Vec::new(),
                one_node: true,
                source: None,
                total_bytes: None,
            }),
            MemoryView::Nodes { source, nodes } => MemoryJson::Read(NodesJson {
                nodes: nodes
                    .iter()
                    .map(|(n, b)| NodeJson {
                        bytes: *b,
                        node: *n,
                        share: share(nodes, *n),
                    })
                    .collect(),
                one_node: false,
                source: Some(match source {
                    Source::NumaStat { .. } => SourceName::NumaStat,
                    Source::NumaMaps => SourceName::NumaMaps,
                }),
                total_bytes: Some(nodes.values().sum()),
            }),
        }
    }
}

/// `ExplainJson`'s `memory` (docs/dbus.md): where the process's resident memory is, or
/// why it could not be read. The fields of each object are in the order of their names:
/// the objects read as they did when they were JSON maps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemoryJson {
    /// Read, or one node (nothing to read).
    Read(NodesJson),
    /// `{"error": why}`: it could not be read.
    Unreadable(UnreadableJson),
}

/// Where the memory is: `one_node` with no `nodes`, or each node's bytes from `source`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesJson {
    /// Every node of the machine, zeros included; `[]` on one node.
    pub nodes: Vec<NodeJson>,
    pub one_node: bool,
    /// Absent on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceName>,
    /// Absent on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
}

/// One node's resident bytes and their share of the total (0.0 to 1.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeJson {
    pub bytes: u64,
    pub node: u32,
    pub share: f64,
}

/// Why the memory could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreadableJson {
    pub error: String,
}

/// Which file the figures came from, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceName {
    /// The process's own cgroup's file.
    #[serde(rename = "memory.numa_stat")]
    NumaStat,
    #[serde(rename = "numa_maps")]
    NumaMaps,
}

fn share(nodes: &NodeBytes, node: u32) -> f64 {
    let total: u64 = nodes.values().sum();
    if total == 0 {
        return 0.0;
    }
    nodes.get(&node).copied().unwrap_or(0) as f64 / total as f64
}

/// `memory: 3.1 GiB — node 0 2.9 GiB (93%), node 1 0.2 GiB (7%) (numa_maps)`.
impl fmt::Display for MemoryView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryView::OneNode => f.write_str("memory: one node (all of it is local)"),
            MemoryView::Nodes { source, nodes } => {
                write!(f, "memory: {} resident", Bytes(self.total()))?;
                for (i, (n, b)) in nodes.iter().enumerate() {
                    let sep = if i == 0 { " —" } else { "," };
                    write!(
                        f,
                        "{sep} node {n} {} ({:.0}%)",
                        Bytes(*b),
                        share(nodes, *n) * 100.0
                    )?;
                }
                match source {
                    Source::NumaStat { file } => write!(f, " (from {})", file.display()),
                    Source::NumaMaps => f.write_str(" (from numa_maps)"),
                }
            }
        }
    }
}

/// A byte count in words: `512 KiB`, `3.1 GiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1023.95 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        if u == 0 {
            write!(f, "{} B", self.0)
        } else if v >= 100.0 {
            write!(f, "{v:.0} {}", UNITS[u])
        } else {
            write!(f, "{v:.1} {}", UNITS[u])
        }
    }
}

/// Why a process's memory could not be seen.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The process exited (or never was).
    #[error("pid {pid}: no such process")]
    Gone { pid: i32 },
    /// Its cgroup could not be read.
    #[error("pid {pid}: {source}")]
    Cgroup {
        pid: i32,
        source: cgroup::CgroupError,
    },
    #[error("pid {pid}: {source}")]
    Parse { pid: i32, source: ParseError },
}

/// Where process `pid`'s memory is, on a machine with `nodes` (ascending ids, from the
/// topology): the cheapest source that is exact for it — its own cgroup's
/// `memory.numa_stat` when that cgroup (v2) holds only this process and no child
/// cgroups, else its `numa_maps`. On one node nothing is read.
pub fn read(root: &SysRoot, pid: i32, nodes: &[u32]) -> Result<MemoryView, ReadError> {
    if nodes.len() <= 1 {
        return Ok(MemoryView::OneNode);
    }
    let (source, mut bytes) = match own_numa_stat(root, pid)? {
        Some(file) => {
            let bytes = read_file(pid, &file, parse::numa_stat)?;
            (Source::NumaStat { file }, bytes)
        }
        None => {
            let file = root.proc_path(format!("{pid}/numa_maps"));
            let maps = read_file(pid, &file, parse::numa_maps)?;
            (Source::NumaMaps, maps.nodes)
        }
    };
    for n in nodes {
        bytes.entry(*n).or_insert(0);
    }
    Ok(MemoryView::Nodes {
        source,
        nodes: bytes,
    })
}

/// `numa_maps` of process `pid` parsed whole (policies and anonymous memory included).
pub fn read_numa_maps(root: &SysRoot, pid: i32) -> Result<parse::NumaMaps, ReadError> {
    let file = root.proc_path(format!("{pid}/numa_maps"));
    read_file(pid, &file, parse::numa_maps)
}

fn read_file<T>(
    pid: i32,
    file: &std::path::Path,
    parse: impl FnOnce(&std::path::Path, BufReader<File>) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    let f = match File::open(file) {
        Ok(f) => f,
        Err(e) if gone(&e) => return Err(ReadError::Gone { pid }),
        Err(source) => {
            return Err(ReadError::Parse {
                pid,
                source: ParseError::Read {
                    path: file.to_path_buf(),
                    source,
                },
            })
        }
    };
    match parse(file, BufReader::new(f)) {
        Err(ParseError::Read { source, .. }) if gone(&source) => Err(ReadError::Gone { pid }),
        Err(source) => Err(ReadError::Parse { pid, source }),
        Ok(v) => Ok(v),
    }
}

fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The `memory.numa_stat` of `pid`'s own v2 cgroup, when that cgroup holds `pid` alone
/// and has no child cgroups (the file counts descendants too); `None` otherwise.
fn own_numa_stat(root: &SysRoot, pid: i32) -> Result<Option<PathBuf>, ReadError> {
    let path = root.proc_path(format!("{pid}/cgroup"));
    let text = match sysroot::read_optional(&path) {
        Ok(Some(t)) => t,
        Ok(None) => return Err(ReadError::Gone { pid }),
        Err(e) if gone(&e) => return Err(ReadError::Gone { pid }),
        Err(source) => {
            return Err(ReadError::Cgroup {
                pid,
                source: cgroup::CgroupError::Read { path, source },
            })
        }
    };
    let cg = cgroup::parse_proc_cgroup(&path, &text)
        .map_err(|source| ReadError::Cgroup { pid, source })?;
    let Some(v2) = cg.v2 else { return Ok(None) };
    let parts: Vec<&str> = v2.split('/').filter(|s| !s.is_empty()).collect();
    if parts.is_empty() || parts.iter().any(|p| *p == ".." || *p == ".") {
        return Ok(None); // the root cgroup holds everyone; `..` is another namespace's
    }
    for base in ["fs/cgroup", "fs/cgroup/unified"] {
        let dir = parts.iter().fold(root.sys_path(base), |d, p| d.join(p));
        let stat = dir.join("memory.numa_stat");
        if !stat.is_file() {
            continue;
        }
        let procs = match sysroot::read_optional(&dir.join("cgroup.procs")) {
            Ok(Some(t)) => t,
            _ => return Ok(None),
        };
        let mut members = procs.split_whitespace();
        let alone = members.next() == Some(pid.to_string().as_str()) && members.next().is_none();
        let children = std::fs::read_dir(&dir)
            .map(|d| d.flatten().any(|e| e.file_type().is_ok_and(|t| t.is_dir())))
            .unwrap_or(true);
        return Ok((alone && !children).then_some(stat));
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
