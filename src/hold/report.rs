//! What holding one process came to: the [`HoldReport`] the holder sends the daemon
//! (its fields are the wire's and the log's), read as one [`HoldState`] whose
//! `Display` is the line `explain`, `status` and the log print; the dry run (`check`,
//! `plan --live`) says its state in the same words, as what would be done ([`Mood`]).
//!
//! ```text
//!   Nothing ── Confined(unit) ── Isolated { confined, cpus }
//!      └──────────┴──────────────── Refused { confined, isolated, NotIsolated | NotConfined }
//! ```
//!
//! Owns: the reading and the words. Must not touch: how a hold is made (`apply`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// What holding one process came to, for `explain`, `status`, `plan --live` and the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldReport {
    pub rule: String,
    pub pid: u32,
    /// The unit confined (`md-feed.service`, or the scope pinnerd made).
    pub unit: Option<String>,
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
    /// `AllowedCPUs=` (and `AllowedMemoryNodes=`) are set on the unit.
    pub confined: bool,
    /// The rule asked for isolation.
    pub isolate: bool,
    /// The CPUs are an isolated partition now.
    pub isolated: bool,
    /// What could not be done, in one line.
    pub problem: Option<String>,
}

impl HoldReport {
    /// One line: what is held and how, or why not (its [`HoldState`]'s words).
    pub fn line(&self) -> String {
        self.state().to_string()
    }

    /// The state the report's fields say the hold is in.
    pub fn state(&self) -> HoldState {
        let confined = match (self.confined, &self.unit) {
            (true, Some(unit)) => Some(Confined {
                unit: unit.clone(),
                cpus: self.cpus.clone(),
                mems: self.mems.clone(),
            }),
            _ => None,
        };
        let isolated = self.isolated.then(|| self.cpus.clone());
        match (&self.problem, isolated) {
            (Some(why), isolated) => HoldState::Refused {
                shortfall: if self.isolate && !self.isolated {
                    Shortfall::NotIsolated(why.clone())
                } else {
                    Shortfall::NotConfined(why.clone())
                },
                confined,
                isolated,
            },
            (None, Some(cpus)) => HoldState::Isolated { confined, cpus },
            (None, None) => confined.map_or(HoldState::Nothing, HoldState::Confined),
        }
    }
}

/// The state a hold is in, for one process: one reading of a [`HoldReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldState {
    /// Nothing held and nothing refused (no unit's outcome yet).
    Nothing,
    /// The unit confined, no partition asked for.
    Confined(Confined),
    /// The CPUs an isolated partition (the unit confined, where it is).
    Isolated {
        confined: Option<Confined>,
        cpus: CpuSet,
    },
    /// Not held as the rule asks: why, and what is held even so.
    Refused {
        confined: Option<Confined>,
        isolated: Option<CpuSet>,
        shortfall: Shortfall,
    },
}

/// A unit whose `AllowedCPUs=` (and `AllowedMemoryNodes=`) pinnerd set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    /// `md-feed.service`, or the scope pinnerd made.
    pub unit: String,
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
}

/// What a hold could not do, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// The rule asked for isolation and the CPUs are not isolated: it stays merely
    /// exclusive.
    NotIsolated(String),
    /// The unit is not confined.
    NotConfined(String),
}

/// How a hold's words are said: what was done, or what a dry run would do (`check`,
/// `plan --live`). One set of words for both, so that the dry run says what the
/// daemon then reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mood {
    Done,
    Would,
}

impl Confined {
    fn write(&self, f: &mut fmt::Formatter<'_>, mood: Mood) -> fmt::Result {
        write!(f, "unit {}: AllowedCPUs={}", self.unit, self.cpus)?;
        if let Some(m) = &self.mems {
            write!(f, ", AllowedMemoryNodes={m}")?;
        }
        f.write_str(match mood {
            Mood::Done => " (set by pinnerd)",
            Mood::Would => " (would be set by pinnerd)",
        })
    }
}

