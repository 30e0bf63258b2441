//! The binary matrix file: how a matrix of [`BINARY_FROM_CPUS`] CPUs or more is
//! stored, where JSON would pass the reader's 256 MiB limit (a complete 8,192-CPU map
//! is about 470 MB of compact JSON) and cost a parse of every figure as text.
//!
//! Owns: the layout below, writing it, and reading it without trusting it (the same
//! rules as `read`: every count checked before anything is allocated, the file's size
//! checked against what its header implies, every record checked as it is read, each
//! error naming the file and the byte or record).
//! Must not touch: what a matrix means (the parent module), the JSON form (`json`).
//!
//! Layout (version 1), all integers little-endian:
//!
//! ```text
//! pinnerd-matrix-bin 1\n         magic and version, one line
//! {...}\n                        header: one line of JSON, at most MAX_HEADER bytes:
//!                                every field of the JSON form but `latency_ns` and
//!                                `stats`, plus `records` (how many follow the cells)
//! u32 × n(n−1)/2                 the upper triangle (i < j, by row) in hundredths of a
//!                                nanosecond; u32::MAX: no figure
//! 32 bytes × records             statistics: a u16, b u16, p10, median, p90 (u32,
//!                                hundredths of a ns), samples, discarded, round_trips
//!                                (u32), flags (u32: bit 0 = inferred; others 0)
//! ```
//!
//! Figures (cells and statistics) are kept to a hundredth of a nanosecond, as the
//! compact JSON form already writes the cells past 1,024 CPUs (it keeps the
//! statistics' figures whole); a figure of [`MAX_FIGURE_NS`] (42.9 ms) or more
//! has no code and is refused when written. Which statistics are written follows the
//! JSON form ([`super::COMPACT_FROM_CPUS`]): a sparse map's inferred pairs are left out
//! (`"inferred_stats": "omitted"`, marked inferred again when read), a completed map's
//! single-figure entries too, every entry with batches is kept. So the largest file,
//! a completed 8,192-CPU map with batches for every pair, is [`MAX_BINARY_FILE_SIZE`]
//! (36 bytes a pair: 1.22 GB); reading it allocates the cells and the entries, as the
//! JSON reader does (see `read`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::read::{self, MAX_MATRIX_CPUS, MAX_STATS};
use super::{Cells, KeptCells, LatencyMatrix, MatrixError, PairStats, SparseCounts, Stability};

/// The first bytes of a binary matrix file; the version and a newline follow.
pub const MAGIC: &[u8] = b"pinnerd-matrix-bin ";
/// The layout this pinnerd writes and reads.
pub const VERSION: u32 = 1;
/// From this many CPUs on, every writer (`measure --out`, the daemon's store, the
/// report's copy) writes the binary form; smaller matrices are JSON, as before.
pub const BINARY_FROM_CPUS: usize = super::COMPACT_FROM_CPUS;
/// Longest header line (its JSON and newline): 256 warnings of 16 KiB are 4 MiB, the
/// CPU list of 8,192 CPUs 40 KiB.
pub const MAX_HEADER: usize = 8 << 20;
/// Bytes of one statistics record.
pub const RECORD: usize = 32;
/// Bytes of one cell.
const CELL: usize = 4;
/// The code of an empty cell.
const NONE: u32 = u32::MAX;
/// The first figure with no code: `(u32::MAX − 1) / 100 + 0.01` ns, about 42.9 ms.
pub const MAX_FIGURE_NS: f64 = NONE as f64 / 100.0;
/// Largest binary matrix file opened: the magic line, the longest header, and every
/// pair of 8,192 CPUs with its cell and a statistics record (1,216,200,734 bytes).
pub const MAX_BINARY_FILE_SIZE: u64 =
    (MAGIC.len() + 11 + MAX_HEADER + (CELL + RECORD) * MAX_STATS) as u64;

/// The header line's JSON: every field of [`LatencyMatrix`] but the cells and the
/// statistics, with the sparse counts as plain fields (as in JSON).
#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(deserialize_with = "read::cpus")]
    cpus: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    primitive: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    measured_at_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    measure_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_touch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pairs_measured: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pairs_total: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    modelled_seconds: Option<f64>,
    #[serde(default, deserialize_with = "read::warnings")]
    warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept: Option<KeptCells>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stability: Option<Stability>,
    /// `omitted`: inferred pairs' statistics were left out; every pair with a cell and
    /// no record is marked inferred again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inferred_stats: Option<String>,
    /// Statistics records after the cells.
    records: u64,
}

