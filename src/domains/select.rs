//! Which latency domains to place on: the one place that decides between the matrix
//! reconciled with the sysfs topology, the matrix alone, and the topology alone.
//!
//! Owns: that choice and the words saying why. Pure: a matrix and a topology in,
//! [`Selected`] out. Used by the daemon, `plan`, `plan --live` and
//! `topology --matrix`; each says what to do with a matrix measured on other CPUs
//! ([`Misfit`]).

use crate::cpuset::CpuSet;
use crate::matrix::LatencyMatrix;
use crate::topology::Topology;

use super::{DomainError, Domains, Finding, Trust};

/// What to do with a matrix that covers other CPUs than the topology's online (or
/// usable) ones, or that cannot be reconciled with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfit {
    /// It is an error, naming both sets (`plan --live`, `plan` on a fixture tree).
    Refuse,
    /// Use the matrix alone and say so (a published matrix from another machine).
    MatrixAlone,
    /// Use the topology alone and say why (the daemon: a matrix is an improvement,
    /// never a requirement).
    Topology,
}

/// The domains chosen, with what was found on the way.
#[derive(Debug, Clone)]
pub struct Selected {
    pub domains: Domains,
    /// Where the matrix and the topology disagree, and which was trusted.
    pub findings: Vec<Finding>,
    /// What the domains rest on: measured latencies, or the topology's levels alone.
    pub trusted: Trust,
    /// Why the matrix was used alone, or not at all.
    pub warnings: Vec<String>,
    /// The matrix was found unstable (`measure::repeat`): these domains are the
    /// topology's, and this line says so, exactly
    /// ([`crate::matrix::HOST_MOVES_VCPUS`] on a virtual machine).
    pub latency_off: Option<&'static str>,
}

