//! The placement flags that shape a count request: `--core-type`, `--prefer` and
//! `--near`, the command-line form of the rule keys `core-type`, `prefer` and `near`
//! (see `shape`). One struct, flattened into every command that places a request.

use crate::shape::{Prefer, Shape};
use crate::topology::CoreType;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct PlaceFlags {
    /// Only CPUs of this kind: performance or efficiency (a machine with one kind of
    /// core has only performance cores). Refused, never widened, when the kind cannot
    /// hold the request.
    #[arg(long, value_name = "KIND")]
    pub core_type: Option<CoreType>,
    /// Among the cache groups able to hold the request: cache (the most L3 per core)
    /// or frequency (the highest preferred-core ranking, else maximum frequency).
    #[arg(long, value_name = "WHAT")]
    pub prefer: Option<Prefer>,
    /// Near a device: a network interface, a PCI address (0000:81:00.0), a block device
    /// or a /dev path. Its NUMA node's CPUs first, the nearest nodes added when needed.
    #[arg(long, value_name = "DEVICE")]
    pub near: Option<String>,
}

impl PlaceFlags {
    /// The flags as a request shape.
    pub fn shape(&self) -> Shape {
        Shape {
            core_type: self.core_type,
            prefer: self.prefer,
            near: self.near.clone(),
        }
    }
}
