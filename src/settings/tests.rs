use super::*;

fn parse(text: &str) -> Result<Settings, String> {
    Settings::parse(Path::new("s.toml"), text).map_err(|e| e.to_string())
}

#[test]
fn nri_takes_the_contracts_keys_and_checks_index_and_name() {
    let s = parse(
        "[nri]\nenable = \"on\"\nsocket = \"/run/x.sock\"\nindex = \"05\"\nname = \"pin-1\"\n",
    )
    .unwrap();
    assert_eq!(s.nri.enable, crate::nri::Enable::On);
    let c = s.nri.config();
    assert_eq!(c.socket, PathBuf::from("/run/x.sock"));
    assert_eq!(
        (c.registration.index.as_str(), c.registration.name.as_str()),
        ("05", "pin-1")
    );
    assert_eq!(Settings::default().nri.enable, crate::nri::Enable::Auto);
    let e = parse("[nri]\nindex = \"5\"\n").unwrap_err();
    assert!(
        e.contains("s.toml:2:9") && e.contains("not two digits"),
        "{e}"
    );
    let e = parse("[nri]\nname = \"a b\"\n").unwrap_err();
    assert!(e.contains("may only use letters"), "{e}");
    let e = parse("[nri]\nenable = \"maybe\"\n").unwrap_err();
    assert!(e.contains("unknown variant `maybe`"), "{e}");
}

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), Settings::default());
}

#[test]
fn defaults_round_trip_through_toml() {
    let d = Settings::default();
    assert_eq!(parse(&d.to_toml()).unwrap(), d);
}

