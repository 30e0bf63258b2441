//! The one CPU-set type of the crate: a growable bitmap of CPU ids that parses and
//! prints the kernel's list format (`0-3,8,10-11`).
//!
//! Owns: parsing, printing, set algebra. Must not touch: the OS (no syscalls, no files).
//! Unlike `nix::sched::CpuSet` it is not limited to 1024 CPUs.

use std::fmt;
use std::str::FromStr;

/// Largest CPU id accepted from text: the kernel's NR_CPUS tops out at 8192 (x86-64
/// MAXSMP). It keeps a set at most 1 KiB, so that a file of many short lists (a 1 MiB
/// rule file holds 14,000 rules with `cpus = "8191"`) cannot allocate gigabytes.
pub const MAX_CPU_ID: u32 = (1 << 13) - 1;

/// A set of logical CPU ids.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. No trailing zero words.
    words: Vec<u64>,
}

/// A CPU list that does not parse; the message names the offending token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list token {token:?}: {reason}")]
pub struct CpuListError {
    /// The comma-separated token that failed, as written.
    pub token: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet { words: Vec::new() }
    }

    /// The set `0..n`.
    pub fn first_n(n: u32) -> Self {
        (0..n).collect()
    }

    /// Adds `cpu`; returns whether it was absent.
    pub fn insert(&mut self, cpu: u32) -> bool {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Removes `cpu`; returns whether it was present.
    pub fn remove(&mut self, cpu: u32) -> bool {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let was = *word & (1 << b) != 0;
        *word &= !(1 << b);
        self.trim();
        was
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Lowest CPU id, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// Highest CPU id, if any.
    pub fn last(&self) -> Option<u32> {
        let w = self.words.len().checked_sub(1)?;
        Some(w as u32 * 64 + 63 - self.words[w].leading_zeros())
    }

    /// CPU ids in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            index: 0,
            current: self.words.first().copied().unwrap_or(0),
        }
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        CpuSet::from_words(words)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        CpuSet::from_words((0..n).map(|i| self.word(i) & other.word(i)).collect())
    }

    /// CPUs in `self` and not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet::from_words(
            (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        )
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.intersection(other).is_empty()
    }

    /// The bitmap as 64-bit words, CPU 0 in bit 0 of word 0 (what `sched_setaffinity`
    /// takes on little- and big-endian alike when handed `unsigned long`s).
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }

    /// Builds a set from 64-bit words as returned by `sched_getaffinity`.
    pub fn from_words(words: Vec<u64>) -> CpuSet {
        let mut set = CpuSet { words };
        set.trim();
        set
    }

    /// Parses the kernel's hexadecimal mask format (`ff,ffffffff`), as found in
    /// `/proc/PID/status` `Cpus_allowed:` and sysfs `cpumap` files.
    pub fn parse_hex_mask(text: &str) -> Result<CpuSet, CpuListError> {
        let text = text.trim();
        let mut words32 = Vec::new();
        for chunk in text.rsplit(',') {
            let bad = |reason| CpuListError {
                token: chunk.to_string(),
                reason,
            };
            if chunk.is_empty() || chunk.len() > 8 {
                return Err(bad("expected 1 to 8 hex digits per comma-separated group"));
            }
            words32.push(u32::from_str_radix(chunk, 16).map_err(|_| bad("not hexadecimal"))?);
        }
        let words = words32
            .chunks(2)
            .map(|c| c[0] as u64 | (c.get(1).copied().unwrap_or(0) as u64) << 32)
            .collect();
        Ok(CpuSet::from_words(words))
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

/// Ascending iterator over a [`CpuSet`].
pub struct Iter<'a> {
    words: &'a [u64],
    index: usize,
    current: u64,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            if self.current != 0 {
                let bit = self.current.trailing_zeros();
                self.current &= self.current - 1;
                return Some(self.index as u32 * 64 + bit);
            }
            self.index += 1;
            self.current = *self.words.get(self.index)?;
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = u32;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for cpu in iter {
            self.insert(cpu);
        }
    }
}

impl FromStr for CpuSet {
    type Err = CpuListError;

    /// Parses `0-3,8,10-11`. Surrounding whitespace (sysfs files end in a newline) is
    /// ignored; an empty string is the empty set, as the kernel prints it.
    fn from_str(text: &str) -> Result<CpuSet, CpuListError> {
        let text = text.trim();
        let mut set = CpuSet::new();
        if text.is_empty() {
            return Ok(set);
        }
        for token in text.split(',') {
            let bad = |reason| CpuListError {
                token: token.to_string(),
                reason,
            };
            let id = |s: &str| -> Result<u32, CpuListError> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("expected a CPU number or a range like 0-3"));
                }
                match s.parse::<u32>() {
                    Ok(n) if n <= MAX_CPU_ID => Ok(n),
                    _ => Err(bad("CPU id too large")),
                }
            };
            let token_trimmed = token.trim();
            match token_trimmed.split_once('-') {
                None => {
                    set.insert(id(token_trimmed)?);
                }
                Some((lo, hi)) => {
                    let (lo, hi) = (id(lo)?, id(hi)?);
                    if lo > hi {
                        return Err(bad("range is reversed (start > end)"));
                    }
                    set.insert_range(lo, hi);
                }
            }
        }
        Ok(set)
    }
}

impl CpuSet {
    /// Adds every CPU in `lo..=hi`.
    pub fn insert_range(&mut self, lo: u32, hi: u32) {
        if lo > hi {
            return;
        }
        let last = hi as usize / 64;
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for cpu in lo..=hi {
            self.words[cpu as usize / 64] |= 1 << (cpu % 64);
        }
    }
}

