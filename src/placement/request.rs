//! What a placement is asked and what it answers: the `policy` and `smt` words, the
//! [`Request`] and the [`Shape`] keys that narrow it (applied by `shape`), the
//! [`Placement`] with its [`Explanation`] and [`Cost`], and the errors.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::domains::Trust;
use crate::topology::CoreType;

/// How to choose CPUs for a request of `count` CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Minimise the worst latency among the chosen CPUs: threads that talk.
    #[default]
    Compact,
    /// One CPU per domain at the coarsest level with enough domains: independent workers.
    Spread,
}

/// What to do with SMT siblings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SmtPolicy {
    /// Siblings are ordinary candidates.
    #[default]
    Allow,
    /// Never choose two siblings of one core.
    Avoid,
    /// Fill whole cores, siblings first.
    PreferSiblings,
}

/// An unknown policy or SMT word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}: expected one of {expected}")]
pub struct UnknownWord {
    pub what: &'static str,
    pub given: String,
    pub expected: &'static str,
}

/// `as_str`, `FromStr` (an [`UnknownWord`] naming `what` and every word) and `Display`
/// for an enum whose variants are words of a rule file or a command line.
macro_rules! words {
    ($ty:ident, $what:literal, { $first:ident => $word:literal $(, $variant:ident => $more:literal)* $(,)? }) => {
        impl $ty {
            pub const fn as_str(self) -> &'static str {
                match self {
                    $ty::$first => $word,
                    $($ty::$variant => $more,)*
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::placement::UnknownWord;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $word => Ok($ty::$first),
                    $($more => Ok($ty::$variant),)*
                    _ => Err($crate::placement::UnknownWord {
                        what: $what,
                        given: s.to_string(),
                        expected: concat!($word $(, ", ", $more)*),
                    }),
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words!(Policy, "policy", { Compact => "compact", Spread => "spread" });
words!(SmtPolicy, "smt policy", {
    Allow => "allow",
    Avoid => "avoid",
    PreferSiblings => "prefer-siblings",
});

/// Which last-level-cache group to favour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefer {
    /// The most L3 per core (the V-cache CCD of an X3D part).
    Cache,
    /// The highest preferred-core ranking, else the highest maximum frequency.
    Frequency,
}

words!(Prefer, "prefer", { Cache => "cache", Frequency => "frequency" });

/// Parses the `core-type` word: `performance` or `efficiency`.
pub fn core_type_word(s: &str) -> Result<CoreType, UnknownWord> {
    match s {
        "performance" => Ok(CoreType::Performance),
        "efficiency" => Ok(CoreType::Efficiency),
        _ => Err(UnknownWord {
            what: "core type",
            given: s.to_string(),
            expected: "performance, efficiency",
        }),
    }
}

impl FromStr for CoreType {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        core_type_word(s)
    }
}

/// The `core-type` word of a kind.
pub const fn kind_word(kind: CoreType) -> &'static str {
    match kind {
        CoreType::Performance => "performance",
        CoreType::Efficiency => "efficiency",
    }
}

/// What, besides latency, a request asks of its CPUs. Empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Only CPUs of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_type: Option<CoreType>,
    /// Favour this last-level-cache group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer: Option<Prefer>,
    /// Near this device: an interface, a PCI address, a block device or a /dev path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near: Option<String>,
}

impl Shape {
    /// No key given: latency alone decides.
    pub fn is_empty(&self) -> bool {
        self.core_type.is_none() && self.prefer.is_none() && self.near.is_none()
    }

    /// The keys in words, e.g. `core-type performance, near ens1f0`.
    pub fn describe(&self) -> String {
        let mut out = Vec::new();
        if let Some(k) = self.core_type {
            out.push(format!("core-type {}", kind_word(k)));
        }
        if let Some(p) = self.prefer {
            out.push(format!("prefer {p}"));
        }
        if let Some(n) = &self.near {
            out.push(format!("near {n}"));
        }
        out.join(", ")
    }
}

