//! `pinnerd topology`: the machine's CPUs as a tree (packages → nodes → LLC groups →
//! cores → CPUs) or as JSON.
//!
//! Rendering lives in [`render_tree`] and [`TopologyJson`], both taking the discovered
//! [`Topology`] and [`Fingerprint`], so further sections (latency domains from a
//! matrix) append to their output without touching discovery.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::domains::{self, Domains, Finding, Misfit};
use crate::fingerprint::{Fingerprint, FingerprintInputs};
use crate::matrix::LatencyMatrix;
use crate::report::groups_line;
use crate::sysroot::SysRoot;
use crate::topology::{Cache, CoreType, Cpu, Topology};

#[derive(Debug, clap::Args)]
pub struct TopologyArgs {
    /// Read sysfs from DIR instead of the running machine's. DIR is a sysfs root (with
    /// devices/system/cpu) or a captured machine holding sys/ and proc/.
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Read procfs (CPU model, microcode, kernel release) from DIR. Defaults to the
    /// proc/ beside --sysfs when there is one, else the running machine's.
    #[arg(long, value_name = "DIR")]
    pub procfs: Option<PathBuf>,
    /// Print JSON instead of the tree.
    #[arg(long)]
    pub json: bool,
    /// Also show the latency domains found in this matrix (our JSON or
    /// core-to-core-latency's CSV), reconciled with the topology when it fits.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Also draw the latency domains as SVG into FILE: one row per level, coarsest on
    /// top, each group a box over its CPUs. From --matrix when given, else from sysfs.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also draw the heatmap of the --matrix file as SVG into FILE.
    #[arg(long, value_name = "FILE", requires = "matrix")]
    pub heatmap: Option<PathBuf>,
}

