//! Applying, reading back and restoring thread affinity.
