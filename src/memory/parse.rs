//! The two per-node memory files, parsed: `/proc/PID/numa_maps` and cgroup v2's
//! `memory.numa_stat`. Pure: text in, per-node bytes out.
//!
//! Bounded: a line longer than [`MAX_LINE`] or a file with more than [`MAX_LINES`]
//! lines is an error (a process is far below both: `vm.max_map_count` defaults to
//! 65,530 mappings), node ids at or above [`MAX_NODES`] (the kernel's largest
//! `MAX_NUMNODES`) are errors, and sums are checked, so no input can panic, loop or
//! grow memory past one line and one entry per node. Errors name the file, line and
//! column.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The longest line accepted: a mapping's file name (up to `PATH_MAX`) and its fields.
pub const MAX_LINE: usize = 8192;
/// The most lines accepted in one file.
pub const MAX_LINES: usize = 1 << 20;
/// Node ids are below this (the kernel's `MAX_NUMNODES` with `NODES_SHIFT` 10).
pub const MAX_NODES: u32 = 1024;

/// Bytes per NUMA node id.
pub type NodeBytes = BTreeMap<u32, u64>;

/// A file that does not parse, or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file could not be read (not a vanished process: callers check that first).
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A field or line the format does not allow.
    #[error("{}:{line}:{column}: {what}", path.display())]
    Bad {
        path: PathBuf,
        line: usize,
        column: usize,
        what: String,
    },
}

/// What `numa_maps` says about a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaMaps {
    /// Resident bytes per node, every mapping.
    pub nodes: NodeBytes,
    /// Resident bytes per node of anonymous mappings (`anon=` and no `file=`).
    pub anon: NodeBytes,
    /// Each distinct memory policy seen (`default`, `bind:0`, `prefer:1` …), with the
    /// bytes of the mappings that have it.
    pub policies: BTreeMap<String, u64>,
}

/// Parses `/proc/PID/numa_maps` from `reader` (`path` names it in errors). A line is
/// `ADDRESS POLICY [FIELD…]`, where `N<node>=<pages>` counts pages of
/// `kernelpagesize_kB` each.
pub fn numa_maps(path: &Path, reader: impl BufRead) -> Result<NumaMaps, ParseError> {
    let mut out = NumaMaps::default();
    each_line(path, reader, |no, line| {
        let bad = bad_at(path, no);
        let mut fields = fields(line);
        let Some((_, addr)) = fields.next() else {
            return Ok(()); // an empty line
        };
        if u64::from_str_radix(addr, 16).is_err() {
            return Err(bad(1, format!("not a hexadecimal address: {addr:?}")));
        }
        let Some((_, policy)) = fields.next() else {
            return Err(bad(
                line.len() + 1,
                "no memory policy after the address".into(),
            ));
        };
        let mut page_kb: Option<u64> = None;
        let mut pages: Vec<(u32, u64, usize)> = Vec::new();
        let (mut anon, mut file) = (false, false);
        for (col, f) in fields {
            if let Some(v) = f.strip_prefix("kernelpagesize_kB=") {
                let kb = v
                    .parse::<u64>()
                    .ok()
                    .filter(|kb| *kb > 0 && *kb <= 16 << 20)
                    .ok_or_else(|| bad(col, format!("not a page size in kB: {f:?}")))?;
                page_kb = Some(kb);
            } else if let Some(rest) = f.strip_prefix('N') {
                let Some((node, count)) = rest.split_once('=') else {
                    continue; // a word such as a file name's piece, not a node count
                };
                let Ok(node) = node.parse::<u32>() else {
                    continue;
                };
                if node >= MAX_NODES {
                    return Err(bad(col, format!("node {node} is not below {MAX_NODES}")));
                }
                let count = count
                    .parse::<u64>()
                    .map_err(|_| bad(col, format!("not a page count: {f:?}")))?;
                pages.push((node, count, col));
            } else if f.starts_with("anon=") {
                anon = true;
            } else if f.starts_with("file=") {
                file = true;
            }
        }
        if pages.is_empty() {
            return Ok(()); // nothing resident
        }
        let kb = page_kb.ok_or_else(|| {
            bad(
                line.len() + 1,
                "node page counts without kernelpagesize_kB".into(),
            )
        })?;
        let mut mapping = 0u64;
        for (node, count, col) in pages {
            let bytes = count
                .checked_mul(kb * 1024)
                .ok_or_else(|| bad(col, "page count too large".into()))?;
            add(&mut out.nodes, node, bytes).ok_or_else(|| bad(col, "total too large".into()))?;
            if anon && !file {
                add(&mut out.anon, node, bytes)
                    .ok_or_else(|| bad(col, "total too large".into()))?;
            }
            mapping = mapping
                .checked_add(bytes)
                .ok_or_else(|| bad(col, "total too large".into()))?;
        }
        if out.policies.len() < 64 || out.policies.contains_key(policy) {
            let e = out.policies.entry(policy.to_string()).or_insert(0);
            *e = e.saturating_add(mapping);
        }
        Ok(())
    })?;
    Ok(out)
}