/// A figure's code, or why it has none.
fn encode(v: Option<f64>, what: impl Fn() -> String) -> std::io::Result<u32> {
    let Some(v) = v else { return Ok(NONE) };
    let k = (v * 100.0).round();
    if !(k >= 0.0 && k < NONE as f64) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: {v} ns cannot be stored: the binary matrix file holds figures from 0 \
                 to below {MAX_FIGURE_NS} ns (42.9 ms), to 0.01 ns",
                what()
            ),
        ));
    }
    Ok(k as u32)
}

fn decode(k: u32) -> Option<f64> {
    (k != NONE).then(|| f64::from(k) / 100.0)
}

/// The triangle's cells in file order (row `i`, then `j > i`): the one place writing
/// touches the in-memory cells.
fn triangle(m: &LatencyMatrix) -> impl Iterator<Item = (usize, usize, Option<f64>)> + '_ {
    let n = m.len();
    (0..n).flat_map(move |i| (i + 1..n).map(move |j| (i, j, m.at(i, j))))
}

/// The cells of `n` CPUs from the triangle's rows: `row(i)` gives the cells `(i, j)`
/// for `j > i`. The one place reading touches the in-memory cells.
fn cells_from_rows(
    n: usize,
    mut row: impl FnMut(usize, &mut [Option<f64>]) -> Result<(), MatrixError>,
) -> Result<Cells, MatrixError> {
    let mut cells = Cells::new(n);
    let mut buf = vec![None; n];
    for i in 0..n {
        let upper = &mut buf[..n - i - 1];
        row(i, upper)?;
        for (k, &v) in upper.iter().enumerate() {
            cells.set(i, i + 1 + k, v);
        }
    }
    Ok(cells)
}

impl LatencyMatrix {
    /// Writes the binary form (see the module), whatever the size; returns the bytes
    /// written. Refuses a figure of [`MAX_FIGURE_NS`] or more, naming the pair. The
    /// statistics written follow the JSON form's rules for this size.
    pub fn write_binary(&self, w: &mut impl Write) -> std::io::Result<u64> {
        let written = super::json::written_stats(self);
        let records: Vec<&PairStats> = written.stats().collect();
        let header = Header {
            cpus: self.cpus.clone(),
            primitive: self.primitive.clone(),
            measured_at_us: self.measured_at_us,
            measure_seconds: self.measure_seconds,
            fingerprint: self.fingerprint.clone(),
            first_touch: self.first_touch.clone(),
            mode: self.mode.clone(),
            pairs_measured: self.sparse.as_ref().map(|s| s.pairs_measured),
            pairs_total: self.sparse.as_ref().map(|s| s.pairs_total),
            modelled_seconds: self.sparse.as_ref().map(|s| s.modelled_seconds),
            warnings: self.warnings.clone(),
            kept: self.kept.clone(),
            stability: self.stability.clone(),
            inferred_stats: written.omitted.then(|| "omitted".to_owned()),
            records: records.len() as u64,
        };
        let mut head = serde_json::to_vec(&header)?;
        head.push(b'\n');
        if head.len() > MAX_HEADER {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the header is {} bytes, over the {MAX_HEADER}-byte limit",
                    head.len()
                ),
            ));
        }
        let mut w = std::io::BufWriter::with_capacity(1 << 20, w);
        let mut total = 0u64;
        let magic = format!("{}{VERSION}\n", String::from_utf8_lossy(MAGIC));
        w.write_all(magic.as_bytes())?;
        w.write_all(&head)?;
        total += (magic.len() + head.len()) as u64;
        for (i, j, v) in triangle(self) {
            let k = encode(v, || format!("cell ({}, {})", self.cpus[i], self.cpus[j]))?;
            w.write_all(&k.to_le_bytes())?;
            total += CELL as u64;
        }
        for s in records {
            let what = || format!("statistics of CPUs {} and {}", s.a, s.b);
            let (Ok(a), Ok(b)) = (u16::try_from(s.a), u16::try_from(s.b)) else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: a CPU id past {}", what(), crate::cpuset::MAX_CPU_ID),
                ));
            };
            let mut r = [0u8; RECORD];
            r[0..2].copy_from_slice(&a.to_le_bytes());
            r[2..4].copy_from_slice(&b.to_le_bytes());
            for (k, v) in [s.p10_ns, s.median_ns, s.p90_ns].into_iter().enumerate() {
                r[4 + 4 * k..8 + 4 * k].copy_from_slice(&encode(Some(v), what)?.to_le_bytes());
            }
            r[16..20].copy_from_slice(&s.samples.to_le_bytes());
            r[20..24].copy_from_slice(&s.discarded.to_le_bytes());
            r[24..28].copy_from_slice(&s.round_trips.to_le_bytes());
            r[28..32].copy_from_slice(&u32::from(s.inferred).to_le_bytes());
            w.write_all(&r)?;
            total += RECORD as u64;
        }
        w.flush()?;
        Ok(total)
    }

    /// The bytes of a matrix file as every writer stores it: JSON
    /// ([`LatencyMatrix::to_json_text`]) below [`BINARY_FROM_CPUS`] CPUs, binary from
    /// there on.
    pub fn to_file_bytes(&self) -> std::io::Result<Vec<u8>> {
        if self.len() >= BINARY_FROM_CPUS {
            let mut out = Vec::new();
            self.write_binary(&mut out)?;
            Ok(out)
        } else {
            Ok(self.to_json_text()?.into_bytes())
        }
    }

    /// Writes the matrix file to `w` as [`LatencyMatrix::to_file_bytes`] chooses,
    /// streamed (JSON compact, as the daemon's store writes it); returns the bytes written.
    pub fn write_file(&self, w: &mut impl Write) -> std::io::Result<u64> {
        if self.len() >= BINARY_FROM_CPUS {
            return self.write_binary(w);
        }
        let mut counted = Counted { inner: w, n: 0 };
        let mut b = std::io::BufWriter::new(&mut counted);
        serde_json::to_writer(&mut b, self)?;
        b.write_all(b"\n")?;
        b.flush()?;
        drop(b);
        Ok(counted.n)
    }
}

