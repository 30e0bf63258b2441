//! Reading a matrix file that anyone may have written (`--matrix FILE`, the daemon's
//! store) without trusting it: bounded before a byte is parsed and while parsing.
//!
//! Owns: the limits ([`MAX_MATRIX_CPUS`], [`MAX_MATRIX_FILE_SIZE`]…), refusing
//! non-regular files by type before opening (a FIFO would block the open, `/dev/zero`
//! never ends), the streaming JSON read with a cap on every string and every array,
//! and the bounded deserialisers the [`LatencyMatrix`] fields use.
//! Must not touch: what a matrix means (see the parent module).
//!
//! Memory: a JSON file is parsed from a buffered reader, never held whole, so what it
//! costs is the parsed matrix: its cells (one triangle of f64, see `Cells`, filled as
//! the rows stream: 8 bytes a pair, 67 MB at 4,096 CPUs, 268 MB at 8,192; the first
//! row's length reserves the triangle, which takes memory as its rows come), one stats
//! entry per pair (48 bytes, n(n−1)/2: 384 MiB at 4,096, 1.5
//! GiB at 8,192; a sparse file written compactly, see `COMPACT_FROM_CPUS`, has its
//! inferred pairs' entries made again when read, a complete one past 1,024 CPUs holds
//! only the entries with batches) and 256 warnings of at most 16 KiB. Measured at 4,096
//! CPUs (release, `benches/README.md`): `plan` peaks at 1.2 GB on a first map (117 MB
//! of JSON, 8.4 M entries made again) and 0.8 GB on the complete map (115 MB, no
//! entry); the sparse counts' check of which pairs are inferred takes a bit per pair. A file of more than 8,192 CPUs, or
//! a CPU id past 8,191, is refused as the first one past the bound is read, before
//! the cells are allocated. A CSV file (at most 32 MiB) is read whole, then its cells
//! are allocated only once its first row has shown there are at most 8,192 CPUs.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use super::cells::{Cells, Filling};
use super::{LatencyMatrix, MatrixError, PairStats};
use crate::infile::{self, InError, Links};

/// Largest binary matrix file (see [`super::binary`]).
pub use super::binary::MAX_BINARY_FILE_SIZE;
/// The one bound on a matrix's CPUs (see the parent module). A larger file is refused
/// while parsing, before its cells are allocated.
pub use super::MAX_MATRIX_CPUS;
/// Largest JSON matrix file read (a pretty-printed 1024-CPU matrix with per-pair
/// statistics is about 130 MB; a compact 4,096-CPU sparse map about 90 MB). Matrices
/// of [`super::binary::BINARY_FROM_CPUS`] CPUs or more are written in the binary form,
/// whose limit is [`MAX_BINARY_FILE_SIZE`].
pub const MAX_MATRIX_FILE_SIZE: u64 = 256 << 20;
/// Largest CSV matrix: CSV is read whole (a 1024-CPU one is about 10 MB).
pub const MAX_CSV_SIZE: u64 = 32 << 20;
/// Longest JSON string (a warning, the fingerprint…), in bytes as written.
pub const MAX_JSON_STRING: usize = 16 << 10;
/// Most warnings a matrix file may carry.
pub const MAX_WARNINGS: usize = 256;
/// Most per-pair statistics entries: one per pair of the largest matrix.
pub const MAX_STATS: usize = MAX_MATRIX_CPUS * (MAX_MATRIX_CPUS - 1) / 2;

/// Opens `path` for reading if it is a regular file of at most
/// [`MAX_BINARY_FILE_SIZE`] bytes, the largest form's limit (see [`crate::infile`]; a
/// symlink is followed); [`check_json_size`] then holds JSON to its own.
pub(super) fn open_regular(path: &Path) -> Result<(File, u64), MatrixError> {
    let (file, md) = infile::open_regular(path, Links::Follow).map_err(|e| refused(e, path))?;
    if md.len() > MAX_BINARY_FILE_SIZE {
        return Err(MatrixError::Refused {
            path: path.to_owned(),
            reason: format!(
                "{} bytes is over the {MAX_BINARY_FILE_SIZE}-byte limit for a matrix file \
                 (binary; {MAX_MATRIX_FILE_SIZE} for JSON)",
                md.len()
            ),
        });
    }
    Ok((file, md.len()))
}

/// Refuses a JSON matrix file of more than [`MAX_MATRIX_FILE_SIZE`] bytes.
pub(super) fn check_json_size(size: u64, path: &Path) -> Result<(), MatrixError> {
    if size > MAX_MATRIX_FILE_SIZE {
        return Err(MatrixError::Refused {
            path: path.to_owned(),
            reason: format!(
                "{size} bytes is over the {MAX_MATRIX_FILE_SIZE}-byte limit for a matrix file"
            ),
        });
    }
    Ok(())
}

