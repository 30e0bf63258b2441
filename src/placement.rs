//! Placement: pure logic from topology + matrix + request to a CPU set.
