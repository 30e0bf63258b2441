//! The daemon settings file.