/// An [`InError`] as a [`MatrixError`] naming `path`.
fn refused(e: InError, path: &Path) -> MatrixError {
    let path = path.to_owned();
    match e {
        InError::Io(source) => MatrixError::Read { path, source },
        InError::TooLarge { .. } => MatrixError::Refused {
            path,
            reason: format!("over the {MAX_CSV_SIZE}-byte limit for a CSV matrix"),
        },
        e => MatrixError::Refused {
            path,
            reason: e.to_string(),
        },
    }
}

/// A matrix file's form, told by its first bytes.
pub(super) enum Form {
    /// Starts with [`super::binary::MAGIC`].
    Binary,
    /// The first non-blank byte is `{`.
    Json,
    /// Anything else.
    Csv,
}

/// The file's form ([`Form`]). Leaves the file at offset 0.
pub(super) fn sniff(file: &mut File, path: &Path) -> Result<Form, MatrixError> {
    let read_err = |source| MatrixError::Read {
        path: path.to_owned(),
        source,
    };
    let mut buf = [0u8; 4096];
    let mut seen: u64 = 0;
    let mut first_block = true;
    let form = loop {
        let n = file.read(&mut buf).map_err(read_err)?;
        if first_block {
            first_block = false;
            // A short first read (a pipe would give one; a regular file rarely) is
            // completed up to the magic's length.
            let mut n = n;
            while n > 0 && n < super::binary::MAGIC.len() {
                let more = file.read(&mut buf[n..]).map_err(read_err)?;
                if more == 0 {
                    break;
                }
                n += more;
            }
            if super::binary::is_binary(&buf[..n]) {
                break Form::Binary;
            }
            seen += n as u64;
            if let Some(b) = buf[..n].iter().find(|b| !b.is_ascii_whitespace()) {
                break if *b == b'{' { Form::Json } else { Form::Csv };
            }
            if n == 0 {
                break Form::Csv;
            }
            continue;
        }
        seen += n as u64;
        if n == 0 || seen > MAX_MATRIX_FILE_SIZE {
            break Form::Csv;
        }
        if let Some(b) = buf[..n].iter().find(|b| !b.is_ascii_whitespace()) {
            break if *b == b'{' { Form::Json } else { Form::Csv };
        }
    };
    file.rewind().map_err(read_err)?;
    Ok(form)
}

/// Reads the whole (CSV) file as UTF-8 text, refusing more than [`MAX_CSV_SIZE`] bytes.
pub(super) fn read_csv_text(file: File, size: u64, path: &Path) -> Result<String, MatrixError> {
    infile::read_text(file, size, MAX_CSV_SIZE).map_err(|e| refused(e, path))
}

/// Parses JSON from `reader` with every string capped at [`MAX_JSON_STRING`] bytes.
pub(super) fn json_from_reader(
    reader: impl Read,
    path: &Path,
) -> Result<LatencyMatrix, MatrixError> {
    let limited = StringLimit::new(reader.take(MAX_MATRIX_FILE_SIZE + 1));
    serde_json::from_reader(BufReader::new(limited)).map_err(|e| json_error(e, path))
}

/// A JSON error as a [`MatrixError`]: with a position when serde_json has one.
pub(super) fn json_error(e: serde_json::Error, path: &Path) -> MatrixError {
    if e.is_io() {
        MatrixError::Refused {
            path: path.to_owned(),
            reason: e.to_string(),
        }
    } else {
        // serde_json ends its message with " at line L column C"; the position is
        // already in front.
        let text = e.to_string();
        let what = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(m, _)| m);
        MatrixError::Parse {
            path: path.to_owned(),
            line: e.line(),
            message: format!("column {}: {what}", e.column()),
        }
    }
}

/// A reader that fails once any JSON string literal passes [`MAX_JSON_STRING`] bytes,
/// so that serde_json never buffers a huge string. It follows the only context in
/// JSON where bytes are not structure: between unescaped double quotes.
pub(super) struct StringLimit<R> {
    inner: R,
    in_string: bool,
    escape: bool,
    len: usize,
}

impl<R> StringLimit<R> {
    pub(super) fn new(inner: R) -> Self {
        StringLimit {
            inner,
            in_string: false,
            escape: false,
            len: 0,
        }
    }
}

impl<R: Read> Read for StringLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if !self.in_string {
                if b == b'"' {
                    self.in_string = true;
                    self.len = 0;
                }
                continue;
            }
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                continue;
            }
            self.len += 1;
            if self.len > MAX_JSON_STRING {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a string longer than {MAX_JSON_STRING} bytes"),
                ));
            }
        }
        Ok(n)
    }
}

