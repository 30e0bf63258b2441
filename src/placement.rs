//! Placement: pure logic from a topology, a latency matrix and a request to a CPU set.
//!
//! Must not touch: the OS (no files, no syscalls, no clocks).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

impl Policy {
    pub const fn as_str(self) -> &'static str {
        match self {
            Policy::Compact => "compact",
            Policy::Spread => "spread",
        }
    }
}

impl SmtPolicy {
    pub const fn as_str(self) -> &'static str {
        match self {
            SmtPolicy::Allow => "allow",
            SmtPolicy::Avoid => "avoid",
            SmtPolicy::PreferSiblings => "prefer-siblings",
        }
    }
}

impl FromStr for Policy {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "compact" => Ok(Policy::Compact),
            "spread" => Ok(Policy::Spread),
            _ => Err(UnknownWord {
                what: "policy",
                given: s.to_string(),
                expected: "compact, spread",
            }),
        }
    }
}

impl FromStr for SmtPolicy {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "allow" => Ok(SmtPolicy::Allow),
            "avoid" => Ok(SmtPolicy::Avoid),
            "prefer-siblings" => Ok(SmtPolicy::PreferSiblings),
            _ => Err(UnknownWord {
                what: "smt policy",
                given: s.to_string(),
                expected: "allow, avoid, prefer-siblings",
            }),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for SmtPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for p in [Policy::Compact, Policy::Spread] {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
        }
        for s in [
            SmtPolicy::Allow,
            SmtPolicy::Avoid,
            SmtPolicy::PreferSiblings,
        ] {
            assert_eq!(s.to_string().parse::<SmtPolicy>().unwrap(), s);
        }
        let e = "tight".parse::<Policy>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown policy \"tight\": expected one of compact, spread"
        );
    }
}
