//! Loading rule files from disk: which files, whether they are safe to read, and how a
//! reload keeps the last good version of a file that went bad.
//!
//! Files: every `*.toml` directly inside each rule directory (names starting with `.`
//! are editor droppings and skipped), directories in the order given, files in byte
//! order of their names. A missing directory holds no rules; one that exists but fails
//! its checks keeps the last good rules of its files on reload. A rule directory may be
//! a symlink (daemon and `check` alike follow it).
//!
//! Safety, before a byte is parsed (as sudo treats sudoers): with an expected owner set
//! (the default when running as root), the directory and each file must be owned by
//! it and not writable by group or others. Symlinks must resolve inside their
//! directory. FIFOs, sockets and devices are refused by type before opening, and the
//! open itself uses `O_NONBLOCK | O_NOFOLLOW`, re-checking the type on the open
//! descriptor, so nothing can make the loader hang. Files over the size limit and
//! invalid UTF-8 are refused. The whole set is bounded too ([`MAX_SET_SIZE`]): the
//! file whose bytes do not fit in what is left is refused, naming the bound, and the
//! files read before it stay loaded.

use std::collections::{BTreeMap, HashMap};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::compile::{compile_file, system_user_lookup, Rule, UserLookup};
use super::error::{RuleError, RuleErrorKind};
use super::format;
use super::matcher::RuleSet;
use super::patterns::RegexBudget;
use crate::infile::{self, InError, Links};

/// Default rule directory.
pub const DEFAULT_RULE_DIR: &str = "/etc/pinnerd.d";
/// Largest rule file accepted.
pub const MAX_FILE_SIZE: u64 = 1 << 20;
/// Most bytes of rule files in force at once, fresh and kept together. A rule costs
/// memory in proportion to its text (a 1 MiB file of one-line rules takes most of the
/// 100 MiB any input may), so the set is bounded as one file is, not file by file.
pub const MAX_SET_SIZE: u64 = 1 << 20;

/// How strict loading is about who owns the files, and how user names resolve.
#[derive(Debug, Clone)]
pub struct LoadPolicy {
    /// `Some(uid)`: directories and files must be owned by `uid` and not writable by
    /// group or others. `None`: no ownership or mode checks.
    pub owner: Option<u32>,
    /// Files larger than this are refused.
    pub max_file_size: u64,
    /// The bytes of every file in force together: the file that does not fit in what
    /// is left is refused.
    pub max_set_size: u64,
    /// Resolves `user = "name"` to a uid.
    pub users: UserLookup,
}

impl LoadPolicy {
    /// The daemon's policy: when running as root, files must be root's and not
    /// group/other-writable; otherwise no ownership checks (an unprivileged daemon
    /// cannot pin anything it does not own anyway).
    pub fn for_current_process() -> LoadPolicy {
        let euid = nix::unistd::geteuid();
        LoadPolicy {
            owner: euid.is_root().then_some(0),
            ..LoadPolicy::unchecked()
        }
    }

    /// No ownership or mode checks; everything else as usual.
    pub fn unchecked() -> LoadPolicy {
        LoadPolicy {
            owner: None,
            max_file_size: MAX_FILE_SIZE,
            max_set_size: MAX_SET_SIZE,
            users: system_user_lookup,
        }
    }

    /// Files must be owned by `uid` and not group/other-writable.
    pub fn owned_by(uid: u32) -> LoadPolicy {
        LoadPolicy {
            owner: Some(uid),
            ..LoadPolicy::unchecked()
        }
    }
}

impl Default for LoadPolicy {
    fn default() -> Self {
        LoadPolicy::for_current_process()
    }
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOutcome {
    /// Loaded; this many rules.
    Loaded(usize),
    /// Rejected whole, nothing from it is in use.
    Rejected,
    /// Rejected, but the rules of its last good version (this many) are still in use.
    KeptPrevious(usize),
}

/// The result of a load or reload: the rules in force, every problem, and per file
/// what happened. Keep it: it is the `previous` of the next [`reload`].
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub rules: RuleSet,
    /// Every problem, files in load order, each file's problems in text order.
    pub errors: Vec<RuleError>,
    /// Every file considered, in load order.
    pub files: Vec<(PathBuf, FileOutcome)>,
    /// The rules now in force from each file (fresh or kept from before), by path.
    good: BTreeMap<PathBuf, Good>,
    /// Files whose last good version could not be kept, and why: said again at each
    /// reload until the file loads, so that a later reload does not make the loss look
    /// like a mere error in the file.
    dropped: BTreeMap<PathBuf, String>,
}

