//! The D-Bus object; it only forwards commands to the daemon loop.
