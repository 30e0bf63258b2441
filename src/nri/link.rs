//! What passes between the NRI plugin and the daemon's loop: the facts the runtime gives
//! about a container, the questions the plugin asks, the loop's decisions, and the
//! updates the loop sends back when its plan changes.
//!
//! ```text
//!  runtime ──► plugin task ──Ask (+ oneshot reply)──► daemon loop (the one planner)
//!  runtime ◄── plugin task ◄──Vec<Update>──────────── daemon loop (plan changed)
//! ```
//!
//! The plugin never waits on the loop past [`Deadline`]: an answer that does not come in
//! time is no adjustment, and the reason is said. Owns: these values. Must not touch:
//! the socket, the plan.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::cpuset::CpuSet;

/// A pod, as the runtime describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodFacts {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

/// A container, as the runtime describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerFacts {
    pub id: String,
    /// The CRI metadata name (`md-feed`).
    pub name: String,
    pub pod: PodFacts,
    /// The cpuset the container arrives with (the kubelet's static CPU manager sets
    /// one): pinnerd places inside it and never widens it.
    pub cpus: Option<CpuSet>,
    /// Its first process, once it runs.
    pub pid: Option<u32>,
    /// Its cgroup, as the runtime names it (a path or `slice:prefix:name`).
    pub cgroups_path: String,
}

impl ContainerFacts {
    /// `api-0/md-feed (pod trading/api-0)`: how a container is named in every reader.
    pub fn title(&self) -> String {
        format!(
            "{}/{} (pod {}/{})",
            self.pod.name, self.name, self.pod.namespace, self.pod.name
        )
    }
}

/// When the plugin asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Moment {
    /// `CreateContainer`: the answer is the container's adjustment.
    Creation,
    /// `Synchronize`: the container existed before pinnerd registered.
    Synchronize,
    /// `UpdateContainer`: the runtime is changing its resources.
    Update,
}

/// The loop's answer for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Set its cpuset (and memory nodes) to these, for this rule.
    Place {
        rule: String,
        cpus: CpuSet,
        mems: Option<CpuSet>,
    },
    /// No rule names it: no adjustment.
    NoRule,
    /// A rule names it but no cpuset can be given now; the reason is said.
    Undecided { rule: String, reason: String },
}

/// The questions and news the plugin sends the loop.
#[derive(Debug)]
pub enum Ask {
    /// Where should this container be?
    Place {
        container: ContainerFacts,
        moment: Moment,
        reply: oneshot::Sender<Decision>,
    },
    /// The plugin's own answer, when the loop's came too late or not at all: the loop
    /// records it so `explain` says why.
    Unanswered {
        container: ContainerFacts,
        reason: String,
    },
    /// The container runs (its pid, when the runtime says it).
    Started { container: ContainerFacts },
    /// The container stopped or was removed: its CPUs are free again.
    Gone { id: String },
    /// Registered with a runtime.
    Registered { runtime: String, version: String },
    /// Not (or no longer) connected, and why.
    NotConnected { reason: String },
    /// The runtime did not move the container to `cpus` (`UpdateContainers` refused,
    /// failed or unanswered), after every attempt; `reason` in words.
    NotMoved {
        id: String,
        cpus: CpuSet,
        reason: String,
    },
}

/// A running container's new cpuset, sent through `UpdateContainers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub id: String,
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
    /// `api-0/md-feed (pod trading/api-0)`, for the journal.
    pub title: String,
}

/// How long the plugin waits for the loop before answering without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub Duration);

impl Deadline {
    /// Half the runtime's request timeout (2 s by default): room for the answer to
    /// travel back and for the runtime's other plugins.
    pub fn for_request_timeout(timeout: Option<Duration>) -> Deadline {
        let timeout = timeout
            .filter(|t| !t.is_zero())
            .unwrap_or(Duration::from_secs(2));
        Deadline(timeout / 2)
    }
}
