//! The daemon settings file (default `/etc/pinnerd/pinnerd.toml`): strict TOML, every
//! key optional, every default written down here, in `config/pinnerd.toml` and in
//! `pinnerd.toml(5)`.
//!
//! Owns: the settings format and its validation. Must not touch: what the daemon does
//! with them. The file goes through the same safety checks as rule files
//! ([`crate::rules::read_checked`]) and its errors read `FILE:LINE:COL: message`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::cpuset::CpuSet;
use crate::rules::{LoadPolicy, Location, RuleError};

/// Where the daemon looks for its settings when not told otherwise.
pub const DEFAULT_SETTINGS_PATH: &str = "/etc/pinnerd/pinnerd.toml";

/// Everything the daemon can be told. `Settings::default()` is what an absent file means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    /// Rule directories, read in this order. Default `["/etc/pinnerd.d"]`.
    /// `pinnerd daemon --rules DIR` replaces the list.
    pub rule_dirs: Vec<PathBuf>,
    pub measure: MeasureSettings,
    pub watch: WatchSettings,
    pub placement: PlacementSettings,
    pub limits: LimitSettings,
    pub metrics: MetricsSettings,
    pub sched_ext: SchedExtSettings,
    pub memory: MemorySettings,
    pub nri: NriSettings,
}

/// `[nri]`: registering as an NRI plugin with containerd or CRI-O (see `nri`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct NriSettings {
    /// `auto` (default): register when the socket exists, re-register when it comes
    /// back, stay a plain pinnerd while it does not; `on`: the same, a missing socket
    /// warned about; `off`: never. Auto by default: a machine without a container
    /// runtime costs one `stat` every 2 s, and one with it gets containers placed at
    /// creation without a second setting to find.
    pub enable: crate::nri::Enable,
    pub socket: PathBuf,
    /// Two digits: the runtime calls plugins in ascending index order.
    pub index: NriIndex,
    /// The name the daemon registers as (`[A-Za-z0-9-_.+]`).
    pub name: NriName,
}

impl Default for NriSettings {
    fn default() -> Self {
        NriSettings {
            enable: crate::nri::Enable::Auto,
            socket: PathBuf::from(crate::nri::DEFAULT_SOCKET),
            index: NriIndex("10".into()),
            name: NriName("pinnerd".into()),
        }
    }
}

impl NriSettings {
    /// What the plugin is run with.
    pub fn config(&self) -> crate::nri::NriConfig {
        crate::nri::NriConfig {
            enable: self.enable,
            socket: self.socket.clone(),
            registration: crate::nri::Registration {
                name: self.name.0.clone(),
                index: self.index.0.clone(),
            },
        }
    }
}

/// `[nri] index`: two digits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NriIndex(pub String);

impl TryFrom<String> for NriIndex {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        crate::nri::check_index(&s).map(|()| NriIndex(s))
    }
}

impl From<NriIndex> for String {
    fn from(i: NriIndex) -> String {
        i.0
    }
}

/// `[nri] name`: NRI's plugin name characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NriName(pub String);

impl TryFrom<String> for NriName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        crate::nri::check_name(&s).map(|()| NriName(s))
    }
}

impl From<NriName> for String {
    fn from(n: NriName) -> String {
        n.0
    }
}

/// `[memory]`: where a process's memory weighs in placement, and moving it
/// (`memory = "follow"`, see `memory::follow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct MemorySettings {
    /// A `count` rule placing a running process prefers the node holding most of its
    /// memory when CPUs there cost at most this much more (mean pair latency) than the
    /// best CPUs elsewhere. Default 0.10 (10%): measured pair costs differ by a few
    /// percent from run to run, while every cache miss to a remote node's memory costs
    /// some 50-100% more than to the local one; 0.0 lets memory only break ties.
    pub tolerance: Fraction,
    /// Memory smaller than this (MiB, all nodes together) is ignored when planning:
    /// not worth a worse CPU choice. Default 64; 0 to 1048576.
    #[serde(deserialize_with = "u32_within::<_, 0, 1_048_576>")]
    pub min_size_mib: u32,
    /// `memory = "follow"`: a process's pages are moved again no sooner than this after
    /// its last move (numad waits minutes too: moving costs the process its memory
    /// bandwidth while it runs). Default `"5m"`; `"1s"` to `"1d"`.
    #[serde(deserialize_with = "duration_within::<_, SECOND, DAY>")]
    pub follow_interval: HumanDuration,
    /// `memory = "follow"` refuses to move a process larger than this (MiB): one
    /// migration cannot be interrupted, and moves at a few GiB/s. Default 262144
    /// (256 GiB); 1 to 1073741824.
    #[serde(deserialize_with = "u32_within::<_, 1, 1_073_741_823>")]
    pub follow_max_size_mib: u32,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            tolerance: Fraction(0.10),
            min_size_mib: 64,
            follow_interval: HumanDuration(Duration::from_secs(300)),
            follow_max_size_mib: 262_144,
        }
    }
}

