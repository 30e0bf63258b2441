//! Held-out checks of the filled blocks on small machines: a few pairs of each block
//! that nothing has measured yet, compared with the figure the fill would give them. A
//! block's spot checks helped make its fit, so they agree with it more than its other
//! cells do; fresh pairs do not, so a block whose fill is off where nothing measured
//! is caught. A block two fresh pairs miss is measured fully; one miss in the first 8
//! draws 8 more, so a single noisy figure does not cost a whole block.
//!
//! Only below [`super::SparseConfig::held_out_below`] CPUs, where sparse mode has no
//! pair budget to keep and a full matrix is cheap: on a mesh a fair share of a large
//! block's fill is off, so a fresh pair would nearly always miss it and measure it
//! fully, several times the pair budget. Figures: `benches/README.md`, "Held-out
//! checks below 64 CPUs".
//!
//! Must not touch: the measurer's choice of rounds (the run measures what it names).

use super::super::rng::Rng;
use super::block::Block;
use super::fit::Fit;
use super::run::Run;
use super::{MeasureError, PairMeasurer, SparseConfig};

/// Measures `cfg.samples` fresh pairs of every block of `fill` (fewer where fewer are
/// left), once more those off the fill beyond the tolerance (the lower figure is kept:
/// preemption only inflates), and as many fresh pairs again of a block missed by one;
/// returns the indices into `fill` of the blocks missed by two or more. Nothing is
/// measured, and nothing returned, from `cfg.held_out_below` CPUs on.
pub(super) fn held_out<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    fill: &[(&Block, Fit)],
    cfg: &SparseConfig,
    rng: &mut Rng,
) -> Result<Vec<usize>, MeasureError> {
    if run.n() >= cfg.held_out_below {
        return Ok(Vec::new());
    }
    let tol = (1.0 + cfg.tolerance).ln();
    let mut drawn: Vec<Vec<(usize, usize)>> = vec![Vec::new(); fill.len()];
    let mut ask: Vec<usize> = (0..fill.len()).collect();
    let mut count = vec![0usize; fill.len()];
    // Stage one for every block; stage two (as many again) for a block missed once.
    for _ in 0..2 {
        let mut want = Vec::new();
        for &k in &ask {
            let mut open: Vec<(usize, usize)> = fill[k]
                .0
                .pairs()
                .into_iter()
                .filter(|&(i, j)| run.get(i, j).is_none())
                .collect();
            for _ in 0..cfg.samples {
                if open.is_empty() {
                    break;
                }
                let p = open.swap_remove(rng.below(open.len()));
                drawn[k].push(p);
                want.push(p);
            }
        }
        run.measure(&want, false)?;
        let misses = |run: &Run<'_, M>, k: usize| -> Vec<(usize, usize)> {
            let (b, fit) = &fill[k];
            drawn[k]
                .iter()
                .copied()
                .filter(|&(i, j)| {
                    run.get(i, j)
                        .is_some_and(|v| (v / fit.fill(b, i, j)).ln().abs() > tol)
                })
                .collect()
        };
        let again: Vec<(usize, usize)> = ask.iter().flat_map(|&k| misses(run, k)).collect();
        run.measure(&again, true)?;
        count = (0..fill.len()).map(|k| misses(run, k).len()).collect();
        ask = (0..fill.len()).filter(|&k| count[k] == 1).collect();
    }
    Ok((0..fill.len()).filter(|&k| count[k] >= 2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::measure::simulate::Simulated;

    fn block(n: usize) -> Block {
        Block {
            kids: (0..n).map(|i| vec![i]).collect(),
            kid_of: (0..n).map(|i| (i, i)).collect(),
            unit_of: std::collections::BTreeMap::new(),
            pair_terms: false,
        }
    }

    /// One block of 8 single CPUs; its fit made from a ring of 8 measured pairs.
    fn fitted(truth: &LatencyMatrix, cfg: &SparseConfig) -> (Vec<usize>, usize) {
        let ids: Vec<u32> = (0..8).collect();
        let mut sim = Simulated::new(truth, 0.0, 1);
        let mut run = Run::new(&ids, &mut sim);
        let ring: Vec<(usize, usize)> = (0..8).map(|i| (i, (i + 1) % 8)).collect();
        run.measure(&ring, false).unwrap();
        let b = block(8);
        let fit = Fit::new(&run, &b).unwrap();
        let before = run.measurements;
        let out = held_out(&mut run, &[(&b, fit)], cfg, &mut Rng::new(7)).unwrap();
        (out, run.measurements - before)
    }

    #[test]
    fn a_block_whose_other_cells_its_fit_misses_is_returned_and_one_it_fits_is_not() {
        let cfg = SparseConfig::default();
        // Neighbours on a ring of 8 at 40 ns, everything else 60 ns: the fit, made
        // from the neighbours only, says 40 ns everywhere.
        let ring = LatencyMatrix::from_fn((0..8).collect(), |i, j| {
            if (i + 8 - j) % 8 == 1 || (j + 8 - i) % 8 == 1 {
                40.0
            } else {
                60.0
            }
        });
        let (out, measured) = fitted(&ring, &cfg);
        assert_eq!(out, vec![0]);
        assert!(measured >= cfg.samples, "{measured}");
        // One level everywhere: the fresh pairs agree.
        let flat = LatencyMatrix::from_fn((0..8).collect(), |_, _| 50.0);
        let (out, measured) = fitted(&flat, &cfg);
        assert!(out.is_empty());
        assert_eq!(measured, cfg.samples);
        // From `held_out_below` CPUs on nothing is measured.
        let off = SparseConfig {
            held_out_below: 8,
            ..cfg
        };
        assert_eq!(fitted(&ring, &off), (Vec::new(), 0));
    }
}
