//! Background completion of a sparse matrix: while the matrix in use has inferred
//! cells, one slice of them at a time is measured (`measure::complete`), between other
//! measurements, `measure.complete-pause` apart, and the figures go into the matrix
//! and the store. The stored matrix says which cells are measured, so a restart resumes
//! where completion stopped. When the figures change the domains, the plan is made
//! again and compared with the one applied (`matrix_changed`), and the change is
//! reported as a finding. Split from `state/mod.rs`; same state, same loop.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::cpuset::CpuSet;
use crate::domains::{Domains, Trust};
use crate::measure::complete;

use super::super::worker::{Job, JobError, JobKind, Product};
use super::{Action, State};

/// Whether the domains come from the matrix, and the groups of every level, finest
/// first.
fn groups(d: &Domains) -> (Trust, Vec<Vec<CpuSet>>) {
    (
        d.trust(),
        d.levels().iter().map(|l| l.groups.clone()).collect(),
    )
}

/// The first level whose groups differ, in words.
fn hierarchy_change(before: &[Vec<CpuSet>], after: &[Vec<CpuSet>]) -> String {
    let words = |level: Option<&Vec<CpuSet>>| match level {
        None => "no such level".to_string(),
        Some(g) => {
            let shown: Vec<String> = g.iter().take(8).map(|s| format!("{{{s}}}")).collect();
            format!(
                "{} group(s) {}{}",
                g.len(),
                shown.join(" "),
                if g.len() > 8 { " …" } else { "" }
            )
        }
    };
    let k = (0..before.len().max(after.len()))
        .find(|&k| before.get(k) != after.get(k))
        .unwrap_or(0);
    format!(
        "level {} of the sparse map's hierarchy was {}, the measured cells make it {}",
        k + 1,
        words(before.get(k)),
        words(after.get(k))
    )
}

impl State {
    /// The status words for completion: `""` for a fully measured matrix.
    pub(super) fn completion_words(&self) -> String {
        let Some(m) = self.matrix().filter(|m| m.sparse.is_some()) else {
            return String::new();
        };
        let (measured, total) = complete::measured_share(m);
        let mut words = if measured >= total {
            ", every pair measured".to_string()
        } else {
            format!(
                ", {measured} of {total} pairs measured ({:.1}%), completing",
                100.0 * measured as f64 / total.max(1) as f64
            )
        };
        if let Some(f) = self.measurement.completion_finding() {
            // The whole finding is in the log; the status line stays short.
            let short: String = f.chars().take(160).collect();
            words.push_str(&format!(
                "; {short}{}",
                if short.len() < f.len() { "…" } else { "" }
            ));
        }
        words
    }

    /// From the tick: the next completion slice, when the matrix in use has pending
    /// pairs, nothing else measures and the pause after the last slice is over. Pairs
    /// with a CPU measurements stay off (exclusive, latency-critical, never-cpus,
    /// nohz_full) are left for later; isolated CPUs are not in the matrix's usable set.
    pub(super) fn complete_due(&mut self, now: Instant) {
        if !self.measurement.slice_may_start(now) {
            return;
        }
        let Some(m) = &self.machine.current else {
            return;
        };
        // The counts completion keeps say when there is nothing left: no walk over
        // the cells every second once the matrix is complete.
        if m.sparse
            .as_ref()
            .is_none_or(|sp| sp.pairs_measured >= sp.pairs_total)
        {
            return;
        }
        let pending = complete::pending(m);
        if pending.is_empty() {
            return;
        }
        let usable = self.machine.usable();
        let unusable: CpuSet = m
            .cpus
            .iter()
            .copied()
            .filter(|&c| !usable.contains(c))
            .collect();
        let off = self.around().cpus().union(&unusable);
        let size = complete::slice_size(self.loaded.measure().complete_slice, m.len());
        let rounds = complete::pick(&pending, size, &off);
        let pause = self.loaded.measure().complete_pause.0;
        if rounds.is_empty() {
            tracing::debug!(
                pending = pending.len(),
                "every pending pair has a CPU measurements stay off; completion waits"
            );
            self.measurement.complete_after(now + pause);
            return;
        }
        let pairs: Vec<(u32, u32)> = rounds.iter().flatten().copied().collect();
        let reference: BTreeMap<(u32, u32), f64> = pairs
            .iter()
            .filter_map(|&(a, b)| m.between(a, b).map(|v| ((a, b), v)))
            .collect();
        let cpus: CpuSet = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let budget = self.measurement.fill_budget(pairs.len(), m.len());
        let id = self.measurement.start_slice();
        tracing::debug!(
            job = id,
            pairs = pairs.len(),
            rounds = rounds.len(),
            pending = pending.len(),
            "completion slice"
        );
        let cfg = self.measure_config(cpus, budget);
        self.actions.push(Action::Measure(Box::new(Job {
            id,
            kind: JobKind::Complete { rounds, reference },
            cfg,
        })));
    }

