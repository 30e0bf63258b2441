//! pinnerd: measures how far apart CPUs really are and pins threads where they belong.
//!
//! Data flow, one module per step:
//!
//! ```text
//! sysroot ──► topology ──► measure ──► matrix ──► domains ──► placement ◄── rules ◄── settings
//!  (/sys,      (CPUs,       (spin        (file      (latency    (pure: request     (TOML →
//!   /proc)      caches,      pairs)       format)    hierarchy)  → CPU set)        matcher)
//!               nodes)                                               │
//!             fingerprint                                            ▼
//!                                       watch (proc events, rescans) ──► affinity (apply, read back, restore)
//!                                                         ▲                     ▲
//!                                                         └──── daemon (one event loop owns the state)
//!                                                                 ▲
//!                                                        dbus (forwards) · cli (commands)
//! ```
//!
//! Beyond one machine: `fleet` compares the matrices of several machines (`diff`,
//! `fleet`); `export` writes what pinnerd knows for Kubernetes' Node Feature Discovery
//! and for hwloc (distances for OpenMPI and Slurm); `metrics` renders the daemon's
//! numbers in the Prometheus text format.
//!
//! `cpuset` is the one CPU-set type everything speaks; `sysroot` is the only place the
//! paths `/sys` and `/proc` are spelled, so tests point it at fixture trees.

pub mod affinity;
pub mod cli;
pub mod cpuset;
pub mod daemon;
pub mod dbus;
pub mod domains;
pub mod export;
pub mod fingerprint;
pub mod fleet;
pub mod manager;
pub mod matrix;
pub mod measure;
pub mod metrics;
pub mod placement;
pub mod rules;
pub mod settings;
pub mod sysroot;
pub mod topology;
pub mod watch;

pub use cpuset::CpuSet;
pub use matrix::LatencyMatrix;