/// One file's rules in force and the bytes of text they came from.
#[derive(Debug, Clone)]
struct Good {
    rules: Arc<[Arc<Rule>]>,
    bytes: u64,
}

impl LoadReport {
    /// No problems at all.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }

    /// The errors as `FILE:LINE:COL: message` strings (for D-Bus `RuleErrors`).
    pub fn error_strings(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }
}

/// Loads every rule file of `dirs` from scratch.
pub fn load_dirs(dirs: &[PathBuf], policy: &LoadPolicy) -> LoadReport {
    reload(dirs, policy, &LoadReport::default())
}

/// Loads every rule file of `dirs`, keeping the rules of `previous` for each file that
/// is still there but is now rejected (a typo saved by an editor must not unpin a
/// production feed handler). Files that disappeared lose their rules. A kept file
/// whose rule names now collide with a freshly loaded file is dropped (the fresh file
/// wins) and says so. A directory that exists but cannot be trusted or read (it became
/// group-writable, changed owner, lost its read permission) keeps the last good rules
/// of its files without reading any of them.
pub fn reload(dirs: &[PathBuf], policy: &LoadPolicy, previous: &LoadReport) -> LoadReport {
    let mut errors = Vec::new();
    let mut files = Vec::new();
    let mut keep = Vec::new();
    for dir in dirs {
        let before = errors.len();
        let listed = list_dir(dir, policy, &mut errors);
        if errors.len() > before {
            keep.extend(
                previous
                    .good
                    .keys()
                    .filter(|p| p.parent() == Some(dir.as_path()))
                    .filter(|p| !listed.iter().any(|(_, f)| f == *p))
                    .cloned(),
            );
        }
        files.extend(listed);
    }
    load_files_inner(&files, &keep, policy, previous, errors)
}

/// Loads the given files (and the `*.toml` files directly inside the directories given,
/// as the daemon reads a rule directory), as `pinnerd check` does: a path that does
/// not exist is an error here.
pub fn load_paths(paths: &[PathBuf], policy: &LoadPolicy) -> LoadReport {
    let mut errors = Vec::new();
    let files = collect_paths(paths, policy, &mut errors);
    load_collected(&files, policy, errors)
}

/// Loads `(dir, file)` pairs from [`collect_paths`]; `errors` (from collecting) come
/// first in the report.
pub fn load_collected(
    files: &[(PathBuf, PathBuf)],
    policy: &LoadPolicy,
    errors: Vec<RuleError>,
) -> LoadReport {
    load_files_inner(files, &[], policy, &LoadReport::default(), errors)
}

/// The files `pinnerd check` would look at: each file given, and every `*.toml`
/// directly inside each directory given (sorted, dot-names skipped) — exactly what the
/// daemon loads from a rule directory; subdirectories are not read (see
/// [`nested_dirs`]). Directory problems (permissions, unreadable) go to `errors`.
pub fn collect_paths(
    paths: &[PathBuf],
    policy: &LoadPolicy,
    errors: &mut Vec<RuleError>,
) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for p in paths {
        // A symlink to a directory is a directory, as the daemon reads it.
        let is_dir = std::fs::metadata(p).is_ok_and(|md| md.is_dir());
        match std::fs::symlink_metadata(p) {
            Err(e) => errors.push(RuleError::whole(p, RuleErrorKind::Io(e.to_string()))),
            Ok(_) if is_dir => out.extend(read_dir_sorted(p, policy, errors, false).0),
            Ok(_) => {
                let parent = p
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                out.push((parent.to_path_buf(), p.clone()));
            }
        }
    }
    out
}

/// The subdirectories (not dot-named) of the directories in `paths` that hold
/// `*.toml` files: neither the daemon nor `check` reads them, and `check` says so.
pub fn nested_dirs(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths.iter().filter(|p| p.is_dir()) {
        let mut ignored = Vec::new();
        let (_, subdirs) = read_dir_sorted(p, &LoadPolicy::unchecked(), &mut ignored, true);
        for d in subdirs {
            let holds_rules = std::fs::read_dir(&d).is_ok_and(|mut e| {
                e.any(|e| e.is_ok_and(|e| e.file_name().as_encoded_bytes().ends_with(b".toml")))
            });
            if holds_rules {
                out.push(d);
            }
        }
    }
    out
}