/// `[sched-ext]`: what to do while a sched_ext scheduler runs (see `sched_ext`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct SchedExtSettings {
    /// `"warn"` (pin as usual, warn per rule), `"widen"` (round masks up to whole
    /// groups) or `"pause"` (release every rule until it stops). Default `"warn"`.
    pub policy: crate::sched_ext::Policy,
    /// The groups `"widen"` rounds up to: `"llc"` or `"node"`. Default `"llc"`.
    pub widen_to: crate::sched_ext::WidenTo,
}

/// `[measure]`: when and how hard to measure the latency matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct MeasureSettings {
    /// Full re-measure at least this often, even without drift. Default `"7d"`;
    /// `"off"` re-measures only on a fingerprint change, drift or request. At least
    /// `"1h"`: a full measurement busy-spins every CPU.
    #[serde(deserialize_with = "every_within::<_, HOUR, YEAR>")]
    pub interval: Every,
    /// Light drift probe (a few pairs) this often while idle. Default `"1h"`; `"off"`.
    /// At least `"1m"`.
    #[serde(deserialize_with = "every_within::<_, MINUTE, YEAR>")]
    pub drift_probe: Every,
    /// Pairs measured by one drift probe. Default 8; 1 to 4096.
    #[serde(deserialize_with = "u32_within::<_, 1, 4096>")]
    pub drift_pairs: u32,
    /// Relative change of a probed pair's latency that counts as drift and triggers a
    /// full re-measure. Default 0.25 (25%).
    pub drift_threshold: Fraction,
    /// Wall-clock budget of one full measurement; the sample count per pair is cut to
    /// fit. Default `"60s"`; `"1s"` to `"1d"`.
    #[serde(deserialize_with = "duration_within::<_, SECOND, DAY>")]
    pub budget: HumanDuration,
    /// Measure only while the CPUs are idle: the minimum percent idle (from
    /// /proc/stat) every measured CPU must show, the unit of `pinnerd measure
    /// --idle-threshold`; 0 measures whatever the load. Default 90.
    pub idle_threshold: IdlePercent,
    /// CPUs never to measure: no spinner runs there, the idle check ignores them and
    /// their cells are kept from the last measurement that had them. Kernel list
    /// format. Default `""` (none).
    pub never_cpus: CpuSet,
    /// Scheduling priority of the spinning threads: `"normal"`, `"nice-19"` or
    /// `"idle"` (SCHED_IDLE). Default `"nice-19"` (see `benches/README.md`).
    pub spin_priority: crate::measure::around::SpinPriority,
    /// From this many usable CPUs on, a measurement is sparse first (a map in seconds,
    /// most cells inferred), then completed in the background (below). Default 128;
    /// 2 to 65536 (2: always sparse first).
    #[serde(deserialize_with = "u32_within::<_, 2, 65_536>")]
    pub sparse_from_cpus: u32,
    /// Pairs one background completion slice measures (in rounds of disjoint pairs);
    /// 1 to 65536. Unset (the default): rounds of the machine
    /// (`measure::complete::default_slice`: 512 pairs up to 512 CPUs, then CPUs / 256
    /// rounds of CPUs / 2 pairs, at most 8 rounds: 16,384 pairs at 4,096 CPUs).
    #[serde(
        deserialize_with = "some_u32_within::<_, 1, 65_536>",
        skip_serializing_if = "Option::is_none"
    )]
    pub complete_slice: Option<u32>,
    /// Pause between two completion slices. Default `"1s"`; `"1s"` to `"1h"`. With the
    /// defaults a 512-CPU machine is completed in about 5 minutes (`benches/README.md`).
    #[serde(deserialize_with = "duration_within::<_, SECOND, HOUR>")]
    pub complete_pause: HumanDuration,
}

/// `[watch]`: finding processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct WatchSettings {
    /// Full /proc rescan this often, besides the one at start and after an event
    /// overrun. Default `"60s"`; `"off"` only when the proc connector works. `"1s"` to
    /// `"1d"`: a rescan reads every process in /proc.
    #[serde(deserialize_with = "every_within::<_, SECOND, DAY>")]
    pub rescan_interval: Every,
    /// When someone else changes the CPU mask of a task pinnerd placed, stop managing
    /// that task (and say so) instead of putting it back. Default `true`.
    pub release_on_foreign_change: bool,
}

