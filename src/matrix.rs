//! The latency matrix: which CPUs were measured and the one-way latency between each
//! pair, plus how it was obtained. This is the file format the daemon stores and every
//! `--matrix FILE` reads.
//!
//! Owns: the `LatencyMatrix` type, its JSON format, import of core-to-core-latency's CSV
//! (lower triangle, first row empty) and the warnings about known flaws of imported data.
//! Must not touch: measurement (see `measure`) or placement (see `placement`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One-way core-to-core latencies in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyMatrix {
    /// Linux CPU ids, in row order.
    pub cpus: Vec<u32>,
    /// `latency_ns[i][j]`: one-way latency between `cpus[i]` and `cpus[j]`. Symmetric;
    /// the diagonal is `None` (null in JSON). A missing pair is also `None`.
    pub latency_ns: Vec<Vec<Option<f64>>>,
    /// Measurement primitive, e.g. `cas` or `load-store`; `None` when unknown (imports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primitive: Option<String>,
    /// Known flaws and measurement warnings, in words a user reads.
    #[serde(default)]
    pub warnings: Vec<String>,
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
        LatencyMatrix {
            cpus,
            latency_ns,
            primitive: None,
            warnings: Vec::new(),
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

    /// Latency between two CPU ids.
    pub fn between(&self, a: u32, b: u32) -> Option<f64> {
        self.at(self.index_of(a)?, self.index_of(b)?)
    }

    /// Reads our JSON or core-to-core-latency's CSV, chosen by content: a file whose
    /// first non-blank character is `{` is JSON.
    pub fn load(path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let text = std::fs::read_to_string(path).map_err(|source| MatrixError::Read {
            path: path.to_owned(),
            source,
        })?;
        if text.trim_start().starts_with('{') {
            Self::from_json(&text, path)
        } else {
            Self::from_csv(&text, path)
        }
    }

    /// Parses the JSON format and checks it is square and symmetric with finite,
    /// non-negative cells.
    pub fn from_json(text: &str, path: &Path) -> Result<LatencyMatrix, MatrixError> {
        let m: LatencyMatrix = serde_json::from_str(text).map_err(|e| MatrixError::Parse {
            path: path.to_owned(),
            line: e.line(),
            message: format!("column {}: {e}", e.column()),
        })?;
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
        let n = rows.len();
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
        let mut m = LatencyMatrix {
            cpus: (0..n as u32).collect(),
            latency_ns,
            primitive: None,
            warnings: Vec::new(),
        };
        m.warnings = m.import_flaws();
        Ok(m)
    }

    /// Structural checks shared by every reader: square, symmetric, finite, >= 0,
    /// distinct CPU ids.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.cpus.len();
        let mut seen = crate::cpuset::CpuSet::new();
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
        Ok(())
    }

    /// Warnings about flaws seen in published matrices: exact zero cells (a timer too
    /// coarse to see the latency) and values that are all multiples of one quantum.
    pub fn import_flaws(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let cells: Vec<f64> = (0..self.len())
            .flat_map(|i| (0..i).filter_map(move |j| self.at(i, j)))
            .collect();
        let zeros = cells.iter().filter(|&&v| v == 0.0).count();
        if zeros > 0 {
            warnings.push(format!(
                "{zeros} cell(s) are exactly 0 ns: the timer was too coarse to see them; they are not real latencies"
            ));
        }
        let mut distinct: Vec<f64> = cells
            .iter()
            .map(|v| (v * 1000.0).round() / 1000.0)
            .collect();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        if cells.len() >= 16 && distinct.len() * 4 <= cells.len().min(64) {
            warnings.push(format!(
                "values are quantised: only {} distinct values in {} cells (coarse timer); small differences are invisible",
                distinct.len(),
                cells.len()
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
            "m.csv:1: expected 2 comma-separated cells (one per CPU), found 3"
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
}
