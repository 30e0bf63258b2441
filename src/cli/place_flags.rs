//! The placement flags on the command line.
//!
//! - [`ShapeFlags`]: `--core-type`, `--prefer` and `--near`, the command-line form of the
//!   rule keys `core-type`, `prefer` and `near` (see `shape`); flattened into `plan` and,
//!   through [`PlaceFlags`], into `run` and `pin`.
//! - [`PlaceFlags`]: the placement of `pinnerd run` and `pinnerd pin`, the vocabulary of
//!   a rule's `[rule.place]` (`--count`, `--policy`, `--smt`, `--cpus`, `--within`, and
//!   the shape flags), or `--rule NAME` for a loaded rule's placement.
//!
//! Must not touch: choosing CPUs. These flags only become a [`PlaceSpec`], checked as a
//! rule file's `[rule.place]` is (no `cpus` with `count`, no `count = 0`, no `count`
//! larger than `within`, no shape with `cpus`).

use crate::api::{PlaceParts, PlaceSpec};
use crate::cpuset::CpuSet;
use crate::placement::{Policy, SmtPolicy};
use crate::shape::{Prefer, Shape};
use crate::topology::CoreType;

/// The flags that shape a count request.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ShapeFlags {
    /// Only CPUs of this kind: performance or efficiency (a machine with one kind of
    /// core has only performance cores). Refused, never widened, when the kind cannot
    /// hold the request.
    #[arg(long, value_name = "KIND")]
    pub core_type: Option<CoreType>,
    /// Among the cache groups able to hold the request: cache (the most L3 per core)
    /// or frequency (the highest preferred-core ranking, else maximum frequency).
    #[arg(long, value_name = "WHAT")]
    pub prefer: Option<Prefer>,
    /// Near a device: a network interface, a PCI address (0000:81:00.0), a block device
    /// or a /dev path. Its NUMA node's CPUs first, the nearest nodes added when needed.
    #[arg(long, value_name = "DEVICE")]
    pub near: Option<String>,
}

impl ShapeFlags {
    /// The flags as a request shape.
    pub fn shape(&self) -> Shape {
        Shape {
            core_type: self.core_type,
            prefer: self.prefer,
            near: self.near.clone(),
        }
    }
}

/// Where to place, as a rule's `[rule.place]` says it. Without any flag: one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PlaceFlags {
    /// This many CPUs, chosen from the latency matrix (default 1).
    #[arg(long, short = 'k', value_name = "N", conflicts_with_all = ["cpus", "rule"])]
    pub count: Option<u32>,
    /// compact (threads that talk) or spread (independent workers); with a count.
    #[arg(long, value_name = "POLICY", conflicts_with_all = ["cpus", "rule"])]
    pub policy: Option<Policy>,
    /// allow, avoid or prefer-siblings; with a count.
    #[arg(long, value_name = "SMT", conflicts_with_all = ["cpus", "rule"])]
    pub smt: Option<SmtPolicy>,
    /// Exactly these CPUs (kernel list format, e.g. 2-5,8), as `taskset -c` would.
    #[arg(long, value_name = "LIST", conflicts_with = "rule")]
    pub cpus: Option<CpuSet>,
    /// With a count: choose among these CPUs only.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["cpus", "rule"])]
    pub within: Option<CpuSet>,
    /// Use the `[rule.place]` of the loaded rule NAME.
    #[arg(long, value_name = "NAME")]
    pub rule: Option<String>,
    #[command(flatten)]
    pub shape: ShapeFlags,
}

impl PlaceFlags {
    /// The placement these flags ask for, checked as a rule's `[rule.place]` is.
    pub fn spec(&self) -> anyhow::Result<PlaceSpec> {
        PlaceParts {
            count: self.count,
            policy: self.policy,
            smt: self.smt,
            cpus: self.cpus.clone(),
            within: self.within.clone(),
            rule: self.rule.clone(),
            shape: self.shape.shape(),
        }
        .spec("--")
        .map_err(anyhow::Error::msg)
    }
}

/// `run --sched-policy`, `--sched-priority` and `--nice`: the command's scheduling class,
/// the vocabulary and the bounds of a rule's keys of those names. Set on the command
/// before exec, with the caller's own rights (as `chrt` and `nice` do): the kernel
/// refuses a real-time policy or a negative nice value the caller may not give itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct SchedFlags {
    /// other, batch, idle, fifo or rr (fifo and rr need --sched-priority).
    #[arg(long, value_name = "POLICY")]
    pub sched_policy: Option<crate::affinity::sched::SchedPolicy>,
    /// The real-time priority, 1 to 99; with --sched-policy fifo or rr only.
    #[arg(long, value_name = "N")]
    pub sched_priority: Option<i64>,
    /// The nice value, -20 to 19; with no --sched-policy, other or batch.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub nice: Option<i64>,
}

