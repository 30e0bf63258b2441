//! Files generated from the code and checked in, so the package ships them and a
//! reviewer reads them: the bus interface's introspection XML (from the real daemon on a
//! private bus), the `pinnerd(8)` man page and the shell completions (from the clap
//! command tree), and the pictures in `docs/images/` (drawn by `pinnerd topology` from a
//! published matrix). Each test fails when its file differs from what the code generates now;
//! one command writes them all again:
//!
//! ```text
//! SNAPSHOTS=overwrite cargo test --test it generated::
//! ```

use std::path::PathBuf;

use super::daemon::{text, Bus, Daemon, Dirs, Policy, IFACE, NAME, PATH};

/// The command that writes every generated file again.
pub const REGENERATE: &str = "SNAPSHOTS=overwrite cargo test --test it generated::";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compares `rel` (relative to the repository) with `want`, or writes it with
/// `SNAPSHOTS=overwrite`.
fn check_or_write(rel: &str, want: &[u8]) {
    let path = repo().join(rel);
    if super::snapshots::overwrite() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&path, want).unwrap();
        return;
    }
    let have = std::fs::read(&path).unwrap_or_default();
    if have != want {
        let first = first_difference(&have, want);
        panic!(
            "{rel} is not what the code generates now (first difference on line {first}); \
             regenerate it with:\n    {REGENERATE}\nand commit the result"
        );
    }
}

/// The 1-based line of the first byte where `a` and `b` differ.
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    1 + a[..at].iter().filter(|&&c| c == b'\n').count()
}

/// The `org.pinnerd.Pinnerd1` interface element of a node's introspection XML.
fn interface_element(node_xml: &str) -> &str {
    let open = format!("<interface name=\"{IFACE}\">");
    let start = node_xml
        .find(&open)
        .unwrap_or_else(|| panic!("no {open} in:\n{node_xml}"));
    let len = node_xml[start..]
        .find("</interface>")
        .unwrap_or_else(|| panic!("{open} is not closed in:\n{node_xml}"));
    &node_xml[start..start + len + "</interface>".len()]
}

/// What `/usr/share/dbus-1/interfaces/org.pinnerd.Pinnerd1.xml` holds: the interface
/// as the daemon introspects it, in a node of its own.
fn interface_file(element: &str) -> String {
    format!(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n\
         <!-- The org.pinnerd.Pinnerd1 interface, as the daemon introspects it. Generated;\n     \
         regenerate with: {REGENERATE} -->\n\
         <node>\n {element}\n</node>\n"
    )
}

#[test]
fn interface_xml_is_the_live_introspection() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let out = bus.busctl(&["introspect", "--xml-interface", NAME, PATH]);
    assert!(out.status.success(), "{}", text(&out));
    let xml = String::from_utf8(out.stdout).unwrap();
    let element = interface_element(&xml);
    // Every argument has a name: no `arg_0` for a client to guess at.
    assert!(
        !element.contains("name=\"arg_"),
        "unnamed arguments:\n{element}"
    );
    for line in element.lines().filter(|l| l.contains("<arg ")) {
        assert!(
            line.contains(" name=\""),
            "an argument without a name: {line}"
        );
    }
    check_or_write(
        "systemd/org.pinnerd.Pinnerd1.xml",
        interface_file(element).as_bytes(),
    );
}

#[test]
fn man_page_pinnerd_8_is_generated_from_the_command_tree() {
    let page = pinnerd::cli::docs::man_page().expect("render pinnerd(8)");
    check_or_write("man/pinnerd.8", page.as_bytes());
}

/// The published matrix the documentation's pictures are drawn from, and the machine
/// (2 CPUs, so the domains come from the matrix alone wherever the tests run).
pub const PICTURE_MATRIX: &str =
    "tests/fixtures/c2c-data/nviennot/AMD_Ryzen_9_5950X_at_3.40_GHz.csv";
const PICTURE_SYSFS: &str = "tests/fixtures/sysfs/epyc-vm-2cpu";