#[test]
fn values_parse() {
    let s = parse(
            "rule-dirs = [\"/a\", \"/b\"]\n[measure]\ninterval = \"off\"\nbudget = \"1500ms\"\n\
             idle-threshold = 50\nnever-cpus = \"1,3\"\nspin-priority = \"idle\"\n[placement]\nhousekeeping-cpus = \"0,2\"\n\
             [watch]\nrelease-on-foreign-change = false\n",
        )
        .unwrap();
    assert_eq!(s.rule_dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
    assert_eq!(s.measure.interval, Every::Off);
    assert_eq!(s.measure.budget.0, Duration::from_millis(1500));
    assert_eq!(s.measure.idle_threshold, IdlePercent(50.0));
    assert_eq!(s.measure.never_cpus.to_string(), "1,3");
    assert_eq!(
        s.measure.spin_priority,
        crate::measure::around::SpinPriority::Idle
    );
    assert_eq!(s.placement.housekeeping_cpus.to_string(), "0,2");
    assert!(!s.watch.release_on_foreign_change);
    assert_eq!(s.measure.budget.to_string(), "1500ms");
    let s =
        parse("[measure]\nsparse-from-cpus = 4\ncomplete-slice = 16\ncomplete-pause = \"2s\"\n")
            .unwrap();
    assert_eq!(s.measure.sparse_from_cpus, 4);
    assert_eq!(s.measure.complete_slice, Some(16));
    assert_eq!(Settings::default().measure.complete_slice, None);
    assert_eq!(parse("[measure]\n").unwrap().measure.complete_slice, None);
    assert_eq!(s.measure.complete_pause.0, Duration::from_secs(2));
    assert_eq!(Settings::default().measure.sparse_from_cpus, 128);
    for bad in [
        "sparse-from-cpus = 1",
        "sparse-from-cpus = 65537",
        "complete-slice = 0",
        "complete-pause = \"10ms\"",
        "complete-pause = \"2h\"",
    ] {
        let e = parse(&format!("[measure]\n{bad}\n")).unwrap_err();
        assert!(e.starts_with("s.toml:2:"), "{bad}: {e}");
    }
    assert_eq!(HumanDuration(Duration::from_secs(7200)).to_string(), "2h");
}

#[test]
fn memory_settings_parse_and_refuse_out_of_range() {
    let s = parse(
            "[memory]\ntolerance = 0.25\nmin-size-mib = 0\nfollow-interval = \"30s\"\nfollow-max-size-mib = 1024\n",
        )
        .unwrap();
    assert_eq!(s.memory.tolerance, Fraction(0.25));
    assert_eq!(s.memory.min_size_mib, 0);
    assert_eq!(s.memory.follow_interval.0, Duration::from_secs(30));
    assert_eq!(s.memory.follow_max_size_mib, 1024);
    assert!(parse("[memory]\ntolerance = 1.5\n").is_err());
    assert!(parse("[memory]\nfollow-interval = \"10ms\"\n").is_err());
    assert!(parse("[memory]\nfollow-max-size-mib = 0\n").is_err());
}

#[test]
fn footgun_values_are_refused_with_their_range() {
    for (text, message) in [
        (
            "[measure]\ninterval = \"1ms\"\n",
            "s.toml:2:12: 1ms is out of range: expected \"1h\" to \"365d\", or \"off\"",
        ),
        (
            "[limits]\ndbus-burst = 0\n",
            "s.toml:2:14: 0 is out of range: expected 1 to 100000",
        ),
        (
            "[limits]\ndbus-calls-per-second = 0\n",
            "s.toml:2:25: 0 is out of range: expected 1 to 100000",
        ),
        (
            "[watch]\nrescan-interval = \"10ms\"\n",
            "s.toml:2:19: 10ms is out of range: expected \"1s\" to \"1d\", or \"off\"",
        ),
        (
            "[measure]\nbudget = \"999999999d\"\n",
            "s.toml:2:10: 999999999d is out of range: expected \"1s\" to \"1d\"",
        ),
    ] {
        assert_eq!(parse(text).unwrap_err(), message, "{text}");
    }
    for (text, range) in [
        (
            "[measure]\ndrift-probe = \"1s\"\n",
            "expected \"1m\" to \"365d\"",
        ),
        ("[measure]\ndrift-pairs = 0\n", "expected 1 to 4096"),
        (
            "[limits]\nremeasure-min-interval = \"999ms\"\n",
            "expected \"1s\" to \"365d\"",
        ),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.contains(range), "{text}: {e}");
    }
    // The bounds themselves are accepted.
    let s = parse(
        "[measure]\ninterval = \"1h\"\ndrift-probe = \"365d\"\nbudget = \"1s\"\n\
             [limits]\ndbus-burst = 1\nremeasure-min-interval = \"1s\"\n",
    )
    .unwrap();
    assert_eq!(s.limits.dbus_burst, 1);
    assert_eq!(s.measure.interval.period(), Some(Duration::from_secs(3600)));
}

#[test]
fn bad_values_name_line_and_column() {
    for (text, message) in [
            (
                "[measure]\nbudget = \"10 minutes\"\n",
                "s.toml:2:10: invalid duration \"10 minutes\": expected a duration like \"500ms\", \"30s\", \"10m\", \"2h\" or \"7d\"",
            ),
            (
                "[measure]\nidle-threshold = 150\n",
                "s.toml:2:18: 150 is out of range: expected the minimum percent idle, 0 to 100",
            ),
            (
                "[measure]\nidle-threshold = 0.1\n",
                "s.toml:2:18: 0.1 looks like a busy fraction: idle-threshold is the minimum percent idle, 0 to 100, as `pinnerd measure --idle-threshold` (for 0.1 write 90)",
            ),
            (
                "[watch]\nrescan = \"1s\"\n",
                "s.toml:2:1: unknown field `rescan`, expected `rescan-interval` or `release-on-foreign-change`",
            ),
            (
                "[limits]\ndbus-burst = -1\n",
                "s.toml:2:14: invalid value: integer `-1`, expected u32",
            ),
            (
                "[placement]\nhousekeeping-cpus = \"0-\"\n",
                "s.toml:2:21: invalid CPU list token \"0-\": expected a CPU number or a range like 0-3",
            ),
            (
                "[watch]\nrescan-interval = \"0s\"\n",
                "s.toml:2:19: invalid duration \"0s\": must be more than zero, or \"off\"",
            ),
        ] {
            assert_eq!(parse(text).unwrap_err(), message, "{text}");
        }
}