/// A writer counting the bytes it passes on.
struct Counted<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Whether `head` (the file's first bytes) starts a binary matrix file.
pub(super) fn is_binary(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// A [`MatrixError`] at byte `offset` of `path`.
fn at(path: &Path, offset: u64, message: String) -> MatrixError {
    MatrixError::At {
        path: path.to_owned(),
        offset,
        message,
    }
}

/// Reads a binary matrix file of `size` bytes from `file` at offset 0 (see the module):
/// the magic line and version, the header (bounded), the size the header implies, then
/// the cells and records, each checked. Not validated as a whole yet (the caller does).
pub(super) fn read(file: impl Read, size: u64, path: &Path) -> Result<LatencyMatrix, MatrixError> {
    let io = |source| MatrixError::Read {
        path: path.to_owned(),
        source,
    };
    let mut r = BufReader::with_capacity(1 << 20, file);
    let (header, cells_at) = read_header(&mut r, path)?;
    let n = header.cpus.len();
    let pairs = (n * n.saturating_sub(1) / 2) as u64;
    let records_at = cells_at + CELL as u64 * pairs;
    let expected = records_at + RECORD as u64 * header.records;
    if size != expected {
        return Err(at(
            path,
            cells_at,
            format!(
                "the file is {size} bytes; its header ({n} CPUs: {pairs} cells, {} records) \
                 says {expected}",
                header.records
            ),
        ));
    }
    // The cells, a row at a time.
    let mut bytes = vec![0u8; CELL * n];
    let cells = cells_from_rows(n, |_, out| {
        let raw = &mut bytes[..CELL * out.len()];
        r.read_exact(raw).map_err(io)?;
        for (cell, b) in out.iter_mut().zip(raw.chunks_exact(CELL)) {
            *cell = decode(u32::from_le_bytes(b.try_into().expect("4 bytes")));
        }
        Ok(())
    })?;
    // The statistics records, each checked as `validate` would, naming it.
    let listed: std::collections::HashSet<u32> = header.cpus.iter().copied().collect();
    let mut stats = Vec::with_capacity(header.records as usize);
    let mut rec = [0u8; RECORD];
    for k in 0..header.records {
        r.read_exact(&mut rec).map_err(io)?;
        let s = record(&rec, &listed).map_err(|message| {
            at(
                path,
                records_at + k * RECORD as u64,
                format!("statistics record {k}: {message}"),
            )
        })?;
        stats.push(s);
    }
    Ok(assemble(header, cells, stats))
}

/// The magic line, the version and the header, checked: at most [`MAX_HEADER`] bytes,
/// distinct CPU ids (`read::cpus` bounds their count and each id), at most one record
/// per pair. Returns the header and the offset of the cells.
fn read_header(r: &mut impl BufRead, path: &Path) -> Result<(Header, u64), MatrixError> {
    let io = |source| MatrixError::Read {
        path: path.to_owned(),
        source,
    };
    let mut line = Vec::new();
    r.take(MAGIC.len() as u64 + 12)
        .read_until(b'\n', &mut line)
        .map_err(io)?;
    if !line.starts_with(MAGIC) {
        return Err(at(
            path,
            0,
            "not a binary matrix file (no magic line)".into(),
        ));
    }
    let version = &line[MAGIC.len()..];
    let version = version.strip_suffix(b"\n").unwrap_or(version);
    if version != VERSION.to_string().as_bytes() || !line.ends_with(b"\n") {
        return Err(at(
            path,
            MAGIC.len() as u64,
            format!(
                "version {:?} is not one this pinnerd reads (it reads version {VERSION})",
                String::from_utf8_lossy(version)
            ),
        ));
    }
    let header_at = line.len() as u64;
    let mut head = Vec::new();
    r.take(MAX_HEADER as u64)
        .read_until(b'\n', &mut head)
        .map_err(io)?;
    if !head.ends_with(b"\n") {
        return Err(at(
            path,
            header_at,
            if head.len() >= MAX_HEADER {
                format!("the header is over the {MAX_HEADER}-byte limit")
            } else {
                "the header line ends before its newline".into()
            },
        ));
    }
    let header: Header =
        serde_json::from_reader(read::StringLimit::new(&head[..])).map_err(|e| {
            let text = e.to_string();
            let what = text
                .rsplit_once(" at line ")
                .map_or(text.as_str(), |(m, _)| m);
            at(
                path,
                header_at + e.column().saturating_sub(1) as u64,
                format!("header: {what}"),
            )
        })?;
    let n = header.cpus.len();
    debug_assert!(n <= MAX_MATRIX_CPUS);
    let mut seen = crate::cpuset::CpuSet::new();
    if let Some(c) = header.cpus.iter().find(|&&c| !seen.insert(c)) {
        return Err(at(
            path,
            header_at,
            format!("header: CPU {c} is listed twice in `cpus`"),
        ));
    }
    let pairs = (n * n.saturating_sub(1) / 2) as u64;
    if header.records > pairs {
        return Err(at(
            path,
            header_at,
            format!(
                "header: {} statistics records for {n} CPUs, which have {pairs} pairs",
                header.records
            ),
        ));
    }
    Ok((header, header_at + head.len() as u64))
}

/// One statistics record, checked as `validate` checks an entry: a pair of `listed`
/// CPUs, three figures in order, known flags.
fn record(
    rec: &[u8; RECORD],
    listed: &std::collections::HashSet<u32>,
) -> Result<PairStats, String> {
    let u32_at = |o: usize| u32::from_le_bytes(rec[o..o + 4].try_into().expect("4 bytes"));
    let a = u32::from(u16::from_le_bytes([rec[0], rec[1]]));
    let b = u32::from(u16::from_le_bytes([rec[2], rec[3]]));
    if !listed.contains(&a) || !listed.contains(&b) || a == b {
        return Err(format!("the pair ({a}, {b}) is not a pair of `cpus`"));
    }
    let figure = |o: usize| {
        decode(u32_at(o)).ok_or_else(|| format!("CPUs {a} and {b}: a figure is missing"))
    };
    let (p10, median, p90) = (figure(4)?, figure(8)?, figure(12)?);
    if !(p10 <= median && median <= p90) {
        return Err(format!(
            "CPUs {a} and {b}: p10/median/p90 {p10}/{median}/{p90} are not ordered"
        ));
    }
    let flags = u32_at(28);
    if flags > 1 {
        return Err(format!("flags {flags:#x}: only bit 0 (inferred) is known"));
    }
    Ok(PairStats {
        a,
        b,
        p10_ns: p10,
        median_ns: median,
        p90_ns: p90,
        samples: u32_at(16),
        discarded: u32_at(20),
        round_trips: u32_at(24),
        inferred: flags == 1,
    })
}

/// The matrix of a header, its cells and its records: the sparse counts as read, the
/// inferred records and omitted inferred entries marked in [`LatencyMatrix::inferred`],
/// the counts recounted (as the JSON reader does).
fn assemble(header: Header, cells: Cells, stats: Vec<PairStats>) -> LatencyMatrix {
    let sparse = SparseCounts::from_fields(
        header.pairs_measured,
        header.pairs_total,
        header.modelled_seconds,
    );
    let mut m = LatencyMatrix {
        cpus: header.cpus,
        latency_ns: cells,
        primitive: header.primitive,
        measured_at_us: header.measured_at_us,
        measure_seconds: header.measure_seconds,
        fingerprint: header.fingerprint,
        first_touch: header.first_touch,
        mode: header.mode,
        stats,
        inferred: super::Inferred::default(),
        sparse,
        warnings: header.warnings,
        kept: header.kept,
        stability: header.stability,
    };
    m.take_inferred_entries();
    if header.inferred_stats.as_deref() == Some("omitted") {
        m.restore_inferred();
    }
    m.recount();
    m
}

#[cfg(test)]
mod tests;