impl SchedFlags {
    /// The class these flags ask for, checked as a rule's keys are; `None` without any.
    pub fn sched(&self) -> anyhow::Result<Option<crate::affinity::sched::Sched>> {
        crate::affinity::sched::Sched::checked(
            self.sched_policy,
            self.sched_priority,
            self.nice,
            "--",
        )
        .map_err(anyhow::Error::msg)
    }
}

/// A placement in words: `2 CPUs (compact, smt avoid) within 0-7`, `CPUs 3-4`,
/// `rule "feed"`.
pub fn describe(spec: &PlaceSpec) -> String {
    match spec {
        PlaceSpec::Rule(name) => format!("rule {name:?}"),
        PlaceSpec::Request(r) => {
            let mut s = crate::plan::describe_request(r);
            if let Some(w) = &r.within {
                s.push_str(&format!(" within {w}"));
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::rules::CpuTarget;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        place: PlaceFlags,
    }

    fn spec(args: &[&str]) -> anyhow::Result<PlaceSpec> {
        let t = T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?;
        t.place.spec()
    }

    #[test]
    fn no_flag_means_one_cpu_compact() {
        let PlaceSpec::Request(r) = spec(&[]).unwrap() else {
            panic!("a request")
        };
        assert_eq!(r.target, CpuTarget::Count(1));
        assert_eq!((r.policy, r.smt), (Policy::Compact, SmtPolicy::Allow));
        assert!(r.within.is_none() && !r.exclusive);
    }

    #[test]
    fn the_rule_vocabulary_becomes_a_request() {
        let PlaceSpec::Request(r) = spec(&[
            "--count", "2", "--policy", "spread", "--smt", "avoid", "--within", "0-3",
        ])
        .unwrap() else {
            panic!("a request")
        };
        assert_eq!(r.target, CpuTarget::Count(2));
        assert_eq!((r.policy, r.smt), (Policy::Spread, SmtPolicy::Avoid));
        assert_eq!(r.within, Some("0-3".parse().unwrap()));
        assert_eq!(
            describe(&PlaceSpec::Request(r)),
            "2 CPUs (spread, smt avoid) within 0-3"
        );
        let PlaceSpec::Request(r) = spec(&["--cpus", "1,3"]).unwrap() else {
            panic!("a request")
        };
        assert_eq!(r.target, CpuTarget::Cpus("1,3".parse().unwrap()));
        assert_eq!(
            spec(&["--rule", "feed"]).unwrap(),
            PlaceSpec::Rule("feed".into())
        );
    }

    #[derive(Debug, Parser)]
    struct S {
        #[command(flatten)]
        sched: SchedFlags,
    }

    fn sched(args: &[&str]) -> anyhow::Result<Option<crate::affinity::sched::Sched>> {
        let s = S::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?;
        s.sched.sched()
    }

    #[test]
    fn the_sched_flags_are_checked_as_the_rule_keys_are() {
        assert_eq!(sched(&[]).unwrap(), None);
        let words = |a: &[&str]| sched(a).unwrap().unwrap().words();
        assert_eq!(words(&["--nice", "-5"]), "other nice -5");
        assert_eq!(
            words(&["--sched-policy", "fifo", "--sched-priority", "20"]),
            "fifo 20"
        );
        for (args, want) in [
            (&["--sched-policy", "rr"][..], "needs --sched-priority"),
            (
                &["--sched-policy", "fifo", "--sched-priority", "100"][..],
                "1 to 99",
            ),
            (&["--sched-priority", "3"][..], "only for"),
            (&["--nice", "20"][..], "-20 to 19"),
            (&["--sched-policy", "idle", "--nice", "1"][..], "not for"),
            (
                &["--sched-policy", "deadline"][..],
                "other, batch, idle, fifo, rr",
            ),
        ] {
            let e = sched(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn what_a_rule_file_refuses_the_flags_refuse() {
        for (args, want) in [
            (&["--count", "2", "--cpus", "1"][..], "cannot be used with"),
            (
                &["--cpus", "1", "--smt", "avoid"][..],
                "cannot be used with",
            ),
            (
                &["--cpus", "1", "--within", "0-3"][..],
                "cannot be used with",
            ),
            (&["--rule", "x", "--count", "1"][..], "cannot be used with"),
            (&["--count", "0"][..], "--count 0"),
            (
                &["--count", "5", "--within", "0-3"][..],
                "larger than --within",
            ),
            (&["--policy", "tight"][..], "unknown policy"),
            (&["--cpus", "1-"][..], "--cpus"),
            (&["--rule", ""][..], "cannot be empty"),
        ] {
            let e = spec(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }
}