pub fn run(args: TopologyArgs) -> anyhow::Result<ExitCode> {
    let root = SysRoot::resolve(args.sysfs.as_deref(), args.procfs.as_deref());
    let topology = Topology::discover(&root)
        .with_context(|| format!("reading the CPU topology under {}", root.sys.display()))?;
    let fingerprint = Fingerprint::read(&root).context("computing the hardware fingerprint")?;
    let domains = match &args.matrix {
        Some(path) => Some(domains_for(path, &topology)?),
        None => None,
    };
    let sched_ext = crate::sched_ext::read(&root).context("reading the sched_ext state")?;
    draw(&args, &topology, domains.as_ref())?;
    if args.json {
        let report = TopologyJson::new(&topology, &fingerprint, domains.as_ref(), &sched_ext);
        // Through a `Value`: the keys in alphabetical order, as they have always been.
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::to_value(&report)?)?
        );
    } else {
        out!("{}", render_tree(&topology, &fingerprint));
        if let Some(d) = &domains {
            out!("{}", d.render());
        }
        // Only when one runs: the tree of a machine without one stays as it was.
        if let Some(s) = &sched_ext {
            outln!("sched_ext: {}", s.describe());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the pictures `--svg` and `--heatmap` ask for.
fn draw(
    args: &TopologyArgs,
    topology: &Topology,
    view: Option<&DomainsView>,
) -> anyhow::Result<()> {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if let Some(out) = &args.svg {
        let (domains, title) = match view {
            Some(v) => (
                v.domains.clone(),
                format!(
                    "latency domains of {}, {} CPUs",
                    name(&v.path),
                    v.domains.cpus().len()
                ),
            ),
            None => (
                Domains::from_topology(topology).context("latency domains from sysfs")?,
                format!(
                    "domains of this machine's sysfs topology, {} CPUs",
                    topology.cpus.len()
                ),
            ),
        };
        let svg = crate::domains::picture::svg_domains(&domains, &title)?;
        std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    }
    if let (Some(out), Some(path)) = (&args.heatmap, &args.matrix) {
        let m = LatencyMatrix::load(path)?;
        let title = format!(
            "one-way core-to-core latency (ns), {}, {} CPUs",
            name(path),
            m.len()
        );
        let svg = crate::matrix::render::svg_heatmap(&m, &title)?;
        std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn ids(set: &CpuSet) -> Vec<u32> {
    set.iter().collect()
}

/// `pinnerd topology --json`: `fingerprint` and its inputs, the CPU sets (as arrays of
/// ids), one `cpus` entry per online CPU, `nodes` and `warnings`; with `--matrix` the
/// latency domains found in it; `sched_ext`.
#[derive(Debug, Serialize)]
pub struct TopologyJson<'a> {
    pub fingerprint: &'a str,
    pub fingerprint_inputs: &'a FingerprintInputs,
    pub online: Vec<u32>,
    pub possible: Vec<u32>,
    pub present: Vec<u32>,
    pub offline: Vec<u32>,
    pub isolated: Vec<u32>,
    pub usable: Vec<u32>,
    pub smt: bool,
    pub hybrid: bool,
    /// Where the core kinds come from (`cpu_core`/`cpu_atom`, rankings…); `null` on a
    /// machine with one kind of core.
    pub core_types_from: Option<&'a str>,
    pub x3d_mode: Option<&'a str>,
    /// The last-level cache groups, with what `--prefer` weighs.
    pub llc_groups: Vec<LlcGroupJson>,
    pub cpus: Vec<CpuJson<'a>>,
    pub nodes: Vec<NodeJson<'a>>,
    pub warnings: &'a [String],
    /// With `--matrix`: the latency domains found in it.
    #[serde(flatten)]
    pub domains: Option<DomainsJson<'a>>,
    /// `null` when no sched_ext scheduler runs, else `{"state": …, "ops": NAME}`.
    pub sched_ext: &'a Option<crate::sched_ext::SchedExt>,
}

/// One online CPU in `topology --json`.
#[derive(Debug, Serialize)]
pub struct CpuJson<'a> {
    pub cpu: u32,
    pub package: u32,
    pub die: u32,
    pub cluster: Option<u32>,
    pub core: u32,
    pub node: u32,
    pub siblings: Vec<u32>,
    /// The CPUs sharing its last-level cache.
    pub llc: Option<Vec<u32>>,
    pub core_type: Option<CoreType>,
    pub capacity: Option<u32>,
    pub max_freq_khz: Option<u64>,
    pub prefcore_ranking: Option<u32>,
    pub highest_perf: Option<u32>,
    pub isolated: bool,
    pub caches: Vec<CacheJson<'a>>,
}

/// One cache of a CPU in `topology --json`.
#[derive(Debug, Serialize)]
pub struct CacheJson<'a> {
    pub level: u8,
    #[serde(rename = "type")]
    pub kind: &'a crate::topology::CacheKind,
    pub size_bytes: Option<u64>,
    pub id: Option<u32>,
    pub shared: Vec<u32>,
}

/// One NUMA node in `topology --json`: its CPUs and SLIT distances by node.
#[derive(Debug, Serialize)]
pub struct NodeJson<'a> {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub distances: &'a std::collections::BTreeMap<u32, u32>,
}

/// One last-level cache group in `topology --json`.
#[derive(Debug, Serialize)]
pub struct LlcGroupJson {
    pub cpus: Vec<u32>,
    pub level: u8,
    pub size_bytes: Option<u64>,
    pub cores: usize,
    pub bytes_per_core: Option<u64>,
    pub best_ranking: Option<u32>,
    pub max_freq_khz: Option<u64>,
}

/// The latency domains of `topology --matrix --json`.
#[derive(Debug, Serialize)]
pub struct DomainsJson<'a> {
    /// Finest level first, each with its latency and its groups as arrays of CPU ids.
    pub domains: Vec<LevelJson>,
    pub domains_matrix: String,
    pub domains_trust: crate::domains::Trust,
    pub domain_findings: &'a [Finding],
    pub domain_warnings: &'a [String],
    /// A sparse matrix: pairs measured and all pairs, and whether background
    /// completion is still measuring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matrix_pairs_measured: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matrix_pairs_total: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matrix_completing: Option<bool>,
}

/// One latency level in `topology --matrix --json`.
#[derive(Debug, Serialize)]
pub struct LevelJson {
    pub level: crate::domains::LevelKind,
    pub name: String,
    pub latency_ns: Option<f64>,
    pub groups: Vec<Vec<u32>>,
}

