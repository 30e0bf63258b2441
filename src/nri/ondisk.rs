//! What containerd leaves on disk about a running container, for a daemon without NRI:
//! its CRI name, pod and namespace, read from the OCI spec of the container's task.
//!
//! ```text
//! cgroup …/kubepods…/cri-containerd-ID.scope ─► ID (64 hex digits)
//! ROOT/ID/config.json (root's, in root's directories) ─► annotations
//!   io.kubernetes.cri.container-name / sandbox-name / sandbox-namespace
//! ```
//!
//! Trusted only as root wrote it: the file and every directory from `ROOT` down must be
//! owned by root and writable by no one else, and the cgroup must be a container's level
//! of the kubelet's `kubepods` tree (which only root makes, [`container_id`]); a cgroup
//! delegated to a user or a container never counts. Pod labels are not on
//! disk: a rule with `pod-labels` matches only through NRI.
//!
//! Owns: those checks and the reading. Must not touch: the matcher.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::infile::{self, Links};
use crate::rules::ContainerInfo;

/// containerd's task directory for the CRI (`k8s.io`) namespace.
pub const CONTAINERD_TASKS: &str = "/run/containerd/io.containerd.runtime.v2.task/k8s.io";
/// A config.json is a few tens of KiB.
const MAX_SPEC: u64 = 4 << 20;

