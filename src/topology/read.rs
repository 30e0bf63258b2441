//! The sysfs reader: walks the files of a [`SysRoot`] into a [`Topology`], turning
//! missing files into warnings (once per cause, not once per CPU) and assumed values
//! into what the other CPUs say about the same CPU.
//!
//! Must not touch: the model's meaning (see `model`); placement decisions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::model::{
    Cache, CacheKind, CoreType, Cpu, Node, Topology, TopologyError, CPU_DIR, NODE_DIR,
};
use super::parse::{parse_error, parse_list, parse_numbers, parse_one, parse_size};
use crate::cpuset::CpuSet;
use crate::sysroot::{self, FileError, SysRoot};

impl Topology {
    /// Reads the topology from the sysfs root of `root`.
    pub fn discover(root: &SysRoot) -> Result<Topology, TopologyError> {
        Reader::new(root).read()
    }

    /// Reads the topology of a fixture or captured tree; the same as [`discover`],
    /// named for call sites that read a tree other than the running machine's.
    ///
    /// [`discover`]: Topology::discover
    pub fn from_sysroot(root: &SysRoot) -> Result<Topology, TopologyError> {
        Topology::discover(root)
    }
}

/// Collects the per-CPU degradations so that one missing file across 256 CPUs makes
/// one warning line, not 256.
#[derive(Default)]
struct Degraded {
    /// (what is missing, what was assumed) → CPUs affected.
    by_cause: BTreeMap<(String, String), CpuSet>,
}

impl Degraded {
    fn add(&mut self, cpu: u32, missing: &str, assumed: &str) {
        self.by_cause
            .entry((missing.to_string(), assumed.to_string()))
            .or_default()
            .insert(cpu);
    }

    fn into_warnings(self) -> impl Iterator<Item = String> {
        self.by_cause
            .into_iter()
            .map(|((missing, assumed), cpus)| format!("CPUs {cpus}: {missing}; {assumed}"))
    }
}

/// CPU id → NUMA node id.
type CpuNodes = BTreeMap<u32, u32>;

