//! A rule's patterns, built once at load: globs sorted by how cheaply they match
//! ([`GlobList`]), and the memory the `cmdline` regexes of a rule set may take
//! ([`RegexBudget`]). Pure: `compile` reports what is wrong with them where the file
//! says them.

use std::sync::OnceLock;

use globset::{Glob, GlobMatcher};
use regex::{Regex, RegexBuilder};

use super::error::{echo, RuleErrorKind};

/// Compiled size cap for one `cmdline` regex, so a hostile file cannot eat memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// What the `cmdline` regexes of the whole rule set may take compiled, together (see
/// [`RegexBudget`]).
pub const REGEX_SET_BUDGET: usize = 16 << 20;
/// The lazy DFA cache each `cmdline` regex may fill while matching (the regex crate's
/// default is 2 MiB; a command line is short, and a pattern whose DFA needs more is
/// matched without it).
const REGEX_DFA_CACHE: usize = 16 << 10;

/// The bytes left for the `cmdline` regexes of one rule set. A regex costs its
/// compiled automaton twice (the regex keeps a forward and a reverse one) plus the
/// DFA cache it may fill: so a thousand rules of `\w{20}` (350 KB each) are refused
/// at the 23rd instead of taking gigabytes, while 900 simple patterns fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexBudget {
    pub left: usize,
}

impl Default for RegexBudget {
    fn default() -> Self {
        RegexBudget {
            left: REGEX_SET_BUDGET,
        }
    }
}

/// Why a `cmdline` regex was not charged to a [`RegexBudget`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncharged {
    /// It does not compile (or is over [`REGEX_SIZE_LIMIT`] on its own).
    Bad(String),
    /// It would take more than the `left` bytes still free (`at_least` bytes or more).
    Over { at_least: usize, left: usize },
}

impl RegexBudget {
    /// Measures `pattern` compiled and takes its cost from what is left. The
    /// automaton is built only up to what is left, so an exhausted budget refuses a
    /// big pattern at once instead of building it first.
    pub fn charge(&mut self, pattern: &str) -> Result<usize, Uncharged> {
        use regex_automata::nfa::thompson::NFA;
        let room = (self.left.saturating_sub(REGEX_DFA_CACHE) / 2).min(REGEX_SIZE_LIMIT);
        let built = NFA::compiler()
            .configure(NFA::config().nfa_size_limit(Some(room)))
            .build(pattern);
        let nfa = match built {
            Ok(nfa) => nfa,
            Err(e) if e.size_limit().is_some() && room < REGEX_SIZE_LIMIT => {
                return Err(Uncharged::Over {
                    at_least: 2 * room + REGEX_DFA_CACHE,
                    left: self.left,
                })
            }
            Err(e) => return Err(Uncharged::Bad(one_line(&e.to_string()))),
        };
        let cost = 2 * nfa.memory_usage() + REGEX_DFA_CACHE;
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                Ok(cost)
            }
            None => Err(Uncharged::Over {
                at_least: cost,
                left: self.left,
            }),
        }
    }
}

/// A list of globs, any of which may match. `*` matches any run of characters,
/// `/` included; `?` one character; `[...]` a class; `{a,b}` alternatives.
#[derive(Debug, Clone)]
pub struct GlobList {
    pub patterns: Vec<String>,
    pub(super) compiled: Vec<Pattern>,
}

/// One glob, sorted by how cheaply it can be matched. Most real patterns are literals
/// or `prefix*`, which need no regex at all; the rest compile theirs on first use
/// (validation at load only parses them).
#[derive(Debug, Clone)]
pub(super) enum Pattern {
    Literal(String),
    Prefix(String),
    Suffix(String),
    Any,
    Complex(Box<Complex>),
}

#[derive(Debug, Clone)]
pub(super) struct Complex {
    pub(super) glob: Glob,
    matcher: OnceLock<GlobMatcher>,
}

impl Pattern {
    /// Classifies a pattern that already parsed as a glob.
    pub(super) fn new(p: &str, glob: Glob) -> Pattern {
        let plain = |s: &str| !has_glob_meta(s);
        if plain(p) {
            Pattern::Literal(p.to_string())
        } else if p == "*" {
            Pattern::Any
        } else if let Some(prefix) = p.strip_suffix('*').filter(|s| plain(s)) {
            Pattern::Prefix(prefix.to_string())
        } else if let Some(suffix) = p.strip_prefix('*').filter(|s| plain(s)) {
            Pattern::Suffix(suffix.to_string())
        } else {
            Pattern::Complex(Box::new(Complex {
                glob,
                matcher: OnceLock::new(),
            }))
        }
    }

    pub(super) fn is_match(&self, text: &str) -> bool {
        match self {
            Pattern::Literal(l) => text == l,
            Pattern::Prefix(p) => text.starts_with(p.as_str()),
            Pattern::Suffix(s) => text.ends_with(s.as_str()),
            Pattern::Any => true,
            Pattern::Complex(c) => c
                .matcher
                .get_or_init(|| c.glob.compile_matcher())
                .is_match(text),
        }
    }
}

impl GlobList {
    pub fn is_match(&self, text: &str) -> bool {
        self.compiled.iter().any(|p| p.is_match(text))
    }
}

/// The last line of a multi-line library message (regex errors draw a caret diagram).
fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(msg)
        .trim_start_matches("error: ")
        .to_string()
}

pub(super) fn has_glob_meta(p: &str) -> bool {
    p.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// A `cmdline` regex, measured and charged to `budget` before it is built. One that
/// does not compile is left to the regex crate, whose message is the clearer.
pub(super) fn cmdline_regex(
    pattern: &str,
    budget: &mut RegexBudget,
) -> Result<Regex, RuleErrorKind> {
    match budget.charge(pattern) {
        Ok(_) | Err(Uncharged::Bad(_)) => {}
        Err(Uncharged::Over { at_least, left }) => {
            return Err(RuleErrorKind::RegexBudget {
                pattern: echo(pattern),
                cost: at_least,
                left,
                budget: REGEX_SET_BUDGET,
            })
        }
    }
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_CACHE)
        .build()
        .map_err(|e| RuleErrorKind::BadRegex {
            pattern: echo(pattern),
            reason: one_line(&e.to_string()),
        })
}
