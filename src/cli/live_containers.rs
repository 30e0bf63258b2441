//! `plan --live`'s running containers: each container found in the kubelet's cgroup tree,
//! the cpuset it has, what the plan would give it, and who set the one it has.
//!
//! ```text
//! /proc/PID/cgroup ─► container's level of kubepods (nri::ondisk::container_id) ─► ID
//! containerd's task files (root's) ─► name, pod, namespace
//! its cgroup's cpuset.cpus ─► the cpuset it has ("" = none set: every CPU)
//! the daemon's Containers property ─► pinnerd at creation / by UpdateContainers / …
//! /var/lib/kubelet/cpu_manager_state (root's, policy static) ─► the kubelet's
//! ```
//!
//! Only what root wrote is believed (the task files, the kubelet's state), as the
//! daemon believes it; the daemon's record comes over the bus. Owns: the gathering and
//! the words. Must not touch: the plan (it is given one), the daemon.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;
use crate::daemon::state::containers::{cpus_for, set_by_pinnerd, would_give};
use crate::nri::link::Decision;
use crate::plan::Plan;
use crate::rules::ContainerInfo;
use crate::sysroot::SysRoot;
use crate::topology::Topology;

/// The kubelet's CPU manager state, relative to the files' root.
pub const KUBELET_STATE: &str = "var/lib/kubelet/cpu_manager_state";
/// The kubelet's state is a few KiB; more is not its.
const MAX_STATE: u64 = 1 << 20;

/// One running container, as `plan --live` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunningContainer {
    pub id: String,
    /// Its lowest pid.
    pub pid: i32,
    /// From containerd's task files; empty when they are not there or not root's.
    pub name: String,
    pub pod: String,
    pub namespace: String,
    /// Its cgroup's `cpuset.cpus`; `None`: none set (it may run on every CPU its
    /// parents allow).
    pub cpuset: Option<String>,
    /// What the plan would give it: CPUs, or `null` with `why`.
    pub would_get: Option<String>,
    /// The rule that names it, if any.
    pub rule: Option<String>,
    /// Why it would get nothing: no rule names it, or the plan's reason.
    pub why: Option<String>,
    /// Who set the cpuset it has: `pinnerd at creation`, `pinnerd by UpdateContainers`,
    /// `the kubelet's static CPU manager`, `none`, …
    pub set_by: String,
}

impl RunningContainer {
    /// `api-0/md-feed (pod trading/api-0)`, or the id's first 12 digits unnamed.
    pub fn title(&self) -> String {
        if self.name.is_empty() {
            format!("{} (no name: containerd's files not read)", &self.id[..12])
        } else {
            format!(
                "{}/{} (pod {}/{})",
                self.pod, self.name, self.namespace, self.pod
            )
        }
    }

    /// One line of the human output.
    pub fn line(&self) -> String {
        let has = self.cpuset.as_deref().unwrap_or("none set");
        let would = match (&self.would_get, &self.rule, &self.why) {
            (Some(c), Some(r), _) => format!("{c} (rule {r})"),
            (_, _, Some(why)) => format!("nothing: {why}"),
            _ => "nothing".into(),
        };
        format!(
            "{}, pid {}: cpuset {has}, would get {would}; set by {}",
            self.title(),
            self.pid,
            self.set_by
        )
    }
}

/// What the daemon said of containers: its `Containers` lines, or why it was not asked.
pub type DaemonSays = Result<Vec<String>, String>;

/// Every running container of the kubelet's tree, with what the plan would give it.
pub fn running(
    root: &SysRoot,
    files: &Path,
    plan: &Plan,
    topology: Option<&Topology>,
    daemon: impl FnOnce() -> DaemonSays,
) -> Vec<RunningContainer> {
    let found = found(root);
    if found.is_empty() {
        return Vec::new();
    }
    let daemon = &daemon();
    let kubelet = kubelet_static(&files.join(KUBELET_STATE));
    let tasks = crate::nri::ondisk::tasks_under(files);
    found
        .into_iter()
        // A pod's sandbox (its pause process) is no container a rule names.
        .filter(|(id, _)| !crate::nri::ondisk::is_sandbox(&tasks, id))
        .map(|(id, (pid, cgroup))| {
            let info = crate::nri::ondisk::read(&tasks, &id);
            let cpuset = read_cpus(
                &root
                    .sys_path("fs/cgroup")
                    .join(cgroup.trim_start_matches('/')),
            );
            let kubelets = info.as_ref().and_then(|i| {
                let uid = pod_uid(&cgroup)?;
                kubelet.as_ref()?.get(&(uid, i.name.clone())).cloned()
            });
            describe(id, pid, info, cpuset, kubelets, plan, topology, daemon)
        })
        .collect()
}

