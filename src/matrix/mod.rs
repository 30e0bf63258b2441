//! The latency matrix: which CPUs were measured and the one-way latency between each
//! pair, plus how it was obtained. This is the file format the daemon stores and every
//! `--matrix FILE` reads.
//!
//! Owns: the `LatencyMatrix` type, its JSON format, import of core-to-core-latency's CSV
//! (lower triangle, first row empty) and the warnings about known flaws of imported data.
//! Also: CSV export in core-to-core-latency's exact layout, per-pair statistics, a summary
//! (min/median/max, latency levels), the checks of a matrix against this machine
//! ([`LatencyMatrix::check_against`]), rendering (`render`: terminal heatmap, SVG), the
//! daemon's on-disk store (`store`), keeping cells across hotplug (`keep`: which pairs
//! a stored matrix lacks for the CPUs online now) and the bounded reading of untrusted
//! files (`read`: size, type and count limits before and while parsing).
//!
//! Must not touch: measurement (see `measure`) or placement (see `placement`).

pub mod keep;
pub mod read;
pub mod render;
pub mod store;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// One-way core-to-core latencies in nanoseconds.
///
/// Read through [`MatrixFile`], which holds the sparse counts as plain fields: a
/// flattened field would make serde keep every unknown key's value in memory. Written
/// through [`MatrixOut`], which leaves out the statistics of inferred pairs of a matrix
/// past [`COMPACT_FROM_CPUS`] CPUs (see there).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "MatrixFile")]
pub struct LatencyMatrix {
    /// Linux CPU ids, in row order.
    #[serde(deserialize_with = "read::cpus")]
    pub cpus: Vec<u32>,
    /// `latency_ns[i][j]`: one-way latency between `cpus[i]` and `cpus[j]`. Symmetric;
    /// the diagonal is `None` (null in JSON). A missing pair is also `None`.
    #[serde(deserialize_with = "read::cells")]
    pub latency_ns: Vec<Vec<Option<f64>>>,
    /// Measurement primitive, e.g. `cas` or `load-store`; `None` when unknown (imports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primitive: Option<String>,
    /// When it was measured, in microseconds since the Unix epoch; `None` for imports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_at_us: Option<u64>,
    /// How long measuring took (after the load guard let it start), in seconds; `None`
    /// for imports and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_seconds: Option<f64>,
    /// Hardware fingerprint of the machine it was measured on (see `fingerprint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Which participant of each pair touched the shared line first, and so where its
    /// memory lives (e.g. `initiator`: the lower-numbered CPU of the pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_touch: Option<String>,
    /// How pairs were scheduled: `serial` or `rounds` (disjoint pairs in parallel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Per-pair spread and sample counts, one entry per measured pair (`a < b`); in a
    /// sparse matrix also one per inferred pair (`samples` 0, `inferred` true).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "read::stats"
    )]
    pub stats: Vec<PairStats>,
    /// Sparse mode's counts (`pairs_measured`, `pairs_total`, `modelled_seconds` in
    /// the JSON object itself); `None` for a full matrix.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<Box<SparseCounts>>,
    /// Known flaws and measurement warnings, in words a user reads.
    #[serde(default, deserialize_with = "read::warnings")]
    pub warnings: Vec<String>,
    /// CPUs this measurement stayed off (see `measure::around`): every cell with one of
    /// them is an earlier measurement's. `None` when every CPU was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptCells>,
    /// What the repeat check at the end of the measurement found (`measure::repeat`);
    /// `None`: not checked (imports, files written before the check existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stability: Option<Stability>,
}

/// The line `plan`, `compare`, `report` and the daemon's status print when the host
/// moved the vCPUs during or after the measurement: a contract, printed exactly.
pub const HOST_MOVES_VCPUS: &str = "the host moves vCPUs: latency placement off";

/// The same finding where pinnerd cannot tell it runs in a virtual machine (no
/// `hypervisor` flag): the cause is not known to be a host, only that repeats disagree.
pub const REPEATS_DISAGREE: &str = "repeated measurements disagree: latency placement off";

/// Whether a matrix's figures held when measured again ([`Stability::verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The repeats agree with the matrix within the bound.
    Stable,
    /// Too many repeats disagree, or a CPU's nearest pair moved: the figures describe
    /// where the vCPUs sat for a moment, not the machine. Placement ignores them.
    Unstable,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Stable => "stable",
            Verdict::Unstable => "unstable",
        })
    }
}

/// The evidence of the repeat check: a sample of pairs measured again after the
/// matrix, each compared with its cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    /// Pairs measured again that gave a figure.
    pub repeated: usize,
    /// Of those, pairs whose repeat is further than `tolerance` (relative) from the cell.
    pub disagreeing: usize,
    /// CPUs whose nearest pair, measured again, disagrees and is now further than the
    /// CPU's next pair in the matrix: the nearest-pair structure changed.
    #[serde(default)]
    pub nearest_moved: usize,
    /// Relative difference beyond which a repeat disagrees with its cell.
    pub tolerance: f64,
    /// Largest share of disagreeing repeats a stable matrix may have.
    pub bound: f64,
    pub verdict: Verdict,
    /// Whether the machine said it runs under a hypervisor (`/sys/hypervisor/type` or
    /// the `hypervisor` CPU flag); it words the cause of an unstable verdict.
    #[serde(default)]
    pub vm: bool,
    /// What made the verdict unstable, set by whoever found it (the repeat check or the
    /// daemon's drift probe), in words; `None` when stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Stability {
    /// The line to print when latency placement is off for this evidence; `None` when
    /// the matrix held.
    pub fn latency_off(&self) -> Option<&'static str> {
        match (self.verdict, self.vm) {
            (Verdict::Stable, _) => None,
            (Verdict::Unstable, true) => Some(HOST_MOVES_VCPUS),
            (Verdict::Unstable, false) => Some(REPEATS_DISAGREE),
        }
    }
}

