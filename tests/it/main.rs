//! Integration tests: one binary, one module per area.

mod cli_smoke;
mod daemon;
mod measure;
mod packaging;
mod placement;
mod rules;
mod topology;
