//! The latency matrix: which CPUs were measured and the one-way latency between each
//! pair, plus how it was obtained. This is the file format the daemon stores and every
//! `--matrix FILE` reads.
//!
//! Owns: the `LatencyMatrix` type, its JSON format (`json`: the object as read and as
//! written, the compact form of large sparse maps), its binary form for matrices past
//! 1,024 CPUs (`binary`: what every writer stores from there on), import of core-to-core-latency's CSV
//! and export in its exact layout (`csv`), and the warnings about known flaws of imported
//! data. Also: per-pair statistics, a summary
//! (min/median/max, latency levels), the checks of a matrix against this machine
//! ([`LatencyMatrix::check_against`]), rendering (`render`: terminal heatmap, SVG), the
//! daemon's on-disk store (`store`), keeping cells across hotplug (`keep`: which pairs
//! a stored matrix lacks for the CPUs online now) and the bounded reading of untrusted
//! files (`read`: size, type and count limits before and while parsing).
//!
//! Must not touch: measurement (see `measure`) or placement (see `placement`).

pub mod binary;
mod cells;
mod csv;
mod json;
pub mod keep;
pub mod read;
pub mod render;
pub mod store;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

pub use cells::Cells;
pub use json::COMPACT_FROM_CPUS;

/// One-way core-to-core latencies in nanoseconds.
///
/// Read through [`MatrixFile`], which holds the sparse counts as plain fields: a
/// flattened field would make serde keep every unknown key's value in memory. Written
/// through [`MatrixOut`], which leaves out the statistics of inferred pairs of a matrix
/// past [`COMPACT_FROM_CPUS`] CPUs (see there).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "json::MatrixFile")]
pub struct LatencyMatrix {
    /// Linux CPU ids, in row order.
    #[serde(deserialize_with = "read::cpus")]
    pub cpus: Vec<u32>,
    /// `latency_ns.get(i, j)`: one-way latency between `cpus[i]` and `cpus[j]`, in
    /// either order (the upper triangle, see [`Cells`]); the diagonal is `None` (null in
    /// JSON), and so is a missing pair.
    #[serde(deserialize_with = "read::cells")]
    pub latency_ns: Cells,
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
    /// Per-pair spread and sample counts, one entry per measured pair (`a < b`). A
    /// sparse matrix's inferred pairs are not here but in [`Self::inferred`]; a file
    /// of at most 1,024 CPUs lists them too (`samples` 0, `inferred` true), written
    /// from and read into that set.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "read::stats"
    )]
    pub stats: Vec<PairStats>,
    /// Which pairs a sparse measurement inferred (filled from their block) rather than
    /// measured: one bit per pair of rows (see [`Inferred`]).
    #[serde(skip)]
    pub inferred: Inferred,
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

impl PairStats {
    /// The entry of a pair measured by one figure `v` and nothing more (no batches
    /// kept, no spread): what a pair without the spinner's statistics gets.
    pub fn single_figure(a: u32, b: u32, v: f64) -> PairStats {
        PairStats {
            a,
            b,
            p10_ns: v,
            median_ns: v,
            p90_ns: v,
            samples: 1,
            discarded: 0,
            round_trips: 0,
            inferred: false,
        }
    }

    /// A measured pair's entry that says no more than its figure: one batch or none,
    /// none thrown away, no spread (a completion's figure without the spinner's
    /// statistics, or the simulated measurer's).
    pub fn is_single_figure(&self) -> bool {
        !self.inferred
            && self.samples <= 1
            && self.discarded == 0
            && self.p10_ns == self.median_ns
            && self.median_ns == self.p90_ns
    }
}

/// The pairs of rows `(i, j)`, `i < j`, a sparse measurement inferred: one bit per pair
/// of the triangle, row by row (`n(n-1)/2` bits: 2 MiB at 4,096 CPUs, 8 MiB at 8,192,
/// where a 48-byte statistics entry per inferred pair took 403 MB and 1.6 GB). Nothing
/// is held while no pair is set, so two sets of the same pairs are equal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inferred {
    n: usize,
    bits: Vec<u64>,
    count: usize,
}

impl Inferred {
    /// The bit of pair `(i, j)`, either order, `i != j`, both below `n`: the pairs of
    /// row 0 first, then those of row 1, and so on (the order sparse measurement and a
    /// file list them in).
    fn key(n: usize, i: usize, j: usize) -> usize {
        let (i, j) = (i.min(j), i.max(j));
        i * n - i * (i + 1) / 2 + (j - i - 1)
    }

    /// Whether pair `(i, j)` (either order) was inferred.
    pub fn get(&self, i: usize, j: usize) -> bool {
        if i == j || i.max(j) >= self.n || self.bits.is_empty() {
            return false;
        }
        let k = Self::key(self.n, i, j);
        self.bits[k / 64] >> (k % 64) & 1 == 1
    }