/// The words for one container, from what was found of it.
#[allow(clippy::too_many_arguments)]
pub fn describe(
    id: String,
    pid: i32,
    info: Option<ContainerInfo>,
    cpuset: Option<CpuSet>,
    kubelets: Option<CpuSet>,
    plan: &Plan,
    topology: Option<&Topology>,
    daemon: &DaemonSays,
) -> RunningContainer {
    let (mut would_get, mut rule, mut why) = (None, None, None);
    match &info {
        None => why = Some("its name is not known (containerd's task files)".to_string()),
        Some(i) => match would_give(i, kubelets.as_ref(), plan, topology) {
            Decision::Place { rule: r, cpus, .. } => {
                would_get = Some(cpus.to_string());
                rule = Some(r);
            }
            Decision::NoRule => match labels_unknown(i, plan) {
                // Known only over NRI: the rule the container would have, were its
                // pod's labels those the rule names.
                Some(r) => match cpus_for(plan, &r, kubelets.as_ref()) {
                    Ok(cpus) => {
                        would_get = Some(cpus.to_string());
                        rule = Some(format!(
                            "{r}, if its pod's labels match: they are known only over NRI"
                        ));
                    }
                    Err(reason) => {
                        rule = Some(r);
                        why = Some(reason);
                    }
                },
                None => why = Some("no rule names it".into()),
            },
            Decision::Undecided { rule: r, reason } => {
                rule = Some(r);
                why = Some(reason);
            }
        },
    }
    let (name, pod, namespace) = info
        .map(|i| (i.name, i.pod, i.namespace))
        .unwrap_or_default();
    let mut c = RunningContainer {
        id,
        pid,
        name,
        pod,
        namespace,
        cpuset: cpuset.as_ref().map(ToString::to_string),
        would_get,
        rule,
        why,
        set_by: String::new(),
    };
    c.set_by = set_by(&c, cpuset.as_ref(), kubelets.as_ref(), daemon);
    c
}

/// The first container rule (in precedence order) that names `c` but for its pod's
/// labels, which are unknown (known only over NRI, not from containerd's files).
fn labels_unknown(c: &ContainerInfo, plan: &Plan) -> Option<String> {
    if c.labels.is_some() {
        return None;
    }
    plan.rules()
        .rules()
        .iter()
        .find(|r| {
            r.matcher.container_only()
                && r.matcher.container.as_ref().is_some_and(|m| {
                    m.check(Some(c))
                        .is_err_and(|e| e.starts_with("pod labels are unknown"))
                })
        })
        .map(|r| r.name.clone())
}

/// Who set the cpuset `has` of `c`: the daemon's record when it names this container
/// with the same CPUs, else the kubelet's static CPU manager when its state gives the
/// container those CPUs, else none when none is set.
fn set_by(
    c: &RunningContainer,
    has: Option<&CpuSet>,
    kubelets: Option<&CpuSet>,
    daemon: &DaemonSays,
) -> String {
    let Some(has) = has else {
        return "none (the runtime's default: no cpuset of its own)".into();
    };
    if !c.name.is_empty() {
        if let Ok(lines) = daemon {
            let prefix = format!("container {}: ", c.title());
            let how = lines.iter().find_map(|l| l.strip_prefix(&prefix));
            if let Some(how) = how {
                let same = how
                    .strip_prefix("cpuset ")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|cpus| cpus.parse::<CpuSet>().ok())
                    .is_some_and(|cpus| cpus == *has);
                if let (true, Some(who)) = (same, set_by_pinnerd(how)) {
                    return who.to_string();
                }
            }
        }
    }
    if kubelets == Some(has) {
        return "the kubelet's static CPU manager".into();
    }
    match daemon {
        Ok(_) => "not pinnerd, nor the kubelet's static CPU manager".into(),
        Err(why) => {
            format!("not the kubelet's static CPU manager; pinnerd's record not read ({why})")
        }
    }
}

/// Each container's id → its lowest pid and its cgroup.
fn found(root: &SysRoot) -> BTreeMap<String, (i32, String)> {
    let mut out: BTreeMap<String, (i32, String)> = BTreeMap::new();
    let Ok(Some(names)) = crate::sysroot::list_dir(&root.proc) else {
        return out;
    };
    for pid in names.iter().filter_map(|n| n.parse::<i32>().ok()) {
        let Ok(Some(cg)) = crate::cgroup::proc_cgroups(root, pid) else {
            continue;
        };
        let Some(path) = cg.v2 else { continue };
        let Some(id) = crate::nri::ondisk::container_id(&path) else {
            continue;
        };
        let e = out.entry(id.to_string()).or_insert((pid, path.clone()));
        if pid < e.0 {
            e.0 = pid;
        }
    }
    out
}