/// What cgroup v2's `memory.numa_stat` says: per node, the bytes a process can have
/// moved by page migration — `anon` plus `file_mapped` (page cache only read or
/// written, never mapped, stays where it is, and `numa_maps` does not count it either).
pub fn numa_stat(path: &Path, reader: impl BufRead) -> Result<NodeBytes, ParseError> {
    let mut out = NodeBytes::new();
    let mut seen_anon = false;
    each_line(path, reader, |no, line| {
        let bad = bad_at(path, no);
        let mut fields = fields(line);
        let Some((_, key)) = fields.next() else {
            return Ok(());
        };
        if key.contains('=') {
            return Err(bad(
                1,
                format!("{key:?}: cgroup v1's format, not N<node>=<bytes> after a name"),
            ));
        }
        let wanted = key == "anon" || key == "file_mapped";
        seen_anon |= key == "anon";
        for (col, f) in fields {
            let parsed = f
                .strip_prefix('N')
                .and_then(|r| r.split_once('='))
                .and_then(|(n, v)| Some((n.parse::<u32>().ok()?, v.parse::<u64>().ok()?)));
            let Some((node, bytes)) = parsed else {
                return Err(bad(col, format!("not N<node>=<bytes>: {f:?}")));
            };
            if node >= MAX_NODES {
                return Err(bad(col, format!("node {node} is not below {MAX_NODES}")));
            }
            if wanted {
                add(&mut out, node, bytes).ok_or_else(|| bad(col, "total too large".into()))?;
            }
        }
        Ok(())
    })?;
    if !seen_anon {
        return Err(ParseError::Bad {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            what: "no \"anon\" line: not a cgroup v2 memory.numa_stat".into(),
        });
    }
    Ok(out)
}

fn add(map: &mut NodeBytes, node: u32, bytes: u64) -> Option<()> {
    let e = map.entry(node).or_insert(0);
    *e = e.checked_add(bytes)?;
    Some(())
}

/// Whitespace-separated fields with their 1-based columns.
fn fields(line: &str) -> impl Iterator<Item = (usize, &str)> {
    line.split(' ')
        .scan(1usize, |col, f| {
            let at = *col;
            *col += f.len() + 1;
            Some((at, f))
        })
        .filter(|(_, f)| !f.is_empty())
}

/// The error at `column` of line `line` of `path`, saying `what` is wrong there.
fn bad_at(path: &Path, line: usize) -> impl Fn(usize, String) -> ParseError + '_ {
    move |column, what| ParseError::Bad {
        path: path.to_path_buf(),
        line,
        column,
        what,
    }
}

/// Calls `each(line_number, line)` for every line, holding at most one line of
/// [`MAX_LINE`] bytes.
fn each_line(
    path: &Path,
    mut reader: impl BufRead,
    mut each: impl FnMut(usize, &str) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut buf = Vec::with_capacity(256);
    let mut no = 0usize;
    loop {
        buf.clear();
        let mut line = std::io::Read::take(&mut reader, MAX_LINE as u64 + 1);
        let n = line
            .read_until(b'\n', &mut buf)
            .map_err(|source| ParseError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            return Ok(());
        }
        no += 1;
        if no > MAX_LINES {
            return Err(ParseError::Bad {
                path: path.to_path_buf(),
                line: no,
                column: 1,
                what: format!("more than {MAX_LINES} lines"),
            });
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if n > MAX_LINE {
            return Err(ParseError::Bad {
                path: path.to_path_buf(),
                line: no,
                column: MAX_LINE + 1,
                what: format!("line longer than {MAX_LINE} bytes"),
            });
        }
        // A file name may hold any byte; only the fields around it matter.
        let line = String::from_utf8_lossy(&buf);
        each(no, &line)?;
    }
}
