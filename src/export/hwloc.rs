//! The measured matrix as an hwloc distances file, the input of
//! `hwloc-annotate IN.xml OUT.xml root distances FILE`:
//!
//! ```text
//! name=pinnerd-core-to-core-ns   the structure's name
//! 6                              kind: FROM_USER (2) | MEANS_LATENCY (4)
//! 4                              object count
//! pu:0                           one object per line, by hwloc's LOGICAL index
//! …
//! 0                              the values, row by row, one per line (integers)
//! 8
//! …
//! ```
//!
//! hwloc names PUs by logical index, which differs from the Linux CPU number whenever
//! the numbering lies (siblings i and i+8 are logical 0 and 1). Each CPU is mapped
//! through the PU `os_index` of the topology XML: PUs appear in the XML in logical order.

use std::fmt::Write as _;
use std::path::Path;

use super::ExportError;
use crate::matrix::LatencyMatrix;

/// `HWLOC_DISTANCES_KIND_FROM_USER | HWLOC_DISTANCES_KIND_MEANS_LATENCY`.
pub const KIND: u32 = 2 | 4;

/// The unit of the exported values (hwloc stores integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unit {
    /// Nanoseconds, rounded (off-diagonal values at least 1).
    Ns,
    /// Picoseconds, rounded: keeps a tenth of a nanosecond.
    Ps,
}

impl Unit {
    fn scale(self) -> f64 {
        match self {
            Unit::Ns => 1.0,
            Unit::Ps => 1000.0,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Ps => "ps",
        }
    }
}

/// The OS index of every PU, in hwloc's logical order (document order of the XML's
/// `<object type="PU" os_index="N">` elements). Read by an XML parser in one pass:
/// comments, CDATA and processing instructions are not objects, and a malformed document
/// is an error at its line.
pub fn pu_os_indexes(xml: &str, path: &Path) -> Result<Vec<u32>, ExportError> {
    use quick_xml::events::Event;
    let err = |line: usize, message: String| ExportError::Topology {
        path: path.to_owned(),
        line,
        message,
    };
    let mut lines = Lines::new(xml);
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut root_seen = false;
    loop {
        let at = reader.buffer_position() as usize;
        let event = reader.read_event().map_err(|e| {
            let line = lines.at(reader.error_position() as usize);
            err(line, format!("malformed XML: {e}"))
        })?;
        let tag = match event {
            Event::Eof => break,
            Event::Start(t) | Event::Empty(t) => t,
            _ => continue,
        };
        if !root_seen {
            root_seen = true;
            if tag.name().as_ref() != "topology" {
                return Err(err(
                    lines.at(at),
                    "not an hwloc topology XML (no <topology> element); make one with `lstopo --of xml`"
                        .into(),
                ));
            }
            continue;
        }
        if tag.name().as_ref() != "object" {
            continue;
        }
        let line = lines.at(at);
        let value = |name: &str| -> Result<Option<String>, ExportError> {
            match tag.try_get_attribute(name) {
                Ok(v) => Ok(v.map(|a| a.value.into_owned())),
                Err(e) => Err(err(line, format!("malformed XML: {e}"))),
            }
        };
        if value("type")?.as_deref() != Some("PU") {
            continue;
        }
        let os =
            value("os_index")?.ok_or_else(|| err(line, "a PU object without os_index".into()))?;
        let os: u32 = os
            .parse()
            .map_err(|_| err(line, format!("PU os_index {os:?} is not a CPU number")))?;
        if !seen.insert(os) {
            return Err(err(line, format!("PU os_index {os} appears twice")));
        }
        out.push(os);
    }
    if !root_seen {
        return Err(err(
            1,
            "not an hwloc topology XML (no <topology> element); make one with `lstopo --of xml`"
                .into(),
        ));
    }
    if out.is_empty() {
        return Err(err(
            lines.at(xml.len()),
            "the topology has no PU objects".into(),
        ));
    }
    Ok(out)
}

/// Line numbers of byte offsets that only move forward: each byte is counted once, so
/// naming the line of every PU stays linear in the document.
struct Lines<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Lines {
            text: text.as_bytes(),
            pos: 0,
            line: 1,
        }
    }

    fn at(&mut self, byte: usize) -> usize {
        let byte = byte.min(self.text.len());
        if byte < self.pos {
            // Backwards (an error position): count from the start.
            return self.text[..byte].iter().filter(|&&b| b == b'\n').count() + 1;
        }
        self.line += self.text[self.pos..byte]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        self.pos = byte;
        self.line
    }
}