/// `(dir, file)` pairs of the `*.toml` files directly in `dir`.
fn list_dir(
    dir: &Path,
    policy: &LoadPolicy,
    errors: &mut Vec<RuleError>,
) -> Vec<(PathBuf, PathBuf)> {
    if matches!(std::fs::symlink_metadata(dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    {
        return Vec::new();
    }
    read_dir_sorted(dir, policy, errors, false).0
}

type Listing = (Vec<(PathBuf, PathBuf)>, Vec<PathBuf>);

fn read_dir_sorted(
    dir: &Path,
    policy: &LoadPolicy,
    errors: &mut Vec<RuleError>,
    want_subdirs: bool,
) -> Listing {
    let md = match std::fs::metadata(dir) {
        Ok(md) => md,
        Err(e) => {
            errors.push(RuleError::whole(dir, RuleErrorKind::Io(e.to_string())));
            return (Vec::new(), Vec::new());
        }
    };
    let before = errors.len();
    check_owner(dir, &md, "directory", policy, errors);
    if errors.len() != before {
        return (Vec::new(), Vec::new());
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(RuleError::whole(dir, RuleErrorKind::Io(e.to_string())));
            return (Vec::new(), Vec::new());
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => names.push((e.file_name(), e.file_type().ok())),
            Err(e) => errors.push(RuleError::whole(dir, RuleErrorKind::Io(e.to_string()))),
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    for (name, ty) in names {
        let bytes = name.as_encoded_bytes();
        if bytes.starts_with(b".") {
            continue;
        }
        let path = dir.join(&name);
        if want_subdirs && ty.is_some_and(|t| t.is_dir()) {
            subdirs.push(path);
        } else if bytes.ends_with(b".toml") {
            files.push((dir.to_path_buf(), path));
        }
    }
    (files, subdirs)
}

fn check_owner(
    path: &Path,
    md: &Metadata,
    what: &'static str,
    policy: &LoadPolicy,
    errors: &mut Vec<RuleError>,
) {
    let Some(expected) = policy.owner else {
        return;
    };
    let mode = md.mode() & 0o7777;
    if md.uid() != expected {
        errors.push(RuleError::whole(
            path,
            RuleErrorKind::Owner {
                what,
                uid: md.uid(),
                expected,
            },
        ));
    }
    let bit = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => Some("writable by group and others (S_IWGRP, S_IWOTH)"),
        (true, false) => Some("writable by group (S_IWGRP)"),
        (false, true) => Some("writable by others (S_IWOTH)"),
        (false, false) => None,
    };
    if let Some(bit) = bit {
        errors.push(RuleError::whole(
            path,
            RuleErrorKind::Writable { what, bit, mode },
        ));
    }
}

/// Reads `path` (found in `dir`) after every safety check, as text; the first problem
/// found otherwise.
pub fn read_checked(dir: &Path, path: &Path, policy: &LoadPolicy) -> Result<String, RuleError> {
    read_checked_all(dir, path, policy, policy.max_set_size)
        .map_err(|mut errors| errors.swap_remove(0))
}

/// Like [`read_checked`], with every ownership problem (owner and mode) reported;
/// `set_left`: the bytes the rule set has left (see [`MAX_SET_SIZE`]).
fn read_checked_all(
    dir: &Path,
    path: &Path,
    policy: &LoadPolicy,
    set_left: u64,
) -> Result<String, Vec<RuleError>> {
    let whole = |kind| vec![RuleError::whole(path, kind)];
    let io = |e: std::io::Error| vec![RuleError::whole(path, RuleErrorKind::Io(e.to_string()))];
    let lmd = std::fs::symlink_metadata(path).map_err(io)?;
    let target = if lmd.file_type().is_symlink() {
        let link = std::fs::read_link(path).map_err(io)?;
        let resolved = match std::fs::canonicalize(path) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(whole(RuleErrorKind::DanglingSymlink {
                    target: link.display().to_string(),
                }))
            }
            Err(e) => return Err(io(e)),
        };
        let cdir = std::fs::canonicalize(dir).map_err(io)?;
        if !resolved.starts_with(&cdir) {
            return Err(whole(RuleErrorKind::SymlinkOutside {
                dir: cdir.display().to_string(),
                target: resolved.display().to_string(),
            }));
        }
        resolved
    } else {
        path.to_path_buf()
    };
    let refused = |e: InError| match e {
        InError::Io(e) => io(e),
        InError::NotRegular(what) => whole(RuleErrorKind::NotRegular(what)),
        InError::TooLarge { size, .. } if size > policy.max_file_size => {
            whole(RuleErrorKind::TooLarge {
                size,
                limit: policy.max_file_size,
            })
        }
        InError::TooLarge { size, .. } => whole(RuleErrorKind::SetTooLarge {
            size,
            left: set_left,
            limit: policy.max_set_size,
        }),
        InError::NotUtf8 { offset } => whole(RuleErrorKind::NotUtf8 { offset }),
    };
    // The target is resolved: a symlink now is one swapped in since.
    let (file, md) = infile::open_regular(&target, Links::Refuse).map_err(refused)?;
    let mut errors = Vec::new();
    check_owner(path, &md, "file", policy, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    infile::read_text(file, md.len(), policy.max_file_size.min(set_left)).map_err(refused)
}

/// Parses and compiles one file's text, as a rule set of its own.
pub fn compile_text(
    path: &Path,
    text: &str,
    policy: &LoadPolicy,
) -> Result<Vec<Rule>, Vec<RuleError>> {
    compile_text_within(path, text, policy, &mut RegexBudget::default())
}

/// [`compile_text`] for one file of a rule set: its `cmdline` regexes take from
/// `budget`, which the set's files share.
pub fn compile_text_within(
    path: &Path,
    text: &str,
    policy: &LoadPolicy,
    budget: &mut RegexBudget,
) -> Result<Vec<Rule>, Vec<RuleError>> {
    let parsed = format::parse(text).map_err(|e| vec![RuleError::from_toml(path, text, &e)])?;
    compile_file(path, text, &parsed, policy.users, budget)
}

/// `keep`: files not to read (their directory is untrusted) whose rules in `previous`
/// stay in force. Every file is read first; then the last good version of each file
/// that went bad is kept, where it still fits.
fn load_files_inner(
    files: &[(PathBuf, PathBuf)],
    keep: &[PathBuf],
    policy: &LoadPolicy,
    previous: &LoadReport,
    errors: Vec<RuleError>,
) -> LoadReport {
    let mut load = SetLoad::new(files, keep, policy, previous, errors);
    for (dir, path) in files {
        load.read(dir, path);
    }
    for path in keep {
        load.reject(path);
    }
    // Second pass: keep the last good version of files that went bad.
    for i in std::mem::take(&mut load.rejected) {
        load.keep_previous(i);
    }
    load.finish()
}

/// A rule set being loaded, file by file.
struct SetLoad<'a> {
    policy: &'a LoadPolicy,
    previous: &'a LoadReport,
    outcomes: Vec<(PathBuf, FileOutcome)>,
    good: BTreeMap<PathBuf, Good>,
    /// Rule name → origin, across every file loaded so far.
    names: HashMap<String, String>,
    /// Indices in `outcomes` of the files rejected.
    rejected: Vec<usize>,
    /// Every file's `cmdline` regexes, kept ones included, share one budget.
    budget: RegexBudget,
    /// The set's bytes not yet taken by files in force. Room is held (`held`) for every
    /// file in force before, so that a new file or one that grew cannot push out rules
    /// that were working: a file's own share is released while it is read, held again
    /// when it is rejected (its last good version may be kept), and given up when it is
    /// kept.
    set_left: u64,
    held: u64,
    errors: Vec<RuleError>,
    dropped: BTreeMap<PathBuf, String>,
}

