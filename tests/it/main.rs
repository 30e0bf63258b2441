//! Integration tests: one binary, one module per area.

mod affinity;
mod cli_smoke;
mod daemon;
mod helper;
mod measure;
mod packaging;
mod placement;
mod rules;
mod topology;
mod watch;
