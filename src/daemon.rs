//! The daemon: one event loop owning all state.
