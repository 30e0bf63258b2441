//! Checks that say whether a figure can be trusted: did the pin hold, did the thread
//! get switched out, is this a virtual machine, is the clock fine enough; and the
//! assessment of a whole run ([`assess`]): its pairs' results made into cells, stats
//! and the warnings that say what cannot be trusted.
//!
//! The per-thread probes the spin engine calls at batch boundaries are in
//! [`pinned`](super::pinned); what is here is pure or reads through `SysRoot`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{estimator, spin};
use crate::matrix::PairStats;
use crate::sysroot::SysRoot;

/// Whether the CPU flags in `/proc/cpuinfo` carry `hypervisor` (x86 guests), or
/// `/sys/hypervisor/type` names one (Xen and others).
pub fn hypervisor(root: &SysRoot) -> Option<String> {
    if let Ok(t) = crate::sysroot::read_bounded(root.sys_path("hypervisor/type")) {
        let t = t.trim();
        if !t.is_empty() {
            return Some(t.to_string());
        }
    }
    let cpuinfo = crate::sysroot::read_bounded(root.proc_path("cpuinfo")).ok()?;
    cpuinfo_has_hypervisor(&cpuinfo).then(|| "hypervisor flag".to_string())
}

/// Pure part of [`hypervisor`]: the `flags` line lists `hypervisor`.
pub fn cpuinfo_has_hypervisor(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_ascii_whitespace().any(|f| f == "hypervisor"))
}

/// The smallest step `Instant::now()` is seen to take: the clock's effective
/// resolution. A coarse clock quantises every batch figure.
pub fn timer_granularity() -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..200 {
        let a = Instant::now();
        let mut b = Instant::now();
        while b == a {
            b = Instant::now();
        }
        best = best.min(b - a);
    }
    best
}

/// A warning when the clock step is a noticeable share (> 1%) of a batch.
pub fn granularity_warning(granularity: Duration, batch: Duration) -> Option<String> {
    if batch.is_zero() || granularity.as_secs_f64() <= batch.as_secs_f64() * 0.01 {
        return None;
    }
    Some(format!(
        "the clock advances in steps of {} ns, {:.1}% of a {} µs batch: figures are quantised",
        granularity.as_nanos(),
        100.0 * granularity.as_secs_f64() / batch.as_secs_f64(),
        batch.as_micros()
    ))
}

/// Accumulated results of one pair over all its passes.
#[derive(Debug, Clone, Default)]
pub(super) struct PairAcc {
    pub(super) batches: Vec<f64>,
    pub(super) pass_estimates: Vec<f64>,
    pub(super) switched: u32,
    pub(super) migrated: u32,
    pub(super) round_trips: u32,
    pub(super) pin_failure: Option<String>,
    pub(super) stalled: u32,
}

impl PairAcc {
    pub(super) fn add(&mut self, run: spin::PairRun) {
        if let Some(est) = estimator::estimate(&run.batches) {
            self.pass_estimates.push(est);
        }
        self.batches.extend(run.batches);
        self.switched += run.switched;
        self.migrated += run.migrated;
        self.round_trips = self.round_trips.max(run.round_trips);
        self.stalled += u32::from(run.stalled);
        if let Some(f) = run.pin_failure {
            self.pin_failure = Some(f.to_string());
        }
    }

    pub(super) fn pass_disagreement(&self) -> f64 {
        let lo = self
            .pass_estimates
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let hi = self
            .pass_estimates
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        if self.pass_estimates.len() < 2 {
            0.0
        } else {
            estimator::disagreement(lo, hi)
        }
    }
}

/// A warning names at most this many pairs (the rest are counted): enough to find
/// the CPUs involved, short enough for one log line.
const NAMED: usize = 8;

/// A pair is reported as disturbed when more than one batch in this many was
/// discarded (its thread switched out or moved). Discarded batches never enter a
/// figure, so the figure stays valid; the warning says the CPUs were not the pair's
/// own. A tick or a kernel worker discards a batch now and then on any machine; one
/// in five is other work running there for a fifth of the pair's time.
const DISTURBED_ONE_IN: u32 = 5;

/// Whether `discarded` of the `taken` batches are more than one in
/// [`DISTURBED_ONE_IN`] (integers: no rounding at the boundary).
fn mostly_disturbed(discarded: u32, taken: u32) -> bool {
    discarded * DISTURBED_ONE_IN > taken
}