/// `[placement]`: CPUs rules may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlacementSettings {
    /// CPUs kept for the OS: never chosen for `count` rules (explicit `cpus` may still
    /// name them). Kernel list format. Default `""` (none).
    pub housekeeping_cpus: CpuSet,
}

/// `[limits]`: protecting the daemon from its callers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LimitSettings {
    /// D-Bus method calls per second allowed to one caller (token bucket rate).
    /// Default 20; 1 to 100000.
    #[serde(deserialize_with = "u32_within::<_, 1, 100_000>")]
    pub dbus_calls_per_second: u32,
    /// Burst size of that bucket. Default 40; 1 to 100000 (0 would refuse every call).
    #[serde(deserialize_with = "u32_within::<_, 1, 100_000>")]
    pub dbus_burst: u32,
    /// `Remeasure` calls closer together than this coalesce into the running or last
    /// measurement. Default `"10m"`; `"1s"` to `"365d"`.
    #[serde(deserialize_with = "duration_within::<_, SECOND, YEAR>")]
    pub remeasure_min_interval: HumanDuration,
}

/// `[metrics]`: the Prometheus textfile for node_exporter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct MetricsSettings {
    /// Directory node_exporter's textfile collector reads; the daemon writes
    /// `pinnerd.prom` there (atomically). Default `""`: no textfile.
    pub textfile_dir: PathBuf,
    /// How often the textfile is rewritten. Default `"15s"`.
    pub textfile_period: HumanDuration,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            textfile_dir: PathBuf::new(),
            textfile_period: HumanDuration(Duration::from_secs(15)),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rule_dirs: vec![PathBuf::from(crate::rules::DEFAULT_RULE_DIR)],
            measure: MeasureSettings::default(),
            watch: WatchSettings::default(),
            placement: PlacementSettings::default(),
            limits: LimitSettings::default(),
            metrics: MetricsSettings::default(),
            sched_ext: SchedExtSettings::default(),
            memory: MemorySettings::default(),
            nri: NriSettings::default(),
        }
    }
}

impl Default for MeasureSettings {
    fn default() -> Self {
        MeasureSettings {
            interval: Every::Every(HumanDuration(Duration::from_secs(7 * 86_400))),
            drift_probe: Every::Every(HumanDuration(Duration::from_secs(3_600))),
            drift_pairs: 8,
            drift_threshold: Fraction(0.25),
            budget: HumanDuration(Duration::from_secs(60)),
            idle_threshold: IdlePercent(90.0),
            never_cpus: CpuSet::new(),
            spin_priority: crate::measure::around::SpinPriority::Nice19,
            sparse_from_cpus: crate::measure::SPARSE_FROM_CPUS as u32,
            complete_slice: None,
            complete_pause: HumanDuration(Duration::from_secs(1)),
        }
    }
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            rescan_interval: Every::Every(HumanDuration(Duration::from_secs(60))),
            release_on_foreign_change: true,
        }
    }
}

impl Default for PlacementSettings {
    fn default() -> Self {
        PlacementSettings {
            housekeeping_cpus: CpuSet::new(),
        }
    }
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            dbus_calls_per_second: 20,
            dbus_burst: 40,
            remeasure_min_interval: HumanDuration(Duration::from_secs(600)),
        }
    }
}

/// A settings file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The file could not be read safely (permissions, type, size, encoding, I/O).
    #[error(transparent)]
    File(#[from] RuleError),
    /// Syntax, a wrong type, an unknown key or a value out of range.
    #[error("{}:{at}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        at: Location,
        message: String,
    },
}

impl Settings {
    /// The rule directories to load: `given` (the command line's) when any, else the
    /// settings' `rule-dirs`.
    pub fn rule_dirs_or(&self, given: &[PathBuf]) -> Vec<PathBuf> {
        if given.is_empty() {
            self.rule_dirs.clone()
        } else {
            given.to_vec()
        }
    }

    /// Parses settings text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Settings, SettingsError> {
        toml::from_str(text).map_err(|e: toml::de::Error| SettingsError::Invalid {
            path: path.to_path_buf(),
            at: e.span().map_or(Location { line: 1, col: 1 }, |s| {
                Location::of_span(text, &s)
            }),
            message: crate::rules::echo_message(e.message().trim_end()),
        })
    }

    /// Reads and parses `path` with the same safety checks as rule files.
    pub fn load(path: &Path, policy: &LoadPolicy) -> Result<Settings, SettingsError> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let text = crate::rules::read_checked(dir, path, policy)?;
        Settings::parse(path, &text)
    }

    /// Like [`Settings::load`], but a file that does not exist means the defaults.
    pub fn load_or_default(path: &Path, policy: &LoadPolicy) -> Result<Settings, SettingsError> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            _ => Settings::load(path, policy),
        }
    }

    /// The settings as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// A duration written as `"500ms"`, `"30s"`, `"10m"`, `"2h"` or `"7d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