#[test]
fn docs_pictures_are_drawn_by_pinnerd_from_a_published_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let (domains, heatmap) = (dir.path().join("d.svg"), dir.path().join("h.svg"));
    let out = super::helper::pinnerd_command()
        .current_dir(repo())
        .args([
            "topology",
            "--sysfs",
            PICTURE_SYSFS,
            "--matrix",
            PICTURE_MATRIX,
        ])
        .arg("--svg")
        .arg(&domains)
        .arg("--heatmap")
        .arg(&heatmap)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let domains = std::fs::read(&domains).unwrap();
    let heatmap = std::fs::read(&heatmap).unwrap();
    // The picture shows the 5950X's two CCDs and its SMT pairs, from the matrix alone.
    let d = String::from_utf8_lossy(&domains);
    for want in ["0-7,16-23", "8-15,24-31", "llc", "smt", "machine"] {
        assert!(d.contains(want), "{want} not in the domains picture");
    }
    assert!(String::from_utf8_lossy(&heatmap).contains("32 CPUs"));
    check_or_write("docs/images/domains-5950x.svg", &domains);
    check_or_write("docs/images/heatmap-5950x.svg", &heatmap);
}

#[test]
fn shell_completions_are_generated_from_the_command_tree() {
    for (shell, rel) in pinnerd::cli::docs::COMPLETIONS {
        check_or_write(rel, &pinnerd::cli::docs::completion(*shell));
    }
}

#[test]
fn every_property_but_the_constant_ones_is_signalled() {
    use pinnerd::api::{Phase, Snapshot};
    // The properties of the checked-in interface, which the test above keeps equal to
    // the live introspection; a property without an annotation emits changes.
    let xml = std::fs::read_to_string(repo().join("systemd/org.pinnerd.Pinnerd1.xml")).unwrap();
    let mut signalled = Vec::new();
    let mut constant = Vec::new();
    for chunk in xml.split("<property ").skip(1) {
        let name = chunk.split('"').nth(1).expect("a property without a name");
        // `<property …/>`, or `<property …>` annotations `</property>`.
        let tag_end = chunk.find('>').expect("an unclosed property tag");
        let body = if chunk[..tag_end].ends_with('/') {
            &chunk[..tag_end]
        } else {
            &chunk[..chunk.find("</property>").expect("an unclosed property")]
        };
        if body.contains("EmitsChangedSignal\" value=\"const\"") {
            constant.push(name.to_string());
        } else {
            signalled.push(name.to_string());
        }
    }
    assert_eq!(constant, ["Version"]);
    assert!(signalled.len() >= 8, "{signalled:?}");

    // A snapshot that differs from the default in every field. The struct update keeps
    // this compiling when a field is added; the new field's property then fails below
    // until `changed_properties` signals it and this snapshot changes it.
    let old = Snapshot::default();
    #[allow(clippy::needless_update)]
    let new = Snapshot {
        version: "x".into(),
        state: Phase::Ready,
        measured_at_us: 1,
        fingerprint: "f".into(),
        cpu_count: 1,
        rule_count: 1,
        managed_processes: 1,
        managed_threads: 1,
        rule_errors: vec!["e".into()],
        sched_ext: Some(pinnerd::sched_ext::SchedExt {
            state: "enabled".into(),
            ops: "layered".into(),
        }),
        matrix_measured: (1, 2),
        holds: "1 unit confined".into(),
        holds_view: pinnerd::api::HoldsView {
            units_confined: 1,
            ..Default::default()
        },
        nri: "registered with containerd 1.7.24".into(),
        containers: vec![pinnerd::api::ContainerView {
            how: "cpuset 1 set at creation by pinnerd".into(),
            ..Default::default()
        }],
        latency_off: "the host moves vCPUs: latency placement off".into(),
        state_reason: "no process events".into(),
        ..Snapshot::default()
    };
    let changed = pinnerd::dbus::changed_properties(&old, &new);
    for p in &signalled {
        assert!(
            changed.contains_key(p.as_str()),
            "{p} changed but dbus::changed_properties does not signal it"
        );
    }
    assert!(!changed.contains_key("Version"));
    assert_eq!(changed.len(), signalled.len(), "{:?}", changed.keys());
    assert!(pinnerd::dbus::changed_properties(&new, &new).is_empty());
}

/// Completes `words` with the checked-in bash completion in a real bash; the candidates.
fn bash_complete(words: &[&str]) -> Vec<String> {
    let script = repo().join("completions/pinnerd.bash");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{}'\nCOMP_POINT=${{#COMP_LINE}}\n\
         _pinnerd pinnerd '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        words.join(" "),
        words[words.len() - 1],
        words[words.len().saturating_sub(2)],
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &prog])
        .output()
        .expect("run bash");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_their_flags() {
    assert_eq!(bash_complete(&["pinnerd", "ex"]), ["explain", "export"]);
    let flags = bash_complete(&["pinnerd", "plan", "--s"]);
    assert!(flags.contains(&"--smt".to_string()), "{flags:?}");
    assert!(flags.iter().all(|f| f.starts_with("--s")), "{flags:?}");
}