impl<'a> SetLoad<'a> {
    fn new(
        files: &[(PathBuf, PathBuf)],
        keep: &[PathBuf],
        policy: &'a LoadPolicy,
        previous: &'a LoadReport,
        errors: Vec<RuleError>,
    ) -> Self {
        let mut load = SetLoad {
            policy,
            previous,
            outcomes: Vec::new(),
            good: BTreeMap::new(),
            names: HashMap::new(),
            rejected: Vec::new(),
            budget: RegexBudget::default(),
            set_left: policy.max_set_size,
            held: 0,
            errors,
            dropped: BTreeMap::new(),
        };
        load.held = files
            .iter()
            .map(|(_, p)| p)
            .chain(keep)
            .map(|p| load.before(p))
            .sum();
        load
    }

    /// The bytes of `path`'s version in force before.
    fn before(&self, path: &Path) -> u64 {
        self.previous.good.get(path).map_or(0, |g| g.bytes)
    }

    /// Reads, compiles and takes in one file, or rejects it.
    fn read(&mut self, dir: &Path, path: &Path) {
        self.held = self.held.saturating_sub(self.before(path));
        let room = self.set_left.saturating_sub(self.held);
        match self.compiled(dir, path, room) {
            Ok((rules, bytes)) => {
                for r in &rules {
                    self.names.insert(r.name.clone(), r.origin());
                }
                self.set_left -= bytes;
                self.outcomes
                    .push((path.to_path_buf(), FileOutcome::Loaded(rules.len())));
                let rules = rules.into_iter().map(Arc::new).collect();
                self.good.insert(path.to_path_buf(), Good { rules, bytes });
            }
            Err(errs) => {
                self.held += self.before(path);
                self.errors.extend(errs);
                self.reject(path);
            }
        }
    }