    /// Marks pair `(i, j)` of a matrix of `n` rows inferred or not (a set made for
    /// another size is dropped first). `i == j` or a row past `n` is ignored.
    pub fn set(&mut self, n: usize, i: usize, j: usize, on: bool) {
        if i == j || i.max(j) >= n || !on && (self.count == 0 || self.n != n) {
            return;
        }
        if self.n != n || self.count == 0 {
            *self = Inferred {
                n,
                bits: vec![0; (n * (n - 1) / 2).div_ceil(64)],
                count: 0,
            };
        }
        let k = Self::key(n, i, j);
        let (w, bit) = (k / 64, 1u64 << (k % 64));
        if on && self.bits[w] & bit == 0 {
            self.count += 1;
        } else if !on && self.bits[w] & bit != 0 {
            self.count -= 1;
        }
        if on {
            self.bits[w] |= bit;
        } else {
            self.bits[w] &= !bit;
        }
        if self.count == 0 {
            // None left: nothing held, equal to a matrix that never had any.
            *self = Inferred::default();
        }
    }

    /// How many pairs are inferred.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The inferred pairs `(i, j)`, `i < j`, row by row.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let n = self.n;
        let rows = if self.count == 0 { 0 } else { n };
        (0..rows).flat_map(move |i| {
            (i + 1..n)
                .map(move |j| (i, j))
                .filter(move |&(i, j)| self.get(i, j))
        })
    }
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

impl SparseCounts {
    /// The counts a file's three fields give, present together or not at all (a file
    /// with only some of them is read as a full matrix, as before).
    pub(crate) fn from_fields(
        pairs_measured: Option<usize>,
        pairs_total: Option<usize>,
        modelled_seconds: Option<f64>,
    ) -> Option<Box<SparseCounts>> {
        Some(Box::new(SparseCounts {
            pairs_measured: pairs_measured?,
            pairs_total: pairs_total?,
            modelled_seconds: modelled_seconds?,
        }))
    }
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
    /// A binary matrix file is malformed at a byte offset (0-based) from its start.
    #[error("{path}: byte {offset}: {message}")]
    At {
        path: PathBuf,
        offset: u64,
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
        let mut latency_ns = Cells::new(n);
        for i in 0..n {
            for j in 0..i {
                latency_ns.set(i, j, Some(f(i, j)));
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
    pub fn new(cpus: Vec<u32>, latency_ns: Cells) -> LatencyMatrix {
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
            inferred: Inferred::default(),
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
        self.latency_ns.get(i, j)
    }

    /// Pairs with a measured figure (a cell not marked [`Self::inferred`]) and all
    /// pairs, `n(n-1)/2`: what the sparse counts must say. Safe on a matrix not
    /// validated yet (a short row has no figure there).
    pub fn measured_pairs(&self) -> (usize, usize) {
        let n = self.cpus.len();
        let total = n * n.saturating_sub(1) / 2;
        let mut measured = 0;
        for i in 0..n {
            for j in i + 1..n {
                if self.at(i, j).is_some() && !self.is_inferred(i, j) {
                    measured += 1;
                }
            }
        }
        (measured, total)
    }

    /// Whether the pair of rows `(i, j)` was inferred by sparse measurement.
    pub fn is_inferred(&self, i: usize, j: usize) -> bool {
        self.inferred.get(i, j)
    }

    /// Marks the pair of rows `(i, j)` inferred, or measured.
    pub fn set_inferred(&mut self, i: usize, j: usize, on: bool) {
        let n = self.len();
        self.inferred.set(n, i, j, on);
    }

    /// How many pairs are inferred.
    pub fn inferred_count(&self) -> usize {
        self.inferred.count()
    }

    /// The inferred pairs as CPU ids `(a, b)`, `a < b`.
    pub fn inferred_pairs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.inferred.pairs().map(|(i, j)| {
            let (a, b) = (self.cpus[i], self.cpus[j]);
            (a.min(b), a.max(b))
        })
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

    /// Reads our binary form, our JSON or core-to-core-latency's CSV, chosen by
    /// content: a file starting with [`binary::MAGIC`] is binary, one whose first
    /// non-blank character is `{` JSON, any other CSV. Bounded (see [`read`] and
    /// [`binary`]): FIFOs, devices and other non-regular files are refused before
    /// opening, files over their form's size limit before reading, matrices over
    /// [`MAX_MATRIX_CPUS`] CPUs before their cells are allocated.
    pub fn load(path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let (mut file, size) = read::open_regular(path)?;
        let m = match read::sniff(&mut file, path)? {
            read::Form::Binary => binary::read(file, size, path)?,
            read::Form::Json => {
                read::check_json_size(size, path)?;
                read::json_from_reader(file, path)?
            }
            read::Form::Csv => {
                return Self::from_csv(&read::read_csv_text(file, size, path)?, path)
            }
        };
        m.validate().map_err(|message| MatrixError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(m)
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
        self.latency_ns.check(&self.cpus)?;
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

    /// Every off-diagonal value once (the upper triangle, row by row).
    pub fn cells(&self) -> Vec<f64> {
        self.latency_ns.pairs().map(|(_, _, v)| v).collect()
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
        let missing = total - self.latency_ns.pairs().count();
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
mod tests;
