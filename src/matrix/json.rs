//! The matrix file's JSON object as read and as written: the sparse counts as plain
//! fields, the compact form of a large sparse map (its inferred statistics left out,
//! see [`COMPACT_FROM_CPUS`]) and their making again when read.
//!
//! Must not touch: the bounds on reading an untrusted file (see `read`).

use serde::{Deserialize, Serialize};

use super::cells::Rows;
use super::{read, Cells, KeptCells, LatencyMatrix, PairStats, SparseCounts, Stability};

/// The JSON object as read: [`LatencyMatrix`]'s fields, with the sparse counts as
/// three plain fields (present together or not at all).
#[derive(Deserialize)]
pub(super) struct MatrixFile {
    /// Linux CPU ids, in row order.
    #[serde(deserialize_with = "read::cpus")]
    cpus: Vec<u32>,
    /// `latency_ns[i][j]`: one-way latency between `cpus[i]` and `cpus[j]`. Symmetric;
    /// the diagonal is `None` (null in JSON). A missing pair is also `None`. Read into
    /// the triangle as the rows stream ([`read::cells`]).
    #[serde(deserialize_with = "read::cells")]
    latency_ns: Cells,
    /// Measurement primitive, e.g. `cas` or `load-store`; `None` when unknown (imports).
    #[serde(default)]
    primitive: Option<String>,
    /// When it was measured, in microseconds since the Unix epoch; `None` for imports.
    #[serde(default)]
    measured_at_us: Option<u64>,
    /// Hardware fingerprint of the machine it was measured on (see `fingerprint`).
    #[serde(default)]
    fingerprint: Option<String>,
    /// Which participant of each pair touched the shared line first, and so where its
    /// memory lives (e.g. `initiator`: the lower-numbered CPU of the pair).
    #[serde(default)]
    measure_seconds: Option<f64>,
    #[serde(default)]
    first_touch: Option<String>,
    /// How pairs were scheduled: `serial` or `rounds` (disjoint pairs in parallel).
    #[serde(default)]
    mode: Option<String>,
    /// Per-pair spread and sample counts, one entry per measured pair (`a < b`); in a
    /// sparse matrix also one per inferred pair (`samples` 0, `inferred` true).
    #[serde(default, deserialize_with = "read::stats")]
    stats: Vec<PairStats>,
    #[serde(default)]
    pairs_measured: Option<usize>,
    #[serde(default)]
    pairs_total: Option<usize>,
    #[serde(default)]
    modelled_seconds: Option<f64>,
    /// Known flaws and measurement warnings, in words a user reads.
    #[serde(default, deserialize_with = "read::warnings")]
    warnings: Vec<String>,
    #[serde(default)]
    kept: Option<KeptCells>,
    #[serde(default)]
    stability: Option<Stability>,
    /// `omitted`: the statistics of inferred pairs were left out (see
    /// [`COMPACT_FROM_CPUS`]) and are made again from their cells.
    #[serde(default)]
    inferred_stats: Option<String>,
}

/// From this many CPUs on (past the 1,024 that bounded every matrix before), a matrix
/// file leaves out the statistics entries of its inferred pairs and says so
/// (`"inferred_stats": "omitted"`): each is its cell's figure three times, 0 samples,
/// `inferred` — made again from the cells when read. They are most of a sparse map's
/// pairs and about 110 bytes each as JSON: 0.9 GB of a 4,096-CPU file, over the
/// reader's limit, where the cells take 90 MB. Its cells are written to a hundredth of
/// a nanosecond ([`CellsOut`]). A map with no inferred pair (completed) also leaves
/// out the entries of pairs measured by one figure ([`PairStats::is_single_figure`]:
/// the simulated measurer's, and a completion's without the spinner's statistics):
/// they repeat their cell, and 8.4 M of them at 4,096 CPUs took 0.9 GB. Read back, such
/// a pair is a measured cell without statistics, as in an imported matrix; entries
/// with batches are kept. Smaller matrices are written as before,
/// so every file an earlier pinnerd wrote or could read is unchanged.
pub const COMPACT_FROM_CPUS: usize = 1025;

/// The JSON object as written: [`LatencyMatrix`]'s fields, borrowed.
#[derive(Serialize)]
struct MatrixOut<'a> {
    cpus: &'a [u32],
    latency_ns: CellsOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    primitive: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_at_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measure_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fingerprint: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_touch: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'a String>,
    #[serde(skip_serializing_if = "StatsOut::is_empty")]
    stats: StatsOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inferred_stats: Option<&'static str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    sparse: Option<&'a SparseCounts>,
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<&'a KeptCells>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stability: Option<&'a Stability>,
}

/// The cells written: as they are, or (compact) each to a hundredth of a nanosecond,
/// far below what a measurement resolves: a noisy figure then takes about 7 bytes
/// instead of about 18 (a 4,096-CPU simulated first map: 315 MB before).
struct CellsOut<'a> {
    cells: &'a Cells,
    rounded: bool,
}

impl Serialize for CellsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.rounded {
            return self.cells.serialize(s);
        }
        Rows {
            cells: self.cells,
            map: |v: f64| (v * 100.0).round() / 100.0,
        }
        .serialize(s)
    }
}

