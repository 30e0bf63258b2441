# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_pinnerd_global_optspecs
    string join \n v/verbose h/help V/version
end

function __fish_pinnerd_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_pinnerd_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_pinnerd_using_subcommand
    set -l cmd (__fish_pinnerd_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c pinnerd -n "__fish_pinnerd_needs_command" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -s V -l version -d 'Print version'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "topology" -d 'Show the CPU topology read from sysfs (and latency domains with --matrix)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "measure" -d 'Measure the core-to-core latency matrix of this machine'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "plan" -d 'Choose CPUs for a request from the topology and the latency matrix'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "compare" -d 'Ping-pong throughput on the planned pair vs the autopilot pair, worst pair, unpinned'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "report" -d 'Write the machine\'s map on one page (report.html) and its facts (report.json)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "check" -d 'Validate rule files or directories'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "daemon" -d 'Run the daemon'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "status" -d 'Show the running daemon\'s status (over D-Bus)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "remeasure" -d 'Ask the running daemon to re-measure the latency matrix'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "reload" -d 'Ask the running daemon to reload its rules'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "managed" -d 'List the processes the daemon manages'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "explain" -d 'Explain which rule placed a process, and why'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "diff" -d 'Compare the latency matrices of two machines of one layout'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "fleet" -d 'Compare many machines of one CPU model and find the outliers'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "metrics" -d 'Print the running daemon\'s metrics in the Prometheus text format'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "export" -d 'Print what pinnerd knows in another engine\'s format (Kubernetes NFD, hwloc)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "run" -d 'Run a command on CPUs chosen like a rule\'s (asks the daemon when it runs)'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "pin" -d 'Pin a running process\'s threads through the daemon, without a rule file'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "release" -d 'Give a process pinned by `pin` or `run` its CPUs from before back'
complete -c pinnerd -n "__fish_pinnerd_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l sysfs -d 'Read sysfs from DIR instead of the running machine\'s. DIR is a sysfs root (with devices/system/cpu) or a captured machine holding sys/ and proc/' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l procfs -d 'Read procfs (CPU model, microcode, kernel release) from DIR. Defaults to the proc/ beside --sysfs when there is one, else the running machine\'s' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l matrix -d 'Also show the latency domains found in this matrix (our JSON or core-to-core-latency\'s CSV), reconciled with the topology when it fits' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l svg -d 'Also draw the latency domains as SVG into FILE: one row per level, coarsest on top, each group a box over its CPUs. From --matrix when given, else from sysfs' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l heatmap -d 'Also draw the heatmap of the --matrix file as SVG into FILE' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -l json -d 'Print JSON instead of the tree'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand topology" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l cpus -d 'CPUs to measure, kernel list format (e.g. `0-3,8`). Default: every online CPU except isolated ones. Named isolated CPUs are measured' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l budget -d 'Time allowed for measuring, in seconds (the wait for idle CPUs comes on top); pairs not reached in time stay empty, with a warning' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l primitive -d 'Cache-line primitive' -r -f -a "cas\t'Compare-and-swap on one line (what core-to-core-latency and the public datasets use)'
load-store\t'A store on one line answered by a store on another (c2clat\'s default). Its figures are not comparable with CAS figures (2.3× them on the build VM)'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l mode -d 'One pair at a time (`serial`, also called `full`), disjoint pairs in parallel rounds (then a sample of pairs re-measured serially to report the disagreement), or `sparse`: the hierarchy from a few pairs, spot checks, the rest inferred' -r -f -a "serial\t'One pair at a time: nothing else of ours runs while a pair is measured. `full` names it too (every pair, as opposed to `sparse`)'
rounds\t'Disjoint pairs in parallel, a round-robin tournament (N−1 rounds of N/2 pairs), then a sample of pairs re-measured serially to report the disagreement'
sparse\t'The hierarchy from a few pairs, spot checks per block, full measurement only of blocks that disagree; the other cells are inferred (see `sparse`)'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l simulate -d 'Do not spin: answer each pair sparse measurement asks for from this matrix (our JSON or core-to-core-latency\'s CSV), with noise. Implies `--mode sparse`' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l noise -d 'With --simulate: sigma of the lognormal noise on each answer (0.02 ≈ 2%)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l seed -d 'With --simulate: seed of the noise and of the spot-check sample' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l moves-every -d 'With --simulate: a host that moves its vCPUs, as a cloud hypervisor does: the CPUs are placed on the file\'s CPUs at random, placed anew every N answers. The simulated machine is a virtual machine' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l first-touch -d 'Which CPU of each pair touches the shared line first (where its memory lives)' -r -f -a "initiator\t'The lower-numbered CPU of the pair'
responder\t'The higher-numbered CPU of the pair'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l idle-threshold -d 'Minimum idle share (percent) every measured CPU must show before measuring; 0 measures whatever the load' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l spin-priority -d 'Scheduling priority of the spinning threads: `normal` (nice 0), `nice-19`, or `idle` (SCHED_IDLE: they run only when nothing else wants the CPU)' -r -f -a "normal\t'SCHED_OTHER at nice 0: competes equally with everything else'
nice-19\t'SCHED_OTHER at nice 19: gets about 1.5% of a CPU against one nice-0 task'
idle\t'SCHED_IDLE: runs only when nothing else wants the CPU'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l idle-wait -d 'How long to wait for the CPUs to become idle, in seconds' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l svg -d 'Also draw the heatmap as SVG into FILE' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l out -d 'Also save the matrix into FILE: CSV when FILE ends in `.csv`, else JSON (from 1,025 CPUs on pinnerd\'s binary form, under the same name)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l sysfs -d 'Read the machine from this sysfs tree instead of /sys (CPU lists, fingerprint)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l complete -d 'With `--mode sparse` or `--simulate`: after the sparse map (its summary is printed first), measure its inferred cells in slices of disjoint pairs until every pair is measured, as the daemon does in the background; the matrix printed and saved is the completed one'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l json -d 'Print the matrix as JSON (the format the daemon stores up to 1,024 CPUs)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -l csv -d 'Print the matrix as core-to-core-latency\'s CSV (lower triangle, no CPU ids)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand measure" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -s k -l count -d 'Number of CPUs wanted' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l policy -d 'compact (threads that talk) or spread (independent workers)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l smt -d 'allow, avoid or prefer-siblings' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l exclude -d 'CPUs never to choose (kernel list format, e.g. 0,8-9)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l core-type -d 'Only CPUs of this kind: performance or efficiency (a machine with one kind of core has only performance cores). Refused, never widened, when the kind cannot hold the request' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l prefer -d 'Among the cache groups able to hold the request: cache (the most L3 per core) or frequency (the highest preferred-core ranking, else maximum frequency)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l near -d 'Near a device: a network interface, a PCI address (0000:81:00.0), a block device or a /dev path. Its NUMA node\'s CPUs first, the nearest nodes added when needed' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l matrix -d 'Latency matrix (our JSON or core-to-core-latency CSV); default: this machine\'s' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l sysfs -d 'Root of the sysfs tree to read the topology from' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l pid -d 'Plan one request for this running process: in its cgroup cpuset, weighing where its memory is; without --count, the request of the rule that matches it. Other rules\' exclusive CPUs and the [sched-ext] policy are not applied (--live applies both, as the daemon does). Changes nothing' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l sched-policy -d 'other, batch, idle, fifo or rr (fifo and rr need --sched-priority)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l sched-priority -d 'The real-time priority, 1 to 99; with --sched-policy fifo or rr only' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l nice -d 'The nice value, -20 to 19; with no --sched-policy, other or batch' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l rules -d 'Rule directories for --live (default: the settings\' `rule-dirs`, /etc/pinnerd.d)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l config -d 'The daemon\'s settings file, for --live (housekeeping CPUs, rule directories); a missing file means the defaults' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l container-files -d 'For --live: where containerd\'s task files and the kubelet\'s CPU manager state are read (tests point it at a tree)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l state-dir -d 'Where the daemon stores this machine\'s matrix (default: $STATE_DIRECTORY, else /var/lib/pinnerd)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l measure-budget -d 'Seconds a measurement made by `plan` (no --matrix, none stored) may take' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l idle-threshold -d 'Minimum idle share (percent) every CPU must show before `plan` measures; 0 measures whatever the load' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l json -d 'Print JSON'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l live -d 'Dry run over the running system: which processes match which rules and what they would get. Changes nothing'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -l no-measure -d 'Never measure: without --matrix or a stored matrix, use the topology alone'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand plan" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -s k -l count -d 'Threads in the ring (2 = ping-pong)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l runs -d 'Runs of each variant' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l duration-ms -d 'Length of one run, in milliseconds' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l matrix -d 'Latency matrix to plan with (default: this machine\'s stored or measured one)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l state-dir -d 'Where the daemon stores this machine\'s matrix' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l idle-threshold -d 'Minimum idle share (percent) every CPU must show before a matrix is measured; 0 measures whatever the load' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l no-measure -d 'Never measure a matrix; plan on the topology alone when none is stored'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -l json -d 'Print JSON'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand compare" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l out -d 'Directory to write report.html and report.json into (created when missing)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l matrix -d 'Latency matrix (our JSON or core-to-core-latency\'s CSV) instead of this machine\'s stored or measured one. Another machine\'s matrix is drawn from its own domains' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l sysfs -d 'Root of the sysfs tree to read the topology from (e.g. a captured machine)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l budget -d 'Seconds a measurement made by the report may take (none stored, no --matrix)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l idle-threshold -d 'Minimum idle share (percent) every CPU must show before the report measures; 0 measures whatever the load' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l bus -d 'Where the running daemon is asked for its containers (the page of this machine only): `system`, `session`, or a D-Bus address' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -l compare -d 'Also measure the effect (a ping-pong ring on the planned, autopilot, worst and unpinned CPUs, as `pinnerd compare`) and the engine against a plain ping-pong on the first two CPUs. Spins this machine\'s CPUs for about 15 s'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand report" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand check" -l no-permissions -d 'Skip the ownership and permission checks the daemon makes when running as root'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand check" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand check" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l config -d 'Daemon settings file (measurement interval, budget, rescan interval…); a missing file means the defaults' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l rules -d 'Rule directory; repeat for several. Default: the settings\' `rule-dirs` (/etc/pinnerd.d)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l state-dir -d 'Where the matrix and its history live. Default: $STATE_DIRECTORY, else /var/lib/pinnerd' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l runtime-dir -d 'Where the masks to restore after a crash live. Default: $RUNTIME_DIRECTORY, else /run/pinnerd' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -l machine -d 'For tests and benchmarks: read the CPUs, topology and fingerprint from the machine directory DIR (`sys/` and `proc/`, as `plan --sysfs` takes it; a generated or captured tree) instead of this machine\'s, and only observe: no process is pinned, no unit held, no cgroup, sysfs or IRQ file written, nothing measured. The stored matrix is the one in the state directory with DIR\'s fingerprint. Root only' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand daemon" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand status" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand status" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand status" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand remeasure" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand remeasure" -l timeout -d 'Give up waiting after this many seconds' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand remeasure" -l wait -d 'Wait for the measurement to finish and print its summary'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand remeasure" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand remeasure" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand reload" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand reload" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand reload" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand managed" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand managed" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand managed" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand explain" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand explain" -l json -d 'Print the bus\'s `ExplainJson` object instead (the managed row, the text, where its memory is, the container it runs in; see docs/dbus.md)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand explain" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand explain" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand diff" -l tolerance -d 'A level\'s (or a group pair\'s) median may differ by this fraction and still be the same' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand diff" -l cell-tolerance -d 'A single cell is listed as different beyond this fraction' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand diff" -l json -d 'Print JSON'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand diff" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand diff" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand fleet" -l tolerance -d 'A level\'s (or a group pair\'s) median may differ by this fraction and still be the same' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand fleet" -l cell-tolerance -d 'A single cell is listed as different beyond this fraction' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand fleet" -l json -d 'Print JSON'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand fleet" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand fleet" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand metrics" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand metrics" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand metrics" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and not __fish_seen_subcommand_from nfd hwloc-distances help" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and not __fish_seen_subcommand_from nfd hwloc-distances help" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and not __fish_seen_subcommand_from nfd hwloc-distances help" -f -a "nfd" -d 'A Node Feature Discovery feature file (SMT, LLC groups, latency per level)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and not __fish_seen_subcommand_from nfd hwloc-distances help" -f -a "hwloc-distances" -d 'The matrix as an hwloc distances file for `hwloc-annotate … root distances FILE`'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and not __fish_seen_subcommand_from nfd hwloc-distances help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -l matrix -d 'Latency matrix (our JSON or core-to-core-latency\'s CSV); default: the one the daemon stored for this machine, if its fingerprint matches' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -l state-dir -d 'Where the daemon stores this machine\'s matrix' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -l sysfs -d 'Read sysfs from DIR (a sysfs root or a captured machine holding sys/ and proc/)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -l out -d 'Write the file here (atomically: a temporary file renamed over it) instead of printing it, e.g. /etc/kubernetes/node-feature-discovery/features.d/pinnerd' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from nfd" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -l matrix -d 'Latency matrix; default: the one the daemon stored for this machine' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -l topology -d 'hwloc topology XML whose PUs the matrix\'s CPUs are (their `os_index`); default: the running machine\'s, from `lstopo-no-graphics --of xml`' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -l unit -d 'Unit of the values (hwloc stores integers): `ns` rounds, `ps` keeps 0.001 ns' -r -f -a "ns\t'Nanoseconds, rounded (off-diagonal values at least 1)'
ps\t'Picoseconds, rounded: keeps a tenth of a nanosecond'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -l state-dir -d 'Where the daemon stores this machine\'s matrix' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from hwloc-distances" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from help" -f -a "nfd" -d 'A Node Feature Discovery feature file (SMT, LLC groups, latency per level)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from help" -f -a "hwloc-distances" -d 'The matrix as an hwloc distances file for `hwloc-annotate … root distances FILE`'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand export; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -s k -l count -d 'This many CPUs, chosen from the latency matrix (default 1)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l policy -d 'compact (threads that talk) or spread (independent workers); with a count' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l smt -d 'allow, avoid or prefer-siblings; with a count' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l cpus -d 'Exactly these CPUs (kernel list format, e.g. 2-5,8), as `taskset -c` would' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l within -d 'With a count: choose among these CPUs only' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l rule -d 'Use the `[rule.place]` of the loaded rule NAME' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l core-type -d 'Only CPUs of this kind: performance or efficiency (a machine with one kind of core has only performance cores). Refused, never widened, when the kind cannot hold the request' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l prefer -d 'Among the cache groups able to hold the request: cache (the most L3 per core) or frequency (the highest preferred-core ranking, else maximum frequency)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l near -d 'Near a device: a network interface, a PCI address (0000:81:00.0), a block device or a /dev path. Its NUMA node\'s CPUs first, the nearest nodes added when needed' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l sched-policy -d 'other, batch, idle, fifo or rr (fifo and rr need --sched-priority)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l sched-priority -d 'The real-time priority, 1 to 99; with --sched-policy fifo or rr only' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l nice -d 'The nice value, -20 to 19; with no --sched-policy, other or batch' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l memory -d 'The command\'s memory: bind (only the NUMA nodes of the chosen CPUs), preferred (those nodes first) or leave (the kernel\'s default: where the allocating CPU is). Set before exec, as numactl --membind/--preferred do' -r -f -a "bind\t'Allocate only on the nodes of the chosen CPUs (`numactl --membind`); an allocation those nodes cannot satisfy fails (or swaps) instead of spilling'
preferred\t'Prefer the nodes of the chosen CPUs, spill elsewhere when they are full (`numactl --preferred`; several nodes need Linux 5.15\'s MPOL_PREFERRED_MANY)'
leave\t'Leave the memory policy alone (the default: memory follows the CPU that allocates, the kernel\'s "local" policy)'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l rules -d 'Rule directories for `--rule` without the daemon (default: the settings\' `rule-dirs`, /etc/pinnerd.d)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l config -d 'The daemon\'s settings file, for a choice made without the daemon (housekeeping CPUs, rule directories); a missing file means the defaults' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l state-dir -d 'Where the daemon stores this machine\'s matrix (default: $STATE_DIRECTORY, else /var/lib/pinnerd)' -r -F
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l print -d 'Show the CPUs that would be chosen, and who chose them; run nothing'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -l local -d 'Never ask the daemon: choose from this machine\'s stored matrix, else its sysfs topology'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -s k -l count -d 'This many CPUs, chosen from the latency matrix (default 1)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l policy -d 'compact (threads that talk) or spread (independent workers); with a count' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l smt -d 'allow, avoid or prefer-siblings; with a count' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l cpus -d 'Exactly these CPUs (kernel list format, e.g. 2-5,8), as `taskset -c` would' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l within -d 'With a count: choose among these CPUs only' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l rule -d 'Use the `[rule.place]` of the loaded rule NAME' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l core-type -d 'Only CPUs of this kind: performance or efficiency (a machine with one kind of core has only performance cores). Refused, never widened, when the kind cannot hold the request' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l prefer -d 'Among the cache groups able to hold the request: cache (the most L3 per core) or frequency (the highest preferred-core ranking, else maximum frequency)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l near -d 'Near a device: a network interface, a PCI address (0000:81:00.0), a block device or a /dev path. Its NUMA node\'s CPUs first, the nearest nodes added when needed' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l sched-policy -d 'other, batch, idle, fifo or rr (fifo and rr need --sched-priority)' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l sched-priority -d 'The real-time priority, 1 to 99; with --sched-policy fifo or rr only' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l nice -d 'The nice value, -20 to 19; with no --sched-policy, other or batch' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -l memory -d 'follow: move its memory to the NUMA nodes of its CPUs (off the daemon\'s loop, no more often than memory.follow-interval); leave: do not move it' -r -f -a "follow\t'Move its memory to the nodes of its CPUs'
leave\t'Do not move its memory'"
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand pin" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand release" -l bus -d '`system`, `session`, or a D-Bus address such as `unix:path=/run/bus`' -r
complete -c pinnerd -n "__fish_pinnerd_using_subcommand release" -s v -l verbose -d 'More log output (repeat for more)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand release" -s h -l help -d 'Print help'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "topology" -d 'Show the CPU topology read from sysfs (and latency domains with --matrix)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "measure" -d 'Measure the core-to-core latency matrix of this machine'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "plan" -d 'Choose CPUs for a request from the topology and the latency matrix'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "compare" -d 'Ping-pong throughput on the planned pair vs the autopilot pair, worst pair, unpinned'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "report" -d 'Write the machine\'s map on one page (report.html) and its facts (report.json)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "check" -d 'Validate rule files or directories'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "daemon" -d 'Run the daemon'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "status" -d 'Show the running daemon\'s status (over D-Bus)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "remeasure" -d 'Ask the running daemon to re-measure the latency matrix'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "reload" -d 'Ask the running daemon to reload its rules'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "managed" -d 'List the processes the daemon manages'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "explain" -d 'Explain which rule placed a process, and why'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "diff" -d 'Compare the latency matrices of two machines of one layout'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "fleet" -d 'Compare many machines of one CPU model and find the outliers'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "metrics" -d 'Print the running daemon\'s metrics in the Prometheus text format'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "export" -d 'Print what pinnerd knows in another engine\'s format (Kubernetes NFD, hwloc)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "run" -d 'Run a command on CPUs chosen like a rule\'s (asks the daemon when it runs)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "pin" -d 'Pin a running process\'s threads through the daemon, without a rule file'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "release" -d 'Give a process pinned by `pin` or `run` its CPUs from before back'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and not __fish_seen_subcommand_from topology measure plan compare report check daemon status remeasure reload managed explain diff fleet metrics export run pin release help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and __fish_seen_subcommand_from export" -f -a "nfd" -d 'A Node Feature Discovery feature file (SMT, LLC groups, latency per level)'
complete -c pinnerd -n "__fish_pinnerd_using_subcommand help; and __fish_seen_subcommand_from export" -f -a "hwloc-distances" -d 'The matrix as an hwloc distances file for `hwloc-annotate … root distances FILE`'