/// The cells a measurement kept from an earlier one, because it stayed off their CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptCells {
    /// The CPUs not measured this time (kernel list format in JSON).
    pub cpus: CpuSet,
    /// Cells (pairs) with one of those CPUs that hold an earlier figure.
    pub pairs: usize,
    /// Pairs with one of those CPUs that no measurement has a figure for.
    pub missing: usize,
    /// Why each CPU was left alone, e.g. `CPU 1: exclusive rule "feed"`.
    pub reason: String,
}

/// The JSON object as read: [`LatencyMatrix`]'s fields, with the sparse counts as
/// three plain fields (present together or not at all).
#[derive(Deserialize)]
struct MatrixFile {
    /// Linux CPU ids, in row order.
    #[serde(deserialize_with = "read::cpus")]
    cpus: Vec<u32>,
    /// `latency_ns[i][j]`: one-way latency between `cpus[i]` and `cpus[j]`. Symmetric;
    /// the diagonal is `None` (null in JSON). A missing pair is also `None`.
    #[serde(deserialize_with = "read::cells")]
    latency_ns: Vec<Vec<Option<f64>>>,
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
/// reader's limit, where the cells take 90 MB. Smaller matrices are written as before,
/// so every file an earlier pinnerd wrote or could read is unchanged.
pub const COMPACT_FROM_CPUS: usize = 1025;

/// The JSON object as written: [`LatencyMatrix`]'s fields, borrowed.
#[derive(Serialize)]
struct MatrixOut<'a> {
    cpus: &'a [u32],
    latency_ns: &'a [Vec<Option<f64>>],
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

/// The statistics written: all of them, or those of measured pairs only.
struct StatsOut<'a> {
    all: &'a [PairStats],
    measured_only: bool,
}

impl StatsOut<'_> {
    fn written(&self) -> impl Iterator<Item = &PairStats> {
        let measured_only = self.measured_only;
        self.all
            .iter()
            .filter(move |s| !(measured_only && s.inferred))
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

impl Serialize for LatencyMatrix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let compact = self.len() >= COMPACT_FROM_CPUS;
        let omitted = compact && self.stats.iter().any(|st| st.inferred);
        MatrixOut {
            cpus: &self.cpus,
            latency_ns: &self.latency_ns,
            primitive: self.primitive.as_ref(),
            measured_at_us: self.measured_at_us,
            measure_seconds: self.measure_seconds,
            fingerprint: self.fingerprint.as_ref(),
            first_touch: self.first_touch.as_ref(),
            mode: self.mode.as_ref(),
            stats: StatsOut {
                all: &self.stats,
                measured_only: compact,
            },
            inferred_stats: omitted.then_some("omitted"),
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

/// How one pair's figure was obtained: the spread of its batch estimates (each the mean
/// one-way latency over `round_trips` round trips) and how many batches were kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairStats {
    pub a: u32,
    pub b: u32,
    pub p10_ns: f64,
    pub median_ns: f64,
    pub p90_ns: f64,
    /// Batches kept.
    pub samples: u32,
    /// Batches thrown away (a context switch or a migration during the batch).
    #[serde(default)]
    pub discarded: u32,
    /// Round trips per batch.
    pub round_trips: u32,
    /// Not measured: filled from its block by sparse measurement (`samples` is 0).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inferred: bool,
}

/// How much of a sparse matrix was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparseCounts {
    /// Pairs actually measured (the others are inferred from their block).
    pub pairs_measured: usize,
    /// All pairs of the matrix, `n(n-1)/2`.
    pub pairs_total: usize,
    /// What the run takes on real hardware by the time model in `benches/README.md`
    /// (with `--simulate`, what the simulated run would have taken).
    pub modelled_seconds: f64,
}

/// One latency level: a run of cell values with no jump larger than the gap ratio.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    pub min_ns: f64,
    pub median_ns: f64,
    pub max_ns: f64,
    pub pairs: usize,
}

/// Min/median/max over the measured pairs and the levels found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub pairs: usize,
    pub missing: usize,
    pub min_ns: f64,
    pub median_ns: f64,
    pub max_ns: f64,
    pub levels: Vec<Level>,
}

/// Most CPUs a matrix may have, the one bound for measuring, storing, reading,
/// planning, the report and the bus: 8,192, the most CPUs a kernel may have (x86-64
/// `MAXSMP`, Debian's `NR_CPUS`; the same as [`crate::cpuset::MAX_CPU_ID`] + 1). A
/// `--cpus` list of more CPUs is refused before measuring starts. What a matrix costs
/// by size (memory, file, plan time, the report page) is in `benches/README.md`.
pub const MAX_MATRIX_CPUS: usize = crate::cpuset::MAX_CPU_ID as usize + 1;

