//! What only the boot gives a CPU: `nohz_full` (the scheduler tick stopped while one task
//! runs there) and `rcu_nocbs` (its RCU callbacks run by kernel threads elsewhere), and
//! the sentence `explain` and `check` say about the CPUs a rule holds.
//!
//! ```text
//!   SysRoot ─► devices/system/cpu/nohz_full ──────────────┐
//!          └─► proc/cmdline: rcu_nocbs[=LIST] (kernel list) ┴─► BootCpus ─► said(held)
//! ```
//!
//! The kernel adds the `nohz_full` CPUs to the `rcu_nocbs` ones (`rcu_init_nohz`), so a
//! CPU given only `nohz_full=` is counted in both. Neither can change after boot: this
//! module only reads and says.
//!
//! Owns: the kernel command line's CPU list syntax (`0-3,8`, `N`, `all`, strides
//! `2-15:2/4`), which the crate's `CpuSet` does not read.
//! Must not touch: anything it reads.

use crate::cpuset::CpuSet;
use crate::sysroot::{read_optional, SysRoot};

/// What the boot said of some CPUs, or why it is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    Cpus(CpuSet),
    Unknown(String),
}

/// The CPUs the kernel was booted to keep quiet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootCpus {
    /// `/sys/devices/system/cpu/nohz_full` (`nohz_full=`, or `isolcpus=nohz,…`).
    pub nohz_full: Known,
    /// `rcu_nocbs=` of `/proc/cmdline`, with the `nohz_full` CPUs the kernel adds.
    pub rcu_nocbs: Known,
}

/// What `nohz_full=` would do for a CPU not in it.
pub const NOHZ_FULL_GIVES: &str = "stop the scheduler tick there while one task runs";
/// What `rcu_nocbs=` would do for a CPU not in it.
pub const RCU_NOCBS_GIVES: &str = "move their RCU callbacks to kernel threads on other CPUs";

/// Reads `root`'s `nohz_full` file and kernel command line.
pub fn read(root: &SysRoot) -> BootCpus {
    let last = last_possible(root);
    let path = root.sys_path("devices/system/cpu/nohz_full");
    let nohz_full = match read_optional(&path) {
        Ok(None) => Known::Unknown("this kernel is built without NO_HZ_FULL".into()),
        Err(e) => Known::Unknown(format!("cannot read {}: {e}", path.display())),
        // Without `nohz_full=` the kernel's mask is not even allocated: "(null)", padded
        // to a width on Debian's 6.12 (" (null)").
        Ok(Some(t)) if t.trim() == "(null)" => Known::Cpus(CpuSet::new()),
        Ok(Some(t)) => match t.parse() {
            Ok(set) => Known::Cpus(set),
            Err(e) => Known::Unknown(format!("{}: {e}", path.display())),
        },
    };
    let path = root.proc_path("cmdline");
    let rcu_nocbs = match read_optional(&path) {
        Ok(None) => Known::Unknown(format!("no {}", path.display())),
        Err(e) => Known::Unknown(format!("cannot read {}: {e}", path.display())),
        Ok(Some(cmdline)) => rcu_nocbs_of(&cmdline, last),
    };
    let rcu_nocbs = match (rcu_nocbs, &nohz_full) {
        (Known::Cpus(r), Known::Cpus(n)) => Known::Cpus(r.union(n)),
        (r, _) => r,
    };
    BootCpus {
        nohz_full,
        rcu_nocbs,
    }
}

/// The last possible CPU (the kernel's `N` in a CPU list); 0 when not known.
fn last_possible(root: &SysRoot) -> u32 {
    read_optional(&root.sys_path("devices/system/cpu/possible"))
        .ok()
        .flatten()
        .and_then(|t| t.parse::<CpuSet>().ok())
        .and_then(|s| s.last())
        .unwrap_or(0)
}

/// The CPUs `rcu_nocbs` gives in a kernel command line (the last one given counts; a bare
/// `rcu_nocbs` offloads none at boot). Words after `--` are init's, not the kernel's.
fn rcu_nocbs_of(cmdline: &str, last: u32) -> Known {
    let mut value = None;
    for word in cmdline.split_ascii_whitespace() {
        if word == "--" {
            break;
        }
        if word == "rcu_nocbs" {
            value = Some("");
        } else if let Some(v) = word.strip_prefix("rcu_nocbs=") {
            value = Some(v.trim_matches('"'));
        }
    }
    match value {
        None | Some("") => Known::Cpus(CpuSet::new()),
        Some(v) => match parse_kernel_list(v, last) {
            Ok(set) => Known::Cpus(set),
            // rcu_nocb_setup: "rcu_nocbs= bad CPU range, all CPUs set".
            Err(e) => Known::Unknown(format!(
                "rcu_nocbs={v} is not a CPU list ({e}); the kernel then offloads every CPU"
            )),
        },
    }
}

