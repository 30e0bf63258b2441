//! The measured effect of placement, the seed experiment: K threads pass a token round
//! a ring through one shared cache line (K = 2: ping-pong), in op/s, on the planned
//! CPUs, on the autopilot CPUs (0..K−1), on the worst set, and unpinned. Several runs
//! of each, interleaved (the order rotates every round), with their spread; then the
//! ratios of medians. `pinnerd compare` and `pinnerd report --compare` run it.
//!
//! Owns: the ring's named, pinned threads. Must not touch: placement (it is handed the
//! planned CPUs and the domains that cost them).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::domains::Domains;
use crate::measure::pinned::pin_current;
use crate::stats;

/// `pinnerd compare --json` and `report.json`'s `effect`: the runs of every variant,
/// the ratios of medians and the notes. The fields of each object are in the order of
/// their names: the objects read as they did when they were JSON maps. A figure that is
/// not a number is written `null`, and read back as NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectJson {
    /// Threads in the ring.
    #[serde(default)]
    pub count: usize,
    /// The length of one run.
    pub duration_ms: u64,
    /// The line saying latency placement is off (an unstable matrix), or null.
    #[serde(default)]
    pub latency_off: Option<String>,
    pub notes: Vec<String>,
    /// `null` when the plan's matrix is unstable: no gain is claimed from it.
    #[serde(default)]
    pub ratios: Option<Ratios>,
    /// Runs of each variant.
    pub runs: u32,
    /// planned, autopilot, worst, unpinned (in that order).
    pub variants: Vec<VariantJson>,
}

/// One variant's runs in `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantJson {
    /// `null`: unpinned.
    pub cpus: Option<Vec<u32>>,
    #[serde(deserialize_with = "nan_when_null")]
    pub max: f64,
    #[serde(deserialize_with = "nan_when_null")]
    pub median: f64,
    #[serde(deserialize_with = "nan_when_null")]
    pub min: f64,
    pub name: String,
    /// Operations per second of each run, in run order; their median, min and max.
    #[serde(default)]
    pub ops_per_s: Vec<f64>,
    /// (max − min) / median.
    #[serde(deserialize_with = "nan_when_null")]
    pub spread: f64,
    #[serde(default)]
    pub worst_latency_ns: Option<f64>,
}

/// The planned variant's median op/s over each other variant's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ratios {
    #[serde(deserialize_with = "nan_when_null")]
    pub planned_vs_autopilot: f64,
    #[serde(deserialize_with = "nan_when_null")]
    pub planned_vs_unpinned: f64,
    #[serde(deserialize_with = "nan_when_null")]
    pub planned_vs_worst: f64,
}

/// A figure JSON wrote as `null` (not a number) read back as NaN.
fn nan_when_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One contestant.
#[derive(Debug, Clone)]
struct Variant {
    name: &'static str,
    /// `None`: unpinned.
    cpus: Option<Vec<u32>>,
    ops: Vec<f64>,
}

