//! A matrix's cells in memory: the upper triangle of a symmetric n×n matrix as one
//! `Vec<f64>`, NaN for a pair without a figure, the diagonal implicit (never a figure).
//!
//! Owns: the layout, reading and writing a cell in either order, the square rows the
//! JSON form writes ([`Cells`] serialises as `n` rows of `n` numbers or nulls, as the
//! `Vec<Vec<Option<f64>>>` it replaces did), and the streaming fill from those rows
//! (`read::cells`) with what it found wrong, reported by [`Cells::check`] in the
//! words `validate` always used.
//! Must not touch: what a cell means (see the parent module), the bounds on reading
//! (see `read`).
//!
//! Memory: 8 bytes a pair, n(n−1)/2 pairs: 67 MB at 4,096 CPUs, 268 MB at 8,192, where
//! the square rows of `Option<f64>` took 16 bytes a cell, n² cells (268 MB and 1 GiB).

use serde::ser::{Serialize, SerializeSeq, Serializer};

/// The cells of a symmetric matrix over `n` rows (see the module header).
#[derive(Clone, Default)]
pub struct Cells {
    n: usize,
    /// Row `i`'s cells `(i, j > i)`, row after row: `n(n−1)/2` values.
    upper: Vec<f64>,
    /// What reading the rows found wrong (`read::cells`); `None` for cells made in
    /// memory and for a file whose rows were square and symmetric.
    fault: Option<Box<ReadFault>>,
}

/// What the streaming read found wrong: how many rows there were, and the first fault
/// in the order `validate` checks the cells (row by row: a row's length, then each cell
/// in turn, a cell's value before its symmetry).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReadFault {
    pub rows: usize,
    /// The first row's length.
    pub width: usize,
    pub first: Option<(Position, Fault)>,
}

/// Where `validate` meets a fault: row, then 0 for the row's length or 1 + column.
pub(super) type Position = (usize, usize);

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Fault {
    /// Row `row` has `len` cells, not as many as the matrix has rows.
    RowLength { row: usize, len: usize },
    /// Cell `(i, j)` is negative or not finite.
    NotLatency { i: usize, j: usize, v: f64 },
    /// Cells `(i, j)` and `(j, i)` differ (`i < j`).
    Asymmetric { i: usize, j: usize },
}

impl Cells {
    /// `n` rows with no figure anywhere.
    pub fn new(n: usize) -> Cells {
        Cells {
            n,
            upper: vec![f64::NAN; n * n.saturating_sub(1) / 2],
            fault: None,
        }
    }

