//! Rule errors: what is wrong, in which file, at which line and column.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// A line and column, both counted from 1; the column counts characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub line: usize,
    pub col: usize,
}

impl Location {
    /// The location of byte `offset` in `text` (clamped to the text, and to a
    /// character boundary).
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = text[line_start..offset].chars().count() + 1;
        Location { line, col }
    }

    /// The location of the start of `span` in `text`.
    pub fn of_span(text: &str, span: &Range<usize>) -> Location {
        Location::of_offset(text, span.start)
    }
}

/// Line starts of one text, so that many offsets convert in O(log lines) each instead
/// of rescanning the text every time.
#[derive(Debug, Clone)]
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> LineIndex<'a> {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { text, starts }
    }

    /// Same answer as [`Location::of_offset`].
    pub fn locate(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        let col = self.text[start..offset].chars().count() + 1;
        Location { line, col }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Most characters of a value from the file (a name, a pattern) repeated in a message.
pub const ECHO_MAX: usize = 80;
/// Most characters of a parser's message (which may quote a key or a value).
pub const MESSAGE_MAX: usize = 400;

/// `value` as it may appear in a message: whole when short, else its first
/// [`ECHO_MAX`] characters and its length, so a 900 KB name cannot flood the error,
/// the log and `RuleErrors`.
pub fn echo(value: &str) -> String {
    shorten(value, ECHO_MAX)
}

/// A parser's message cut to [`MESSAGE_MAX`] characters the same way.
pub fn echo_message(message: &str) -> String {
    shorten(message, MESSAGE_MAX)
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}…[{} bytes in all]", &s[..cut], s.len()),
    }
}

/// One problem with one rule file. Displays as `FILE:LINE:COL: message`, or
/// `FILE: message` for problems with the file as a whole (permissions, type, size,
/// encoding), which have no position inside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RuleError {
    pub path: PathBuf,
    pub at: Option<Location>,
    pub kind: RuleErrorKind,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{}:{}: {}", self.path.display(), at, self.kind),
            None => write!(f, "{}: {}", self.path.display(), self.kind),
        }
    }
}