/// A CPU list as the kernel reads it on its command line (`bitmap_parselist`): regions
/// `A`, `A-B` and `A-B:U/G` (the first `U` of every `G` CPUs from `A` to `B`), separated
/// by commas; `N` is the last possible CPU (`last`) and `all` is `0-N`.
pub fn parse_kernel_list(text: &str, last: u32) -> Result<CpuSet, String> {
    let mut set = CpuSet::new();
    let cpu = |s: &str| -> Result<u32, String> {
        if s == "N" {
            return Ok(last);
        }
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{s:?} is not a CPU number"));
        }
        match s.parse::<u32>() {
            Ok(n) if n <= last => Ok(n),
            _ => Err(format!("CPU {s} is past the last CPU, {last}")),
        }
    };
    for region in text.trim().split(',') {
        let (range, group) = match region.split_once(':') {
            Some((r, g)) => (r, Some(g)),
            None => (region, None),
        };
        let (lo, hi) = match range {
            "all" => (0, last),
            _ => match range.split_once('-') {
                Some((a, b)) => (cpu(a)?, cpu(b)?),
                None => (cpu(range)?, cpu(range)?),
            },
        };
        if lo > hi {
            return Err(format!("{region:?}: the range is reversed"));
        }
        let (used, size) = match group {
            None => (1, 1),
            Some(g) => {
                let bad = || format!("{region:?}: a stride is USED/GROUP, 1 <= USED <= GROUP");
                let (u, s) = g.split_once('/').ok_or_else(bad)?;
                let (u, s) = (
                    u.parse::<u32>().map_err(|_| bad())?,
                    s.parse::<u32>().map_err(|_| bad())?,
                );
                if u == 0 || s == 0 || u > s {
                    return Err(bad());
                }
                (u, s)
            }
        };
        set.extend((lo..=hi).filter(|c| (c - lo) % size < used));
    }
    Ok(set)
}

impl BootCpus {
    /// One line on `held` (the CPUs a rule holds): which of them the boot made
    /// `nohz_full` and `rcu_nocbs`, what that would add to the others, and that only the
    /// boot can; `None` when `held` is empty.
    pub fn said(&self, held: &CpuSet) -> Option<String> {
        if held.is_empty() {
            return None;
        }
        let cpus = if held.len() == 1 { "CPU" } else { "CPUs" };
        let nohz = part("nohz_full", &self.nohz_full, held, NOHZ_FULL_GIVES);
        let rcu = part("rcu_nocbs", &self.rcu_nocbs, held, RCU_NOCBS_GIVES);
        let short = |k: &Known| matches!(k, Known::Cpus(s) if !held.is_subset(s));
        let only = if short(&self.nohz_full) || short(&self.rcu_nocbs) {
            "; only the kernel command line sets either, at boot"
        } else {
            ""
        };
        Some(format!("boot: held {cpus} {held}: {nohz}; {rcu}{only}"))
    }
}

impl BootCpus {
    /// This machine's `nohz_full` and `rcu_nocbs` CPUs, what each would do for a CPU and
    /// that only the boot sets them: for CPUs not known yet (`check` of a rule the plan
    /// places) and for `report`.
    pub fn machine_words(&self) -> String {
        let machine = |key: &str, k: &Known| match k {
            Known::Cpus(s) if s.is_empty() => format!("no CPU is {key}"),
            Known::Cpus(s) => format!("{key} CPUs {s}"),
            Known::Unknown(why) => format!("{key} not known ({why})"),
        };
        format!(
            "{}, {} (nohz_full= would {NOHZ_FULL_GIVES}; rcu_nocbs= would {RCU_NOCBS_GIVES}; \
             only the kernel command line sets either, at boot)",
            machine("nohz_full", &self.nohz_full),
            machine("rcu_nocbs", &self.rcu_nocbs)
        )
    }
}