/// A pair is reported as widely spread when its valid batches' p90 is more than this
/// times their p10. Preempted batches are already discarded and each batch averages K
/// round trips, so a quiet pair's batches lie within a few per cent of each other; a
/// p90 half again above the p10 says the pair's latency itself changed during the run
/// (clock frequency, a sibling's work, a vCPU moved), so the p10 it reports is the best
/// of several states rather than the one state.
const WIDE_SPREAD: f64 = 1.5;

/// What a run saw around the pairs, for [`assess`].
pub(super) struct Circumstances<'a> {
    pub(super) hypervisor: Option<&'a str>,
    pub(super) steal: &'a BTreeMap<u32, u64>,
    pub(super) budget_ran_out: bool,
    pub(super) budget: Duration,
    pub(super) repeat_tolerance: f64,
    pub(super) granularity: Duration,
}

/// The cells, stats and warnings made from the pairs' results.
pub(super) struct Assessed {
    pub(super) latency: Vec<Vec<Option<f64>>>,
    pub(super) stats: Vec<PairStats>,
    pub(super) warnings: Vec<String>,
    pub(super) pass_estimates: BTreeMap<(u32, u32), Vec<f64>>,
    pub(super) unstable: Vec<(u32, u32, f64)>,
}

/// The first [`NAMED`] of `items`, comma-separated, and `…` when there are more.
fn named(items: &[String]) -> String {
    let mut list = items[..items.len().min(NAMED)].join(", ");
    if items.len() > NAMED {
        list.push_str(", …");
    }
    list
}

/// Turns accumulated pair results into cells and per-pair stats, and says what is wrong
/// with them: a hypervisor, steal, pairs whose passes disagree, discarded batches, wide
/// spreads, failed pins, stalls, the budget, a coarse clock. Pure.
pub(super) fn assess(
    ids: &[u32],
    acc: &BTreeMap<(usize, usize), PairAcc>,
    c: &Circumstances,
) -> Assessed {
    let (mut out, tally) = tally(ids, acc, c.repeat_tolerance);
    let mut warnings = machine_warnings(c);
    warnings.extend(unstable_warning(&out, c));
    warnings.extend(tally.warnings(c));
    warnings.extend(budget_warning(c, tally.unmeasured));
    warnings.extend(granularity_warning(c.granularity, median_batch(&out.stats)));
    out.warnings = warnings;
    out
}

/// What the pairs' results say is wrong with them, pair by pair, for [`assess`]: each
/// list names the pairs (and what was seen) in the pairs' order.
#[derive(Default)]
struct Tally {
    pin_failures: Vec<String>,
    stalled: Vec<String>,
    /// Pairs with most of their batches discarded.
    noisy: Vec<String>,
    /// Pairs with a wide spread.
    wide: Vec<String>,
    /// Pairs whose figure is the median, not the p10.
    two_speeds: Vec<String>,
    /// Pairs without a figure.
    unmeasured: usize,
}

/// The cells, stats, pass estimates and unstable pairs (no warnings yet) of the pairs'
/// results, and what they say is wrong with them.
fn tally(
    ids: &[u32],
    acc: &BTreeMap<(usize, usize), PairAcc>,
    repeat_tolerance: f64,
) -> (Assessed, Tally) {
    let n = ids.len();
    let mut out = Assessed {
        latency: vec![vec![None; n]; n],
        stats: Vec::new(),
        warnings: Vec::new(),
        pass_estimates: BTreeMap::new(),
        unstable: Vec::new(),
    };
    let mut t = Tally::default();
    for (&(i, j), a) in acc {
        let (ci, cj) = (ids[i], ids[j]);
        if let Some(f) = &a.pin_failure {
            t.pin_failures.push(format!("{ci}–{cj}: {f}"));
        }
        if a.stalled > 0 {
            t.stalled.push(format!("{ci}–{cj}"));
        }
        let Some(est) = estimator::estimate(&a.batches) else {
            t.unmeasured += 1;
            continue;
        };
        out.latency[i][j] = Some(est);
        out.latency[j][i] = Some(est);
        let s =
            estimator::measured_stats(ci, cj, &a.batches, a.switched + a.migrated, a.round_trips)
                .expect("batches exist");
        let (p10, median, p90) = (s.p10_ns, s.median_ns, s.p90_ns);
        out.stats.push(s);
        if est > p10 {
            t.two_speeds
                .push(format!("{ci}–{cj} (p10 {p10:.1}, median {median:.1} ns)"));
        }
        out.pass_estimates
            .insert((ci, cj), a.pass_estimates.clone());
        let dis = a.pass_disagreement();
        if dis > repeat_tolerance {
            out.unstable.push((ci, cj, dis));
        }
        let taken = a.batches.len() as u32 + a.switched + a.migrated;
        if mostly_disturbed(a.switched + a.migrated, taken) {
            t.noisy.push(format!(
                "{ci}–{cj} ({} of {taken}: {} switched out, {} off their CPU)",
                a.switched + a.migrated,
                a.switched,
                a.migrated
            ));
        }
        if p90 > p10 * WIDE_SPREAD {
            t.wide
                .push(format!("{ci}–{cj} (p10 {p10:.1}, p90 {p90:.1} ns)"));
        }
    }
    (out, t)
}

