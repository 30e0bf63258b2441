//! Core-to-core latency measurement with pinned busy-spin thread pairs.
