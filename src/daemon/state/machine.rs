//! The machine as the daemon last read it — online and usable CPUs, the topology, the
//! hardware fingerprint, the matrix in use and its latency domains — and the bounds a
//! new matrix's plan must beat to move running threads ([`MOVE_GAIN`],
//! [`MOVE_FLOOR_NS`]; applied by `State::matrix_changed`, `state/measuring.rs`). A CPU
//! hotplug is handled by `State::hotplug` (`state/mod.rs`).

use crate::api::{CommandError, MatrixReply};
use crate::cpuset::CpuSet;
use crate::domains::{self, Domains, Misfit};
use crate::fingerprint::Fingerprint;
use crate::matrix::store::MatrixStore;
use crate::matrix::LatencyMatrix;
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// A new matrix moves a running unit only when its new CPUs' worst pairwise latency is
/// lower by more than this fraction of the current one. Measurement takes two passes of
/// a pair within 10% of each other as agreeing (`docs/measurement.md`), so a smaller
/// gain may be noise, and a move costs the threads their warm caches. Documented in
/// `docs/pinning.md`; not a setting.
pub const MOVE_GAIN: f64 = 0.10;

/// … and lower by more than this many nanoseconds, so that sets only a few ns apart
/// (SMT siblings, one L2) do not move on a difference no measurement resolves.
pub const MOVE_FLOOR_NS: f64 = 5.0;

/// The machine as the daemon last read it, and the matrix in use on it.
///
/// Owns: the matrix store, the fingerprint, the topology, the matrix in use and the
/// latency domains made of them. Must not touch: processes (see `managed.rs`), when
/// measurements run (see `measuring.rs`).
#[derive(Debug, Default)]
pub(super) struct Machine {
    pub(super) store: Option<MatrixStore>,
    pub(super) fingerprint: Option<Fingerprint>,
    pub(super) topology: Option<Topology>,
    pub(super) current: Option<LatencyMatrix>,
    /// Latency domains of the current matrix and topology; `None` = to be computed.
    /// Plans are made on them; a new matrix reaches running processes only when its
    /// plan improves theirs materially.
    pub(super) domains: Option<Domains>,
}

