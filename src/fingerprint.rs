//! The hardware fingerprint that keys stored latency matrices: a matrix measured on one
//! machine configuration must not be trusted on another.
//!
//! ```text
//! proc/cpuinfo (vendor, family, model, stepping, microcode, hypervisor flag)
//! proc/sys/kernel/osrelease          sys/devices/system/cpu/{possible,present}
//! sys/class/dmi/id/bios_{vendor,version,date}          sys/hypervisor/type
//!        └──────────────► FingerprintInputs ──► canonical text ──► FNV-1a 64 ──► hex
//! ```
//!
//! Only values that identify the hardware and survive a reboot of the same machine go
//! in (no frequencies, no bogomips): a BIOS, microcode or kernel update, or CPUs added or
//! removed (possible/present) change it. The online set and the SMT state are read for
//! display but not hashed: a CPU taken offline or an SMT toggle at run time leaves the
//! hardware as it was, and the stored matrix keeps its cells (see `matrix::keep`). The hash is FNV-1a 64 written out here, so it is the same on every
//! build and Rust release (std's `DefaultHasher` promises neither).
//!
//! Must not touch: topology parsing (it reads the online list itself), matrix storage.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::{read_optional_file, FileError, SysRoot};

/// Bumped whenever the inputs or their encoding change, so old keys stop matching.
const VERSION: u32 = 2;

/// Why the fingerprint could not be computed: a file unreadable or malformed.
pub type FingerprintError = FileError;

/// A stable identifier of the hardware and its configuration, with what it was
/// computed from (for display and for explaining a mismatch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// 16 lowercase hex digits.
    pub hex: String,
    pub inputs: FingerprintInputs,
}

/// Everything the fingerprint hashes, and the run-time CPU state beside it (`online`,
/// `smt_*`: shown, not hashed). `None` means the machine does not expose it (e.g. no DMI
/// table in a microVM); absence is hashed too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FingerprintInputs {
    /// `vendor_id` (x86) or `CPU implementer` (Arm).
    pub cpu_vendor: Option<String>,
    /// `model name`.
    pub cpu_model_name: Option<String>,
    /// `cpu family` (x86) or `CPU architecture` (Arm).
    pub cpu_family: Option<String>,
    /// `model` (x86) or `CPU part` (Arm).
    pub cpu_model: Option<String>,
    /// `stepping` (x86) or `CPU variant`/`CPU revision` (Arm).
    pub cpu_stepping: Option<String>,
    /// Distinct `microcode` revisions across CPUs, comma-separated in order seen.
    pub microcode: Option<String>,
    /// `cpu/possible`: every CPU this boot could ever bring online (hashed).
    #[serde(default)]
    pub possible: CpuSet,
    /// `cpu/present`: the CPUs physically there (hashed).
    #[serde(default)]
    pub present: CpuSet,
    /// `cpu/online`: changes with hotplug (not hashed).
    pub online: CpuSet,
    /// `smt/control` (not hashed): on, off, forceoff, notsupported, notimplemented.
    pub smt_control: Option<String>,
    /// `smt/active`: whether sibling threads are running (not hashed).
    pub smt_active: Option<bool>,
    pub bios_vendor: Option<String>,
    pub bios_version: Option<String>,
    pub bios_date: Option<String>,
    /// `osrelease`, e.g. `6.18.44`.
    pub kernel_release: Option<String>,
    /// The `hypervisor` flag of `/proc/cpuinfo`: running as a guest.
    pub hypervisor_flag: bool,
    /// `hypervisor/type` (e.g. `xen`) where the kernel exposes it.
    pub hypervisor_type: Option<String>,
}

impl Fingerprint {
    /// Reads the inputs of the machine at `root` and hashes them.
    pub fn read(root: &SysRoot) -> Result<Fingerprint, FingerprintError> {
        Ok(Fingerprint::from_inputs(FingerprintInputs::read(root)?))
    }

    /// Hashes given inputs.
    pub fn from_inputs(inputs: FingerprintInputs) -> Fingerprint {
        let hex = format!("{:016x}", fnv1a64(inputs.canonical().as_bytes()));
        Fingerprint { hex, inputs }
    }

    /// Whether the machine still looks like the one this fingerprint was taken on.
    pub fn matches(&self, other: &Fingerprint) -> bool {
        self.hex == other.hex
    }

    /// The inputs that differ between two fingerprints, as `name: old -> new` lines,
    /// to tell an operator why a stored matrix no longer applies.
    pub fn differences(&self, newer: &Fingerprint) -> Vec<String> {
        let old = self.inputs.fields();
        let new = newer.inputs.fields();
        old.iter()
            .zip(new.iter())
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, b)| {
                format!(
                    "{}: {} -> {}",
                    a.0,
                    a.1.as_deref().unwrap_or("(absent)"),
                    b.1.as_deref().unwrap_or("(absent)")
                )
            })
            .collect()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex)
    }
}

