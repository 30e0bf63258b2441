//! What the fuzz targets check, shared word for word by the targets in `fuzz/` (which
//! include this file) and by `fuzz_replay`, which runs every kept corpus file and crash
//! reproducer through it in `cargo test`. Each check takes any bytes; nothing may
//! panic, and whatever is accepted must survive its own print-and-parse round trip.

use std::path::Path;

use pinnerd::affinity::restore::Journal;
use pinnerd::matrix::LatencyMatrix;
use pinnerd::rules::{self, format, LoadPolicy, ProcessInfo, ThreadInfo};
use pinnerd::settings::Settings;

fn processes() -> Vec<ProcessInfo> {
    let base = ProcessInfo {
        pid: 1,
        comm: "md-feed".into(),
        exe: Some("/opt/md/bin/md-feed".into()),
        cmdline: vec!["md-feed".into(), "--venue=X".into()],
        uid: 0,
        cgroup: Some("/system.slice/md-feed.service".into()),
        threads: vec![
            ThreadInfo {
                tid: 1,
                comm: "md-feed".into(),
            },
            ThreadInfo {
                tid: 2,
                comm: "rx-0".into(),
            },
        ],
        container: None,
    };
    vec![
        base.clone(),
        ProcessInfo {
            comm: "a".into(),
            exe: None,
            cgroup: None,
            ..base.clone()
        },
        ProcessInfo {
            comm: "".into(),
            cmdline: vec![],
            uid: 1000,
            ..base
        },
    ]
}

/// Any bytes as a rule file in `dir`: load (safety checks, UTF-8), parse, validate,
/// compile to a matcher, match and explain. Every error names the file; the fast path
/// and `Explain` agree; whatever parses survives a print-and-parse round trip.
pub fn rules_load(dir: &Path, data: &[u8]) {
    let file = dir.join("fuzz.toml");
    std::fs::write(&file, data).expect("write fuzz input");
    let report = rules::load_dirs(&[dir.to_path_buf()], &LoadPolicy::unchecked());
    for e in &report.errors {
        assert!(e.to_string().starts_with(&file.display().to_string()));
    }
    for p in processes() {
        let m = report.rules.match_process(&p);
        let why = report.rules.explain(&p);
        assert_eq!(
            m.map(|m| m.rule.name.clone()),
            why.winner.map(|w| w.rule.name.clone())
        );
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(parsed) = format::parse(text) {
            let printed = format::to_toml(&parsed).expect("a parsed file prints");
            let again = format::parse(&printed).expect("a printed file parses");
            assert_eq!(again, parsed);
        }
    }
}

/// The same CPUs and cells, bit for bit (serde_json's `float_roundtrip` makes JSON
/// exact; its default parser could be one ulp off).
fn same_matrix(a: &LatencyMatrix, b: &LatencyMatrix) {
    assert_eq!(a.cpus, b.cpus);
    assert_eq!(a.latency_ns, b.latency_ns);
}

/// Any bytes as core-to-core-latency CSV: an error names the file and a line; an
/// accepted matrix is valid and survives `to_csv` → `from_csv`.
pub fn matrix_csv(data: &[u8]) {
    let path = Path::new("fuzz.csv");
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match LatencyMatrix::from_csv(text, path) {
        Err(e) => assert!(e.to_string().starts_with("fuzz.csv:"), "{e}"),
        Ok(m) => {
            m.validate().expect("an imported matrix is valid");
            assert!(m.len() <= pinnerd::matrix::read::MAX_MATRIX_CPUS);
            let again = LatencyMatrix::from_csv(&m.to_csv(), path).expect("to_csv parses");
            same_matrix(&m, &again);
            let _ = m.summary();
        }
    }
}

