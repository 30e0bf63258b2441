//! Order statistics, in one place: percentiles by nearest rank, the median and the
//! upper median.
//!
//! Pure: numbers in, numbers out. Used by `measure` (batch figures), `domains`
//! (level contrast), `cli::compare` (runs), `fleet` (level and cell medians), the
//! benchmarks, and sparse measurement (`measure::sparse`: levels and fits).

/// Percentile `q` (0..=1) of `sorted` (ascending) by nearest rank; `NaN` when empty.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Percentile `q` (0..=1) of `v` in any order, by nearest rank (as
/// [`percentile_sorted`], without sorting all of `v`); `None` when empty.
pub fn percentile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    let last = s.len() - 1;
    let k = ((last as f64 * q).round() as usize).min(last);
    let (_, x, _) = s.select_nth_unstable_by(k, f64::total_cmp);
    Some(*x)
}

/// The mean of `a` and `b` without overflow: `(a + b) / 2` is infinite for two finite
/// values near `f64::MAX`.
pub fn midpoint(a: f64, b: f64) -> f64 {
    a / 2.0 + b / 2.0
}

/// The median of `v` in any order: the middle value, or the mean of the two middle
/// values of an even count; `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    median_in_place(&mut v.to_vec())
}

/// [`median`], sorting `v` in place instead of copying it (for callers that hold a
/// scratch vector already).
pub fn median_in_place(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some(midpoint(v[n / 2 - 1], v[n / 2])),
    }
}

/// The upper median of `v` in any order: the middle value, or the higher of the two
/// middle values of an even count (the 50th percentile by nearest rank, as
/// [`percentile`]); `None` when empty. Unlike [`median`] it is always one of `v`'s
/// own values, so a level taken from figures is a figure that was seen, never a mean
/// of two levels.
pub fn upper_median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    let k = s.len() / 2;
    let (_, x, _) = s.select_nth_unstable_by(k, f64::total_cmp);
    Some(*x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_agree_sorted_or_not() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        for q in [0.0, 0.1, 0.25, 0.5, 0.9, 1.0] {
            assert_eq!(percentile(&v, q), Some(percentile_sorted(&s, q)), "q={q}");
        }
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 0.5), Some(3.0));
        assert_eq!(percentile(&v, 1.0), Some(5.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert!(percentile_sorted(&[], 0.5).is_nan());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let mut v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(median_in_place(&mut v), Some(2.5));
        assert_eq!(v, [1.0, 2.0, 3.0, 4.0], "sorted in place");
        assert_eq!(median_in_place(&mut []), None);
    }

    #[test]
    fn the_upper_median_is_the_higher_middle_value_and_the_nearest_rank_p50() {
        assert_eq!(upper_median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(upper_median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(upper_median(&[7.0]), Some(7.0));
        assert_eq!(upper_median(&[]), None);
        let v: Vec<f64> = (0..41).map(|k| f64::from((k * 17) % 23) * 1.5).collect();
        for n in 1..v.len() {
            let mut s = v[..n].to_vec();
            s.sort_by(f64::total_cmp);
            assert_eq!(upper_median(&v[..n]), Some(s[n / 2]), "n={n}");
            assert_eq!(upper_median(&v[..n]), percentile(&v[..n], 0.5), "n={n}");
        }
    }
}
