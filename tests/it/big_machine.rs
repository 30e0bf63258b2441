//! Generated machines of 512 to 8,192 CPUs: a sysfs/procfs tree (sockets, one NUMA node
//! each, LLC groups, SMT) and the latency matrix such a machine would measure. Written
//! on demand rather than committed: a 4,096-CPU tree is about 78,000 small files.
//!
//! Shared by the integration tests (`tests/it/big.rs`) and the cost benches
//! (`examples/big_machine.rs`, `benches/big-machines.sh`), so the figures in
//! `benches/README.md` are of the machines the tests run on.
//!
//! The layout follows Linux on a multi-socket Intel server: the first threads of every
//! core are numbered socket by socket (CPUs `0..n/2`), their SMT siblings `+n/2`; each
//! socket holds 128 cores (or fewer on small machines), an LLC is 8 cores (16 CPUs).

use std::fmt::Write as _;
use std::path::Path;

/// Cores sharing one last-level cache.
pub const LLC_CORES: usize = 8;

/// The shape of a generated machine of `cpus` logical CPUs (a multiple of 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub cpus: usize,
    pub sockets: usize,
}

impl Shape {
    /// 2 sockets up to 512 CPUs, then 256 CPUs (128 cores, 2 threads) a socket.
    pub fn of(cpus: usize) -> Shape {
        assert!(cpus >= 32 && cpus % 32 == 0, "{cpus}: a multiple of 32");
        Shape {
            cpus,
            sockets: (cpus / 256).max(2),
        }
    }
    pub fn cores(&self) -> usize {
        self.cpus / 2
    }
    pub fn cores_per_socket(&self) -> usize {
        self.cores() / self.sockets
    }
    pub fn llcs(&self) -> usize {
        self.cores() / LLC_CORES
    }
    /// The core of CPU `c` (its SMT sibling is `c ± n/2`).
    pub fn core(&self, c: usize) -> usize {
        c % self.cores()
    }
    pub fn socket(&self, c: usize) -> usize {
        self.core(c) / self.cores_per_socket()
    }
    pub fn llc(&self, c: usize) -> usize {
        self.core(c) / LLC_CORES
    }
    /// The one-way latency a measurement would find between CPUs `a != b`, in ns:
    /// SMT siblings 7, one LLC 24 (+ a little by distance on the ring), one socket 48,
    /// another socket 130.
    pub fn latency(&self, a: usize, b: usize) -> f64 {
        if self.core(a) == self.core(b) {
            7.0
        } else if self.llc(a) == self.llc(b) {
            24.0 + (self.core(a) % LLC_CORES).abs_diff(self.core(b) % LLC_CORES) as f64 * 0.5
        } else if self.socket(a) == self.socket(b) {
            48.0
        } else {
            130.0
        }
    }
}