impl<'a> TopologyJson<'a> {
    pub fn new(
        topology: &'a Topology,
        fingerprint: &'a Fingerprint,
        domains: Option<&'a DomainsView>,
        sched_ext: &'a Option<crate::sched_ext::SchedExt>,
    ) -> TopologyJson<'a> {
        TopologyJson {
            fingerprint: &fingerprint.hex,
            fingerprint_inputs: &fingerprint.inputs,
            online: ids(&topology.online),
            possible: ids(&topology.possible),
            present: ids(&topology.present),
            offline: ids(&topology.offline),
            isolated: ids(&topology.isolated),
            usable: ids(&topology.usable()),
            smt: topology.has_smt(),
            hybrid: topology.is_hybrid(),
            core_types_from: topology.core_types_from.as_deref(),
            x3d_mode: topology.x3d_mode.as_deref(),
            llc_groups: topology
                .llc_summary()
                .iter()
                .map(|g| LlcGroupJson {
                    cpus: ids(&g.cpus),
                    level: g.level,
                    size_bytes: g.size_bytes,
                    cores: g.cores,
                    bytes_per_core: g.bytes_per_core,
                    best_ranking: g.best_ranking,
                    max_freq_khz: g.max_freq_khz,
                })
                .collect(),
            cpus: topology
                .cpus
                .iter()
                .map(|c| cpu_json(topology, c))
                .collect(),
            nodes: topology
                .nodes
                .iter()
                .map(|n| NodeJson {
                    id: n.id,
                    cpus: ids(&n.cpus),
                    distances: &n.distances,
                })
                .collect(),
            warnings: &topology.warnings,
            domains: domains.map(DomainsView::as_json),
            sched_ext,
        }
    }
}

fn cpu_json<'a>(topology: &Topology, c: &'a Cpu) -> CpuJson<'a> {
    CpuJson {
        cpu: c.cpu,
        package: c.package,
        die: c.die,
        cluster: c.cluster,
        core: c.core,
        node: c.node,
        siblings: ids(&c.siblings),
        llc: c.llc().map(|l| ids(&l.shared)),
        core_type: c.core_type,
        capacity: c.capacity,
        max_freq_khz: c.max_freq_khz,
        prefcore_ranking: c.prefcore_ranking,
        highest_perf: c.highest_perf,
        isolated: topology.isolated.contains(c.cpu),
        caches: c
            .caches
            .iter()
            .map(|k| CacheJson {
                level: k.level,
                kind: &k.kind,
                size_bytes: k.size_bytes,
                id: k.id,
                shared: ids(&k.shared),
            })
            .collect(),
    }
}

/// A labelled tree, drawn with box-drawing characters.
struct Tree {
    label: String,
    children: Vec<Tree>,
}

impl Tree {
    fn leaf(label: String) -> Tree {
        Tree {
            label,
            children: Vec::new(),
        }
    }

    fn draw(&self, out: &mut String, prefix: &str, last: bool, top: bool) {
        if top {
            let _ = writeln!(out, "{}", self.label);
        } else {
            let branch = if last { "└─ " } else { "├─ " };
            let _ = writeln!(out, "{prefix}{branch}{}", self.label);
        }
        let child_prefix = if top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        for (i, child) in self.children.iter().enumerate() {
            child.draw(out, &child_prefix, i + 1 == self.children.len(), false);
        }
    }
}

/// "none" for an empty set, the kernel list otherwise.
fn list(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".to_string()
    } else {
        set.to_string()
    }
}

fn cpus_word(set: &CpuSet) -> String {
    if set.len() == 1 {
        format!("CPU {set}")
    } else {
        format!("CPUs {set}")
    }
}

/// `32 KiB`, `1 MiB`, `1.25 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB {
        if bytes % MIB == 0 {
            format!("{} MiB", bytes / MIB)
        } else {
            format!("{:.2} MiB", bytes as f64 / MIB as f64)
        }
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

fn cache_label(cache: &Cache) -> String {
    match cache.size_bytes {
        Some(size) => format!("{} {}", cache.name(), human_size(size)),
        None => cache.name(),
    }
}