    /// The upper triangle of square rows (cell `(i, j)` for `i < j`; the lower
    /// triangle and the diagonal are not read). Panics if `rows` is not square.
    pub fn from_rows(rows: &[Vec<Option<f64>>]) -> Cells {
        let mut c = Cells::new(rows.len());
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row.len(), rows.len(), "row {i} of a square matrix");
            for (j, &v) in row.iter().enumerate().skip(i + 1) {
                c.set(i, j, v);
            }
        }
        c
    }

    /// Number of rows (and columns).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Where pair `(i, j)`, `i < j < n`, lies in `upper`.
    fn index(&self, i: usize, j: usize) -> usize {
        i * self.n - i * (i + 1) / 2 + (j - i - 1)
    }

    /// The figure of the pair `(i, j)` in either order; `None` on the diagonal, out of
    /// range, or where the pair has none.
    pub fn get(&self, i: usize, j: usize) -> Option<f64> {
        let (i, j) = (i.min(j), i.max(j));
        if i == j || j >= self.n {
            return None;
        }
        let v = self.upper[self.index(i, j)];
        (!v.is_nan()).then_some(v)
    }

    /// Sets the figure of the pair `(i, j)` in either order (`Some(NaN)` is no figure).
    /// The diagonal has no figure: setting it does nothing. Panics out of range.
    pub fn set(&mut self, i: usize, j: usize, v: Option<f64>) {
        let (i, j) = (i.min(j), i.max(j));
        assert!(j < self.n, "cell ({i}, {j}) of a {}-row matrix", self.n);
        if i == j {
            return;
        }
        let k = self.index(i, j);
        self.upper[k] = v.unwrap_or(f64::NAN);
    }

    /// The `n` cells of row `i` (`None` on the diagonal and where there is no figure).
    pub fn row(&self, i: usize) -> impl Iterator<Item = Option<f64>> + '_ {
        (0..self.n).map(move |j| self.get(i, j))
    }

    /// Every pair `(i, j)`, `i < j`, with a figure, row by row.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        (0..self.n).flat_map(move |i| {
            let start = self.index_or_end(i);
            self.upper[start..start + self.n - i - 1]
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .map(move |(d, &v)| (i, i + 1 + d, v))
        })
    }

    fn index_or_end(&self, i: usize) -> usize {
        if i + 1 >= self.n {
            self.upper.len()
        } else {
            self.index(i, i + 1)
        }
    }

    /// Whether every pair is without a figure.
    pub fn is_empty(&self) -> bool {
        self.upper.iter().all(|v| v.is_nan())
    }

    /// The checks `validate` makes of the cells of a matrix over `cpus`, in its words:
    /// as many rows as CPUs, each as long; finite, non-negative cells; symmetric (what
    /// a read file had wrong, see `read::cells`).
    pub(super) fn check(&self, cpus: &[u32]) -> Result<(), String> {
        let n = cpus.len();
        let rows = self.fault.as_ref().map_or(self.n, |f| f.rows);
        if rows != n {
            return Err(format!(
                "`latency_ns` has {rows} rows but `cpus` lists {n} CPUs"
            ));
        }
        if let Some(width) = self.fault.as_ref().map(|f| f.width).filter(|&w| w != n) {
            return Err(format!(
                "row 0 of `latency_ns` has {width} cells, expected {n}"
            ));
        }
        if let Some((_, fault)) = self.fault.as_ref().and_then(|f| f.first.as_ref()) {
            return Err(match *fault {
                Fault::RowLength { row, len } => {
                    format!("row {row} of `latency_ns` has {len} cells, expected {n}")
                }
                Fault::NotLatency { i, j, v } => not_latency(cpus[i], cpus[j], v),
                Fault::Asymmetric { i, j } => asymmetric(cpus[i], cpus[j]),
            });
        }
        if self.n != n {
            // Made in memory with another count of rows than of CPUs.
            return Err(format!(
                "`latency_ns` has {} rows but `cpus` lists {n} CPUs",
                self.n
            ));
        }
        if let Some((i, j, v)) = self.pairs().find(|&(_, _, v)| !v.is_finite() || v < 0.0) {
            return Err(not_latency(cpus[i], cpus[j], v));
        }
        Ok(())
    }
}

fn not_latency(a: u32, b: u32, v: f64) -> String {
    format!("cell ({a}, {b}) = {v} is not a latency (NaN, infinite or negative)")
}

fn asymmetric(a: u32, b: u32) -> String {
    format!("matrix is not symmetric at CPUs {a} and {b}")
}

impl PartialEq for Cells {
    /// Equal when every pair has the same figure or both have none.
    fn eq(&self, other: &Cells) -> bool {
        self.n == other.n
            && self.fault == other.fault
            && self
                .upper
                .iter()
                .zip(&other.upper)
                .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan())
    }
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for i in 0..self.n {
            l.entry(&self.row(i).collect::<Vec<_>>());
        }
        l.finish()
    }
}

/// The square rows, each cell as [`Cells::get`] reads it, `map`ped (the compact form
/// rounds them).
pub(super) struct Rows<'a, F> {
    pub cells: &'a Cells,
    pub map: F,
}

impl<F: Fn(f64) -> f64> Serialize for Rows<'_, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Row<'r, F>(&'r Cells, usize, &'r F);
        impl<F: Fn(f64) -> f64> Serialize for Row<'_, F> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.n))?;
                for v in self.0.row(self.1) {
                    seq.serialize_element(&v.map(self.2))?;
                }
                seq.end()
            }
        }
        let mut seq = s.serialize_seq(Some(self.cells.n))?;
        for i in 0..self.cells.n {
            seq.serialize_element(&Row(self.cells, i, &self.map))?;
        }
        seq.end()
    }
}

impl Serialize for Cells {
    /// As `n` rows of `n` cells, `null` where there is no figure (the diagonal too).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Rows {
            cells: self,
            map: |v| v,
        }
        .serialize(s)
    }
}

/// Fills [`Cells`] from square rows as they are read, one row at a time (see
/// `read::cells`): nothing the size of the rows is held but the triangle, which grows
/// as its rows come, and what `validate` would find wrong in the rows is kept in
/// [`ReadFault`]. A row of another length than the first counts as a fault; its cells
/// past the first row's length are not kept, its missing ones have no figure.
#[derive(Default)]
pub(super) struct Filling {
    /// Cells per row: the first row's length.
    n: usize,
    rows: usize,
    upper: Vec<f64>,
    first: Option<(Position, Fault)>,
}

impl Filling {
    pub fn new() -> Filling {
        Filling::default()
    }

