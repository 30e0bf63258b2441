//! `pinnerd check [PATH…]`: validates rule files and directories the way the daemon
//! loads them (the `*.toml` files directly inside a directory; a subdirectory holding
//! some is named as not read), prints every problem, exits 0 only when all is valid.
//! A file named `pinnerd.toml` is checked as the daemon settings file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::exit::ConfigInvalid;
use crate::rules::{self, FileOutcome, LoadPolicy};
use crate::settings::Settings;
use crate::words::count;

/// The settings file's name; `check` validates files with this name as settings.
pub const SETTINGS_FILE_NAME: &str = "pinnerd.toml";

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Rule files or directories (their `*.toml` files directly inside, as the daemon reads them).
    #[arg(default_value = rules::DEFAULT_RULE_DIR)]
    pub paths: Vec<PathBuf>,
    /// Skip the ownership and permission checks the daemon makes when running as root.
    #[arg(long)]
    pub no_permissions: bool,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let policy = if args.no_permissions {
        LoadPolicy::unchecked()
    } else {
        LoadPolicy::for_current_process()
    };
    // The daemon's own rule directory not existing yet is how the daemon sees it: no
    // rules, read once it appears. Any other path that does not exist is a problem.
    let missing: Vec<&PathBuf> = args
        .paths
        .iter()
        .filter(|p| {
            matches!(std::fs::symlink_metadata(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        })
        .collect();
    if args.paths.len() == 1
        && missing.len() == 1
        && *missing[0] == Path::new(rules::DEFAULT_RULE_DIR)
    {
        outln!(
            "ok: {} does not exist: no rules; the daemon runs with none and reads the directory once it appears",
            missing[0].display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut errors = Vec::new();
    let collected = rules::collect_paths(&args.paths, &policy, &mut errors);
    let (settings, rule_files): (Vec<_>, Vec<_>) = collected
        .into_iter()
        .partition(|(_, f)| f.file_name().is_some_and(|n| n == SETTINGS_FILE_NAME));
    let report = rules::load_collected(&rule_files, &policy, errors);
    let mut problems: Vec<String> = report.error_strings();
    let mut rejected = report
        .files
        .iter()
        .filter(|(_, o)| !matches!(o, FileOutcome::Loaded(_)))
        .count();
    for (_, path) in &settings {
        if let Err(e) = Settings::load(path, &policy) {
            problems.push(e.to_string());
            rejected += 1;
        }
    }
    for p in &problems {
        eprintln!("{p}");
    }
    let files = report.files.len() + settings.len();
    for d in rules::nested_dirs(&args.paths) {
        outln!(
            "note: {}: not read: the daemon loads only the *.toml files directly inside a rule directory",
            d.display()
        );
    }
    for rule in report.rules.rules() {
        if let Some(note) = crate::manager::protect::broad_rule_note(rule) {
            outln!("{note}");
        }
    }
    for line in machine_lines(&report.rules) {
        outln!("{line}");
    }
    for doubt in doubts_here(&report.rules) {
        outln!("{doubt}");
    }
    if problems.is_empty() {
        outln!(
            "ok: {}, {}",
            count(files, "file"),
            count(report.rules.len(), "rule")
        );
        Ok(ExitCode::SUCCESS)
    } else {
        let mut what = Vec::new();
        if !missing.is_empty() {
            what.push(format!("{} not found", count(missing.len(), "path")));
        }
        if files > 0 || missing.is_empty() {
            what.push(format!("{rejected} of {} rejected", count(files, "file")));
        }
        Err(ConfigInvalid(format!(
            "{} ({})",
            count(problems.len(), "problem"),
            what.join(", ")
        ))
        .into())
    }
}

/// What `check` says of the rules on this machine, not as errors: why an isolate rule
/// cannot isolate here (the kernel; a running unit in a slice the daemon may not write,
/// as the daemon will say it), and what only the boot gives the CPUs an exclusive rule
/// holds.
fn machine_lines(rules: &rules::RuleSet) -> Vec<String> {
    let mut lines = Vec::new();
    // Isolation depends on the running kernel: said for this machine, not an error
    // (the rule still works, merely exclusive).
    let cannot = crate::hold::cannot_isolate_here(&crate::sysroot::SysRoot::default());
    for rule in rules.rules() {
        let isolates = rule.isolate || rule.threads.iter().any(|t| t.isolate);
        if let (true, Some(why)) = (isolates, &cannot) {
            lines.push(format!(
                "{}: warning: rule {}: isolate = true cannot isolate on this machine: {why}; the rule stays merely exclusive",
                rule.origin(),
                rule.name
            ));
        }
    }
    // A running unit an isolating rule names, in a slice the daemon may not write: said
    // as the daemon will say it.
    if cannot.is_none() {
        for rule in rules.rules() {
            let isolates = rule.isolate || rule.threads.iter().any(|t| t.isolate);
            let Some(units) = rule.matcher.unit.as_ref().filter(|_| isolates) else {
                continue;
            };
            for (unit, cgroup) in running_units(units) {
                if let Some(why) = crate::hold::cannot_write_partition(
                    &crate::sysroot::SysRoot::default(),
                    &cgroup,
                ) {
                    // The words the daemon's report of the hold will have.
                    let short = crate::hold::Shortfall::NotIsolated(why);
                    lines.push(format!(
                        "{}: warning: rule {}: unit {unit}: {short}",
                        rule.origin(),
                        rule.name
                    ));
                }
            }
        }
    }
    // What only the boot gives the CPUs an exclusive rule holds: a note, never an error.
    let boot = crate::boot_cpus::read(&crate::sysroot::SysRoot::default());
    for rule in rules.rules() {
        if let Some(note) = boot_note(rule, &boot) {
            lines.push(note);
        }
    }
    lines
}

/// `check`'s note on an `exclusive` rule (or one with an `exclusive` thread entry): of the
/// CPUs it names, which the boot made `nohz_full` and `rcu_nocbs` and what that would add;
/// of CPUs the plan chooses, which of this machine's CPUs are so. `None` for a rule that
/// holds no CPU.
fn boot_note(rule: &rules::Rule, boot: &crate::boot_cpus::BootCpus) -> Option<String> {
    let held: Vec<&rules::PlacementRequest> = rule
        .place
        .iter()
        .chain(rule.threads.iter().map(|t| &t.request))
        .filter(|r| r.exclusive)
        .collect();
    if held.is_empty() {
        return None;
    }
    let named = held
        .iter()
        .try_fold(crate::cpuset::CpuSet::new(), |all, r| match &r.target {
            rules::CpuTarget::Cpus(c) => Some(all.union(c)),
            rules::CpuTarget::Count(_) => None,
        });
    let line = match named {
        Some(cpus) => boot.said(&cpus)?,
        None => format!(
            "boot: it holds CPUs the plan chooses (explain names them); on this machine {}",
            boot.machine_words()
        ),
    };
    Some(format!(
        "{}: note: rule {}: {line}",
        rule.origin(),
        rule.name
    ))
}

/// The units running now below the system manager's leading slices (never inside a
/// unit: a user's manager, a container) whose names `units` matches, with the cgroup a
/// hold of them makes a partition of (for a slice, a unit of it). At most
/// [`crate::hold::partition::WALK_LIMIT`] cgroups are read.
fn running_units(units: &crate::rules::GlobList) -> Vec<(String, String)> {
    let root = crate::sysroot::SysRoot::default();
    let Ok(c) = crate::hold::partition::Cgroup2::find(&root) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut stack = vec![String::new()];
    let mut seen = 0;
    while let Some(cg) = stack.pop() {
        seen += 1;
        if seen > crate::hold::partition::WALK_LIMIT {
            break;
        }
        let Ok(entries) = std::fs::read_dir(c.dir(&cg)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let path = format!("{cg}/{name}");
            let slice = name.ends_with(".slice");
            if units.is_match(&name)
                && (slice || name.ends_with(".service") || name.ends_with(".scope"))
            {
                let held = if slice {
                    format!("{path}/unit.service")
                } else {
                    path.clone()
                };
                found.push((name.clone(), held));
            }
            if slice {
                stack.push(path);
            }
        }
    }
    found
}

/// Rules that cannot mean what they say on this machine, planned on its topology (no
/// matrix, no processes); nothing when its topology cannot be read. Not the daemon's
/// plan (`plan::making`): `check` reads no settings or state, so the rules are planned
/// alone on the usable CPUs.
fn doubts_here(rules: &crate::rules::RuleSet) -> Vec<crate::plan::doubts::Doubt> {
    let root = crate::sysroot::SysRoot::default();
    let Ok(topology) = crate::topology::Topology::discover(&root) else {
        return Vec::new();
    };
    let Ok(domains) = crate::domains::Domains::from_topology(&topology) else {
        return Vec::new();
    };
    let cpus = crate::plan::Cpus {
        online: topology.usable(),
        reserved: crate::cpuset::CpuSet::new(),
    };
    let plan = crate::plan::Plan::new(rules, &cpus, Some(&domains));
    crate::plan::doubts::doubts(&plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot_cpus::{BootCpus, Known};
    use crate::cpuset::CpuSet;

    fn rule(text: &str) -> rules::Rule {
        let policy = LoadPolicy::unchecked();
        rules::compile_text(Path::new("r.toml"), text, &policy)
            .unwrap()
            .remove(0)
    }

    fn boot(nohz_full: &str) -> BootCpus {
        let set: CpuSet = nohz_full.parse().unwrap();
        BootCpus {
            nohz_full: Known::Cpus(set.clone()),
            rcu_nocbs: Known::Cpus(set),
        }
    }

    /// A rule's held CPUs get a note on what only the boot gives them; a rule that holds
    /// nothing gets none.
    #[test]
    fn check_notes_the_boot_s_part_for_held_cpus_only() {
        let exclusive = rule(
            "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md\"\n[rule.place]\ncpus = \"6-7\"\nexclusive = true\n",
        );
        let note = boot_note(&exclusive, &boot("7")).unwrap();
        assert!(note.starts_with("r.toml:2:8: note: rule md: boot: held CPUs 6-7: nohz_full on 7 only (nohz_full= with 6 too would stop the scheduler tick"), "{note}");
        assert!(
            note.ends_with("only the kernel command line sets either, at boot"),
            "{note}"
        );
        let note = boot_note(&exclusive, &boot("0-7")).unwrap();
        assert!(
            note.ends_with("nohz_full on all; rcu_nocbs on all"),
            "{note}"
        );
        let count = rule(
            "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md\"\n[rule.place]\ncount = 2\nexclusive = true\n",
        );
        let note = boot_note(&count, &boot("")).unwrap();
        assert!(note.contains("holds CPUs the plan chooses (explain names them); on this machine no CPU is nohz_full, no CPU is rcu_nocbs"), "{note}");
        let shared = rule(
            "[[rule]]\nname = \"md\"\n[rule.match]\ncomm = \"md\"\n[rule.place]\ncpus = \"6-7\"\n",
        );
        assert_eq!(boot_note(&shared, &boot("")), None);
    }
}
