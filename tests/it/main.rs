//! Integration tests: one binary, one module per area.

mod cli_smoke;
mod helper;
mod watch;