    /// A slice ended: its figures go into the matrix in use and the store; when they
    /// change the domains, the plan is compared again and the change reported. A slice
    /// that could not run (busy CPUs, a latency-critical thread woke) is tried again
    /// after the pause.
    pub(super) fn slice_ended(&mut self, id: u64, result: Result<Product, JobError>) {
        self.measurement
            .slice_done(Instant::now() + self.loaded.measure().complete_pause.0);
        let (slice, stats) = match result {
            Ok(Product::Completed { slice, stats }) => (slice, stats),
            Ok(_) => {
                tracing::warn!(
                    job = id,
                    "job {id}: a completion slice ended with a result of another kind; ignored"
                );
                return;
            }
            Err(e) => {
                tracing::info!(job = id, error = %e, "completion slice not measured (job {id}): {e}; trying again later");
                return;
            }
        };
        let Some(mut m) = self.matrix().cloned() else {
            return;
        };
        let before = self.machine.domains_made().map(groups);
        let corrections = complete::apply(&mut m, &slice.figures, &stats);
        let left = complete::pending(&m).len();
        self.machine.store_matrix(id, &m);
        self.machine.current = Some(m);
        self.machine.domains = None;
        let after = self.machine.domains().ok().map(groups);
        if let Some(c) = complete::describe(&corrections, complete::AGREE) {
            let f = format!("completion corrected the sparse map: {c}");
            tracing::info!(job = id, finding = %f, "{f}");
            self.measurement.corrected(f);
        }
        if let (Some(b), Some(a)) = (&before, &after) {
            if b != a {
                let change = if b.1 != a.1 {
                    hierarchy_change(&b.1, &a.1)
                } else if a.0 == Trust::Matrix {
                    "placement now uses the matrix, which agrees with the topology".to_string()
                } else {
                    "the matrix no longer agrees with the topology; placement uses the topology"
                        .to_string()
                };
                let f = format!("completion contradicts the sparse map: {change}");
                tracing::warn!(job = id, finding = %f, "{f}; planning again");
                self.measurement.contradicted(f);
                self.matrix_changed();
            }
        }
        tracing::info!(
            job = id,
            measured = slice.figures.iter().filter(|f| f.2.is_some()).count(),
            left,
            "completion slice measured (job {id}): {} pairs measured, {left} left",
            slice.figures.iter().filter(|f| f.2.is_some()).count()
        );
        if left == 0 {
            tracing::info!("every pair of the matrix is measured: completion finished");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::{Config, State};
    use super::*;
    use crate::api::Phase;
    use crate::daemon::schedule::Timing;
    use crate::daemon::worker::Finished;
    use crate::daemon::Event;
    use crate::domains::Trust;
    use crate::matrix::store::MatrixStore;
    use crate::matrix::{LatencyMatrix, PairStats, SparseCounts};
    use crate::measure::Mode;
    use crate::rules::LoadPolicy;
    use crate::settings::Settings;
    use crate::sysroot::SysRoot;

    /// A daemon on a copy of the 16-CPU Xeon E5620 fixture, sparse from 4 CPUs, slices
    /// of 8 pairs; its state in `dir` (so a second one is a restart).
    fn daemon(dir: &Path) -> State {
        let machine = dir.join("machine");
        if !machine.exists() {
            let from =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-e5620");
            let st = std::process::Command::new("cp")
                .arg("-a")
                .arg(&from)
                .arg(&machine)
                .status()
                .unwrap();
            assert!(st.success());
        }
        for d in ["rules", "state", "runtime"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let cfg = Config {
            settings: dir.join("absent.toml"),
            rule_dirs: Some(vec![dir.join("rules")]),
            state_dir: dir.join("state"),
            runtime_dir: dir.join("runtime"),
            sysroot: SysRoot {
                sys: machine.join("sys"),
                proc: machine.join("proc"),
            },
            observe_only: false,
        };
        let mut settings = Settings::default();
        settings.measure.sparse_from_cpus = 4;
        settings.measure.complete_slice = Some(8);
        let timing = Timing {
            remeasure_min_interval: Duration::ZERO,
            ..Timing::default()
        };
        let ops = super::super::managed::Ops::fakes();
        let mut s = State::with_ops(cfg, settings, timing, Instant::now(), ops);
        s.loaded.policy = LoadPolicy::unchecked();
        s
    }

    /// The machine as its sysfs says: SMT siblings `x` and `x + 8` at 10 ns, the
    /// even and the odd CPUs two packages, 40 ns within one and 120 ns across.
    fn truth(a: u32, b: u32) -> f64 {
        if a % 8 == b % 8 {
            10.0
        } else if a % 2 == b % 2 {
            40.0
        } else {
            120.0
        }
    }

    /// What a sparse run might give for `cpus`: every cell with a CPU of 9-15 inferred
    /// (but those with CPU 8), all at 120 ns: a hierarchy the topology contradicts.
    fn sparse_map(job: &Job) -> LatencyMatrix {
        let ids: Vec<u32> = job.cfg.cpus.iter().collect();
        let inferred = |a: u32, b: u32| a.max(b) >= 9 && a.min(b) != 8;
        let cell = |a: u32, b: u32| {
            if inferred(a, b) {
                120.0
            } else {
                truth(a, b)
            }
        };
        let mut m = LatencyMatrix::from_fn(ids.clone(), |i, j| cell(ids[i], ids[j]));
        for (k, &b) in ids.iter().enumerate() {
            for &a in &ids[..k] {
                let v = cell(a, b);
                m.stats.push(PairStats {
                    a,
                    b,
                    p10_ns: v,
                    median_ns: v,
                    p90_ns: v,
                    samples: if inferred(a, b) { 0 } else { 1 },
                    discarded: 0,
                    round_trips: 0,
                    inferred: inferred(a, b),
                });
            }
        }
        let total = ids.len() * (ids.len() - 1) / 2;
        m.take_inferred_entries();
        let measured = m.stats.len();
        m.mode = Some("sparse".into());
        m.sparse = Some(Box::new(SparseCounts {
            pairs_measured: measured,
            pairs_total: total,
            modelled_seconds: 0.5,
        }));
        m.measured_at_us = Some(1_700_000_000_000_000);
        m.fingerprint = job.cfg.fingerprint.clone();
        m
    }

    fn jobs(s: &mut State) -> Vec<Job> {
        s.take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Measure(j) => Some(*j),
                _ => None,
            })
            .collect()
    }

    /// The slice measured: every pair at its true figure.
    fn answer(job: &Job) -> Event {
        let JobKind::Complete { rounds, .. } = &job.kind else {
            panic!("not a completion slice: {job:?}")
        };
        let figures = rounds
            .iter()
            .flatten()
            .map(|&(a, b)| (a, b, Some(truth(a, b))))
            .collect();
        Event::Measured(Box::new(Finished {
            id: job.id,
            result: Ok(Product::Completed {
                slice: complete::Slice {
                    figures,
                    measurements: rounds.iter().map(Vec::len).sum(),
                    rounds: rounds.iter().map(Vec::len).collect(),
                },
                stats: BTreeMap::new(),
            }),
        }))
    }

    /// The next slice, past the pause.
    fn next_slice(s: &mut State) -> Option<Job> {
        s.handle(Event::Tick(Instant::now() + Duration::from_secs(2)));
        let j = jobs(s);
        assert!(j.len() <= 1, "{j:?}");
        j.into_iter().next()
    }

    fn status(s: &mut State) -> String {
        s.status();
        s.take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Status(t) => Some(t),
                _ => None,
            })
            .last()
            .unwrap()
    }

    fn stored(s: &State) -> LatencyMatrix {
        let fp = s.snapshot().fingerprint;
        MatrixStore::open(&s.cfg.state_dir)
            .unwrap()
            .load_current(&fp)
            .unwrap()
            .matrix
            .unwrap()
    }

    #[test]
    fn a_sparse_map_is_completed_in_slices_resumes_after_a_restart_and_corrects_the_plan() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = daemon(dir.path());
        s.start().unwrap();
        let full = jobs(&mut s).remove(0);
        assert_eq!(full.cfg.mode, Mode::Sparse, "sparse from 4 CPUs");
        s.handle(Event::Measured(Box::new(Finished {
            id: full.id,
            result: Ok(Product::Matrix(Box::new(sparse_map(&full)))),
        })));
        s.take_actions();
        // Ready from the sparse map; completion is state: in the status line.
        assert_eq!(s.snapshot().state, Phase::Ready);
        let pending = complete::pending(s.machine.current.as_ref().unwrap()).len();
        assert_eq!(pending, 77);
        assert!(status(&mut s).contains(", 43 of 120 pairs measured (35.8%), completing"));
        assert_eq!(s.snapshot().matrix_measured, (43, 120));
        // One slice: at most 8 pairs, in rounds of disjoint pairs, at the measurement's
        // priority, checked against the cells they replace.
        let job = next_slice(&mut s).expect("a completion slice");
        let JobKind::Complete { rounds, reference } = &job.kind else {
            panic!()
        };
        let pairs: Vec<(u32, u32)> = rounds.iter().flatten().copied().collect();
        assert_eq!(pairs.len(), 8);
        assert_eq!(reference.len(), 8);
        assert_eq!(job.cfg.priority, s.loaded.settings.measure.spin_priority);
        assert_eq!(
            job.cfg.cpus,
            pairs.iter().flat_map(|&(a, b)| [a, b]).collect::<CpuSet>()
        );
        // Nothing else starts while it runs, not even the next slice.
        assert!(next_slice(&mut s).is_none());
        s.handle(answer(&job));
        s.take_actions();
        let cur = s.machine.current.clone().unwrap();
        for &(a, b) in &pairs {
            assert_eq!(cur.between(a, b), Some(truth(a, b)));
        }
        assert_eq!(complete::pending(&cur).len(), pending - 8);
        // The store has the measured cells: a restart resumes from there.
        assert_eq!(complete::pending(&stored(&s)), complete::pending(&cur));
        drop(s);
        let mut s = daemon(dir.path());
        s.start().unwrap();
        assert!(
            jobs(&mut s).is_empty(),
            "no new measurement after a restart"
        );
        assert_eq!(
            complete::pending(s.machine.current.as_ref().unwrap()).len(),
            pending - 8
        );
        let mut slices = 0;
        while let Some(job) = next_slice(&mut s) {
            let JobKind::Complete { rounds, .. } = &job.kind else {
                panic!()
            };
            for &(a, b) in rounds.iter().flatten() {
                assert!(!pairs.contains(&(a, b)), "{a}–{b} measured twice");
            }
            s.handle(answer(&job));
            slices += 1;
            assert!(slices < 20, "completion does not end");
        }
        assert_eq!(slices, (pending - 8).div_ceil(8));
        // Every pair measured, none inferred, in use and stored.
        for m in [s.machine.current.clone().unwrap(), stored(&s)] {
            assert!(complete::pending(&m).is_empty());
            assert!(m.stats.iter().all(|st| !st.inferred));
            assert_eq!(m.inferred_count(), 0);
            let sp = m.sparse.as_ref().unwrap();
            assert_eq!(sp.pairs_measured, sp.pairs_total);
        }
        // The sparse map contradicted the topology (placement used sysfs); the
        // completed one agrees, placement uses it, and the finding says what changed.
        assert_eq!(s.machine.domains().unwrap().trust(), Trust::Matrix);
        let contradicted = s
            .measurement
            .completing
            .contradicted
            .clone()
            .unwrap_or_default();
        assert_eq!(
            contradicted,
            "completion contradicts the sparse map: placement now uses the matrix, which agrees with the topology"
        );
        let corrected = s
            .measurement
            .completing
            .corrected
            .clone()
            .unwrap_or_default();
        assert!(
            corrected.contains("were inferred 200% high (median)"),
            "{corrected}"
        );
        let st = status(&mut s);
        assert!(st.contains(", every pair measured"), "{st}");
        assert_eq!(s.snapshot().matrix_measured, (120, 120));
    }

    #[test]
    fn completion_never_measures_an_exclusive_cpu_and_does_not_spin_waiting_for_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("rules")).unwrap();
        std::fs::write(
            dir.path().join("rules/feed.toml"),
            "[[rule]]\nname = \"feed\"\n[rule.match]\ncomm = \"feed\"\n[rule.place]\ncpus = \"5\"\nexclusive = true\n",
        )
        .unwrap();
        let mut s = daemon(dir.path());
        s.start().unwrap();
        let full = jobs(&mut s).remove(0);
        assert!(!full.cfg.cpus.contains(5));
        s.handle(Event::Measured(Box::new(Finished {
            id: full.id,
            result: Ok(Product::Matrix(Box::new(sparse_map(&full)))),
        })));
        s.take_actions();
        let mut slices = 0;
        while let Some(job) = next_slice(&mut s) {
            assert!(!job.cfg.cpus.contains(5), "{job:?}");
            s.handle(answer(&job));
            slices += 1;
            assert!(slices < 20, "completion does not end");
        }
        let cur = s.machine.current.clone().unwrap();
        // Only the pairs of CPU 5 are left, and no slice is started for them.
        let left = complete::pending(&cur);
        assert!(left.iter().all(|&(a, b)| a == 5 || b == 5), "{left:?}");
        for _ in 0..3 {
            assert!(next_slice(&mut s).is_none());
        }
        assert!(s.measurement.schedule.running().is_none());
    }

    /// Rewrites the stored matrix's sparse counts, as a damaged state file has them.
    fn damage_counts(s: &State, measured: usize, total: usize) {
        let path = MatrixStore::open(&s.cfg.state_dir).unwrap().current_path();
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["pairs_measured"] = measured.into();
        v["pairs_total"] = total.into();
        std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    }

    #[test]
    fn stored_counts_that_disagree_with_the_matrix_give_way_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = daemon(dir.path());
        s.start().unwrap();
        let full = jobs(&mut s).remove(0);
        s.handle(Event::Measured(Box::new(Finished {
            id: full.id,
            result: Ok(Product::Matrix(Box::new(sparse_map(&full)))),
        })));
        s.take_actions();
        assert_eq!(s.snapshot().matrix_measured, (43, 120));
        // More measured than there are pairs: the counts are the matrix's, and its
        // pending pairs are still completed.
        damage_counts(&s, 500, 1);
        drop(s);
        let mut s = daemon(dir.path());
        s.start().unwrap();
        assert!(jobs(&mut s).is_empty(), "the stored matrix is used");
        assert_eq!(s.snapshot().matrix_measured, (43, 120));
        let sp = s.machine.current.as_ref().unwrap().sparse.clone().unwrap();
        assert_eq!((sp.pairs_measured, sp.pairs_total), (43, 120));
        let job = next_slice(&mut s).expect("a completion slice after the damaged counts");
        let JobKind::Complete { rounds, .. } = &job.kind else {
            panic!("{job:?}")
        };
        let pending = complete::pending(s.machine.current.as_ref().unwrap());
        for pair in rounds.iter().flatten() {
            assert!(pending.contains(pair), "{pair:?} was pending");
        }
        s.handle(answer(&job));
        while let Some(job) = next_slice(&mut s) {
            s.handle(answer(&job));
        }
        assert_eq!(s.snapshot().matrix_measured, (120, 120));
        // Nothing left but counts that say nothing was measured: they do not stay so.
        damage_counts(&s, 0, 1);
        drop(s);
        let mut s = daemon(dir.path());
        s.start().unwrap();
        assert!(jobs(&mut s).is_empty(), "the stored matrix is used");
        assert_eq!(s.snapshot().matrix_measured, (120, 120));
        assert!(next_slice(&mut s).is_none(), "nothing is left to complete");
        let st = status(&mut s);
        assert!(st.contains(", every pair measured"), "{st}");
    }
}