/// A cgroup's `cpuset.cpus`; `None` when empty or absent.
fn read_cpus(dir: &Path) -> Option<CpuSet> {
    let text = crate::sysroot::read_optional(&dir.join("cpuset.cpus")).ok()??;
    let text = text.trim();
    (!text.is_empty()).then(|| text.parse().ok()).flatten()
}

/// The pod's UID from a container's cgroup path: `pod<UID>` (cgroupfs) or
/// `kubepods-…-pod<UID with _ for ->.slice` (systemd).
pub fn pod_uid(cgroup: &str) -> Option<String> {
    let level = cgroup.rsplit('/').nth(1)?;
    let level = level.strip_suffix(".slice").unwrap_or(level);
    let (_, uid) = level.rsplit_once("pod")?;
    (!uid.is_empty()).then(|| uid.replace('_', "-"))
}

/// The kubelet's static CPU manager's assignments, (pod UID, container name) → CPUs,
/// when `path` is root's and writable by no one else and its policy is `static`.
pub fn kubelet_static(path: &Path) -> Option<BTreeMap<(String, String), CpuSet>> {
    use crate::infile::{self, Links};
    use std::os::unix::fs::MetadataExt;
    let (file, meta) = infile::open_regular(path, Links::Refuse).ok()?;
    let dirs_roots = path
        .ancestors()
        .skip(1)
        .take(3)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0));
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 || !dirs_roots {
        return None;
    }
    let text = infile::read_text(file, meta.len(), MAX_STATE).ok()?;
    parse_kubelet_state(&text)
}

/// `{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"UID":{"name":"1-4"}}}`.
pub fn parse_kubelet_state(text: &str) -> Option<BTreeMap<(String, String), CpuSet>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    if v.get("policyName")?.as_str()? != "static" {
        return None;
    }
    let mut out = BTreeMap::new();
    for (uid, containers) in v
        .get("entries")
        .and_then(|e| e.as_object())
        .into_iter()
        .flatten()
    {
        for (name, cpus) in containers.as_object().into_iter().flatten() {
            if let Some(cpus) = cpus.as_str().and_then(|c| c.parse::<CpuSet>().ok()) {
                out.insert((uid.clone(), name.clone()), cpus);
            }
        }
    }
    Some(out)
}

