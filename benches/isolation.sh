#!/usr/bin/env bash
# What a pinned busy-poller sees: the gaps in one thread's spin loop, on its own CPU,
# while noisy neighbours run, unpinned, without pinnerd, with an `exclusive` rule and
# with an `isolate` rule (an isolated cgroup v2 cpuset partition).
#
#   sudo PINNERD=path/to/pinnerd benches/isolation.sh OUTDIR
#
# SECS (default 30): seconds measured per mode. NOISE (default 8): noisy neighbours, each
# spinning ~5 ms and sleeping ~1 ms, unpinned; half start before the placement, half
# after it. CPU (default: the last online CPU): the rule's `cpus`. The modes run in turn:
#
#   unpinned           no pinnerd; the poller goes where the scheduler puts it
#   exclusive          `pinnerd daemon` with a rule `cpus = "CPU"`, `exclusive = true`
#   isolate            the same rule with `isolate = true`
#   isolate+fifo       the same with `sched-policy = "fifo"`, `sched-priority = 50`
#   isolate+fifo+idle  the same with `idle-limit-us = 0` (no idle state on CPU but polling)
#
# MODES (default: all five, in that order) picks some, space-separated.
# The poller is python3 named `pinnerd-poller` (the rule matches `comm`). It waits until
# the daemon has placed it (its Cpus_allowed_list is CPU, at most 10 s), then busy-spins
# for SECS on time.perf_counter_ns(): longest gap, gaps over 100 µs and over 1 ms (count
# and total), p99.9 of the iteration time (a bounded histogram) and the CPUs it ran on.
# Meanwhile a sampler (python3 too, kept off CPU) reads every task's CPU
# (/proc/*/task/*/stat field 39) every 10 ms and counts the samples of other tasks
# running (state R) on the poller's CPU, user tasks and kernel threads (PF_KTHREAD, or no
# exe) apart; tasks in any state whose last CPU it was go to the JSON only. With
# `isolate` (and the modes built on it) the root cgroup's `cpuset.cpus.isolated` is read
# before, during and after; with FIFO the poller's policy and priority as placed
# (/proc/PID/stat fields 41 and 18) go to MODE.info.
#
# The daemon runs privately (rule, state and runtime directories under /dev/shm, its own
# dbus-daemon: needs `dbus-daemon`, else those modes are skipped and say why), or, with
# PINNERD_RULES_DIR=/etc/pinnerd.d, the running system daemon gets the rule as a file
# there and `pinnerd reload`; the file is removed at the end. A rule the daemon rejects,
# or a partition it does not make, is said in the table row, not measured as if it were.
#
# Output: one table on stdout and in OUTDIR/isolation.txt, OUTDIR/isolation.json, and
# per mode MODE.poller.json, MODE.sampler.json, MODE.info (and MODE.daemon.log).
# Needs bash, coreutils and python3 (no Rust toolchain); run as root on an idle machine.
# About 5 x (SECS + 5) s.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: sudo PINNERD=path/to/pinnerd [SECS=30] [NOISE=8] [CPU=N] [MODES='unpinned exclusive …'] $0 OUTDIR" >&2
    exit 2
fi
out=$1
pinnerd=${PINNERD:-pinnerd}
secs=${SECS:-30}
noise=${NOISE:-8}
system_rules=${PINNERD_RULES_DIR:-}
if [ -n "$system_rules" ] && [ ! -d "$system_rules" ]; then
    echo "$0: PINNERD_RULES_DIR=$system_rules is not a directory" >&2
    exit 2
fi
if [ "$EUID" -ne 0 ]; then
    echo "$0: run as root (the daemon pins other processes and makes cpuset partitions)" >&2
    exit 2
fi
python=$(command -v python3 || true)
if [ -z "$python" ]; then
    echo "$0: python3 is needed (the poller, the noise and the sampler are python3)" >&2
    exit 2
fi
if ! command -v "$pinnerd" >/dev/null 2>&1; then
    echo "$0: no pinnerd binary at '$pinnerd' (set PINNERD=path/to/pinnerd)" >&2
    exit 2
