//! pinnerd: measures how far apart CPUs really are and pins threads where they belong.
//!
//! Data flow, one module per step:
//!
//! ```text
//! sysroot ──► topology ──► measure ──► matrix ──► domains ──► placement ◄── rules ◄── settings
//!  (/sys,      (CPUs,       (spin        (file      (latency    (pure: request     (TOML →
//!   /proc)      caches,      pairs)       format)    hierarchy)  → CPU set)        matcher)
//!               nodes)                                               │               │
//!             fingerprint                                            ▼               ▼
//!                                                      plan (pure: rules + domains + CPUs → Plan)
//!                                                                    │ Plan
//!                                                                    ▼
//!                  watch (proc events, rescans) ──► manager (tracks processes, applies the Plan)
//!                                                                    │
//!                                                                    ▼
//!                                                  affinity (apply, read back, restore)
//!          daemon (one event loop owns the state; plans on rule, domain and CPU changes,
//!                  and again for the cpusets and threads the manager reports it saw)
//!                ▲ api (Call → its own answer | CommandError, Snapshot, Signal)
//!                 dbus (forwards; polkit decides for non-root callers) · cli (commands)
//! ```
//!
//! Modules, one concern each:
//! - `advice`: one-off requests for K CPUs (`plan`, `plan --pid`, `report`, `compare`,
//!   `run` without the daemon): the ground they stand on (the topology, the matrix given,
//!   stored or measured now, the domains) made once, and requests placed on it
//! - `affinity`: the affinity syscalls, read back, the restore journal
//! - `api`: the typed calls (each with its own answer type), snapshot and signals between
//!   daemon and clients
//! - `boot_cpus`: what only the boot gives a CPU (`nohz_full`, `rcu_nocbs`), said for held
//!   CPUs
//! - `cgroup`: which CPUs a process's cgroup cpuset (v1 or v2) allows
//! - `cli`: the subcommands, thin shells: each parses its flags, calls the engine
//!   (`advice`, `effect`, `report`, …) and prints; none calls another's argument
//!   struct. `cli::command` is the grammar, `cli::output`, `cli::limits` and `cli::exit`
//!   what every command shares (no subcommand imports `cli` itself); `cli::docs`
//!   generates the man page `pinnerd(8)` and the shell completions
//! - `cpuset`: the one CPU-set type
//! - `daemon`: the event loop, its state and its measurement schedule; `daemon::state`:
//!   the state the loop owns, in parts (the settings and rules loaded, the machine, the
//!   managed processes with the operations they are pinned through, measurement jobs,
//!   timers, what is shared with the system); `daemon::readers`: the threads that read
//!   what can wait on a process's locks (command lines) off the loop; `daemon::steps`:
//!   each loop step timed, and one over a second logged naming it
//! - `dbus`: the bus object, which only forwards
//! - `devices`: a device name (interface, PCI address, block device, /dev path) → its
//!   NUMA node and local CPUs, through the sysfs root
//! - `domains`: the latency hierarchy from a matrix and the topology, and which to use
//! - `dry_run`: `plan --live`'s facts: the daemon's manager and plan run over a /proc
//!   rescan with operations that only record
//! - `effect`: the measured effect of placement, a K-thread ring on the planned, autopilot,
//!   worst and unpinned CPUs (`compare`, `report --compare`)
//! - `export`: Node Feature Discovery feature files and hwloc distances
//! - `fingerprint`: the hardware identity a matrix belongs to
//! - `fleet`: the matrices of several machines compared (`diff`, `fleet`)
//! - `hold`: units held for `isolate` and `unit-cpuset` rules: their systemd unit
//!   confined (`hold::systemd`, the manager's client), isolated cpuset partitions
//!   (`hold::partition`), the hold journal
//! - `infile`: an untrusted input file opened and read bounded, regular files only (rule
//!   files, matrix files, the restore journal)
//! - `irq`: interrupts moved off the CPUs of `irqs = "away"` rules (`/proc/irq`), their
//!   journal, and irqbalance's banned CPUs
//! - `journal`: a list of what to undo if the daemon dies, in one JSON file of the
//!   runtime directory (the IRQ journal and the hold journal are one kind of file)
//! - `manager`: which processes are managed; applies the plan to their threads
//! - `matrix`: the latency matrix and its files
//! - `memory`: where a process's memory is per NUMA node (`numa_maps`, `memory.numa_stat`),
//!   `run --memory`'s policy, and moving it to the nodes of its CPUs (`memory = "follow"`)
//! - `measure`: spin pairs → latencies; sparse measurement (the hierarchy from a few
//!   pairs, spot checks per block, the rest inferred, or a mesh's model from random
//!   pairs; then the cells of the compact plans that `domains` and `placement` make
//!   from it measured) over a `PairMeasurer`: the real spinner, or
//!   `measure::simulate`, which answers from a published matrix with noise (or as a
//!   host that moves its vCPUs); `measure::repeat`: the repeat check that ends every
//!   measurement and marks a matrix unstable (then `domains::select` places on sysfs);
//!   `measure::around`: the CPUs a measurement stays off (exclusive and
//!   latency-critical rules' CPUs, `measure.never-cpus`, `nohz_full`), the cells it
//!   keeps for them, and the latency-critical threads whose waking stops it;
//!   `measure::plain`: an independent c2clat-style ping-pong to check the engine by
//! - `metrics`: the daemon's numbers in the Prometheus text format, and the textfile
//! - `nri`: the NRI plugin: registered with containerd or CRI-O over their NRI socket, a
//!   container a rule names gets its cpuset at creation from the daemon's plan
//! - `outfile`: an output file replaced whole, no link followed (textfile, `export --out`,
//!   `report`); the journals in the daemon's own runtime directory replaced plainly
//! - `placement`: one request → CPUs (`slots`: a thread entry's CPUs, one set per thread,
//!   planned together)
//! - `plan`: every rule's CPUs, as a value (`making`: the rules' plan made one way for
//!   the daemon and `plan --live`, memory weighed and the `[sched-ext]` policy applied;
//!   `doubts`: rules that cannot mean what they say on the machine, for `check`)
//! - `polkit`: who may change what: root, else polkit's answer for the caller's bus name
//! - `report`: `pinnerd report`'s facts and its self-contained HTML page (pure; the
//!   markup is the askama template `report/page.html`)
//! - `report_facts`: those facts gathered from an `advice` ground and the machine (the
//!   fingerprint, steal, plans for K = 2, 4, 8, with `compare` the measured effect)
//! - `repeats`: repeated warnings summed up (the first logged, then a count per interval)
//! - `rules`: TOML → validated rules → matcher
//! - `rules_plan`: the inputs of the rules' plan (CPUs, chooser, memory, `[sched-ext]`)
//!   assembled from what was read of the machine, one place for the daemon and
//!   `plan --live`
//! - `sched_ext`: whether a sched_ext scheduler runs, the `[sched-ext]` policy, widening
//! - `settings`: the daemon's settings file
//! - `shape`: `core-type`, `prefer` and `near` narrow a request's CPUs by kind, cache,
//!   frequency and device locality before latency chooses (pure; devices resolved by
//!   `devices`)
//! - `stats`: percentiles and the median
//! - `sysroot`: where /sys and /proc are
//! - `topology`: sysfs → CPUs, caches, nodes, core kinds, preferred-core rankings, the
//!   X3D mode
//! - `watch`: proc connector, uevents, /proc scans
//! - `words`: counted nouns in messages ("1 pair", "2 processes"), an error's causes
//!   as one line
//!
//! `cpuset` is the one CPU-set type everything speaks; `sysroot` is the only place the
//! paths `/sys` and `/proc` are spelled, so tests point it at fixture trees.
//! `fingerprint` keys stored matrices on the hardware (possible/present CPUs, not the
//! online ones); `matrix::keep` keeps measured cells across hotplug and says which pairs
//! a stored matrix lacks; `watch::rule_dirs` tells the rule watcher when a rule
//! directory's path leads to another directory.

pub mod advice;
pub mod affinity;
pub mod api;
pub mod boot_cpus;
pub mod cgroup;
pub mod cli;
pub mod cpuset;
pub mod daemon;
pub mod dbus;
pub mod devices;
pub mod domains;
pub mod dry_run;
pub mod effect;
pub mod export;
pub mod fingerprint;
pub mod fleet;
pub mod hold;
pub mod infile;
pub mod irq;
pub mod journal;
pub mod knobs;
pub mod manager;
pub mod matrix;
pub mod measure;
pub mod memory;
pub mod metrics;
pub mod nri;
pub mod outfile;
pub mod placement;
pub mod plan;
pub mod polkit;
pub mod repeats;
pub mod report;
pub mod report_facts;
pub mod rules;
pub mod rules_plan;
pub mod sched_ext;
pub mod settings;
pub mod shape;
pub mod stats;
pub mod sysroot;
#[cfg(test)]
mod test_log;
pub mod topology;
pub mod watch;
pub mod words;

pub use cpuset::CpuSet;
pub use matrix::LatencyMatrix;