/// Largest matrix written as pretty JSON (see [`LatencyMatrix::to_json_text`]).
pub const PRETTY_CPUS: usize = 256;

/// More CPUs than a matrix may have ([`MAX_MATRIX_CPUS`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cpus} CPUs to measure: pinnerd measures, stores and reads matrices of at most {MAX_MATRIX_CPUS} CPUs")]
pub struct TooManyCpus {
    pub cpus: usize,
}

/// Whether a matrix of `cpus` CPUs is within [`MAX_MATRIX_CPUS`].
pub fn check_cpu_count(cpus: usize) -> Result<(), TooManyCpus> {
    if cpus > MAX_MATRIX_CPUS {
        return Err(TooManyCpus { cpus });
    }
    Ok(())
}

/// A matrix file that cannot be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file's content is malformed at a given line (1-based).
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The file parsed but its content is inconsistent.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// The file is not read at all, or not to its end: not a regular file, too large,
    /// a string or an array over its limit (see [`read`]).
    #[error("{path}: refused: {reason}")]
    Refused { path: PathBuf, reason: String },
}

impl LatencyMatrix {
    /// A matrix over `cpus` with every off-diagonal cell from `f(i, j)` (indices).
    pub fn from_fn(cpus: Vec<u32>, mut f: impl FnMut(usize, usize) -> f64) -> LatencyMatrix {
        let n = cpus.len();
        let mut latency_ns = vec![vec![None; n]; n];
        #[allow(clippy::needless_range_loop)] // symmetric fill needs both indices
        for i in 0..n {
            for j in 0..i {
                let v = f(i, j);
                latency_ns[i][j] = Some(v);
                latency_ns[j][i] = Some(v);
            }
        }
        LatencyMatrix::new(cpus, latency_ns)
    }

    /// A test machine of CPUs `0..n` in nested groups of 2, 4, 8…: `ns[0]` between the
    /// two CPUs of a pair, `ns[1]` inside a four but across pairs, and so on; the last
    /// figure for every pair of CPUs further apart.
    #[cfg(test)]
    pub(crate) fn nested(n: u32, ns: &[f64]) -> LatencyMatrix {
        LatencyMatrix::from_fn((0..n).collect(), |i, j| {
            // The highest bit in which i and j differ: 0 in a pair, 1 in a four…
            let level = (i ^ j).ilog2() as usize;
            ns[level.min(ns.len() - 1)]
        })
    }

    /// A test machine of CPUs `0..n` in two groups the numbering interleaves, the even
    /// CPUs and the odd ones: `near` inside a group, `far` across.
    #[cfg(test)]
    pub(crate) fn interleaved(n: u32, near: f64, far: f64) -> LatencyMatrix {
        LatencyMatrix::from_fn(
            (0..n).collect(),
            |i, j| {
                if i % 2 == j % 2 {
                    near
                } else {
                    far
                }
            },
        )
    }

