//! Repeated warnings summed up, so that a flood (a caller over its rate limit, a process
//! with thousands of threads beyond its slots) costs a few log lines, not one per
//! occurrence, and journald's rate limit never drops the daemon's other messages: the
//! first occurrence of each key is logged, the rest are counted, and each
//! [`REPEATS_EVERY`] one line says how many more there were.
//!
//! ```text
//!   note(key) ─► first in its window? ─yes─► log it
//!                      │no
//!                      ▼
//!                  counted ─► due(now), each REPEATS_EVERY ─► "N more …" (one line per key)
//! ```
//!
//! Pure: the caller passes the time and logs what it is told to.
//!
//! Must not touch: logging itself, clocks.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How often the repeats of one key are summed up in one line.
pub const REPEATS_EVERY: Duration = Duration::from_secs(10);

/// Most keys counted at once; beyond, the oldest counts are summed up early.
pub const MAX_KEYS: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    more: u64,
}

/// Counts of repeated occurrences, per key, per [`REPEATS_EVERY`].
#[derive(Debug)]
pub struct Repeats<K> {
    every: Duration,
    windows: HashMap<K, Window>,
}

impl<K> Default for Repeats<K> {
    fn default() -> Self {
        Repeats {
            every: REPEATS_EVERY,
            windows: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Repeats<K> {
    /// One occurrence of `key` at `now`: true when it is to be logged (the first since
    /// the key's last window ended); false when it is counted for the summary line.
    pub fn note(&mut self, key: K, now: Instant) -> bool {
        if let Some(w) = self.windows.get_mut(&key) {
            if now.duration_since(w.started) < self.every || w.more > 0 {
                w.more += 1;
                return false;
            }
        }
        self.windows.insert(
            key,
            Window {
                started: now,
                more: 0,
            },
        );
        true
    }

    /// The summaries due at `now`: each key whose window has ended, with how many more
    /// occurrences it counted (keys with none are forgotten). A key over [`MAX_KEYS`]
    /// has its window ended early.
    pub fn due(&mut self, now: Instant) -> Vec<(K, u64)> {
        let crowded = self.windows.len() > MAX_KEYS;
        let mut out = Vec::new();
        self.windows.retain(|k, w| {
            if !crowded && now.duration_since(w.started) < self.every {
                return true;
            }
            if w.more > 0 {
                out.push((k.clone(), w.more));
                // A new window starts: the next occurrence is counted, not logged,
                // while the flood lasts.
                *w = Window {
                    started: now,
                    more: 0,
                };
                return !crowded;
            }
            false
        });
        out
    }

    /// How many keys are counted.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_its_first_line_then_one_count_per_interval() {
        let t0 = Instant::now();
        let mut r = Repeats::default();
        let mut logged = 0u64;
        // 29,100 a second for 25 s, from one key; another key once.
        for i in 0..25 * 29_100u64 {
            let now = t0 + Duration::from_micros(i * 1_000_000 / 29_100);
            if r.note(65534u32, now) {
                logged += 1;
            }
            if i % 29_100 == 0 {
                for (k, n) in r.due(now) {
                    assert_eq!(k, 65534);
                    logged += 1;
                    assert!(n > 0);
                }
            }
        }
        assert_eq!(logged, 1 + 2, "the first, then a count at 10 s and at 20 s");
        assert!(
            r.note(1000u32, t0 + Duration::from_secs(25)),
            "another key's first"
        );
        let end = t0 + Duration::from_secs(40);
        let last = r.due(end);
        assert_eq!(last.len(), 1, "{last:?}: key 1000 had no more");
        assert_eq!(last[0].0, 65534);
        // Everything summed up: quiet keys are forgotten, and the next one is logged.
        assert!(r.due(end + REPEATS_EVERY).is_empty());
        assert!(r.is_empty());
        assert!(r.note(65534, end + REPEATS_EVERY));
    }

    #[test]
    fn every_occurrence_is_logged_or_counted_once() {
        let t0 = Instant::now();
        let mut r = Repeats::default();
        let mut seen = 0u64;
        for i in 0..10_000u64 {
            let now = t0 + Duration::from_millis(i * 3);
            if r.note(i % 7, now) {
                seen += 1;
            }
            if i % 500 == 0 {
                seen += r.due(now).iter().map(|(_, n)| n).sum::<u64>();
            }
        }
        let far = t0 + Duration::from_secs(3600);
        seen += r.due(far).iter().map(|(_, n)| n).sum::<u64>();
        seen += r
            .due(far + REPEATS_EVERY)
            .iter()
            .map(|(_, n)| n)
            .sum::<u64>();
        assert_eq!(seen, 10_000);
    }

    #[test]
    fn keys_are_bounded() {
        let t0 = Instant::now();
        let mut r = Repeats::default();
        for k in 0..(MAX_KEYS as u64 + 10) {
            r.note(k, t0);
            r.note(k, t0);
        }
        let early = r.due(t0);
        assert_eq!(early.len(), MAX_KEYS + 10, "summed up early");
        assert!(r.is_empty());
    }
}