/// A JSON array of at most `MAX` elements, refused as soon as element `MAX + 1`
/// starts, before it is allocated.
struct Bounded<T, const MAX: usize>(Vec<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for Bounded<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const MAX: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for V<T, MAX> {
            type Value = Bounded<T, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an array of at most {MAX} elements")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    if out.len() == MAX {
                        return Err(de::Error::custom(format!(
                            "more than {MAX} entries, the most accepted"
                        )));
                    }
                    out.push(v);
                }
                Ok(Bounded(out))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// `cpus`: at most [`MAX_MATRIX_CPUS`] ids, each at most [`crate::cpuset::MAX_CPU_ID`].
pub(super) fn cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    let Bounded(v) = Bounded::<u32, MAX_MATRIX_CPUS>::deserialize(d)
        .map_err(|e| de::Error::custom(format!("`cpus`: {e}")))?;
    if let Some(c) = v.iter().find(|&&c| c > crate::cpuset::MAX_CPU_ID) {
        return Err(de::Error::custom(format!(
            "`cpus`: CPU {c} is over the largest CPU id {}",
            crate::cpuset::MAX_CPU_ID
        )));
    }
    Ok(v)
}

/// `latency_ns`: at most [`MAX_MATRIX_CPUS`] rows of at most as many cells, filled
/// into the triangle as they stream ([`Filling`]): never a row kept, and what
/// `validate` checks of the rows (square, symmetric, finite, ≥ 0) noted on the way, the
/// first fault kept for [`Cells::check`] to word with the CPU ids.
pub(super) fn cells<'de, D: Deserializer<'de>>(d: D) -> Result<Cells, D::Error> {
    struct Rows;
    impl<'de> Visitor<'de> for Rows {
        type Value = Cells;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an array of at most {MAX_MATRIX_CPUS} elements")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cells, A::Error> {
            let mut fill = Filling::new();
            let mut rows = 0;
            while seq.next_element_seed(Row(&mut fill))?.is_some() {
                rows += 1;
                if rows > MAX_MATRIX_CPUS {
                    return Err(too_many());
                }
            }
            Ok(fill.finish())
        }
    }
    struct Row<'f>(&'f mut Filling);
    impl<'de> de::DeserializeSeed<'de> for Row<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de> Visitor<'de> for Row<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an array of at most {MAX_MATRIX_CPUS} elements")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut cells = 0;
            self.0.row(|| {
                let cell = seq.next_element::<Option<f64>>()?;
                if cell.is_some() {
                    cells += 1;
                    if cells > MAX_MATRIX_CPUS {
                        return Err(too_many());
                    }
                }
                Ok(cell)
            })
        }
    }
    fn too_many<E: de::Error>() -> E {
        de::Error::custom(format!(
            "more than {MAX_MATRIX_CPUS} entries, the most accepted"
        ))
    }
    d.deserialize_seq(Rows)
        .map_err(|e| de::Error::custom(format!("`latency_ns`: {e}")))
}

/// `stats`: at most [`MAX_STATS`] entries.
pub(super) fn stats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PairStats>, D::Error> {
    let Bounded(v) = Bounded::<PairStats, MAX_STATS>::deserialize(d)
        .map_err(|e| de::Error::custom(format!("`stats`: {e}")))?;
    Ok(v)
}

/// `warnings`: at most [`MAX_WARNINGS`].
pub(super) fn warnings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let Bounded(v) = Bounded::<String, MAX_WARNINGS>::deserialize(d)
        .map_err(|e| de::Error::custom(format!("`warnings`: {e}")))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_limit_counts_only_inside_strings() {
        let long = format!("{{\"k\": \"{}\"}}", "a".repeat(MAX_JSON_STRING));
        let mut out = Vec::new();
        StringLimit::new(long.as_bytes())
            .read_to_end(&mut out)
            .unwrap();
        let too_long = format!("{{\"k\": \"{}\"}}", "a".repeat(MAX_JSON_STRING + 1));
        let e = StringLimit::new(too_long.as_bytes())
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("string longer than"), "{e}");
        // An escaped quote does not end the string; what follows still counts.
        let escaped = format!("[\"\\\"{}\"]", "b".repeat(MAX_JSON_STRING));
        assert!(StringLimit::new(escaped.as_bytes())
            .read_to_end(&mut Vec::new())
            .is_err());
        // Numbers and whitespace outside strings are not limited.
        let wide = format!("[{}1]", " ".repeat(MAX_JSON_STRING * 2));
        StringLimit::new(wide.as_bytes())
            .read_to_end(&mut Vec::new())
            .unwrap();
    }

    #[test]
    fn bounded_arrays_stop_at_the_limit() {
        let ok: Bounded<u8, 3> = serde_json::from_str("[1,2,3]").unwrap();
        assert_eq!(ok.0, vec![1, 2, 3]);
        let e = serde_json::from_str::<Bounded<u8, 3>>("[1,2,3,4]")
            .err()
            .unwrap();
        assert!(e.to_string().contains("more than 3 entries"), "{e}");
    }
}