/// Any bytes as a matrix file read by `LatencyMatrix::load` (the path every `--matrix`
/// and the daemon's store take: type and size checks, the format sniff, the bounded
/// streaming JSON reader). An accepted matrix is valid, within the limits, and survives
/// JSON → `from_json`; the in-memory reader agrees with the streaming one.
pub fn matrix_file(dir: &Path, data: &[u8]) {
    let path = dir.join("fuzz-matrix");
    std::fs::write(&path, data).expect("write fuzz input");
    let loaded = LatencyMatrix::load(&path);
    let is_json = data
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if is_json {
        if let Ok(text) = std::str::from_utf8(data) {
            let in_memory = LatencyMatrix::from_json(text, &path);
            if let (Ok(a), Ok(b)) = (&loaded, &in_memory) {
                same_matrix(a, b);
            }
            // A string over the streaming reader's limit is the one thing only it
            // refuses.
            if loaded.is_ok() {
                assert!(in_memory.is_ok(), "{:?}", in_memory.err());
            }
        }
    }
    match loaded {
        Err(e) => assert!(
            e.to_string().starts_with(&path.display().to_string()),
            "{e}"
        ),
        Ok(m) => {
            m.validate().expect("a loaded matrix is valid");
            assert!(m.len() <= pinnerd::matrix::read::MAX_MATRIX_CPUS);
            let json = serde_json::to_string(&m).expect("a matrix serialises");
            let again = LatencyMatrix::from_json(&json, &path).expect("its JSON parses");
            same_matrix(&m, &again);
            assert_eq!(m.stats.len(), again.stats.len());
            assert_eq!(m.warnings, again.warnings);
            let _ = m.summary();
            let _ = m.check_against(&"0-3".parse().unwrap());
        }
    }
}

/// Any bytes as the settings file: an error names the file; accepted settings survive
/// `to_toml` → `parse` unchanged.
pub fn settings(data: &[u8]) {
    let path = Path::new("fuzz.toml");
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Settings::parse(path, text) {
        Err(e) => assert!(e.to_string().starts_with("fuzz.toml:"), "{e}"),
        Ok(s) => {
            let again = Settings::parse(path, &s.to_toml()).expect("printed settings parse");
            assert_eq!(again, s);
        }
    }
}

/// Any bytes as the restore journal: an error names the journal; an accepted journal
/// is saved and read back unchanged.
pub fn restore_journal(dir: &Path, data: &[u8]) {
    let journal = Journal::new(dir);
    std::fs::write(journal.path(), data).expect("write fuzz input");
    match journal.load() {
        Err(e) => assert!(
            e.to_string()
                .starts_with(&journal.path().display().to_string()),
            "{e}"
        ),
        Ok(entries) => {
            journal.save(&entries).expect("save what was read");
            assert_eq!(journal.load().expect("read what was saved"), entries);
        }
    }
}

/// Any bytes as an hwloc topology XML: an error names the file and its line; accepted
/// PUs are distinct, and the same PUs written back as a plain topology read back the
/// same, in the same (logical) order.
pub fn hwloc_xml(data: &[u8]) {
    use pinnerd::export::hwloc::pu_os_indexes;
    let path = Path::new("fuzz.xml");
    let text = String::from_utf8_lossy(data);
    match pu_os_indexes(&text, path) {
        Err(e) => assert!(e.to_string().starts_with("fuzz.xml:"), "{e}"),
        Ok(pus) => {
            let mut seen = std::collections::HashSet::new();
            assert!(pus.iter().all(|p| seen.insert(*p)), "{pus:?}");
            let mut plain = String::from("<topology>\n");
            for p in &pus {
                plain.push_str(&format!("<object type=\"PU\" os_index=\"{p}\"/>\n"));
            }
            plain.push_str("</topology>\n");
            assert_eq!(pu_os_indexes(&plain, path).expect("its own PUs"), pus);
        }
    }
}

/// The captured machine every `sysfs_tree` input edits: two CPUs, caches, one node.
pub const SYSFS_BASE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/epyc-vm-2cpu"
);