impl fmt::Display for CpuSet {
    /// Kernel list format: `0-3,8,10-11`; the empty set prints as an empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut iter = self.iter().peekable();
        let mut first = true;
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CpuSet, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A CPU list written in a test (`"0-3,8"`), which must parse.
#[cfg(test)]
pub(crate) fn set(list: &str) -> CpuSet {
    list.parse().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kernel_lists() {
        let set: CpuSet = "0-3,8,10-11\n".parse().unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set.to_string(), "0-3,8,10-11");
        assert_eq!(set.len(), 7);
        assert_eq!(set.first(), Some(0));
        assert_eq!(set.last(), Some(11));
    }

    #[test]
    fn empty_list_is_empty_set() {
        let set: CpuSet = "".parse().unwrap();
        assert!(set.is_empty());
        assert_eq!(set.to_string(), "");
        let set: CpuSet = " \n".parse().unwrap();
        assert!(set.is_empty());
        assert_eq!(set.last(), None);
    }

    #[test]
    fn malformed_tokens_are_named() {
        for (text, token) in [
            ("0-3,x", "x"),
            ("1,,2", ""),
            ("5-", "5-"),
            ("-5", "-5"),
            ("1-2-3", "1-2-3"),
            ("0,+1", "+1"),
            ("3 4", "3 4"),
        ] {
            let err = text.parse::<CpuSet>().unwrap_err();
            assert_eq!(err.token, token, "for {text:?}");
            assert!(err.to_string().contains(&format!("{token:?}")), "{err}");
        }
    }

    #[test]
    fn reversed_range_is_an_error() {
        let err = "0,7-3".parse::<CpuSet>().unwrap_err();
        assert_eq!(err.token, "7-3");
        assert_eq!(err.reason, "range is reversed (start > end)");
    }

    #[test]
    fn huge_ids_beyond_1024_work_and_absurd_ids_are_refused() {
        let set: CpuSet = "1023-1025,4095,8191".parse().unwrap();
        assert_eq!(set.len(), 5);
        assert!(set.contains(4095) && set.contains(MAX_CPU_ID));
        assert_eq!(set.to_string(), "1023-1025,4095,8191");
        let err = "8192".parse::<CpuSet>().unwrap_err();
        assert_eq!(err.reason, "CPU id too large");
        let err = "99999999999999999999".parse::<CpuSet>().unwrap_err();
        assert_eq!(err.reason, "CPU id too large");
    }

    #[test]
    fn set_algebra() {
        let a: CpuSet = "0-7".parse().unwrap();
        let b: CpuSet = "4-11,200".parse().unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11,200");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(b.difference(&a).to_string(), "8-11,200");
        assert!(a.intersection(&b).is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(a.difference(&b).is_disjoint(&b));
        let mut c = b.clone();
        assert!(c.remove(200));
        assert!(!c.remove(200));
        assert_eq!(c.as_words().len(), 1, "trailing zero words are trimmed");
    }

    #[test]
    fn hex_masks() {
        assert_eq!(CpuSet::parse_hex_mask("ff\n").unwrap().to_string(), "0-7");
        assert_eq!(
            CpuSet::parse_hex_mask("00000001,00000000,00000003")
                .unwrap()
                .to_string(),
            "0-1,64"
        );
        assert_eq!(CpuSet::parse_hex_mask("zz").unwrap_err().token, "zz");
    }

    #[test]
    fn serde_uses_the_list_format() {
        let set: CpuSet = "0-2,9".parse().unwrap();
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "\"0-2,9\"");
        assert_eq!(serde_json::from_str::<CpuSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<CpuSet>("\"3-1\"").is_err());
    }

    proptest! {
        #[test]
        fn round_trip(ids in proptest::collection::btree_set(0u32..5000, 0..200)) {
            let set: CpuSet = ids.iter().copied().collect();
            let text = set.to_string();
            let back: CpuSet = text.parse().unwrap();
            prop_assert_eq!(&back, &set);
            prop_assert_eq!(back.iter().collect::<Vec<_>>(), ids.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn huge_ids_round_trip(ids in proptest::collection::btree_set(0u32..=MAX_CPU_ID, 0..20)) {
            let set: CpuSet = ids.iter().copied().collect();
            prop_assert_eq!(set.to_string().parse::<CpuSet>().unwrap(), set.clone());
            prop_assert_eq!(set.len(), ids.len());
            prop_assert_eq!(set.last(), ids.iter().next_back().copied());
        }

        #[test]
        fn ranges_parse_to_their_members(lo in 0u32..3000, len in 0u32..300) {
            let set: CpuSet = format!("{}-{}", lo, lo + len).parse().unwrap();
            prop_assert_eq!(set.len() as u32, len + 1);
            prop_assert_eq!(set.first(), Some(lo));
            prop_assert_eq!(set.last(), Some(lo + len));
        }

        #[test]
        fn reversed_ranges_fail(lo in 1u32..3000, back in 1u32..100) {
            let hi = lo.saturating_sub(back);
            prop_assume!(hi < lo);
            let token = format!("{lo}-{hi}");
            let err = format!("0,{token}").parse::<CpuSet>().unwrap_err();
            prop_assert_eq!(err.token, token);
        }

        #[test]
        fn garbage_tokens_are_reported(garbage in "[a-z_+. ]{1,6}") {
            let err = format!("1,{garbage},3").parse::<CpuSet>().unwrap_err();
            prop_assert_eq!(err.token, garbage);
        }

        #[test]
        fn never_panics(text in "\\PC{0,40}") {
            let _ = text.parse::<CpuSet>();
        }
    }
}