/// The kernel's list format of a sorted run of ids.
fn list(ids: impl IntoIterator<Item = usize>) -> String {
    let mut out = String::new();
    let mut run: Option<(usize, usize)> = None;
    let flush = |out: &mut String, (a, b): (usize, usize)| {
        if !out.is_empty() {
            out.push(',');
        }
        if a == b {
            let _ = write!(out, "{a}");
        } else {
            let _ = write!(out, "{a}-{b}");
        }
    };
    for i in ids {
        run = match run {
            Some((a, b)) if i == b + 1 => Some((a, i)),
            Some(r) => {
                flush(&mut out, r);
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        flush(&mut out, r);
    }
    out
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, format!("{text}\n")).unwrap();
}

/// Writes the machine's tree under `root` (`root/sys`, `root/proc`), as the topology,
/// fingerprint and NUMA readers look at it.
pub fn write_tree(root: &Path, s: Shape) {
    let n = s.cpus;
    let half = s.cores();
    let base = "sys/devices/system/cpu";
    write(root, &format!("{base}/online"), &list(0..n));
    write(root, &format!("{base}/possible"), &list(0..n));
    write(root, &format!("{base}/present"), &list(0..n));
    write(root, &format!("{base}/offline"), "");
    write(root, &format!("{base}/isolated"), "");
    write(root, &format!("{base}/smt/control"), "on");
    write(root, &format!("{base}/smt/active"), "1");
    // The lists shared by many CPUs, made once.
    let both = |cores: std::ops::Range<usize>| {
        list(cores.clone().chain(cores.start + half..cores.end + half))
    };
    let socket_list: Vec<String> = (0..s.sockets)
        .map(|k| both(k * s.cores_per_socket()..(k + 1) * s.cores_per_socket()))
        .collect();
    let llc_list: Vec<String> = (0..s.llcs())
        .map(|l| both(l * LLC_CORES..(l + 1) * LLC_CORES))
        .collect();
    for c in 0..n {
        let core = s.core(c);
        let d = format!("{base}/cpu{c}");
        if c != 0 {
            write(root, &format!("{d}/online"), "1");
        }
        let sib = list([core, core + half]);
        let pkg = &socket_list[s.socket(c)];
        let t = format!("{d}/topology");
        write(
            root,
            &format!("{t}/physical_package_id"),
            &s.socket(c).to_string(),
        );
        write(
            root,
            &format!("{t}/core_id"),
            &(core % s.cores_per_socket()).to_string(),
        );
        write(root, &format!("{t}/core_cpus_list"), &sib);
        write(root, &format!("{t}/package_cpus_list"), pkg);
        write(root, &format!("{t}/die_id"), "0");
        write(root, &format!("{t}/die_cpus_list"), pkg);
        write(root, &format!("{t}/cluster_id"), "65535");
        write(root, &format!("{t}/cluster_cpus_list"), &sib);
        let caches = [
            (2, "Unified", "2048K", sib.as_str(), core),
            (
                3,
                "Unified",
                "32768K",
                llc_list[s.llc(c)].as_str(),
                s.llc(c),
            ),
        ];
        for (i, (level, kind, size, shared, id)) in caches.into_iter().enumerate() {
            let ix = format!("{d}/cache/index{i}");
            write(root, &format!("{ix}/level"), &level.to_string());
            write(root, &format!("{ix}/type"), kind);
            write(root, &format!("{ix}/size"), size);
            write(root, &format!("{ix}/shared_cpu_list"), shared);
            write(root, &format!("{ix}/id"), &id.to_string());
        }
    }
    let nb = "sys/devices/system/node";
    write(root, &format!("{nb}/online"), &list(0..s.sockets));
    write(root, &format!("{nb}/possible"), &list(0..s.sockets));
    for (k, cpus) in socket_list.iter().enumerate() {
        write(root, &format!("{nb}/node{k}/cpulist"), cpus);
        let row: Vec<String> = (0..s.sockets)
            .map(|m| if m == k { "10" } else { "21" })
            .map(str::to_string)
            .collect();
        write(root, &format!("{nb}/node{k}/distance"), &row.join(" "));
    }
    write(root, "sys/class/dmi/id/bios_vendor", "Generated");
    write(root, "sys/class/dmi/id/bios_version", &format!("big-{n}"));
    write(root, "sys/class/dmi/id/bios_date", "11/28/2026");
    let mut cpuinfo = String::new();
    for c in 0..n {
        let _ = write!(
            cpuinfo,
            "processor\t: {c}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 173\nmodel name\t: Generated {n}-CPU machine\nstepping\t: 1\nmicrocode\t: 0x1\nflags\t\t: fpu tsc ht constant_tsc\n\n"
        );
    }
    write(root, "proc/cpuinfo", cpuinfo.trim_end());
    write(root, "proc/sys/kernel/osrelease", "6.12.57+deb13-amd64");
}

/// The machine's complete matrix (every cell, no statistics) as pinnerd stores one of
/// its size: compact JSON up to 1,024 CPUs, the binary form (`matrix::binary`) from
/// `BINARY_FROM_CPUS` on (the name `truth.json` is kept; readers tell the form by
/// content). What `measure --simulate` answers from. Written as it goes, never held
/// whole (the cells of 8,192 CPUs would take 1 GiB in memory, 300 MB as JSON).
pub fn write_truth(path: &Path, s: Shape) {
    use std::io::Write as _;
    let n = s.cpus;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    if n >= pinnerd::matrix::binary::BINARY_FROM_CPUS {
        w.write_all(pinnerd::matrix::binary::MAGIC).unwrap();
        writeln!(w, "1\n{{\"cpus\":[{}],\"records\":0}}", list_json(n)).unwrap();
        for i in 0..n {
            for j in i + 1..n {
                let code = (s.latency(i, j) * 100.0).round() as u32;
                w.write_all(&code.to_le_bytes()).unwrap();
            }
        }
        w.into_inner().unwrap().sync_all().unwrap();
        return;
    }
    write!(w, "{{\"cpus\":[{}],\"latency_ns\":[", list_json(n)).unwrap();
    let mut row = String::with_capacity(n * 6);
    for i in 0..n {
        row.clear();
        row.push_str(if i == 0 { "[" } else { ",[" });
        for j in 0..n {
            if j > 0 {
                row.push(',');
            }
            if i == j {
                row.push_str("null");
            } else {
                let _ = write!(row, "{}", s.latency(i, j));
            }
        }
        row.push(']');
        w.write_all(row.as_bytes()).unwrap();
    }
    writeln!(w, "]}}").unwrap();
    w.into_inner().unwrap().sync_all().unwrap();
}

fn list_json(n: usize) -> String {
    (0..n).map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// Writes `state/matrix.json`: the machine's matrix (`machine/truth.json`) with the
/// fingerprint of its tree, where a daemon reading that tree (`daemon --machine`)
/// looks for its stored matrix, in the form the daemon's store writes.
pub fn store_matrix(machine: &Path, state: &Path) {
    let root = pinnerd::sysroot::SysRoot::machine(machine);
    let fp = pinnerd::fingerprint::Fingerprint::read(&root).unwrap();
    let mut m = pinnerd::matrix::LatencyMatrix::load(&machine.join("truth.json")).unwrap();
    m.fingerprint = Some(fp.hex);
    let mut out = std::fs::File::create(state.join("matrix.json")).unwrap();
    m.write_file(&mut out).unwrap();
    out.sync_all().unwrap();
}