/// The human tree: a header (fingerprint, CPU sets), then packages → (dies →) nodes →
/// LLC groups → cores → CPUs, then warnings.
pub fn render_tree(topology: &Topology, fingerprint: &Fingerprint) -> String {
    let mut out = String::new();
    let inputs = &fingerprint.inputs;
    let model = inputs
        .cpu_model_name
        .clone()
        .or_else(|| inputs.cpu_model.clone())
        .unwrap_or_else(|| "unknown CPU".to_string());
    let _ = writeln!(out, "fingerprint {}  {model}", fingerprint.hex);
    let mut facts = Vec::new();
    if let Some(k) = &inputs.kernel_release {
        facts.push(format!("kernel {k}"));
    }
    if let Some(m) = &inputs.microcode {
        facts.push(format!("microcode {m}"));
    }
    match (&inputs.smt_control, topology.has_smt()) {
        (Some(c), true) => facts.push(format!("SMT on (control: {c})")),
        (Some(c), false) => facts.push(format!("no SMT threads (control: {c})")),
        (None, true) => facts.push("SMT on".to_string()),
        (None, false) => facts.push("no SMT threads".to_string()),
    }
    if inputs.hypervisor_flag || inputs.hypervisor_type.is_some() {
        facts.push(match &inputs.hypervisor_type {
            Some(t) => format!("guest of {t}"),
            None => "guest (hypervisor)".to_string(),
        });
    }
    if let Some(b) = &inputs.bios_version {
        facts.push(format!("BIOS {b}"));
    }
    let _ = writeln!(out, "{}", facts.join(" · "));
    let _ = writeln!(
        out,
        "online {} · usable {} · offline {} · isolated {} · possible {}",
        list(&topology.online),
        list(&topology.usable()),
        list(&topology.offline),
        list(&topology.isolated),
        list(&topology.possible),
    );
    if let Some(from) = &topology.core_types_from {
        let _ = writeln!(
            out,
            "core types from {from}: performance {} · efficiency {}",
            list(&topology.cpus_of_kind(CoreType::Performance)),
            list(&topology.cpus_of_kind(CoreType::Efficiency)),
        );
    }
    if let Some(mode) = &topology.x3d_mode {
        let _ = writeln!(out, "X3D mode: {mode} (amd_x3d_vcache)");
    }
    if topology.nodes.len() > 1 {
        let mut line = String::from("node distances:");
        for n in &topology.nodes {
            let d: Vec<String> = n.distances.values().map(|d| d.to_string()).collect();
            let _ = write!(line, "  {}: {}", n.id, d.join(" "));
        }
        let _ = writeln!(out, "{line}");
    }
    for package in topology.packages() {
        package_tree(topology, package).draw(&mut out, "", true, true);
    }
    for w in &topology.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

fn package_tree(topology: &Topology, package: u32) -> Tree {
    let cpus: Vec<&Cpu> = topology
        .cpus
        .iter()
        .filter(|c| c.package == package)
        .collect();
    let set: CpuSet = cpus.iter().map(|c| c.cpu).collect();
    let dies: BTreeSet<u32> = cpus.iter().map(|c| c.die).collect();
    let children = if dies.len() > 1 {
        boxes_by(
            &cpus,
            "die",
            |c| c.die,
            |in_die| node_trees(topology, in_die),
        )
    } else {
        node_trees(topology, &cpus)
    };
    Tree {
        label: format!("package {package}: {}", cpus_word(&set)),
        children,
    }
}

fn node_trees(topology: &Topology, cpus: &[&Cpu]) -> Vec<Tree> {
    boxes_by(
        cpus,
        "node",
        |c| c.node,
        |in_node| llc_trees(topology, in_node),
    )
}

/// One box per value of `key` among `cpus`, in number order, labelled
/// `{kind} {value}: {its CPUs}` and holding the `children` drawn from its CPUs.
fn boxes_by(
    cpus: &[&Cpu],
    kind: &str,
    key: fn(&Cpu) -> u32,
    children: impl Fn(&[&Cpu]) -> Vec<Tree>,
) -> Vec<Tree> {
    let values: BTreeSet<u32> = cpus.iter().map(|c| key(c)).collect();
    values
        .into_iter()
        .map(|v| {
            let members: Vec<&Cpu> = cpus.iter().copied().filter(|c| key(c) == v).collect();
            let set: CpuSet = members.iter().map(|c| c.cpu).collect();
            Tree {
                label: format!("{kind} {v}: {}", cpus_word(&set)),
                children: children(&members),
            }
        })
        .collect()
}

fn llc_trees(topology: &Topology, cpus: &[&Cpu]) -> Vec<Tree> {
    // Group by the LLC sharing set; CPUs without cache information form one group.
    let mut groups: Vec<(Option<&Cache>, Vec<&Cpu>)> = Vec::new();
    for &cpu in cpus {
        let llc = cpu.llc();
        let key = llc.map(|l| &l.shared);
        match groups.iter_mut().find(|(l, _)| l.map(|l| &l.shared) == key) {
            Some((_, members)) => members.push(cpu),
            None => groups.push((llc, vec![cpu])),
        }
    }
    groups
        .into_iter()
        .map(|(llc, members)| {
            let set: CpuSet = members.iter().map(|c| c.cpu).collect();
            let label = match llc {
                Some(cache) if cache.shared == set => {
                    format!("{}: {}", cache_label(cache), cpus_word(&set))
                }
                Some(cache) => format!(
                    "{}: {} (shared with {})",
                    cache_label(cache),
                    cpus_word(&set),
                    cache.shared
                ),
                None => format!("LLC unknown: {}", cpus_word(&set)),
            };
            Tree {
                label,
                children: core_trees(topology, &members, llc),
            }
        })
        .collect()
}

fn core_trees(topology: &Topology, cpus: &[&Cpu], llc: Option<&Cache>) -> Vec<Tree> {
    let mut cores: Vec<Vec<&Cpu>> = Vec::new();
    for &cpu in cpus {
        match cores.iter_mut().find(|c| c[0].siblings == cpu.siblings) {
            Some(core) => core.push(cpu),
            None => cores.push(vec![cpu]),
        }
    }
    cores
        .into_iter()
        .map(|members| {
            let first = members[0];
            let mut label = format!("core {}", first.core);
            let mut tags = Vec::new();
            if let Some(t) = first.core_type {
                tags.push(t.to_string());
            }
            if let Some(khz) = first.max_freq_khz {
                tags.push(format!("{:.1} GHz", khz as f64 / 1e6));
            }
            if let Some(rank) = first.prefcore_ranking {
                tags.push(format!("rank {rank}"));
            }
            if !tags.is_empty() {
                let _ = write!(label, " [{}]", tags.join(" "));
            }
            let set: CpuSet = members.iter().map(|c| c.cpu).collect();
            let _ = write!(label, ": {}", cpus_word(&set));
            if first.siblings.len() > 1 {
                label.push_str(" (SMT)");
            }
            let isolated = set.intersection(&topology.isolated);
            if !isolated.is_empty() {
                let _ = write!(label, " (isolated: {isolated})");
            }
            let private: Vec<String> = first
                .caches
                .iter()
                .filter(|c| Some(*c) != llc)
                .map(|c| {
                    if c.shared.is_subset(&first.siblings) {
                        cache_label(c)
                    } else {
                        format!("{} shared with {}", cache_label(c), c.shared)
                    }
                })
                .collect();
            if !private.is_empty() {
                let _ = write!(label, " · {}", private.join(", "));
            }
            Tree::leaf(label)
        })
        .collect()
}

/// A latency in words; `unknown` without one.
pub(super) fn ns(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} ns"))
        .unwrap_or_else(|| "unknown".into())
}