impl FingerprintInputs {
    /// Reads every input from `root`; missing files become `None`.
    pub fn read(root: &SysRoot) -> Result<FingerprintInputs, FingerprintError> {
        let mut inputs = FingerprintInputs::default();

        let cpuinfo_path = root.proc_path("cpuinfo");
        if let Some(text) = read_optional_file(&cpuinfo_path)? {
            inputs.apply_cpuinfo(&text);
        }
        inputs.kernel_release = read_line(&root.proc_path("sys/kernel/osrelease"))?;

        inputs.possible = read_cpus(&root.sys_path("devices/system/cpu/possible"))?;
        inputs.present = read_cpus(&root.sys_path("devices/system/cpu/present"))?;
        inputs.online = read_cpus(&root.sys_path("devices/system/cpu/online"))?;
        inputs.smt_control = read_line(&root.sys_path("devices/system/cpu/smt/control"))?;
        let active_path = root.sys_path("devices/system/cpu/smt/active");
        inputs.smt_active = match read_line(&active_path)? {
            None => None,
            Some(v) if v == "0" => Some(false),
            Some(v) if v == "1" => Some(true),
            Some(v) => {
                return Err(FingerprintError::Parse {
                    path: active_path,
                    line: 1,
                    column: 1,
                    message: format!("{v:?}: expected 0 or 1"),
                })
            }
        };
        let dmi = |name: &str| read_line(&root.sys_path(format!("class/dmi/id/{name}")));
        inputs.bios_vendor = dmi("bios_vendor")?;
        inputs.bios_version = dmi("bios_version")?;
        inputs.bios_date = dmi("bios_date")?;
        inputs.hypervisor_type = read_line(&root.sys_path("hypervisor/type"))?;
        Ok(inputs)
    }

    /// Takes the CPU identity from the first processor block and microcode revisions
    /// from all blocks (a mismatch between CPUs is itself worth keying on).
    fn apply_cpuinfo(&mut self, text: &str) {
        let mut first_block = true;
        let mut microcodes: Vec<String> = Vec::new();
        let mut arm_stepping: (Option<String>, Option<String>) = (None, None);
        for line in text.lines() {
            if line.trim().is_empty() {
                if self.cpu_vendor.is_some() || self.cpu_model.is_some() {
                    first_block = false;
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim().to_string());
            match key {
                "microcode" if !microcodes.contains(&value) => microcodes.push(value),
                "microcode" => {}
                "flags" | "Features" if value.split_whitespace().any(|f| f == "hypervisor") => {
                    self.hypervisor_flag = true;
                }
                "flags" | "Features" => {}
                _ if !first_block => {}
                "vendor_id" | "CPU implementer" => self.cpu_vendor = Some(value),
                "model name" => self.cpu_model_name = Some(value),
                "cpu family" | "CPU architecture" => self.cpu_family = Some(value),
                "model" | "CPU part" => self.cpu_model = Some(value),
                "stepping" => self.cpu_stepping = Some(value),
                "CPU variant" => arm_stepping.0 = Some(value),
                "CPU revision" => arm_stepping.1 = Some(value),
                _ => {}
            }
        }
        if self.cpu_stepping.is_none() {
            self.cpu_stepping = match arm_stepping {
                (Some(v), Some(r)) => Some(format!("{v}r{r}")),
                (v, r) => v.or(r),
            };
        }
        if !microcodes.is_empty() {
            self.microcode = Some(microcodes.join(","));
        }
    }

    /// Every hashed input as (name, value) in a fixed order; the order is part of the
    /// hash.
    fn fields(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("cpu_vendor", self.cpu_vendor.clone()),
            ("cpu_model_name", self.cpu_model_name.clone()),
            ("cpu_family", self.cpu_family.clone()),
            ("cpu_model", self.cpu_model.clone()),
            ("cpu_stepping", self.cpu_stepping.clone()),
            ("microcode", self.microcode.clone()),
            ("possible", Some(self.possible.to_string())),
            ("present", Some(self.present.to_string())),
            ("bios_vendor", self.bios_vendor.clone()),
            ("bios_version", self.bios_version.clone()),
            ("bios_date", self.bios_date.clone()),
            ("kernel_release", self.kernel_release.clone()),
            ("hypervisor_flag", Some(self.hypervisor_flag.to_string())),
            ("hypervisor_type", self.hypervisor_type.clone()),
        ]
    }

    /// `name=value` lines (`name` alone when absent), newlines in values escaped.
    fn canonical(&self) -> String {
        let mut out = format!("pinnerd-fingerprint {VERSION}\n");
        for (name, value) in self.fields() {
            out.push_str(name);
            if let Some(value) = value {
                out.push('=');
                out.push_str(&value.replace('\\', "\\\\").replace('\n', "\\n"));
            }
            out.push('\n');
        }
        out
    }
}

/// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A CPU list file; a missing one is the empty set.
fn read_cpus(path: &Path) -> Result<CpuSet, FingerprintError> {
    let Some(text) = read_optional_file(path)? else {
        return Ok(CpuSet::new());
    };
    text.parse().map_err(|e: crate::cpuset::CpuListError| {
        let column = text.find(e.token.trim()).unwrap_or(0) + 1;
        FingerprintError::Parse {
            path: path.to_path_buf(),
            line: 1,
            column,
            message: e.to_string(),
        }
    })
}

/// A one-value file, trimmed; empty counts as absent.
fn read_line(path: &Path) -> Result<Option<String>, FingerprintError> {
    Ok(read_optional_file(path)?
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    fn sample() -> FingerprintInputs {
        let mut inputs = FingerprintInputs::default();
        inputs.apply_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 44\n\
             model name\t: Intel(R) Xeon(R) CPU E5620 @ 2.40GHz\nstepping\t: 2\n\
             microcode\t: 0x1f\ncpu MHz\t\t: 1600.000\nflags\t\t: fpu ht\n\n\
             processor\t: 1\nvendor_id\t: GenuineIntel\nmodel\t\t: 99\nmicrocode\t: 0x1f\n\
             cpu MHz\t\t: 2400.000\nflags\t\t: fpu ht\n\n",
        );
        inputs.possible = "0-15".parse().unwrap();
        inputs.present = "0-15".parse().unwrap();
        inputs.online = "0-15".parse().unwrap();
        inputs.smt_control = Some("on".into());
        inputs.smt_active = Some(true);
        inputs.bios_version = Some("2.1.0".into());
        inputs.kernel_release = Some("6.1.0-18-amd64".into());
        inputs
    }

    #[test]
    fn cpuinfo_identity_comes_from_the_first_block() {
        let inputs = sample();
        assert_eq!(inputs.cpu_vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(inputs.cpu_model.as_deref(), Some("44"));
        assert_eq!(inputs.cpu_stepping.as_deref(), Some("2"));
        assert_eq!(inputs.microcode.as_deref(), Some("0x1f"));
        assert!(!inputs.hypervisor_flag);
    }

    #[test]
    fn arm_cpuinfo() {
        let mut inputs = FingerprintInputs::default();
        inputs.apply_cpuinfo(
            "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\n\
             CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n\
             CPU part\t: 0xd0c\nCPU revision\t: 1\n\n",
        );
        assert_eq!(inputs.cpu_vendor.as_deref(), Some("0x41"));
        assert_eq!(inputs.cpu_family.as_deref(), Some("8"));
        assert_eq!(inputs.cpu_model.as_deref(), Some("0xd0c"));
        assert_eq!(inputs.cpu_stepping.as_deref(), Some("0x3r1"));
    }

    #[test]
    fn same_inputs_same_hash_and_each_input_matters() {
        let base = Fingerprint::from_inputs(sample());
        assert_eq!(base, Fingerprint::from_inputs(sample()));
        assert_eq!(base.hex.len(), 16);
        type Change = (&'static str, fn(&mut FingerprintInputs));
        let changes: Vec<Change> = vec![
            ("bios", |i| i.bios_version = Some("2.2.0".into())),
            ("possible", |i| i.possible = "0-31".parse().unwrap()),
            ("present", |i| i.present = "0-7".parse().unwrap()),
            ("microcode", |i| i.microcode = Some("0x20".into())),
            ("kernel", |i| i.kernel_release = None),
            ("hypervisor", |i| i.hypervisor_flag = true),
            ("hv type", |i| i.hypervisor_type = Some("xen".into())),
            ("empty vs absent", |i| i.bios_date = Some(String::new())),
        ];
        for (what, change) in changes {
            let mut inputs = sample();
            change(&mut inputs);
            let changed = Fingerprint::from_inputs(inputs);
            assert_ne!(
                base.hex, changed.hex,
                "{what} did not change the fingerprint"
            );
            assert!(!base.matches(&changed));
            assert_eq!(base.differences(&changed).len(), 1, "{what}");
        }
    }

    #[test]
    fn hotplug_and_smt_toggles_keep_the_fingerprint() {
        let base = Fingerprint::from_inputs(sample());
        let mut inputs = sample();
        inputs.online = "0-7".parse().unwrap();
        inputs.smt_control = Some("off".into());
        inputs.smt_active = Some(false);
        let toggled = Fingerprint::from_inputs(inputs);
        assert!(base.matches(&toggled), "{:?}", base.differences(&toggled));
    }

    #[test]
    fn the_hash_is_pinned() {
        // The key of stored matrices: changing the encoding must bump VERSION and
        // this value on purpose, never by accident.
        assert_eq!(Fingerprint::from_inputs(sample()).hex, "35280f6e0e312eeb");
    }
}
