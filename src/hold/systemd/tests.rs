use super::*;
use zbus::Variant;

fn set(list: &str) -> CpuSet {
    list.parse().unwrap()
}

#[test]
fn a_mask_puts_cpu_0_in_bit_0_of_byte_0() {
    assert_eq!(cpus_to_mask(&set("0")), vec![0b0000_0001]);
    assert_eq!(cpus_to_mask(&set("1")), vec![0b0000_0010]);
    assert_eq!(cpus_to_mask(&set("6-7")), vec![0b1100_0000]);
    assert_eq!(cpus_to_mask(&set("8")), vec![0, 1]);
    assert_eq!(cpus_to_mask(&set("0,9,63,64")), {
        let mut m = vec![0u8; 9];
        m[0] = 1;
        m[1] = 0b10;
        m[7] = 0x80;
        m[8] = 1;
        m
    });
}

#[test]
fn the_empty_set_is_the_empty_mask() {
    assert_eq!(cpus_to_mask(&CpuSet::new()), Vec::<u8>::new());
    assert_eq!(mask_to_cpus(&[]), CpuSet::new());
    assert_eq!(mask_to_cpus(&[0, 0, 0]), CpuSet::new());
}

#[test]
fn masks_decode_with_trailing_zero_bytes() {
    assert_eq!(mask_to_cpus(&[0b1100_0000]), set("6-7"));
    assert_eq!(mask_to_cpus(&[0b11, 0, 0, 0, 0, 0, 0, 0]), set("0-1"));
    assert_eq!(mask_to_cpus(&[0, 0, 0, 0, 0, 0, 0, 0, 0b101]), set("64,66"));
}

#[test]
fn masks_round_trip() {
    for list in ["0", "0-3,8", "1,7-9,15-16,100", "4095", "0-8191"] {
        let cpus = set(list);
        let mask = cpus_to_mask(&cpus);
        assert_ne!(mask.last(), Some(&0), "{list}: no trailing zero byte");
        assert_eq!(mask_to_cpus(&mask), cpus, "{list}");
    }
}

#[test]
fn a_mask_past_the_largest_cpu_id_is_malformed() {
    let mut mask = vec![0u8; (MAX_CPU_ID as usize + 1) / 8 + 1];
    assert!(checked_mask("Get AllowedCPUs of x.service", &mask).is_ok());
    mask[(MAX_CPU_ID as usize + 1) / 8] = 1;
    let err = checked_mask("Get AllowedCPUs of x.service", &mask).unwrap_err();
    assert!(
        err.to_string().contains("Get AllowedCPUs of x.service"),
        "{err}"
    );
}

#[test]
fn unit_names_pick_their_interface() {
    for (name, interface) in [
        ("md-feed.service", "org.freedesktop.systemd1.Service"),
        ("session-3.scope", "org.freedesktop.systemd1.Scope"),
        ("system.slice", "org.freedesktop.systemd1.Slice"),
        ("-.slice", "org.freedesktop.systemd1.Slice"),
        ("getty@tty1.service", "org.freedesktop.systemd1.Service"),
        ("dbus.socket", "org.freedesktop.systemd1.Socket"),
        ("home.mount", "org.freedesktop.systemd1.Mount"),
        ("dev-sda2.swap", "org.freedesktop.systemd1.Swap"),
        (r"pinnerd-a\x2fb-1.scope", "org.freedesktop.systemd1.Scope"),
    ] {
        assert_eq!(unit_interface(name).unwrap(), interface, "{name}");
    }
}

#[test]
fn bad_unit_names_are_refused() {
    let long = format!("{}.service", "a".repeat(UNIT_NAME_MAX));
    for name in [
        "",
        ".service",
        "@x.service",
        "a/b.service",
        "../../x.service",
        "x.target",
        "x.timer",
        "x",
        "x service",
        "x.service\n",
        "é.service",
        long.as_str(),
    ] {
        match unit_interface(name) {
            Err(UnitError::Refused { what, .. }) => assert!(what.contains("unit name")),
            other => panic!("{name:?}: {other:?}"),
        }
    }
    let longest = format!("{}.service", "a".repeat(UNIT_NAME_MAX - ".service".len()));
    assert!(unit_interface(&longest).is_ok());
}

