//! The machine as the daemon last read it — online and usable CPUs, the topology, the
//! hardware fingerprint, the matrix in use and its latency domains — and the bounds a
//! new matrix's plan must beat to move running threads ([`MOVE_GAIN`],
//! [`MOVE_FLOOR_NS`]; applied by `State::matrix_changed`, `state/measuring.rs`). A CPU
//! hotplug is handled by `State::hotplug` (`state/mod.rs`).

use crate::api::CommandError;
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
                tracing::warn!(error = %e, "cannot read the CPU topology; keeping the last one")
            }
        }
        match Fingerprint::read(root) {
            Ok(fp) => {
                let changed = match &self.fingerprint {
                    Some(old) if old.matches(&fp) => false,
                    Some(old) => {
                        for d in old.differences(&fp) {
                            tracing::info!(change = %d, "hardware fingerprint changed");
                        }
                        true
                    }
                    None => true,
                };
                self.fingerprint = Some(fp);
                changed
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the hardware fingerprint");
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
                tracing::info!(finding = %f, "matrix and topology");
            }
            for w in &s.warnings {
                tracing::warn!(warning = %w, "placing from the sysfs topology");
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
            tracing::warn!(error = %e, "no latency domains");
        }
    }
}