    /// A matrix with the given cells and no metadata.
    pub fn new(cpus: Vec<u32>, latency_ns: Vec<Vec<Option<f64>>>) -> LatencyMatrix {
        LatencyMatrix {
            cpus,
            latency_ns,
            primitive: None,
            measured_at_us: None,
            measure_seconds: None,
            fingerprint: None,
            first_touch: None,
            mode: None,
            stats: Vec::new(),
            sparse: None,
            warnings: Vec::new(),
            kept: None,
            stability: None,
        }
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Row index of a CPU id.
    pub fn index_of(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }

    /// Latency between two row indices.
    pub fn at(&self, i: usize, j: usize) -> Option<f64> {
        self.latency_ns.get(i)?.get(j).copied().flatten()
    }

    /// Pairs with a measured figure (a cell whose statistics entry does not say
    /// `inferred`) and all pairs, `n(n-1)/2`: what the sparse counts must say. Safe on
    /// a matrix not validated yet (a short row has no figure there).
    pub fn measured_pairs(&self) -> (usize, usize) {
        let n = self.cpus.len();
        let total = n * n.saturating_sub(1) / 2;
        let row: std::collections::HashMap<u32, usize> =
            self.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let inferred: std::collections::HashSet<(usize, usize)> = self
            .stats
            .iter()
            .filter(|s| s.inferred)
            .filter_map(|s| {
                let (i, j) = (*row.get(&s.a)?, *row.get(&s.b)?);
                Some((i.min(j), i.max(j)))
            })
            .collect();
        let mut measured = 0;
        for i in 0..n {
            for j in i + 1..n {
                if self.at(i, j).is_some() && !inferred.contains(&(i, j)) {
                    measured += 1;
                }
            }
        }
        (measured, total)
    }

    /// Makes again the statistics a compact file left out (see [`COMPACT_FROM_CPUS`]):
    /// an inferred entry for every pair with a cell and no entry, in the order sparse
    /// measurement writes them (by column, then row), the stored entries in their place.
    fn restore_inferred_stats(&mut self) {
        let n = self.len();
        if self.latency_ns.len() != n || self.latency_ns.iter().any(|r| r.len() != n) {
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
                } else if let Some(v) = self.latency_ns[i][j] {
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

    /// Sets the sparse counts (when there are any) to what the cells and statistics
    /// say ([`Self::measured_pairs`]), instead of what a file or an earlier matrix said.
    pub fn recount(&mut self) {
        if self.sparse.is_none() {
            return;
        }
        let (measured, total) = self.measured_pairs();
        if let Some(sp) = self.sparse.as_mut() {
            sp.pairs_measured = measured;
            sp.pairs_total = total;
        }
    }

    /// The line saying latency placement is off, when the repeat check (or a drift
    /// probe) found this matrix unstable; `None` for a stable or unchecked matrix.
    pub fn latency_off(&self) -> Option<&'static str> {
        self.stability.as_ref().and_then(Stability::latency_off)
    }

    /// The JSON text of a matrix file (`measure --out`, the report's copy): pretty up to
    /// [`PRETTY_CPUS`] CPUs, where a person reads it, compact beyond, where pretty
    /// printing would triple the file (a cell on its own indented line).
    pub fn to_json_text(&self) -> serde_json::Result<String> {
        let text = if self.len() <= PRETTY_CPUS {
            serde_json::to_string_pretty(self)?
        } else {
            serde_json::to_string(self)?
        };
        Ok(text + "\n")
    }

    /// Latency between two CPU ids.
    pub fn between(&self, a: u32, b: u32) -> Option<f64> {
        self.at(self.index_of(a)?, self.index_of(b)?)
    }

    /// Reads our JSON or core-to-core-latency's CSV, chosen by content: a file whose
    /// first non-blank character is `{` is JSON. Bounded (see [`read`]): FIFOs, devices
    /// and other non-regular files are refused before opening, files over the size
    /// limit before reading, matrices over [`MAX_MATRIX_CPUS`] CPUs before their
    /// cells are allocated.
    pub fn load(path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let (mut file, size) = read::open_regular(path)?;
        if read::is_json(&mut file, path)? {
            let m = read::json_from_reader(file, path)?;
            m.validate().map_err(|message| MatrixError::Invalid {
                path: path.to_owned(),
                message,
            })?;
            Ok(m)
        } else {
            Self::from_csv(&read::read_csv_text(file, size, path)?, path)
        }
    }

    /// Parses the JSON format and checks it is square and symmetric with finite,
    /// non-negative cells.
    pub fn from_json(text: &str, path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let m: LatencyMatrix = serde_json::from_str(text).map_err(|e| read::json_error(e, path))?;
        m.validate().map_err(|message| MatrixError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(m)
    }

    /// Parses core-to-core-latency's `--csv`: row `i` holds the pairs `(i, j < i)`, the
    /// first row is all empty, CPU ids are the row numbers. Flaws it knows about
    /// (quantised values, zero cells) become warnings.
    pub fn from_csv(text: &str, path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let err = |line: usize, message: String| MatrixError::Parse {
            path: path.to_owned(),
            line,
            message,
        };
        let rows: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        if rows.is_empty() {
            return Err(err(
                1,
                "empty file: expected a lower-triangle CSV matrix".into(),
            ));
        }
        // The first row's cell count is the number of CPUs; a file with fewer rows was
        // cut short, one with more is not a square matrix.
        let n = rows[0].1.split(',').count();
        if n > MAX_MATRIX_CPUS {
            return Err(err(
                rows[0].0,
                format!(
                    "the first row has {n} cells: more than the {} CPUs a matrix may have",
                    MAX_MATRIX_CPUS
                ),
            ));
        }
        if rows.len() < n {
            let last = rows[rows.len() - 1].0;
            return Err(err(
                last + 1,
                format!(
                    "the file ends after {} of {n} rows (the first row has {n} cells): truncated?",
                    rows.len()
                ),
            ));
        }
        if rows.len() > n {
            return Err(err(
                rows[n].0,
                format!("more rows than the {n} cells of the first row: not a square matrix"),
            ));
        }
        let mut latency_ns = vec![vec![None; n]; n];
        for (i, &(line, row)) in rows.iter().enumerate() {
            let cells: Vec<&str> = row.split(',').collect();
            if cells.len() != n {
                return Err(err(
                    line,
                    format!(
                        "expected {n} comma-separated cells (one per CPU), found {}",
                        cells.len()
                    ),
                ));
            }
            for (j, cell) in cells.iter().enumerate() {
                let cell = cell.trim();
                if j >= i {
                    if !cell.is_empty() {
                        return Err(err(
                            line,
                            format!(
                                "cell {} is on or above the diagonal and must be empty",
                                j + 1
                            ),
                        ));
                    }
                    continue;
                }
                if cell.is_empty() {
                    return Err(err(
                        line,
                        format!("cell {} is empty below the diagonal", j + 1),
                    ));
                }
                if cell.eq_ignore_ascii_case("nan") {
                    // What `to_csv` writes for a pair it has no figure for.
                    continue;
                }
                let v: f64 = cell
                    .parse()
                    .map_err(|_| err(line, format!("cell {}: {cell:?} is not a number", j + 1)))?;
                if !v.is_finite() || v < 0.0 {
                    return Err(err(line, format!("cell {}: {v} is not a latency", j + 1)));
                }
                latency_ns[i][j] = Some(v);
                latency_ns[j][i] = Some(v);
            }
        }
        let mut m = LatencyMatrix::new((0..n as u32).collect(), latency_ns);
        m.warnings = m.import_flaws();
        Ok(m)
    }

    /// Structural checks shared by every reader: square, symmetric, finite, >= 0,
    /// distinct CPU ids.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.cpus.len();
        if n > MAX_MATRIX_CPUS {
            return Err(format!(
                "{n} CPUs: more than the {MAX_MATRIX_CPUS} a matrix may have"
            ));
        }
        let mut seen = CpuSet::new();
        for &c in &self.cpus {
            if !seen.insert(c) {
                return Err(format!("CPU {c} is listed twice in `cpus`"));
            }
        }
        if self.latency_ns.len() != n {
            return Err(format!(
                "`latency_ns` has {} rows but `cpus` lists {n} CPUs",
                self.latency_ns.len()
            ));
        }
        for (i, row) in self.latency_ns.iter().enumerate() {
            if row.len() != n {
                return Err(format!(
                    "row {i} of `latency_ns` has {} cells, expected {n}",
                    row.len()
                ));
            }
            for (j, cell) in row.iter().enumerate() {
                if let Some(v) = cell {
                    if !v.is_finite() || *v < 0.0 {
                        return Err(format!(
                            "cell ({}, {}) = {v} is not a latency (NaN, infinite or negative)",
                            self.cpus[i], self.cpus[j]
                        ));
                    }
                }
                if i != j && self.latency_ns[j][i] != *cell {
                    return Err(format!(
                        "matrix is not symmetric at CPUs {} and {}",
                        self.cpus[i], self.cpus[j]
                    ));
                }
            }
        }
        if let Some(d) = self.measure_seconds {
            if !d.is_finite() || d < 0.0 {
                return Err(format!("`measure_seconds` {d} is not a duration"));
            }
        }
        for (k, s) in self.stats.iter().enumerate() {
            if !seen.contains(s.a) || !seen.contains(s.b) || s.a == s.b {
                return Err(format!(
                    "stats entry {k} names the pair ({}, {}), which is not a pair of `cpus`",
                    s.a, s.b
                ));
            }
            let ordered = s.p10_ns <= s.median_ns && s.median_ns <= s.p90_ns;
            let finite = [s.p10_ns, s.median_ns, s.p90_ns]
                .iter()
                .all(|v| v.is_finite() && *v >= 0.0);
            if !finite || !ordered {
                return Err(format!(
                    "stats entry {k} for CPUs {} and {}: p10/median/p90 {}/{}/{} are not ordered latencies",
                    s.a, s.b, s.p10_ns, s.median_ns, s.p90_ns
                ));
            }
        }
        Ok(())
    }

    /// The statistics of the pair `(a, b)` in either order.
    pub fn stats_for(&self, a: u32, b: u32) -> Option<&PairStats> {
        self.stats
            .iter()
            .find(|s| (s.a == a && s.b == b) || (s.a == b && s.b == a))
    }

    /// Every off-diagonal value once (lower triangle).
    pub fn cells(&self) -> Vec<f64> {
        (0..self.len())
            .flat_map(|i| (0..i).filter_map(move |j| self.at(i, j)))
            .collect()
    }

    /// core-to-core-latency's `--csv` layout, byte for byte: one row per CPU, row `i`
    /// holds the pairs `(i, j < i)`, every other cell empty (so the first row is all
    /// commas), numbers in Rust's shortest round-trip form. The CPU ids are not part of
    /// that format: rows are positions in `cpus`. A missing pair is written as `nan`,
    /// which that format's readers (pandas, numpy) read as "no value".
    pub fn to_csv(&self) -> String {
        let n = self.len();
        let mut out = String::new();
        for i in 0..n {
            for j in 0..n {
                if j > 0 {
                    out.push(',');
                }
                if j < i {
                    match self.at(i, j) {
                        Some(v) => out.push_str(&v.to_string()),
                        None => out.push_str("nan"),
                    }
                }
            }
            out.push('\n');
        }
        out
    }

    /// Min/median/max over the pairs and the latency levels: sorted cell values split
    /// wherever one value exceeds the previous by more than 35%.
    pub fn summary(&self) -> Summary {
        let mut cells = self.cells();
        let total = self.len() * self.len().saturating_sub(1) / 2;
        cells.sort_by(f64::total_cmp);
        let median = |v: &[f64]| -> f64 {
            if v.is_empty() {
                f64::NAN
            } else if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                crate::stats::midpoint(v[v.len() / 2 - 1], v[v.len() / 2])
            }
        };
        let mut levels = Vec::new();
        let mut start = 0;
        for k in 1..=cells.len() {
            let split = k == cells.len() || cells[k] > cells[k - 1] * 1.35 + 0.5;
            if split {
                let run = &cells[start..k];
                levels.push(Level {
                    min_ns: run[0],
                    median_ns: median(run),
                    max_ns: run[run.len() - 1],
                    pairs: run.len(),
                });
                start = k;
            }
        }
        Summary {
            pairs: cells.len(),
            missing: total - cells.len(),
            min_ns: cells.first().copied().unwrap_or(f64::NAN),
            median_ns: median(&cells),
            max_ns: cells.last().copied().unwrap_or(f64::NAN),
            levels,
        }
    }

    /// Warnings about using this matrix on a machine whose online CPUs are `online`:
    /// a matrix too small for the machine, CPUs it names that are not online here, and
    /// pairs it lacks. Every command that takes `--matrix FILE` shows these next to
    /// [`LatencyMatrix::import_flaws`].
    pub fn check_against(&self, online: &CpuSet) -> Vec<String> {
        let mut warnings = Vec::new();
        let ours: CpuSet = self.cpus.iter().copied().collect();
        let unknown = ours.difference(online);
        if !unknown.is_empty() {
            warnings.push(format!(
                "the matrix names CPUs {unknown} that are not online on this machine (online: {online}): it was measured elsewhere or with other CPUs online"
            ));
        }
        let uncovered = online.difference(&ours);
        if !uncovered.is_empty() {
            warnings.push(format!(
                "the matrix is too small for this machine: it covers {} CPUs, this machine has {} online; CPUs {uncovered} have no figures",
                self.len(),
                online.len()
            ));
        }
        let total = self.len() * self.len().saturating_sub(1) / 2;
        let missing = total - self.cells().len();
        if missing > 0 {
            warnings.push(format!("{missing} of {total} pairs have no figure"));
        }
        warnings
    }

    /// Everything a user of `--matrix FILE` should hear on this machine: the flaws found
    /// at import (or recorded at measurement) and [`LatencyMatrix::check_against`].
    pub fn import_warnings(&self, online: &CpuSet) -> Vec<String> {
        let mut w = self.warnings.clone();
        w.extend(self.check_against(online));
        w
    }

    /// Warnings about flaws seen in published matrices: exact zero cells (a timer too
    /// coarse to see the latency) and values that are all multiples of one quantum.
    pub fn import_flaws(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        // One pass over the cells, nothing the size of the matrix allocated: a 1024-CPU
        // import already holds the matrix and its text.
        let cells = || (0..self.len()).flat_map(|i| (0..i).filter_map(move |j| self.at(i, j)));
        let (mut count, mut zeros) = (0usize, 0usize);
        // Quantised means at most a quarter of min(cells, 64) distinct values, so at most
        // 16 matter: past 16 the count stops.
        let mut distinct: Vec<f64> = Vec::with_capacity(17);
        for v in cells() {
            count += 1;
            if v == 0.0 {
                zeros += 1;
            }
            let r = (v * 1000.0).round() / 1000.0;
            if distinct.len() <= 16 && !distinct.contains(&r) {
                distinct.push(r);
            }
        }
        if zeros > 0 {
            warnings.push(format!(
                "{zeros} cell(s) are exactly 0 ns: the timer was too coarse to see them; they are not real latencies"
            ));
        }
        if count >= 16 && distinct.len() * 4 <= count.min(64) {
            warnings.push(format!(
                "values are quantised: only {} distinct values in {count} cells (coarse timer); small differences are invisible",
                distinct.len(),
            ));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("m.csv")
    }

    #[test]
    fn csv_lower_triangle() {
        let m = LatencyMatrix::from_csv(",,\n10.5,,\n20,30,\n", p()).unwrap();
        assert_eq!(m.cpus, vec![0, 1, 2]);
        assert_eq!(m.at(1, 0), Some(10.5));
        assert_eq!(m.at(0, 1), Some(10.5));
        assert_eq!(m.between(2, 1), Some(30.0));
        assert_eq!(m.at(1, 1), None);
        m.validate().unwrap();
    }

    #[test]
    fn csv_errors_name_file_and_line() {
        let e = LatencyMatrix::from_csv(",,\n10,,\n20,abc,\n", p()).unwrap_err();
        assert_eq!(e.to_string(), "m.csv:3: cell 2: \"abc\" is not a number");
        let e = LatencyMatrix::from_csv(",,\n10,,\n", p()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.csv:3: the file ends after 2 of 3 rows (the first row has 3 cells): truncated?"
        );
        let e = LatencyMatrix::from_csv(",,\n10,,\n20,30\n", p()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.csv:3: expected 3 comma-separated cells (one per CPU), found 2"
        );
        let e = LatencyMatrix::from_csv(",\n10,\n20,\n", p()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.csv:3: more rows than the 2 cells of the first row: not a square matrix"
        );
        let e = LatencyMatrix::from_csv("", p()).unwrap_err();
        assert!(e.to_string().starts_with("m.csv:1: empty file"), "{e}");
        let e = LatencyMatrix::from_csv(",\n-1,\n", p()).unwrap_err();
        assert_eq!(e.to_string(), "m.csv:2: cell 1: -1 is not a latency");
    }

    #[test]
    fn json_round_trip_and_validation() {
        let m = LatencyMatrix::from_fn(vec![0, 2, 5], |i, j| (i * 10 + j) as f64);
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
        let bad = r#"{"cpus":[0,1],"latency_ns":[[null,1.0],[2.0,null]]}"#;
        let e = LatencyMatrix::from_json(bad, p()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.csv: matrix is not symmetric at CPUs 0 and 1"
        );
        let mut timed = m.clone();
        timed.measure_seconds = Some(12.5);
        let text = serde_json::to_string(&timed).unwrap();
        assert!(text.contains("\"measure_seconds\":12.5"), "{text}");
        assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), timed);
        let e = LatencyMatrix::from_json(&text.replace("12.5", "-1"), p()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.csv: `measure_seconds` -1 is not a duration"
        );
        let e = LatencyMatrix::from_json("{\"cpus\": [0,", p()).unwrap_err();
        assert!(e.to_string().starts_with("m.csv:1: column"), "{e}");
    }