    fn fault(&mut self, at: Position, f: Fault) {
        if self.first.as_ref().is_none_or(|(p, _)| at < *p) {
            self.first = Some((at, f));
        }
    }

    /// The next row, its cells given in order by `next` until it returns `None`;
    /// `next` returns an error to stop reading altogether.
    pub fn row<E>(
        &mut self,
        mut next: impl FnMut() -> Result<Option<Option<f64>>, E>,
    ) -> Result<(), E> {
        let i = self.rows;
        self.rows += 1;
        let mut len = 0;
        while let Some(cell) = next()? {
            let j = len;
            len += 1;
            if i > 0 && (i >= self.n || j >= self.n) {
                continue; // a row too many, or a cell: the fault is the count
            }
            if let Some(v) = cell.filter(|v| !v.is_finite() || *v < 0.0) {
                self.fault((i, 1 + j), Fault::NotLatency { i, j, v });
            }
            if j > i {
                self.upper.push(cell.unwrap_or(f64::NAN));
            } else if j < i {
                let stored = self.upper[j * self.n - j * (j + 1) / 2 + (i - j - 1)];
                let same = match cell {
                    None => stored.is_nan(),
                    Some(v) => v.to_bits() == stored.to_bits(),
                };
                if !same {
                    self.fault((j, 1 + i), Fault::Asymmetric { i: j, j: i });
                }
            }
        }
        if i == 0 {
            // The first row says how many rows a square matrix has; room for all of
            // them (not touched, so not in memory, until they come).
            self.n = len;
            let all = len * len.saturating_sub(1) / 2;
            self.upper.reserve_exact(all - self.upper.len());
        } else if i < self.n && len != self.n {
            self.fault((i, 0), Fault::RowLength { row: i, len });
            for _ in len.max(i + 1)..self.n {
                self.upper.push(f64::NAN);
            }
        }
        Ok(())
    }