/// A period that can be switched off: a [`HumanDuration`] or `"off"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Every {
    Off,
    Every(HumanDuration),
}

impl Every {
    pub fn period(self) -> Option<Duration> {
        match self {
            Every::Off => None,
            Every::Every(d) => Some(d.0),
        }
    }
}

/// A number in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Fraction(pub f64);

/// A minimum percent idle, 0 to 100 (`measure.idle-threshold`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdlePercent(pub f64);

impl IdlePercent {
    /// As a share, 0 to 1.
    pub fn share(self) -> f64 {
        self.0 / 100.0
    }
}

const DURATION_HINT: &str = "a duration like \"500ms\", \"30s\", \"10m\", \"2h\" or \"7d\"";

impl FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid duration {s:?}: expected {DURATION_HINT}");
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (num, unit) = s.split_at(split);
        if num.is_empty() {
            return Err(bad());
        }
        let n: u64 = num.parse().map_err(|_| bad())?;
        let ms_per = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let ms = n.checked_mul(ms_per).ok_or_else(bad)?;
        if ms == 0 {
            return Err(format!("invalid duration {s:?}: must be more than zero"));
        }
        Ok(HumanDuration(Duration::from_millis(ms)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, per) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms % per == 0 {
                return write!(f, "{}{unit}", ms / per);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Every {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Every::Off => s.serialize_str("off"),
            Every::Every(d) => d.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Every {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "off" {
            return Ok(Every::Off);
        }
        s.parse()
            .map(Every::Every)
            .map_err(|e| serde::de::Error::custom(format!("{e}, or \"off\"")))
    }
}

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const YEAR: u64 = 365 * DAY;

/// `d` in milliseconds, checked against `MIN..=MAX`; the error names both bounds in the
/// units a user writes.
fn check_range<const MIN: u64, const MAX: u64>(d: HumanDuration) -> Result<HumanDuration, String> {
    let ms = d.0.as_millis();
    if ms < u128::from(MIN) || ms > u128::from(MAX) {
        let (lo, hi) = (
            HumanDuration(Duration::from_millis(MIN)),
            HumanDuration(Duration::from_millis(MAX)),
        );
        return Err(format!(
            "{d} is out of range: expected \"{lo}\" to \"{hi}\""
        ));
    }
    Ok(d)
}

/// A [`HumanDuration`] from `MIN` to `MAX` milliseconds.
fn duration_within<'de, D: Deserializer<'de>, const MIN: u64, const MAX: u64>(
    d: D,
) -> Result<HumanDuration, D::Error> {
    check_range::<MIN, MAX>(HumanDuration::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// An [`Every`] whose period is from `MIN` to `MAX` milliseconds, or `"off"`.
fn every_within<'de, D: Deserializer<'de>, const MIN: u64, const MAX: u64>(
    d: D,
) -> Result<Every, D::Error> {
    match Every::deserialize(d)? {
        Every::Off => Ok(Every::Off),
        Every::Every(p) => check_range::<MIN, MAX>(p)
            .map(Every::Every)
            .map_err(|e| serde::de::Error::custom(format!("{e}, or \"off\""))),
    }
}

/// A whole number from `MIN` to `MAX`.
fn some_u32_within<'de, D: Deserializer<'de>, const MIN: u32, const MAX: u32>(
    d: D,
) -> Result<Option<u32>, D::Error> {
    u32_within::<D, MIN, MAX>(d).map(Some)
}

fn u32_within<'de, D: Deserializer<'de>, const MIN: u32, const MAX: u32>(
    d: D,
) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if !(MIN..=MAX).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "{v} is out of range: expected {MIN} to {MAX}"
        )));
    }
    Ok(v)
}

impl Serialize for Fraction {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl Serialize for IdlePercent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for IdlePercent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v > 0.0 && v < 1.0 {
            // The busy fraction this key once took: refused, never misread.
            return Err(serde::de::Error::custom(format!(
                "{v} looks like a busy fraction: idle-threshold is the minimum percent idle, \
                 0 to 100, as `pinnerd measure --idle-threshold` (for {v} write {})",
                ((1.0 - v) * 100.0).round()
            )));
        }
        if (0.0..=100.0).contains(&v) {
            Ok(IdlePercent(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "{v} is out of range: expected the minimum percent idle, 0 to 100"
            )))
        }
    }
}

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..=1.0).contains(&v) {
            Ok(Fraction(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "{v} is out of range: expected a fraction from 0.0 to 1.0"
            )))
        }
    }
}

#[cfg(test)]
mod tests;