/// The warnings about the machine the run was on: a hypervisor, steal time.
fn machine_warnings(c: &Circumstances) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(hv) = c.hypervisor {
        warnings.push(format!(
            "running in a virtual machine ({hv}): the host may move vCPUs between physical cores at any time, so these figures describe where the vCPUs sat during this measurement, not a fixed property of the machine"
        ));
    }
    if !c.steal.is_empty() {
        let list: Vec<String> = c
            .steal
            .iter()
            .map(|(c, t)| format!("CPU {c}: {t} ticks"))
            .collect();
        warnings.push(format!(
            "steal time during the measurement ({}): the hypervisor ran other work on these vCPUs",
            list.join(", ")
        ));
    }
    warnings
}

/// The warning naming the pairs whose passes disagree, with their passes' figures.
fn unstable_warning(out: &Assessed, c: &Circumstances) -> Option<String> {
    if out.unstable.is_empty() {
        return None;
    }
    let shown: Vec<String> = out
        .unstable
        .iter()
        .take(NAMED)
        .map(|&(a, b, d)| {
            let est = &out.pass_estimates[&(a, b)];
            let list: Vec<String> = est.iter().map(|v| format!("{v:.1}")).collect();
            format!("{a}–{b} ({} ns, {:.0}% apart)", list.join(" / "), d * 100.0)
        })
        .collect();
    Some(format!(
        "{} pair(s) disagree between passes by more than {:.0}%: {}{}{}",
        out.unstable.len(),
        c.repeat_tolerance * 100.0,
        shown.join(", "),
        if out.unstable.len() > NAMED {
            ", …"
        } else {
            ""
        },
        if c.hypervisor.is_some() {
            "; the host probably moved a vCPU during the measurement"
        } else {
            "; something changed while measuring (load, frequency, migration)"
        }
    ))
}

impl Tally {
    /// The warnings naming the pairs: discarded batches, wide spreads, two speeds,
    /// failed pins, stalls.
    fn warnings(&self, c: &Circumstances) -> Vec<String> {
        let mut warnings = Vec::new();
        if !self.noisy.is_empty() {
            warnings.push(format!(
                "over {}% of the batches were discarded for {} pair(s) — other work ran on these CPUs: {}",
                100 / DISTURBED_ONE_IN,
                self.noisy.len(),
                named(&self.noisy)
            ));
        }
        if !self.wide.is_empty() {
            warnings.push(format!(
                "{} pair(s) have a wide spread (p90 > {WIDE_SPREAD} × p10): {}",
                self.wide.len(),
                named(&self.wide)
            ));
        }
        if !self.two_speeds.is_empty() {
            warnings.push(format!(
                "{} pair(s) ran at two speeds (median over {} × p10), so their figure is the median, not the fast moments: {}{}",
                self.two_speeds.len(),
                estimator::TWO_SPEEDS,
                named(&self.two_speeds),
                if c.hypervisor.is_some() {
                    "; the host probably put both vCPUs of these pairs on one core for a while"
                } else {
                    "; something changed how these CPUs reach each other while measuring"
                }
            ));
        }
        if !self.pin_failures.is_empty() {
            warnings.push(format!(
                "pins did not hold, those samples were dropped: {}",
                self.pin_failures.join("; ")
            ));
        }
        if !self.stalled.is_empty() {
            warnings.push(format!(
                "{} pair(s) stalled — a thread did not run for over {:?} (a real-time task or a frozen vCPU) and the pair was given up: {}",
                self.stalled.len(),
                spin::STALL,
                named(&self.stalled)
            ));
        }
        warnings
    }
}

/// The warning when the budget ran out, or pairs have no figure.
fn budget_warning(c: &Circumstances, unmeasured: usize) -> Option<String> {
    if c.budget_ran_out && unmeasured > 0 {
        Some(format!(
            "the budget of {:.0?} ran out: {unmeasured} pair(s) have no figure and others got fewer passes",
            c.budget
        ))
    } else if c.budget_ran_out {
        Some(format!(
            "the budget of {:.0?} ran out before every pair had all its passes: some figures rest on one pass",
            c.budget
        ))
    } else if unmeasured > 0 {
        Some(format!("{unmeasured} pair(s) have no figure"))
    } else {
        None
    }
}

