//! The machine as the daemon last read it — online and usable CPUs, the topology, the
//! hardware fingerprint, the matrix in use and its latency domains — and the bounds a
//! new matrix's plan must beat to move running threads ([`MOVE_GAIN`],
//! [`MOVE_FLOOR_NS`]; applied by `State::matrix_changed`, `state/measuring.rs`). A CPU
//! hotplug is handled by `State::hotplug` (`state/mod.rs`).

use crate::api::{rows_per_reply, CommandError, MatrixReply, WHOLE_MATRIX_CPUS};
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
    /// The matrix in use, to change in place.
    pub(super) fn matrix_mut(&mut self) -> Option<&mut LatencyMatrix> {
        self.current.as_mut()
    }

    /// The topology as read last.
    pub(super) fn topology(&self) -> Option<&Topology> {
        self.topology.as_ref()
    }

    /// The domains as made last, without making them.
    pub(super) fn domains_made(&self) -> Option<&Domains> {
        self.domains.as_ref()
    }

    /// The fingerprint of this machine as read last, in hex.
    pub(super) fn fingerprint_hex(&self) -> Option<String> {
        self.fingerprint.as_ref().map(|f| f.hex.clone())
    }

    /// When the matrix in use was measured (µs since the epoch; 0 without one).
    pub(super) fn measured_at_us(&self) -> u64 {
        self.current
            .as_ref()
            .and_then(|m| m.measured_at_us)
            .unwrap_or(0)
    }

    /// The line saying which pairs are off latency-aware placement, if any; from the
    /// sparse counts completion keeps, not a walk over the cells.
    pub(super) fn latency_off(&self) -> String {
        self.current
            .as_ref()
            .and_then(LatencyMatrix::latency_off)
            .unwrap_or_default()
            .to_string()
    }

    /// The pairs of the matrix in use measured, and all its pairs ((0, 0) without one).
    pub(super) fn pairs_measured(&self) -> (u32, u32) {
        self.current.as_ref().map_or((0, 0), |m| {
            let total = m.len() * m.len().saturating_sub(1) / 2;
            let measured = m.sparse.as_ref().map_or(total, |sp| sp.pairs_measured);
            (
                measured.min(u32::MAX as usize) as u32,
                total.min(u32::MAX as usize) as u32,
            )
        })
    }

    /// The matrix in use in words, for the status line.
    pub(super) fn matrix_words(&self) -> String {
        let matrix = match &self.current {
            Some(m) => format!("matrix of {} CPUs", m.len()),
            None => "no matrix (sysfs topology)".to_string(),
        };
        match self.current.as_ref().and_then(|m| m.kept.as_ref()) {
            Some(k) => format!(
                "{matrix}, earlier cells kept for {}",
                crate::measure::around::cpu_words(&k.cpus)
            ),
            None => matrix,
        }
    }

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

    /// `GetMatrix`: the matrix in use; empty without one. One of more than
    /// [`WHOLE_MATRIX_CPUS`] CPUs is refused, naming `GetMatrixRows`.
    pub(super) fn matrix_reply(&self) -> Result<MatrixReply, CommandError> {
        match &self.current {
            Some(m) => whole_matrix(m),
            None => Ok(MatrixReply {
                cpus: Vec::new(),
                latency_ns: Vec::new(),
            }),
        }
    }

    /// `GetMatrixRows`: rows `first..first + count` of the matrix in use, at most
    /// [`rows_per_reply`]; empty without one.
    pub(super) fn matrix_rows(&self, first: u32, count: u32) -> Result<MatrixReply, CommandError> {
        match &self.current {
            Some(m) => matrix_rows(m, first, count),
            None => Ok(MatrixReply {
                cpus: Vec::new(),
                latency_ns: Vec::new(),
            }),
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

/// `GetMatrix`'s reply: the whole of `m`, or a refusal past [`WHOLE_MATRIX_CPUS`].
fn whole_matrix(m: &LatencyMatrix) -> Result<MatrixReply, CommandError> {
    let n = m.len();
    if n > WHOLE_MATRIX_CPUS {
        return Err(CommandError::InvalidArgs(format!(
            "the matrix has {n} CPUs, over the {WHOLE_MATRIX_CPUS} GetMatrix answers in one reply: read it with GetMatrixRows, {} rows at a time",
            rows_per_reply(n)
        )));
    }
    matrix_rows(m, 0, n as u32)
}

/// Rows `first..first + count` of `m` (cut at its end and at [`rows_per_reply`]).
fn matrix_rows(m: &LatencyMatrix, first: u32, count: u32) -> Result<MatrixReply, CommandError> {
    let n = m.len();
    let first = first as usize;
    if first >= n || count == 0 {
        return Err(CommandError::InvalidArgs(format!(
            "rows {first}, count {count}: the matrix has rows 0 to {} and a reply holds 1 to {}",
            n.saturating_sub(1),
            rows_per_reply(n)
        )));
    }
    let end = n.min(first + (count as usize).min(rows_per_reply(n)));
    Ok(MatrixReply {
        cpus: m.cpus.clone(),
        latency_ns: (first..end)
            .map(|i| m.latency_ns.row(i).map(|v| v.unwrap_or(f64::NAN)).collect())
            .collect(),
    })
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
        let empty = m.matrix_reply().unwrap();
        assert!(empty.cpus.is_empty() && empty.latency_ns.is_empty());
        // No store: nothing is loaded, nothing is missing.
        assert!(m.load_stored_matrix().is_empty());
        assert!(m.current.is_none() && m.earlier_matrix().is_none());
    }

    /// Past 1,024 CPUs the matrix is read by rows: `GetMatrix` refuses, naming
    /// `GetMatrixRows`, whose replies stay within the cells of a whole 1,024-CPU one.
    #[test]
    fn a_matrix_past_1024_cpus_is_answered_by_rows_within_the_reply_bound() {
        let small = LatencyMatrix::from_fn(vec![0, 1, 2], |i, j| (10 * (i + j)) as f64);
        let whole = whole_matrix(&small).unwrap();
        assert_eq!(whole.cpus, vec![0, 1, 2]);
        assert_eq!(whole.latency_ns.len(), 3);
        let rows = matrix_rows(&small, 1, 5).unwrap();
        assert_eq!(rows.cpus, vec![0, 1, 2]);
        assert_eq!(rows.latency_ns.len(), 2, "cut at the matrix's end");
        assert_eq!(rows.latency_ns[0][2], 30.0);
        assert!(rows.latency_ns[0][1].is_nan());
        for (first, count) in [(3, 1), (0, 0)] {
            let e = matrix_rows(&small, first, count).unwrap_err();
            assert!(e.to_string().contains("the matrix has rows 0 to 2"), "{e}");
        }
        let n = WHOLE_MATRIX_CPUS + 1;
        let big = LatencyMatrix::from_fn((0..n as u32).collect(), |_, _| 50.0);
        let e = whole_matrix(&big).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the matrix has 1025 CPUs, over the 1024 GetMatrix answers in one reply: read it with GetMatrixRows, 1023 rows at a time"
        );
        let page = matrix_rows(&big, 1000, u32::MAX).unwrap();
        assert_eq!(page.latency_ns.len(), n - 1000);
        let page = matrix_rows(&big, 0, u32::MAX).unwrap();
        assert_eq!(page.latency_ns.len(), rows_per_reply(n));
        assert!(page.latency_ns.len() * n <= WHOLE_MATRIX_CPUS * WHOLE_MATRIX_CPUS);
        assert_eq!(rows_per_reply(8192), 128);
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