fi
pinnerd=$(command -v "$pinnerd")
case $pinnerd in /*) ;; *) pinnerd=$PWD/$pinnerd ;; esac
case "$secs$noise" in
*[!0-9]*)
    echo "$0: SECS and NOISE are whole numbers" >&2
    exit 2
    ;;
esac
online=$(cat /sys/devices/system/cpu/online)
cpu=${CPU:-${online##*[-,]}}
if ! "$python" -c 'import os, sys; sys.exit(int(sys.argv[1]) not in os.sched_getaffinity(0))' \
    "$cpu" 2>/dev/null; then
    echo "$0: CPU=$cpu is not a CPU this shell may run on (online: $online)" >&2
    exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The runtime directory on tmpfs, as /run is under systemd.
work=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
chmod 755 "$work"
bus_pid=
daemon_pid=
poller_pid=
sampler_pid=
noise_pids=()
system_rule=
bus_address=

stop_pid() {
    [ -n "$1" ] || return 0
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
stop_load() {
    local p
    for p in "${noise_pids[@]}"; do
        stop_pid "$p"
    done
    noise_pids=()
    stop_pid "$poller_pid"
    stop_pid "$sampler_pid"
    poller_pid='' sampler_pid=''
}
# A sleep that a signal interrupts at once (the trap runs in `wait`, not after `sleep`).
nap_pid=
nap() {
    sleep "$1" &
    nap_pid=$!
    wait "$nap_pid"
    nap_pid=
}
stop_daemon() {
    stop_pid "$daemon_pid"
    daemon_pid=
}
cleanup() {
    stop_pid "$nap_pid"
    stop_load
    stop_daemon
    stop_pid "$bus_pid"
    if [ -n "$system_rule" ] && [ -e "$system_rule" ]; then
        rm -f "$system_rule"
        "$pinnerd" reload >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The poller, the noise, the sampler and the table, one python3 file.
cat >"$work/bench.py" <<'PY'
import gc
import json
import math
import os
import sys
import time

PF_KTHREAD = 0x00200000
LINEAR_NS = 100          # histogram bins of 100 ns below 100 µs,
LINEAR_BINS = 1000
LOG_STEPS = 8            # then 8 bins per doubling
LOG_BINS = 200


def set_name(name):
    # The comm is already the name from exec (a link named so); this makes sure of it
    # where ctypes exists (python3-minimal has none).
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)  # PR_SET_NAME
    except (ImportError, OSError):
        pass


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.005)


def stat_fields(path):
    """The fields after `(comm)`: [0] is field 3 (state), [6] field 9, [36] field 39."""
    with open(path) as f:
        s = f.read()
    r = s.rfind(")")
    return s[s.find("(") + 1:r], s[r + 2:].split()


def cpu_reader():
    try:
        import ctypes

        getcpu = ctypes.CDLL(None).sched_getcpu
        if getcpu() >= 0:
            return getcpu
    except (ImportError, OSError, AttributeError):
        pass
    return lambda: int(stat_fields("/proc/thread-self/stat")[1][36])


def bin_upper_ns(i):
    if i < LINEAR_BINS:
        return (i + 1) * LINEAR_NS
    return LINEAR_NS * LINEAR_BINS * 2 ** ((i - LINEAR_BINS + 1) / LOG_STEPS)


def poller(secs, go, out):
    set_name("pinnerd-poller")
    wait_for(go)
    gc.disable()
    getcpu = cpu_reader()
    cpus = {}
    hist = [0] * (LINEAR_BINS + LOG_BINS)
    big = []                      # (offset ms, gap µs) of gaps over 1 ms, the first 10000
    longest = n100 = t100 = n1ms = t1ms = 0
    pc = time.perf_counter_ns
    start = pc()
    end = start + secs * 1_000_000_000
    next_sample = start
    prev = pc()
    while True:
        now = pc()
        d = now - prev
        prev = now
        if d < 100_000:
            hist[d // LINEAR_NS] += 1
        else:
            i = LINEAR_BINS + int(math.log2(d / 100_000) * LOG_STEPS)
            hist[min(i, LINEAR_BINS + LOG_BINS - 1)] += 1
            n100 += 1
            t100 += d
            if d > longest:
                longest = d
            if d > 1_000_000:
                n1ms += 1
                t1ms += d
                if len(big) < 10000:
                    big.append((round((now - start) / 1e6, 3), round(d / 1e3, 1)))
        if now >= next_sample:
            if now >= end:
                break
            c = getcpu()
            cpus[c] = cpus.get(c, 0) + 1
            next_sample = now + 10_000_000
            prev = pc()           # the sample itself is not a gap
    iters = sum(hist)
    want, seen, p999 = iters * 0.999, 0, 0.0
    for i, n in enumerate(hist):
        seen += n
        if seen >= want:
            p999 = bin_upper_ns(i)
            break
    res = {
        "pid": os.getpid(),
        "seconds": (now - start) / 1e9,
        "iterations": iters,
        "mean_iteration_ns": (now - start) / iters if iters else None,
        "p999_iteration_ns": p999,
        "longest_gap_us": longest / 1e3,
        "gaps_over_100us": n100,
        "ms_in_gaps_over_100us": t100 / 1e6,
        "gaps_over_1ms": n1ms,
        "ms_in_gaps_over_1ms": t1ms / 1e6,
        "gaps_over_1ms_list": big,
        "cpu_samples": {str(k): v for k, v in sorted(cpus.items())},
        "affinity_at_end": sorted(os.sched_getaffinity(0)),
    }
    with open(out + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.rename(out + ".tmp", out)


def noise():
    set_name("pinnerd-noise")
    pc = time.perf_counter_ns
    while True:
        t = pc() + 5_000_000
        while pc() < t:
            pass
        time.sleep(0.001)


def sampler(poller_pid, cpu, secs, go, out):
    """Every task's CPU every 10 ms; the sampler itself keeps off the rule's CPU."""
    set_name("pinnerd-sampler")
    away = os.sched_getaffinity(0) - {cpu}
    if away:
        os.sched_setaffinity(0, away)
    wait_for(go)
    me = str(os.getpid())
    kthread_cache = {}

    def is_kthread(pid, flags):
        if flags & PF_KTHREAD:
            return True
        k = kthread_cache.get(pid)
        if k is None:
            try:
                os.readlink(f"/proc/{pid}/exe")
                k = False
            except FileNotFoundError:
                k = True
            except OSError:
                k = False
            kthread_cache[pid] = k
        return k

    counts = {"user_running": 0, "kernel_running": 0, "user_any_state": 0, "kernel_any_state": 0,
              "sampler_itself": 0}
    by_comm = {}
    poller_cpus = {}
    samples = 0
    pc = time.monotonic
    end = pc() + secs
    tick = pc()
    while True:
        tick += 0.010
        now = pc()
        if now >= end:
            break
        if tick > now:
            time.sleep(tick - now)
        else:
            tick = now
        try:
            pcpu = int(stat_fields(f"/proc/{poller_pid}/stat")[1][36])
        except (OSError, IndexError, ValueError):
            break
        samples += 1
        poller_cpus[pcpu] = poller_cpus.get(pcpu, 0) + 1
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            if pid == me:
                # Reading itself it is always running: counted apart.
                try:
                    if int(stat_fields(f"/proc/{me}/stat")[1][36]) == pcpu:
                        counts["sampler_itself"] += 1
                except (OSError, IndexError, ValueError):
                    pass
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                if tid == str(poller_pid):
                    continue
                try:
                    comm, f = stat_fields(f"/proc/{pid}/task/{tid}/stat")
                    cpu, flags, state = int(f[36]), int(f[6]), f[0]
                except (OSError, IndexError, ValueError):
                    continue
                if cpu != pcpu:
                    continue
                kind = "kernel" if is_kthread(pid, flags) else "user"
                counts[kind + "_any_state"] += 1
                if state == "R":
                    counts[kind + "_running"] += 1
                    key = f"{comm} ({kind})"
                    by_comm[key] = by_comm.get(key, 0) + 1
    res = {
        "samples": samples,
        "period_ms": 10,
        "poller_cpu_samples": {str(k): v for k, v in sorted(poller_cpus.items())},
        **counts,
        "running_by_comm": dict(sorted(by_comm.items(), key=lambda kv: -kv[1])[:30]),
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def info(path):
    d = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                d[k] = v
    except OSError:
        pass
    return d


def report(outdir, cpu, secs, noise, modes):
    rows, doc = [], {"cpu": int(cpu), "secs": int(secs), "noise": int(noise), "modes": []}
    for mode in modes:
        i = info(os.path.join(outdir, mode + ".info"))
        p = load(os.path.join(outdir, mode + ".poller.json"))
        s = load(os.path.join(outdir, mode + ".sampler.json"))
        doc["modes"].append({"mode": mode, "info": i, "poller": p, "sampler": s})
        note = i.get("note", "")
        if p is None:
            rows.append((mode, "-", "-", "-", "-", "-", note or "not measured"))
            continue
        others = "-" if s is None else f"{s['user_running']} user / {s['kernel_running']} kernel"
        if s and s.get("sampler_itself"):
            note = "; ".join(x for x in (note, f"the sampler on its CPU {s['sampler_itself']}x") if x)
        ran = ",".join(p["cpu_samples"]) or "?"
        rows.append((
            mode,
            f"{p['longest_gap_us']:.0f}",
            str(p["gaps_over_1ms"]),
            f"{p['ms_in_gaps_over_1ms']:.1f}",
            str(p["gaps_over_100us"]),
            others,
            "; ".join(x for x in (f"ran on CPU {ran}", note) if x),
        ))
    head = ("mode", "longest gap µs", "gaps>1ms", "ms lost in gaps>1ms", "gaps>100µs",
            "others running on its CPU (samples)", "note")
    w = [max(len(r[c]) for r in rows + [head]) for c in range(len(head))]
    lines = [f"poller on CPU {cpu}, {secs} s per mode, {noise} noisy neighbours "
             f"(others sampled every 10 ms)"]
    for r in [head, tuple("-" * x for x in w)] + rows:
        lines.append("  ".join(r[c].ljust(w[c]) for c in range(len(head))).rstrip())
    table = "\n".join(lines) + "\n"
    doc["table"] = [dict(zip(head, r)) for r in rows]
    with open(os.path.join(outdir, "isolation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(outdir, "isolation.txt"), "w") as f:
        f.write(table)
    print(table, end="")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "poller":
        poller(int(args[0]), args[1], args[2])
    elif cmd == "noise":
        noise()
    elif cmd == "sampler":
        sampler(int(args[0]), int(args[1]), int(args[2]), args[3], args[4])
    elif cmd == "report":
        report(args[0], args[1], args[2], args[3], args[4:])
PY

# Named links to the interpreter itself (not a wrapper such as a pyenv shim), so that the
# processes' comm is their name from exec on; each also sets it with prctl.
real_python=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')
mkdir -p "$work/bin"
for n in pinnerd-poller pinnerd-noise pinnerd-sampler; do
    ln -s "$real_python" "$work/bin/$n"
done

# The root of the cgroup2 mount, from mountinfo (field 5 the mount point, the type after " - ").
cgroup2=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") break; if ($(i + 1) == "cgroup2" && $4 == "/") { print $5; exit } }' /proc/self/mountinfo)
isolated_now() {
    if [ -n "$cgroup2" ] && [ -r "$cgroup2/cpuset.cpus.isolated" ]; then
        local v
        v=$(cat "$cgroup2/cpuset.cpus.isolated")
        echo "${v:-(empty)}"
    elif [ -z "$cgroup2" ]; then
        echo "absent (no cgroup2 mount)"
    elif ! grep -qw cpuset "$cgroup2/cgroup.controllers" 2>/dev/null; then
        echo "absent (no cpuset controller in $cgroup2)"
    else
        echo "absent (no $cgroup2/cpuset.cpus.isolated: kernel before 6.7)"
    fi
}
# Whether CPU is in a kernel CPU list such as 2-3,15.
in_list() {
    "$python" -c '
import sys
c = int(sys.argv[1])
for part in sys.argv[2].split(","):
    a, _, b = part.partition("-")
    if a.isdigit() and int(a) <= c <= int(b or a):
        sys.exit(0)
sys.exit(1)' "$1" "$2"
}
allowed() { awk '/^Cpus_allowed_list:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# Whether a mode's rule has `isolate = true`.
is_isolate() { case $1 in isolate*) return 0 ;; *) return 1 ;; esac; }
# A task's scheduling policy and priority as /proc/PID/stat fields 41 and 18 say them
# (field 18 is -1 - the real-time priority for a real-time task).
sched_of() {
    awk '{ sub(/.*\) /, ""); p = $39; n = split("other fifo rr batch iso idle deadline", k, " ")
        printf "%s %d\n", (p < n ? k[p + 1] : p), ($16 < 0 ? -1 - $16 : 0) }' "/proc/$1/stat" 2>/dev/null
}

write_rule() { # FILE MODE
    {
        echo "# benches/isolation.sh: the poller's rule, mode $2; removed when the run ends."
        echo "[[rule]]"
        echo 'name = "isolation-bench-poller"'
        echo "[rule.match]"
        echo 'comm = "pinnerd-poller"'
        echo "user = $(id -u)"
        echo "[rule.place]"
        echo "cpus = \"$cpu\""
        echo "exclusive = true"
        case $2 in isolate*) echo "isolate = true" ;; esac
        case $2 in *+fifo*) printf 'sched-policy = "fifo"\nsched-priority = 50\n' ;; esac
        case $2 in *+idle*) echo "idle-limit-us = 0" ;; esac
    } >"$1.tmp"
    chmod 644 "$1.tmp"
    mv "$1.tmp" "$1"
}

# The daemon's warnings and errors since the mode started (its own log, or the journal's).
daemon_warnings() { # MODE
    if [ -n "$system_rules" ]; then
        if command -v journalctl >/dev/null 2>&1; then
            journalctl -q -o cat -p warning -u pinnerd.service --since "@$mode_started" \
                2>/dev/null || true
        fi
    else
        grep -E '^[0-9T:.Z-]+ +(WARN|ERROR) ' "$out/$1.daemon.log" 2>/dev/null |
            sed -E 's/^[0-9T:.Z-]+ +//' || true
    fi
}
# The first of them about the rule file or about isolating.
daemon_problem() { # MODE
    daemon_warnings "$1" | grep -E -i "isolat|partition|cpuset|${rule_file##*/}" | head -n 1 |
        cut -c 1-300
}