/// Where `plan --live` reads containerd's and the kubelet's files: `/`.
pub fn default_files() -> PathBuf {
    PathBuf::from("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{cpus, rules, LowestFirst};

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const ID2: &str = "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const RULES: &str = r#"
[[rule]]
name = "md-feed"
[rule.match]
container = "md-feed"
pod-namespace = "trading"
[rule.place]
count = 2
exclusive = true

[[rule]]
name = "md-labelled"
[rule.match]
container = "md-labelled"
pod-labels = { app = "md" }
[rule.place]
count = 1
"#;

    fn plan() -> Plan {
        Plan::new(&rules(RULES), &cpus("0-7", ""), Some(&LowestFirst))
    }

    /// A machine tree: /proc/PID/cgroup, the container's cgroup, containerd's task file.
    fn machine(dir: &Path, pid: i32, id: &str, name: &str, cpuset: &str) {
        let cg = format!("/kubepods/besteffort/pod1234-ab/{id}");
        let proc = dir.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(proc.join("cgroup"), format!("0::{cg}\n")).unwrap();
        let sys = dir.join(format!("sys/fs/cgroup{cg}"));
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::write(sys.join("cpuset.cpus"), format!("{cpuset}\n")).unwrap();
        let task = crate::nri::ondisk::tasks_under(&dir.join("files")).join(id);
        std::fs::create_dir_all(&task).unwrap();
        let spec = serde_json::json!({"annotations": {
            "io.kubernetes.cri.container-name": name,
            "io.kubernetes.cri.sandbox-name": "api-0",
            "io.kubernetes.cri.sandbox-namespace": "trading",
        }});
        std::fs::write(task.join("config.json"), spec.to_string()).unwrap();
    }

    fn tree() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn running_containers_are_listed_with_their_cpuset_what_they_would_get_and_who_set_it() {
        let dir = tree();
        machine(dir.path(), 40, ID, "md-feed", "0-1");
        machine(dir.path(), 41, ID, "md-feed", "0-1");
        machine(dir.path(), 50, ID2, "web", "");
        // A pod's sandbox: not listed.
        let sandbox = ID.replace('0', "2");
        machine(dir.path(), 60, &sandbox, "", "");
        let spec = serde_json::json!({"annotations": {
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-name": "api-0",
        }});
        let task = crate::nri::ondisk::tasks_under(&dir.path().join("files")).join(&sandbox);
        std::fs::write(task.join("config.json"), spec.to_string()).unwrap();
        let root = SysRoot::new(dir.path().join("sys"), dir.path().join("proc"));
        let daemon: DaemonSays = Ok(vec![
            "container api-0/md-feed (pod trading/api-0): cpuset 0-1 set at creation by pinnerd (rule md-feed)".into(),
        ]);
        let found = running(&root, &dir.path().join("files"), &plan(), None, || daemon);
        let lines: Vec<String> = found.iter().map(RunningContainer::line).collect();
        if unsafe { libc::geteuid() } != 0 {
            // containerd's files are believed only when root's: as another user, unnamed.
            assert!(lines[0].contains("no name"), "{lines:?}");
            return;
        }
        assert_eq!(
            lines,
            [
                "api-0/md-feed (pod trading/api-0), pid 40: cpuset 0-1, would get 0-1 (rule md-feed); set by pinnerd at creation",
                "api-0/web (pod trading/api-0), pid 50: cpuset none set, would get nothing: no rule names it; set by none (the runtime's default: no cpuset of its own)",
            ]
        );
        // Moved by UpdateContainers since; the daemon not answering; the kubelet's.
        let moved: DaemonSays = Ok(vec![
            "container api-0/md-feed (pod trading/api-0): cpuset 0-1 set by pinnerd after the plan changed (was 4-5; rule md-feed)".into(),
        ]);
        let c = describe_feed("0-1", None, &moved);
        assert_eq!(c.set_by, "pinnerd by UpdateContainers");
        let c = describe_feed("0-1", None, &Err("no daemon on the bus".into()));
        assert_eq!(
            c.set_by,
            "not the kubelet's static CPU manager; pinnerd's record not read (no daemon on the bus)"
        );
        let c = describe_feed("1-3", Some("1-3"), &moved);
        assert_eq!(
            c.set_by, "the kubelet's static CPU manager",
            "the daemon's record says 0-1, not what it has"
        );
        assert_eq!(
            c.would_get.as_deref(),
            Some("1"),
            "inside the kubelet's, never wider"
        );
    }

    fn describe_feed(has: &str, kubelets: Option<&str>, daemon: &DaemonSays) -> RunningContainer {
        let info = ContainerInfo {
            name: "md-feed".into(),
            pod: "api-0".into(),
            namespace: "trading".into(),
            labels: None,
        };
        describe(
            ID.into(),
            40,
            Some(info),
            Some(has.parse().unwrap()),
            kubelets.map(|k| k.parse().unwrap()),
            &plan(),
            None,
            daemon,
        )
    }

    #[test]
    fn a_rule_naming_pod_labels_is_said_as_such_when_they_are_unknown() {
        let info = ContainerInfo {
            name: "md-labelled".into(),
            pod: "api-0".into(),
            namespace: "trading".into(),
            labels: None,
        };
        let c = describe(
            ID.into(),
            40,
            Some(info),
            None,
            None,
            &plan(),
            None,
            &Ok(vec![]),
        );
        assert_eq!(
            c.line(),
            "api-0/md-labelled (pod trading/api-0), pid 40: cpuset none set, would get 2 (rule md-labelled, if its pod's labels match: they are known only over NRI); set by none (the runtime's default: no cpuset of its own)"
        );
    }

    #[test]
    fn the_kubelets_state_and_pod_uids_are_read_as_it_writes_them() {
        let state = r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"6f1e-22":{"md-feed":"1-4"}},"checksum":1}"#;
        let m = parse_kubelet_state(state).unwrap();
        assert_eq!(m[&("6f1e-22".into(), "md-feed".into())].to_string(), "1-4");
        assert!(parse_kubelet_state(r#"{"policyName":"none","defaultCpuSet":""}"#).is_none());
        assert_eq!(
            pod_uid("/kubepods/besteffort/pod6f1e-22/ID").as_deref(),
            Some("6f1e-22")
        );
        assert_eq!(
            pod_uid("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1e_22.slice/cri-containerd-ID.scope").as_deref(),
            Some("6f1e-22")
        );
    }
}