/// The statistics written: all of them, or those of measured pairs only, and of those
/// (`batches_only`) the ones with batches: see [`COMPACT_FROM_CPUS`].
struct StatsOut<'a> {
    all: &'a [PairStats],
    measured_only: bool,
    batches_only: bool,
}

impl StatsOut<'_> {
    fn written(&self) -> impl Iterator<Item = &PairStats> {
        let (measured_only, batches_only) = (self.measured_only, self.batches_only);
        self.all
            .iter()
            .filter(move |s| !(measured_only && s.inferred || batches_only && s.is_single_figure()))
    }
    fn is_empty(&self) -> bool {
        self.written().next().is_none()
    }
}

impl Serialize for StatsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.written())
    }
}

/// The statistics a matrix file holds (JSON or binary) and whether the inferred ones
/// were left out: see [`COMPACT_FROM_CPUS`].
pub(super) struct Written<'a> {
    out: StatsOut<'a>,
    /// `"inferred_stats": "omitted"`: made again from the cells when read.
    pub(super) omitted: bool,
}

impl Written<'_> {
    pub(super) fn stats(&self) -> impl Iterator<Item = &PairStats> {
        self.out.written()
    }
}

/// What [`Written`] holds for `m`.
pub(super) fn written_stats(m: &LatencyMatrix) -> Written<'_> {
    let compact = m.len() >= COMPACT_FROM_CPUS;
    let omitted = compact && m.stats.iter().any(|st| st.inferred);
    // Without inferred pairs, a pair with a cell and no entry is a measured one, so
    // entries that say no more than their cell can be left out.
    let batches_only = compact && !omitted;
    Written {
        out: StatsOut {
            all: &m.stats,
            measured_only: compact,
            batches_only,
        },
        omitted,
    }
}

impl Serialize for LatencyMatrix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let compact = self.len() >= COMPACT_FROM_CPUS;
        let written = written_stats(self);
        MatrixOut {
            cpus: &self.cpus,
            latency_ns: CellsOut {
                cells: &self.latency_ns,
                rounded: compact,
            },
            primitive: self.primitive.as_ref(),
            measured_at_us: self.measured_at_us,
            measure_seconds: self.measure_seconds,
            fingerprint: self.fingerprint.as_ref(),
            first_touch: self.first_touch.as_ref(),
            mode: self.mode.as_ref(),
            inferred_stats: written.omitted.then_some("omitted"),
            stats: written.out,
            sparse: self.sparse.as_deref(),
            warnings: &self.warnings,
            kept: self.kept.as_ref(),
            stability: self.stability.as_ref(),
        }
        .serialize(s)
    }
}

impl From<MatrixFile> for LatencyMatrix {
    /// The stored counts say only that the matrix is a sparse one: how many pairs are
    /// measured is read off its cells and statistics ([`LatencyMatrix::recount`]), so
    /// a damaged file cannot claim more pairs than it has, or fewer than it measured.
    fn from(f: MatrixFile) -> LatencyMatrix {
        let sparse = match (f.pairs_measured, f.pairs_total, f.modelled_seconds) {
            (Some(pairs_measured), Some(pairs_total), Some(modelled_seconds)) => {
                Some(Box::new(SparseCounts {
                    pairs_measured,
                    pairs_total,
                    modelled_seconds,
                }))
            }
            _ => None,
        };
        let mut m = LatencyMatrix {
            cpus: f.cpus,
            latency_ns: f.latency_ns,
            primitive: f.primitive,
            measured_at_us: f.measured_at_us,
            measure_seconds: f.measure_seconds,
            fingerprint: f.fingerprint,
            first_touch: f.first_touch,
            mode: f.mode,
            stats: f.stats,
            sparse,
            warnings: f.warnings,
            kept: f.kept,
            stability: f.stability,
        };
        if f.inferred_stats.as_deref() == Some("omitted") {
            m.restore_inferred_stats();
        }
        m.recount();
        m
    }
}

impl LatencyMatrix {
    /// Makes again the statistics a compact file left out (see [`COMPACT_FROM_CPUS`]):
    /// an inferred entry for every pair with a cell and no entry, in the order sparse
    /// measurement writes them (by column, then row), the stored entries in their place.
    pub(super) fn restore_inferred_stats(&mut self) {
        let n = self.len();
        if self.latency_ns.n() != n {
            return; // not square: validation says so
        }
        let mut stored: std::collections::HashMap<(u32, u32), PairStats> = self
            .stats
            .drain(..)
            .map(|s| ((s.a.min(s.b), s.a.max(s.b)), s))
            .collect();
        let mut all = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for j in 0..n {
            for i in j + 1..n {
                let (a, b) = (
                    self.cpus[i].min(self.cpus[j]),
                    self.cpus[i].max(self.cpus[j]),
                );
                if let Some(s) = stored.remove(&(a, b)) {
                    all.push(s);
                } else if let Some(v) = self.latency_ns.get(i, j) {
                    all.push(PairStats {
                        a,
                        b,
                        p10_ns: v,
                        median_ns: v,
                        p90_ns: v,
                        samples: 0,
                        discarded: 0,
                        round_trips: 0,
                        inferred: true,
                    });
                }
            }
        }
        // Entries of pairs outside the matrix stay, for validation to name.
        all.extend(stored.into_values());
        self.stats = all;
    }
}
