//! A child pair of an irregular block whose two spot checks disagree: before it is
//! measured fully, a factor per CPU on each side (`ln v = r[i] + c[j]`, a core's
//! distance to its mesh stop or its CCX's links) fitted from a few pairs per CPU. The
//! fill uses it only when every figure of the pair fits it within half the tolerance.
//!
//! Must not touch: the measurer (the caller measures the pairs it names).

use std::collections::BTreeMap;

/// Pairs measured per CPU of the larger side.
const SHIFTS: usize = 3;

/// Whether the model saves at least half the pairs of `rows` × `cols`.
pub(super) fn worth(rows: &[usize], cols: &[usize]) -> bool {
    2 * SHIFTS * rows.len().max(cols.len()) <= rows.len() * cols.len()
}

/// The pairs to measure: each CPU of the larger side with [`SHIFTS`] CPUs of the other,
/// in turn, so every CPU of both sides is seen and the pairs link all of them.
pub(super) fn design(rows: &[usize], cols: &[usize]) -> Vec<(usize, usize)> {
    let m = rows.len().max(cols.len());
    (0..m)
        .flat_map(|r| {
            (0..SHIFTS).map(move |s| {
                let (i, j) = (rows[r % rows.len()], cols[(r + s) % cols.len()]);
                (i.min(j), i.max(j))
            })
        })
        .collect()
}

/// Row and column factors (ln) of one child pair.
pub(super) struct RowCol {
    row: BTreeMap<usize, f64>,
    col: BTreeMap<usize, f64>,
}

impl RowCol {
    /// Fits `obs` (row CPU, column CPU, figure) by alternating means; `None` unless
    /// every CPU of `rows` and `cols` has a figure.
    pub(super) fn new(
        rows: &[usize],
        cols: &[usize],
        obs: &[(usize, usize, f64)],
    ) -> Option<RowCol> {
        let mut fit = RowCol {
            row: rows.iter().map(|&i| (i, 0.0)).collect(),
            col: cols.iter().map(|&j| (j, 0.0)).collect(),
        };
        let logs: Vec<(usize, usize, f64)> = obs
            .iter()
            .map(|&(i, j, v)| (i, j, v.max(1e-3).ln()))
            .collect();
        for _ in 0..12 {
            fit.row = side_means(logs.iter().copied(), &fit.col, rows.len())?;
            fit.col = side_means(
                logs.iter().map(|&(i, j, v)| (j, i, v)),
                &fit.row,
                cols.len(),
            )?;
        }
        Some(fit)
    }

    /// The figure of row CPU `i` and column CPU `j`.
    pub(super) fn predict(&self, i: usize, j: usize) -> f64 {
        (self.row[&i] + self.col[&j]).exp()
    }

    /// The observations further than `ratio` from the fit.
    pub(super) fn misfits(&self, obs: &[(usize, usize, f64)], ratio: f64) -> Vec<(usize, usize)> {
        obs.iter()
            .filter(|&&(i, j, v)| (v / self.predict(i, j)).ln().abs() > ratio.ln())
            .map(|&(i, j, _)| (i.min(j), i.max(j)))
            .collect()
    }
}

/// One half-step of the alternating fit: per CPU of one side, the mean of its figures
/// (`(this side, other side, ln figure)`) less the other side's factors; `None` unless
/// all `want` CPUs of this side have a figure.
fn side_means(
    logs: impl Iterator<Item = (usize, usize, f64)>,
    other: &BTreeMap<usize, f64>,
    want: usize,
) -> Option<BTreeMap<usize, f64>> {
    let mut sum: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
    for (k, o, v) in logs {
        let e = sum.entry(k).or_default();
        e.0 += v - other[&o];
        e.1 += 1;
    }
    (sum.len() == want).then(|| {
        sum.into_iter()
            .map(|(k, (s, c))| (k, s / c as f64))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_and_column_factors_are_recovered_and_a_cell_off_them_is_named() {
        let rows = [0, 1, 2, 3];
        let cols = [4, 5, 6, 7];
        let truth =
            |i: usize, j: usize| 100.0 * (1.0 + 0.05 * i as f64) * (1.0 + 0.1 * (j - 4) as f64);
        assert!(!worth(&rows[..2], &cols[..2]));
        let design = design(&rows, &cols);
        assert_eq!(design.len(), 12);
        let obs: Vec<(usize, usize, f64)> =
            design.iter().map(|&(i, j)| (i, j, truth(i, j))).collect();
        let fit = RowCol::new(&rows, &cols, &obs).expect("every CPU seen");
        for &i in &rows {
            for &j in &cols {
                assert!(
                    (fit.predict(i, j) / truth(i, j) - 1.0).abs() < 1e-6,
                    "{i} {j}"
                );
            }
        }
        let mut bad = obs.clone();
        bad[5].2 *= 1.3;
        let fit = RowCol::new(&rows, &cols, &bad).expect("every CPU seen");
        assert!(fit.misfits(&bad, 1.05).contains(&(bad[5].0, bad[5].1)));
        assert!(RowCol::new(&rows, &cols, &obs[..3]).is_none());
    }
}
