//! The matrix file's JSON object as read and as written: the sparse counts as plain
//! fields, the compact form of a large sparse map (its inferred statistics left out,
//! see [`COMPACT_FROM_CPUS`]) and the inferred pairs marked again when read; below
//! that, an entry per inferred pair written from [`LatencyMatrix::inferred`] and read
//! back into it.
//!
//! Must not touch: the bounds on reading an untrusted file (see `read`).

use serde::{Deserialize, Serialize};

use super::cells::Rows;
use super::{read, Cells, Inferred, KeptCells, LatencyMatrix, PairStats, SparseCounts, Stability};

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
    /// [`COMPACT_FROM_CPUS`]): every pair with a cell and no entry is marked inferred.
    #[serde(default)]
    inferred_stats: Option<String>,
}

/// From this many CPUs on (past the 1,024 that bounded every matrix before), a matrix
/// file leaves out the statistics entries of its inferred pairs and says so
/// (`"inferred_stats": "omitted"`): each is its cell's figure three times, 0 samples,
/// `inferred` — and every pair with a cell and no entry is marked inferred when read. They are most of a sparse map's
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

/// The statistics written: all of them (the inferred pairs' entries made from
/// [`LatencyMatrix::inferred`]), or those of measured pairs only, and of those
/// (`batches_only`) the ones with batches: see [`COMPACT_FROM_CPUS`].
struct StatsOut<'a> {
    all: std::borrow::Cow<'a, [PairStats]>,
    batches_only: bool,
}

impl StatsOut<'_> {
    fn written(&self) -> impl Iterator<Item = &PairStats> {
        let batches_only = self.batches_only;
        self.all
            .iter()
            .filter(move |s| !(batches_only && s.is_single_figure()))
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
    /// `"inferred_stats": "omitted"`: marked inferred again when read.
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
    let any_inferred = m.inferred_count() > 0;
    let omitted = compact && any_inferred;
    // Without inferred pairs, a pair with a cell and no entry is a measured one, so
    // entries that say no more than their cell can be left out.
    let batches_only = compact && !omitted;
    // A sparse map's entries are listed in its order of pairs, inferred or not (see
    // `stats_with_inferred`), as sparse measurement made them and completion kept them.
    let all = if (any_inferred || m.sparse.is_some()) && !compact {
        std::borrow::Cow::Owned(m.stats_with_inferred())
    } else {
        std::borrow::Cow::Borrowed(&m.stats[..])
    };
    Written {
        out: StatsOut { all, batches_only },
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
        let sparse = SparseCounts::from_fields(f.pairs_measured, f.pairs_total, f.modelled_seconds);
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
            inferred: Inferred::default(),
            sparse,
            warnings: f.warnings,
            kept: f.kept,
            stability: f.stability,
        };
        m.take_inferred_entries();
        if f.inferred_stats.as_deref() == Some("omitted") {
            m.restore_inferred();
        }
        m.recount();
        m
    }
}

impl LatencyMatrix {
    /// Moves the entries listed `inferred` (as a file lists them) out of [`Self::stats`] into
    /// [`Self::inferred`] (an entry of a pair outside the matrix stays, for
    /// validation to name).
    pub fn take_inferred_entries(&mut self) {
        if !self.stats.iter().any(|s| s.inferred) {
            return;
        }
        let n = self.len();
        let square = self.latency_ns.n() == n;
        let row: std::collections::HashMap<u32, usize> =
            self.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let mut stats = std::mem::take(&mut self.stats);
        stats.retain(|s| {
            let at = (row.get(&s.a), row.get(&s.b));
            match at {
                (Some(&i), Some(&j)) if s.inferred && square && i != j => {
                    self.inferred.set(n, i, j, true);
                    false
                }
                _ => true,
            }
        });
        self.stats = stats;
    }

    /// Marks inferred what a compact file left out (see [`COMPACT_FROM_CPUS`]): every
    /// pair with a cell and no entry.
    pub(super) fn restore_inferred(&mut self) {
        let n = self.len();
        if self.latency_ns.n() != n {
            return; // not square: validation says so
        }
        let row: std::collections::HashMap<u32, usize> =
            self.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let mut listed = Inferred::default();
        for s in &self.stats {
            if let (Some(&i), Some(&j)) = (row.get(&s.a), row.get(&s.b)) {
                listed.set(n, i, j, true);
            }
        }
        for i in 0..n {
            for j in i + 1..n {
                if self.latency_ns.get(i, j).is_some() && !listed.get(i, j) {
                    self.inferred.set(n, i, j, true);
                }
            }
        }
    }

    /// The statistics a file of at most 1,024 CPUs lists: an inferred entry (its
    /// cell's figure three times, 0 samples) for every inferred pair, in the order
    /// sparse measurement lists its pairs (row 0's pairs first, then row 1's), the
    /// measured entries in their place; entries of pairs outside the matrix last.
    pub(super) fn stats_with_inferred(&self) -> Vec<PairStats> {
        let n = self.len();
        let row: std::collections::HashMap<u32, usize> =
            self.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let mut stored: std::collections::HashMap<(usize, usize), &PairStats> =
            std::collections::HashMap::with_capacity(self.stats.len());
        let mut outside = Vec::new();
        for s in &self.stats {
            match (row.get(&s.a), row.get(&s.b)) {
                (Some(&i), Some(&j)) if i != j && !stored.contains_key(&(i.min(j), i.max(j))) => {
                    stored.insert((i.min(j), i.max(j)), s);
                }
                _ => outside.push(s.clone()),
            }
        }
        let mut all = Vec::with_capacity(self.stats.len() + self.inferred_count());
        for i in 0..n {
            for j in i + 1..n {
                if let Some(s) = stored.remove(&(i, j)) {
                    all.push(s.clone());
                } else if self.is_inferred(i, j) {
                    let (a, b) = (
                        self.cpus[i].min(self.cpus[j]),
                        self.cpus[i].max(self.cpus[j]),
                    );
                    let v = self.latency_ns.get(i, j).unwrap_or(f64::NAN);
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
        all.extend(outside);
        all
    }
}
