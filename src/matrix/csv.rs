//! core-to-core-latency's CSV: importing its `--csv` (lower triangle, first row empty)
//! and exporting in its exact layout.
//!
//! Must not touch: the JSON file form (see `json`) or the bounds on reading (see `read`).

use std::path::Path;

use super::{Cells, LatencyMatrix, MatrixError, MAX_MATRIX_CPUS};

impl LatencyMatrix {
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
        let mut latency_ns = Cells::new(n);
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
                latency_ns.set(i, j, Some(v));
            }
        }
        let mut m = LatencyMatrix::new((0..n as u32).collect(), latency_ns);
        m.warnings = m.import_flaws();
        Ok(m)
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
}
