//! The settings and rules in force in [`State`](super::State), as last loaded.
//!
//! Owns: loading the rules from their directories (each bad file keeping its last good
//! rules) and reading the settings file again (the previous settings kept when it is
//! bad), saying so in the log. Must not touch: what follows a reload (the plan, the
//! timetable): the state hands the new values on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::rules::{self, LoadPolicy, LoadReport};
use crate::settings::{Settings, SettingsError};

/// The settings and rules in force, as last loaded.
#[derive(Debug)]
pub(super) struct Loaded {
    pub(super) settings: Settings,
    /// An error in the settings file at the last reload (the previous settings stay).
    pub(super) settings_error: Option<SettingsError>,
    pub(super) policy: LoadPolicy,
    pub(super) rules: LoadReport,
}

impl Loaded {
    /// `settings` in force, no rules loaded yet.
    pub(super) fn new(settings: Settings) -> Loaded {
        Loaded {
            settings,
            settings_error: None,
            policy: LoadPolicy::for_current_process(),
            rules: LoadReport::default(),
        }
    }

    pub(super) fn rule_errors(&self) -> Vec<String> {
        self.settings_error
            .iter()
            .map(SettingsError::to_string)
            .chain(self.rules.error_strings())
            .collect()
    }

    /// How often a process's memory may follow its CPUs (`[memory] follow-interval`).
    pub(super) fn follow_interval(&self) -> Duration {
        self.settings.memory.follow_interval.0
    }

    /// What a rule does while a sched_ext scheduler runs (`[sched-ext] policy`).
    pub(super) fn sched_ext_policy(&self) -> crate::sched_ext::Policy {
        self.settings.sched_ext.policy
    }

    /// The `[measure]` settings in force.
    pub(super) fn measure(&self) -> &crate::settings::MeasureSettings {
        &self.settings.measure
    }

    /// How often processes are rescanned, if at all (`[watch] rescan-interval`).
    pub(super) fn rescan_every(&self) -> Option<Duration> {
        self.settings.watch.rescan_interval.period()
    }

    /// The rule directories: `--rules` if given, else the settings' `rule-dirs`.
    pub(super) fn rule_dirs(&self, given: Option<&Vec<PathBuf>>) -> Vec<PathBuf> {
        given
            .cloned()
            .unwrap_or_else(|| self.settings.rule_dirs.clone())
    }

    /// Loads the rules in `dirs` again, keeping each bad file's last good rules.
    pub(super) fn load_rules(&mut self, dirs: &[PathBuf]) {
        self.rules = rules::reload(dirs, &self.policy, &self.rules);
        for e in &self.rules.errors {
            tracing::warn!(error = %e, "rule file problem: {e}");
        }
        tracing::info!(
            rules = self.rules.rules.len(),
            errors = self.rules.errors.len(),
            "rules loaded: {}, {}",
            crate::words::count(self.rules.rules.len(), "rule"),
            crate::words::count(self.rules.errors.len(), "error")
        );
    }

    /// Reads the settings file at `path` again; a bad file keeps the previous settings
    /// (and its error is kept to be shown). The new settings when they changed.
    pub(super) fn reload_settings(&mut self, path: &Path) -> Option<&Settings> {
        match Settings::load_or_default(path, &self.policy) {
            Ok(s) => {
                self.settings_error = None;
                if s != self.settings {
                    tracing::info!(
                        path = %path.display(),
                        "settings changed: {}",
                        path.display()
                    );
                    self.settings = s;
                    return Some(&self.settings);
                }
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "settings not reloaded ({e}); keeping the previous ones");
                self.settings_error = Some(e);
                None
            }
        }
    }
}
