//! Whether a new matrix is worth moving already placed processes for (no churn).
//!
//! Pure: domains, the count units' requests with the CPUs they hold now, and the CPUs
//! available → the units that the new domains would place materially better.
//!
//! Must not touch: the manager or the OS. The loop asks, and re-plans only on a yes.

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::placement::{self, Request};

/// A unit that would improve: its name, its worst pairwise latency now and after.
#[derive(Debug, Clone, PartialEq)]
pub struct Better {
    pub unit: String,
    pub now_ns: f64,
    pub then_ns: f64,
}

/// The worst pairwise latency of `cpus` on `d`, in ns; `None` when `d` has no
/// latencies (sysfs only) or a CPU is not in `d`.
fn worst_ns(d: &Domains, cpus: &CpuSet) -> Option<f64> {
    let idx: Option<Vec<usize>> = cpus.iter().map(|c| d.index_of(c)).collect();
    placement::set_cost(d, &idx?).worst_ns
}

/// The units whose worst pairwise latency the new domains would cut by more than
/// `threshold` (relative, e.g. 0.10) and by more than `floor_ns` (absolute, so that
/// noise between near-equal sets moves nothing). Each unit is `(name, request, cpus
/// it holds now)`; `available` are the CPUs a re-plan could use for it (its own
/// included).
pub fn improvements(
    d: &Domains,
    units: &[(String, Request, CpuSet)],
    available: &CpuSet,
    threshold: f64,
    floor_ns: f64,
) -> Vec<Better> {
    units
        .iter()
        .filter_map(|(unit, req, now)| {
            let now_ns = worst_ns(d, now)?;
            let then = placement::place(d, req, &available.union(now)).ok()?;
            let then_ns = worst_ns(d, &then.cpus)?;
            let gain = now_ns - then_ns;
            (gain > floor_ns && gain > threshold * now_ns).then(|| Better {
                unit: unit.clone(),
                now_ns,
                then_ns,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::LatencyMatrix;
    use crate::placement::{Policy, SmtPolicy};

    /// 8 CPUs: {0,2,4,6} and {1,3,5,7} are two clusters (20 ns inside, 100 ns across),
    /// the layout where "CPUs 0,1" is the autopilot mistake.
    fn interleaved() -> Domains {
        let m = LatencyMatrix::from_fn(
            (0..8).collect(),
            |i, j| {
                if i % 2 == j % 2 {
                    20.0
                } else {
                    100.0
                }
            },
        );
        Domains::from_matrix(&m).expect("domains")
    }

    fn pair() -> Request {
        Request {
            count: 2,
            policy: Policy::Compact,
            smt: SmtPolicy::Allow,
            ..Request::default()
        }
    }

    #[test]
    fn a_pair_across_clusters_moves() {
        let d = interleaved();
        let all: CpuSet = (0..8).collect();
        let now: CpuSet = [0, 1].into_iter().collect();
        let b = improvements(&d, &[("md".into(), pair(), now)], &all, 0.10, 5.0);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].now_ns, 100.0);
        assert_eq!(b[0].then_ns, 20.0);
    }

    #[test]
    fn an_equally_good_pair_stays() {
        let d = interleaved();
        let all: CpuSet = (0..8).collect();
        let now: CpuSet = [4, 6].into_iter().collect();
        assert!(improvements(&d, &[("md".into(), pair(), now)], &all, 0.10, 5.0).is_empty());
    }

    #[test]
    fn sysfs_only_domains_never_move_anything() {
        let t = crate::topology::Topology::discover(&crate::sysroot::SysRoot::default())
            .expect("this machine's topology");
        let d = Domains::from_topology(&t).expect("domains");
        let usable = t.usable();
        let now: CpuSet = usable.iter().take(2).collect();
        if now.len() == 2 {
            assert!(improvements(&d, &[("x".into(), pair(), now)], &usable, 0.10, 5.0).is_empty());
        }
    }
}