/// docs/dbus.md documents every method of the checked-in interface (which the test above
/// keeps equal to the live one) with a busctl and a gdbus example.
#[test]
fn docs_dbus_md_shows_every_method_with_busctl_and_gdbus() {
    let xml = std::fs::read_to_string(repo().join("systemd/org.pinnerd.Pinnerd1.xml")).unwrap();
    let doc = std::fs::read_to_string(repo().join("docs/dbus.md")).unwrap();
    let methods: Vec<&str> = xml
        .split("<method name=\"")
        .skip(1)
        .filter_map(|c| c.split('"').next())
        .collect();
    assert!(methods.len() >= 10, "{methods:?}");
    for m in methods {
        let head = format!("### `{m}`\n");
        let Some(start) = doc.find(&head) else {
            panic!("docs/dbus.md has no section {head:?}");
        };
        let body = &doc[start + head.len()..];
        let section = &body[..body.find("\n#").unwrap_or(body.len())];
        assert!(
            section.contains(&format!("org.pinnerd.Pinnerd1 {m} "))
                || section.contains(&format!("org.pinnerd.Pinnerd1 {m}\n")),
            "docs/dbus.md: {m} has no busctl example"
        );
        assert!(
            section.contains(&format!("--method org.pinnerd.Pinnerd1.{m}")),
            "docs/dbus.md: {m} has no gdbus example"
        );
    }
}

/// docs/dbus.md's `busctl introspect` sample is what the real daemon introspects: the
/// same members in the same order with the same types, signatures and flags (the values
/// are the machine's and are not compared), and its `get-property` sample names every
/// property with one line of output each, of the property's type.
#[test]
fn docs_dbus_md_introspection_sample_is_the_live_one() {
    let _cpus = super::cpus_stay_online();
    let bus = Bus::start(Policy::Project);
    let dirs = Dirs::new();
    let _d = Daemon::start(&bus, &dirs);
    let out = bus.busctl(&["introspect", NAME, PATH, NAME]);
    assert!(out.status.success(), "{}", text(&out));
    let live = String::from_utf8(out.stdout).unwrap();
    // NAME TYPE SIGNATURE … FLAGS of each member line; the value may hold spaces.
    let members = |listing: &str| -> Vec<String> {
        listing
            .lines()
            .filter(|l| l.starts_with('.'))
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                format!(
                    "{} {} {} {}",
                    words[0],
                    words[1],
                    words[2],
                    words[words.len() - 1]
                )
            })
            .collect()
    };
    let doc = std::fs::read_to_string(repo().join("docs/dbus.md")).unwrap();
    let intro = "On a 2-vCPU VM the first two print";
    let start = doc
        .find(intro)
        .expect("docs/dbus.md: the introspection sample");
    let block = &doc[start..];
    let block = &block[block.find("```text\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    assert_eq!(
        members(block),
        members(&live),
        "docs/dbus.md's introspection sample differs from the daemon's; it prints:\n{live}"
    );
    // The get-property sample: every property named, one output line of its type each.
    let properties: Vec<(String, String)> = live
        .lines()
        .filter(|l| l.starts_with('.'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w[1] == "property")
        .map(|w| (w[0].trim_start_matches('.').to_string(), w[2].to_string()))
        .collect();
    let get = doc
        .lines()
        .find(|l| l.contains(" get-property org.pinnerd.Pinnerd1 "))
        .expect("docs/dbus.md: a get-property sample");
    let named: Vec<&str> = get.split_whitespace().skip(6).collect();
    let values: Vec<&str> = block
        .lines()
        .filter(|l| !l.starts_with('.') && !l.starts_with("NAME") && !l.trim().is_empty())
        .collect();
    assert_eq!(
        named.len(),
        values.len(),
        "docs/dbus.md: {} properties read, {} values shown",
        named.len(),
        values.len()
    );
    for (name, sig) in &properties {
        let Some(i) = named.iter().position(|n| n == name) else {
            panic!("docs/dbus.md's get-property sample does not read {name}: {get}");
        };
        assert!(
            values[i].starts_with(&format!("{sig} ")),
            "docs/dbus.md: {name} is {sig} but its sample value is {:?}",
            values[i]
        );
    }
}
