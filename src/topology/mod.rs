//! CPU topology discovered from sysfs: which CPUs exist and are online, and for each
//! online CPU its package, die, cluster, core, SMT siblings, caches (with the CPUs that
//! share each one), NUMA node, core type (hybrid parts, or clear capacity classes),
//! preferred-core ranking and maximum frequency; plus NUMA node distances and the AMD
//! X3D mode (`kinds`).
//!
//! ```text
//! SysRoot ─► devices/system/cpu/{online,possible,present,offline,isolated}
//!          ─► devices/system/cpu/cpuN/{topology,cache/indexM,cpufreq,cpu_capacity}
//!          ─► devices/system/node/{online,nodeN/cpulist,nodeN/distance}
//!          ─► devices/cpu_core/cpus, devices/cpu_atom/cpus
//!          ─► cpuN/{acpi_cppc/highest_perf,cpufreq/amd_pstate_*}
//!          ─► bus/platform/drivers/amd_x3d_vcache/*/amd_x3d_mode    ─► Topology
//! ```
//!
//! Rules: a missing file degrades to what is known and adds a warning (containers, old
//! kernels and VMs hide parts of sysfs); a file that exists but does not parse is an
//! error naming the file, line and column. Offline CPUs are listed as offline and never
//! appear in [`Topology::cpus`] or [`Topology::usable`].
//!
//! Files: `model` (the types and their questions), `read` (sysfs into the model),
//! `parse` (file contents into values, errors with file, line and column), `kinds`
//! (what tells CPUs of one distance apart).
//!
//! Must not touch: measuring, placement decisions, the real `/sys` path (see `sysroot`).

mod kinds;
mod model;
mod parse;
mod read;

pub use kinds::{classes, LlcGroup};
pub use model::{Cache, CacheKind, CoreType, Cpu, Node, Topology, TopologyError};
pub(crate) use parse::parse_list;