/// The edits of a `sysfs_tree` input: `PATH\0CONTENT\0` pairs, PATH relative to the
/// captured machine (`sys/…` or `proc/…`), at most 64 of them; a PATH that would leave
/// the tree is skipped.
pub fn sysfs_edits(data: &[u8]) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut parts = data.split(|&b| b == 0);
    let mut out = Vec::new();
    while let (Some(p), Some(c)) = (parts.next(), parts.next()) {
        if out.len() == 64 {
            break;
        }
        let p = String::from_utf8_lossy(p);
        let rel = Path::new(p.as_ref());
        let normal = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        let inside = normal
            && rel.components().count() <= 12
            && (rel.starts_with("sys") || rel.starts_with("proc"));
        if inside {
            out.push((rel.to_path_buf(), c.to_vec()));
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// Any bytes as edits of a captured machine's sysfs and procfs files (see
/// [`sysfs_edits`]): reading its topology, its fingerprint and the latency domains of
/// the topology never panics or hangs; an accepted topology has every usable CPU
/// described.
pub fn sysfs_tree(dir: &Path, data: &[u8]) {
    use pinnerd::sysroot::SysRoot;
    let tree = dir.join("machine");
    let _ = std::fs::remove_dir_all(&tree);
    copy_tree(Path::new(SYSFS_BASE), &tree);
    for (rel, content) in sysfs_edits(data) {
        let path = tree.join(rel);
        // An edit under a path that is a file, or of a directory, is not applied.
        if let Some(parent) = path.parent() {
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
        }
        let _ = std::fs::write(&path, content);
    }
    let root = SysRoot::machine(&tree);
    let _ = pinnerd::fingerprint::Fingerprint::read(&root);
    match pinnerd::topology::Topology::from_sysroot(&root) {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(t) => {
            for cpu in t.usable().iter() {
                assert!(t.cpu(cpu).is_some(), "usable CPU {cpu} undescribed");
            }
            let _ = pinnerd::domains::Domains::from_topology(&t);
        }
    }
}

/// Any bytes as what a runtime sends on one NRI connection (the ttrpc stream inside the
/// multiplexer's frames), cut into pieces by the first byte: every whole message's
/// envelope and the argument of each `Plugin` method decode or are refused, never a
/// panic; the container's facts are read as the plugin reads them.
pub fn nri_stream(data: &[u8]) {
    use pinnerd::nri::plugin::facts;
    use pinnerd::nri::proto::api;
    use pinnerd::nri::ttrpc::Reassembly;
    use protobuf::Message as _;

    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let mut r = Reassembly::default();
    for piece in data.chunks(usize::from(cut).max(1)) {
        r.push(piece);
        loop {
            let m = match r.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(_) => return,
            };
            let _ = m.as_response();
            let Ok(req) = m.as_request() else { continue };
            let p = &req.payload[..];
            let (pod, container) = match req.method.as_str() {
                "CreateContainer" => match api::CreateContainerRequest::parse_from_bytes(p) {
                    Ok(r) => (r.pod.into_option(), r.container),
                    Err(_) => continue,
                },
                "UpdateContainer" => match api::UpdateContainerRequest::parse_from_bytes(p) {
                    Ok(r) => (r.pod.into_option(), r.container),
                    Err(_) => continue,
                },
                "StateChange" => match api::StateChangeEvent::parse_from_bytes(p) {
                    Ok(r) => (r.pod.into_option(), r.container),
                    Err(_) => continue,
                },
                "Synchronize" => {
                    if let Ok(r) = api::SynchronizeRequest::parse_from_bytes(p) {
                        for c in r.containers {
                            let f = facts(r.pods.first(), &protobuf::MessageField::some(c));
                            let _ = f.title();
                        }
                    }
                    continue;
                }
                _ => {
                    let _ = api::ConfigureRequest::parse_from_bytes(p);
                    let _ = api::PodContainerEvent::parse_from_bytes(p);
                    continue;
                }
            };
            let f = facts(pod.as_ref(), &container);
            let _ = f.title();
            if let Some(cpus) = &f.cpus {
                assert!(cpus.iter().all(|c| c <= pinnerd::cpuset::MAX_CPU_ID));
            }
        }
    }
}
