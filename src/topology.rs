//! CPU topology discovered from sysfs.
