//! Meshes: machines whose figures grow with the distance across a 2-D interconnect
//! (the Arm CMN meshes of AWS Graviton2 and Graviton3) instead of stepping between the
//! levels of a hierarchy. No tree describes them; a model does:
//!
//! ```text
//! ln v(i, j) = mu + a_i + a_j + |q_i − q_j|²
//! ```
//!
//! a factor per CPU (`a`) and a position in the plane (`q`). It is fitted by robust
//! least squares (soft-L1, Levenberg–Marquardt) to the first pairs and pairs drawn at
//! random, with CPUs that neighbour in numbering held close by a penalty that a jump
//! between them can pay (CPUs numbered in a row sit near each other on the mesh), and
//! checked on fresh pairs before it is trusted.
//!
//! Must not touch: the OS, files, the daemon.

use super::run::Run;
use super::{MeasureError, PairMeasurer, SparseConfig};
use crate::measure::rng::Rng;

/// Machines of fewer CPUs are not looked at for a mesh: the sign below was measured
/// on published matrices of 32 CPUs and more.
pub(super) const MESH_FROM: usize = 32;

/// Nor machines of more: the fit solves for `3n + 1` unknowns densely, which grows as
/// n³; past 128 CPUs it takes longer than the measurement it saves (timed in
/// `benches/README.md`).
pub(super) const MESH_UP_TO: usize = 128;

/// The first pairs' smooth share ([`smooth_share`]) from which the model is tried by
/// default (`SparseConfig::mesh_share`): between the meshes (and rings of clusters,
/// which the model holds too) and every hierarchy among the published matrices of 32
/// CPUs and more, whose shares `benches/README.md` lists. A machine tried wrongly costs
/// the model's pairs, not its cells: the fit check refuses it.
pub(super) const MESH_SHARE: f64 = 0.35;

/// Random pairs per CPU beside the first pairs, the held-out ones included.
const RANDOM_PER_CPU: usize = 2;
/// Fresh pairs the model must predict before it is trusted.
const HELD_OUT: usize = 32;
/// The model is refused when more than one in this many of the run's figures (after
/// a second try) lie further than the tolerance from it.
const MISFIT_SHARE: usize = 20;
/// Scale of the soft-L1 loss, in log units: a figure further off than this counts
/// less and less (a preempted figure or a pair the model cannot hold).
const SCALE: f64 = 0.03;
/// Weight of the penalty holding CPUs neighbouring in numbering close.
const FUSE: f64 = 1.0;
/// A small pull of every factor and position to zero, which fixes the plane's
/// translation (the model does not see it).
const RIDGE: f64 = 1e-3;
/// Random starts of the first fit, the best kept.
const STARTS: usize = 4;
/// Levenberg–Marquardt iterations at most per fit.
const ITERS: usize = 200;

/// The share of the log range of `figures` covered by steps under `step` (a ratio)
/// between neighbouring sorted figures: near 1 for a mesh, whose figures fill their
/// span, low for a hierarchy, whose levels leave gaps; the lowest and highest
/// twentieth of the figures left out. 0 when the figures span less than two steps
/// (one level: nothing for a model to add).
pub(super) fn smooth_share(figures: &[f64], step: f64) -> f64 {
    let mut v: Vec<f64> = figures
        .iter()
        .filter(|x| x.is_finite() && **x > 0.0)
        .map(|x| x.ln())
        .collect();
    v.sort_by(f64::total_cmp);
    // The twentieth at either end left out: a few pairs far below or above the rest
    // (two CPUs of a mesh stop, a late figure) are no level.
    let trim = v.len() / 20;
    let v = &v[trim..v.len() - trim];
    let (Some(lo), Some(hi)) = (v.first(), v.last()) else {
        return 0.0;
    };
    let range = hi - lo;
    if range < 2.0 * step.ln() {
        return 0.0;
    }
    let smooth: f64 = v
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d < step.ln())
        .sum();
    smooth / range
}

/// The fitted mesh model.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MeshModel {
    /// `[mu, a_0 … a_{n−1}, q_0x, q_0y, …]`.
    x: Vec<f64>,
    n: usize,
}

impl MeshModel {
    /// The model's figure for the pair `(i, j)`.
    pub(super) fn predict(&self, i: usize, j: usize) -> f64 {
        log_model(&self.x, self.n, i, j).0.exp()
    }