/// `key` for `held`: on all of them, on some (and what the others would gain), on none.
fn part(key: &str, known: &Known, held: &CpuSet, gives: &str) -> String {
    match known {
        Known::Unknown(why) => format!("{key} not known ({why})"),
        Known::Cpus(set) => {
            let on = held.intersection(set);
            let off = held.difference(set);
            if off.is_empty() {
                format!("{key} on all")
            } else if on.is_empty() {
                format!("not {key} ({key}= would {gives})")
            } else {
                format!("{key} on {on} only ({key}= with {off} too would {gives})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;

    #[test]
    fn kernel_cpu_lists_read_as_the_kernel_reads_them() {
        for (text, want) in [
            ("3", "3"),
            ("0-3,8", "0-3,8"),
            ("N", "15"),
            ("8-N", "8-15"),
            ("all", "0-15"),
            ("0-15:2/4", "0-1,4-5,8-9,12-13"),
            ("2-15:1/4", "2,6,10,14"),
            ("all:1/8", "0,8"),
            ("1,3-5:1/2", "1,3,5"),
        ] {
            assert_eq!(parse_kernel_list(text, 15).unwrap(), set(want), "{text}");
        }
        for (text, want) in [
            ("16", "past the last CPU, 15"),
            ("5-2", "reversed"),
            ("0-7:0/4", "1 <= USED <= GROUP"),
            ("0-7:5/4", "1 <= USED <= GROUP"),
            ("0-7:2", "USED/GROUP"),
            ("x", "not a CPU number"),
            ("1,,2", "not a CPU number"),
        ] {
            let e = parse_kernel_list(text, 15).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn the_last_rcu_nocbs_counts_and_init_words_do_not() {
        let cpus = |line: &str| match rcu_nocbs_of(line, 7) {
            Known::Cpus(s) => s.to_string(),
            Known::Unknown(why) => why,
        };
        assert_eq!(cpus("BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro quiet"), "");
        assert_eq!(cpus("ro rcu_nocbs=2-3 quiet"), "2-3");
        assert_eq!(cpus("rcu_nocbs=1 ro rcu_nocbs=6-7"), "6-7");
        assert_eq!(cpus("ro rcu_nocbs"), "");
        assert_eq!(cpus("ro rcu_nocbs=\"4,N\""), "4,7");
        assert_eq!(cpus("ro -- rcu_nocbs=2-3"), "");
        assert!(
            cpus("rcu_nocbs=9").contains("offloads every CPU"),
            "{}",
            cpus("rcu_nocbs=9")
        );
    }

    /// A fake tree: `possible`, `nohz_full` (absent with `None`) and `/proc/cmdline`.
    fn tree(nohz_full: Option<&str>, cmdline: &str) -> (tempfile::TempDir, SysRoot) {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(cpu.join("possible"), "0-7\n").unwrap();
        if let Some(n) = nohz_full {
            std::fs::write(cpu.join("nohz_full"), n).unwrap();
        }
        std::fs::write(dir.path().join("proc/cmdline"), cmdline).unwrap();
        let root = SysRoot::machine(dir.path());
        (dir, root)
    }

    #[test]
    fn nohz_full_cpus_are_rcu_nocbs_too_and_null_is_none() {
        let (_d, root) = tree(Some(" (null)\n"), "ro quiet\n");
        assert_eq!(
            read(&root),
            BootCpus {
                nohz_full: Known::Cpus(CpuSet::new()),
                rcu_nocbs: Known::Cpus(CpuSet::new())
            }
        );
        let (_d, root) = tree(Some("6-7\n"), "ro nohz_full=6-7 rcu_nocbs=5 quiet\n");
        let b = read(&root);
        assert_eq!(b.nohz_full, Known::Cpus(set("6-7")));
        assert_eq!(b.rcu_nocbs, Known::Cpus(set("5-7")));
        let (_d, root) = tree(None, "ro rcu_nocbs=N\n");
        let b = read(&root);
        assert!(matches!(&b.nohz_full, Known::Unknown(w) if w.contains("without NO_HZ_FULL")));
        assert_eq!(b.rcu_nocbs, Known::Cpus(set("7")));
    }

    #[test]
    fn the_line_says_what_each_held_cpu_has_and_what_the_rest_would_gain() {
        let (_d, root) = tree(Some("(null)\n"), "ro quiet\n");
        assert_eq!(
            read(&root).said(&set("6-7")).unwrap(),
            "boot: held CPUs 6-7: not nohz_full (nohz_full= would stop the scheduler tick \
             there while one task runs); not rcu_nocbs (rcu_nocbs= would move their RCU \
             callbacks to kernel threads on other CPUs); only the kernel command line sets \
             either, at boot"
        );
        let (_d, root) = tree(Some("7\n"), "ro nohz_full=7 rcu_nocbs=6-7\n");
        assert_eq!(
            read(&root).said(&set("6-7")).unwrap(),
            "boot: held CPUs 6-7: nohz_full on 7 only (nohz_full= with 6 too would stop the \
             scheduler tick there while one task runs); rcu_nocbs on all; only the kernel \
             command line sets either, at boot"
        );
        let (_d, root) = tree(Some("6-7\n"), "ro nohz_full=6-7\n");
        assert_eq!(
            read(&root).said(&set("7")).unwrap(),
            "boot: held CPU 7: nohz_full on all; rcu_nocbs on all"
        );
        assert_eq!(read(&root).said(&CpuSet::new()), None);
        assert!(
            read(&root)
                .machine_words()
                .starts_with("nohz_full CPUs 6-7, rcu_nocbs CPUs 6-7 (nohz_full= would stop"),
            "{}",
            read(&root).machine_words()
        );
    }
}