start_private_daemon() { # MODE
    if [ ! -e "$work/settings.toml" ]; then
        # One short measurement at the first start, before any load, whatever the load
        # (no waiting for idle CPUs); nothing periodic; never a spinner on the poller's CPU.
        printf '[measure]\nbudget = "1s"\nidle-threshold = 0\ndrift-probe = "off"\ninterval = "off"\nnever-cpus = "%s"\n' \
            "$cpu" >"$work/settings.toml"
    fi
    if [ -z "$bus_address" ]; then
        read -r bus_address bus_pid < <(dbus-daemon --session --fork --print-address=1 \
            --print-pid=1 | paste -sd ' ')
    fi
    "$pinnerd" daemon --bus="$bus_address" --rules "$work/rules" --state-dir "$work/state" \
        --runtime-dir "$work/runtime" --config "$work/settings.toml" 2>"$out/$1.daemon.log" &
    daemon_pid=$!
    local i
    for i in $(seq 150); do
        grep -q "proc connector subscribed" "$out/$1.daemon.log" && break
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.2
    done
    grep -q "proc connector subscribed" "$out/$1.daemon.log" || return 1
    # Its start-up measurement (if any) over before the poller starts.
    for i in $(seq 600); do
        case $("$pinnerd" status --bus="$bus_address" 2>/dev/null | awk '/^state:/ { print $2 }') in
        starting | measuring) sleep 0.2 ;;
        *) return 0 ;;
        esac
    done
}

