//! Where a device sits: a name from `near = "…"` resolved through the sysfs root to the
//! device directory that reports its NUMA node, and that node and local CPUs.
//!
//! ```text
//! ens1f0        ─► class/net/ens1f0/device ─┐
//! 0000:81:00.0  ─► bus/pci/devices/ADDR ────┤
//! nvme0n1       ─► class/block/nvme0n1 ─────┼─► up the devices/ tree to the first
//! /dev/block/259:0, /dev/char/241:0        │   directory with numa_node ─► Locality
//!               ─► dev/{block,char}/MAJ:MIN ┤   (numa_node -1 or none: no node)
//! /dev/nvme0n1  ─► MAJ:MIN ────────────────┘   (only on the running machine's /sys;
//!                  resolved beneath /dev, no link out of it followed)
//! ```
//!
//! Under a sysfs tree other than the running machine's (a fixture or a captured machine), a `/dev/X`
//! path cannot be stat'ed against that tree: it is resolved by its name `X` among the
//! block devices (`class/block/X`); `/dev/block/MAJ:MIN` and `/dev/char/MAJ:MIN` (the
//! links udev makes) work everywhere.
//!
//! Must not touch: placement (see `shape`), the real `/sys` path (see `sysroot`).

use std::path::{Path, PathBuf};

pub use crate::placement::check_device_name as check_name;

use crate::shape::{Devices, Locality};
use crate::sysroot::{self, SysRoot};
use crate::topology::parse_list;

/// Resolves every name; each result says where the device sits or why it could not.
pub fn resolve_all<'a>(root: &SysRoot, names: impl IntoIterator<Item = &'a str>) -> Devices {
    names
        .into_iter()
        .map(|n| (n.to_string(), resolve(root, n)))
        .collect()
}

/// Resolves one device name under `root`.
pub fn resolve(root: &SysRoot, name: &str) -> Result<Locality, String> {
    check_name(name)?;
    let start = entry(root, name)?;
    let sys = std::fs::canonicalize(&root.sys)
        .map_err(|e| format!("cannot resolve the sysfs root {}: {e}", root.sys.display()))?;
    let dir = std::fs::canonicalize(&start)
        .map_err(|e| format!("cannot resolve {}: {e}", start.display()))?;
    if !dir.starts_with(&sys) {
        return Err(format!(
            "{} leads outside the sysfs root to {}",
            start.display(),
            dir.display()
        ));
    }
    let mut at: &Path = &dir;
    loop {
        let numa = at.join("numa_node");
        if let Some(text) = read(&numa)? {
            let node: i64 = text
                .trim()
                .parse()
                .map_err(|_| format!("{}: not a node number: {:?}", numa.display(), text.trim()))?;
            let cpulist = at.join("local_cpulist");
            let local_cpus = match read(&cpulist)? {
                Some(text) => Some(parse_list(&cpulist, &text).map_err(|e| e.to_string())?),
                None => None,
            };
            return Ok(Locality {
                device: name.to_string(),
                path: relative(&sys, at),
                node: u32::try_from(node).ok(),
                local_cpus,
            });
        }
        match at.parent() {
            Some(up) if up.starts_with(&sys) && up != sys => at = up,
            // A virtual device (lo, a loop device) belongs to no node.
            _ => {
                return Ok(Locality {
                    device: name.to_string(),
                    path: relative(&sys, &dir),
                    node: None,
                    local_cpus: None,
                })
            }
        }
    }
}

/// The sysfs entry a name starts from.
fn entry(root: &SysRoot, name: &str) -> Result<PathBuf, String> {
    let exists = |p: &PathBuf| p.symlink_metadata().is_ok();
    if let Some(rest) = name.strip_prefix("/dev/") {
        let live = root.is_live_sys();
        for kind in ["block", "char"] {
            if let Some(majmin) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix('/')) {
                let p = root.sys_path(format!("dev/{kind}/{majmin}"));
                return listed(p, |p| {
                    if live {
                        // The running machine's /dev paths all answer alike.
                        NOT_A_DEVICE.to_string()
                    } else {
                        format!("no {kind} device {majmin} ({} missing)", p.display())
                    }
                });
            }
        }
        if live {
            return dev_node(root, name);
        }
        let base = Path::new(rest)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        let p = root.sys_path(format!("class/block/{base}"));
        return listed(p, |_| {
            format!(
                "under the sysfs tree {} a /dev path is resolved by its name in class/block (or give /dev/block/MAJ:MIN or /dev/char/MAJ:MIN), and there is no block device {base:?}",
                root.sys.display()
            )
        });
    }
    if is_pci_address(name) {
        let p = root.sys_path(format!("bus/pci/devices/{name}"));
        return listed(p, |p| {
            format!("no PCI device {name} ({} missing)", p.display())
        });
    }
    let net = root.sys_path(format!("class/net/{name}"));
    if exists(&net) {
        let dev = net.join("device");
        return Ok(if exists(&dev) { dev } else { net });
    }
    let block = root.sys_path(format!("class/block/{name}"));
    if exists(&block) {
        return Ok(block);
    }
    Err(format!(
        "unknown device: no network interface, block device or PCI device of that name under {}",
        root.sys.display()
    ))
}

/// What every `/dev` path that is not a usable device node answers, whatever the reason
/// (missing, not a device, a link leading out of `/dev`, a device sysfs does not list):
/// the daemon resolves paths for any caller as root, so the answer must not tell whether
/// some other path exists.
pub const NOT_A_DEVICE: &str = "not a device node below /dev that sysfs lists (a link is followed only where it stays below /dev)";