impl Machine {
    /// Saves job `id`'s matrix in the store, keeping its earlier files; a failure is
    /// logged, and the matrix stays in use.
    pub(super) fn store_matrix(&self, id: u64, matrix: &LatencyMatrix) {
        if let Some(store) = &self.store {
            match store.save_keeping(matrix) {
                Ok(kept) => {
                    tracing::info!(job = id, path = %store.current_path().display(), cpus = kept.len(), "matrix stored in {}: {} CPUs (job {id})", store.current_path().display(), kept.len())
                }
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "cannot store the matrix of job {id}: {e}")
                }
            }
        }
    }

    /// The cells measurements keep for CPUs they stay off: the stored matrix of this
    /// fingerprint, else the one in use.
    pub(super) fn earlier_matrix(&self) -> Option<LatencyMatrix> {
        if let (Some(store), Some(fp)) = (&self.store, &self.fingerprint) {
            if let Ok(loaded) = store.load_current(&fp.hex) {
                if loaded.matrix.is_some() {
                    return loaded.matrix;
                }
            }
        }
        self.current.clone()
    }

    /// Uses the stored matrix's cells for the usable CPUs when it belongs to this
    /// fingerprint and has them all; else returns the pairs it lacks (empty when there is
    /// no stored matrix). A corrupt or foreign file is moved aside by the store.
    pub(super) fn load_stored_matrix(&mut self) -> Vec<(u32, u32)> {
        let (Some(store), Some(fp)) = (&self.store, &self.fingerprint) else {
            return Vec::new();
        };
        match store.fitting(&fp.hex, Some(&self.usable())) {
            Ok(fit) => {
                if let Some(aside) = fit.set_aside {
                    tracing::warn!(%aside, "stored matrix not used: {aside}");
                }
                if let Some(m) = fit.matrix {
                    tracing::info!(cpus = m.len(), path = %store.current_path().display(), "using the stored matrix {}: {} CPUs", store.current_path().display(), m.len());
                    self.current = Some(m);
                    self.domains = None;
                } else if !fit.missing.is_empty() {
                    tracing::info!(
                        missing = fit.missing.len(),
                        "the stored matrix lacks {} pairs of the usable CPUs",
                        fit.missing.len()
                    );
                    return fit.missing;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the stored matrix: {e}"),
        }
        Vec::new()
    }

    /// The machine's node ids; `None` before the topology is known.
    pub(super) fn node_ids(&self) -> Option<Vec<u32>> {
        Some(self.topology.as_ref()?.nodes.iter().map(|n| n.id).collect())
    }

    /// `GetMatrix`: the matrix in use; empty without one.
    pub(super) fn matrix_reply(&self) -> MatrixReply {
        match &self.current {
            Some(m) => MatrixReply {
                cpus: m.cpus.clone(),
                latency_ns: m
                    .latency_ns
                    .iter()
                    .map(|row| row.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
                    .collect(),
            },
            None => MatrixReply {
                cpus: Vec::new(),
                latency_ns: Vec::new(),
            },
        }
    }

    /// Online CPUs as last read; empty before the first read.
    pub(super) fn online(&self) -> CpuSet {
        self.topology
            .as_ref()
            .map(|t| t.online.clone())
            .unwrap_or_default()
    }

    /// CPUs a measurement may use: online and not isolated.
    pub(super) fn usable(&self) -> CpuSet {
        self.topology
            .as_ref()
            .map(Topology::usable)
            .unwrap_or_default()
    }

    /// Re-reads the topology and the fingerprint; true when the fingerprint changed
    /// (or was read for the first time).
    pub(super) fn read(&mut self, root: &SysRoot) -> bool {
        match Topology::discover(root) {
            Ok(t) => {
                for w in &t.warnings {
                    tracing::debug!(warning = %w, "topology");
                }
                if self.topology.as_ref() != Some(&t) {
                    self.domains = None;
                }
                self.topology = Some(t);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the CPU topology ({e}); keeping the last one")
            }
        }
        match Fingerprint::read(root) {
            Ok(fp) => {
                let changed = match &self.fingerprint {
                    Some(old) if old.matches(&fp) => false,
                    Some(old) => {
                        for d in old.differences(&fp) {
                            tracing::info!(change = %d, "hardware fingerprint changed: {d}");
                        }
                        true
                    }
                    None => true,
                };
                self.fingerprint = Some(fp);
                changed
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the hardware fingerprint: {e}");
                false
            }
        }
    }

    /// The latency domains: from the matrix reconciled with sysfs, or from sysfs alone
    /// until a matrix exists (or when the matrix cannot be used).
    pub(super) fn domains(&mut self) -> Result<&Domains, CommandError> {
        if self.domains.is_none() {
            let s = domains::select(
                self.current.as_ref(),
                self.topology.as_ref(),
                Misfit::Topology,
            )
            .map_err(CommandError::NoDomains)?;
            for f in &s.findings {
                tracing::info!(finding = %f, "matrix and topology: {f}");
            }
            for w in &s.warnings {
                tracing::warn!(warning = %w, "placing from the sysfs topology: {w}");
            }
            self.domains = Some(s.domains);
        }
        Ok(self.domains.as_ref().expect("set above"))
    }

    /// Recomputes the domains after the topology changed (or at start); plans made
    /// from now on use them.
    pub(super) fn refresh_domains(&mut self) {
        self.domains = None;
        if let Err(e) = self.domains() {
            tracing::warn!(error = %e, "no latency domains: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;
    use crate::domains::Trust;

    fn fixture(name: &str) -> SysRoot {
        SysRoot::machine(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(name),
        )
    }

    #[test]
    fn a_machine_read_from_a_fixture_places_from_its_topology_until_a_matrix_exists() {
        let mut m = Machine::default();
        assert!(m.online().is_empty() && m.usable().is_empty());
        assert_eq!(m.node_ids(), None);
        assert!(m.read(&fixture("xeon-e5620")), "a first read is a change");
        assert_eq!(m.online(), set("0-15"));
        assert_eq!(m.usable(), set("0-15"));
        assert_eq!(m.node_ids(), Some(vec![0, 1]));
        assert!(
            !m.read(&fixture("xeon-e5620")),
            "the same machine read again"
        );
        assert_eq!(m.domains().unwrap().trust(), Trust::Topology);
        let empty = m.matrix_reply();
        assert!(empty.cpus.is_empty() && empty.latency_ns.is_empty());
        // No store: nothing is loaded, nothing is missing.
        assert!(m.load_stored_matrix().is_empty());
        assert!(m.current.is_none() && m.earlier_matrix().is_none());
    }

    #[test]
    fn a_cpu_offline_in_the_tree_is_neither_online_nor_usable() {
        let mut m = Machine::default();
        m.read(&fixture("i7-7700-cpu3-offline"));
        assert!(!m.online().contains(3), "{}", m.online());
        assert!(
            !m.usable().contains(3) && !m.usable().contains(6),
            "{}",
            m.usable()
        );
        assert!(m.usable().is_subset(&m.online()));
    }
}