pub(super) struct Reader<'a> {
    pub(super) root: &'a SysRoot,
    warnings: Vec<String>,
    degraded: Degraded,
    /// (CPU, field) pairs whose value was assumed, not read: [`reconcile`] replaces
    /// them with what other CPUs say about this one.
    guessed: BTreeSet<(u32, String)>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(root: &'a SysRoot) -> Self {
        Reader {
            root,
            warnings: Vec::new(),
            degraded: Degraded::default(),
            guessed: BTreeSet::new(),
        }
    }

    pub(super) fn cpu_path(&self, rel: &str) -> PathBuf {
        self.root.sys_path(Path::new(CPU_DIR).join(rel))
    }

    pub(super) fn read(mut self) -> Result<Topology, TopologyError> {
        let online = match self.list(&self.cpu_path("online"))? {
            Some(set) => set,
            None => self.online_from_dirs()?,
        };
        if online.is_empty() {
            return Err(TopologyError::NoCpus {
                path: self.cpu_path(""),
            });
        }
        let offline_file = self.list(&self.cpu_path("offline"))?;
        let possible = match self.list(&self.cpu_path("possible"))? {
            Some(set) => set,
            None => {
                let assumed = online.union(offline_file.as_ref().unwrap_or(&CpuSet::new()));
                self.warnings.push(format!(
                    "{CPU_DIR}/possible missing; assumed online and offline CPUs ({assumed})"
                ));
                assumed
            }
        };
        let present = match self.list(&self.cpu_path("present"))? {
            Some(set) => set,
            None => {
                self.warnings.push(format!(
                    "{CPU_DIR}/present missing; assumed the possible CPUs ({possible})"
                ));
                possible.clone()
            }
        };
        // The kernel's `offline` is possible minus online; computing it keeps the
        // invariant even where the file is missing or disagrees with a racing hotplug.
        let offline = possible.difference(&online);
        let isolated = match self.list(&self.cpu_path("isolated"))? {
            Some(set) => set,
            None => {
                self.warnings.push(format!(
                    "{CPU_DIR}/isolated missing; assumed no isolated CPUs"
                ));
                CpuSet::new()
            }
        };

        let core_type = self.core_types()?;
        let mut core_types_from =
            (!core_type.is_empty()).then(|| "devices/cpu_core/cpus".to_string());
        let (nodes, cpu_node) = self.nodes(&online)?;

        let mut nodes = nodes;
        let mut cpus = Vec::with_capacity(online.len());
        for cpu in &online {
            let node = match cpu_node.get(&cpu) {
                Some(&node) => node,
                None => match nodes.first_mut() {
                    Some(first) => {
                        self.degraded.add(
                            cpu,
                            "in no node's cpulist",
                            &format!("assumed node {}", first.id),
                        );
                        first.cpus.insert(cpu);
                        first.id
                    }
                    None => 0,
                },
            };
            let mut entry = self.cpu(cpu, node)?;
            entry.core_type = core_type.get(&cpu).copied();
            (entry.prefcore_ranking, entry.highest_perf) = self.perf(cpu)?;
            cpus.push(entry);
        }
        if core_types_from.is_none() {
            if let Some((from, kinds)) = self.capacity_kinds(&cpus)? {
                for c in cpus.iter_mut() {
                    c.core_type = kinds.get(&c.cpu).copied();
                }
                core_types_from = Some(from);
            }
        }
        let x3d_mode = self.x3d_mode()?;
        reconcile(&mut cpus, &self.guessed);
        let nodes = if nodes.is_empty() {
            vec![Node {
                id: 0,
                cpus: online.clone(),
                distances: BTreeMap::from([(0, 10)]),
            }]
        } else {
            nodes
        };

        let mut warnings = self.warnings;
        warnings.extend(self.degraded.into_warnings());
        Ok(Topology {
            online,
            possible,
            present,
            offline,
            isolated,
            cpus,
            nodes,
            warnings,
            core_types_from,
            x3d_mode,
        })
    }

    /// Without `cpu/online`: every `cpuN` directory whose `online` file is absent
    /// (CPU 0 often cannot be offlined and has none) or reads 1.
    fn online_from_dirs(&mut self) -> Result<CpuSet, TopologyError> {
        let dir = self.cpu_path("");
        let names = self.names(&dir)?;
        let mut online = CpuSet::new();
        for name in names {
            let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let flag: Option<u32> = self.num(&self.cpu_path(&format!("cpu{cpu}/online")))?;
            if flag != Some(0) {
                online.insert(cpu);
            }
        }
        if !online.is_empty() {
            self.warnings.push(format!(
                "{CPU_DIR}/online missing; online CPUs taken from the cpuN directories ({online})"
            ));
        }
        Ok(online)
    }

    fn core_types(&mut self) -> Result<BTreeMap<u32, CoreType>, TopologyError> {
        let mut types = BTreeMap::new();
        for (pmu, kind) in [
            ("devices/cpu_core/cpus", CoreType::Performance),
            ("devices/cpu_atom/cpus", CoreType::Efficiency),
        ] {
            if let Some(set) = self.list(&self.root.sys_path(pmu))? {
                for cpu in &set {
                    types.insert(cpu, kind);
                }
            }
        }
        Ok(types)
    }

    /// NUMA nodes and the node of each CPU; empty when the kernel has no NUMA support.
    fn nodes(&mut self, online: &CpuSet) -> Result<(Vec<Node>, CpuNodes), TopologyError> {
        let base = self.root.sys_path(NODE_DIR);
        let ids = match self.list(&base.join("online"))? {
            Some(ids) => ids,
            None => {
                let listed = self.names(&base)?;
                let ids: CpuSet = listed
                    .iter()
                    .filter_map(|n| n.strip_prefix("node")?.parse().ok())
                    .collect();
                if ids.is_empty() {
                    self.warnings.push(format!(
                        "{NODE_DIR} missing (kernel without NUMA?); assumed one node 0 holding every CPU"
                    ));
                    return Ok((Vec::new(), BTreeMap::new()));
                }
                self.warnings.push(format!(
                    "{NODE_DIR}/online missing; nodes taken from the nodeN directories ({ids})"
                ));
                ids
            }
        };
        let order: Vec<u32> = ids.iter().collect();
        let mut nodes = Vec::new();
        let mut cpu_node = BTreeMap::new();
        for &id in &order {
            let dir = base.join(format!("node{id}"));
            let cpus = match self.list(&dir.join("cpulist"))? {
                Some(set) => set.intersection(online),
                None => {
                    self.warnings.push(format!(
                        "{NODE_DIR}/node{id}/cpulist missing; node {id} assumed to hold no CPUs"
                    ));
                    CpuSet::new()
                }
            };
            for cpu in &cpus {
                cpu_node.entry(cpu).or_insert(id);
            }
            let path = dir.join("distance");
            let mut distances = BTreeMap::new();
            match self.text(&path)? {
                Some(text) => {
                    let values = parse_numbers::<u32>(&path, &text)?;
                    if values.len() != order.len() {
                        self.warnings.push(format!(
                            "{NODE_DIR}/node{id}/distance lists {} distances for {} nodes; distances of node {id} ignored",
                            values.len(),
                            order.len()
                        ));
                    } else {
                        distances = order.iter().copied().zip(values).collect();
                    }
                }
                None => self.warnings.push(format!(
                    "{NODE_DIR}/node{id}/distance missing; distances of node {id} unknown"
                )),
            }
            nodes.push(Node {
                id,
                cpus,
                distances,
            });
        }
        Ok((nodes, cpu_node))
    }

    fn cpu(&mut self, cpu: u32, node: u32) -> Result<Cpu, TopologyError> {
        let dir = format!("cpu{cpu}");
        let topo_dir = self.cpu_path(&format!("{dir}/topology"));
        let topo = |f: &str| topo_dir.join(f);
        let alone: CpuSet = [cpu].into_iter().collect();

        let package = self.id_or(
            cpu,
            &topo("physical_package_id"),
            0,
            "package 0 unless a CPU of its package says otherwise",
        )?;
        let die = self.id_or(
            cpu,
            &topo("die_id"),
            0,
            "die 0 unless a CPU of its die says otherwise",
        )?;
        let core = self.id_or(cpu, &topo("core_id"), cpu, "a core id equal to the CPU id")?;
        let cluster = match self.text(&topo("cluster_id"))? {
            None => None,
            Some(text) => match parse_one::<i64>(&topo("cluster_id"), &text)? {
                // x86 prints its invalid id (0xffff) where no L2 cluster is known.
                id if id < 0 || id == 0xffff => None,
                id => u32::try_from(id).ok(),
            },
        };

        let siblings = self.set_or(
            cpu,
            &[topo("core_cpus_list"), topo("thread_siblings_list")],
            &alone,
            "SMT siblings taken from the CPUs listing it, else one thread per core",
        )?;
        let package_cpus = self.set_or(
            cpu,
            &[topo("package_cpus_list"), topo("core_siblings_list")],
            &siblings,
            "package CPUs taken from the CPUs listing it, else the core's CPUs",
        )?;
        // Kernels before 5.2 have neither die file; the die_id warning covers both.
        let die_cpus = if topo("die_id").exists() {
            self.set_or(
                cpu,
                &[topo("die_cpus_list")],
                &package_cpus,
                "die CPUs taken from the CPUs listing it, else the whole package",
            )?
        } else {
            self.set_at(&[topo("die_cpus_list")])?
                .unwrap_or_else(|| package_cpus.clone())
        };
        // Clusters are an optional level (kernels before 5.16 and most x86 parts have
        // none to report): no cluster list simply means the core is its own cluster.
        let cluster_cpus = match self.set_at(&[topo("cluster_cpus_list")])? {
            Some(set) => set,
            None => {
                // Not a warning, but follows the siblings once they are reconciled.
                self.guessed.insert((cpu, "cluster_cpus_list".to_string()));
                siblings.clone()
            }
        };

        let caches = self.caches(cpu)?;
        let capacity = self.num(&self.cpu_path(&format!("{dir}/cpu_capacity")))?;
        let max_freq_khz = self.num(&self.cpu_path(&format!("{dir}/cpufreq/cpuinfo_max_freq")))?;

        Ok(Cpu {
            cpu,
            package,
            die,
            cluster,
            core,
            node,
            siblings,
            cluster_cpus,
            die_cpus,
            package_cpus,
            caches,
            core_type: None,
            capacity,
            max_freq_khz,
            prefcore_ranking: None,
            highest_perf: None,
        })
    }

    fn caches(&mut self, cpu: u32) -> Result<Vec<Cache>, TopologyError> {
        let dir = self.cpu_path(&format!("cpu{cpu}/cache"));
        let names = self.names(&dir)?;
        let mut indices: Vec<u32> = names
            .iter()
            .filter_map(|n| n.strip_prefix("index")?.parse().ok())
            .collect();
        indices.sort_unstable();
        if indices.is_empty() {
            self.degraded.add(
                cpu,
                "no cache information (cpuN/cache missing or empty)",
                "caches and LLC unknown",
            );
            return Ok(Vec::new());
        }
        let mut caches = Vec::new();
        for index in indices {
            let idx = dir.join(format!("index{index}"));
            let level: Option<u8> = self.num(&idx.join("level"))?;
            let kind_path = idx.join("type");
            let kind = match self.text(&kind_path)? {
                Some(text) => Some(match text.trim() {
                    "Data" => CacheKind::Data,
                    "Instruction" => CacheKind::Instruction,
                    "Unified" => CacheKind::Unified,
                    other => {
                        return Err(parse_error(
                            &kind_path,
                            &text,
                            other,
                            "expected Data, Instruction or Unified",
                        ))
                    }
                }),
                None => None,
            };
            let (Some(level), Some(kind)) = (level, kind) else {
                self.degraded
                    .add(cpu, "a cache without level or type", "that cache ignored");
                continue;
            };
            let shared = match self.set_at(&[idx.join("shared_cpu_list")])? {
                Some(set) => set,
                None => {
                    let map = idx.join("shared_cpu_map");
                    match self.text(&map)? {
                        Some(text) => CpuSet::parse_hex_mask(&text)
                            .map_err(|e| parse_error(&map, &text, &e.token, e.reason))?,
                        None => {
                            self.degraded.add(
                                cpu,
                                "a cache without shared_cpu_list",
                                "sharing taken from the CPUs listing it, else private",
                            );
                            self.guessed.insert((cpu, cache_key(level, kind)));
                            [cpu].into_iter().collect()
                        }
                    }
                }
            };
            let size_path = idx.join("size");
            let size_bytes = match self.text(&size_path)? {
                Some(text) => Some(parse_size(&size_path, &text)?),
                None => None,
            };
            let id = self.num(&idx.join("id"))?;
            caches.push(Cache {
                level,
                kind,
                size_bytes,
                id,
                shared,
            });
        }
        caches.sort_by_key(|c| (c.level, c.kind));
        Ok(caches)
    }

    /// A non-negative id, or `default` with a warning when missing or negative (the
    /// kernel prints -1 for ids an architecture does not define).
    fn id_or(
        &mut self,
        cpu: u32,
        path: &Path,
        default: u32,
        assumed: &str,
    ) -> Result<u32, TopologyError> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        match self.text(path)? {
            Some(text) => match parse_one::<i64>(path, &text)? {
                id if id >= 0 => u32::try_from(id).map_err(|_| {
                    parse_error(path, &text, text.trim(), "id does not fit in 32 bits")
                }),
                _ => {
                    self.degraded.add(
                        cpu,
                        &format!("topology/{name} is -1"),
                        &format!("assumed {assumed}"),
                    );
                    self.guessed.insert((cpu, name));
                    Ok(default)
                }
            },
            None => {
                self.degraded.add(
                    cpu,
                    &format!("topology/{name} missing"),
                    &format!("assumed {assumed}"),
                );
                self.guessed.insert((cpu, name));
                Ok(default)
            }
        }
    }

    /// The first of `paths` that exists, or `default` with a warning.
    fn set_or(
        &mut self,
        cpu: u32,
        paths: &[PathBuf],
        default: &CpuSet,
        assumed: &str,
    ) -> Result<CpuSet, TopologyError> {
        match self.set_at(paths)? {
            Some(set) => Ok(set),
            None => {
                let name = paths[0]
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.degraded
                    .add(cpu, &format!("topology/{name} missing"), assumed);
                self.guessed.insert((cpu, name));
                Ok(default.clone())
            }
        }
    }

    fn set_at(&mut self, paths: &[PathBuf]) -> Result<Option<CpuSet>, TopologyError> {
        for path in paths {
            if let Some(set) = self.list(path)? {
                return Ok(Some(set));
            }
        }
        Ok(None)
    }

    /// The names in a directory; none when it is absent.
    pub(super) fn names(&self, dir: &Path) -> Result<Vec<String>, TopologyError> {
        sysroot::list_dir(dir)
            .map(Option::unwrap_or_default)
            .map_err(|source| {
                TopologyError::File(FileError::Read {
                    path: dir.to_path_buf(),
                    source,
                })
            })
    }

    pub(super) fn text(&self, path: &Path) -> Result<Option<String>, TopologyError> {
        Ok(sysroot::read_optional_file(path)?)
    }

    fn list(&self, path: &Path) -> Result<Option<CpuSet>, TopologyError> {
        match self.text(path)? {
            Some(text) => parse_list(path, &text).map(Some),
            None => Ok(None),
        }
    }

    pub(super) fn num<T: FromStr>(&self, path: &Path) -> Result<Option<T>, TopologyError> {
        match self.text(path)? {
            Some(text) => parse_one(path, &text).map(Some),
            None => Ok(None),
        }
    }
}