    /// One file's rules and its size, when it reads within `room`, compiles and names
    /// no rule another file named first.
    fn compiled(
        &mut self,
        dir: &Path,
        path: &Path,
        room: u64,
    ) -> Result<(Vec<Rule>, u64), Vec<RuleError>> {
        let text = read_checked_all(dir, path, self.policy, room)?;
        let rules = compile_text_within(path, &text, self.policy, &mut self.budget)?;
        let dups: Vec<RuleError> = rules
            .iter()
            .filter_map(|r| {
                self.names.get(&r.name).map(|first| RuleError {
                    path: path.to_path_buf(),
                    at: Some(r.at),
                    kind: RuleErrorKind::DuplicateName {
                        name: r.name.clone(),
                        first: first.clone(),
                    },
                })
            })
            .collect();
        if dups.is_empty() {
            Ok((rules, text.len() as u64))
        } else {
            Err(dups)
        }
    }

    fn reject(&mut self, path: &Path) {
        self.rejected.push(self.outcomes.len());
        self.outcomes
            .push((path.to_path_buf(), FileOutcome::Rejected));
    }

    /// The last good version of the rejected file `outcomes[i]` stays in force, or is
    /// dropped with the reason.
    fn keep_previous(&mut self, i: usize) {
        let path = self.outcomes[i].0.clone();
        let previous = self.previous;
        let Some(old) = previous.good.get(&path) else {
            if let Some(why) = previous.dropped.get(&path) {
                self.errors.push(RuleError::whole(
                    &path,
                    RuleErrorKind::PreviousDropped(format!("{why} (at an earlier reload)")),
                ));
                self.dropped.insert(path, why.clone());
            }
            return;
        };
        self.held = self.held.saturating_sub(old.bytes);
        if let Some(why) = self.why_previous_does_not_fit(old) {
            self.errors.push(RuleError::whole(
                &path,
                RuleErrorKind::PreviousDropped(why.clone()),
            ));
            self.dropped.insert(path, why);
            return;
        }
        for r in old.rules.iter() {
            self.names.insert(r.name.clone(), r.origin());
        }
        self.set_left -= old.bytes;
        self.outcomes[i].1 = FileOutcome::KeptPrevious(old.rules.len());
        self.good.insert(path, old.clone());
    }

    /// Why a file's last good version cannot stay: a rule name another file took since,
    /// the set's bytes, or its `cmdline` regexes (charged to the budget when they fit).
    fn why_previous_does_not_fit(&mut self, old: &Good) -> Option<String> {
        let room = self.set_left.saturating_sub(self.held);
        if let Some(clash) = old.rules.iter().find(|r| self.names.contains_key(&r.name)) {
            return Some(format!(
                "rule {:?} is now defined at {}",
                clash.name, self.names[&clash.name]
            ));
        }
        if old.bytes > room {
            return Some(format!(
                "its {} bytes do not fit in what is left ({room} bytes) of the {} bytes the rule set's files may take together",
                old.bytes, self.policy.max_set_size
            ));
        }
        let before = self.budget;
        let over = old
            .rules
            .iter()
            .filter_map(|r| r.matcher.cmdline.as_ref())
            .find_map(|re| {
                self.budget
                    .charge(re.as_str())
                    .err()
                    .map(|e| (re.as_str(), e))
            });
        let (pattern, _) = over?;
        self.budget = before;
        Some(format!(
            "its cmdline regex {pattern:?} does not fit in what is left ({} bytes) of the {} bytes the rule set's cmdline regexes may take together",
            before.left,
            super::patterns::REGEX_SET_BUDGET
        ))
    }

    fn finish(self) -> LoadReport {
        let all: Vec<Arc<Rule>> = self
            .good
            .values()
            .flat_map(|g| g.rules.iter().cloned())
            .collect();
        LoadReport {
            rules: RuleSet::from_arcs(all),
            errors: self.errors,
            files: self.outcomes,
            good: self.good,
            dropped: self.dropped,
        }
    }
}
