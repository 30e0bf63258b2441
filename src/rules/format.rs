//! The rule file format as written: serde types with `deny_unknown_fields`, every value
//! that can be wrong after parsing kept `Spanned` so its error points at it.
//!
//! Serialising a parsed file and parsing the result gives the same value (spans aside):
//! property-tested in `tests/it/rules.rs`.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::{self, IntoDeserializer};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use toml::Spanned;

use crate::affinity::sched::SchedPolicy;
use crate::cpuset::CpuSet;
use crate::placement::{Policy, Prefer, SmtPolicy};
use crate::topology::CoreType;

/// One rule file: any number of `[[rule]]` tables and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    #[serde(
        default,
        rename = "rule",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "vec_table"
    )]
    pub rules: Vec<Spanned<RuleSpec>>,
}

/// One `[[rule]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Unique across every loaded file.
    pub name: Spanned<String>,
    /// Higher wins when several rules match one process; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Spanned<i32>>,
    /// Every key given must match.
    #[serde(
        default,
        rename = "match",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_table"
    )]
    pub matches: Option<Spanned<Box<MatchSpec>>>,
    /// Where the whole process goes (every thread not placed by `threads`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_table"
    )]
    pub place: Option<Spanned<Box<PlaceSpec>>>,
    /// Placement by thread name; the first entry whose `comm` matches a thread wins.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "vec_table"
    )]
    pub threads: Vec<Spanned<ThreadSpec>>,
}

/// `[rule.match]`: every key given must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    /// Glob(s) on `/proc/PID/comm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<Spanned<OneOrMany<String>>>,
    /// Glob(s) on the executable path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<Spanned<OneOrMany<String>>>,
    /// Regex on the command line, arguments joined by single spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<Spanned<String>>,
    /// User name(s) or uid(s) owning the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<OneOrMany<UserSpec>>>,
    /// Glob(s) on the cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Spanned<OneOrMany<String>>>,
    /// Glob(s) on the systemd unit derived from the cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Spanned<OneOrMany<String>>>,
    /// Glob(s) on the container's name (CRI metadata name). Any of the container keys
    /// makes the rule a container rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Spanned<OneOrMany<String>>>,
    /// Glob(s) on the container's pod (sandbox) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Spanned<OneOrMany<String>>>,
    /// Glob(s) on the pod's namespace.
    #[serde(
        default,
        rename = "pod-namespace",
        skip_serializing_if = "Option::is_none"
    )]
    pub pod_namespace: Option<Spanned<OneOrMany<String>>>,
    /// Label = glob: every label named must be on the pod and match.
    #[serde(
        default,
        rename = "pod-labels",
        skip_serializing_if = "Option::is_none"
    )]
    pub pod_labels: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

impl MatchSpec {
    /// Whether any container key (`container`, `pod`, `pod-namespace`, `pod-labels`) is
    /// given.
    pub fn names_container(&self) -> bool {
        self.container.is_some()
            || self.pod.is_some()
            || self.pod_namespace.is_some()
            || self.pod_labels.is_some()
    }
}