fn cache_key(level: u8, kind: CacheKind) -> String {
    format!("cache L{level}{kind}")
}

/// Replaces assumed values with what the other CPUs say: if CPU 0's sibling list is
/// missing but CPU 4 lists `0,4`, CPU 0's siblings are `0,4` too. Keeps the relations
/// symmetric, which placement relies on, when a single file is missing.
fn reconcile(cpus: &mut [Cpu], guessed: &BTreeSet<(u32, String)>) {
    if guessed.is_empty() {
        return;
    }
    let is_guess = |cpu: u32, field: &str| guessed.contains(&(cpu, field.to_string()));
    type SetField = fn(&mut Cpu) -> &mut CpuSet;
    let set_fields: [(&str, SetField); 3] = [
        ("core_cpus_list", |c| &mut c.siblings),
        ("package_cpus_list", |c| &mut c.package_cpus),
        ("die_cpus_list", |c| &mut c.die_cpus),
    ];
    for (field, get) in set_fields {
        for i in 0..cpus.len() {
            let cpu = cpus[i].cpu;
            if !is_guess(cpu, field) {
                continue;
            }
            let known = cpus.iter_mut().find_map(|d| {
                let set = get(d).clone();
                (d.cpu != cpu && !is_guess(d.cpu, field) && set.contains(cpu)).then_some(set)
            });
            if let Some(set) = known {
                *get(&mut cpus[i]) = set;
            }
        }
    }
    for c in cpus.iter_mut() {
        if is_guess(c.cpu, "cluster_cpus_list") {
            c.cluster_cpus = c.siblings.clone();
        }
    }
    type IdField = (fn(&Cpu) -> u32, fn(&mut Cpu, u32), fn(&Cpu) -> &CpuSet);
    let id_fields: [(&str, IdField); 2] = [
        (
            "physical_package_id",
            (|c| c.package, |c, v| c.package = v, |c| &c.package_cpus),
        ),
        ("die_id", (|c| c.die, |c, v| c.die = v, |c| &c.die_cpus)),
    ];
    for (field, (get, put, group)) in id_fields {
        for i in 0..cpus.len() {
            let cpu = cpus[i].cpu;
            if !is_guess(cpu, field) {
                continue;
            }
            let known = cpus
                .iter()
                .find(|d| d.cpu != cpu && !is_guess(d.cpu, field) && group(d).contains(cpu))
                .map(get);
            if let Some(id) = known {
                put(&mut cpus[i], id);
            }
        }
    }
    for i in 0..cpus.len() {
        let cpu = cpus[i].cpu;
        for k in 0..cpus[i].caches.len() {
            let (level, kind) = (cpus[i].caches[k].level, cpus[i].caches[k].kind);
            let key = cache_key(level, kind);
            if !is_guess(cpu, &key) {
                continue;
            }
            let known = cpus.iter().find_map(|d| {
                if d.cpu == cpu || is_guess(d.cpu, &key) {
                    return None;
                }
                d.caches
                    .iter()
                    .find(|c| c.level == level && c.kind == kind && c.shared.contains(cpu))
                    .map(|c| c.shared.clone())
            });
            if let Some(shared) = known {
                cpus[i].caches[k].shared = shared;
            }
        }
    }
}