# One mode: the load, the placement, SECS of polling, the figures into OUTDIR/MODE.*.
run_mode() { # MODE
    local mode=$1 note='' placed=no t0 t1 i half
    local info=$out/$mode.info
    rm -f "$out/$mode".{info,poller.json,sampler.json,daemon.log}
    mode_started=$(date +%s)
    echo "== $mode" >&2
    echo "loadavg_at_start=$(cut -d ' ' -f 1-3 /proc/loadavg)" >>"$info"
    echo "cpuset_isolated_before=$(isolated_now)" >>"$info"
    rm -f "$work/go"
    if [ "$mode" != unpinned ]; then
        if [ -n "$system_rules" ]; then
            rule_file=$system_rules/zz-isolation-bench.toml
            system_rule=$rule_file
            write_rule "$rule_file" "$mode"
            local reload rc=0
            reload=$("$pinnerd" reload 2>&1) || rc=$?
            echo "reload=$(echo "$reload" | paste -sd ' ') (exit $rc)" >>"$info"
            if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
                note="pinnerd reload failed (exit $rc): $(echo "$reload" | tail -n 1 | cut -c 1-200)"
            elif echo "$reload" | grep -q "${rule_file##*/}"; then
                note="the daemon rejected the rule: $(echo "$reload" | grep "${rule_file##*/}" | head -n 1 |
                    sed -E 's|^ *||; s|^/[^:]*/||; s/, expected one of .*//' | cut -c 1-200)"
            fi
        elif ! command -v dbus-daemon >/dev/null 2>&1; then
            note="skipped: no dbus-daemon for a private bus (or PINNERD_RULES_DIR=/etc/pinnerd.d for the running daemon)"
        else
            mkdir -p "$work/rules" "$work/state" "$work/runtime"
            chmod 755 "$work/rules"
            rule_file=$work/rules/isolation-bench.toml
            write_rule "$rule_file" "$mode"
            if ! start_private_daemon "$mode"; then
                note="the daemon did not start: $(tail -n 1 "$out/$mode.daemon.log" | cut -c 1-200)"
            elif grep -q "rule file problem" "$out/$mode.daemon.log"; then
                note="the daemon rejected the rule: $(grep -m 1 "rule file problem" "$out/$mode.daemon.log" |
                    sed -E 's/.*error=//; s|^/[^:]*/||; s/, expected one of .*//' | cut -c 1-200)"
            fi
        fi
        if [ -n "$note" ]; then
            # A rule refused for a key of its own (not for isolating) is said as refused.
            if [ "$mode" = isolate ] || { is_isolate "$mode" && [[ $note != "the daemon rejected"* ]]; }; then
                note="cannot isolate: ${note#skipped: }; cpuset.cpus.isolated: $(isolated_now)"
            fi
            echo "note=$note" >>"$info"
            echo "   $note" >&2
            stop_daemon
            [ -n "$system_rule" ] && rm -f "$system_rule" && { "$pinnerd" reload >/dev/null 2>&1 || true; }
            return 0
        fi
    fi
    half=$((noise / 2))
    for ((i = 0; i < half; i++)); do
        "$work/bin/pinnerd-noise" "$work/bench.py" noise &
        noise_pids+=($!)
    done
    # Under systemd the poller gets a scope of its own: an isolate rule holds the unit
    # its process runs in, which must not be this script's with the noise in it.
    # (systemd-run --scope execs the command: $! is the poller.)
    if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then
        systemd-run --quiet --scope --slice=system.slice --unit="pinnerd-bench-poller-$$-$mode" \
            "$work/bin/pinnerd-poller" "$work/bench.py" poller "$secs" "$work/go" "$out/$mode.poller.json" &
    else
        "$work/bin/pinnerd-poller" "$work/bench.py" poller "$secs" "$work/go" "$out/$mode.poller.json" &
    fi
    poller_pid=$!
    if [ "$mode" = unpinned ]; then
        placed=n/a
    else
        t0=$(date +%s.%N)
        for i in $(seq 1000); do
            [ "$(allowed "$poller_pid")" = "$cpu" ] && {
                placed=yes
                break
            }
            sleep 0.01
        done
        t1=$(date +%s.%N)
        echo "placement_seconds=$(echo "$t0 $t1" | awk '{ printf "%.3f", $2 - $1 }')" >>"$info"
        echo "poller_comm=$(cat "/proc/$poller_pid/comm" 2>/dev/null)" >>"$info"
        case $mode in *+fifo*)
            # The class may follow the mask by a moment.
            for i in $(seq 50); do
                [ "$(sched_of "$poller_pid")" = "fifo 50" ] && break
                sleep 0.1
            done
            echo "poller_sched_placed=$(sched_of "$poller_pid")" >>"$info"
            ;;
        esac
        if [ "$placed" != yes ]; then
            note="not placed: the poller's Cpus_allowed_list was $(allowed "$poller_pid") after 10 s"
            local said
            said=$(daemon_problem "$mode")
            [ -n "$said" ] && note="$note; the daemon: $said"
            is_isolate "$mode" && note="cannot isolate: $note; cpuset.cpus.isolated: $(isolated_now)"
        fi
    fi
    echo "placed=$placed" >>"$info"
    if is_isolate "$mode" && [ "$placed" = yes ]; then
        # The partition may follow the mask by a moment.
        for i in $(seq 50); do
            in_list "$cpu" "$(isolated_now)" && break
            sleep 0.1
        done
        echo "cpuset_isolated_placed=$(isolated_now)" >>"$info"
        if ! in_list "$cpu" "$(isolated_now)"; then
            local said
            said=$(daemon_problem "$mode")
            note="NOT isolated (cpuset.cpus.isolated: $(isolated_now))${said:+; the daemon: $said}"
        fi
    fi
    case $mode in *+fifo*)
        if [ "$placed" = yes ] && [ "$(sched_of "$poller_pid")" != "fifo 50" ]; then
            note="${note:+$note; }NOT FIFO 50 (policy and priority: $(sched_of "$poller_pid"))"
        fi
        ;;
    esac
    if [ "$placed" = no ]; then
        echo "note=$note" >>"$info"
        echo "   $note" >&2
        stop_load
        stop_daemon
        return 0
    fi
    for ((i = half; i < noise; i++)); do
        "$work/bin/pinnerd-noise" "$work/bench.py" noise &
        noise_pids+=($!)
    done
    "$work/bin/pinnerd-sampler" "$work/bench.py" sampler "$poller_pid" "$cpu" "$secs" "$work/go" \
        "$out/$mode.sampler.json" &
    sampler_pid=$!
    touch "$work/go"
    nap "$(awk -v s="$secs" 'BEGIN { print s / 2 }')"
    is_isolate "$mode" && echo "cpuset_isolated_during=$(isolated_now)" >>"$info"
    wait "$poller_pid" || note="${note:+$note; }the poller failed"
    poller_pid=
    wait "$sampler_pid" || note="${note:+$note; }the sampler failed"
    sampler_pid=
    stop_load
    if is_isolate "$mode"; then
        # The partition should go with the rule's last process.
        t0=$(date +%s.%N)
        for i in $(seq 50); do
            in_list "$cpu" "$(isolated_now)" || break
            sleep 0.1
        done
        t1=$(date +%s.%N)
        echo "cpuset_isolated_after_exit=$(isolated_now) (read $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s after the poller exited)" >>"$info"
    fi
    stop_daemon
    if [ -n "$system_rule" ]; then
        rm -f "$system_rule"
        "$pinnerd" reload >/dev/null 2>&1 || true
    fi
    is_isolate "$mode" && echo "cpuset_isolated_after=$(isolated_now)" >>"$info"
    echo "note=$note" >>"$info"
    [ -n "$note" ] && echo "   $note" >&2
    return 0
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pinnerd: $("$pinnerd" --version 2>&1)"
    echo "kernel: $(uname -srm)"
    echo "nproc: $(nproc)"
    echo "online: $online"
    echo "cgroup2: ${cgroup2:-none}"
    if [ -n "$system_rules" ]; then
        echo "daemon: the running one, rules in $system_rules"
    else
        echo "daemon: private"
    fi
} >"$out/isolation-machine.txt"
rule_file=
mode_started=
read -r -a modes <<<"${MODES:-unpinned exclusive isolate isolate+fifo isolate+fifo+idle}"
for m in "${modes[@]}"; do
    case $m in
    unpinned | exclusive | isolate | isolate+fifo | isolate+fifo+idle) ;;
    *)
        echo "$0: MODES: no mode '$m' (unpinned exclusive isolate isolate+fifo isolate+fifo+idle)" >&2
        exit 2
        ;;
    esac
done
for m in "${modes[@]}"; do
    run_mode "$m"
done
"$python" "$work/bench.py" report "$out" "$cpu" "$secs" "$noise" "${modes[@]}"
