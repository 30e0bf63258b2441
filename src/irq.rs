//! Interrupts away from the CPUs an `irqs = "away"` rule holds, and back when it lets go.
//!
//! ```text
//! /proc/irq/N/{smp_affinity_list, effective_affinity_list} ──► list
//! away CPUs ─► move_away: each IRQ whose mask or effective CPU touches them gets its
//!              mask minus them (write, read back); refused or stuck ones are reported
//!              ─► Moved (before, set) ─► journal (irqs.json, atomic) ─► restore
//! irqbalance running? ─► its socket: `settings cpus <banned list>` (≥ 1.8)
//! ```
//!
//! Owns: reading and writing `/proc/irq` (through a [`SysRoot`], so tests run on fixture
//! trees), the IRQ journal and the irqbalance socket. Must not touch: tasks' affinity,
//! the plan. An IRQ that cannot move is reported once, not retried; restoring writes an
//! IRQ's old mask back only while it still has the mask pinnerd set (someone else's
//! later change is left alone).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::journal::{JournalError, ListFile};
use crate::sysroot::SysRoot;

/// File name of the IRQ journal under the runtime directory.
pub const JOURNAL_FILE: &str = "irqs.json";

/// Errors reading `/proc/irq` or the journal; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum IrqError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: corrupt IRQ journal: {message}")]
    Corrupt { path: PathBuf, message: String },
}

/// One interrupt as `/proc/irq/N` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Irq {
    pub n: u32,
    /// `smp_affinity_list`: where it may go.
    pub affinity: CpuSet,
    /// `effective_affinity_list`: where it goes (absent on some kernels and chips).
    pub effective: Option<CpuSet>,
}

/// An IRQ pinnerd moved: its mask before, and the mask it set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub irq: u32,
    pub before: CpuSet,
    pub set: CpuSet,
}

/// What [`move_away`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Away {
    /// IRQs whose mask was changed (restore these).
    pub moved: Vec<Moved>,
    /// IRQs still on the CPUs, with why: the kernel refused the write (per-CPU or
    /// managed interrupts), or the effective CPU stayed.
    pub unmovable: Vec<(u32, String)>,
}

fn irq_dir(root: &SysRoot) -> PathBuf {
    root.proc_path("irq")
}

fn read_list(path: &Path) -> Result<CpuSet, IrqError> {
    let text = crate::sysroot::read_bounded(path).map_err(|source| IrqError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.trim().parse().map_err(|e| IrqError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}")),
    })
}

/// Every IRQ under `/proc/irq`, by number. An IRQ that vanished while being read is
/// skipped.
pub fn list(root: &SysRoot) -> Result<Vec<Irq>, IrqError> {
    let dir = irq_dir(root);
    let entries = std::fs::read_dir(&dir).map_err(|source| IrqError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let affinity = match read_list(&e.path().join("smp_affinity_list")) {
            Ok(a) => a,
            Err(IrqError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                continue
            }
            Err(e) => return Err(e),
        };
        let effective = read_list(&e.path().join("effective_affinity_list")).ok();
        out.push(Irq {
            n,
            affinity,
            effective,
        });
    }
    out.sort_by_key(|i| i.n);
    Ok(out)
}