    /// Fits `obs` (`(i, j, figure)`, row indices of `n` CPUs): from [`STARTS`] random
    /// starts, or from `from` alone. `None` with fewer figures than CPUs.
    pub(super) fn fit(
        n: usize,
        obs: &[(usize, usize, f64)],
        from: Option<&MeshModel>,
        rng: &mut Rng,
    ) -> Option<MeshModel> {
        if obs.len() < n || n < 2 {
            return None;
        }
        let y: Vec<f64> = obs.iter().map(|o| o.2.ln()).collect();
        let median = crate::stats::upper_median(&y)?;
        let starts: Vec<Vec<f64>> = match from {
            Some(m) if m.n == n => vec![m.x.clone()],
            _ => (0..STARTS)
                .map(|_| {
                    let mut x = vec![0.0; 3 * n + 1];
                    x[0] = median;
                    for v in &mut x[1 + n..] {
                        *v = 0.15 * rng.normal();
                    }
                    x
                })
                .collect(),
        };
        let mut best: Option<(f64, Vec<f64>)> = None;
        for mut x in starts {
            let c = solve(n, obs, &y, &mut x);
            if best.as_ref().is_none_or(|(b, _)| c < *b) {
                best = Some((c, x));
            }
        }
        best.map(|(_, x)| MeshModel { x, n })
    }
}

/// The model's log figure for `(i, j)` and its nonzero derivatives.
fn log_model(x: &[f64], n: usize, i: usize, j: usize) -> (f64, [(usize, f64); 7]) {
    let (qi, qj) = (1 + n + 2 * i, 1 + n + 2 * j);
    let dx = x[qi] - x[qj];
    let dy = x[qi + 1] - x[qj + 1];
    let v = x[0] + x[1 + i] + x[1 + j] + dx * dx + dy * dy;
    let jac = [
        (0, 1.0),
        (1 + i, 1.0),
        (1 + j, 1.0),
        (qi, 2.0 * dx),
        (qi + 1, 2.0 * dy),
        (qj, -2.0 * dx),
        (qj + 1, -2.0 * dy),
    ];
    (v, jac)
}

/// Every residual of the fit with its nonzero derivatives: the figures, the ridge and
/// the neighbour penalty.
fn residuals(
    n: usize,
    obs: &[(usize, usize, f64)],
    y: &[f64],
    x: &[f64],
    mut each: impl FnMut(f64, &[(usize, f64)]),
) {
    for (o, &yk) in obs.iter().zip(y) {
        let (v, jac) = log_model(x, n, o.0, o.1);
        each(v - yk, &jac);
    }
    for (p, &xp) in x.iter().enumerate().skip(1) {
        each(RIDGE * xp, &[(p, RIDGE)]);
    }
    for i in 0..n.saturating_sub(1) {
        let a = 1 + i;
        each(FUSE * (x[a + 1] - x[a]), &[(a, -FUSE), (a + 1, FUSE)]);
        for d in 0..2 {
            let q = 1 + n + 2 * i + d;
            each(FUSE * (x[q + 2] - x[q]), &[(q, -FUSE), (q + 2, FUSE)]);
        }
    }
}

/// Soft-L1 loss of a residual and its weight for the next step.
fn soft(r: f64) -> (f64, f64) {
    let z = (r / SCALE) * (r / SCALE);
    let s = (1.0 + z).sqrt();
    (2.0 * SCALE * SCALE * (s - 1.0), 1.0 / s)
}

fn cost(n: usize, obs: &[(usize, usize, f64)], y: &[f64], x: &[f64]) -> f64 {
    let mut c = 0.0;
    residuals(n, obs, y, x, |r, _| c += soft(r).0);
    c
}

/// Levenberg–Marquardt on the soft-L1 cost, weights renewed every step; `x` ends at
/// the best point found. Returns its cost.
fn solve(n: usize, obs: &[(usize, usize, f64)], y: &[f64], x: &mut [f64]) -> f64 {
    let p = x.len();
    let mut c = cost(n, obs, y, x);
    let mut lambda = 1e-3;
    let mut h = vec![0.0; p * p];
    let mut g = vec![0.0; p];
    for _ in 0..ITERS {
        h.iter_mut().for_each(|v| *v = 0.0);
        g.iter_mut().for_each(|v| *v = 0.0);
        residuals(n, obs, y, x, |r, jac| {
            let w = soft(r).1;
            for &(a, ja) in jac {
                g[a] += w * ja * r;
                for &(b, jb) in jac {
                    h[a * p + b] += w * ja * jb;
                }
            }
        });
        let mut stepped = None;
        for _ in 0..12 {
            let mut m = h.clone();
            for k in 0..p {
                m[k * p + k] += lambda * h[k * p + k] + 1e-12;
            }
            let Some(step) = cholesky_solve(&mut m, &g, p) else {
                lambda *= 10.0;
                continue;
            };
            let trial: Vec<f64> = x.iter().zip(&step).map(|(v, s)| v - s).collect();
            let ct = cost(n, obs, y, &trial);
            if ct < c {
                stepped = Some((trial, ct));
                lambda = (lambda / 3.0).max(1e-12);
                break;
            }
            lambda *= 4.0;
        }
        let Some((trial, ct)) = stepped else {
            break;
        };
        let gain = c - ct;
        x.copy_from_slice(&trial);
        c = ct;
        if gain <= 1e-10 * c.max(1e-12) {
            break;
        }
    }
    c
}

