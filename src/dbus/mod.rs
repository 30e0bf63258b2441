//! The D-Bus face of the daemon: `org.pinnerd.Pinnerd1` at `/org/pinnerd/Pinnerd1`.
//!
//! Data flow: a method call → `admission` (message size, caller uid, rate limit; for
//! the mutating methods root, or polkit's answer for a non-root caller, see `polkit`) →
//! `interface` (arguments checked, `placement` for `a{sv}` placements) → a
//! `crate::api::Command` sent to the daemon loop with a oneshot → its reply.
//! Property reads come from the `crate::api::Snapshot` the loop publishes; a publisher
//! task (`properties`) turns every change of that snapshot into one `PropertiesChanged`
//! signal. `serving` connects, takes the bus name and emits the signals.
//!
//! It speaks the types of `api` and knows nothing of the daemon: it sends a
//! `crate::api::Call` into whatever channel it is given, whose events can carry one.
//!
//! Property reads pass the same uid and rate checks as methods (one token per message).
//! Callers' uids are asked of the bus once per connection and forgotten when it leaves.
//!
//! Must not touch: daemon state. This object holds no state of its own beyond the
//! per-caller rate limiter and the uid cache; it never blocks the loop and the loop
//! never waits on it.

mod admission;
mod error;
mod interface;
mod placement;
mod properties;
mod serving;

pub use admission::{Callers, RateLimiter, MAX_BODY, MAX_STRING};
pub use error::MethodError;
pub use interface::Pinnerd1;
pub use placement::{place_spec, placement_dict, placement_dict_with, PLACEMENT_KEYS};
pub use properties::{changed_properties, properties_changed, publish_properties};
pub use serving::{emit, serve, BusTarget, DbusError, BUS_NAME, INTERFACE, OBJECT_PATH};
