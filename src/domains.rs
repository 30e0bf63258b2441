//! Latency domains: clustering a matrix into a hierarchy of CPU groups.
