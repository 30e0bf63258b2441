//! [`place`]: a request's CPUs, from an explicit list checked as given or chosen by
//! `choose`, with the reserved siblings of an exclusive request and the explanation.

use super::choose::{Chooser, Cores};
use super::request::{Cost, Explanation, Placement, PlacementError, Policy, Request, SmtPolicy};
use crate::cpuset::CpuSet;
use crate::domains::Domains;

/// Chooses CPUs for `req` among `available` (the CPUs not taken by others).
pub fn place(d: &Domains, req: &Request, available: &CpuSet) -> Result<Placement, PlacementError> {
    let n = d.cpus().len();
    let online: CpuSet = d.cpus().iter().copied().collect();
    let free: Vec<bool> = d
        .cpus()
        .iter()
        .map(|&c| available.contains(c) && !req.exclude.contains(c))
        .collect();
    let cores = Cores::new(d);

    if let Some(list) = &req.cpus {
        return explicit(d, req, list, &online, &free, &cores);
    }
    let k = req.count;
    if k == 0 {
        return Err(PlacementError::ZeroCount);
    }
    // Which CPUs may be chosen at all.
    let usable: Vec<bool> = (0..n)
        .map(|i| free[i] && (!req.exclusive || cores.siblings(i).iter().all(|&s| free[s])))
        .collect();
    let chooser = Chooser {
        d,
        req,
        k,
        usable,
        cores: &cores,
    };
    let total = chooser.capacity(0..n);
    if total < k {
        let why = match (req.smt, req.exclusive) {
            (SmtPolicy::Avoid, _) => {
                "one CPU per core with smt = avoid, after exclusions".to_string()
            }
            (_, true) => "whole free cores only, the request is exclusive".to_string(),
            _ => format!("{} online, the rest excluded or taken", n),
        };
        return Err(PlacementError::NotEnough {
            wanted: k,
            usable: total,
            why,
        });
    }

    let mut notes = Vec::new();
    let (chosen, level, domains) = match req.policy {
        Policy::Compact => chooser.compact(&mut notes),
        Policy::Spread => chooser.spread(&mut notes),
    };
    let cpus: CpuSet = chosen.iter().map(|&i| d.cpus()[i]).collect();
    let mut reserved = cpus.clone();
    if req.exclusive {
        for &i in &chosen {
            reserved.extend(cores.siblings(i).into_iter().map(|s| d.cpus()[s]));
        }
        if reserved != cpus {
            notes.push(format!(
                "exclusive: idle siblings {} are reserved with the chosen CPUs",
                reserved.difference(&cpus)
            ));
        }
    }
    let explanation = explain(d, req, &chosen, level, domains, notes);
    Ok(Placement {
        cpus,
        reserved,
        explanation,
    })
}

