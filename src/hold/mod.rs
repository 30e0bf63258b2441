//! Holding processes where pinnerd placed them through the owner of the cgroup tree.
pub mod systemd;