impl fmt::Display for Confined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, Mood::Done)
    }
}

impl Shortfall {
    fn write(&self, f: &mut fmt::Formatter<'_>, mood: Mood) -> fmt::Result {
        match (self, mood) {
            (Shortfall::NotIsolated(why), _) => {
                write!(f, "not isolated: {why}; the rule stays merely exclusive")
            }
            (Shortfall::NotConfined(why), Mood::Done) => write!(f, "unit not confined: {why}"),
            (Shortfall::NotConfined(why), Mood::Would) => write!(f, "not held: {why}"),
        }
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, Mood::Done)
    }
}

impl HoldState {
    /// The state's words in `mood` (its `Display` is [`Mood::Done`]'s).
    pub fn said(&self, mood: Mood) -> Said<'_> {
        Said { state: self, mood }
    }
}

/// A [`HoldState`]'s words in a [`Mood`]: what is held and how, then why not, `; `
/// between; nothing for [`HoldState::Nothing`].
pub struct Said<'a> {
    state: &'a HoldState,
    mood: Mood,
}

impl fmt::Display for Said<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (confined, isolated, shortfall) = match self.state {
            HoldState::Nothing => (None, None, None),
            HoldState::Confined(c) => (Some(c), None, None),
            HoldState::Isolated { confined, cpus } => (confined.as_ref(), Some(cpus), None),
            HoldState::Refused {
                confined,
                isolated,
                shortfall,
            } => (confined.as_ref(), isolated.as_ref(), Some(shortfall)),
        };
        let mut sep = "";
        if let Some(c) = confined {
            c.write(f, self.mood)?;
            sep = "; ";
        }
        if let Some(cpus) = isolated {
            match self.mood {
                Mood::Done => write!(f, "{sep}CPUs {cpus} isolated (cpuset partition)")?,
                Mood::Would => write!(f, "{sep}CPUs {cpus} would be isolated (cpuset partition)")?,
            }
            sep = "; ";
        }
        if let Some(r) = shortfall {
            f.write_str(sep)?;
            r.write(f, self.mood)?;
        }
        Ok(())
    }
}

impl fmt::Display for HoldState {
    /// What is held and how, then why not, `; ` between; nothing for [`HoldState::Nothing`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.said(Mood::Done).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(confined: bool, isolate: bool, isolated: bool, problem: Option<&str>) -> HoldReport {
        HoldReport {
            rule: "md".into(),
            pid: 7,
            unit: Some("md.service".into()),
            cpus: "2-3".parse().unwrap(),
            mems: None,
            confined,
            isolate,
            isolated,
            problem: problem.map(str::to_string),
        }
    }

    #[test]
    fn a_report_reads_as_one_state_and_says_it_in_one_line() {
        let md = Confined {
            unit: "md.service".into(),
            cpus: "2-3".parse().unwrap(),
            mems: None,
        };
        assert_eq!(
            report(false, false, false, None).state(),
            HoldState::Nothing
        );
        assert_eq!(report(false, false, false, None).line(), "");
        assert_eq!(
            report(true, false, false, None).state(),
            HoldState::Confined(md.clone())
        );
        let isolated = report(true, true, true, None);
        assert_eq!(
            isolated.state(),
            HoldState::Isolated {
                confined: Some(md.clone()),
                cpus: "2-3".parse().unwrap()
            }
        );
        assert_eq!(
            isolated.line(),
            "unit md.service: AllowedCPUs=2-3 (set by pinnerd); CPUs 2-3 isolated (cpuset partition)"
        );
        let refused = report(false, true, false, Some("no partitions"));
        assert_eq!(
            refused.state(),
            HoldState::Refused {
                confined: None,
                isolated: None,
                shortfall: Shortfall::NotIsolated("no partitions".into())
            }
        );
        assert_eq!(
            refused.line(),
            "not isolated: no partitions; the rule stays merely exclusive"
        );
        assert_eq!(
            report(false, false, false, Some("gone")).line(),
            "unit not confined: gone"
        );
    }
}
