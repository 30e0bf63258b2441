//! Process events (proc connector) and /proc rescans.