/// A `/dev` node of the running machine, by its device number. The path is resolved
/// beneath `/dev` only (`openat2` with `RESOLVE_BENEATH`): a link leading out of it, or
/// an absolute link, is refused by the kernel, so a link another user plants (in
/// `/dev/shm`, say) never makes the daemon look at a path the caller could not.
fn dev_node(root: &SysRoot, name: &str) -> Result<PathBuf, String> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    use nix::sys::stat::{Mode, SFlag};
    let not_a_device = || NOT_A_DEVICE.to_string();
    let rest = name.strip_prefix("/dev/").ok_or_else(not_a_device)?;
    let dev = nix::fcntl::open(
        "/dev",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open /dev: {}", std::io::Error::from(e)))?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let node = nix::fcntl::openat2(&dev, rest, how).map_err(|_| not_a_device())?;
    let meta = nix::sys::stat::fstat(&node).map_err(|_| not_a_device())?;
    let kind = match SFlag::from_bits_truncate(meta.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFBLK => "block",
        SFlag::S_IFCHR => "char",
        _ => return Err(not_a_device()),
    };
    let (major, minor) = (
        nix::sys::stat::major(meta.st_rdev),
        nix::sys::stat::minor(meta.st_rdev),
    );
    let p = root.sys_path(format!("dev/{kind}/{major}:{minor}"));
    listed(p, |_| not_a_device())
}

/// `p` when sysfs lists it (a link counts, whatever it points to), else the error
/// `missing` words.
fn listed(p: PathBuf, missing: impl FnOnce(&Path) -> String) -> Result<PathBuf, String> {
    if p.symlink_metadata().is_ok() {
        Ok(p)
    } else {
        Err(missing(&p))
    }
}

/// `DDDD:BB:DD.F` in hexadecimal.
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b':',
            10 => c == b'.',
            11 => (b'0'..=b'7').contains(&c),
            _ => c.is_ascii_hexdigit(),
        })
}

fn read(path: &Path) -> Result<Option<String>, String> {
    sysroot::read_optional(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn relative(sys: &Path, at: &Path) -> String {
    at.strip_prefix(sys)
        .unwrap_or(at)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> SysRoot {
        SysRoot::machine(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/xeon-2s-nic-nvme"),
        )
    }

    #[test]
    fn names_are_checked_before_any_lookup() {
        for ok in [
            "ens1f0",
            "0000:81:00.0",
            "nvme0n1",
            "/dev/nvme0n1",
            "/dev/block/259:0",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("a/b", "expected an interface"),
            ("..", "expected an interface"),
            ("/etc/passwd", "must start with /dev/"),
            ("/dev/../etc", "without . or .."),
            ("/dev/", "without . or .."),
            ("en s0", "whitespace"),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(check_name(&"x".repeat(300)).unwrap_err().contains("longer"));
        assert!(is_pci_address("0000:81:00.0"));
        assert!(!is_pci_address("0000:81:00.8"));
        assert!(!is_pci_address("ens1f0"));
    }

    #[test]
    fn every_form_reaches_the_device_node() {
        let root = fixture();
        let node1 = Some("8-15,24-31".parse().unwrap());
        for name in [
            "ens1f0",
            "0000:81:00.0",
            "nvme0n1",
            "nvme0n1p1",
            "/dev/nvme0n1",
            "/dev/block/259:1",
            "/dev/char/241:0",
        ] {
            let loc = resolve(&root, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(loc.device, name);
            assert_eq!(loc.node, Some(1), "{name}");
            assert_eq!(loc.local_cpus, node1, "{name}");
            assert!(loc.path.starts_with("devices/pci0000:"), "{}", loc.path);
        }
        let nic = resolve(&root, "ens1f0").unwrap();
        assert_eq!(nic.path, "devices/pci0000:80/0000:80:01.0/0000:81:00.0");
        let onboard = resolve(&root, "eno1").unwrap();
        assert_eq!(onboard.node, None, "numa_node -1 is no node");
    }

    #[test]
    fn unknown_devices_are_errors_naming_what_was_tried() {
        let root = fixture();
        let e = resolve(&root, "eth9").unwrap_err();
        assert!(e.contains("unknown device"), "{e}");
        let e = resolve(&root, "0000:99:00.0").unwrap_err();
        assert!(e.contains("no PCI device 0000:99:00.0"), "{e}");
        let e = resolve(&root, "/dev/sda").unwrap_err();
        assert!(e.contains("resolved by its name in class/block"), "{e}");
        let e = resolve(&root, "/dev/block/8:0").unwrap_err();
        assert!(e.contains("no block device 8:0"), "{e}");
        let all = resolve_all(&root, ["ens1f0", "eth9"]);
        assert!(all["ens1f0"].is_ok() && all["eth9"].is_err());
    }

    #[test]
    fn the_running_machines_devices_resolve_or_say_why() {
        // /dev/null is a char device every machine has; sysfs lists it under
        // dev/char/1:3 as a virtual device with no node.
        let loc = resolve(&SysRoot::default(), "/dev/null").unwrap();
        assert_eq!(loc.node, None);
        assert!(
            loc.path.starts_with("devices/virtual/mem/null"),
            "{}",
            loc.path
        );
        // Whatever keeps a /dev path from being a usable device, the answer is the
        // same: missing, not a device, a link out of /dev.
        for path in [
            "/dev/pinnerd-no-such-node",
            "/dev/shm",
            "/dev/fd/0",
            "/dev/stdin",
            "/dev/block/4095:1048575",
            "/dev/char/4095:1048575",
        ] {
            let e = resolve(&SysRoot::default(), path).unwrap_err();
            assert_eq!(e, NOT_A_DEVICE, "{path}");
        }
    }
}