/// The distances file for the matrix's CPUs, objects in logical order. `topology`
/// names the XML in errors.
pub fn distances(
    m: &LatencyMatrix,
    pus: &[u32],
    topology: &Path,
    unit: Unit,
) -> Result<String, ExportError> {
    // (logical index, matrix row) for every CPU of the matrix, in logical order.
    let mut objs: Vec<(usize, usize)> = Vec::with_capacity(m.len());
    for (row, &cpu) in m.cpus.iter().enumerate() {
        let logical = pus.iter().position(|&os| os == cpu).ok_or_else(|| {
            let mut sorted = pus.to_vec();
            sorted.sort_unstable();
            ExportError::UnknownCpu {
                path: topology.to_owned(),
                cpu,
                available: sorted.into_iter().collect::<crate::CpuSet>().to_string(),
            }
        })?;
        objs.push((logical, row));
    }
    objs.sort_unstable();
    let mut s = String::new();
    let _ = writeln!(s, "name=pinnerd-core-to-core-{}", unit.as_str());
    let _ = writeln!(s, "{KIND}");
    let _ = writeln!(s, "{}", objs.len());
    for (logical, _) in &objs {
        let _ = writeln!(s, "pu:{logical}");
    }
    for &(_, i) in &objs {
        for &(_, j) in &objs {
            if i == j {
                s.push_str("0\n");
                continue;
            }
            let v = m.at(i, j).ok_or(ExportError::MissingPair {
                a: m.cpus[i].min(m.cpus[j]),
                b: m.cpus[i].max(m.cpus[j]),
            })?;
            let _ = writeln!(s, "{}", value(v, unit));
        }
    }
    Ok(s)
}

/// One cell as hwloc stores it: an integer in `unit`, at least 1 off the diagonal (0
/// would say "the same object").
pub fn value(ns: f64, unit: Unit) -> u64 {
    ((ns * unit.scale()).round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f">
    <object type="Package" os_index="0">
      <object type="Core" os_index="0">
        <object type="PU" os_index="0" cpuset="0x00000001"/>
        <object type="PU" os_index="2" cpuset="0x00000004"/>
      </object>
      <object type="Core" os_index="1">
        <object os_index="1" type="PU"/>
        <object type="PU" os_index="3"/>
      </object>
    </object>
  </object>
</topology>
"#;

    #[test]
    fn pus_in_logical_order() {
        let pus = pu_os_indexes(XML, Path::new("t.xml")).unwrap();
        assert_eq!(pus, vec![0, 2, 1, 3]);
    }

    #[test]
    fn a_commented_out_pu_is_not_a_pu() {
        let commented = XML.replacen(
            "<object type=\"PU\"",
            "<!-- <object type=\"PU\" os_index=\"9\"/> --><![CDATA[<object type=\"PU\" os_index=\"8\"/>]]><object type=\"PU\"",
            1,
        );
        assert_ne!(commented, XML);
        let pus = pu_os_indexes(&commented, Path::new("t.xml")).unwrap();
        assert_eq!(pus, vec![0, 2, 1, 3]);
        // Malformed XML is an error at its line, not a guess.
        let e = pu_os_indexes(
            &XML.replacen("</object>", "</objet>", 1),
            Path::new("t.xml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("malformed XML"), "{e}");
    }

    #[test]
    fn objects_are_logical_indexes_and_values_follow_them() {
        let pus = pu_os_indexes(XML, Path::new("t.xml")).unwrap();
        // CPU 0 and 2 are siblings (8 ns); other pairs 20 + a + b.
        let m = LatencyMatrix::from_fn(vec![0, 1, 2, 3], |i, j| {
            if i % 2 == j % 2 {
                8.2
            } else {
                20.0 + (i + j) as f64
            }
        });
        let out = distances(&m, &pus, Path::new("t.xml"), Unit::Ns).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            &lines[..7],
            [
                "name=pinnerd-core-to-core-ns",
                "6",
                "4",
                "pu:0",
                "pu:1",
                "pu:2",
                "pu:3"
            ]
        );
        let values: Vec<u64> = lines[7..].iter().map(|l| l.parse().unwrap()).collect();
        assert_eq!(values.len(), 16);
        // logical 0 = CPU 0, logical 1 = CPU 2: siblings.
        assert_eq!(values[1], 8);
        // logical 1 (CPU 2) and logical 2 (CPU 1): 20 + 2 + 1.
        assert_eq!(values[4 + 2], 23);
        assert_eq!(values[5], 0);
        let ps = distances(&m, &pus, Path::new("t.xml"), Unit::Ps).unwrap();
        assert!(ps.lines().nth(8).unwrap() == "8200", "{ps}");
    }

    #[test]
    fn bad_topologies_and_matrices_are_named() {
        let e = pu_os_indexes("<html/>", Path::new("t.xml")).unwrap_err();
        assert!(
            e.to_string().starts_with("t.xml:1: not an hwloc topology"),
            "{e}"
        );
        let bad = XML.replace("os_index=\"3\"", "os_index=\"x\"");
        let e = pu_os_indexes(&bad, Path::new("t.xml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.xml:12: PU os_index \"x\" is not a CPU number"
        );
        let pus = pu_os_indexes(XML, Path::new("t.xml")).unwrap();
        let m = LatencyMatrix::from_fn(vec![0, 7], |_, _| 10.0);
        let e = distances(&m, &pus, Path::new("t.xml"), Unit::Ns).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.xml: the matrix names CPU 7, which is not a PU of this topology (its PUs' OS indexes: 0-3)"
        );
        let mut hole = LatencyMatrix::from_fn(vec![0, 1], |_, _| 10.0);
        hole.latency_ns.set(0, 1, None);
        let e = distances(&hole, &pus, Path::new("t.xml"), Unit::Ns).unwrap_err();
        assert!(e.to_string().contains("CPUs 0 and 1"), "{e}");
    }
}