/// Worst and mean pairwise cost of a set of indices.
pub fn set_cost(d: &Domains, set: &[usize]) -> Cost {
    let mut worst = 0.0f64;
    let mut sum = 0.0;
    let mut pairs = 0usize;
    let mut worst_level = 0usize;
    for (a, &i) in set.iter().enumerate() {
        for &j in &set[..a] {
            let c = d.cost(i, j);
            worst = worst.max(c);
            sum += c;
            pairs += 1;
            worst_level = worst_level.max(d.shared_level(i, j));
        }
    }
    let ns = d.cost_is_ns() && pairs > 0;
    Cost {
        worst_ns: ns.then(|| round1(worst)),
        mean_ns: ns.then(|| round1(sum / pairs as f64)),
        worst_level: if pairs == 0 {
            "none".to_string()
        } else {
            d.levels()[worst_level].name()
        },
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn explain(
    d: &Domains,
    req: &Request,
    chosen: &[usize],
    level: usize,
    domains: Vec<CpuSet>,
    notes: Vec<String>,
) -> Explanation {
    let k = chosen.len();
    let autopilot = (k <= d.cpus().len()).then(|| {
        let idx: Vec<usize> = (0..k).collect();
        (
            idx.iter().map(|&i| d.cpus()[i]).collect::<CpuSet>(),
            set_cost(d, &idx),
        )
    });
    let lvl = &d.levels()[level];
    Explanation {
        policy: req.policy,
        smt: req.smt,
        trust: d.trust(),
        level: lvl.name(),
        level_latency_ns: lvl.latency_ns,
        domains,
        cost: set_cost(d, chosen),
        autopilot,
        notes,
    }
}

/// The CPUs of the indices `idx` (into `d.cpus()`) that are not free.
fn not_free(d: &Domains, free: &[bool], idx: &[usize]) -> CpuSet {
    idx.iter()
        .filter(|&&i| !free[i])
        .map(|&i| d.cpus()[i])
        .collect()
}

fn explicit(
    d: &Domains,
    req: &Request,
    list: &CpuSet,
    online: &CpuSet,
    free: &[bool],
    cores: &Cores,
) -> Result<Placement, PlacementError> {
    if list.is_empty() {
        return Err(PlacementError::EmptyList);
    }
    let unknown = list.difference(online);
    if !unknown.is_empty() {
        return Err(PlacementError::UnknownCpus {
            cpus: unknown,
            online: online.clone(),
        });
    }
    let idx: Vec<usize> = list.iter().filter_map(|c| d.index_of(c)).collect();
    let busy = not_free(d, free, &idx);
    if !busy.is_empty() {
        return Err(PlacementError::Unavailable { cpus: busy });
    }
    let mut reserved = list.clone();
    for &i in &idx {
        let sib = cores.siblings(i);
        if req.smt == SmtPolicy::Avoid {
            if let Some(&s) = sib.iter().find(|s| idx.contains(s)) {
                return Err(PlacementError::SiblingsGiven {
                    a: d.cpus()[i.min(s)],
                    b: d.cpus()[i.max(s)],
                });
            }
        }
        if req.exclusive {
            let busy = not_free(d, free, &sib);
            if !busy.is_empty() {
                return Err(PlacementError::CoreNotFree {
                    cpu: d.cpus()[i],
                    busy,
                });
            }
            reserved.extend(sib.iter().map(|&s| d.cpus()[s]));
        }
    }
    let level = (0..d.levels().len())
        .find(|&l| {
            idx.iter()
                .all(|&i| d.group_of(l, i) == d.group_of(l, idx[0]))
        })
        .unwrap_or(d.levels().len() - 1);
    let group = d.levels()[level].groups[d.group_of(level, idx[0])].clone();
    let explanation = explain(
        d,
        req,
        &idx,
        level,
        vec![group],
        vec!["explicit CPU list, validated and used as given".to_string()],
    );
    Ok(Placement {
        cpus: list.clone(),
        reserved,
        explanation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::{Layout, LevelKind};

    /// 2 packages x 2 cores x 2 threads, siblings adjacent (QEMU's numbering).
    fn qemu() -> Domains {
        let sets = |s: &str| -> Vec<CpuSet> { s.split(' ').map(|g| g.parse().unwrap()).collect() };
        Domains::from_layout(&Layout {
            cpus: "0-7".parse().unwrap(),
            levels: vec![
                (LevelKind::Smt, sets("0-1 2-3 4-5 6-7")),
                (LevelKind::Package, sets("0-3 4-7")),
            ],
        })
        .unwrap()
    }

    #[test]
    fn best_fit_keeps_the_free_package_whole() {
        let d = qemu();
        let avail: CpuSet = "1-7".parse().unwrap();
        let req = Request {
            count: 2,
            smt: SmtPolicy::Avoid,
            ..Default::default()
        };
        let p = place(&d, &req, &avail).unwrap();
        assert_eq!(p.cpus.to_string(), "1-2");
        assert_eq!(p.explanation.level, "package");
        assert_eq!(p.explanation.cost.worst_ns, None);
        assert_eq!(p.explanation.cost.worst_level, "package");
    }

    #[test]
    fn exclusive_takes_whole_free_cores_and_reserves_siblings() {
        let d = qemu();
        let avail: CpuSet = "1-7".parse().unwrap();
        let req = Request {
            count: 1,
            exclusive: true,
            ..Default::default()
        };
        let p = place(&d, &req, &avail).unwrap();
        assert_eq!(p.cpus.to_string(), "2");
        assert_eq!(p.reserved.to_string(), "2-3");
        let req = Request {
            count: 7,
            exclusive: true,
            ..Default::default()
        };
        assert_eq!(
            place(&d, &req, &avail).unwrap_err().to_string(),
            "asked for 7 CPUs but only 6 are usable (whole free cores only, the request is exclusive)"
        );
    }

    #[test]
    fn spread_goes_one_per_package_then_one_per_core() {
        let d = qemu();
        let all: CpuSet = "0-7".parse().unwrap();
        let spread = |count| Request {
            count,
            policy: Policy::Spread,
            ..Default::default()
        };
        assert_eq!(place(&d, &spread(2), &all).unwrap().cpus.to_string(), "0,4");
        assert_eq!(
            place(&d, &spread(4), &all).unwrap().cpus.to_string(),
            "0,2,4,6"
        );
        assert_eq!(
            place(&d, &spread(6), &all).unwrap().cpus.to_string(),
            "0-2,4-6"
        );
    }

    #[test]
    fn words_round_trip() {
        for p in [Policy::Compact, Policy::Spread] {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
        }
        for s in [
            SmtPolicy::Allow,
            SmtPolicy::Avoid,
            SmtPolicy::PreferSiblings,
        ] {
            assert_eq!(s.to_string().parse::<SmtPolicy>().unwrap(), s);
        }
        let e = "tight".parse::<Policy>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown policy \"tight\": expected one of compact, spread"
        );
    }
}