/// The typical batch's length: a batch is K round trips of two one-way hops, so the
/// typical pair's median figure times 2K.
fn median_batch(stats: &[PairStats]) -> Duration {
    let med: Vec<f64> = stats.iter().map(|s| s.median_ns).collect();
    let k = stats.iter().map(|s| s.round_trips).max().unwrap_or(0);
    let m = crate::stats::upper_median(&med).unwrap_or(0.0);
    Duration::from_nanos((m * 2.0 * f64::from(k)).max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypervisor_flag_in_cpuinfo() {
        assert!(cpuinfo_has_hypervisor(
            "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"
        ));
        assert!(!cpuinfo_has_hypervisor("flags\t\t: fpu vme\n"));
        assert!(!cpuinfo_has_hypervisor("model name\t: hypervisor-ish\n"));
    }

    #[test]
    fn hypervisor_on_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot {
            sys: dir.path().join("sys"),
            proc: dir.path().join("proc"),
        };
        assert_eq!(hypervisor(&root), None);
        std::fs::create_dir_all(&root.proc).unwrap();
        std::fs::write(root.proc.join("cpuinfo"), "flags : sse hypervisor\n").unwrap();
        assert_eq!(hypervisor(&root), Some("hypervisor flag".into()));
        std::fs::create_dir_all(root.sys.join("hypervisor")).unwrap();
        std::fs::write(root.sys.join("hypervisor/type"), "xen\n").unwrap();
        assert_eq!(hypervisor(&root), Some("xen".into()));
    }

    #[test]
    fn clock_granularity() {
        let g = timer_granularity();
        assert!(g > Duration::ZERO && g < Duration::from_millis(1), "{g:?}");
        assert_eq!(
            granularity_warning(Duration::from_nanos(30), Duration::from_micros(20)),
            None
        );
        let w = granularity_warning(Duration::from_nanos(1000), Duration::from_micros(20)).unwrap();
        assert!(w.contains("steps of 1000 ns, 5.0% of a 20 µs batch"), "{w}");
    }

    #[test]
    fn a_warning_names_eight_pairs_and_says_there_are_more() {
        let pairs: Vec<String> = (1..=9).map(|k| format!("0–{k}")).collect();
        assert_eq!(named(&pairs[..2]), "0–1, 0–2");
        assert_eq!(named(&pairs[..8]), "0–1, 0–2, 0–3, 0–4, 0–5, 0–6, 0–7, 0–8");
        assert_eq!(named(&pairs), "0–1, 0–2, 0–3, 0–4, 0–5, 0–6, 0–7, 0–8, …");
    }

    #[test]
    fn a_pair_is_disturbed_past_one_discarded_batch_in_five() {
        assert!(!mostly_disturbed(0, 0));
        assert!(!mostly_disturbed(4, 20), "exactly one in five is not more");
        assert!(mostly_disturbed(5, 20));
        assert!(mostly_disturbed(1, 4));
        assert!(!mostly_disturbed(1, 5));
    }

    /// A run on hardware that went well: no steal, the budget kept, a fine clock.
    fn quiet() -> Circumstances<'static> {
        static NO_STEAL: BTreeMap<u32, u64> = BTreeMap::new();
        Circumstances {
            hypervisor: None,
            steal: &NO_STEAL,
            budget_ran_out: false,
            budget: Duration::from_secs(2),
            repeat_tolerance: 0.10,
            granularity: Duration::from_nanos(20),
        }
    }

    fn acc_with(batches: Vec<f64>, passes: Vec<f64>) -> PairAcc {
        PairAcc {
            batches,
            pass_estimates: passes,
            round_trips: 100,
            ..PairAcc::default()
        }
    }

    /// As on a 16-vCPU KVM guest whose host moved vCPUs while measuring: some pairs
    /// answered at L1 speed for a fifth of their batches (both vCPUs on one host core)
    /// and at 80 ns otherwise. Their fast moments must not become a level of groups.
    #[test]
    fn pairs_fast_for_moments_are_figured_at_their_median_and_make_no_level() {
        let ids: Vec<u32> = (0..8).collect();
        let two_places = [(1, 2), (1, 6), (2, 6), (3, 7)];
        let mut acc = BTreeMap::new();
        for i in 0..8 {
            for j in i + 1..8 {
                let base = 80.0 + ((i * 3 + j) % 5) as f64;
                let batches: Vec<f64> = (0..60)
                    .map(|k| {
                        if two_places.contains(&(i, j)) && k % 5 == 0 {
                            9.7
                        } else {
                            base + (k % 4) as f64 * 0.2
                        }
                    })
                    .collect();
                acc.insert((i, j), acc_with(batches, vec![base, base]));
            }
        }
        let c = Circumstances {
            hypervisor: Some("hypervisor flag"),
            ..quiet()
        };
        let a = assess(&ids, &acc, &c);
        assert!(
            a.latency[1][2].is_some_and(|v| v > 80.0),
            "{:?}",
            a.latency[1][2]
        );
        let all = a.warnings.join("\n");
        assert!(
            all.contains("4 pair(s) ran at two speeds (median over 2 × p10), so their figure is the median, not the fast moments: 1–2 (p10 9.7, median 8")
                && all.contains("the host probably put both vCPUs of these pairs on one core"),
            "{all}"
        );
        let m = crate::matrix::LatencyMatrix::new(
            ids.clone(),
            crate::matrix::Cells::from_rows(&a.latency),
        );
        let d = crate::domains::Domains::from_matrix(&m).unwrap();
        assert!(
            d.levels()
                .iter()
                .all(|l| l.groups.len() == 1 || l.groups.iter().all(|g| g.len() == 1)),
            "{:?}",
            d.levels()
        );
    }

    #[test]
    fn assess_reports_what_cannot_be_trusted() {
        let ids = [0, 1, 2, 3];
        let steady: Vec<f64> = (0..40).map(|k| 20.0 + (k % 4) as f64 * 0.1).collect();
        let mut acc = BTreeMap::new();
        acc.insert((0, 1), acc_with(steady.clone(), vec![20.0, 20.1]));
        // Passes 9 ns and 100 ns apart: the host moved a vCPU.
        let mut moved = steady.iter().map(|v| v - 11.0).collect::<Vec<_>>();
        moved.extend(steady.iter().map(|v| v + 80.0));
        acc.insert((0, 2), acc_with(moved, vec![9.0, 100.0]));
        // Half the batches thrown away, and a wide spread.
        let mut noisy = acc_with(
            (0..20).map(|k| 30.0 + k as f64 * 2.0).collect(),
            vec![30.0, 31.0],
        );
        noisy.switched = 15;
        noisy.migrated = 5;
        acc.insert((0, 3), noisy);
        // A pin that did not hold: no figure.
        acc.insert(
            (1, 2),
            PairAcc {
                pin_failure: Some("thread 7 is pinned to CPU 2 but runs on CPU 0".into()),
                ..PairAcc::default()
            },
        );
        acc.insert(
            (1, 3),
            PairAcc {
                stalled: 1,
                ..PairAcc::default()
            },
        );
        acc.insert((2, 3), acc_with(steady.clone(), vec![20.0]));
        let steal = BTreeMap::from([(1, 4)]);
        let c = Circumstances {
            hypervisor: Some("hypervisor flag"),
            steal: &steal,
            budget_ran_out: true,
            granularity: Duration::from_micros(1),
            ..quiet()
        };
        let a = assess(&ids, &acc, &c);
        assert_eq!(a.latency[1][0], Some(20.0));
        assert_eq!(a.latency[0][1], Some(20.0));
        assert_eq!(a.latency[2][1], None, "failed pin publishes nothing");
        assert_eq!(a.stats.len(), 4);
        assert_eq!(a.unstable.len(), 1);
        assert_eq!((a.unstable[0].0, a.unstable[0].1), (0, 2));
        let all = a.warnings.join("\n");
        for want in [
            "running in a virtual machine (hypervisor flag)",
            "steal time during the measurement (CPU 1: 4 ticks)",
            "1 pair(s) disagree between passes by more than 10%: 0–2 (9.0 / 100.0 ns, 1011% apart); the host probably moved a vCPU",
            "over 20% of the batches were discarded for 1 pair(s)",
            "0–3 (20 of 40: 15 switched out, 5 off their CPU)",
            "wide spread",
            "pins did not hold, those samples were dropped: 1–2: thread 7",
            "1 pair(s) stalled",
            "the budget of 2s ran out: 2 pair(s) have no figure",
            "the clock advances in steps of 1000 ns",
        ] {
            assert!(all.contains(want), "missing {want:?} in:\n{all}");
        }
        // A clean run says only that it is clean.
        let mut clean = BTreeMap::new();
        clean.insert((0, 1), acc_with(steady, vec![20.0, 20.1]));
        let a = assess(&[0, 1], &clean, &quiet());
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }
}