/// Declares a table that takes the placement keys `[rule.place]` and `[[rule.threads]]`
/// share (`cpus`, `count`, `within`, `policy`, `smt`, `exclusive`, `core-type`, `prefer`,
/// `near`, `isolate`, `sched-policy`, `sched-priority`, `nice`) between its own keys
/// before and after the `..`, and its `keys()`: a view of those shared keys. One list, so that the two tables cannot drift apart; not
/// `#[serde(flatten)]`, which would drop `deny_unknown_fields` and the spans.
macro_rules! placement_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$head_meta:meta])* pub $head:ident: $head_type:ty, )*
            ..
            $( $(#[$tail_meta:meta])* pub $tail:ident: $tail_type:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$head_meta])* pub $head: $head_type, )*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub cpus: Option<Spanned<CpuSet>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub count: Option<Spanned<u32>>,
            /// With `count`: choose only among these CPUs.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub within: Option<Spanned<CpuSet>>,
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "opt_word"
            )]
            pub policy: Option<Spanned<Policy>>,
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "opt_word"
            )]
            pub smt: Option<Spanned<SmtPolicy>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub exclusive: Option<Spanned<bool>>,
            /// With `count`: only CPUs of this kind (`performance` or `efficiency`).
            #[serde(
                rename = "core-type",
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "opt_word"
            )]
            pub core_type: Option<Spanned<CoreType>>,
            /// With `count`: favour the cache group with the most L3 per core, or the highest
            /// preferred-core ranking.
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "opt_word"
            )]
            pub prefer: Option<Spanned<Prefer>>,
            /// With `count`: near this device (interface, PCI address, block device, /dev path).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub near: Option<Spanned<String>>,
            /// With `exclusive`: while held, the CPUs are a cgroup v2 isolated cpuset
            /// partition: no task outside the rule's processes runs there (see `hold`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub isolate: Option<Spanned<bool>>,
            /// The scheduling policy of the threads it places: `other`, `batch`, `idle`,
            /// `fifo` or `rr` (see `affinity::sched`).
            #[serde(
                rename = "sched-policy",
                default,
                skip_serializing_if = "Option::is_none",
                deserialize_with = "opt_word"
            )]
            pub sched_policy: Option<Spanned<SchedPolicy>>,
            /// With `sched-policy = "fifo"` or `"rr"`: the real-time priority, 1 to 99.
            #[serde(
                rename = "sched-priority",
                default,
                skip_serializing_if = "Option::is_none"
            )]
            pub sched_priority: Option<Spanned<i64>>,
            /// With no policy, `other` or `batch`: the nice value, -20 to 19.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub nice: Option<Spanned<i64>>,
            $( $(#[$tail_meta])* pub $tail: $tail_type, )*
        }

        impl $name {
            /// The placement keys this table shares with the other.
            pub fn keys(&self) -> PlaceKeys<'_> {
                PlaceKeys {
                    cpus: &self.cpus,
                    count: &self.count,
                    within: &self.within,
                    policy: &self.policy,
                    smt: &self.smt,
                    exclusive: &self.exclusive,
                    core_type: &self.core_type,
                    prefer: &self.prefer,
                    near: &self.near,
                    isolate: &self.isolate,
                    sched_policy: &self.sched_policy,
                    sched_priority: &self.sched_priority,
                    nice: &self.nice,
                }
            }
        }
    };
}

/// The placement keys of a `[rule.place]` or `[[rule.threads]]` table, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct PlaceKeys<'a> {
    pub cpus: &'a Option<Spanned<CpuSet>>,
    pub count: &'a Option<Spanned<u32>>,
    pub within: &'a Option<Spanned<CpuSet>>,
    pub policy: &'a Option<Spanned<Policy>>,
    pub smt: &'a Option<Spanned<SmtPolicy>>,
    pub exclusive: &'a Option<Spanned<bool>>,
    pub core_type: &'a Option<Spanned<CoreType>>,
    pub prefer: &'a Option<Spanned<Prefer>>,
    pub near: &'a Option<Spanned<String>>,
    pub isolate: &'a Option<Spanned<bool>>,
    pub sched_policy: &'a Option<Spanned<SchedPolicy>>,
    pub sched_priority: &'a Option<Spanned<i64>>,
    pub nice: &'a Option<Spanned<i64>>,
}

placement_table! {
    /// `[rule.place]`: explicit `cpus`, or `count` CPUs chosen by `policy` and `smt`,
    /// shaped by `core-type`, `prefer` and `near`.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct PlaceSpec {
        ..
        /// The whole rule is latency-critical: measurements never spin on the CPUs its
        /// managed threads hold (see `measure::around`). Default `false`.
        #[serde(
            default,
            rename = "latency-critical",
            skip_serializing_if = "Option::is_none"
        )]
        pub latency_critical: Option<Spanned<bool>>,
        /// `"away"`: while the rule holds its CPUs, every movable IRQ is moved off them (see
        /// `irq`); `"leave"` (default): interrupts are not touched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub irqs: Option<Spanned<Irqs>>,
        /// `"follow"`: once the process's threads run inside fewer NUMA nodes than the
        /// machine has, its memory outside them is moved in (see `memory::follow`);
        /// `"leave"` (default): memory is not moved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub memory: Option<Spanned<Memory>>,
        /// `true`: the systemd unit the rule's process runs in is confined to the rule's
        /// CPUs (and, with `memory = "follow"`, their nodes) through its `AllowedCPUs=`
        /// and `AllowedMemoryNodes=`, so what it starts later is born there (see `hold`).
        /// Default `false`.
        #[serde(
            default,
            rename = "unit-cpuset",
            skip_serializing_if = "Option::is_none"
        )]
        pub unit_cpuset: Option<Spanned<bool>>,
        /// With `exclusive`: the longest idle exit latency, in µs, allowed on the CPUs
        /// the rule holds while it holds them (0: no idle state, the CPUs poll), through
        /// their resume-latency limit (see `knobs::idle`).
        #[serde(
            default,
            rename = "idle-limit-us",
            skip_serializing_if = "Option::is_none"
        )]
        /// Boxed: absent from almost every rule, it costs a pointer, not a value (a
        /// rule file of thousands of rules stays within its memory bound).
        pub idle_limit_us: Option<Box<Spanned<i64>>>,
    }
}