/// Solves `m · s = g` for a symmetric positive definite `m` (`p × p`, overwritten by
/// its Cholesky factor). `None` when `m` is not positive definite.
fn cholesky_solve(m: &mut [f64], g: &[f64], p: usize) -> Option<Vec<f64>> {
    for j in 0..p {
        let mut d = m[j * p + j];
        for k in 0..j {
            d -= m[j * p + k] * m[j * p + k];
        }
        if d <= 0.0 || !d.is_finite() {
            return None;
        }
        let d = d.sqrt();
        m[j * p + j] = d;
        for i in j + 1..p {
            let mut s = m[i * p + j];
            for k in 0..j {
                s -= m[i * p + k] * m[j * p + k];
            }
            m[i * p + j] = s / d;
        }
    }
    let mut s = g.to_vec();
    for i in 0..p {
        for k in 0..i {
            s[i] -= m[i * p + k] * s[k];
        }
        s[i] /= m[i * p + i];
    }
    for i in (0..p).rev() {
        for k in i + 1..p {
            s[i] -= m[k * p + i] * s[k];
        }
        s[i] /= m[i * p + i];
    }
    Some(s)
}

/// Every measured pair of the run as `(i, j, figure)`.
fn observed<M: PairMeasurer>(run: &Run<'_, M>) -> Vec<(usize, usize, f64)> {
    let n = run.n();
    (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter_map(|(i, j)| Some((i, j, run.get(i, j)?)))
        .collect()
}

/// `k` pairs not measured yet, drawn at random (fewer when fewer are left).
fn fresh<M: PairMeasurer>(run: &Run<'_, M>, k: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
    let n = run.n();
    let mut left: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter(|&(i, j)| run.get(i, j).is_none())
        .collect();
    rng.sample(&mut left, k);
    left
}

/// The pairs of `pairs` whose figure is further than `tol` (a ratio) from the model's.
fn misses<M: PairMeasurer>(
    run: &Run<'_, M>,
    model: &MeshModel,
    pairs: impl IntoIterator<Item = (usize, usize)>,
    tol: f64,
) -> Vec<(usize, usize)> {
    pairs
        .into_iter()
        .filter(|&(i, j)| {
            run.get(i, j)
                .is_some_and(|v| (v / model.predict(i, j)).ln().abs() > tol.ln())
        })
        .collect()
}

/// Maps a mesh whose first pairs are measured: `RANDOM_PER_CPU · n − HELD_OUT` pairs
/// at random, the model fitted to every figure, its misfits measured once more (the
/// lower kept) and fitted again; then [`HELD_OUT`] fresh pairs, those it misses by
/// more than the tolerance measured once more. More than one in eight still missed,
/// or more than one in [`MISFIT_SHARE`] of all the figures off the model: `None`, the
/// model refused (the pairs stay measured). Else the model fitted to every figure.
pub(super) fn map_mesh<M: PairMeasurer>(
    run: &mut Run<'_, M>,
    cfg: &SparseConfig,
    rng: &mut Rng,
) -> Result<Option<MeshModel>, MeasureError> {
    let n = run.n();
    let tol = 1.0 + cfg.tolerance;
    let draw = fresh(run, (RANDOM_PER_CPU * n).saturating_sub(HELD_OUT), rng);
    run.measure(&draw, false)?;
    let obs = observed(run);
    let Some(model) = MeshModel::fit(n, &obs, None, rng) else {
        return Ok(None);
    };
    let again = misses(run, &model, obs.iter().map(|o| (o.0, o.1)), tol);
    run.measure(&again, true)?;
    let Some(model) = MeshModel::fit(n, &observed(run), Some(&model), rng) else {
        return Ok(None);
    };
    let held = fresh(run, HELD_OUT, rng);
    run.measure(&held, false)?;
    let again = misses(run, &model, held.iter().copied(), tol);
    run.measure(&again, true)?;
    let missed = misses(run, &model, held.iter().copied(), tol).len();
    let obs = observed(run);
    let misfit = misses(run, &model, obs.iter().map(|o| (o.0, o.1)), tol).len();
    tracing::debug!(
        pairs = run.distinct(),
        misfit,
        held_out = held.len(),
        missed,
        "sparse: mesh model checked"
    );
    // A hierarchy fits a smooth model badly where its levels step: its closest pairs
    // (SMT siblings, a shared cache) sit far below the model. Meshes leave 1–7 of
    // about 270 figures off the model, hierarchies at least 11% of theirs.
    if missed * 8 > held.len() || misfit * MISFIT_SHARE > obs.len() {
        return Ok(None);
    }
    Ok(MeshModel::fit(n, &obs, Some(&model), rng))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mesh_fills_its_span_and_a_hierarchy_leaves_gaps() {
        // Figures 30–58 ns in steps of about 2%: a mesh.
        let mesh: Vec<f64> = (0..60).map(|k| 30.0 * 1.011f64.powi(k)).collect();
        assert!(smooth_share(&mesh, 1.1) > 0.99);
        // Three levels (SMT, cache, socket) with noise around each.
        let tree: Vec<f64> = (0..60)
            .map(|k| [8.0, 40.0, 120.0][k % 3] * (1.0 + 0.01 * (k % 5) as f64))
            .collect();
        assert!(
            smooth_share(&tree, 1.1) < 0.1,
            "{}",
            smooth_share(&tree, 1.1)
        );
        // One level: nothing to model.
        assert_eq!(smooth_share(&[40.0, 41.0, 42.0], 1.1), 0.0);
        assert_eq!(smooth_share(&[], 1.1), 0.0);
    }

    #[test]
    fn the_model_is_recovered_from_a_third_of_the_pairs_of_a_grid() {
        // A 6×6 grid of 36 CPUs numbered row by row, a factor per CPU.
        let n = 36;
        let pos = |i: usize| ((i % 6) as f64 * 0.12, (i / 6) as f64 * 0.12);
        let fac = |i: usize| 0.02 * ((i * 7) % 5) as f64;
        let truth = |i: usize, j: usize| {
            let ((xi, yi), (xj, yj)) = (pos(i), pos(j));
            (3.4 + fac(i) + fac(j) + (xi - xj).powi(2) + (yi - yj).powi(2)).exp()
        };
        let mut rng = Rng::new(5);
        let mut obs = Vec::new();
        for i in 1..n {
            obs.push((i, i - 1, truth(i, i - 1)));
        }
        while obs.len() < 210 {
            let (i, j) = (rng.below(n), rng.below(n));
            if i != j
                && !obs
                    .iter()
                    .any(|o| (o.0, o.1) == (i, j) || (o.1, o.0) == (i, j))
            {
                obs.push((i, j, truth(i, j)));
            }
        }
        let m = MeshModel::fit(n, &obs, None, &mut rng).expect("enough figures");
        let off: Vec<f64> = (0..n)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .map(|(i, j)| (m.predict(i, j) / truth(i, j)).ln().abs())
            .collect();
        let near = off.iter().filter(|&&d| d <= 1.1f64.ln()).count();
        let worst = off.iter().copied().fold(0.0, f64::max);
        // 619 of 630 (98.3%), worst 12.4%: the wrap from one row to the next pays
        // the neighbour penalty. The figures span a factor of 2.3.
        let ctx = format!(
            "{near} of {} within 10%, worst {:.1}%",
            off.len(),
            worst * 100.0
        );
        assert!(near * 100 >= 95 * off.len(), "{ctx}");
        assert!(worst < 0.2, "{ctx}");
        assert!(MeshModel::fit(n, &obs[..10], None, &mut rng).is_none());
    }

    #[test]
    fn cholesky_solves_and_refuses_what_is_not_positive_definite() {
        let mut m = vec![4.0, 2.0, 2.0, 3.0];
        let s = cholesky_solve(&mut m, &[2.0, 1.0], 2).expect("positive definite");
        assert!((s[0] - 0.5).abs() < 1e-12 && s[1].abs() < 1e-12, "{s:?}");
        let mut bad = vec![1.0, 2.0, 2.0, 1.0];
        assert!(cholesky_solve(&mut bad, &[1.0, 1.0], 2).is_none());
    }
}
