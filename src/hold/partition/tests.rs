use super::*;

/// A fake hierarchy: the root with cpuset, `system.slice` and one service.
fn tree(isolated_file: bool) -> (tempfile::TempDir, Cgroup2) {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().to_path_buf();
    let m = m.as_path();
    std::fs::write(m.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
    if isolated_file {
        std::fs::write(m.join("cpuset.cpus.isolated"), "\n").unwrap();
    }
    for cg in ["system.slice", "system.slice/md.service"] {
        let d = m.join(cg);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpuset.cpus.exclusive"), "\n").unwrap();
        std::fs::write(d.join("cpuset.cpus.partition"), "member\n").unwrap();
        std::fs::write(d.join("cgroup.procs"), "").unwrap();
    }
    (dir, Cgroup2::at(m))
}

fn read(c: &Cgroup2, cg: &str, f: &str) -> String {
    std::fs::read_to_string(c.dir(cg).join(f))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn ancestors_are_listed_top_down_without_the_root() {
    assert_eq!(
        ancestors("/a.slice/b.service"),
        vec!["/a.slice", "/a.slice/b.service"]
    );
    assert!(ancestors("/").is_empty());
    assert!(!valid_cgroup("/a/../b"));
    assert!(!valid_cgroup("/"));
    assert!(!valid_cgroup("a/b"));
    assert!(valid_cgroup("/a/b"));
}

#[test]
fn a_partition_grants_down_writes_isolated_and_undoes_only_its_own_cpus() {
    let (_d, c) = tree(true);
    // Another partition's CPU is already granted to the slice.
    std::fs::write(c.dir("/system.slice").join("cpuset.cpus.exclusive"), "2\n").unwrap();
    let cpus: CpuSet = "6-7".parse().unwrap();
    let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2,6-7");
    assert_eq!(
        read(&c, "/system.slice/md.service", "cpuset.cpus.exclusive"),
        "6-7"
    );
    assert_eq!(
        read(&c, "/system.slice/md.service", "cpuset.cpus.partition"),
        "isolated"
    );
    assert_eq!(p.before, "member");
    assert_eq!(p.granted.len(), 2);
    assert!(c.holds(&p));
    assert!(c.undo(&p).is_empty());
    assert_eq!(
        read(&c, "/system.slice/md.service", "cpuset.cpus.partition"),
        "member"
    );
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2");
    assert_eq!(
        read(&c, "/system.slice/md.service", "cpuset.cpus.exclusive"),
        ""
    );
}

/// The unit gone, systemd turns the cpuset controller off in its slice when no unit
/// there needs it: the slice's cpuset files vanish with what was granted to it.
#[test]
fn a_grant_to_a_slice_whose_cpuset_files_are_gone_is_undone_already() {
    let (_d, c) = tree(true);
    let cpus: CpuSet = "6-7".parse().unwrap();
    let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
    std::fs::remove_dir_all(c.dir("/system.slice/md.service")).unwrap();
    for f in ["cpuset.cpus.exclusive", "cpuset.cpus.exclusive.effective"] {
        let _ = std::fs::remove_file(c.dir("/system.slice").join(f));
    }
    assert_eq!(c.ungrant(&p), vec![]);
}

#[test]
fn what_the_kernel_cannot_do_is_said_and_nothing_is_left_written() {
    let (_d, c) = tree(false);
    let cpus: CpuSet = "6-7".parse().unwrap();
    let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
    assert!(matches!(e, Unable::NoRemotePartitions { .. }), "{e}");
    assert!(e.to_string().contains("6.7"), "{e}");
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");

    let (_d, c) = tree(true);
    std::fs::write(c.mount().join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
    let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
    assert!(matches!(e, Unable::CpusetNotOnV2 { .. }), "{e}");

    let (_d, c) = tree(true);
    std::fs::remove_file(
        c.dir("/system.slice/md.service")
            .join("cpuset.cpus.exclusive"),
    )
    .unwrap();
    let e = c.isolate("/system.slice/md.service", &cpus).unwrap_err();
    assert_eq!(
        e,
        Unable::NoCpuset {
            cgroup: "/system.slice/md.service".into()
        }
    );
    // The slice's grant, made before the failure, was taken back.
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn an_undo_writes_member_whatever_the_cgroup_read_before() {
    // A partition pinnerd left (its record gone): the next grant reads it as the
    // state before, which must not be what the undo puts back.
    let (_d, c) = tree(true);
    let cg = "/system.slice/md.service";
    std::fs::write(c.dir(cg).join("cpuset.cpus.partition"), "isolated\n").unwrap();
    let cpus: CpuSet = "6-7".parse().unwrap();
    let p = c.isolate(cg, &cpus).unwrap();
    assert_eq!(p.before, "isolated");
    assert!(c.undo(&p).is_empty());
    assert_eq!(read(&c, cg, "cpuset.cpus.partition"), "member");
}

#[test]
fn a_partition_no_record_names_is_found_with_its_grants() {
    let (_d, c) = tree(true);
    let cg = "/system.slice/md.service";
    assert_eq!(c.found_partition(cg), None);
    // Another partition's CPU 2 in the slice stays out of what is found.
    std::fs::write(
        c.dir("/system.slice").join("cpuset.cpus.exclusive"),
        "2,4-5\n",
    )
    .unwrap();
    std::fs::write(c.dir(cg).join("cpuset.cpus.exclusive"), "4-5\n").unwrap();
    std::fs::write(c.dir(cg).join("cpuset.cpus.partition"), "isolated\n").unwrap();
    let p = c.found_partition(cg).unwrap();
    assert_eq!(p.cpus, "4-5".parse().unwrap());
    assert_eq!(
        p.granted,
        vec![
            Granted {
                cgroup: "/system.slice".into(),
                added: "4-5".parse().unwrap()
            },
            Granted {
                cgroup: cg.into(),
                added: "4-5".parse().unwrap()
            },
        ]
    );
    assert!(c.undo(&p).is_empty());
    assert_eq!(read(&c, cg, "cpuset.cpus.partition"), "member");
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "2");
    assert_eq!(read(&c, cg, "cpuset.cpus.exclusive"), "");
}

#[test]
fn an_undo_of_a_cgroup_that_is_gone_is_nothing_to_undo() {
    let (_d, c) = tree(true);
    let cpus: CpuSet = "6".parse().unwrap();
    let p = c.isolate("/system.slice/md.service", &cpus).unwrap();
    std::fs::remove_dir_all(c.dir("/system.slice/md.service")).unwrap();
    assert!(!c.holds(&p));
    assert!(c.undo(&p).is_empty());
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
}

/// The daemon's mount table as systemd 257 makes it for the shipped unit: the
/// hierarchy read-only (ProtectControlGroups=yes), the three slices bound writable.
const DAEMON_MOUNTINFO: &str = "\
24 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
25 24 0:22 / /sys ro,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
27 26 0:23 /system.slice /sys/fs/cgroup/system.slice rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
28 26 0:23 /user.slice /sys/fs/cgroup/user.slice rw,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw,nsdelegate
29 24 0:40 / /run/a\\040b ro,relatime - tmpfs tmpfs rw
30 26 0:23 /system.slice/x.service /sys/fs/cgroup/system.slice/x.service ro,relatime - cgroup2 cgroup2 rw
";

#[test]
fn read_only_files_are_told_by_the_mount_on_top_of_them() {
    let ro = |p: &str| read_only_in(DAEMON_MOUNTINFO, Path::new(p));
    assert!(ro("/sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive"));
    assert!(ro("/sys/fs/cgroup/cgroup.subtree_control"));
    assert!(!ro(
        "/sys/fs/cgroup/system.slice/md.service/cpuset.cpus.partition"
    ));
    assert!(!ro("/sys/fs/cgroup/user.slice/cpuset.cpus.exclusive"));
    // A component is a whole name: system.slicex is not below system.slice.
    assert!(ro("/sys/fs/cgroup/system.slicex/cpuset.cpus.exclusive"));
    // A mount on top of a writable one, and an escaped mount point.
    assert!(ro(
        "/sys/fs/cgroup/system.slice/x.service/cpuset.cpus.partition"
    ));
    assert!(ro("/run/a b/c"));
    assert!(!ro("/var/lib/x"));
    assert!(!read_only_in("", Path::new("/sys")));

    let (_d, c) = tree(true);
    let shipped = MountView::Shipped {
        mount: c.mount().to_path_buf(),
    };
    assert_eq!(
        c.writable_on_the_way("/system.slice/md.service", &shipped),
        Ok(())
    );
    let e = c
        .writable_on_the_way("/trading.slice/md.service", &shipped)
        .unwrap_err();
    assert_eq!(
        e,
        Unable::ReadOnly {
            path: c.dir("/trading.slice").join("cpuset.cpus.exclusive"),
            slice: c.dir("trading.slice"),
        }
    );
    assert!(e.to_string().contains("ReadWritePaths=-"), "{e}");
    // The daemon's own view of a writable fixture tree: nothing read-only.
    assert_eq!(
        c.writable_on_the_way("/trading.slice/md.service", &MountView::Here),
        Ok(())
    );
    // A file not made yet is judged by the directory it will be made in.
    let slice = c.dir("trading.slice");
    std::fs::create_dir_all(&slice).unwrap();
    let file = slice.join("cpuset.cpus.exclusive");
    assert_eq!(existing(&file), slice.as_path());
    std::fs::write(&file, "").unwrap();
    assert_eq!(existing(&file), file.as_path());
}

#[test]
fn the_shipped_units_allow_the_slices_the_dry_run_assumes() {
    for unit in [
        include_str!("../../../systemd/pinnerd.service"),
        include_str!("../../../systemd/pinnerd-partition@.service"),
    ] {
        let paths: Vec<&str> = unit
            .lines()
            .filter_map(|l| l.strip_prefix("ReadWritePaths="))
            .flat_map(str::split_whitespace)
            .filter(|p| p.trim_start_matches('-').starts_with("/sys/fs/cgroup"))
            .collect();
        let want: Vec<String> = WRITABLE_SLICES
            .iter()
            .map(|s| format!("-/sys/fs/cgroup/{s}"))
            .collect();
        assert_eq!(paths, want);
    }
}

#[test]
fn the_hierarchy_is_found_where_systemd_mounts_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::with_sys(dir.path());
    assert_eq!(Cgroup2::find(&root), Err(Unable::NoCgroup2));
    std::fs::create_dir_all(dir.path().join("fs/cgroup/unified")).unwrap();
    std::fs::write(dir.path().join("fs/cgroup/unified/cgroup.controllers"), "").unwrap();
    assert_eq!(
        Cgroup2::find(&root).unwrap().mount(),
        dir.path().join("fs/cgroup/unified")
    );
    std::fs::write(dir.path().join("fs/cgroup/cgroup.controllers"), "cpuset").unwrap();
    assert_eq!(
        Cgroup2::find(&root).unwrap().mount(),
        dir.path().join("fs/cgroup")
    );
}

#[test]
fn kernels_without_the_dying_partition_fix_are_refused_by_release() {
    for bad in [
        "6.7.0",
        "6.8.0-87-generic",
        "6.11.11-arch1-1",
        "6.12.22+deb13-cloud-amd64",
        "6.13.11",
        "6.14.2-300.fc42.x86_64",
    ] {
        assert!(unsafe_kernel(bad).is_some(), "{bad}");
    }
    for good in [
        "6.12.24",
        "6.12.117+deb13-cloud-amd64",
        "6.13.12",
        "6.14.3",
        "6.15.0",
        "7.0.1",
        "6.6.58",
        "5.14.0-570.el9.x86_64",
        "not a release",
    ] {
        assert!(unsafe_kernel(good).is_none(), "{good}");
    }
    let (_d, c) = tree(true);
    let c = c.on_release(Some("6.12.22+deb13-amd64".into()));
    let e = c
        .isolate("/system.slice/md.service", &"6".parse().unwrap())
        .unwrap_err();
    assert!(matches!(e, Unable::UnsafeKernel { .. }), "{e}");
    assert!(e.to_string().contains("6.12.24"), "{e}");
    assert_eq!(read(&c, "/system.slice", "cpuset.cpus.exclusive"), "");
}

#[test]
fn populated_is_read_from_cgroup_events_and_a_cgroup_gone_is_empty() {
    let (_d, c) = tree(true);
    let cg = "/system.slice/md.service";
    assert_eq!(c.populated_events(cg), None, "no cgroup.events: not known");
    std::fs::write(c.events_file(cg), "populated 1\nfrozen 0\n").unwrap();
    assert_eq!(c.populated_events(cg), Some(true));
    std::fs::write(c.events_file(cg), "populated 0\nfrozen 0\n").unwrap();
    assert_eq!(c.populated_events(cg), Some(false));
    std::fs::remove_dir_all(c.dir(cg)).unwrap();
    assert_eq!(c.populated_events(cg), Some(false));
}
