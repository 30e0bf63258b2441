//! A plain ping-pong, timed the way core-to-core-latency and c2clat time a pair: two
//! threads pinned with `sched_setaffinity`, compare-and-swap on one 128-byte-aligned
//! flag, `samples` timings of `round_trips` round trips each; one-way latency = the
//! fastest sample / round trips / 2. It shares no code with the engine (`spin`), so
//! it is an independent check on the engine's figure for a pair.
//!
//! Must not touch: the engine's estimator or matrices.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the plain ping-pong gave no figure.
#[derive(Debug, thiserror::Error)]
pub enum PlainError {
    /// A thread could not be pinned to its CPU.
    #[error("pinning the plain ping-pong to CPU {cpu}: {reason}")]
    Pin { cpu: u32, reason: String },
    /// The round trips did not complete in time (a CPU taken away for long).
    #[error("the plain ping-pong between CPUs {a} and {b} did not finish within {limit:?}")]
    TimedOut { a: u32, b: u32, limit: Duration },
    /// The same CPU twice, or no samples.
    #[error(
        "the plain ping-pong needs two different CPUs and at least one sample of one round trip"
    )]
    BadRequest,
}

#[repr(align(128))]
struct Flag(AtomicU64);

fn pin(cpu: u32) -> Result<(), PlainError> {
    use crate::affinity::AffinityOps as _;
    crate::affinity::SystemOps::default()
        .set_affinity(crate::affinity::own_tid(), &std::iter::once(cpu).collect())
        .map_err(|e| PlainError::Pin {
            cpu,
            reason: e.to_string(),
        })
}

/// The minimum one-way latency in ns between CPUs `a` (initiator) and `b` over
/// `samples` timings of `round_trips` round trips. Gives up after `limit`.
pub fn min_one_way_ns(
    a: u32,
    b: u32,
    samples: usize,
    round_trips: u64,
    limit: Duration,
) -> Result<f64, PlainError> {
    if a == b || samples == 0 || round_trips == 0 {
        return Err(PlainError::BadRequest);
    }
    let flag = Arc::new(Flag(AtomicU64::new(0)));
    let abort = Arc::new(AtomicBool::new(false));
    let total = samples as u64 * round_trips;
    let (f, stop) = (flag.clone(), abort.clone());
    let responder = std::thread::Builder::new()
        .name(format!("pinnerd-plain-{b}"))
        .spawn(move || -> Result<(), PlainError> {
            let pinned = pin(b);
            if pinned.is_err() {
                stop.store(true, Ordering::Release);
                return pinned;
            }
            for _ in 0..total {
                while f
                    .0
                    .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })
        .map_err(|e| PlainError::Pin {
            cpu: b,
            reason: e.to_string(),
        })?;
    let abort_here = abort.clone();
    let initiator = std::thread::Builder::new()
        .name(format!("pinnerd-plain-{a}"))
        .spawn(move || -> Result<f64, PlainError> {
            let give_up = |e: PlainError| {
                abort.store(true, Ordering::Release);
                Err(e)
            };
            if let Err(e) = pin(a) {
                return give_up(e);
            }
            let t_start = Instant::now();
            let mut best = f64::INFINITY;
            for _ in 0..samples {
                let t0 = Instant::now();
                for _ in 0..round_trips {
                    while flag
                        .0
                        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        if abort.load(Ordering::Relaxed) {
                            return Ok(f64::NAN);
                        }
                        std::hint::spin_loop();
                    }
                }
                while flag.0.load(Ordering::Acquire) != 0 {
                    if abort.load(Ordering::Relaxed) {
                        return Ok(f64::NAN);
                    }
                    std::hint::spin_loop();
                }
                let ns = t0.elapsed().as_nanos() as f64 / round_trips as f64 / 2.0;
                best = best.min(ns);
                if t_start.elapsed() > limit {
                    return give_up(PlainError::TimedOut { a, b, limit });
                }
            }
            Ok(best)
        });
    let initiator = match initiator {
        Ok(h) => h,
        Err(e) => {
            abort_here.store(true, Ordering::Release);
            let _ = responder.join();
            return Err(PlainError::Pin {
                cpu: a,
                reason: e.to_string(),
            });
        }
    };
    let first = initiator.join().unwrap_or(Err(PlainError::BadRequest));
    let second = responder.join().unwrap_or(Err(PlainError::BadRequest));
    // The responder's pinning error explains an initiator that stopped early.
    second?;
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_of_one_cpu_or_no_samples_is_refused() {
        assert!(matches!(
            min_one_way_ns(0, 0, 10, 10, Duration::from_secs(1)),
            Err(PlainError::BadRequest)
        ));
        assert!(matches!(
            min_one_way_ns(0, 1, 0, 10, Duration::from_secs(1)),
            Err(PlainError::BadRequest)
        ));
    }

    #[test]
    fn a_cpu_that_does_not_exist_is_an_error_not_a_hang() {
        // Past a fixed 1,024-bit set and past the largest CPU id a kernel may have.
        let far = crate::cpuset::MAX_CPU_ID + 5;
        let err = min_one_way_ns(0, far, 10, 10, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, PlainError::Pin { cpu, .. } if cpu == far),
            "{err}"
        );
    }

    #[test]
    fn two_cpus_give_a_positive_figure() {
        let ids: Vec<u32> = crate::measure::allowed_cpus().unwrap().iter().collect();
        assert!(ids.len() >= 2, "the test machine has two CPUs");
        let ns = min_one_way_ns(ids[0], ids[1], 20, 50, Duration::from_secs(20)).unwrap();
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }
}
