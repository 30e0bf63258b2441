//! The hardware fingerprint that keys stored matrices.
