//! Many matrices of one CPU model: the cellwise median of all hosts is the reference,
//! each host is diffed against it (`diff_with`), and a host that differs is an outlier.
//!
//! Must not touch: files, the OS.

use serde::Serialize;

use super::{check_layout, diff_with, level_labels, BlockDiff, FleetError, Tolerance, Verdict};
use crate::domains::Domains;
use crate::matrix::LatencyMatrix;
use crate::stats::median_in_place;

/// One host of a fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    pub file: String,
    pub outlier: bool,
    pub reasons: Vec<String>,
    /// Per level: this host's median and its deviation from the reference
    /// (`host / reference − 1`).
    pub levels: Vec<HostLevel>,
    /// Group pairs of this host that moved beyond the tolerance.
    pub groups: Vec<BlockDiff>,
    pub cells_differing: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostLevel {
    pub level: String,
    pub ns: Option<f64>,
    pub deviation: Option<f64>,
}

/// The group's figures per level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetLevel {
    pub level: String,
    /// The reference (cellwise median of every host) at this level.
    pub reference_ns: Option<f64>,
    /// Smallest and largest host median.
    pub min_ns: Option<f64>,
    pub max_ns: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fleet {
    pub levels: Vec<FleetLevel>,
    pub hosts: Vec<Host>,
    pub outliers: usize,
    pub tolerance: Tolerance,
}

/// Each host against the cellwise median of all hosts. At least three hosts, so that
/// the median is a majority's figure.
pub fn fleet(hosts: &[(String, LatencyMatrix)], tol: Tolerance) -> Result<Fleet, FleetError> {
    if hosts.len() < 3 {
        return Err(FleetError::TooFew(format!(
            "a fleet needs at least 3 matrices to find a majority, got {}",
            hosts.len()
        )));
    }
    let (first_name, first) = &hosts[0];
    for (name, m) in &hosts[1..] {
        check_layout(first, first_name, m, name)?;
    }
    let reference = cellwise_median(first, hosts);
    let domains = Domains::from_matrix(&reference).map_err(|cause| FleetError::Domains {
        name: "the fleet's median matrix".into(),
        cause,
    })?;
    let labels = level_labels(domains.levels());
    let mut out_hosts = Vec::with_capacity(hosts.len());
    let mut per_level: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
    let mut reference_ns: Vec<Option<f64>> = vec![None; labels.len()];
    for (name, m) in hosts {
        let d = diff_with(&domains, &reference, m, tol);
        let levels: Vec<HostLevel> = d
            .levels
            .iter()
            .map(|l| HostLevel {
                level: l.level.clone(),
                ns: l.b_ns,
                deviation: l.ratio.map(|r| r - 1.0),
            })
            .collect();
        for (k, l) in d.levels.iter().enumerate() {
            reference_ns[k] = l.a_ns;
            if let Some(v) = l.b_ns {
                per_level[k].push(v);
            }
        }
        let outlier = d.verdict == Verdict::Differs;
        let reasons = if outlier {
            d.reasons
                .iter()
                .map(|r| {
                    r.replace(" in A, ", " in the fleet, ")
                        .replace(" in B ", " here ")
                })
                .collect()
        } else {
            vec![format!(
                "within {:.0}% of the fleet at every level and group pair",
                tol.level * 100.0
            )]
        };
        out_hosts.push(Host {
            file: name.clone(),
            outlier,
            reasons,
            levels,
            groups: d.groups,
            cells_differing: d.cells.len(),
        });
    }
    let levels = labels
        .iter()
        .enumerate()
        .map(|(k, l)| FleetLevel {
            level: l.clone(),
            reference_ns: reference_ns[k],
            min_ns: per_level[k].iter().copied().reduce(f64::min),
            max_ns: per_level[k].iter().copied().reduce(f64::max),
        })
        .collect();
    let outliers = out_hosts.iter().filter(|h| h.outlier).count();
    Ok(Fleet {
        levels,
        hosts: out_hosts,
        outliers,
        tolerance: tol,
    })
}

/// The median of every cell over the hosts that have it, on the first host's CPUs.
fn cellwise_median(first: &LatencyMatrix, hosts: &[(String, LatencyMatrix)]) -> LatencyMatrix {
    let cpus = first.cpus.clone();
    let idx: Vec<Vec<Option<usize>>> = hosts
        .iter()
        .map(|(_, m)| cpus.iter().map(|&c| m.index_of(c)).collect())
        .collect();
    let n = cpus.len();
    let mut latency_ns = crate::matrix::Cells::new(n);
    let mut vals = Vec::with_capacity(hosts.len());
    for i in 0..n {
        for j in 0..i {
            vals.clear();
            for (h, (_, m)) in hosts.iter().enumerate() {
                if let (Some(a), Some(b)) = (idx[h][i], idx[h][j]) {
                    if let Some(v) = m.at(a, b) {
                        vals.push(v);
                    }
                }
            }
            let v = median_in_place(&mut vals);
            latency_ns.set(i, j, v);
        }
    }
    LatencyMatrix::new(cpus, latency_ns)
}