#[test]
fn scope_names_escape_as_systemd_escape_does() {
    assert_eq!(scope_name("md-feed", 42), r"pinnerd-md\x2dfeed-42.scope");
    assert_eq!(scope_name("a/b c", 7), r"pinnerd-a-b\x20c-7.scope");
    assert_eq!(scope_name(".dot.x", 1), r"pinnerd-\x2edot.x-1.scope");
    assert_eq!(scope_name("a:b_c.d9", 1), "pinnerd-a:b_c.d9-1.scope");
    assert_eq!(scope_name("é", 1), r"pinnerd-\xc3\xa9-1.scope");
    assert_eq!(
        scope_name("back\\slash", 1),
        r"pinnerd-back\x5cslash-1.scope"
    );
    assert_eq!(scope_name("", 1), "pinnerd--1.scope");
}

#[test]
fn scope_names_are_valid_units_however_long_the_rule() {
    for rule in [
        "x".repeat(1000),
        "-".repeat(1000),
        "é".repeat(300),
        "a-".repeat(200),
    ] {
        for pid in [1, u32::MAX] {
            let name = scope_name(&rule, pid);
            assert!(name.len() <= UNIT_NAME_MAX, "{} bytes", name.len());
            assert!(name.ends_with(&format!("-{pid}.scope")), "{name}");
            assert_eq!(
                unit_interface(&name).unwrap(),
                "org.freedesktop.systemd1.Scope",
                "{name}"
            );
            // Cut between escapes, never inside one.
            for (i, _) in name.match_indices('\\') {
                let escape = name.as_bytes().get(i + 1..i + 4).unwrap_or_default();
                assert!(
                    escape.len() == 3
                        && escape[0] == b'x'
                        && escape[1..].iter().all(u8::is_ascii_hexdigit),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn pid_0_and_non_slices_are_refused_before_the_bus() {
    assert!(matches!(check_pid(0), Err(UnitError::Refused { .. })));
    assert!(check_pid(1).is_ok());
    assert!(check_slice("system.slice").is_ok());
    assert!(matches!(
        check_slice("system.service"),
        Err(UnitError::Refused { .. })
    ));
}

#[test]
fn an_unset_property_is_left_out_and_an_empty_set_resets() {
    let cpus = set("1");
    let props = mask_properties("AllowedCPUs", Some(&cpus), "AllowedMemoryNodes", None);
    assert_eq!(props.len(), 1);
    assert_eq!(props[0].0, "AllowedCPUs");
    assert_eq!(props[0].1, Variant::from(vec![0b10u8]));
    let empty = CpuSet::new();
    let props = mask_properties("AllowedCPUs", None, "AllowedMemoryNodes", Some(&empty));
    assert_eq!(props.len(), 1);
    assert_eq!(props[0].1.value_signature().to_string(), "ay");
    assert_eq!(props[0].1, Variant::from(Vec::<u8>::new()));
}

#[test]
fn paths_escape_as_systemd_escape_path_does_and_come_back() {
    for (path, escaped) in [
        (
            "/system.slice/vmwork-iso.service",
            "system.slice-vmwork\\x2diso.service",
        ),
        (
            "/user.slice/user-1000.slice/pinnerd-feed-20.scope",
            "user.slice-user\\x2d1000.slice-pinnerd\\x2dfeed\\x2d20.scope",
        ),
    ] {
        assert_eq!(escape_path(path), escaped);
        assert_eq!(unescape_path(escaped).as_deref(), Some(path));
    }
    assert_eq!(unescape_path("a\\xZZ"), None);
    assert_eq!(unescape_path("a\\x4"), None);
    assert_eq!(
        partition_helper_unit("isolated", "/system.slice/md.service").as_deref(),
        Some("pinnerd-partition@isolated:system.slice-md.service.service")
    );
    assert_eq!(
        partition_helper_unit("member", &format!("/{}", "a".repeat(300))),
        None
    );
}