fn write_list(root: &SysRoot, n: u32, cpus: &CpuSet) -> Result<(), IrqError> {
    let path = irq_dir(root).join(format!("{n}/smp_affinity_list"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|source| IrqError::Write {
            path: path.clone(),
            source,
        })?;
    f.write_all(format!("{cpus}\n").as_bytes())
        .map_err(|source| IrqError::Write { path, source })
}

/// The moves [`move_away`] would make, before making them: for every IRQ whose mask or
/// effective CPU touches `away`, its mask minus them (or every online CPU but them when
/// nothing else is left), and the IRQs with nowhere to go. Written to the journal
/// first, so a daemon dying halfway still leaves every mask it may have changed on
/// record ([`restore`] skips the ones that did not change).
pub fn plan_away(root: &SysRoot, away: &CpuSet, online: &CpuSet) -> Result<Away, IrqError> {
    let mut out = Away::default();
    if away.is_empty() {
        return Ok(out);
    }
    for irq in list(root)? {
        let touches = |c: &CpuSet| !c.intersection(away).is_empty();
        if !touches(&irq.affinity) && !irq.effective.as_ref().is_some_and(touches) {
            continue;
        }
        let mut target = irq.affinity.difference(away);
        if target.is_empty() {
            target = online.difference(away);
        }
        if target.is_empty() {
            out.unmovable
                .push((irq.n, format!("no CPU but {away} to take it")));
        } else {
            out.moved.push(Moved {
                irq: irq.n,
                before: irq.affinity,
                set: target,
            });
        }
    }
    Ok(out)
}

/// Makes the moves of [`plan_away`]: writes each mask and reads the kernel's answer
/// back. An IRQ the kernel refused (per-CPU and managed interrupts: EPERM or EIO), or
/// whose effective CPU stayed on `away`, is reported in [`Away::unmovable`].
pub fn move_away(root: &SysRoot, away: &CpuSet, online: &CpuSet) -> Result<Away, IrqError> {
    let plan = plan_away(root, away, online)?;
    let mut out = Away {
        moved: Vec::new(),
        unmovable: plan.unmovable,
    };
    for m in plan.moved {
        if m.set != m.before {
            if let Err(e) = write_list(root, m.irq, &m.set) {
                out.unmovable
                    .push((m.irq, format!("the kernel refused: {e}")));
                continue;
            }
        }
        let eff = irq_dir(root).join(format!("{}/effective_affinity_list", m.irq));
        if let Ok(e) = read_list(&eff) {
            if !e.intersection(away).is_empty() {
                out.unmovable
                    .push((m.irq, format!("still effective on CPUs {e}")));
            }
        }
        if m.set != m.before {
            out.moved.push(m);
        }
    }
    out.unmovable.sort();
    Ok(out)
}

/// Puts back the masks of `moved` that still are what pinnerd set; the others were
/// changed by someone else since and are left alone. Returns the IRQs not restored,
/// with why (gone IRQs are not listed).
pub fn restore(root: &SysRoot, moved: &[Moved]) -> Vec<(u32, String)> {
    let mut failed = Vec::new();
    for m in moved {
        let path = irq_dir(root).join(format!("{}/smp_affinity_list", m.irq));
        match read_list(&path) {
            Ok(now) if now == m.set => {
                if let Err(e) = write_list(root, m.irq, &m.before) {
                    failed.push((m.irq, e.to_string()));
                }
            }
            Ok(now) => failed.push((
                m.irq,
                format!("changed by someone else to {now} since; left alone"),
            )),
            Err(IrqError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            }
            Err(e) => failed.push((m.irq, e.to_string())),
        }
    }
    failed
}

/// The IRQ journal: the masks to give back if the daemon dies.
#[derive(Debug, Clone)]
pub struct Journal(ListFile<Moved>);

impl Journal {
    pub fn new(runtime_dir: &Path) -> Journal {
        Journal(ListFile::new(runtime_dir, JOURNAL_FILE, "IRQ journal"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Replaces the journal atomically (temp file, then rename); empty removes it.
    pub fn save(&self, moved: &[Moved]) -> Result<(), IrqError> {
        Ok(self.0.save(moved)?)
    }

    /// What a previous run left: empty when there is no journal.
    pub fn load(&self) -> Result<Vec<Moved>, IrqError> {
        Ok(self.0.load()?)
    }
}

impl From<JournalError> for IrqError {
    fn from(e: JournalError) -> IrqError {
        match e {
            JournalError::Read { path, source } => IrqError::Read { path, source },
            JournalError::Write { path, source } => IrqError::Write { path, source },
            JournalError::Corrupt { path, message, .. } => IrqError::Corrupt { path, message },
        }
    }
}

/// The pid of a running irqbalance, if any (by comm under /proc).
pub fn irqbalance_pid(root: &SysRoot) -> Option<i32> {
    let dir = std::fs::read_dir(root.proc_path("")).ok()?;
    dir.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = crate::sysroot::read_bounded(e.path().join("comm")).ok()?;
        (comm.trim() == "irqbalance").then_some(pid)
    })
}

/// Tells the irqbalance `pid` to keep off `banned` (`settings cpus <list>`, irqbalance
/// ≥ 1.8; an empty set sends `NULL`, which lifts the ban), over its socket
/// `/run/irqbalance/irqbalance<PID>.sock` (or, for older builds, the abstract name
/// `irqbalance<PID>.sock`).
pub fn irqbalance_ban(pid: i32, banned: &CpuSet) -> std::io::Result<()> {
    use std::os::unix::net::UnixStream;
    let path = PathBuf::from(format!("/run/irqbalance/irqbalance{pid}.sock"));
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(first) => {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("irqbalance{pid}.sock");
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&addr).map_err(|_| first)?
        }
    };
    let list = if banned.is_empty() {
        "NULL".to_string()
    } else {
        banned.to_string()
    };
    s.write_all(format!("settings cpus {list}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::set;

    /// A fixture /proc/irq: (irq, affinity, effective).
    fn tree(irqs: &[(u32, &str, Option<&str>)]) -> (tempfile::TempDir, SysRoot) {
        let dir = tempfile::tempdir().unwrap();
        for &(n, aff, eff) in irqs {
            let d = dir.path().join(format!("proc/irq/{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("smp_affinity_list"), format!("{aff}\n")).unwrap();
            if let Some(e) = eff {
                std::fs::write(d.join("effective_affinity_list"), format!("{e}\n")).unwrap();
            }
        }
        std::fs::write(dir.path().join("proc/irq/default_smp_affinity"), "f\n").unwrap();
        let root = SysRoot::machine(dir.path());
        (dir, root)
    }

    fn aff(root: &SysRoot, n: u32) -> String {
        std::fs::read_to_string(root.proc_path(format!("irq/{n}/smp_affinity_list")))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn irqs_touching_the_cpus_move_off_them_and_come_back() {
        let (_d, root) = tree(&[
            (10, "0-3", Some("2")),
            (11, "0-1", Some("0")),
            (12, "2-3", None),
            (13, "0,2", Some("0")),
        ]);
        assert_eq!(list(&root).unwrap().len(), 4);
        let away = move_away(&root, &set("2-3"), &set("0-3")).unwrap();
        assert_eq!(
            away.moved,
            vec![
                Moved {
                    irq: 10,
                    before: set("0-3"),
                    set: set("0-1")
                },
                Moved {
                    irq: 12,
                    before: set("2-3"),
                    set: set("0-1")
                },
                Moved {
                    irq: 13,
                    before: set("0,2"),
                    set: set("0")
                },
            ]
        );
        // The fixture's effective list does not follow writes as the kernel's does:
        // IRQ 10 is still "effective on 2", which is reported, not retried.
        assert_eq!(
            away.unmovable,
            vec![(10, "still effective on CPUs 2".to_string())]
        );
        assert_eq!(
            (aff(&root, 10), aff(&root, 11), aff(&root, 12)),
            ("0-1".into(), "0-1".into(), "0-1".into())
        );
        // Someone else changes IRQ 13 meanwhile: left alone on restore.
        std::fs::write(root.proc_path("irq/13/smp_affinity_list"), "1\n").unwrap();
        let failed = restore(&root, &away.moved);
        assert_eq!(failed.len(), 1);
        assert!(failed[0].1.contains("someone else"), "{failed:?}");
        assert_eq!(
            (aff(&root, 10), aff(&root, 12), aff(&root, 13)),
            ("0-3".into(), "2-3".into(), "1".into())
        );
    }

    #[test]
    fn an_irq_with_nowhere_else_to_go_is_reported() {
        let (_d, root) = tree(&[(5, "1", Some("1"))]);
        let away = move_away(&root, &set("0-1"), &set("0-1")).unwrap();
        assert!(away.moved.is_empty());
        assert_eq!(away.unmovable[0].0, 5);
        assert!(
            away.unmovable[0].1.contains("no CPU"),
            "{:?}",
            away.unmovable
        );
        assert_eq!(
            move_away(&root, &CpuSet::new(), &set("0-1")).unwrap(),
            Away::default()
        );
    }

    #[test]
    fn the_journal_round_trips_and_a_bad_one_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        assert_eq!(j.load().unwrap(), Vec::new());
        let moved = vec![Moved {
            irq: 3,
            before: set("0-3"),
            set: set("0-1"),
        }];
        j.save(&moved).unwrap();
        assert_eq!(j.load().unwrap(), moved);
        j.save(&[]).unwrap();
        assert!(!j.path().exists());
        std::fs::write(j.path(), "[{\"irq\": 1}").unwrap();
        let e = j.load().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: corrupt IRQ journal", j.path().display())),
            "{e}"
        );
    }

    /// A FIFO, a symlink or an oversized file where the journal should be is a corrupt
    /// journal, found out without blocking on the open or reading past the bound.
    #[test]
    fn a_journal_that_is_not_a_small_regular_file_is_corrupt_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path());
        let load = |j: &Journal| {
            let (tx, rx) = std::sync::mpsc::channel();
            let j = Journal::new(j.path().parent().unwrap());
            std::thread::spawn(move || tx.send(j.load().map_err(|e| e.to_string())).unwrap());
            rx.recv_timeout(std::time::Duration::from_secs(20))
                .expect("loading the journal blocked")
        };
        nix::unistd::mkfifo(j.path(), nix::sys::stat::Mode::S_IRUSR).unwrap();
        let e = load(&j).unwrap_err();
        assert!(
            e.contains("corrupt IRQ journal: not a regular file but a FIFO"),
            "{e}"
        );
        std::fs::remove_file(j.path()).unwrap();

        let real = dir.path().join("elsewhere.json");
        std::fs::write(&real, "[]").unwrap();
        std::os::unix::fs::symlink(&real, j.path()).unwrap();
        let e = load(&j).unwrap_err();
        assert!(e.contains("corrupt IRQ journal"), "{e}");
        std::fs::remove_file(j.path()).unwrap();

        std::fs::write(
            j.path(),
            vec![b' '; crate::journal::MAX_JOURNAL_SIZE as usize + 1],
        )
        .unwrap();
        let e = load(&j).unwrap_err();
        assert!(e.contains("over the"), "{e}");
    }

    /// The real kernel (root): every IRQ touching the last online CPU is moved off it,
    /// the kernel's own affinity and effective affinity say so, and restore gives every
    /// mask back. This VM has movable virtio IRQs; a machine without any fails.
    #[test]
    fn the_real_kernel_moves_irqs_off_a_cpu_and_gives_them_back() {
        let root = SysRoot::default();
        let online: CpuSet = std::fs::read_to_string(root.sys_path("devices/system/cpu/online"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(online.len() >= 2, "needs two online CPUs, have {online}");
        let last: CpuSet = std::iter::once(online.last().unwrap()).collect();
        let before = list(&root).unwrap();
        let away = move_away(&root, &last, &online).unwrap();
        let after = list(&root).unwrap();
        let restored = restore(&root, &away.moved);
        let back = list(&root).unwrap();
        assert!(!away.moved.is_empty(), "no IRQ moved: {before:?} {away:?}");
        for m in &away.moved {
            let now = after.iter().find(|i| i.n == m.irq).unwrap();
            assert_eq!(now.affinity, m.set, "IRQ {}: the kernel's mask", m.irq);
            assert!(m.set.intersection(&last).is_empty());
            let stuck = away.unmovable.iter().any(|(n, _)| *n == m.irq);
            if let (Some(eff), false) = (&now.effective, stuck) {
                assert!(
                    eff.intersection(&last).is_empty(),
                    "IRQ {} effective {eff}",
                    m.irq
                );
            }
        }
        assert!(restored.is_empty(), "{restored:?}");
        for irq in &before {
            if let Some(b) = back.iter().find(|i| i.n == irq.n) {
                assert_eq!(b.affinity, irq.affinity, "IRQ {} given back", irq.n);
            }
        }
    }
}