/// Latency domains of a matrix file, for `pinnerd topology --matrix`.
#[derive(Debug)]
pub struct DomainsView {
    pub path: PathBuf,
    pub domains: Domains,
    pub findings: Vec<Finding>,
    pub warnings: Vec<String>,
    /// Pairs measured and all pairs, for a sparse matrix (the rest are inferred until
    /// background completion measures them); `None` for a full matrix.
    pub measured: Option<(usize, usize)>,
}

/// Loads a matrix and builds its domains, reconciled with the topology when the matrix
/// was measured on its CPUs, else from the matrix alone (with a warning saying so).
pub fn domains_for(path: &Path, topology: &Topology) -> anyhow::Result<DomainsView> {
    let m = LatencyMatrix::load(path)?;
    let measured = m
        .sparse
        .is_some()
        .then(|| crate::measure::complete::measured_share(&m));
    let selected = domains::select(Some(&m), Some(topology), Misfit::MatrixAlone)
        .with_context(|| format!("latency domains of {}", path.display()))?;
    let mut warnings = m.warnings;
    warnings.extend(selected.warnings);
    Ok(DomainsView {
        path: path.to_owned(),
        domains: selected.domains,
        findings: selected.findings,
        warnings,
        measured,
    })
}

impl DomainsView {
    /// The domains as `topology --json` gives them.
    pub fn as_json(&self) -> DomainsJson<'_> {
        DomainsJson {
            domains: self
                .domains
                .levels()
                .iter()
                .map(|l| LevelJson {
                    level: l.kind,
                    name: l.name(),
                    latency_ns: l.latency_ns,
                    groups: l.groups.iter().map(|g| g.iter().collect()).collect(),
                })
                .collect(),
            domains_matrix: self.path.display().to_string(),
            domains_trust: self.domains.trust(),
            domain_findings: &self.findings,
            domain_warnings: &self.warnings,
            matrix_pairs_measured: self.measured.map(|(m, _)| m),
            matrix_pairs_total: self.measured.map(|(_, t)| t),
            matrix_completing: self.measured.map(|(m, t)| m < t),
        }
    }

    /// The human section appended to the topology tree.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "latency domains from {} (trusted: {:?}), finest first:",
            self.path.display(),
            self.domains.trust()
        );
        for l in self.domains.levels() {
            let _ = writeln!(
                s,
                "  {:<24} {:>10}  {}",
                l.name(),
                ns(l.latency_ns),
                groups_line(&l.groups, 8)
            );
        }
        match self.measured {
            Some((m, t)) if m < t => {
                let _ = writeln!(
                    s,
                    "  measured: {m} of {t} pairs ({:.1}%), the rest inferred from a sparse measurement; background completion measures them",
                    100.0 * m as f64 / t.max(1) as f64
                );
            }
            Some((_, t)) => {
                let _ = writeln!(s, "  measured: all {t} pairs (sparse, then completed)");
            }
            None => {}
        }
        for f in &self.findings {
            let _ = writeln!(s, "  finding: {f}");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_resolve_from_a_machine_dir_a_sysfs_root_or_explicit_flags() {
        let dir = tempfile::tempdir().unwrap();
        let machine = dir.path().join("m");
        std::fs::create_dir_all(machine.join("sys/devices/system/cpu")).unwrap();
        std::fs::create_dir_all(machine.join("proc")).unwrap();
        let expect = SysRoot::machine(&machine);
        assert_eq!(SysRoot::resolve(Some(&machine), None), expect);
        assert_eq!(SysRoot::resolve(Some(&machine.join("sys")), None), expect);
        let lone = dir.path().join("lone");
        std::fs::create_dir_all(lone.join("devices/system/cpu")).unwrap();
        assert_eq!(
            SysRoot::resolve(Some(&lone), None),
            SysRoot::with_sys(&lone),
            "no proc beside it: the running machine's"
        );
        let proc = dir.path().join("p");
        assert_eq!(
            SysRoot::resolve(Some(&machine), Some(&proc)),
            SysRoot::new(machine.join("sys"), &proc)
        );
        assert_eq!(SysRoot::resolve(None, None), SysRoot::default());
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(human_size(32 * 1024), "32 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1280 * 1024), "1.25 MiB");
        assert_eq!(human_size(100), "100 B");
    }

    #[test]
    fn trees_draw_with_branches() {
        let tree = Tree {
            label: "root".into(),
            children: vec![
                Tree {
                    label: "a".into(),
                    children: vec![Tree::leaf("a1".into())],
                },
                Tree::leaf("b".into()),
            ],
        };
        let mut out = String::new();
        tree.draw(&mut out, "", true, true);
        assert_eq!(out, "root\n├─ a\n│  └─ a1\n└─ b\n");
    }
}