/// What to place.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// CPUs wanted (ignored when `cpus` is given).
    pub count: usize,
    pub policy: Policy,
    pub smt: SmtPolicy,
    /// CPUs never to choose (housekeeping, isolated, another rule's).
    pub exclude: CpuSet,
    /// Take whole free cores only, and reserve the idle siblings of the chosen CPUs.
    pub exclusive: bool,
    /// An explicit list: validated and passed through.
    pub cpus: Option<CpuSet>,
}

/// Pairwise cost of a CPU set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Worst one-way latency between two chosen CPUs (ns); `None` without a trusted
    /// matrix, or for a single CPU.
    pub worst_ns: Option<f64>,
    /// Mean over all pairs (ns).
    pub mean_ns: Option<f64>,
    /// The coarsest level any two chosen CPUs only share (e.g. `llc`, `machine`).
    pub worst_level: String,
}

/// Why these CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub policy: Policy,
    pub smt: SmtPolicy,
    /// Where the costs come from.
    pub trust: Trust,
    /// The level the choice was made at.
    pub level: String,
    /// The level's typical latency.
    pub level_latency_ns: Option<f64>,
    /// The group(s) of that level the CPUs came from.
    pub domains: Vec<CpuSet>,
    /// The cost of the chosen set.
    pub cost: Cost,
    /// The autopilot choice, the K lowest-numbered CPUs, and its cost.
    pub autopilot: Option<(CpuSet, Cost)>,
    /// Further reasons, in words.
    pub notes: Vec<String>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The CPUs to pin to.
    pub cpus: CpuSet,
    /// `cpus` plus idle siblings held back for an exclusive request.
    pub reserved: CpuSet,
    pub explanation: Explanation,
}

/// A request that cannot be satisfied; each says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("the explicit CPU list is empty")]
    EmptyList,
    #[error("asked for {wanted} CPUs but only {usable} are usable ({why})")]
    NotEnough {
        wanted: usize,
        usable: usize,
        why: String,
    },
    #[error("CPUs {cpus} are not online CPUs of this machine ({online})")]
    UnknownCpus { cpus: CpuSet, online: CpuSet },
    #[error("CPUs {cpus} are excluded or already taken")]
    Unavailable { cpus: CpuSet },
    #[error("CPUs {a} and {b} are SMT siblings but the request says smt = avoid")]
    SiblingsGiven { a: u32, b: u32 },
    #[error("CPU {cpu} shares its core with CPUs that are not free ({busy}), but the request is exclusive")]
    CoreNotFree { cpu: u32, busy: CpuSet },
    /// `core-type`, `prefer` or `near` (see `shape`) refused the request.
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

/// A request shaped by `core-type`, `prefer` or `near` (see `shape`) that cannot be met;
/// each says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The kind asked for cannot hold the request; it is not widened.
    #[error("asked for {wanted} {kind} CPUs but only {usable} are usable ({why}); core-type is never widened")]
    KindTooSmall {
        kind: &'static str,
        wanted: usize,
        usable: usize,
        why: String,
    },
    /// The device could not be resolved.
    #[error("near {device:?}: {why}")]
    Device { device: String, why: String },
    /// Shaping keys reached a chooser without the machine's facts.
    #[error("{keys}: this planner has no topology facts to honour them")]
    NoFacts { keys: String },
}

/// Longest device name accepted.
const DEVICE_NAME_MAX: usize = 255;

/// Checks the form of a device name (`near = "…"`) without looking it up (see
/// `devices` for that): an interface, PCI address
/// or block device name (no `/`), or an absolute path under `/dev/`.
pub fn check_device_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty device name".into());
    }
    if name.len() > DEVICE_NAME_MAX {
        return Err(format!("longer than {DEVICE_NAME_MAX} bytes"));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("contains whitespace or control characters".into());
    }
    if let Some(rest) = name.strip_prefix("/dev/") {
        let clean = std::path::Path::new(rest)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if rest.is_empty() || !clean {
            return Err("a /dev path must name a device below /dev without . or ..".into());
        }
        return Ok(());
    }
    if name.starts_with('/') {
        return Err("a path must start with /dev/".into());
    }
    if name.contains('/') || name == "." || name == ".." {
        return Err(
            "expected an interface name, a PCI address (0000:81:00.0), a block device name or a /dev path"
                .into(),
        );
    }
    Ok(())
}