    /// The cells read: the triangle when there were as many rows as the first one's
    /// cells, no cell when not; with what was wrong.
    pub fn finish(self) -> Cells {
        let square = self.rows == self.n;
        let fault = (!square || self.first.is_some()).then(|| {
            Box::new(ReadFault {
                rows: self.rows,
                width: self.n,
                first: self.first,
            })
        });
        if square {
            Cells {
                n: self.n,
                upper: self.upper,
                fault,
            }
        } else {
            Cells {
                n: 0,
                upper: Vec::new(),
                fault,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(c: &Cells) -> Vec<Vec<Option<f64>>> {
        (0..c.n()).map(|i| c.row(i).collect()).collect()
    }

    #[test]
    fn a_pair_reads_the_same_in_either_order_and_the_diagonal_never_has_a_figure() {
        let mut c = Cells::new(4);
        assert_eq!(c.n(), 4);
        assert!(c.is_empty());
        c.set(3, 1, Some(31.0));
        c.set(0, 2, Some(2.0));
        assert_eq!(c.get(1, 3), Some(31.0));
        assert_eq!(c.get(3, 1), Some(31.0));
        assert_eq!(c.get(2, 0), Some(2.0));
        assert_eq!(c.get(0, 1), None);
        c.set(2, 2, Some(5.0));
        assert_eq!(c.get(2, 2), None, "the diagonal is ignored");
        assert_eq!(c.get(0, 4), None, "out of range");
        assert_eq!(c.get(9, 9), None);
        c.set(1, 3, None);
        assert_eq!(c.get(3, 1), None);
        c.set(0, 3, Some(f64::NAN));
        assert_eq!(c.get(0, 3), None, "NaN is no figure");
        assert_eq!(
            c.row(2).collect::<Vec<_>>(),
            vec![Some(2.0), None, None, None]
        );
        assert_eq!(
            c.pairs().collect::<Vec<_>>(),
            vec![(0, 2, 2.0)],
            "pairs with a figure only"
        );
    }

    #[test]
    fn every_pair_has_its_own_place() {
        let n = 37;
        let mut c = Cells::new(n);
        for i in 0..n {
            for j in 0..i {
                c.set(i, j, Some((i * 1000 + j) as f64));
            }
        }
        for i in 0..n {
            for j in 0..n {
                let want = (i != j).then(|| (i.max(j) * 1000 + i.min(j)) as f64);
                assert_eq!(c.get(i, j), want, "({i}, {j})");
            }
        }
        assert_eq!(c.pairs().count(), n * (n - 1) / 2);
        assert_eq!(c, Cells::from_rows(&rows_of(&c)));
    }

    #[test]
    #[should_panic(expected = "cell (1, 3) of a 3-row matrix")]
    fn setting_out_of_range_panics() {
        Cells::new(3).set(3, 1, Some(1.0));
    }

    /// The JSON rows exactly as the square `Vec<Vec<Option<f64>>>` wrote them.
    #[test]
    #[allow(clippy::needless_range_loop)] // the old form is filled by both indices
    fn serialises_as_the_square_rows() {
        for n in [0, 1, 2, 5, 1030] {
            let mut c = Cells::new(n);
            let mut rows = vec![vec![None; n]; n];
            for i in 0..n {
                for j in 0..i {
                    if (i + j) % 7 != 3 {
                        let v = (i * 7 + j * 3) as f64 / 9.0 + 0.125;
                        c.set(i, j, Some(v));
                        rows[i][j] = Some(v);
                        rows[j][i] = Some(v);
                    }
                }
            }
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                serde_json::to_string(&rows).unwrap(),
                "{n} rows"
            );
            if n <= 5 {
                assert_eq!(
                    serde_json::to_string_pretty(&c).unwrap(),
                    serde_json::to_string_pretty(&rows).unwrap()
                );
            }
        }
    }

    /// What the streaming read finds wrong is said as `validate` said it of the rows:
    /// the first fault in row order, naming CPU ids.
    #[test]
    fn the_streaming_read_refuses_bad_rows_in_the_old_words() {
        use super::super::LatencyMatrix;
        let read = |rows: &str| {
            let text = format!(r#"{{"cpus":[4,5,6],"latency_ns":{rows}}}"#);
            LatencyMatrix::from_json(&text, std::path::Path::new("m.json"))
                .map(|m| m.latency_ns)
                .map_err(|e| e.to_string())
        };
        let good = read("[[null,1,2],[1,null,3],[2,3,null]]").unwrap();
        assert_eq!(good.get(2, 1), Some(3.0));
        assert_eq!(good.get(0, 2), Some(2.0));
        for (rows, want) in [
            (
                "[[null,1,2],[1,null,3],[2,4,null]]",
                "matrix is not symmetric at CPUs 5 and 6",
            ),
            (
                // The asymmetry of (4, 6) comes before row 1's negative cell.
                "[[null,1,2],[1,null,-3],[7,-3,null]]",
                "matrix is not symmetric at CPUs 4 and 6",
            ),
            (
                "[[null,1,2],[1,null,-3],[2,-3,null]]",
                "cell (5, 6) = -3 is not a latency (NaN, infinite or negative)",
            ),
            (
                "[[-1,1,2],[1,null,3],[2,3,null]]",
                "cell (4, 4) = -1 is not a latency (NaN, infinite or negative)",
            ),
            (
                "[[null,1,2],[1,null],[2,3,null]]",
                "row 1 of `latency_ns` has 2 cells, expected 3",
            ),
            (
                "[[null,1,2],[1,null,3,4],[2,3,null]]",
                "row 1 of `latency_ns` has 4 cells, expected 3",
            ),
            (
                "[[null,1],[1,null],[2,3,null]]",
                "row 0 of `latency_ns` has 2 cells, expected 3",
            ),
            (
                "[[null,1,2],[1,null,3]]",
                "`latency_ns` has 2 rows but `cpus` lists 3 CPUs",
            ),
            (
                "[[null,1,2],[1,null,3],[2,3,null],[1,1,1]]",
                "`latency_ns` has 4 rows but `cpus` lists 3 CPUs",
            ),
            ("[]", "`latency_ns` has 0 rows but `cpus` lists 3 CPUs"),
            (
                // A short row before an asymmetry further down: the row is first.
                "[[null,1,2],[1],[2,3,null]]",
                "row 1 of `latency_ns` has 1 cells, expected 3",
            ),
        ] {
            assert_eq!(read(rows).unwrap_err(), format!("m.json: {want}"), "{rows}");
        }
        // A diagonal figure is checked, then not kept: the diagonal has none.
        let diag = read("[[0.5,1,2],[1,null,3],[2,3,null]]").unwrap();
        assert_eq!(diag.get(0, 0), None);
        assert_eq!(diag, good);
    }

    /// A row or a count of rows past the bound is refused while it is read.
    #[test]
    fn rows_past_the_bound_are_refused_while_read() {
        use super::super::MAX_MATRIX_CPUS;
        let long_row = format!("[[{}]]", vec!["null"; MAX_MATRIX_CPUS + 1].join(","));
        let text = format!(r#"{{"cpus":[0],"latency_ns":{long_row}}}"#);
        let e = super::super::LatencyMatrix::from_json(&text, std::path::Path::new("m.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`latency_ns`: more than 8192 entries, the most accepted"),
            "{e}"
        );
    }
}
