//! `pinnerd-cpuset-partition MODE:PATH` (the binary run under that name): what the
//! helper unit `pinnerd-partition@.service` runs for the daemon. Enabling a remote cpuset partition takes `CAP_SYS_ADMIN`, which
//! the daemon's own unit does not have; the helper has that one capability and writes one
//! word into one file: `isolated` or `member` into `PATH/cpuset.cpus.partition`, `PATH`
//! a unit's cgroup below the system manager's leading slices (escaped as
//! `systemd-escape --path` does: the unit's instance name; the slices it can write are
//! its unit's `ReadWritePaths=`), which for `isolated` must
//! already have the exclusive CPUs the daemon granted it. Everything else — which CPUs,
//! which cgroup, undoing — is the daemon's (see `hold`). Not a subcommand: nothing a
//! user is offered in `--help` or the completions.

use std::process::ExitCode;

use anyhow::{bail, Context};

use crate::hold::partition::{self, Cgroup2};
use crate::hold::systemd::unescape_path;
use crate::sysroot::SysRoot;

/// Whether the helper may make a partition of `cgroup`: a unit's cgroup below the
/// leading slices of the system manager (`/trading.slice/md.service`,
/// `/system.slice/x.service`): the first component a slice other than the root's, and
/// something that is not a slice below the slices. Which slices it can write is its
/// unit's `ReadWritePaths=` (the three of [`partition::WRITABLE_SLICES`] as shipped).
pub fn below_a_slice(cgroup: &str) -> bool {
    let leading = crate::rules::slices_of_cgroup(cgroup).count();
    let parts = cgroup.split('/').filter(|p| !p.is_empty()).count();
    partition::valid_cgroup(cgroup)
        && leading > 0
        && parts > leading
        && !cgroup.starts_with("/-.slice/")
}

/// The name the helper unit runs the binary under (`ExecStart=@/usr/bin/pinnerd
/// pinnerd-cpuset-partition %i`).
pub const HELPER_NAME: &str = "pinnerd-cpuset-partition";

/// The mode and cgroup an instance names, or why it names none.
pub fn parse_instance(instance: &str) -> anyhow::Result<(&str, String)> {
    let Some((mode, escaped)) = instance.split_once(':') else {
        bail!("{instance:?}: not MODE:PATH");
    };
    if !matches!(mode, "isolated" | "member") {
        bail!("{instance:?}: mode {mode:?} is neither isolated nor member");
    }
    // %i gives the path escaped; a path given as is (with its slashes) is taken too.
    let cgroup = if escaped.contains('/') {
        format!("/{}", escaped.trim_start_matches('/'))
    } else {
        match unescape_path(escaped) {
            Some(c) => c,
            None => bail!("{instance:?}: {escaped:?} is not an escaped path"),
        }
    };
    if !below_a_slice(&cgroup) {
        bail!(
            "{instance:?}: cgroup {cgroup:?} is not below the system manager's slices (a unit's cgroup below one or more leading .slice components)"
        );
    }
    Ok((mode, cgroup))
}

/// The helper's arguments after its name: one, `MODE:PATH` (the unit's instance).
pub fn run_helper(args: Vec<std::ffi::OsString>) -> anyhow::Result<ExitCode> {
    let [instance] = args.as_slice() else {
        bail!("usage: {HELPER_NAME} MODE:PATH (isolated or member, the cgroup escaped as systemd-escape --path writes it)");
    };
    let Some(instance) = instance.to_str() else {
        bail!("{instance:?}: not UTF-8");
    };
    let (mode, cgroup) = parse_instance(instance)?;
    let cg2 = Cgroup2::find(&SysRoot::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = cg2.dir(&cgroup);
    if !dir.is_dir() {
        bail!("{}: no such cgroup", dir.display());
    }
    if mode == "isolated" {
        let exclusive = std::fs::read_to_string(dir.join("cpuset.cpus.exclusive"))
            .with_context(|| format!("{}/cpuset.cpus.exclusive", dir.display()))?;
        if exclusive.trim().is_empty() {
            bail!(
                "{}/cpuset.cpus.exclusive is empty: the daemon grants the CPUs before it asks",
                dir.display()
            );
        }
    }
    let state = cg2
        .write_partition(&cgroup, mode)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    outln!("{cgroup}: {state}");
    if state == mode {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("{cgroup}: the kernel made it {state:?}, not {mode}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_modes_of_cgroups_below_the_slices_are_written() {
        assert_eq!(
            parse_instance("isolated:system.slice-md\\x2dfeed.service").unwrap(),
            ("isolated", "/system.slice/md-feed.service".to_string())
        );
        assert_eq!(
            parse_instance("isolated:/system.slice/md-feed.service")
                .unwrap()
                .1,
            "/system.slice/md-feed.service"
        );
        assert_eq!(
            parse_instance("member:user.slice-user\\x2d1000.slice-pinnerd\\x2dx\\x2d1.scope")
                .unwrap()
                .1,
            "/user.slice/user-1000.slice/pinnerd-x-1.scope"
        );
        // A slice of its own (Slice=trading.slice), nested slices too.
        assert_eq!(
            parse_instance("isolated:trading.slice-md.service")
                .unwrap()
                .1,
            "/trading.slice/md.service"
        );
        assert_eq!(
            parse_instance("member:trading.slice-trading\\x2dmd.slice-feed.service")
                .unwrap()
                .1,
            "/trading.slice/trading-md.slice/feed.service"
        );
        for bad in [
            "isolated:trading.slice",
            "isolated:trading.slice-x.slice",
            "isolated:\\x2d.slice-x.service",
            "isolated:init.scope-x.service",
            "root:system.slice-md.service",
            "isolated",
            "isolated:init.scope",
            "isolated:system.slice",
            "isolated:system.slice-..-init.scope",
            "isolated:system.slice-\\xZZ",
            "member:",
        ] {
            assert!(parse_instance(bad).is_err(), "{bad}");
        }
    }
}