/// What is wrong. Each variant's message is its `Display`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleErrorKind {
    /// TOML syntax, a wrong type, an unknown or missing key: the parser's own message.
    #[error("{0}")]
    Toml(String),
    #[error("{key}: bad glob {pattern:?}: {reason}")]
    BadGlob {
        key: &'static str,
        pattern: String,
        reason: String,
    },
    #[error("cmdline: bad regex {pattern:?}: {reason}")]
    BadRegex { pattern: String, reason: String },
    #[error("cmdline: regex {pattern:?} would take {cost} bytes or more compiled, and only {left} are left of the {budget} bytes the rule set's cmdline regexes may take together")]
    RegexBudget {
        pattern: String,
        cost: usize,
        left: usize,
        budget: usize,
    },
    #[error("{key}: {pattern:?} is longer than 15 bytes and can never match a comm (the kernel truncates names to 15 bytes)")]
    CommTooLong { key: &'static str, pattern: String },
    #[error("empty rule name")]
    EmptyName,
    #[error("rule name {name:?} must be at most 64 characters, all letters, digits, '-', '_', '.', '@' or ':'")]
    BadName { name: String },
    #[error("duplicate rule name {name:?} (first defined at {first})")]
    DuplicateName { name: String, first: String },
    #[error(
        "rule {name:?} has no [rule.match] section: a rule must say which processes it applies to"
    )]
    NoMatch { name: String },
    #[error("rule {name:?}: [rule.match] is empty and would match every process")]
    EmptyMatch { name: String },
    #[error("rule {name:?} places nothing: add [rule.place] or [[rule.threads]]")]
    NoPlacement { name: String },
    #[error("{section}: `cpus` and `count` cannot both be given")]
    CpusAndCount { section: &'static str },
    #[error("{section}: `isolate = true` needs `exclusive = true`: CPUs no other task may use cannot be shared with other rules")]
    IsolateNeedsExclusive { section: &'static str },
    #[error("{section}: `sched-policy = \"{policy}\"` needs `exclusive = true`: a real-time thread runs before every other task of its CPUs and starves what else runs there")]
    RealtimeNeedsExclusive {
        section: &'static str,
        policy: &'static str,
    },
    #[error("{section}: `sched-policy = \"{policy}\"` needs `sched-priority` (1 to 99; higher runs first)")]
    RealtimeNeedsPriority {
        section: &'static str,
        policy: &'static str,
    },
    #[error("{section}: `sched-priority` is only for `sched-policy = \"fifo\"` or `\"rr\"`")]
    PriorityNeedsRealtime { section: &'static str },
    #[error("{section}: `sched-priority = {value}` is out of range: 1 to 99")]
    PriorityRange { section: &'static str, value: i64 },
    #[error("{section}: `nice` is not for `sched-policy = \"{policy}\"` (a real-time thread's order is its `sched-priority`; an idle thread's nice value means nothing)")]
    NiceWithPolicy {
        section: &'static str,
        policy: &'static str,
    },
    #[error("{section}: `nice = {value}` is out of range: -20 to 19")]
    NiceRange { section: &'static str, value: i64 },
    #[error("rule {name:?}: `{key}` asks for what only a privileged user may give a thread, so the rule must name whose processes may get it: add `user` (the owners) or `unit` (a system service) to [rule.match]; comm, exe, cmdline and cgroup are chosen by whoever starts the process")]
    SchedNeedsOwner { name: String, key: &'static str },
    #[error("[rule.place]: `idle-limit-us` needs `exclusive = true`: the limit is set on the CPUs the rule holds, and a rule that shares its CPUs holds none")]
    IdleLimitNeedsExclusive,
    #[error("[rule.place]: `idle-limit-us = {value}` is out of range: 0 (no idle state: the CPUs poll) to {max} µs")]
    IdleLimitRange { value: i64, max: u32 },
    #[error("rule {name:?}: `idle-limit-us` changes how the machine's CPUs sleep (and the power they draw), so the rule must name whose processes may trigger it: add `user` (the owners) or `unit` (a system service) to [rule.match]; comm, exe, cmdline and cgroup are chosen by whoever starts the process")]
    IdleLimitNeedsOwner { name: String },
    #[error("[[rule.threads]]: `isolate = true` makes the process's unit the partition, [rule.place]'s CPUs with it: [rule.place] needs `exclusive = true` too")]
    IsolateNeedsExclusivePlace,
    #[error("rule {name:?}: `{key} = true` changes the machine for every user, so the rule must name whose processes may trigger it: add `user` (the owners, e.g. `user = \"mdfeed\"`) or `unit` (a system service: its main process) to [rule.match]; comm, exe, cmdline and cgroup are chosen by whoever starts the process")]
    HoldNeedsOwner { name: String, key: &'static str },
    #[error("rule {name:?} names a container: `{key} = true` is not for container rules (the container runtime owns the container's cgroup; pinnerd gives the container its CPUs through the runtime at creation, and `exclusive = true` keeps them to it)")]
    ContainerHold { name: String, key: &'static str },
    #[error("{section}: give either `cpus` or `count`")]
    NoCpusNorCount { section: &'static str },
    #[error("{section}: `{key}` applies only to `count`; explicit `cpus` are used as given")]
    OnlyWithCount {
        section: &'static str,
        key: &'static str,
    },
    #[error("{section}: empty CPU list")]
    EmptyCpus { section: &'static str },
    #[error("{section}: count must be at least 1")]
    ZeroCount { section: &'static str },
    #[error("{section}: count {count} is more than the {available} CPUs of `within`")]
    CountExceedsWithin {
        section: &'static str,
        count: u32,
        available: usize,
    },
    #[error("{section}: near {device:?}: {reason}")]
    BadDevice {
        section: &'static str,
        device: String,
        reason: String,
    },
    #[error("user: unknown user {0:?}")]
    UnknownUser(String),
    #[error("cannot read: {0}")]
    Io(String),
    #[error("refused: {what} is {bit} (mode {mode:04o}); rule files and their directory must not be writable by group or others")]
    Writable {
        what: &'static str,
        bit: &'static str,
        mode: u32,
    },
    #[error("refused: {what} is owned by uid {uid}, expected uid {expected}")]
    Owner {
        what: &'static str,
        uid: u32,
        expected: u32,
    },
    #[error("refused: symlink points outside {dir}: {target}")]
    SymlinkOutside { dir: String, target: String },
    #[error("refused: dangling symlink to {target}")]
    DanglingSymlink { target: String },
    #[error("refused: not a regular file but a {0}")]
    NotRegular(&'static str),
    #[error("refused: {size} bytes is over the {limit}-byte limit for a rule file")]
    TooLarge { size: u64, limit: u64 },
    #[error("refused: its {size} bytes do not fit in what is left ({left} bytes) of the {limit} bytes the rule set's files may take together")]
    SetTooLarge { size: u64, left: u64, limit: u64 },
    #[error("refused: not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("the last good version of this file cannot be kept: {0}")]
    PreviousDropped(String),
}

impl RuleError {
    /// An error at byte `span` of `text`.
    pub fn at_span(
        path: impl Into<PathBuf>,
        text: &str,
        span: &Range<usize>,
        kind: RuleErrorKind,
    ) -> RuleError {
        RuleError {
            path: path.into(),
            at: Some(Location::of_span(text, span)),
            kind,
        }
    }

    /// An error about the file as a whole.
    pub fn whole(path: impl Into<PathBuf>, kind: RuleErrorKind) -> RuleError {
        RuleError {
            path: path.into(),
            at: None,
            kind,
        }
    }

    /// Converts a TOML parse error, keeping its position.
    pub fn from_toml(path: impl Into<PathBuf>, text: &str, err: &toml::de::Error) -> RuleError {
        RuleError {
            path: path.into(),
            at: Some(err.span().map_or(Location { line: 1, col: 1 }, |s| {
                Location::of_span(text, &s)
            })),
            kind: RuleErrorKind::Toml(echo_message(err.message().trim_end())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n\nc";
        assert_eq!(Location::of_offset(text, 0), Location { line: 1, col: 1 });
        assert_eq!(Location::of_offset(text, 4), Location { line: 1, col: 5 });
        assert_eq!(Location::of_offset(text, 6), Location { line: 2, col: 1 });
        // 'é' is two bytes but one column.
        assert_eq!(Location::of_offset(text, 9), Location { line: 2, col: 3 });
        // Inside a multi-byte char: clamped back to its start.
        assert_eq!(Location::of_offset(text, 8), Location { line: 2, col: 2 });
        assert_eq!(Location::of_offset(text, 15), Location { line: 4, col: 1 });
        assert_eq!(Location::of_offset(text, 999), Location { line: 4, col: 2 });
        let index = LineIndex::new(text);
        for offset in 0..=text.len() + 1 {
            assert_eq!(index.locate(offset), Location::of_offset(text, offset));
        }
    }

    #[test]
    fn display_has_file_line_col() {
        let e = RuleError::at_span("/x/a.toml", "\n  x", &(3..4), RuleErrorKind::EmptyName);
        assert_eq!(e.to_string(), "/x/a.toml:2:3: empty rule name");
        let e = RuleError::whole("/x/a.toml", RuleErrorKind::NotRegular("FIFO"));
        assert_eq!(
            e.to_string(),
            "/x/a.toml: refused: not a regular file but a FIFO"
        );
    }
}