/// `memory` in `[rule.place]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    #[default]
    Leave,
    Follow,
}

/// `irqs` in `[rule.place]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Irqs {
    #[default]
    Leave,
    Away,
}

placement_table! {
    /// `[[rule.threads]]`: a placement for the threads whose name matches `comm`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ThreadSpec {
        /// Glob(s) on `/proc/PID/task/TID/comm`.
        pub comm: Spanned<OneOrMany<String>>,
        ..
        /// With `count`: `false` (default) gives each matching thread its own `count` CPUs;
        /// `true` puts all matching threads together on one set of `count` CPUs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub shared: Option<Spanned<bool>>,
    }
}

/// A user given by name (resolved to a uid at load time) or by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UserSpec {
    Name(String),
    Uid(u32),
}

impl fmt::Display for UserSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserSpec::Name(n) => write!(f, "{n:?}"),
            UserSpec::Uid(u) => write!(f, "uid {u}"),
        }
    }
}

impl Serialize for UserSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            UserSpec::Name(n) => s.serialize_str(n),
            UserSpec::Uid(u) => s.serialize_u32(*u),
        }
    }
}

impl<'de> Deserialize<'de> for UserSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = UserSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a user name or a uid")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<UserSpec, E> {
                if v.is_empty() {
                    return Err(E::custom("empty user name"));
                }
                Ok(UserSpec::Name(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<UserSpec, E> {
                u32::try_from(v)
                    .ok()
                    .filter(|&u| u != u32::MAX)
                    .map(UserSpec::Uid)
                    .ok_or_else(|| E::custom(format!("uid {v} is out of range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<UserSpec, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
        }
        d.deserialize_any(V)
    }
}

/// A value that may be written once or as an array: `comm = "a*"` or
/// `comm = ["a*", "b*"]` (any of them matches). Serialises back in the form it was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn as_slice(&self) -> &[T] {
        match self {
            OneOrMany::One(v) => std::slice::from_ref(v),
            OneOrMany::Many(v) => v,
        }
    }
}

impl<T: Serialize> Serialize for OneOrMany<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OneOrMany::One(v) => v.serialize(s),
            OneOrMany::Many(v) => v.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or an array of values")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                if out.is_empty() {
                    return Err(de::Error::custom("empty array: give at least one value"));
                }
                Ok(OneOrMany::Many(out))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A value that must be a TOML table. Derived struct deserialisers also accept an
/// array (fields by position), which would let `place = ["1", 2]` through; this refuses.
struct Table<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = Table<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Table)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

fn unspan_table<T>(s: Spanned<Table<T>>) -> Spanned<T> {
    let span = s.span();
    Spanned::new(span, s.into_inner().0)
}

fn opt_table<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Spanned<T>>, D::Error> {
    Spanned::<Table<T>>::deserialize(d).map(|s| Some(unspan_table(s)))
}

fn vec_table<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<Spanned<T>>, D::Error> {
    Vec::<Spanned<Table<T>>>::deserialize(d).map(|v| v.into_iter().map(unspan_table).collect())
}

/// A word parsed with `FromStr`, so the message lists the words that are accepted.
struct Word<T>(T);

impl<'de, T: FromStr> Deserialize<'de> for Word<T>
where
    T::Err: fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Word).map_err(de::Error::custom)
    }
}

fn opt_word<'de, D: Deserializer<'de>, T: FromStr>(d: D) -> Result<Option<Spanned<T>>, D::Error>
where
    T::Err: fmt::Display,
{
    let s = Spanned::<Word<T>>::deserialize(d)?;
    let span = s.span();
    Ok(Some(Spanned::new(span, s.into_inner().0)))
}

/// Parses rule-file text. Only syntax, types and unknown keys are checked here;
/// `compile` checks the meaning.
pub fn parse(text: &str) -> Result<RuleFile, toml::de::Error> {
    toml::from_str(text)
}

/// Prints a rule file back as TOML.
pub fn to_toml(file: &RuleFile) -> Result<String, toml::ser::Error> {
    toml::to_string(file)
}