/// Latency domains that cannot be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectError {
    #[error("neither a matrix nor the CPU topology is available")]
    Nothing,
    #[error(transparent)]
    Domains(#[from] DomainError),
    /// An unstable matrix and no topology to place on instead.
    #[error("{line}, and the CPU topology is not available to place on instead")]
    Unstable { line: &'static str },
}

/// The domains to place on: `matrix` reconciled with `topology` when it was measured
/// on the topology's online or usable CPUs; otherwise as `misfit` says; the topology
/// alone without a matrix, or when the matrix is unstable (its repeats disagreed: the
/// figures are where the vCPUs sat for a moment, so no latency placement, whatever
/// `misfit` says).
pub fn select(
    matrix: Option<&LatencyMatrix>,
    topology: Option<&Topology>,
    misfit: Misfit,
) -> Result<Selected, SelectError> {
    let selected = |(domains, findings): (Domains, Vec<Finding>), warnings| Selected {
        trusted: domains.trust(),
        domains,
        findings,
        warnings,
        latency_off: None,
    };
    if let Some(line) = matrix.and_then(LatencyMatrix::latency_off) {
        let t = topology.ok_or(SelectError::Unstable { line })?;
        return Ok(Selected {
            latency_off: Some(line),
            ..selected((Domains::from_topology(t)?, Vec::new()), vec![])
        });
    }
    match (matrix, topology) {
        (None, None) => Err(SelectError::Nothing),
        (None, Some(t)) => Ok(selected((Domains::from_topology(t)?, Vec::new()), vec![])),
        (Some(m), None) => Ok(selected(Domains::reconcile(m, None)?, vec![])),
        (Some(m), Some(t)) => {
            let mset: CpuSet = m.cpus.iter().copied().collect();
            let fits = mset == t.online || mset == t.usable();
            match (fits, misfit) {
                (true, Misfit::Refuse | Misfit::MatrixAlone) | (false, Misfit::Refuse) => {
                    Ok(selected(Domains::reconcile(m, Some(t))?, vec![]))
                }
                (false, Misfit::MatrixAlone) => {
                    let why = format!(
                        "the matrix covers CPUs {mset} but the topology's online CPUs are {}: domains from the matrix alone",
                        t.online
                    );
                    Ok(selected(Domains::reconcile(m, None)?, vec![why]))
                }
                (_, Misfit::Topology) => match Domains::reconcile(m, Some(t)) {
                    Ok(d) => Ok(selected(d, vec![])),
                    Err(e) => {
                        let why = format!(
                            "the matrix cannot be used ({e}): domains from the sysfs topology"
                        );
                        Ok(selected(
                            (Domains::from_topology(t)?, Vec::new()),
                            vec![why],
                        ))
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysroot::SysRoot;

    fn fixture(name: &str) -> Topology {
        let root = SysRoot::with_sys(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(name)
                .join("sys"),
        );
        Topology::discover(&root).expect("fixture topology")
    }

    /// The Xeon E5620 fixture as measured: siblings i and i+8, sockets by parity.
    fn e5620() -> LatencyMatrix {
        LatencyMatrix::from_fn((0..16).collect(), |i, j| {
            if i % 8 == j % 8 {
                8.0
            } else if i % 2 == j % 2 {
                40.0
            } else {
                120.0
            }
        })
    }

    #[test]
    fn a_fitting_matrix_is_reconciled_with_the_topology_whatever_the_misfit_policy() {
        let t = fixture("xeon-e5620");
        let m = e5620();
        for misfit in [Misfit::Refuse, Misfit::MatrixAlone, Misfit::Topology] {
            let s = select(Some(&m), Some(&t), misfit).unwrap();
            assert_eq!(s.trusted, Trust::Matrix, "{misfit:?}");
            assert!(s.warnings.is_empty(), "{misfit:?}: {:?}", s.warnings);
            assert_eq!(s.domains.cpus().len(), 16);
        }
    }

    /// An unstable matrix is never placed on: the topology's domains whatever the
    /// misfit policy, the contract line with them, an error without a topology.
    #[test]
    fn an_unstable_matrix_gives_the_topology_s_domains_and_says_so() {
        use crate::matrix::{Stability, Verdict, HOST_MOVES_VCPUS, REPEATS_DISAGREE};
        let t = fixture("xeon-e5620");
        let mut m = e5620();
        let stable = Stability {
            repeated: 20,
            disagreeing: 1,
            nearest_moved: 0,
            tolerance: 0.25,
            bound: 0.25,
            verdict: Verdict::Stable,
            vm: true,
            why: None,
        };
        m.stability = Some(stable.clone());
        let s = select(Some(&m), Some(&t), Misfit::Refuse).unwrap();
        assert_eq!((s.trusted, s.latency_off), (Trust::Matrix, None));
        m.stability = Some(Stability {
            disagreeing: 12,
            verdict: Verdict::Unstable,
            ..stable
        });
        let from_topology = Domains::from_topology(&t).unwrap();
        for misfit in [Misfit::Refuse, Misfit::MatrixAlone, Misfit::Topology] {
            let s = select(Some(&m), Some(&t), misfit).unwrap();
            assert_eq!(s.latency_off, Some(HOST_MOVES_VCPUS), "{misfit:?}");
            assert_eq!(s.trusted, from_topology.trust(), "{misfit:?}");
            assert_eq!(s.domains.cpus(), from_topology.cpus());
        }
        m.stability.as_mut().unwrap().vm = false;
        let s = select(Some(&m), Some(&t), Misfit::Topology).unwrap();
        assert_eq!(s.latency_off, Some(REPEATS_DISAGREE));
        let e = select(Some(&m), None, Misfit::MatrixAlone).unwrap_err();
        assert_eq!(
            e.to_string(),
            "repeated measurements disagree: latency placement off, and the CPU topology is not available to place on instead"
        );
    }

    #[test]
    fn a_misfit_is_refused_used_alone_or_replaced_by_the_topology() {
        let t = fixture("xeon-e5620");
        let m = LatencyMatrix::interleaved(8, 20.0, 100.0);
        let e = select(Some(&m), Some(&t), Misfit::Refuse).unwrap_err();
        assert!(
            e.to_string()
                .contains("covers CPUs 0-7 (8) but the topology's online CPUs are 0-15 (16)"),
            "{e}"
        );
        let alone = select(Some(&m), Some(&t), Misfit::MatrixAlone).unwrap();
        assert_eq!(alone.trusted, Trust::Matrix);
        assert_eq!(
            alone.domains.cpus(),
            (0..8).collect::<Vec<u32>>().as_slice()
        );
        assert!(
            alone.warnings[0].contains("from the matrix alone"),
            "{:?}",
            alone.warnings
        );
        let topo = select(Some(&m), Some(&t), Misfit::Topology).unwrap();
        assert_eq!(topo.trusted, Trust::Topology);
        assert_eq!(topo.domains.cpus().len(), 16);
        assert!(
            topo.warnings[0].contains("from the sysfs topology"),
            "{:?}",
            topo.warnings
        );
    }

    #[test]
    fn without_a_matrix_the_topology_and_without_either_an_error() {
        let t = fixture("ryzen-2700x");
        let s = select(None, Some(&t), Misfit::Refuse).unwrap();
        assert_eq!(s.trusted, Trust::Topology);
        assert!(s.findings.is_empty() && s.warnings.is_empty());
        assert_eq!(
            select(None, None, Misfit::Topology).unwrap_err(),
            SelectError::Nothing
        );
        let m = LatencyMatrix::interleaved(4, 20.0, 100.0);
        assert_eq!(
            select(Some(&m), None, Misfit::Refuse).unwrap().trusted,
            Trust::Matrix
        );
    }
}
