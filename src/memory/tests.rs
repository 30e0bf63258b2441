use std::io::{BufRead, Cursor, Read};
use std::path::Path;

use super::parse::{self, ParseError, MAX_LINE, MAX_LINES};
use super::*;
use crate::sysroot::write_tree;

const MAPS: &str = include_str!("../../tests/fixtures/memory/numa_maps.two-nodes");
const STAT: &str = include_str!("../../tests/fixtures/memory/numa_stat.two-nodes");

fn maps(text: &str) -> Result<parse::NumaMaps, ParseError> {
    parse::numa_maps(Path::new("/proc/42/numa_maps"), Cursor::new(text))
}

fn stat(text: &str) -> Result<NodeBytes, ParseError> {
    parse::numa_stat(
        Path::new("/sys/fs/cgroup/w/memory.numa_stat"),
        Cursor::new(text),
    )
}

fn bytes(pairs: &[(u32, u64)]) -> NodeBytes {
    pairs.iter().copied().collect()
}

#[test]
fn numa_maps_counts_pages_of_each_size_per_node() {
    let m = maps(MAPS).unwrap();
    assert_eq!(m.nodes, bytes(&[(0, 4_349_952), (1, 272_592_896)]));
    assert_eq!(m.anon, bytes(&[(0, 4_292_608), (1, 272_543_744)]));
    assert_eq!(m.policies["bind:1"], 268_435_456);
    assert_eq!(m.policies["prefer:0"], 2 * 2048 * 1024);
    assert_eq!(m.policies["interleave:0-1"], 81_920);
    assert_eq!(m.policies["default"], 4_231_168);
}

#[test]
fn numa_stat_counts_anon_and_mapped_files() {
    assert_eq!(
        stat(STAT).unwrap(),
        bytes(&[(0, 1_048_576 + 2_097_152), (1, 268_435_456)])
    );
}

fn bad_at(r: Result<impl std::fmt::Debug, ParseError>) -> (usize, usize, String) {
    match r {
        Err(ParseError::Bad {
            line, column, what, ..
        }) => (line, column, what),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn malformed_numa_maps_are_named_by_line_and_column() {
    let (l, c, w) = bad_at(maps("7f00 default N0=1 kernelpagesize_kB=4\nzz default\n"));
    assert_eq!((l, c), (2, 1), "{w}");
    assert!(w.contains("hexadecimal"), "{w}");
    let (l, c, w) = bad_at(maps("7f00 default anon=1 N0=x kernelpagesize_kB=4\n"));
    assert_eq!((l, c), (1, 21), "{w}");
    let (_, c, w) = bad_at(maps("7f00 default N0=1 kernelpagesize_kB=0\n"));
    assert_eq!(c, 19, "{w}");
    let (_, _, w) = bad_at(maps("7f00 default N0=1\n"));
    assert!(w.contains("kernelpagesize_kB"), "{w}");
    let (_, c, w) = bad_at(maps("7f00 default N4096=1 kernelpagesize_kB=4\n"));
    assert_eq!(c, 14, "{w}");
    let (_, _, w) = bad_at(maps(
        "7f00 default N0=18446744073709551615 kernelpagesize_kB=4\n",
    ));
    assert!(w.contains("too large"), "{w}");
    let (_, _, w) = bad_at(maps("7f00\n"));
    assert!(w.contains("policy"), "{w}");
    // Binary garbage is an error, not a panic.
    assert!(maps("\u{0}\u{1}\u{2} \u{ff}\n").is_err());
}

#[test]
fn malformed_numa_stat_is_named() {
    let (l, c, w) = bad_at(stat("anon N0=1 N1=2\nfile N0=1 N1\n"));
    assert_eq!((l, c), (2, 11), "{w}");
    let (_, _, w) = bad_at(stat("total=5 N0=5\n"));
    assert!(w.contains("N<node>"), "{w}");
    let (_, _, w) = bad_at(stat("file N0=1\n"));
    assert!(w.contains("anon"), "{w}");
    let (_, _, w) = bad_at(stat("anon N0=18446744073709551615\nfile_mapped N0=1\n"));
    assert!(w.contains("too large"), "{w}");
}

/// Endless input, produced on the fly: the parser must stop on its bounds.
struct Endless(&'static [u8], usize);

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            buf[n] = self.0[self.1 % self.0.len()];
            self.1 += 1;
            n += 1;
        }
        Ok(n)
    }
}

fn endless(pattern: &'static [u8]) -> impl BufRead {
    std::io::BufReader::new(Endless(pattern, 0))
}

#[test]
fn a_huge_numa_maps_stops_at_its_bounds() {
    // One endless line.
    let r = parse::numa_maps(Path::new("m"), endless(b"a"));
    let (l, c, _) = bad_at(r);
    assert_eq!((l, c), (1, MAX_LINE + 1));
    // Endless valid lines.
    let r = parse::numa_maps(
        Path::new("m"),
        endless(b"7f00 default anon=1 N0=1 N1=1 kernelpagesize_kB=4\n"),
    );
    let (l, _, w) = bad_at(r);
    assert_eq!(l, MAX_LINES + 1, "{w}");
    // A large valid file (a quarter of a million mappings) is counted whole.
    let big = "7f00 default anon=2 N0=1 N1=1 kernelpagesize_kB=4\n".repeat(250_000);
    let m = maps(&big).unwrap();
    assert_eq!(m.nodes, bytes(&[(0, 250_000 * 4096), (1, 250_000 * 4096)]));
}

#[test]
fn a_huge_numa_stat_stops_at_its_bounds() {
    let (l, _, _) = bad_at(parse::numa_stat(Path::new("s"), endless(b"anon N0=1\n")));
    assert_eq!(l, MAX_LINES + 1);
}