/// Result of one ring run: operations per second and whether every pin held.
fn ring_run(cpus: Option<&[u32]>, k: usize, duration: Duration) -> anyhow::Result<f64> {
    #[repr(align(128))]
    struct Line(AtomicU64);
    let line = Arc::new(Line(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(k + 1));
    let mut handles = Vec::with_capacity(k);
    for i in 0..k {
        let (line, stop, barrier) = (line.clone(), stop.clone(), barrier.clone());
        let cpu = cpus.map(|c| c[i]);
        let name = match cpu {
            Some(c) => format!("pinnerd-cmp-{c}"),
            None => format!("pinnerd-cmp-u{i}"),
        };
        handles.push(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || -> anyhow::Result<()> {
                    let pinned = cpu.map(pin_current).transpose();
                    barrier.wait();
                    pinned.map_err(|e| anyhow::anyhow!("{e}"))?;
                    let k = k as u64;
                    let me = i as u64;
                    while !stop.load(Ordering::Relaxed) {
                        let v = line.0.load(Ordering::Acquire);
                        if v % k == me {
                            line.0.store(v + 1, Ordering::Release);
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    Ok(())
                })
                .context("starting a ring thread")?,
        );
    }
    barrier.wait();
    let start_ops = line.0.load(Ordering::Acquire);
    let t0 = Instant::now();
    std::thread::sleep(duration);
    let ops = line.0.load(Ordering::Acquire) - start_ops;
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a ring thread panicked"))??;
    }
    Ok(ops as f64 / elapsed.as_secs_f64())
}

/// The K CPUs whose worst pair is the costliest: the farthest pair, grown greedily by
/// the CPU farthest from the set.
fn worst_set(d: &Domains, k: usize) -> Vec<u32> {
    let n = d.cpus().len();
    let (mut a, mut b, mut best) = (0, 1.min(n - 1), f64::MIN);
    for i in 0..n {
        for j in 0..i {
            if d.cost(i, j) > best {
                best = d.cost(i, j);
                (a, b) = (j, i);
            }
        }
    }
    let mut set = vec![a, b];
    while set.len() < k {
        let next = (0..n).filter(|i| !set.contains(i)).max_by(|&x, &y| {
            let fx = set.iter().map(|&s| d.cost(x, s)).fold(0.0, f64::max);
            let fy = set.iter().map(|&s| d.cost(y, s)).fold(0.0, f64::max);
            fx.total_cmp(&fy).then(y.cmp(&x))
        });
        match next {
            Some(i) => set.push(i),
            None => break,
        }
    }
    let mut ids: Vec<u32> = set.into_iter().map(|i| d.cpus()[i]).collect();
    ids.sort_unstable();
    ids
}

/// One contestant's runs.
#[derive(Debug, Clone)]
pub struct VariantResult {
    /// `planned`, `autopilot`, `worst` or `unpinned`.
    pub name: &'static str,
    /// `None`: unpinned.
    pub cpus: Option<Vec<u32>>,
    /// The worst pair latency of the CPUs by the plan's domains.
    pub worst_latency_ns: Option<f64>,
    /// Operations per second of each run, in run order.
    pub ops: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl VariantResult {
    /// (max − min) / median.
    pub fn spread(&self) -> f64 {
        (self.max - self.min) / self.median
    }
}

/// The measured effect of placement: every variant's runs and the notes.
#[derive(Debug, Clone)]
pub struct Effect {
    pub count: usize,
    pub runs: u32,
    pub duration_ms: u64,
    /// planned, autopilot, worst, unpinned (in that order).
    pub variants: Vec<VariantResult>,
    pub notes: Vec<String>,
    /// The plan's matrix is unstable: the planned CPUs come from the topology, and the
    /// runs are shown as measured with no gain concluded from them (set by the caller,
    /// which planned).
    pub latency_off: Option<&'static str>,
}

impl Effect {
    /// Median op/s of the planned variant over that of variant `i`.
    pub fn ratio(&self, i: usize) -> f64 {
        self.variants[0].median / self.variants[i].median
    }

    /// The `--json` form.
    pub fn as_json(&self) -> EffectJson {
        EffectJson {
            count: self.count,
            runs: self.runs,
            duration_ms: self.duration_ms,
            variants: self
                .variants
                .iter()
                .map(|v| VariantJson {
                    name: v.name.into(),
                    cpus: v.cpus.clone(),
                    worst_latency_ns: v.worst_latency_ns,
                    ops_per_s: v.ops.clone(),
                    median: v.median,
                    min: v.min,
                    max: v.max,
                    spread: v.spread(),
                })
                .collect(),
            // No gain is claimed from a plan made without a usable matrix.
            ratios: self.latency_off.is_none().then(|| Ratios {
                planned_vs_autopilot: self.ratio(1),
                planned_vs_worst: self.ratio(2),
                planned_vs_unpinned: self.ratio(3),
            }),
            latency_off: self.latency_off.map(String::from),
            notes: self.notes.clone(),
        }
    }

    /// The `--json` object (`pinnerd compare --json`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self.as_json()).expect("plain data serializes")
    }

    /// The table for people.
    pub fn human(&self) -> String {
        let mut s = String::new();
        if let Some(line) = self.latency_off {
            let _ = writeln!(s, "{line}");
        }
        let _ = writeln!(
            s,
            "{}-thread ring through one cache line, {} interleaved runs x {} ms each",
            self.count, self.runs, self.duration_ms
        );
        let _ = writeln!(
            s,
            "{:<10} {:<14} {:>11} {:>12} {:>12} {:>12} {:>8}",
            "variant", "cpus", "worst ns", "median op/s", "min op/s", "max op/s", "spread"
        );
        for v in &self.variants {
            let cpus = v
                .cpus
                .as_ref()
                .map(|c| c.iter().copied().collect::<CpuSet>().to_string())
                .unwrap_or_else(|| "(any)".into());
            let _ = writeln!(
                s,
                "{:<10} {:<14} {:>11} {:>12.3e} {:>12.3e} {:>12.3e} {:>7.0}%",
                v.name,
                cpus,
                v.worst_latency_ns
                    .map(|c| format!("{c:.1}"))
                    .unwrap_or_else(|| "?".into()),
                v.median,
                v.min,
                v.max,
                100.0 * v.spread()
            );
        }
        if self.latency_off.is_some() {
            let _ = writeln!(
                s,
                "no gain claimed: the planned CPUs come from the sysfs topology, since the matrix's figures did not hold when measured again; the runs above are as measured"
            );
        } else {
            let _ = writeln!(
                s,
                "ratios of medians: planned/autopilot {:.2}x, planned/worst {:.2}x, planned/unpinned {:.2}x",
                self.ratio(1),
                self.ratio(2),
                self.ratio(3)
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// Runs the K-thread ring on the `planned` CPUs, on the autopilot CPUs 0..K−1, on
/// the worst set and unpinned, `runs` times each, interleaved (the order rotates every
/// round). The CPUs must all be usable by this process.
pub fn measure(
    planned: &CpuSet,
    domains: &Domains,
    source: &str,
    k: usize,
    runs: u32,
    duration: Duration,
) -> anyhow::Result<Effect> {
    if k < 2 || runs == 0 || duration.is_zero() {
        anyhow::bail!("a ring needs at least 2 threads, 1 run and a duration above 0");
    }
    let allowed = crate::measure::allowed_cpus().context("reading this process's CPUs")?;
    let planned: Vec<u32> = planned.iter().collect();
    let autopilot: Vec<u32> = (0..k as u32).collect();
    let worst = worst_set(domains, k);
    for (name, set) in [
        ("planned", &planned),
        ("autopilot", &autopilot),
        ("worst", &worst),
    ] {
        let s: CpuSet = set.iter().copied().collect();
        if !s.is_subset(&allowed) {
            anyhow::bail!(
                "the {name} CPUs {s} are not all usable by this process (allowed: {allowed}); a --matrix from another machine cannot be compared here"
            );
        }
    }
    let mut variants = vec![
        Variant {
            name: "planned",
            cpus: Some(planned),
            ops: vec![],
        },
        Variant {
            name: "autopilot",
            cpus: Some(autopilot),
            ops: vec![],
        },
        Variant {
            name: "worst",
            cpus: Some(worst),
            ops: vec![],
        },
        Variant {
            name: "unpinned",
            cpus: None,
            ops: vec![],
        },
    ];
    let nv = variants.len();
    for r in 0..runs as usize {
        for j in 0..nv {
            let v = &mut variants[(r + j) % nv];
            let ops = ring_run(v.cpus.as_deref(), k, duration)
                .with_context(|| format!("{} run {}", v.name, r + 1))?;
            v.ops.push(ops);
        }
    }
    let cost_of = |cpus: &Option<Vec<u32>>| -> Option<f64> {
        let c = cpus.as_ref()?;
        let idx: Vec<usize> = c.iter().filter_map(|&x| domains.index_of(x)).collect();
        crate::placement::set_cost(domains, &idx).worst_ns
    };
    let med: Vec<f64> = variants
        .iter()
        .map(|v| stats::median(&v.ops).unwrap_or(f64::NAN))
        .collect();
    let distinct: Vec<&Option<Vec<u32>>> = {
        let mut seen: Vec<&Option<Vec<u32>>> = Vec::new();
        for v in &variants {
            if v.cpus.is_some() && !seen.contains(&&v.cpus) {
                seen.push(&v.cpus);
            }
        }
        seen
    };
    let mut notes = vec![format!("plan from {source}")];
    if distinct.len() < 3 {
        notes.push(format!(
            "only {} distinct pinned set(s) exist among planned/autopilot/worst on this machine ({} usable CPUs): those variants measure the same CPUs, so their ratios show run-to-run noise, not placement",
            distinct.len(),
            allowed.len()
        ));
    }
    let results = variants
        .into_iter()
        .zip(med)
        .map(|(v, median)| VariantResult {
            worst_latency_ns: cost_of(&v.cpus),
            min: v.ops.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.ops.iter().copied().fold(0.0, f64::max),
            median,
            name: v.name,
            cpus: v.cpus,
            ops: v.ops,
        })
        .collect();
    Ok(Effect {
        count: k,
        runs,
        duration_ms: duration.as_millis() as u64,
        variants: results,
        notes,
        latency_off: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(name: &'static str, cpus: Option<Vec<u32>>, ops: &[f64]) -> VariantResult {
        let median = stats::median(ops).unwrap();
        VariantResult {
            name,
            cpus,
            worst_latency_ns: Some(40.5),
            ops: ops.to_vec(),
            median,
            min: ops.iter().copied().fold(f64::INFINITY, f64::min),
            max: ops.iter().copied().fold(0.0, f64::max),
        }
    }

    /// The typed object is written as the JSON map it was (keys in the order of their
    /// names), a ratio that is no number as `null`, and it reads back, that ratio NaN.
    #[test]
    fn the_json_object_is_the_map_it_was_and_reads_back() {
        let e = Effect {
            count: 2,
            runs: 2,
            duration_ms: 300,
            variants: vec![
                variant("planned", Some(vec![0, 1]), &[2e7, 3e7]),
                variant("autopilot", Some(vec![0, 2]), &[1e7, 1e7]),
                variant("worst", Some(vec![0, 7]), &[5e6, 6e6]),
                variant("unpinned", None, &[0.0, 0.0]),
            ],
            notes: vec!["a note".into()],
            latency_off: None,
        };
        let typed = serde_json::to_string_pretty(&e.as_json()).unwrap();
        assert_eq!(typed, serde_json::to_string_pretty(&e.json()).unwrap());
        assert!(typed.contains("\"planned_vs_unpinned\": null"), "{typed}");
        let back: EffectJson = serde_json::from_str(&typed).unwrap();
        let ratios = back.ratios.as_ref().unwrap();
        assert!(ratios.planned_vs_unpinned.is_nan());
        assert_eq!(ratios.planned_vs_autopilot, 2.5);
        assert_eq!(back.variants[3].cpus, None);
        assert_eq!(back.variants[0].ops_per_s, vec![2e7, 3e7]);
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), typed);
        // An unstable matrix: no ratios, the line instead.
        let off = Effect {
            latency_off: Some("latency placement off"),
            ..e
        };
        let v = off.json();
        assert!(v["ratios"].is_null());
        assert_eq!(v["latency_off"], "latency placement off");
    }
}