    #[test]
    fn zero_and_quantised_cells_warn() {
        let m = LatencyMatrix::from_fn(
            (0..8).collect(),
            |i, j| if i == 7 && j == 0 { 0.0 } else { 5.0 },
        );
        let w = m.import_flaws();
        assert!(
            w.iter().any(|w| w.contains("1 cell(s) are exactly 0 ns")),
            "{w:?}"
        );
        assert!(w.iter().any(|w| w.contains("quantised")), "{w:?}");
        let smooth = LatencyMatrix::from_fn((0..8).collect(), |i, j| {
            10.0 + i as f64 * 1.37 + j as f64 * 0.11
        });
        assert!(smooth.import_flaws().is_empty());
    }

    #[test]
    fn csv_export_is_core_to_core_latency_layout() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/c2c");
        let path = Path::new(dir).join("Intel_Core_i5-4590_CPU_at_3.30GHz.csv");
        let text = std::fs::read_to_string(&path).unwrap();
        let m = LatencyMatrix::load(&path).unwrap();
        assert_eq!(m.to_csv(), text, "byte-for-byte round trip");
        let mut gap = LatencyMatrix::from_fn(vec![3, 7, 9], |i, j| (i + j) as f64 + 0.5);
        gap.latency_ns[2][0] = None;
        gap.latency_ns[0][2] = None;
        assert_eq!(gap.to_csv(), ",,\n1.5,,\nnan,3.5,\n");
        let back = LatencyMatrix::from_csv(&gap.to_csv(), p()).unwrap();
        assert_eq!(back.at(2, 0), None);
        assert_eq!(back.at(2, 1), Some(3.5));
    }

    #[test]
    fn check_against_names_small_and_foreign_matrices() {
        let m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 20.0);
        let online: CpuSet = "0-3".parse().unwrap();
        let w = m.check_against(&online);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("too small"), "{w:?}");
        assert!(w[0].contains("CPUs 2-3 have no figures"), "{w:?}");
        let w = m.check_against(&"0".parse().unwrap());
        assert!(w[0].contains("CPUs 1 that are not online"), "{w:?}");
        assert!(m.check_against(&"0-1".parse().unwrap()).is_empty());
        let mut holes = m.clone();
        holes.latency_ns[0][1] = None;
        holes.latency_ns[1][0] = None;
        let w = holes.check_against(&"0-1".parse().unwrap());
        assert_eq!(w, vec!["1 of 1 pairs have no figure".to_string()]);
    }

    #[test]
    fn summary_finds_levels() {
        // Two groups of two CPUs: 10 ns inside a group, 100 ns across.
        let m = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |i, j| {
            if i / 2 == j / 2 {
                10.0 + i as f64 * 0.1
            } else {
                100.0 + j as f64
            }
        });
        let s = m.summary();
        assert_eq!(s.pairs, 6);
        assert_eq!(s.missing, 0);
        assert_eq!(s.min_ns, 10.1);
        assert_eq!(s.max_ns, 101.0);
        assert_eq!(s.levels.len(), 2, "{s:?}");
        assert_eq!(s.levels[0].pairs, 2);
        assert_eq!(s.levels[1].pairs, 4);
        assert_eq!(s.levels[1].median_ns, 100.5);
    }

    #[test]
    fn stats_are_validated() {
        let mut m = LatencyMatrix::from_fn(vec![0, 1], |_, _| 20.0);
        m.stats.push(PairStats {
            a: 0,
            b: 1,
            p10_ns: 20.0,
            median_ns: 21.0,
            p90_ns: 25.0,
            samples: 30,
            discarded: 1,
            round_trips: 500,
            inferred: false,
        });
        m.validate().unwrap();
        assert_eq!(m.stats_for(1, 0).unwrap().samples, 30);
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
        m.stats[0].b = 5;
        assert!(m.validate().unwrap_err().contains("stats entry 0"));
        m.stats[0].b = 1;
        m.stats[0].p90_ns = 1.0;
        assert!(m.validate().unwrap_err().contains("not ordered"));
    }

    #[test]
    fn sparse_counts_and_inferred_pairs_round_trip_and_old_files_still_load() {
        let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 20.0);
        // An old file: no sparse fields, no `inferred` flag.
        let old = serde_json::to_string(&m).unwrap();
        assert!(
            !old.contains("pairs_measured") && !old.contains("inferred"),
            "{old}"
        );
        let back = LatencyMatrix::from_json(&old, p()).unwrap();
        assert_eq!(back.sparse, None);
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: 2,
            pairs_total: 3,
            modelled_seconds: 0.5,
        }));
        m.stats.push(PairStats {
            a: 1,
            b: 2,
            p10_ns: 20.0,
            median_ns: 20.0,
            p90_ns: 20.0,
            samples: 0,
            discarded: 0,
            round_trips: 0,
            inferred: true,
        });
        let text = serde_json::to_string(&m).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["pairs_measured"], 2);
        assert_eq!(v["pairs_total"], 3);
        assert_eq!(v["modelled_seconds"], 0.5);
        assert_eq!(v["stats"][0]["inferred"], true);
        assert_eq!(v["stats"][0]["samples"], 0);
        assert_eq!(LatencyMatrix::from_json(&text, p()).unwrap(), m);
        // Counts only in part, or unknown keys: read as a matrix without sparse counts.
        let partial = old.replacen('{', "{\"pairs_measured\": 2, \"unknown\": [1, 2], ", 1);
        let back = LatencyMatrix::from_json(&partial, p()).unwrap();
        assert_eq!(back.sparse, None);
    }

    #[test]
    fn sparse_counts_are_read_off_the_cells_not_taken_from_the_file() {
        // Three pairs: (0, 1) measured, (1, 2) inferred, (0, 2) without a figure.
        let mut m = LatencyMatrix::from_fn(vec![0, 1, 2], |_, _| 20.0);
        m.latency_ns[0][2] = None;
        m.latency_ns[2][0] = None;
        m.stats.push(PairStats {
            a: 2,
            b: 1,
            p10_ns: 20.0,
            median_ns: 20.0,
            p90_ns: 20.0,
            samples: 0,
            discarded: 0,
            round_trips: 0,
            inferred: true,
        });
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: 1,
            pairs_total: 3,
            modelled_seconds: 0.5,
        }));
        let text = serde_json::to_string(&m).unwrap();
        for (measured, total) in [(5, 1), (0, 1), (3, 3), (0, 0)] {
            let damaged = text
                .replace(
                    "\"pairs_measured\":1",
                    &format!("\"pairs_measured\":{measured}"),
                )
                .replace("\"pairs_total\":3", &format!("\"pairs_total\":{total}"));
            assert!(
                damaged.contains(&format!("\"pairs_total\":{total}")),
                "{damaged}"
            );
            let back = LatencyMatrix::from_json(&damaged, p()).unwrap();
            let sp = back.sparse.as_ref().unwrap();
            assert_eq!(
                (sp.pairs_measured, sp.pairs_total),
                (1, 3),
                "{measured}/{total}"
            );
            assert_eq!(back, m);
            // The same count completion's pending pairs give.
            assert_eq!(crate::measure::complete::pending(&back).len(), 3 - 1);
        }
        // Narrowed to CPUs 0 and 1, the one pair left is measured.
        let narrowed = keep::restrict(&m, &CpuSet::from_iter([0, 1]));
        let sp = narrowed.sparse.as_ref().unwrap();
        assert_eq!((sp.pairs_measured, sp.pairs_total), (1, 1));
    }

    /// Past 1,024 CPUs a file leaves out the inferred pairs' statistics and reads back
    /// the same matrix; at 1,024 and below it is written as before, every entry in it.
    #[test]
    fn a_large_sparse_matrix_is_stored_without_its_inferred_statistics_and_read_back_whole() {
        fn sparse_of(n: usize) -> LatencyMatrix {
            let mut m = LatencyMatrix::from_fn((0..n as u32).collect(), |i, j| {
                if i / 16 == j / 16 {
                    30.0
                } else {
                    90.0 + (i % 7) as f64
                }
            });
            m.latency_ns[5][0] = None;
            m.latency_ns[0][5] = None;
            for j in 0..n {
                for i in j + 1..n {
                    let Some(v) = m.latency_ns[i][j] else {
                        continue;
                    };
                    let measured = i == j + 1;
                    m.stats.push(PairStats {
                        a: j as u32,
                        b: i as u32,
                        p10_ns: v - 1.0 * f64::from(u8::from(measured)),
                        median_ns: v,
                        p90_ns: v,
                        samples: u32::from(measured) * 9,
                        discarded: 0,
                        round_trips: 0,
                        inferred: !measured,
                    });
                }
            }
            m.mode = Some("sparse".into());
            m.sparse = Some(Box::new(SparseCounts {
                pairs_measured: 0,
                pairs_total: 0,
                modelled_seconds: 1.5,
            }));
            m.recount();
            m
        }
        let small = sparse_of(COMPACT_FROM_CPUS - 1);
        let text = serde_json::to_string(&small).unwrap();
        assert!(text.contains("\"inferred\":true") && !text.contains("inferred_stats"));
        let big = sparse_of(COMPACT_FROM_CPUS);
        let text = serde_json::to_string(&big).unwrap();
        assert!(
            !text.contains("\"inferred\":true"),
            "no inferred entry written"
        );
        assert!(text.contains("\"inferred_stats\":\"omitted\""));
        assert!(text.len() < 16 << 20, "{} bytes", text.len());
        let back = LatencyMatrix::from_json(&text, Path::new("big.json")).unwrap();
        assert_eq!(back.stats.len(), big.stats.len());
        assert!(back == big, "read back whole, in the same order");
        let sp = back.sparse.as_ref().unwrap();
        assert_eq!(sp.pairs_measured, COMPACT_FROM_CPUS - 1);
    }
}