#[test]
fn bytes_read_as_people_say_them() {
    assert_eq!(Bytes(512).to_string(), "512 B");
    assert_eq!(Bytes(3 << 20).to_string(), "3.0 MiB");
    assert_eq!(Bytes(3_328_599_654).to_string(), "3.1 GiB");
    assert_eq!(Bytes(300 << 30).to_string(), "300 GiB");
    assert_eq!(Bytes((1 << 30) - 1).to_string(), "1.0 GiB");
}

/// A fake machine: `proc/PID/{cgroup,numa_maps}` and a v2 cgroup tree.
fn machine(cgroup: &str, procs_in_cgroup: &str, child: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("proc/42/cgroup", &format!("0::{cgroup}\n")),
            ("proc/42/numa_maps", MAPS),
            ("sys/fs/cgroup/app.slice/w.service/memory.numa_stat", STAT),
            (
                "sys/fs/cgroup/app.slice/w.service/cgroup.procs",
                procs_in_cgroup,
            ),
        ],
    );
    if child {
        write_tree(
            dir.path(),
            &[("sys/fs/cgroup/app.slice/w.service/sub/cgroup.procs", "")],
        );
    }
    dir
}

#[test]
fn a_process_alone_in_its_cgroup_is_read_from_numa_stat() {
    let m = machine("/app.slice/w.service", "42\n", false);
    let root = SysRoot::machine(m.path());
    let v = read(&root, 42, &[0, 1]).unwrap();
    match &v {
        MemoryView::Nodes {
            source: Source::NumaStat { file },
            nodes,
        } => {
            assert!(file.ends_with("w.service/memory.numa_stat"));
            assert_eq!(nodes[&1], 268_435_456);
        }
        other => panic!("{other:?}"),
    }
    assert!((v.share(1) - 268_435_456.0 / 271_581_184.0).abs() < 1e-9);
}

#[test]
fn a_shared_cgroup_a_parent_cgroup_or_the_root_means_numa_maps() {
    for (cg, procs, child) in [
        ("/app.slice/w.service", "42\n43\n", false),
        ("/app.slice/w.service", "42\n", true),
        ("/", "42\n", false),
        ("/app.slice/../w.service", "42\n", false),
    ] {
        let m = machine(cg, procs, child);
        let v = read(&SysRoot::machine(m.path()), 42, &[0, 1, 2]).unwrap();
        assert_eq!(
            v,
            MemoryView::Nodes {
                source: Source::NumaMaps,
                nodes: bytes(&[(0, 4_349_952), (1, 272_592_896), (2, 0)]),
            },
            "{cg} {procs:?} {child}"
        );
        let text = v.to_string();
        assert!(text.contains("node 1 260 MiB (98%)"), "{text}");
        assert!(text.contains("node 2 0 B (0%)"), "{text}");
    }
}

#[test]
fn one_node_reads_nothing_and_a_gone_process_is_gone() {
    let root = SysRoot::new("/nonexistent/sys", "/nonexistent/proc");
    let v = read(&root, 42, &[0]).unwrap();
    assert_eq!(v, MemoryView::OneNode);
    assert!(v.to_string().contains("one node"));
    assert_eq!(serde_json::to_value(v.to_json()).unwrap()["one_node"], true);
    assert!(matches!(
        read(&root, 42, &[0, 1]),
        Err(ReadError::Gone { pid: 42 })
    ));
}

#[test]
fn a_bad_file_names_the_pid_and_the_path() {
    let m = machine("/app.slice/w.service", "42\n", false);
    std::fs::write(
        m.path()
            .join("sys/fs/cgroup/app.slice/w.service/memory.numa_stat"),
        "anon N0=1 oops\n",
    )
    .unwrap();
    let e = read(&SysRoot::machine(m.path()), 42, &[0, 1])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("pid 42: "), "{e}");
    assert!(e.contains("w.service/memory.numa_stat:1:11: "), "{e}");
}

#[test]
fn the_running_test_process_has_numa_maps_the_parser_reads() {
    let root = SysRoot::default();
    let pid = std::process::id() as i32;
    let m = read_numa_maps(&root, pid).unwrap();
    assert!(m.nodes.values().sum::<u64>() > 0);
    let v = read(&root, pid, &[0, 1]).unwrap();
    assert!(v.total() > 0, "{v}");
}

/// `ExplainJson`'s `memory` is written as the JSON map it was: keys in the order of
/// their names, `source` and `total_bytes` absent on one node.
#[test]
fn the_memory_object_is_the_map_it_was() {
    let views = [
        MemoryView::OneNode,
        MemoryView::Nodes {
            source: Source::NumaStat {
                file: "/sys/fs/cgroup/a.service/memory.numa_stat".into(),
            },
            nodes: bytes(&[(0, 3 << 20), (1, 1 << 20)]),
        },
    ];
    for v in &views {
        let typed = serde_json::to_string(&v.to_json()).unwrap();
        let map = serde_json::to_value(v.to_json()).unwrap();
        assert_eq!(typed, serde_json::to_string(&map).unwrap());
    }
    assert_eq!(
        serde_json::to_string(&views[0].to_json()).unwrap(),
        r#"{"nodes":[],"one_node":true}"#
    );
    assert_eq!(
        serde_json::to_string(&views[1].to_json()).unwrap(),
        r#"{"nodes":[{"bytes":3145728,"node":0,"share":0.75},{"bytes":1048576,"node":1,"share":0.25}],"one_node":false,"source":"memory.numa_stat","total_bytes":4194304}"#
    );
}