/// The container id a cgroup path names, when it is a container's under `kubepods`:
/// `cri-containerd-ID.scope` (systemd driver), `ID` (cgroupfs driver), `crio-ID.scope`.
///
/// Only where the kubelet makes them: the path starts at the `kubepods` root, and every
/// level above the container's is a `kubepods…` slice, a QoS class or a `pod…` level.
/// A cgroup delegated to someone else (a service's `Delegate=yes`, a container's own
/// writable cgroup) never sits there, so whatever its owner names inside it is not a
/// container's.
pub fn container_id(cgroup: &str) -> Option<&str> {
    let mut levels = cgroup.strip_prefix('/')?.split('/');
    let last = levels.next_back()?;
    let mut above = levels.peekable();
    if !above.peek().is_some_and(|l| l.starts_with("kubepods")) {
        return None;
    }
    let kubelets = |l: &str| {
        l.starts_with("kubepods")
            || l.starts_with("pod")
            || matches!(l, "besteffort" | "burstable" | "guaranteed")
    };
    if !above.all(kubelets) {
        return None;
    }
    let id = last
        .strip_prefix("cri-containerd-")
        .or_else(|| last.strip_prefix("crio-"))
        .unwrap_or(last);
    let id = id.strip_suffix(".scope").unwrap_or(id);
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// The container `id` as containerd's task directory `tasks` says, if root wrote it.
pub fn read(tasks: &Path, id: &str) -> Option<ContainerInfo> {
    parse(&read_spec(tasks, id)?)
}

/// Whether `id` is a pod's sandbox (its `pause` process), as containerd's task
/// directory says, if root wrote it: `io.kubernetes.cri.container-type = sandbox`.
pub fn is_sandbox(tasks: &Path, id: &str) -> bool {
    read_spec(tasks, id)
        .and_then(|spec| serde_json::from_str::<serde_json::Value>(&spec).ok())
        .is_some_and(|v| v["annotations"]["io.kubernetes.cri.container-type"] == "sandbox")
}

/// The OCI spec of container `id`'s task, if root wrote it (and the directories).
fn read_spec(tasks: &Path, id: &str) -> Option<String> {
    let dir = tasks.join(id);
    let spec = dir.join("config.json");
    for d in [tasks, dir.as_path()] {
        if !roots(&std::fs::metadata(d).ok()?) {
            return None;
        }
    }
    let (file, meta) = infile::open_regular(&spec, Links::Refuse).ok()?;
    if !roots(&meta) {
        return None;
    }
    infile::read_text(file, meta.len(), MAX_SPEC).ok()
}

fn roots(m: &std::fs::Metadata) -> bool {
    m.uid() == 0 && m.mode() & 0o022 == 0
}

/// The container's facts from an OCI spec's annotations.
pub fn parse(spec: &str) -> Option<ContainerInfo> {
    let v: serde_json::Value = serde_json::from_str(spec).ok()?;
    let a = v.get("annotations")?;
    let get = |k: &str| a.get(k).and_then(|s| s.as_str()).map(str::to_string);
    Some(ContainerInfo {
        name: get("io.kubernetes.cri.container-name")?,
        pod: get("io.kubernetes.cri.sandbox-name")?,
        namespace: get("io.kubernetes.cri.sandbox-namespace").unwrap_or_default(),
        labels: None,
    })
}

/// Where [`read`] looks, under a sysroot-like prefix (tests point it at a tree).
pub fn tasks_under(root: &Path) -> PathBuf {
    root.join(CONTAINERD_TASKS.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn ids_come_from_container_cgroups_below_kubepods_only() {
        let sd = format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podX.slice/cri-containerd-{ID}.scope");
        assert_eq!(container_id(&sd), Some(ID));
        assert_eq!(
            container_id(&format!("/kubepods/besteffort/podX/{ID}")),
            Some(ID)
        );
        assert_eq!(
            container_id(&format!("/kubepods.slice/crio-{ID}.scope")),
            Some(ID)
        );
        // A user names their own cgroups as they like.
        assert_eq!(
            container_id(&format!(
                "/user.slice/user-1000.slice/user@1000.service/kubepods/{ID}"
            )),
            None
        );
        assert_eq!(container_id(&format!("/system.slice/{ID}")), None);
        // Below a cgroup delegated to someone (a service's `Delegate=yes`, a container
        // with a writable cgroup of its own), who names what they make as they like.
        let other = "f".repeat(64);
        for delegated in [
            format!("/system.slice/bob.service/kubepods/pod1/{ID}"),
            format!("/kubepods/besteffort/pod2/{other}/{ID}"),
            format!("/kubepods/besteffort/pod2/{other}/kubepods/pod1/{ID}"),
            format!("/kubepods.slice/kubepods-pod2.slice/cri-containerd-{other}.scope/cri-containerd-{ID}.scope"),
        ] {
            assert_eq!(container_id(&delegated), None, "{delegated}");
        }
        assert_eq!(
            container_id(&format!("/kubepods/pod1/{ID}")),
            Some(ID),
            "a guaranteed pod has no QoS level"
        );
        assert_eq!(
            container_id("/kubepods.slice/cri-containerd-short.scope"),
            None
        );
    }

    #[test]
    fn a_spec_gives_name_pod_and_namespace_but_no_labels() {
        let spec = r#"{"ociVersion":"1.1.0","annotations":{
            "io.kubernetes.cri.container-name":"md-feed",
            "io.kubernetes.cri.sandbox-name":"api-0",
            "io.kubernetes.cri.sandbox-namespace":"trading",
            "io.kubernetes.cri.container-type":"container"}}"#;
        assert_eq!(
            parse(spec),
            Some(ContainerInfo {
                name: "md-feed".into(),
                pod: "api-0".into(),
                namespace: "trading".into(),
                labels: None
            })
        );
        assert_eq!(parse(r#"{"annotations":{}}"#), None);
        assert_eq!(parse("not json"), None);
    }

    #[test]
    fn a_spec_is_read_only_where_root_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("k8s.io");
        std::fs::create_dir_all(tasks.join(ID)).unwrap();
        let spec = r#"{"annotations":{"io.kubernetes.cri.container-name":"c","io.kubernetes.cri.sandbox-name":"p"}}"#;
        std::fs::write(tasks.join(ID).join("config.json"), spec).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for p in [
            tasks.clone(),
            tasks.join(ID),
            tasks.join(ID).join("config.json"),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let ours = nix::unistd::geteuid().is_root();
        assert_eq!(
            read(&tasks, ID).is_some(),
            ours,
            "read as root only when root owns it"
        );
        if ours {
            std::fs::set_permissions(
                tasks.join(ID).join("config.json"),
                std::fs::Permissions::from_mode(0o666),
            )
            .unwrap();
            assert_eq!(
                read(&tasks, ID),
                None,
                "a file others may write is not trusted"
            );
        }
    }
}
