#!/bin/bash
# pinnerd end-to-end checks. Runs inside the test VM (pinnerd-vm-checks.service) after
# pinnerd.service has started, as root, against the installed package under real systemd.
#
# The VM has 8 CPUs: 2 sockets x 2 cores x 2 threads, one NUMA node per socket, so
# packages are 0-3 and 4-7 and the SMT pairs are 0,1 2,3 4,5 6,7.
#
# Output (the VM's second serial port), two lines per check:
#   PINNERD-VM BEGIN <name> <seconds since boot>
#   PINNERD-VM CHECK <name> PASS|FAIL|SKIP <detail>
# (SETUP instead of CHECK for a check run again in a resumed boot: resume.sh),
# then, when a check failed, the daemon's journal between
#   PINNERD-VM JOURNAL BEGIN / PINNERD-VM JOURNAL END
# and last
#   PINNERD-VM DONE passed=N failed=M skipped=K
# tests/vm/run.sh reads these lines on the host.
set -u
export LC_ALL=C SYSTEMD_COLORS=0 SYSTEMD_URLIFY=0 SYSTEMD_PAGER=
umask 022

export BUS=org.pinnerd.Pinnerd1 OBJ=/org/pinnerd/Pinnerd1 IFACE=org.pinnerd.Pinnerd1
export RULES=/etc/pinnerd.d
export WORK=/run/pinnerd-vm
export LIB=/usr/local/lib/pinnerd-vm
HZ=$(getconf CLK_TCK)
export HZ
# The topology qemu was told to build (tests/vm/run.sh).
export EXPECT_PACKAGES='[[0,1,2,3],[4,5,6,7]]'
export EXPECT_NODES='[[0,1,2,3],[4,5,6,7]]'
export EXPECT_SMT='[[0,1],[2,3],[4,5],[6,7]]'
export ALL_CPUS='0-7'
# The issue's goal, in centiseconds: a rule change or a new thread reaches the threads
# within 1 s.
export PIN_LIMIT_CS=100

mkdir -p "$WORK"

# ---------------------------------------------------------------- helpers

# uptime in seconds (10 ms resolution), the clock thread start times are kept in.
now() { read -r up _ </proc/uptime && echo "$up"; }
# elapsed FROM [TO]: seconds between two uptimes, 2 decimals.
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.2f", b - a }'; }
# le A B: true when A <= B (decimals).
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# wait_for SECONDS CMD...: run CMD every 50 ms until it succeeds; false on timeout.
wait_for() {
    local deadline
    deadline=$(awk -v n="$(now)" -v s="$1" 'BEGIN { print n + s }')
    shift
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        le "$deadline" "$(now)" && return 1
        sleep 0.05
    done
}

bus() { busctl --system --timeout=20 "$@"; }
# prop NAME: the property's value as JSON (strings unquoted with prop_s).
prop() { bus --json=short get-property "$BUS" "$OBJ" "$IFACE" "$1" | jq -c .data; }
prop_s() { bus --json=short get-property "$BUS" "$OBJ" "$IFACE" "$1" | jq -r .data; }
prop_is() { [ "$(prop "$1")" = "$2" ]; }
# lines_more FILE N: FILE has more than N lines.
lines_more() { [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -gt "$2" ]; }

# expand LIST: one CPU per line from the kernel's list format ("0-3,6").
expand() {
    local part
    local IFS=,
    for part in $1; do
        case $part in
        *-*) seq "${part%-*}" "${part#*-}" ;;
        *) echo "$part" ;;
        esac
    done
}

task_mask() { awk '/^Cpus_allowed_list:/ { print $2 }' "/proc/$1/task/$2/status" 2>/dev/null; }
# masks PID: "tid=list" for every thread of PID.
masks() {
    local t out=""
    for t in /proc/"$1"/task/*; do
        out+="${t##*/}=$(task_mask "$1" "${t##*/}") "
    done
    echo "${out% }"
}
# uniform_mask PID: the mask shared by every thread of PID; fails when they differ.
uniform_mask() {
    local all
    all=$(for t in /proc/"$1"/task/*; do task_mask "$1" "${t##*/}"; done | sort -u)
    [ -n "$all" ] && [ "$(echo "$all" | wc -l)" -eq 1 ] && echo "$all"
}
mask_is() { [ "$(uniform_mask "$1")" = "$2" ]; }

siblings() { cat "/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list"; }
package_of() { cat "/sys/devices/system/cpu/cpu$1/topology/physical_package_id"; }

# compact_ok LIST: two online CPUs, not SMT siblings, in one package. Explains a failure.
compact_ok() {
    local cpus a b
    mapfile -t cpus < <(expand "$1")
    if [ "${#cpus[@]}" -ne 2 ]; then
        echo "'$1' is not 2 CPUs"
        return 1
    fi
    a=${cpus[0]} b=${cpus[1]}
    if [ "$(cat "/sys/devices/system/cpu/cpu$b/online" 2>/dev/null || echo 1)" != 1 ] ||
        [ "$(cat "/sys/devices/system/cpu/cpu$a/online" 2>/dev/null || echo 1)" != 1 ]; then
        echo "'$1' names an offline CPU"
        return 1
    fi
    if expand "$(siblings "$a")" | grep -qx "$b"; then
        echo "CPUs $a and $b are SMT siblings ($(siblings "$a"))"
        return 1
    fi
    if [ "$(package_of "$a")" != "$(package_of "$b")" ]; then
        echo "CPUs $a and $b are in packages $(package_of "$a") and $(package_of "$b")"
        return 1
    fi
}
compact_pinned() {
    local m
    m=$(uniform_mask "$1") && compact_ok "$m" >/dev/null
}

# start_workload NAME [THREADS [LATE_PREFIX [WAKE_MS]]]: runs tests/vm/guest/workload.py
# as its own service under the comm NAME; prints its pid.
start_workload() {
    local name=$1 dir=$WORK/$1
    rm -rf "$dir"
    mkdir -p "$dir"
    ln -sf /usr/bin/python3 "/usr/local/bin/$name"
    systemd-run --quiet --unit="$name" --service-type=simple --setenv=VMWORK_WAKE_MS="${4:-0}" \
        "/usr/local/bin/$name" "$LIB/workload.py" "$dir" "${2:-2}" ${3:+"$3"} || return 1
    wait_for 60 test -s "$dir/pid" || {
        echo "workload $name did not start"
        return 1
    }
    # Every initial thread exists once the pid file is written.
    cat "$dir/pid"
}
workload_pid() {
    local pid
    pid=$(cat "$WORK/$1/pid" 2>/dev/null) && [ -d "/proc/$pid" ] && echo "$pid" || {
        echo "workload $1 is not running (an earlier check failed to start it)"
        return 1
    }
}
# ---- fork-free timing helpers. Under emulation starting a process costs tens of ms,
# which a poll loop would add to the daemon's measured reaction time; these use bash
# builtins only, and set globals instead of printing.

# open_tick: a FIFO nobody writes to, so that `read -t` on it is a builtin sleep.
open_tick() {
    [ -p "$WORK/tick" ] || mkfifo "$WORK/tick"
    exec {TICK}<>"$WORK/tick"
}
tick() { read -r -t 0.02 -u "$TICK" _ || true; }
# uptime_cs: UP_CS = uptime in centiseconds (/proc/uptime has two decimals).
uptime_cs() {
    local up _
    read -r up _ </proc/uptime
    UP_CS=$((10#${up%.*} * 100 + 10#${up#*.}))
}
# read_mask PID TID: MASK = the thread's Cpus_allowed_list.
read_mask() {
    local k v
    MASK=
    while read -r k v; do
        if [ "$k" = Cpus_allowed_list: ]; then
            MASK=$v
            return 0
        fi
    done <"/proc/$1/task/$2/status"
}
# all_masks_are PID LIST: every thread of PID has the mask LIST.
all_masks_are() {
    local t
    for t in /proc/"$1"/task/*; do
        read_mask "$1" "${t##*/}" 2>/dev/null || return 1
        [ "$MASK" = "$2" ] || return 1
    done
}
thread_mask_is() { read_mask "$1" "$2" 2>/dev/null && [ "$MASK" = "$3" ]; }
# fast_wait SECONDS FN ARGS...: runs the shell function FN every 20 ms until it succeeds;
# DONE_CS = the uptime (cs) it was first seen to.
fast_wait() {
    local deadline
    uptime_cs
    deadline=$((UP_CS + $1 * 100))
    shift
    while :; do
        if "$@"; then
            uptime_cs
            DONE_CS=$UP_CS
            return 0
        fi
        uptime_cs
        [ "$UP_CS" -ge "$deadline" ] && return 1
        tick
    done
}
# cs_fmt CS: centiseconds as seconds with two decimals.
cs_fmt() { printf '%d.%02d' $(($1 / 100)) $(($1 % 100)); }
# thread_started_cs PID TID: STARTED_CS = the thread's start time (uptime, cs).
thread_started_cs() {
    local line f
    read -r line <"/proc/$1/task/$2/stat"
    read -ra f <<<"${line##*) }"
    STARTED_CS=$((f[19] * 100 / HZ))
}
# new_thread NAME: asks workload NAME for one more thread; NEW_TID = its tid (set once
# the thread has named itself).
new_thread() {
    local dir=$WORK/$1 pid before
    read -r pid <"$dir/pid" && [ -d "/proc/$pid" ] || {
        echo "workload $1 is not running (an earlier check failed to start it)"
        return 1
    }
    mapfile -t TID_LINES <"$dir/tids"
    before=${#TID_LINES[@]}
    kill -USR1 "$pid"
    fast_wait 20 tids_grew "$dir/tids" "$before" || {
        echo "workload $1 did not start a thread"
        return 1
    }
    NEW_TID=${TID_LINES[-1]}
}
tids_grew() {
    mapfile -t TID_LINES <"$1"
    [ "${#TID_LINES[@]}" -gt "$2" ]
}
# new_thread_pinned NAME LIST: starts a thread in NAME and waits until its mask is LIST;
# TOOK_CS = how long after the thread started that was seen. Prints what it saw.
new_thread_pinned() {
    local name=$1 want=$2 pid
    read -r pid <"$WORK/$name/pid" || return 1
    new_thread "$name" || return 1
    thread_started_cs "$pid" "$NEW_TID"
    if ! fast_wait 10 thread_mask_is "$pid" "$NEW_TID" "$want"; then
        read_mask "$pid" "$NEW_TID"
        echo "new thread $NEW_TID of $name has mask $MASK 10 s after it started, want $want"
        return 1
    fi
    TOOK_CS=$((DONE_CS - STARTED_CS))
    echo "thread $NEW_TID pinned to $want $(cs_fmt "$TOOK_CS") s after it started"
}
# managed_by PID RULE: ListManaged names PID under RULE.
managed_by() {
    bus --json=short call "$BUS" "$OBJ" "$IFACE" ListManaged |
        jq -e --argjson pid "$1" --arg rule "$2" '[.data[0][] | select(.[0] == $pid and .[2] == $rule)] | length > 0'
}

# put_rule FILE: installs stdin as a rule file (root-owned, 0644) in one rename.
put_rule() {
    local tmp=$RULES/.$1.tmp
    cat >"$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$RULES/$1"
}

daemon_pid() { systemctl show -p MainPID --value pinnerd.service; }
# cpu_online CPU 0|1: takes a CPU offline or brings it back.
cpu_online() { echo "$2" >"/sys/devices/system/cpu/cpu$1/online"; }

export -f now elapsed le wait_for bus prop prop_s prop_is lines_more expand task_mask masks uniform_mask \
    mask_is siblings package_of compact_ok compact_pinned start_workload workload_pid \
    open_tick tick uptime_cs read_mask all_masks_are thread_mask_is fast_wait cs_fmt \
    thread_started_cs new_thread tids_grew new_thread_pinned managed_by put_rule \
    daemon_pid cpu_online

# ---------------------------------------------------------------- checks

check_package() {
    local st f missing=() n
    st=$(dpkg-query -W -f='${Status} ${Version}' pinnerd 2>&1) || {
        echo "pinnerd is not installed: $st"
        return 1
    }
    case $st in "install ok installed "*) ;; *)
        echo "dpkg status: $st"
        return 1
        ;;
    esac
    for f in /usr/bin/pinnerd /usr/lib/systemd/system/pinnerd.service \
        /usr/lib/systemd/system/pinnerd-partition@.service /usr/share/doc/pinnerd/docs/sharing.md \
        /usr/share/dbus-1/system.d/org.pinnerd.Pinnerd1.conf /usr/share/doc/pinnerd/README.md \
        /usr/share/doc/pinnerd/examples/pinnerd.toml /usr/share/polkit-1/actions/org.pinnerd.policy; do
        [ -f "$f" ] || missing+=("$f")
    done
    [ ${#missing[@]} -eq 0 ] || {
        echo "missing: ${missing[*]}"
        return 1
    }
    n=$(find /usr/share/doc/pinnerd/examples/pinnerd.d -name '*.toml' | wc -l)
    [ "$n" -gt 0 ] || {
        echo "no example rules under /usr/share/doc/pinnerd/examples/pinnerd.d"
        return 1
    }
    [ -d "$RULES" ] && [ -z "$(ls -A "$RULES")" ] || {
        echo "$RULES is not an empty directory: $(ls -la "$RULES" 2>&1 | tr '\n' ' ')"
        return 1
    }
    [ "$(systemctl is-enabled pinnerd.service 2>&1)" = enabled ] || {
        echo "pinnerd.service is $(systemctl is-enabled pinnerd.service 2>&1), not enabled"
        return 1
    }
    echo "pinnerd ${st##* } installed, unit enabled, $RULES empty, $n example rules"
}

check_active() {
    if ! wait_for 120 systemctl is-active --quiet pinnerd.service; then
        echo "pinnerd.service is $(systemctl is-active pinnerd.service) after 120 s:" \
            "$(systemctl show -p Result,ExecMainStatus,NRestarts pinnerd.service | tr '\n' ' ')"
        return 1
    fi
    echo "active (pid $(daemon_pid))"
}

check_hardening() {
    local pid st capeff capbnd nnp seccomp allowed=$(((1 << 12) | (1 << 19) | (1 << 23)))
    pid=$(daemon_pid)
    [ "${pid:-0}" -gt 0 ] || {
        echo "pinnerd has no main pid"
        return 1
    }
    st=$(cat "/proc/$pid/status") || return 1
    capeff=$(awk '/^CapEff:/ { print $2 }' <<<"$st")
    capbnd=$(awk '/^CapBnd:/ { print $2 }' <<<"$st")
    nnp=$(awk '/^NoNewPrivs:/ { print $2 }' <<<"$st")
    seccomp=$(awk '/^Seccomp:/ { print $2 }' <<<"$st")
    # Only CAP_SYS_NICE, CAP_SYS_PTRACE and (for old kernels' proc connector) CAP_NET_ADMIN.
    if ((0x$capeff & ~allowed)) || ((0x$capbnd & ~allowed)); then
        echo "CapEff=$capeff CapBnd=$capbnd hold more than CAP_SYS_NICE, CAP_SYS_PTRACE, CAP_NET_ADMIN"
        return 1
    fi
    ((0x$capeff & (1 << 23))) || {
        echo "CapEff=$capeff lacks CAP_SYS_NICE"
        return 1
    }
    [ "$nnp" = 1 ] || {
        echo "NoNewPrivs=$nnp"
        return 1
    }
    if [ -n "$(systemctl show -p SystemCallFilter --value pinnerd.service)" ] && [ "$seccomp" != 2 ]; then
        echo "the unit has a SystemCallFilter but Seccomp=$seccomp"
        return 1
    fi
    # ProtectSystem=strict and ProtectKernelTunables=yes spelled out: /, /proc/sys and
    # /sys read-only for the daemon, /proc/irq not. Each is asserted twice: the mount that
    # is visible at the path (the last one mounted there in the daemon's mountinfo, since
    # a path can carry stacked mounts) has `ro`, and opening a file there for writing in
    # the daemon's mount namespace fails with EROFS (nothing is written: the open fails,
    # or for /proc/irq succeeds and is closed at once).
    local m top probe
    for m in / /proc/sys /sys; do
        top=$(awk -v m="$m" '$5 == m { o = $6 } END { print o }' "/proc/$pid/mountinfo")
        [[ "$top" =~ ^ro(,|$) ]] || {
            echo "$m is writable in the daemon's mount namespace (its top mount: '${top:-none}');" \
                "mounts there: $(awk -v m="$m" '$5 == m { printf "[%s %s %s] ", $4, $6, $9 }' "/proc/$pid/mountinfo")"
            return 1
        }
    done
    probe=$(nsenter -t "$pid" -m python3 -c '
import errno, os, sys
want = {"/etc/hostname": "EROFS", "/proc/sys/kernel/hostname": "EROFS",
        "/sys/devices/system/cpu/cpu1/online": "EROFS", "/proc/irq/default_smp_affinity": "ok",
        # isolate: cgroups below the slices are writable, the root cgroup files are not.
        "/sys/fs/cgroup/cgroup.subtree_control": "EROFS",
        "/sys/fs/cgroup/system.slice/cgroup.subtree_control": "ok"}
bad = []
for path, expect in want.items():
    try:
        os.close(os.open(path, os.O_WRONLY))
        got = "ok"
    except OSError as e:
        got = errno.errorcode.get(e.errno, str(e.errno))
    if got != expect:
        bad.append(f"{path}: open for writing gave {got}, want {expect}")
print("; ".join(bad))
sys.exit(1 if bad else 0)
' 2>&1) || {
        echo "in the daemon's mount namespace: $probe"
        return 1
    }
    # The unit's exposure as the running systemd rates it (docs/service.md).
    local exposure
    exposure=$(systemd-analyze security --no-pager pinnerd.service 2>/dev/null |
        awk '/Overall exposure level/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+$/) { print $i; exit } }')
    [ -n "$exposure" ] || {
        echo "systemd-analyze security pinnerd.service gave no exposure level"
        return 1
    }
    le "$exposure" 2.2 || {
        echo "systemd-analyze security rates pinnerd.service $exposure, over 2.2"
        return 1
    }
    # The partition helper: CAP_SYS_ADMIN and nothing else; only root may start it
    # (systemd's manage-units, which polkit refuses a user without a session's consent).
    local helper='pinnerd-partition@isolated:system.slice-none.service' hexp hcap out
    hcap=$(systemctl show -p CapabilityBoundingSet --value "$helper")
    [ "$hcap" = cap_sys_admin ] || {
        echo "$helper has CapabilityBoundingSet '$hcap', want cap_sys_admin alone"
        return 1
    }
    if out=$(runuser -u nobody -- systemctl start --no-ask-password "$helper" 2>&1); then
        echo "user nobody started $helper"
        return 1
    fi
    hexp=$(systemd-analyze security --no-pager "$helper" 2>/dev/null |
        awk '/Overall exposure level/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+$/) { print $i; exit } }')
    echo "CapEff=$capeff CapBnd=$capbnd NoNewPrivs=$nnp Seccomp=$seccomp; /, /proc/sys, /sys and the root cgroup read-only (top mount ro, EROFS), /proc/irq and system.slice's cgroups writable; exposure $exposure (systemd $(systemctl --version | awk 'NR == 1 { print $2 }')); partition helper: cap_sys_admin only, exposure ${hexp:-?}, refused to nobody ($(head -c 120 <<<"$out"))"
}

# The unit's realtime class reaches the loop (the main thread) and nothing else:
# CPUSchedulingResetOnFork puts every other thread back at SCHED_OTHER, nice 0.
check_scheduling() {
    local pid t tid st a comm main="" others=0 spinners=0
    pid=$(daemon_pid)
    [ "${pid:-0}" -gt 0 ] || {
        echo "pinnerd has no main pid"
        return 1
    }
    for t in /proc/"$pid"/task/*; do
        tid=${t##*/}
        # A thread that ended meanwhile (a measurement spinner) is skipped.
        st=$(cat "$t/stat" 2>/dev/null) || continue
        # Fields after "pid (comm) ": index N-3 is field N of proc(5)'s stat.
        read -ra a <<<"${st##*) }"
        comm=$(cat "$t/comm" 2>/dev/null) || continue
        if [ "$tid" = "$pid" ]; then
            main="policy=${a[38]} rt_priority=${a[37]}"
        elif [[ "$comm" == pinnerd-spin-* ]]; then
            # A measurement under way: its spinners run at measure.spin-priority,
            # "nice-19" by default (SCHED_OTHER, nice 19).
            if [ "${a[38]}" != 0 ] || [ "${a[16]}" != 19 ]; then
                echo "spinner $tid ($comm): policy=${a[38]} nice=${a[16]}, want SCHED_OTHER nice 19"
                return 1
            fi
            spinners=$((spinners + 1))
        elif [ "${a[38]}" != 0 ] || [ "${a[16]}" != 0 ]; then
            echo "thread $tid ($comm): policy=${a[38]} nice=${a[16]}, want SCHED_OTHER nice 0"
            return 1
        else
            others=$((others + 1))
        fi
    done
    [ "$main" = "policy=1 rt_priority=1" ] || {
        echo "main thread $main, want policy=1 rt_priority=1 (SCHED_FIFO 1)"
        return 1
    }
    [ "$others" -ge 2 ] || {
        echo "only $others other threads"
        return 1
    }
    journalctl -b -u pinnerd.service --no-pager -o verbose | grep -q 'SCHED_FIFO priority 1, reset on fork' || {
        echo "the journal does not report the loop's class"
        return 1
    }
    echo "loop (main thread) SCHED_FIFO 1; $others other threads SCHED_OTHER nice 0; $spinners measuring spinners SCHED_OTHER nice 19"
}

check_topology() {
    local json pk nd smt n
    json=$(pinnerd topology --json 2>&1) || {
        echo "pinnerd topology --json failed: $json"
        return 1
    }
    n=$(jq '.cpus | length' <<<"$json") || {
        echo "not JSON: ${json:0:200}"
        return 1
    }
    pk=$(jq -c '.cpus | group_by(.package) | map(map(.cpu) | sort)' <<<"$json")
    nd=$(jq -c '.cpus | group_by(.node) | map(map(.cpu) | sort)' <<<"$json")
    smt=$(jq -c '[.cpus[].siblings | sort] | unique' <<<"$json")
    [ "$n" = 8 ] && [ "$pk" = "$EXPECT_PACKAGES" ] && [ "$nd" = "$EXPECT_NODES" ] &&
        [ "$smt" = "$EXPECT_SMT" ] || {
        echo "got $n CPUs, packages $pk, nodes $nd, SMT $smt;" \
            "want 8, $EXPECT_PACKAGES, $EXPECT_NODES, $EXPECT_SMT"
        return 1
    }
    echo "8 CPUs, packages $pk, nodes $nd, SMT $smt"
}

check_dbus_introspect() {
    local out name missing=()
    out=$(bus introspect "$BUS" "$OBJ" "$IFACE" 2>&1) || {
        echo "busctl introspect failed: $out"
        return 1
    }
    for name in Remeasure Reload GetMatrix GetMatrixRows ListManaged Explain Plan PinProcess ReleaseProcess Metrics \
        PinProcessWith PlanWith \
        Version State MeasuredAt Fingerprint CpuCount RuleCount ManagedProcesses \
        ManagedThreads RuleErrors Holds LatencyOff StateReason MeasurementFinished RulesReloaded; do
        grep -q "^\.$name " <<<"$out" || missing+=("$name")
    done
    [ ${#missing[@]} -eq 0 ] || {
        echo "not in the introspection data: ${missing[*]}"
        return 1
    }
    echo "all methods, properties and signals present"
}

check_dbus_properties() {
    local version want cpus fp plan
    version=$(prop_s Version 2>&1) || {
        echo "get-property Version failed: $version"
        return 1
    }
    want=$(dpkg-query -W -f='${Version}' pinnerd)
    want=${want%-*}
    [ "$version" = "$want" ] || {
        echo "Version is '$version', the package is $want"
        return 1
    }
    cpus=$(prop CpuCount 2>&1)
    [ "$cpus" = 8 ] || {
        echo "CpuCount is $cpus, want 8"
        return 1
    }
    fp=$(prop_s Fingerprint 2>&1)
    [ -n "$fp" ] || {
        echo "Fingerprint is empty"
        return 1
    }
    plan=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Plan uss 2 compact avoid 2>&1) || {
        echo "call Plan failed: $plan"
        return 1
    }
    plan=$(jq -r '.data[0] | map(tostring) | join(",")' <<<"$plan")
    compact_ok "$plan" >/dev/null || {
        echo "Plan(2, compact, avoid) gave $plan: $(compact_ok "$plan")"
        return 1
    }
    echo "Version $version, CpuCount 8, Plan(2, compact, avoid) = $plan"
}

check_state_ready() {
    local t0 state last_ok
    t0=$(now)
    last_ok=$t0
    while :; do
        if state=$(prop_s State 2>&1); then
            last_ok=$(now)
            [ "$state" = ready ] && break
        elif le 60 "$(elapsed "$last_ok")"; then
            echo "no answer on the bus for 60 s: $state"
            return 1
        fi
        le 300 "$(elapsed "$t0")" && {
            echo "State is '$state' after 300 s"
            return 1
        }
        sleep 0.2
    done
    echo "State ready (waited $(elapsed "$t0") s, MeasuredAt $(prop MeasuredAt))"
}

check_remeasure() {
    local before after job mon t0 data
    before=$(prop MeasuredAt 2>&1) || {
        echo "get-property MeasuredAt failed: $before"
        return 1
    }
    mon=$WORK/monitor.json
    busctl --system monitor --json=short \
        --match="type='signal',interface='$IFACE',member='MeasurementFinished'" >"$mon" 2>"$mon.err" &
    local monpid=$!
    sleep 2
    t0=$(now)
    job=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Remeasure 2>&1) || {
        kill "$monpid"
        echo "call Remeasure failed: $job"
        return 1
    }
    job=$(jq '.data[0]' <<<"$job")
    # shellcheck disable=SC2016
    if ! wait_for 300 sh -c 'jq -c "select(.member == \"MeasurementFinished\") | .payload.data" "$1" 2>/dev/null |
        jq -c --argjson job "$2" "select(.[0] == \$job)" | grep -q .' _ "$mon" "$job"; then
        kill "$monpid"
        echo "no MeasurementFinished for job $job within 300 s; the monitor saw: $(head -c 600 "$mon") $(head -c 300 "$mon.err")"
        return 1
    fi
    kill "$monpid"
    data=$(jq -c "select(.member == \"MeasurementFinished\") | .payload.data" "$mon" |
        jq -c --argjson job "$job" 'select(.[0] == $job)' | head -n 1)
    after=$(prop MeasuredAt)
    [ -n "$data" ] && [ "$(jq '.[1]' <<<"$data")" = true ] || {
        echo "MeasurementFinished $data reports failure"
        return 1
    }
    [ "$after" -gt "$before" ] || {
        echo "MeasuredAt did not change ($before -> $after) after MeasurementFinished $data"
        return 1
    }
    echo "job $job finished in $(elapsed "$t0") s, MeasuredAt $before -> $after, signal $data"
}

# The daemon is ready from a sparse map (sparse-from-cpus = 4 in the VM's settings) and
# completes it in the background: within 120 s (docs: under half a minute at 128 CPUs
# on real hardware; one slice here) the stored matrix has every pair measured and no
# inferred cell, and the metrics say so.
check_sparse_then_complete() {
    local m=/var/lib/pinnerd/matrix.json t0 counts metrics
    t0=$(now)
    prop_is State '"ready"' || {
        echo "State is $(prop State), not ready"
        return 1
    }
    [ "$(jq -r .mode "$m" 2>&1)" = sparse ] || {
        echo "the stored matrix is not a sparse one: mode $(jq -r .mode "$m" 2>&1)"
        return 1
    }
    # shellcheck disable=SC2016
    if ! wait_for 120 sh -c 'jq -e "(.pairs_measured == .pairs_total) and ([.stats[]? | select(.inferred == true)] | length == 0)" "$1" >/dev/null 2>&1' _ "$m"; then
        echo "after 120 s the stored matrix still has inferred cells: $(jq -c '{pairs_measured, pairs_total, inferred: [.stats[]? | select(.inferred == true)] | length}' "$m" 2>&1)"
        return 1
    fi
    counts=$(jq -c '{pairs_measured, pairs_total}' "$m")
    metrics=$(pinnerd metrics 2>&1 | grep -E '^pinnerd_matrix_(measured_ratio|completing) ' | tr '\n' ' ')
    grep -q 'pinnerd_matrix_measured_ratio 1 ' <<<"$metrics " && grep -q 'pinnerd_matrix_completing 0' <<<"$metrics" || {
        echo "stored matrix complete ($counts) but the metrics say: $metrics"
        return 1
    }
    echo "stored matrix complete after $(elapsed "$t0") s: $counts, no inferred cell; $metrics"
}

# readme_blocks README DIR: the blocks of the README's "A first rule" section, as a reader
# takes them: its toml block as DIR/10-feed.toml, its sh block (the md-feed stand-in) as
# DIR/standin.sh, and each `$ ` command of its ```console,ignore samples as
# DIR/sample-N.cmd with the lines under it as DIR/sample-N.expected.
readme_blocks() {
    awk -v dir="$2" '
        /^## / { section = ($0 ~ /^## A first rule/) }
        !section { next }
        !block && /^```/ {
            block = substr($0, 4)
            file = block == "toml" && !toml++ ? dir "/10-feed.toml" : block == "sh" && !sh++ ? dir "/standin.sh" : ""
            if (file != "") printf "" >file
            next
        }
        block && /^```/ { block = ""; next }
        block == "console,ignore" && /^\$ / {
            n++
            print substr($0, 3) >(dir "/sample-" n ".cmd")
            file = dir "/sample-" n ".expected"
            printf "" >file
            next
        }
        block && file != "" { print >>file }
    ' "$1"
}
# ids PID DOC...: stdin with the real ids (PID TID TID) written as the README's (DOC DOC
# DOC); a right-aligned column keeps its width.
ids() {
    python3 -c '
import re, sys
args = sys.argv[1:]
half = len(args) // 2
doc = dict(zip(args[:half], args[half:]))
def put(m):
    pad, new = m.group(1), doc[m.group(2)]
    return new.rjust(len(m.group(0))) if len(pad) > 1 else pad + new
sys.stdout.write(re.sub(r"( *)\b(%s)\b" % "|".join(map(re.escape, doc)), put, sys.stdin.read()))
' "$@"
}
# sample_matches N PID A B DOCPID DOCA DOCB: runs sample N's command exactly as written
# (as root, on a Debian without sudo, as the README says to type it) and matches its
# output, ids as in the README, with the sample (doc_sample: snapbox's [..] and ... as in
# the documents' trycmd samples).
sample_matches() {
    local d=$WORK/readme cmd
    cmd=$(cat "$d/sample-$1.cmd")
    bash -c "$cmd" </dev/null 2>&1 | ids "$2" "$3" "$4" "$5" "$6" "$7" >"$d/sample-$1.actual"
    "$LIB/doc_sample" "$d/sample-$1.expected" "$d/sample-$1.actual" 2>"$d/sample-$1.diff"
}
export -f readme_blocks ids sample_matches

# The README's first-rule walk-through, typed as written on the installed package: its
# rule saved as /etc/pinnerd.d/10-feed.toml and its md-feed stand-in started, both read
# from the README the package installs; then each command of its samples (check, plan
# --live, explain), whose output must match the README's sample, with md-feed's PID and
# its rx-a and rx-b TIDs written as the README's. The daemon has stored a matrix first,
# as on a machine that has run a while. Outputs kept in /run/pinnerd-vm/readme.
check_readme_walkthrough() {
    local readme=/usr/share/doc/pinnerd/README.md dir=$WORK/readme pid="" rxa="" rxb="" t n i
    local docpid doca docb
    rm -rf "$dir"
    mkdir -p "$dir"
    [ -z "$(ls -A "$RULES")" ] || {
        echo "$RULES is not empty: $(ls -A "$RULES" | tr '\n' ' ')"
        return 1
    }
    wait_for 300 test -s /var/lib/pinnerd/matrix.json || {
        echo "no stored matrix after 300 s"
        return 1
    }
    readme_blocks "$readme" "$dir"
    n=$(find "$dir" -name 'sample-*.cmd' | wc -l)
    [ -s "$dir/10-feed.toml" ] && [ -s "$dir/standin.sh" ] && [ "$n" -eq 3 ] || {
        echo "in $readme's \"A first rule\": want a toml block, an sh block and 3 commands in console,ignore samples; found $(ls "$dir" | tr '\n' ' ')"
        return 1
    }
    docpid=$(sed -n 's/^pid \([0-9]*\) (md-feed).*/\1/p' "$dir"/sample-*.expected | head -1)
    doca=$(sed -n 's/^  tid \([0-9]*\) (rx-a).*/\1/p' "$dir"/sample-*.expected | head -1)
    docb=$(sed -n 's/^  tid \([0-9]*\) (rx-b).*/\1/p' "$dir"/sample-*.expected | head -1)
    [ -n "$docpid" ] && [ -n "$doca" ] && [ -n "$docb" ] || {
        echo "the README's samples name no PID for md-feed, rx-a and rx-b"
        return 1
    }
    put_rule 10-feed.toml <"$dir/10-feed.toml"
    bash "$dir/standin.sh" </dev/null >"$dir/standin.log" 2>&1
    for _ in $(seq 100); do
        pid=$(pgrep -x md-feed | head -1)
        rxa="" rxb=""
        for t in /proc/"$pid"/task/*; do
            case $(cat "$t/comm" 2>/dev/null) in rx-a) rxa=${t##*/} ;; rx-b) rxb=${t##*/} ;; esac
        done
        [ -n "$pid" ] && [ -n "$rxa" ] && [ -n "$rxb" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] && [ -n "$rxa" ] && [ -n "$rxb" ] || {
        echo "the stand-in gave no md-feed with threads rx-a and rx-b: $(cat "$dir/standin.log")"
        return 1
    }
    wait_for 30 managed_by "$pid" feed || {
        echo "md-feed ($pid) is not managed by feed"
        return 1
    }
    for i in $(seq "$n"); do
        wait_for 20 sample_matches "$i" "$pid" "$rxa" "$rxb" "$docpid" "$doca" "$docb" || {
            echo "\$ $(cat "$dir/sample-$i.cmd") differs from the README: $(head -c 1200 "$dir/sample-$i.diff")"
            kill "$pid"
            rm -f "$RULES/10-feed.toml"
            return 1
        }
    done
    kill "$pid"
    rm -f "$RULES/10-feed.toml"
    echo "md-feed $pid (rx-a $rxa, rx-b $rxb) as $docpid ($doca, $docb): $(tr '\n' ';' <"$dir/sample-1.cmd") $(tr '\n' ';' <"$dir/sample-2.cmd") $(tr '\n' ';' <"$dir/sample-3.cmd") print the README's samples"
}

check_rule_explicit() {
    local pid orig tmp t0 took
    pid=$(start_workload vmwork-exp 2 vm-late) || {
        echo "$pid"
        return 1
    }
    orig=$(uniform_mask "$pid")
    [ "$orig" = "$ALL_CPUS" ] || {
        echo "workload started with masks $(masks "$pid"), want $ALL_CPUS"
        return 1
    }
    echo "$orig" >"$WORK/vmwork-exp/orig"
    # Written beside the directory and moved in; the clock starts just before the rename
    # (so the mv itself counts against the daemon).
    tmp=$WORK/50-vm-explicit.toml
    cat >"$tmp" <<'EOF'
[[rule]]
name = "vm-explicit"
[rule.match]
comm = "vmwork-exp"
[rule.place]
cpus = "2,5"
# Threads started later name themselves vm-late<n>: they inherit 2,5 from their creator
# and must be moved to 5 by the daemon.
[[rule.threads]]
comm = "vm-late*"
cpus = "5"
EOF
    chmod 0644 "$tmp"
    open_tick
    uptime_cs
    t0=$UP_CS
    mv -f "$tmp" "$RULES/50-vm-explicit.toml"
    if ! fast_wait 10 all_masks_are "$pid" 2,5; then
        echo "masks 10 s after the rule was dropped: $(masks "$pid"), want 2,5 on every thread"
        return 1
    fi
    took=$((DONE_CS - t0))
    [ "$took" -le "$PIN_LIMIT_CS" ] || {
        echo "every thread reached 2,5 only $(cs_fmt "$took") s after the rule was dropped (limit $(cs_fmt "$PIN_LIMIT_CS") s)"
        return 1
    }
    echo "all $(ls "/proc/$pid/task" | wc -l) threads on 2,5 $(cs_fmt "$took") s after the rule was dropped"
}

check_rule_explicit_new_thread() {
    open_tick
    new_thread_pinned vmwork-exp 5 || return 1
    [ "$TOOK_CS" -le "$PIN_LIMIT_CS" ] || {
        echo "(limit $(cs_fmt "$PIN_LIMIT_CS") s)"
        return 1
    }
}

check_rule_compact() {
    local pid m
    pid=$(start_workload vmwork-cmp 3) || {
        echo "$pid"
        return 1
    }
    uniform_mask "$pid" >"$WORK/vmwork-cmp/orig"
    put_rule 51-vm-compact.toml <<'EOF'
[[rule]]
name = "vm-compact"
[rule.match]
comm = "vmwork-cmp"
[rule.place]
count = 2
policy = "compact"
smt = "avoid"
EOF
    if ! wait_for 10 compact_pinned "$pid"; then
        m=$(uniform_mask "$pid") && echo "threads on $m: $(compact_ok "$m")" ||
            echo "threads differ: $(masks "$pid")"
        return 1
    fi
    m=$(uniform_mask "$pid")
    echo "all threads on $m (package $(package_of "${m%%[,-]*}"), not siblings)"
}

# The feed-handler rule a user writes: rx-* threads, one CPU each, compact, smt = avoid,
# and nothing else. Four threads that name themselves rx-1..rx-4 after they start get
# four CPUs of four distinct cores (the VM has four cores); the process's other threads
# are left alone.
rx_on_distinct_cores() {
    local pid=$1 tid m cores="" n=0
    for tid in $(cat "$WORK/vmwork-rx/tids"); do
        m=$(task_mask "$pid" "$tid")
        case $m in *[,-]* | "") return 1 ;; esac
        cores+="$(siblings "$m")"$'\n'
        n=$((n + 1))
    done
    [ "$n" -eq 4 ] && [ "$(printf '%s' "$cores" | sort -u | wc -l)" -eq 4 ]
}
export -f rx_on_distinct_cores
check_threads_rule_smt_avoid() {
    local pid i tid out=""
    pid=$(start_workload vmwork-rx 1 rx-) || {
        echo "$pid"
        return 1
    }
    put_rule 52-vm-rx.toml <<'EOF'
[[rule]]
name = "vm-rx"
[rule.match]
comm = "vmwork-rx"
[[rule.threads]]
comm = "rx-*"
count = 1
policy = "compact"
smt = "avoid"
EOF
    wait_for 20 managed_by "$pid" vm-rx || {
        echo "vmwork-rx is not managed by vm-rx"
        return 1
    }
    open_tick
    for i in 1 2 3 4; do
        new_thread vmwork-rx || return 1
    done
    if ! wait_for 20 rx_on_distinct_cores "$pid"; then
        for tid in $(cat "$WORK/vmwork-rx/tids"); do
            out+="$tid($(cat "/proc/$pid/task/$tid/comm" 2>/dev/null))=$(task_mask "$pid" "$tid") "
        done
        echo "rx threads: $out; want one CPU each on 4 distinct cores"
        return 1
    fi
    [ "$(task_mask "$pid" "$pid")" = "$ALL_CPUS" ] || {
        echo "the main thread, which no entry takes, was moved: $(masks "$pid")"
        return 1
    }
    for tid in $(cat "$WORK/vmwork-rx/tids"); do
        out+="$(cat "/proc/$pid/task/$tid/comm")=$(task_mask "$pid" "$tid") "
    done
    rm -f "$RULES/52-vm-rx.toml"
    systemctl stop vmwork-rx.service 2>/dev/null
    echo "${out% }: 4 distinct cores; the main thread left alone on $ALL_CPUS"
}

# A unit confined by systemd to CPUs 4-7 (cgroup v2 cpuset.cpus.effective) is planned
# inside them: its count rule picks two non-sibling CPUs of 4-7, applied, not refused.
# Runs before the other workloads (see the runner).
check_cgroup_allowed_cpus() {
    local name=vmwork-cg dir=$WORK/vmwork-cg pid cg eff m cpus c why
    rm -rf "$dir"
    mkdir -p "$dir"
    ln -sf /usr/bin/python3 "/usr/local/bin/$name"
    systemd-run --quiet --unit="$name" --service-type=simple -p AllowedCPUs=4-7 \
        "/usr/local/bin/$name" "$LIB/workload.py" "$dir" 2 || {
        echo "systemd-run -p AllowedCPUs=4-7 failed"
        return 1
    }
    wait_for 60 test -s "$dir/pid" || {
        echo "workload $name did not start"
        return 1
    }
    pid=$(cat "$dir/pid")
    cg=$(awk -F: '$1 == 0 { print $3 }' "/proc/$pid/cgroup")
    eff=$(cat "/sys/fs/cgroup$cg/cpuset.cpus.effective" 2>&1)
    [ "$eff" = 4-7 ] || {
        echo "precondition: $name's cgroup $cg has cpuset.cpus.effective '$eff', want 4-7"
        return 1
    }
    put_rule 53-vm-cgroup.toml <<'EOF'
[[rule]]
name = "vm-cgroup"
[rule.match]
comm = "vmwork-cg"
[rule.place]
count = 2
smt = "avoid"
EOF
    in_4_7_apart() {
        local m a b cpus
        m=$(uniform_mask "$1") || return 1
        mapfile -t cpus < <(expand "$m")
        [ "${#cpus[@]}" -eq 2 ] || return 1
        a=${cpus[0]} b=${cpus[1]}
        [ "$a" -ge 4 ] && [ "$b" -le 7 ] && ! expand "$(siblings "$a")" | grep -qx "$b"
    }
    export -f in_4_7_apart
    if ! wait_for 20 in_4_7_apart "$pid"; then
        echo "threads of $name (AllowedCPUs=4-7) on $(masks "$pid"), want two non-sibling CPUs of 4-7"
        return 1
    fi
    m=$(uniform_mask "$pid")
    bus --json=short call "$BUS" "$OBJ" "$IFACE" ListManaged |
        jq -e --argjson pid "$pid" '[.data[0][] | select(.[0] == $pid and .[2] == "vm-cgroup" and .[4] == "applied")] | length == 1' >/dev/null || {
        echo "ListManaged does not show $pid applied by vm-cgroup: $(bus call "$BUS" "$OBJ" "$IFACE" ListManaged)"
        return 1
    }
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    grep -qF "cpuset 4-7 (from /sys/fs/cgroup$cg/cpuset.cpus.effective)" <<<"$why" || {
        echo "Explain does not name the cpuset: $why"
        return 1
    }
    rm -f "$RULES/53-vm-cgroup.toml"
    systemctl stop "$name.service" 2>/dev/null
    echo "all threads on $m inside AllowedCPUs=4-7 (not siblings: $(siblings "${m%%[,-]*}")), applied; Explain names $cg"
}

check_rule_removal_reload() {
    local pid orig out
    pid=$(workload_pid vmwork-exp) || {
        echo "$pid"
        return 1
    }
    orig=$(cat "$WORK/vmwork-exp/orig")
    [ "$(task_mask "$pid" "$pid")" = 2,5 ] || {
        echo "precondition: vmwork-exp is not on 2,5 but $(masks "$pid")"
        return 1
    }
    rm -f "$RULES/50-vm-explicit.toml"
    out=$(systemctl reload pinnerd.service 2>&1) || {
        echo "systemctl reload failed: $out"
        return 1
    }
    if ! wait_for 10 mask_is "$pid" "$orig"; then
        echo "masks 10 s after removal and reload: $(masks "$pid"), want $orig"
        return 1
    fi
    echo "every thread back on $orig"
}

check_bad_rule() {
    local count errs cmp before reply
    cmp=$(workload_pid vmwork-cmp) || {
        echo "$cmp"
        return 1
    }
    before=$(uniform_mask "$cmp")
    count=$(prop RuleCount 2>&1) || {
        echo "get-property RuleCount failed: $count"
        return 1
    }
    put_rule 60-vm-bad.toml <<'EOF'
[[rule]]
name = "vm-bad"
[rule.match]
comm = "vmwork-cmp"
[rule.place]
cpus = "7"
colour = "blue"
EOF
    reply=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Reload 2>&1) || {
        echo "call Reload failed: $reply"
        return 1
    }
    if ! jq -e '.data[1] | map(select(test("60-vm-bad\\.toml:[0-9]+:[0-9]+"))) | length > 0' \
        <<<"$reply" >/dev/null; then
        echo "Reload replied $reply: no FILE:LINE:COL error for 60-vm-bad.toml"
        return 1
    fi
    errs=$(prop RuleErrors)
    jq -e 'map(select(test("60-vm-bad\\.toml:[0-9]+:[0-9]+"))) | length > 0' <<<"$errs" >/dev/null || {
        echo "RuleErrors $errs does not name 60-vm-bad.toml:LINE:COL"
        return 1
    }
    [ "$(prop RuleCount)" = "$count" ] || {
        echo "RuleCount went from $count to $(prop RuleCount)"
        return 1
    }
    systemctl is-active --quiet pinnerd.service || {
        echo "pinnerd.service is $(systemctl is-active pinnerd.service) after the bad file"
        return 1
    }
    sleep 1
    [ "$(uniform_mask "$cmp")" = "$before" ] || {
        echo "vmwork-cmp moved from $before to $(masks "$cmp")"
        return 1
    }
    rm -f "$RULES/60-vm-bad.toml"
    bus call "$BUS" "$OBJ" "$IFACE" Reload >/dev/null 2>&1
    wait_for 10 prop_is RuleErrors '[]' || {
        echo "RuleErrors still $(prop RuleErrors) after the bad file was removed"
        return 1
    }
    # Only meaningful when the rule had placed the workload (checked last, so that the
    # rule-error handling above is reported on its own).
    compact_pinned "$cmp" || {
        echo "RuleErrors and RuleCount right, but vmwork-cmp was never on a compact pair: $(masks "$cmp")"
        return 1
    }
    echo "RuleCount stayed $count, vmwork-cmp stayed on $before, RuleErrors: $(jq -r '.[0]' <<<"$errs")"
}

check_nonroot_refused() {
    local out method
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
        busctl --system --timeout=20 get-property "$BUS" "$OBJ" "$IFACE" State 2>&1) || {
        echo "nobody cannot even read State: $out"
        return 1
    }
    for method in Remeasure Reload; do
        if out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
            busctl --system --timeout=20 call "$BUS" "$OBJ" "$IFACE" "$method" 2>&1); then
            echo "nobody was allowed to call $method: $out"
            return 1
        fi
        # The bus lets the call through; the daemon asks polkit, whose default for
        # org.pinnerd.manage (auth_admin_keep) refuses a caller without an agent.
        case $out in
        *"not authorized for org.pinnerd.manage (caller uid 65534)"*) ;;
        *)
            echo "$method as nobody failed, but not refused by the daemon through polkit: $out"
            return 1
            ;;
        esac
    done
    echo "nobody may read State; Remeasure and Reload: $out"
}

# The package's interface XML is what the running daemon introspects, and the man pages
# and completions are where man and the shells look.
check_interface_xml_installed() {
    local file=/usr/share/dbus-1/interfaces/org.pinnerd.Pinnerd1.xml live installed f
    [ -f "$file" ] || {
        echo "$file is missing"
        return 1
    }
    # The interface element, without indentation, from the live bus and from the file.
    live=$(bus introspect --xml-interface "$BUS" "$OBJ" 2>&1 |
        sed -n "/<interface name=\"$IFACE\">/,/<\/interface>/p" | sed 's/^[[:space:]]*//')
    installed=$(sed -n "/<interface name=\"$IFACE\">/,/<\/interface>/p" "$file" | sed 's/^[[:space:]]*//')
    [ -n "$live" ] || {
        echo "no $IFACE in the live introspection"
        return 1
    }
    [ "$live" = "$installed" ] || {
        echo "$file differs from the live introspection: $(diff <(echo "$installed") <(echo "$live") | head -n 8)"
        return 1
    }
    grep -q 'name="arg_' "$file" && {
        echo "unnamed arguments in $file"
        return 1
    }
    for f in /usr/share/man/man8/pinnerd.8.gz /usr/share/man/man5/pinnerd.d.5.gz \
        /usr/share/man/man5/pinnerd.toml.5.gz /usr/share/bash-completion/completions/pinnerd \
        /usr/share/zsh/vendor-completions/_pinnerd /usr/share/fish/vendor_completions.d/pinnerd.fish; do
        [ -s "$f" ] || {
            echo "$f is missing or empty"
            return 1
        }
    done
    echo "$file equals the live introspection ($(grep -c '<method ' "$file") methods); man pages and completions installed"
}

# ListManagedCpus and ExplainJson through the real system bus and its installed policy,
# as nobody, on a process pinned at run time.
check_structured_bus_calls() {
    local pid out cpus json
    sleep 300 &
    pid=$!
    out=$(bus call "$BUS" "$OBJ" "$IFACE" PinProcess uuss "$pid" 1 compact allow 2>&1) || {
        echo "PinProcess $pid: $out"
        kill "$pid"
        return 1
    }
    cpus=$(setpriv --reuid=65534 --regid=65534 --clear-groups busctl --system --timeout=20 \
        --json=short call "$BUS" "$OBJ" "$IFACE" ListManagedCpus 2>&1 |
        jq -c --argjson p "$pid" '.data[0][] | select(.[0] == $p) | .[3]' 2>&1)
    json=$(setpriv --reuid=65534 --regid=65534 --clear-groups busctl --system --timeout=20 \
        --json=short call "$BUS" "$OBJ" "$IFACE" ExplainJson u "$pid" 2>&1 | jq -r '.data[0]' 2>&1)
    bus call "$BUS" "$OBJ" "$IFACE" ReleaseProcess u "$pid" >/dev/null 2>&1
    kill "$pid"
    [ "$(jq -c 'length' <<<"$cpus" 2>&1)" = 1 ] || {
        echo "ListManagedCpus as nobody: pid $pid has CPUs '$cpus' (PinProcess said $out)"
        return 1
    }
    [ "$(jq -c '[.managed, .cpus, .pid]' <<<"$json" 2>&1)" = "[true,$cpus,$pid]" ] || {
        echo "ExplainJson as nobody: $json (ListManagedCpus: $cpus)"
        return 1
    }
    jq -r .text <<<"$json" | grep -q "a process of another user" || {
        echo "ExplainJson showed nobody more than rule and CPUs: $json"
        return 1
    }
    echo "as nobody: ListManagedCpus $cpus, ExplainJson $json"
}

# An unprivileged user granted org.pinnerd.pin-own-process by a polkit rules file (the
# VM has no graphical session to be "active" in) pins and releases a process of their
# own with `pinnerd pin`, runs a command registered with `pinnerd run`, and is refused
# root's process (org.pinnerd.manage, auth_admin_keep by default).
check_polkit_own_process() {
    local user=pinuser uid gid own roots out cpus rc=0
    id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user" || {
        echo "cannot create $user"
        return 1
    }
    uid=$(id -u "$user") gid=$(id -g "$user")
    mkdir -p /etc/polkit-1/rules.d
    printf '%s\n' 'polkit.addRule(function(action, subject) {' \
        "    if (action.id == \"org.pinnerd.pin-own-process\" && subject.user == \"$user\")" \
        '        return polkit.Result.YES;' '});' >/etc/polkit-1/rules.d/50-pinnerd-vm.rules
    systemctl restart polkit.service || {
        echo "polkit.service did not (re)start: $(systemctl status --no-pager polkit.service 2>&1 | tail -n 5)"
        return 1
    }
    as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups "$@"; }
    # Not through the function: `as_user … &` would fork a subshell, and $! would be
    # that bash, not the user's sleep.
    setpriv --reuid="$uid" --regid="$gid" --clear-groups sleep 300 &
    own=$!
    sleep 300 &
    roots=$!
    wait_for 10 grep -qx sleep "/proc/$own/comm" || {
        echo "the user's sleep did not start"
        rc=1
    }
    if [ $rc -eq 0 ]; then
        if out=$(as_user pinnerd pin "$own" --cpus 3 2>&1) && mask_is "$own" 3; then
            echo "own pid $own pinned to 3;"
        else
            echo "pinning their own process failed: $out (mask $(uniform_mask "$own"))"
            rc=1
        fi
    fi
    if [ $rc -eq 0 ]; then
        if out=$(as_user pinnerd release "$own" 2>&1) && mask_is "$own" "$ALL_CPUS"; then
            echo "released;"
        else
            echo "releasing their own process failed: $out (mask $(uniform_mask "$own"))"
            rc=1
        fi
    fi
    if [ $rc -eq 0 ]; then
        if out=$(as_user pinnerd pin "$roots" --count 1 2>&1); then
            echo "the user pinned root's pid $roots: $out"
            rc=1
        elif [[ $out != *"not authorized for org.pinnerd.manage (caller uid $uid)"* ]] ||
            ! mask_is "$roots" "$ALL_CPUS"; then
            echo "root's process: refused, but not by polkit's manage action: $out (mask $(uniform_mask "$roots"))"
            rc=1
        else
            echo "root's pid $roots refused;"
        fi
    fi
    if [ $rc -eq 0 ]; then
        # Registered: the daemon pinned it, so pinnerd has nothing to say on stderr.
        if out=$(as_user pinnerd run --count 2 --smt avoid -- grep Cpus_allowed_list /proc/self/status 2>&1) &&
            [[ $out == Cpus_allowed_list:* ]] && [ "$(wc -l <<<"$out")" -eq 1 ]; then
            cpus=$(awk '{ print $2 }' <<<"$out")
            echo "pinnerd run as $user: CPUs $cpus, registered"
        else
            echo "pinnerd run as $user: $out"
            rc=1
        fi
    fi
    kill "$own" "$roots" 2>/dev/null
    wait "$own" "$roots" 2>/dev/null
    rm -f /etc/polkit-1/rules.d/50-pinnerd-vm.rules
    return $rc
}

check_restart() {
    local pid old out
    pid=$(workload_pid vmwork-cmp) || {
        echo "$pid"
        return 1
    }
    old=$(daemon_pid)
    out=$(systemctl restart pinnerd.service 2>&1) || {
        echo "systemctl restart failed: $out"
        return 1
    }
    [ "$(daemon_pid)" != "$old" ] && systemctl is-active --quiet pinnerd.service || {
        echo "pinnerd.service is $(systemctl is-active pinnerd.service) after restart"
        return 1
    }
    wait_for 10 compact_pinned "$pid" || {
        echo "vmwork-cmp after restart: $(masks "$pid")"
        return 1
    }
    wait_for 10 managed_by "$pid" vm-compact || {
        echo "the restarted daemon does not list vmwork-cmp ($pid) under vm-compact: $(bus call "$BUS" "$OBJ" "$IFACE" ListManaged 2>&1)"
        return 1
    }
    echo "vmwork-cmp on $(uniform_mask "$pid") after restart, listed by ListManaged under vm-compact"
}

check_kill9() {
    local pid old new n0
    pid=$(workload_pid vmwork-cmp) || {
        echo "$pid"
        return 1
    }
    old=$(daemon_pid)
    n0=$(systemctl show -p NRestarts --value pinnerd.service)
    kill -9 "$old"
    if ! wait_for 60 sh -c 'p=$(systemctl show -p MainPID --value pinnerd.service);
        [ "$p" != 0 ] && [ "$p" != "$1" ] && systemctl is-active --quiet pinnerd.service' _ "$old"; then
        echo "not restarted 60 s after kill -9: $(systemctl show -p ActiveState,SubState,Result,NRestarts pinnerd.service | tr '\n' ' ')"
        return 1
    fi
    new=$(daemon_pid)
    wait_for 10 compact_pinned "$pid" || {
        echo "vmwork-cmp after kill -9 and restart: $(masks "$pid")"
        return 1
    }
    wait_for 10 managed_by "$pid" vm-compact || {
        echo "the restarted daemon does not list vmwork-cmp ($pid) under vm-compact: $(bus call "$BUS" "$OBJ" "$IFACE" ListManaged 2>&1)"
        return 1
    }
    echo "restarted by systemd (pid $old -> $new, NRestarts $n0 -> $(systemctl show -p NRestarts --value pinnerd.service)); vmwork-cmp on $(uniform_mask "$pid"), listed under vm-compact"
}

check_restore_after_crash() {
    local pid orig out
    pid=$(workload_pid vmwork-cmp) || {
        echo "$pid"
        return 1
    }
    orig=$(cat "$WORK/vmwork-cmp/orig")
    compact_pinned "$pid" || {
        echo "precondition: vmwork-cmp is not on a compact pair but $(masks "$pid")"
        return 1
    }
    rm -f "$RULES/51-vm-compact.toml"
    out=$(systemctl reload pinnerd.service 2>&1) || {
        echo "systemctl reload failed: $out"
        return 1
    }
    wait_for 10 mask_is "$pid" "$orig" || {
        echo "after the compact rule was removed: $(masks "$pid"), want $orig"
        return 1
    }
    echo "rule removed after the crash: every thread back on $orig"
}

# A rule's rx thread runs SCHED_FIFO at the rule's priority while placed, the other
# threads keep their class; the rx thread gets its own class back (nice 5, set before
# pinnerd saw it) when the rule goes, and again from the restore journal when the daemon
# is killed with kill -9 and the rule is gone by the time it starts again.
# sched_of PID TID: "POLICY RTPRIO NICE" of the thread, from its stat (fields 41, 40, 19).
sched_of() {
    local st
    st=$(cat "/proc/$1/task/$2/stat" 2>/dev/null) || return 1
    st=${st##*) }
    awk '{ print $39, $38, $17 }' <<<"$st"
}
sched_is() { [ "$(sched_of "$1" "$2")" = "$3" ]; }
# others_changed PID TID: every thread of PID but TID whose class is not the normal one
# at nice 0, as "tid=policy/rtprio/nice" (one awk for all: forks are slow emulated).
others_changed() {
    awk -v skip="$2" '{ sub(/^.*\) /, ""); split(FILENAME, p, "/");
        if (p[5] != skip && ($39 != 0 || $38 != 0 || $17 != 0)) printf "%s=%s/%s/%s ", p[5], $39, $38, $17 }' \
        /proc/"$1"/task/*/stat
}
export -f sched_of sched_is others_changed
check_sched_per_thread() {
    local pid rx dropin=/run/systemd/system/pinnerd.service.d out others inv
    pid=$(start_workload vmwork-sch 2 rx) || {
        echo "$pid"
        return 1
    }
    back() {
        rm -f "$RULES/56-vm-sched.toml" "$dropin/90-vm-sched.conf"
        systemctl daemon-reload
        systemctl is-active --quiet pinnerd.service || systemctl restart pinnerd.service
        systemctl stop vmwork-sch.service 2>/dev/null
    }
    sched_rule() {
        put_rule 56-vm-sched.toml <<'EOF'
[[rule]]
name = "vm-sched"
[rule.match]
unit = "vmwork-sch.service"
[rule.place]
count = 2
[[rule.threads]]
comm = "rx*"
count = 1
exclusive = true
sched-policy = "fifo"
sched-priority = 20
EOF
    }
    kill -USR1 "$pid"
    wait_for 10 test -s "$WORK/vmwork-sch/tids" || {
        echo "the workload started no rx thread"
        back
        return 1
    }
    rx=$(head -1 "$WORK/vmwork-sch/tids")
    renice -n 5 -p "$rx" >/dev/null
    sched_is "$pid" "$rx" "0 0 5" || {
        echo "precondition: rx is '$(sched_of "$pid" "$rx")', want '0 0 5'"
        back
        return 1
    }
    sched_rule
    wait_for 20 sched_is "$pid" "$rx" "1 20 5" || {
        echo "20 s after the rule: rx is '$(sched_of "$pid" "$rx")', want '1 20 5' (SCHED_FIFO 20); $(explain "$pid" | grep -E 'rx|error|failed' | head -3 | tr '\n' ' ')"
        back
        return 1
    }
    others=$(others_changed "$pid" "$rx")
    [ -z "$others" ] || {
        echo "threads other than rx changed class: $others"
        back
        return 1
    }
    explain "$pid" | grep -q "scheduling fifo 20 (had other nice 5)" || {
        echo "explain does not say the class: $(explain "$pid" | grep "tid $rx")"
        back
        return 1
    }
    # Let go: the rule goes (the daemon watches the directory).
    rm -f "$RULES/56-vm-sched.toml"
    wait_for 20 sched_is "$pid" "$rx" "0 0 5" || {
        echo "20 s after the rule went: rx is '$(sched_of "$pid" "$rx")', want '0 0 5'"
        back
        return 1
    }
    # A crash: the rule again, kill -9, the rule gone before the next start (systemd
    # waits a minute to restart it, so the start is ours). The journal has the class.
    sched_rule
    wait_for 20 sched_is "$pid" "$rx" "1 20 5" || {
        echo "precondition: rx is '$(sched_of "$pid" "$rx")' 20 s after the rule came back"
        back
        return 1
    }
    grep -q '"sched"' /run/pinnerd/restore.json || {
        echo "the restore journal has no class: $(head -c 400 /run/pinnerd/restore.json | tr '\n' ' ')"
        back
        return 1
    }
    mkdir -p "$dropin"
    printf '[Service]\nRestartSec=1min\n' >"$dropin/90-vm-sched.conf"
    systemctl daemon-reload
    kill -9 "$(daemon_pid)"
    wait_for 20 sh -c '[ "$(systemctl show -p SubState --value pinnerd.service)" = auto-restart ]' || {
        echo "pinnerd.service not waiting to restart after kill -9: $(systemctl show -p ActiveState,SubState pinnerd.service | tr '\n' ' ')"
        back
        return 1
    }
    sched_is "$pid" "$rx" "1 20 5" || {
        echo "precondition: the killed daemon's class is gone already: '$(sched_of "$pid" "$rx")'"
        back
        return 1
    }
    # The drop-in stays until the end: it delays only restarts systemd makes itself.
    rm -f "$RULES/56-vm-sched.toml"
    out=$(systemctl restart pinnerd.service 2>&1) || {
        echo "systemctl restart failed: $out"
        back
        return 1
    }
    inv=$(systemctl show -p InvocationID --value pinnerd.service)
    wait_for 30 sched_is "$pid" "$rx" "0 0 5" || {
        echo "30 s after the restart: rx is '$(sched_of "$pid" "$rx")', want '0 0 5'"
        back
        return 1
    }
    journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep -q "1 scheduling classes given back" || {
        echo "the restarted daemon did not say it gave the class back: $(journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep 'previous run' | head -2 | tr '\n' ' ')"
        back
        return 1
    }
    back
    echo "rx SCHED_FIFO 20 while placed, the other threads unchanged; back to nice 5 when the rule went and, after kill -9, from the journal at the next start"
}

# What only the boot gives a held CPU, as this kernel has it: explain of a process whose
# exclusive rule holds CPUs 6-7, and check of that rule, say whether 6-7 are nohz_full
# (from /sys/devices/system/cpu/nohz_full: "(null)" or empty when the boot gave none) and
# rcu_nocbs (the command line), and that only the boot sets them.
check_boot_part_said() {
    local pid nohz rcu want line note
    pid=$(start_workload vmwork-boot 1) || {
        echo "$pid"
        return 1
    }
    back() {
        rm -f "$RULES/57-vm-boot.toml"
        systemctl stop vmwork-boot.service 2>/dev/null
    }
    put_rule 57-vm-boot.toml <<'EOF'
[[rule]]
name = "vm-boot"
[rule.match]
unit = "vmwork-boot.service"
[rule.place]
cpus = "6-7"
exclusive = true
EOF
    # Debian's 6.12 pads "(null)" to a width: " (null)".
    nohz=$(tr -d ' \n' 2>/dev/null </sys/devices/system/cpu/nohz_full || echo absent)
    rcu=$(grep -o 'rcu_nocbs[^ ]*' /proc/cmdline)
    local tail="not rcu_nocbs (rcu_nocbs= would move their RCU callbacks to kernel threads on other CPUs); only the kernel command line sets either, at boot"
    case "$nohz $rcu" in
    "(null) " | " ") want="boot: held CPUs 6-7: not nohz_full (nohz_full= would stop the scheduler tick there while one task runs); $tail" ;;
    "absent ") want="boot: held CPUs 6-7: nohz_full not known (this kernel is built without NO_HZ_FULL); $tail" ;;
    *)
        back
        echo "this VM was booted with nohz_full '$nohz' and '$rcu': not the plain boot this check knows"
        return 77
        ;;
    esac
    wait_for 20 sh -c "pinnerd explain $pid 2>/dev/null | grep -q '^boot: held CPUs 6-7: '" || {
        echo "20 s after the rule, explain has no boot line for CPUs 6-7: $(explain "$pid" | grep -E 'plan|boot|managed' | head -4 | tr '\n' ' ')"
        back
        return 1
    }
    line=$(explain "$pid" | grep '^boot: ')
    [ "$line" = "$want" ] || {
        echo "nohz_full reads '$nohz'; explain says '$line', want '$want'"
        back
        return 1
    }
    note=$(pinnerd check "$RULES/57-vm-boot.toml" 2>&1 | grep ': note: rule vm-boot: ')
    [ "${note#*: note: rule vm-boot: }" = "$want" ] || {
        echo "check says '$note', want '...: note: rule vm-boot: $want'"
        back
        return 1
    }
    back
    echo "nohz_full reads '$nohz', no rcu_nocbs on the command line; explain and check: $want"
}

# qos_of CPU: the CPU's resume-latency limit as the file says it ("0": none; "n/a": no
# idle state).
qos_of() { cat "/sys/devices/system/cpu/cpu$1/power/pm_qos_resume_latency_us" 2>/dev/null; }
qos_are() { [ "$(qos_of 6)" = "$1" ] && [ "$(qos_of 7)" = "$2" ]; }
export -f qos_of qos_are
check_idle_limit() {
    local pid before6 before7 out t0 t_restart t_set t_back
    [ -f /sys/devices/system/cpu/cpu6/power/pm_qos_resume_latency_us ] || {
        echo "CPU 6 of this VM has no pm_qos_resume_latency_us (no per-CPU PM QoS)"
        return 77
    }
    # CPU 7 starts with a limit of its own, which must come back as it was.
    echo 300 >/sys/devices/system/cpu/cpu7/power/pm_qos_resume_latency_us
    before6=$(qos_of 6) before7=$(qos_of 7)
    # The shipped unit keeps the CPUs' directories read-only: the documented drop-in.
    mkdir -p /etc/systemd/system/pinnerd.service.d
    printf '[Service]\nReadWritePaths=/sys/devices/system/cpu\n' \
        >/etc/systemd/system/pinnerd.service.d/90-vm-idle.conf
    systemctl daemon-reload
    t0=$(now)
    out=$(systemctl restart pinnerd.service 2>&1) || {
        echo "systemctl restart with the drop-in failed: $out"
        rm -f /etc/systemd/system/pinnerd.service.d/90-vm-idle.conf
        systemctl daemon-reload
        return 1
    }
    t_restart=$(elapsed "$t0")
    pid=$(start_workload vmwork-idl 2) || {
        echo "$pid"
        return 1
    }
    # The drop-in goes; the running daemon keeps it until its next start.
    back() {
        rm -f "$RULES/57-vm-idle.toml" /etc/systemd/system/pinnerd.service.d/90-vm-idle.conf
        systemctl daemon-reload
        systemctl stop vmwork-idl.service 2>/dev/null
        echo 0 >/sys/devices/system/cpu/cpu7/power/pm_qos_resume_latency_us
    }
    put_rule 57-vm-idle.toml <<'EOF'
[[rule]]
name = "vm-idle"
[rule.match]
unit = "vmwork-idl.service"
[rule.place]
cpus = "6-7"
exclusive = true
idle-limit-us = 0
EOF
    t0=$(now)
    wait_for 20 qos_are n/a n/a || {
        echo "20 s after the rule: CPUs 6-7 read '$(qos_of 6)' '$(qos_of 7)', want 'n/a' 'n/a' (0 µs: no idle state)"
        back
        return 1
    }
    t_set=$(elapsed "$t0")
    grep -q pm_qos_resume_latency_us /run/pinnerd/knobs.json || {
        echo "the knob journal does not hold the limits: $(head -c 300 /run/pinnerd/knobs.json 2>&1 | tr '\n' ' ')"
        back
        return 1
    }
    out=$(explain "$pid" | grep '^idle: CPU 6:')
    [ -n "$out" ] || {
        echo "explain shows no line for held CPU 6: $(explain "$pid" | tail -3 | tr '\n' ' ')"
        back
        return 1
    }
    # Let go: the rule goes.
    rm -f "$RULES/57-vm-idle.toml"
    t0=$(now)
    wait_for 20 qos_are "$before6" "$before7" || {
        echo "20 s after the rule went: CPUs 6-7 read '$(qos_of 6)' '$(qos_of 7)', want '$before6' '$before7'"
        back
        return 1
    }
    t_back=$(elapsed "$t0")
    back
    echo "CPUs 6-7 at n/a while held ($out), given back as '$before6' and '$before7' when the rule went; restart with the drop-in $t_restart s, set $t_set s after the rule, given back $t_back s after it went"
}

# wq_on CPUS_HEX: the unbound workqueue cpumask files with a bit of CPUS_HEX set (the
# VM has 8 CPUs: the last group of 8 digits holds them all).
wq_on() {
    local f m
    for f in /sys/devices/virtual/workqueue/cpumask /sys/devices/virtual/workqueue/*/cpumask; do
        [ -f "$f" ] || continue
        m=$(tr -d ',\n' <"$f")
        (((16#${m: -8} & $1) != 0)) && printf '%s=%s ' "${f#/sys/devices/virtual/workqueue/}" "$m"
    done
    return 0
}
# kthreads_on CPUS: unbound kernel threads (PF_KTHREAD, not PF_NO_SETAFFINITY, more than
# one CPU allowed) that may run on any of CPUS (a CPU list), as "pid:comm:cpus".
kthreads_on() {
    python3 - "$1" <<'PY'
import glob, sys
def cpus(text):
    out = set()
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out
away = cpus(sys.argv[1])
for st in glob.glob("/proc/[0-9]*/stat"):
    try:
        text = open(st).read()
        status = open(st[:-4] + "status").read()
    except OSError:
        continue
    comm = text[text.index("(") + 1:text.rindex(")")]
    flags = int(text[text.rindex(")") + 2:].split()[6])
    if not flags & 0x00200000 or flags & 0x04000000:
        continue
    allowed = [l.split()[1] for l in status.splitlines() if l.startswith("Cpus_allowed_list:")][0]
    mask = cpus(allowed)
    if len(mask) > 1 and mask & away:
        print(f"{st.split('/')[2]}:{comm}:{allowed}", end=" ")
PY
}
export -f wq_on kthreads_on
check_kthreads_off_exclusive() {
    local pid wq_before kthreadd_before wq kt
    wq_before=$(cat /sys/devices/virtual/workqueue/cpumask)
    kthreadd_before=$(task_mask 2 2)
    pid=$(start_workload vmwork-kth 2) || {
        echo "$pid"
        return 1
    }
    back() {
        rm -f "$RULES/58-vm-kthreads.toml"
        systemctl stop vmwork-kth.service 2>/dev/null
    }
    put_rule 58-vm-kthreads.toml <<'EOF'
[[rule]]
name = "vm-kthreads"
[rule.match]
unit = "vmwork-kth.service"
[rule.place]
cpus = "6-7"
exclusive = true
EOF
    wait_for 20 bash -c '[ -z "$(wq_on 0xc0)" ] && [ "$(task_mask 2 2)" != "$0" ]' "$kthreadd_before" || {
        echo "20 s after the rule: unbound workqueue masks on CPUs 6-7: '$(wq_on 0xc0)'; kthreadd on $(task_mask 2 2)"
        back
        return 1
    }
    kt=$(kthreads_on 6-7)
    [ -z "$kt" ] || {
        echo "unbound kernel threads still allowed on CPUs 6-7 while held: ${kt:0:600}"
        back
        return 1
    }
    wq=$(cat /sys/devices/virtual/workqueue/cpumask)
    # Let go: the rule goes.
    rm -f "$RULES/58-vm-kthreads.toml"
    wait_for 20 bash -c '[ "$(cat /sys/devices/virtual/workqueue/cpumask)" = "$0" ] && [ "$(task_mask 2 2)" = "$1" ]' "$wq_before" "$kthreadd_before" || {
        echo "20 s after the rule went: workqueue cpumask $(cat /sys/devices/virtual/workqueue/cpumask) (was $wq_before), kthreadd on $(task_mask 2 2) (was $kthreadd_before)"
        back
        return 1
    }
    back
    echo "while CPUs 6-7 were held: workqueue cpumask $wq, no unbound kernel thread there; given back: cpumask $wq_before, kthreadd on $kthreadd_before"
}

check_hotplug_explicit() {
    local pid
    pid=$(start_workload vmwork-hot 2 '' 50) || {
        echo "$pid"
        return 1
    }
    put_rule 52-vm-hotplug.toml <<'EOF'
[[rule]]
name = "vm-hotplug"
[rule.match]
comm = "vmwork-hot"
[rule.place]
cpus = "6"
EOF
    wait_for 10 mask_is "$pid" 6 || {
        echo "not pinned to 6 before the hotplug: $(masks "$pid")"
        return 1
    }
    cpu_online 6 0 || {
        echo "cannot take CPU 6 offline"
        return 1
    }
    # The idle threads wake every 50 ms; the kernel then moves them off CPU 6 and widens
    # their masks, and bringing CPU 6 back does not narrow them again: that is the
    # daemon's job. (The main thread waits for a signal and keeps its mask.)
    local during
    if ! wait_for 5 sh -c 'grep -h "^Cpus_allowed_list:" /proc/$1/task/*/status | grep -qvx "Cpus_allowed_list:[[:space:]]*6"' _ "$pid"; then
        during=$(masks "$pid")
        cpu_online 6 1
        echo "precondition: the kernel did not widen the masks with CPU 6 offline: $during"
        return 1
    fi
    during=$(masks "$pid")
    cpu_online 6 1 || {
        echo "cannot bring CPU 6 back"
        return 1
    }
    wait_for 10 mask_is "$pid" 6 || {
        echo "CPU 6 offline: $during; 10 s after it came back: $(masks "$pid"), want 6"
        return 1
    }
    echo "CPU 6 offline: $during; back online: every thread on 6 again"
}

check_hotplug_compact() {
    local pid m victim out
    pid=$(start_workload vmwork-hcm 2 '' 50) || {
        echo "$pid"
        return 1
    }
    put_rule 53-vm-hotplug-compact.toml <<'EOF'
[[rule]]
name = "vm-hotplug-compact"
[rule.match]
comm = "vmwork-hcm"
[rule.place]
count = 2
policy = "compact"
smt = "avoid"
EOF
    wait_for 10 compact_pinned "$pid" || {
        echo "not on a compact pair before the hotplug: $(masks "$pid")"
        return 1
    }
    m=$(uniform_mask "$pid")
    # CPU 0 cannot go offline; take the highest CPU of the pair.
    victim=$(expand "$m" | tail -n 1)
    cpu_online "$victim" 0 || {
        echo "cannot take CPU $victim offline"
        return 1
    }
    if ! wait_for 10 compact_pinned "$pid"; then
        out="CPU $victim of $m offline: $(masks "$pid") 10 s later, want another compact pair"
        cpu_online "$victim" 1
        echo "$out"
        return 1
    fi
    out="on $m; CPU $victim offline: re-planned to $(uniform_mask "$pid")"
    cpu_online "$victim" 1 || {
        echo "cannot bring CPU $victim back"
        return 1
    }
    wait_for 10 compact_pinned "$pid" || {
        echo "$out; back online: $(masks "$pid")"
        return 1
    }
    # Threads the kernel widened while the CPU was offline may still differ for a moment.
    echo "$out; CPU $victim back: $(uniform_mask "$pid" || masks "$pid")"
}

check_package_purge() {
    local pid out
    pid=$(workload_pid vmwork-hot) || {
        echo "$pid"
        return 1
    }
    mask_is "$pid" 6 || {
        echo "precondition: vmwork-hot is not on 6 but $(masks "$pid")"
        return 1
    }
    # An isolate rule holds CPUs 2-3 as the package goes (where the kernel can).
    local isolating=
    if ! no_partitions >/dev/null && workload_pid vmwork-iso >/dev/null; then
        iso_rule 2-3
        wait_for 30 isolated_is 2-3 || {
            echo "precondition: not isolated 30 s after an isolate rule on 2-3: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
            return 1
        }
        isolating=yes
    fi
    out=$(dpkg --purge pinnerd 2>&1) || {
        echo "dpkg --purge failed: $out"
        return 1
    }
    if [ -n "$isolating" ]; then
        isolated_is "" && [ -z "$(systemctl show -p AllowedCPUs --value vmwork-iso.service)" ] &&
            [ -z "$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive 2>/dev/null)" ] || {
            echo "after purge: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', vmwork-iso AllowedCPUs '$(systemctl show -p AllowedCPUs --value vmwork-iso.service)', system.slice exclusive '$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive 2>/dev/null)'"
            return 1
        }
    fi
    systemctl is-active --quiet pinnerd.service && {
        echo "pinnerd.service still active after purge"
        return 1
    }
    [ ! -e /usr/lib/systemd/system/pinnerd.service ] && [ ! -e /usr/bin/pinnerd ] &&
        [ ! -e /usr/share/dbus-1/system.d/org.pinnerd.Pinnerd1.conf ] || {
        echo "files left after purge: $(ls /usr/lib/systemd/system/pinnerd.service /usr/bin/pinnerd /usr/share/dbus-1/system.d/org.pinnerd.Pinnerd1.conf 2>/dev/null | tr '\n' ' ')"
        return 1
    }
    [ ! -e /var/lib/pinnerd ] || {
        echo "/var/lib/pinnerd left after purge"
        return 1
    }
    [ ! -e /run/pinnerd ] || {
        echo "/run/pinnerd left after purge: $(ls -A /run/pinnerd | tr '\n' ' ')"
        return 1
    }
    [ -f "$RULES/52-vm-hotplug.toml" ] || {
        echo "purge deleted the administrator's rule files"
        return 1
    }
    mask_is "$pid" "$ALL_CPUS" || {
        echo "after purge vmwork-hot is on $(masks "$pid"), want $ALL_CPUS (stopping must restore)"
        return 1
    }
    echo "purged: service stopped, files, /var/lib/pinnerd and /run/pinnerd gone, rule files kept, vmwork-hot back on $ALL_CPUS${isolating:+; the isolate rule's CPUs 2-3 no longer isolated, its unit's AllowedCPUs reset}"
}

# ---- isolation (isolate = true) and units born in place (unit-cpuset = true)

# isolated_is LIST: the root cgroup's cpuset.cpus.isolated reads LIST ("" for none).
isolated_is() { [ "$(cat /sys/fs/cgroup/cpuset.cpus.isolated 2>/dev/null)" = "$1" ]; }
# noise_units NAME…: a busy loop per name, as a unit of its own (vmnoise-NAME.service).
noise_units() {
    local n
    for n in "$@"; do
        systemd-run --quiet --unit="vmnoise-$n" sh -c 'while :; do :; done' || return 1
    done
}
# noise_scopes NAME…: a busy loop per name in a scope of a user's slice, as a login
# session's processes are (systemd-run --scope runs in the foreground: backgrounded).
noise_scopes() {
    local n
    for n in "$@"; do
        systemd-run --quiet --scope --unit="vmnoise-$n" --slice=user-4242.slice \
            sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    done
    wait_for 20 sh -c 'for n in "$@"; do systemctl is-active --quiet "vmnoise-$n.scope" || exit 1; done' _ "$@"
}
stop_noise() { systemctl stop 'vmnoise-*' 2>/dev/null; }
# sample SECONDS CPUS CGROUP: cpu_sampler.py's JSON (see there), every 10 ms.
sample() { python3 "$LIB/cpu_sampler.py" "$1" 10 "$2" "$3"; }
# iso_rule [CPUS]: the isolate rule: vmwork-iso on CPUS (6-7: node 1), exclusive and
# isolated. It names the service (a hold needs what a user cannot imitate): the hold
# rests on the service's main process.
iso_rule() {
    put_rule 80-vm-isolate.toml <<EOF
[[rule]]
name = "vm-isolate"
[rule.match]
comm = "vmwork-iso"
unit = "vmwork-iso.service"
[rule.place]
cpus = "${1:-6-7}"
exclusive = true
isolate = true
EOF
}
# no_partitions: exit 77 (SKIP) with the reason where the kernel lacks remote partitions.
no_partitions() {
    [ -f /sys/fs/cgroup/cpuset.cpus.isolated ] && return 1
    echo "kernel $(uname -r) has no remote cpuset partitions (no /sys/fs/cgroup/cpuset.cpus.isolated; Linux 6.7 or later)"
}
# longest_gap SECONDS WANT OUT: polls cpuset.cpus.isolated every 20 ms for SECONDS and
# writes to OUT the longest stretch, in seconds, during which it was not WANT.
longest_gap() {
    python3 - "$1" "$2" >"$3" <<'PY'
import sys, time
end, want = time.monotonic() + float(sys.argv[1]), sys.argv[2]
worst, since = 0.0, None
while time.monotonic() < end:
    with open("/sys/fs/cgroup/cpuset.cpus.isolated") as f:
        ok = f.read().strip() == want
    t = time.monotonic()
    if ok and since is not None:
        worst, since = max(worst, t - since), None
    elif not ok and since is None:
        since = t
    time.sleep(0.02)
if since is not None:
    worst = max(worst, time.monotonic() - since)
print(f"{worst:.2f}")
PY
}
export -f isolated_is noise_units noise_scopes stop_noise sample iso_rule no_partitions longest_gap

# irqbalance reads only the boot's isolated CPUs (and nohz_full): pinnerd tells it over
# its socket to keep off the CPUs an isolate rule holds, and lifts that when it lets go.
check_irqbalance_knows_isolated() {
    local banned
    no_partitions && return 77
    workload_pid vmwork-iso >/dev/null || {
        echo "precondition: no vmwork-iso workload"
        return 1
    }
    systemctl start irqbalance.service 2>&1
    wait_for 30 bash -c 'test -S "/run/irqbalance/irqbalance$(pgrep -xo irqbalance).sock"' || {
        echo "no irqbalance socket: $(ls /run/irqbalance 2>&1)"
        return 1
    }
    wait_for 30 irqbalance_bans_none || {
        echo "precondition: irqbalance bans mask $(irqbalance_banned) before the rule"
        return 1
    }
    iso_rule
    wait_for 30 isolated_is 6-7 || {
        echo "not isolated 30 s after the rule: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        return 1
    }
    wait_for 30 irqbalance_bans c0 || {
        echo "irqbalance bans mask '$(irqbalance_banned)' while 6-7 are isolated, want c0: $(journalctl -b --no-pager -o cat -u pinnerd.service | grep -i irqbalance | tail -2)"
        return 1
    }
    banned=$(irqbalance_banned)
    rm -f "$RULES/80-vm-isolate.toml"
    wait_for 20 isolated_is "" || {
        echo "cpuset.cpus.isolated still '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 20 s after the rule went"
        return 1
    }
    wait_for 30 irqbalance_bans_none || {
        echo "irqbalance still bans mask $(irqbalance_banned) after the rule went"
        return 1
    }
    echo "while 6-7 were isolated irqbalance banned mask $banned (told over its socket: $(journalctl -b --no-pager -o cat -u pinnerd.service | grep -o 'irqbalance (pid [0-9]*) told to keep IRQs off CPUs 6-7' | tail -1)); rule removed: it bans none"
}

check_isolate_keeps_others_off() {
    local pid cg s1 s2 why others managed rounds
    no_partitions && return 77
    isolated_is "" || {
        echo "precondition: CPUs $(cat /sys/fs/cgroup/cpuset.cpus.isolated) already isolated"
        return 1
    }
    # Its threads wake every 20 ms: a thread's last CPU (what is sampled) is where it
    # ran, and one asleep since before the rule never shows it on 6-7.
    pid=$(start_workload vmwork-iso 2 "" 20) || {
        echo "$pid"
        return 1
    }
    cg=$(awk -F: '$1 == 0 { print $3 }' "/proc/$pid/cgroup")
    # Half the noise before the rule, half after: units and login-like scopes.
    noise_units a b && noise_scopes c d || {
        echo "noise did not start"
        stop_noise
        return 1
    }
    iso_rule
    if ! wait_for 30 isolated_is 6-7; then
        why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
        echo "cpuset.cpus.isolated is '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 30 s after the rule, want 6-7; $cg partition: $(cat "/sys/fs/cgroup$cg/cpuset.cpus.partition" 2>&1); Explain: $why"
        stop_noise
        rm -f "$RULES/80-vm-isolate.toml"
        return 1
    fi
    noise_units e f && noise_scopes g h || {
        echo "noise did not start after the rule"
        stop_noise
        rm -f "$RULES/80-vm-isolate.toml"
        return 1
    }
    # Where the kernel keeps unbound workqueues (6.10+ leaves isolated partitions out).
    local wq=/sys/devices/virtual/workqueue/cpumask wq_during
    wq_during=$(cat "$wq" 2>/dev/null || echo "no $wq")
    s1=$(sample 10 6-7 "$cg")
    others=$(jq .others_on <<<"$s1")
    managed=$(jq .managed_on <<<"$s1")
    rounds=$(jq .rounds <<<"$s1")
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    [ "$others" -eq 0 ] && [ "$managed" -gt 0 ] || {
        echo "isolated 6-7: in $rounds rounds, $others samples of other user-space tasks on 6-7 ($(jq -c .others <<<"$s1")), $managed of the rule's; Explain: $why"
        stop_noise
        rm -f "$RULES/80-vm-isolate.toml"
        return 1
    }
    grep -q 'held: unit vmwork-iso.service: AllowedCPUs=6-7 (set by pinnerd); CPUs 6-7 isolated' <<<"$why" || {
        echo "Explain does not say the unit is held and isolated: $why"
        stop_noise
        rm -f "$RULES/80-vm-isolate.toml"
        return 1
    }
    rm -f "$RULES/80-vm-isolate.toml"
    if ! wait_for 20 isolated_is ""; then
        echo "cpuset.cpus.isolated still '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 20 s after the rule was removed"
        stop_noise
        return 1
    fi
    sleep 1
    s2=$(sample 3 6-7 /none)
    stop_noise
    [ "$(jq .others_on <<<"$s2")" -gt 0 ] || {
        echo "after the rule went, no other task ran on 6-7 in 3 s: $s2"
        return 1
    }
    [ -z "$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive 2>/dev/null)" ] || {
        echo "system.slice/cpuset.cpus.exclusive left '$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive)'"
        return 1
    }
    echo "unbound workqueue cpumask while isolated: $wq_during, after: $(cat "$wq" 2>/dev/null);" \
        "8 busy loops (4 units, 4 scopes, half started after the rule): 0 samples of them on isolated 6-7 in $rounds rounds over 10 s, $managed of the rule's threads, $(jq .kernel_on <<<"$s1") of kernel threads; rule removed: isolated '' again and $(jq .others_on <<<"$s2") samples of others on 6-7 in 3 s; Explain: $(grep -o 'held: .*' <<<"$why" | head -1)"
}

check_isolate_survives_restart() {
    local pid old out gap restart_gap
    no_partitions && return 77
    pid=$(workload_pid vmwork-iso) || {
        echo "$pid"
        return 1
    }
    iso_rule
    wait_for 30 isolated_is 6-7 || {
        echo "precondition: not isolated 30 s after the rule: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        return 1
    }
    longest_gap 15 6-7 "$WORK/iso-gap-restart" &
    out=$(systemctl restart pinnerd.service 2>&1) || {
        echo "systemctl restart failed: $out"
        return 1
    }
    wait
    restart_gap=$(cat "$WORK/iso-gap-restart")
    # Kept across the restart, not made again: a hold made again by the next daemon left
    # the CPUs unisolated for 1.65 s (2.02 s under emulation) before the restart job was
    # told from a stop; 0.5 s tells the two apart.
    le "$restart_gap" 0.5 && isolated_is 6-7 || {
        echo "systemctl restart: isolation lost for $restart_gap s (limit 0.5 s), now '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        return 1
    }
    old=$(daemon_pid)
    longest_gap 15 6-7 "$WORK/iso-gap-kill" &
    kill -9 "$old"
    wait
    gap=$(cat "$WORK/iso-gap-kill")
    systemctl is-active --quiet pinnerd.service && [ "$(daemon_pid)" != "$old" ] || {
        echo "not restarted after kill -9: $(systemctl show -p ActiveState,SubState,NRestarts pinnerd.service | tr '\n' ' ')"
        return 1
    }
    le "$gap" 0.5 && isolated_is 6-7 || {
        echo "kill -9: isolation lost for $gap s (limit 0.5 s), now '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        return 1
    }
    wait_for 10 sh -c 'journalctl -b -u pinnerd.service --no-pager -o cat | grep -q "taken over"' || {
        echo "the restarted daemon did not take over the hold the killed one left"
        return 1
    }
    rm -f "$RULES/80-vm-isolate.toml"
    wait_for 20 isolated_is "" || {
        echo "cpuset.cpus.isolated still '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 20 s after the rule went"
        return 1
    }
    echo "systemctl restart: isolation lost for at most $restart_gap s; kill -9: $gap s (the next daemon took the hold over from its journal); rule removed: nothing isolated"
}

# An unprivileged user (uid 4343) tries every way to make pinnerd isolate or confine
# for them: `check` refuses a rule naming only comm and cmdline; a job of theirs that a
# root service starts (as cron does) matches a rule naming that service; a batch.slice
# of their own manager (`systemd-run --user --slice=batch`) stands beside a rule for the
# system's batch.slice. Nothing is isolated, no unit confined, and Explain says why.
check_hold_refuses_imitators() {
    local user=vmintruder uid out job why mgr=
    no_partitions && return 77
    id "$user" >/dev/null 2>&1 || useradd --uid 4343 --create-home --shell /bin/sh "$user" || {
        echo "cannot create $user"
        return 1
    }
    uid=$(id -u "$user")
    # 1. A hold rule anyone could trigger is refused with its line and column.
    printf '%s\n' '[[rule]]' 'name = "vm-imitable"' '[rule.match]' 'comm = "vmjob"' \
        'cmdline = "--feed"' '[rule.place]' 'cpus = "6-7"' 'exclusive = true' 'isolate = true' \
        >"$WORK/imitable.toml"
    out=$(pinnerd check --no-permissions "$WORK/imitable.toml" 2>&1) && {
        echo "check accepted a comm-only isolate rule: $out"
        return 1
    }
    grep -qF "imitable.toml:9:11: rule \"vm-imitable\": \`isolate = true\` changes the machine for every user" <<<"$out" || {
        echo "check did not name the line and column: $out"
        return 1
    }
    # 3. A root service that runs a job as the user (as cron.service does).
    ln -sf /bin/sleep /usr/local/bin/vmjob
    systemd-run --quiet --unit=vmcron --service-type=simple \
        sh -c "setpriv --reuid=$uid --regid=$(id -g "$user") --clear-groups /usr/local/bin/vmjob 600 & exec sleep 600" || {
        echo "systemd-run vmcron failed"
        return 1
    }
    wait_for 20 pgrep -x -u "$uid" vmjob >/dev/null || {
        echo "the user's job did not start in vmcron.service"
        systemctl stop vmcron.service
        return 1
    }
    job=$(pgrep -x -u "$uid" vmjob)
    # 2. The user's own manager, with a slice named like the system's batch.slice.
    if loginctl enable-linger "$user" && wait_for 60 test -S "/run/user/$uid/systemd/private"; then
        runuser -u "$user" -- env XDG_RUNTIME_DIR="/run/user/$uid" \
            systemd-run --user --quiet --slice=batch --unit=vmbatch /bin/sleep 601 &&
            wait_for 20 sh -c "grep -q 'user@$uid.service/batch.slice' /proc/\$(pgrep -f -u $uid -n 'sleep 601')/cgroup" &&
            mgr=yes
    fi
    put_rule 82-vm-imitators.toml <<'EOF'
[[rule]]
name = "vm-cron-job"
[rule.match]
comm = "vmjob"
unit = "vmcron.service"
[rule.place]
cpus = "6-7"
exclusive = true
isolate = true

[[rule]]
name = "vm-batch"
[rule.match]
unit = "batch.slice"
[rule.place]
cpus = "4-5"
unit-cpuset = true
EOF
    # The daemon has seen the rules once the job is managed (pinned to 6-7).
    wait_for 30 mask_is "$job" 6-7 || {
        echo "the rule did not take the user's job (mask $(masks "$job"))"
        rm -f "$RULES/82-vm-imitators.toml"
        systemctl stop vmcron.service
        return 1
    }
    sleep 5
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$job" | jq -r '.data[0]')
    out="isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', vmcron AllowedCPUs '$(systemctl show -p AllowedCPUs --value vmcron.service)', user@$uid AllowedCPUs '$(systemctl show -p AllowedCPUs --value "user@$uid.service")'"
    rm -f "$RULES/82-vm-imitators.toml"
    systemctl stop vmcron.service
    [ -n "$mgr" ] && runuser -u "$user" -- env XDG_RUNTIME_DIR="/run/user/$uid" systemctl --user stop vmbatch.service
    loginctl disable-linger "$user"
    [ "$out" = "isolated '', vmcron AllowedCPUs '', user@$uid AllowedCPUs ''" ] || {
        echo "a user's processes made pinnerd hold: $out; Explain of the job: $why"
        return 1
    }
    grep -qF "is not held: the rule names no \`user\`, and it is not the main process of vmcron.service" <<<"$why" || {
        echo "Explain of the user's job does not say why it is not held: $why"
        return 1
    }
    [ -n "$mgr" ] || {
        echo "the user's manager did not start a batch.slice of its own: the batch.slice case was not tried"
        return 1
    }
    echo "check refused the comm-only isolate rule at 9:11; the user's job in vmcron.service (pid $job, pinned to 6-7) held nothing ($(grep -o 'not held: [^;]*' <<<"$why" | head -1)); the user's own batch.slice matched nothing; $out"
}

# The record of holds outlives a stop that follows a crash: kill -9, then systemctl stop
# while systemd waits to restart the daemon (as dpkg or an administrator stopping a
# crashed daemon does), then start: the next daemon finds holds.json, and removing the
# rule leaves nothing isolated and the unit's AllowedCPUs reset.
check_isolate_crash_then_stop() {
    local pid old inv kept isolated_stopped how dropin=/run/systemd/system/pinnerd.service.d
    no_partitions && return 77
    pid=$(workload_pid vmwork-iso) || {
        echo "$pid"
        return 1
    }
    # Whatever fails, the daemon runs again for the checks after this one, without the
    # rule or the drop-in.
    back() {
        rm -f "$RULES/80-vm-isolate.toml" "$dropin/90-vm-crash-then-stop.conf"
        systemctl daemon-reload
        systemctl is-active --quiet pinnerd.service || systemctl start pinnerd.service
    }
    iso_rule
    wait_for 30 isolated_is 6-7 || {
        echo "precondition: not isolated 30 s after the rule: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        back
        return 1
    }
    # systemd restarts the killed daemon after RestartSec= (2 s): a minute here lets the
    # stop come first every time, as it does when it comes within the 2 s.
    mkdir -p "$dropin"
    printf '[Service]\nRestartSec=1min\n' >"$dropin/90-vm-crash-then-stop.conf"
    systemctl daemon-reload
    old=$(daemon_pid)
    kill -9 "$old"
    wait_for 20 sh -c '[ "$(systemctl show -p SubState --value pinnerd.service)" = auto-restart ]' || {
        echo "pinnerd.service not waiting to restart after kill -9: $(systemctl show -p ActiveState,SubState,Result pinnerd.service | tr '\n' ' ')"
        back
        return 1
    }
    systemctl stop pinnerd.service
    [ -s /run/pinnerd/holds.json ] && kept=yes
    isolated_stopped=$(cat /sys/fs/cgroup/cpuset.cpus.isolated)
    rm -f "$dropin/90-vm-crash-then-stop.conf"
    systemctl daemon-reload
    systemctl start pinnerd.service || {
        echo "systemctl start failed: $(systemctl show -p ActiveState,SubState,Result pinnerd.service | tr '\n' ' ')"
        back
        return 1
    }
    [ -n "$kept" ] || {
        echo "/run/pinnerd/holds.json gone after systemctl stop of the killed daemon (isolated then: '$isolated_stopped'; /run/pinnerd: $(ls -A /run/pinnerd 2>&1 | tr '\n' ' '))"
        back
        return 1
    }
    inv=$(systemctl show -p InvocationID --value pinnerd.service)
    rm -f "$RULES/80-vm-isolate.toml"
    wait_for 20 sh -c '[ -z "$(cat /sys/fs/cgroup/cpuset.cpus.isolated)" ] &&
        [ -z "$(systemctl show -p AllowedCPUs --value vmwork-iso.service)" ]' || {
        echo "20 s after the rule went: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', vmwork-iso AllowedCPUs '$(systemctl show -p AllowedCPUs --value vmwork-iso.service)'; the restarted daemon said: $(journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep -E 'previous run|no record' | head -5 | tr '\n' ' ')"
        back
        return 1
    }
    [ -z "$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive 2>/dev/null)" ] || {
        echo "system.slice/cpuset.cpus.exclusive left '$(cat /sys/fs/cgroup/system.slice/cpuset.cpus.exclusive)'"
        back
        return 1
    }
    how=$(journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep -E 'previous run' | head -1)
    back
    echo "kill -9 then systemctl stop: holds.json kept, '$isolated_stopped' still isolated while stopped; started again: ${how:-no line about the previous run}; rule removed: nothing isolated, vmwork-iso AllowedCPUs reset, system.slice exclusive empty"
}

# iso_rule_for FILE NAME COMM CPUS: an isolate rule NAME for the service COMM.service
# (its comm COMM) on CPUS, in FILE.
iso_rule_for() {
    put_rule "$1" <<EOF
[[rule]]
name = "$2"
[rule.match]
comm = "$3"
unit = "$3.service"
[rule.place]
cpus = "$4"
exclusive = true
isolate = true
EOF
}
# explain PID: what the daemon says of PID.
explain() { bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$1" | jq -r '.data[0]'; }
# let_go_done UNIT: nothing isolated and UNIT's AllowedCPUs= reset.
let_go_done() {
    isolated_is "" && [ -z "$(systemctl show -p AllowedCPUs --value "$1")" ]
}
export -f iso_rule_for explain let_go_done

# The restore outlives a crash: a workload (one thread moved to 1-7 before pinnerd
# saw it) is held and isolated, the daemon is killed with kill -9 and restarted by
# systemd; the new daemon's explain names the masks from before the first run, and
# removing the rule gives every thread the mask it had before pinnerd (not the rule's
# CPUs, which is what the threads read after the crash under the kept hold).
check_isolate_restore_after_crash() {
    local pid tid old inv why before after
    no_partitions && return 77
    pid=$(start_workload vmwork-rc 2 "" 20) || {
        echo "$pid"
        return 1
    }
    back() {
        rm -f "$RULES/81-vm-restore.toml"
        systemctl stop vmwork-rc.service 2>/dev/null
    }
    tid=$(ls "/proc/$pid/task" | grep -vx "$pid" | head -1)
    taskset -pc 1-7 "$tid" >/dev/null
    before=$(masks "$pid")
    iso_rule_for 81-vm-restore.toml vm-restore vmwork-rc 6-7
    wait_for 30 isolated_is 6-7 && wait_for 10 all_masks_are "$pid" 6-7 || {
        echo "precondition: not isolated and pinned 30 s after the rule: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', masks $(masks "$pid")"
        back
        return 1
    }
    old=$(daemon_pid)
    kill -9 "$old"
    wait_for 30 bash -c '[ "$(systemctl show -p MainPID --value pinnerd.service)" != "$1" ] &&
        systemctl is-active --quiet pinnerd.service' _ "$old" || {
        echo "not restarted after kill -9: $(systemctl show -p ActiveState,SubState pinnerd.service | tr '\n' ' ')"
        back
        return 1
    }
    inv=$(systemctl show -p InvocationID --value pinnerd.service)
    wait_for 30 bash -c 'journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$1" | grep -q "taken over"' _ "$inv" || {
        echo "the restarted daemon did not take the hold over: $(journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep -E 'previous run|restored' | head -3 | tr '\n' ' ')"
        back
        return 1
    }
    wait_for 20 bash -c 'explain "$1" | grep -q "original mask"' _ "$pid"
    why=$(explain "$pid")
    grep -q 'original mask 0-7' <<<"$why" || {
        echo "after kill -9 explain says: $(grep -o 'original mask [^ ]*' <<<"$why"), want 0-7; masks then $(masks "$pid")"
        back
        return 1
    }
    rm -f "$RULES/81-vm-restore.toml"
    wait_for 20 let_go_done vmwork-rc.service || {
        echo "20 s after the rule went: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', AllowedCPUs '$(systemctl show -p AllowedCPUs --value vmwork-rc.service)'"
        back
        return 1
    }
    wait_for 10 bash -c '[ "$(masks "$1")" = "$2" ]' _ "$pid" "$before"
    after=$(masks "$pid")
    [ "$after" = "$before" ] || {
        echo "masks before pinnerd: $before; after kill -9 and the rule removed: $after; the daemon said: $(journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | grep -E 'given back|let go|restored' | head -4 | tr '\n' ' ')"
        back
        return 1
    }
    back
    echo "kill -9 under an isolate hold, restarted, hold taken over; explain: $(grep -o 'original mask [^;]*' <<<"$why"); rule removed: nothing isolated, AllowedCPUs reset, masks as before pinnerd ($after)"
}

# Two isolate rules removed with one rm: both services' threads get their masks back,
# both units' AllowedCPUs= are reset, nothing stays isolated (the first unit let go kept
# the cpuset.cpus systemd left while the slice kept the controller for the second).
check_isolate_two_rules_let_go() {
    local pa pb n out
    no_partitions && return 77
    pa=$(start_workload vmwork-ta 2 "" 20) && pb=$(start_workload vmwork-tb 2 "" 20) || {
        echo "workloads did not start: $pa $pb"
        return 1
    }
    back() {
        rm -f "$RULES/82-vm-two-a.toml" "$RULES/82-vm-two-b.toml"
        systemctl stop vmwork-ta.service vmwork-tb.service 2>/dev/null
    }
    iso_rule_for 82-vm-two-a.toml vm-two-a vmwork-ta 4-5
    iso_rule_for 82-vm-two-b.toml vm-two-b vmwork-tb 6-7
    wait_for 40 isolated_is 4-7 && wait_for 10 all_masks_are "$pa" 4-5 && wait_for 10 all_masks_are "$pb" 6-7 || {
        echo "precondition: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 40 s after both rules, want 4-7; masks a: $(masks "$pa"), b: $(masks "$pb")"
        back
        return 1
    }
    rm -f "$RULES/82-vm-two-a.toml" "$RULES/82-vm-two-b.toml"
    wait_for 20 bash -c 'let_go_done vmwork-ta.service && let_go_done vmwork-tb.service' || {
        echo "20 s after one rm: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', AllowedCPUs a '$(systemctl show -p AllowedCPUs --value vmwork-ta.service)', b '$(systemctl show -p AllowedCPUs --value vmwork-tb.service)'"
        back
        return 1
    }
    wait_for 10 bash -c 'all_masks_are "$1" 0-7 && all_masks_are "$2" 0-7' _ "$pa" "$pb" || {
        out=$(journalctl -b -u pinnerd.service --no-pager -o cat | grep -E 'vmwork-t[ab].service' | grep -E 'let go|given back|emptied' | tail -6 | tr '\n' ' ')
        echo "after one rm of both rules: masks a: $(masks "$pa"), b: $(masks "$pb"), want 0-7; cpuset.cpus a '$(cat /sys/fs/cgroup/system.slice/vmwork-ta.service/cpuset.cpus 2>&1)', b '$(cat /sys/fs/cgroup/system.slice/vmwork-tb.service/cpuset.cpus 2>&1)'; the daemon said: $out"
        back
        return 1
    }
    n=$(journalctl -b -u pinnerd.service --no-pager -o cat | grep -cE 'unit vmwork-t[ab].service let go')
    out=$(journalctl -b -u pinnerd.service --no-pager -o cat | grep -E 'vmwork-t[ab].service: (cpuset.cpus|the masks)' | tail -4 | tr '\n' ' ')
    back
    echo "two isolate rules (4-5, 6-7) removed with one rm: nothing isolated, both AllowedCPUs reset, every thread of both on 0-7 again ($n 'let go' lines); the daemon said: $out"
}

# A hold leaves no runtime drop-in: the set-property drop-in the hold wrote
# (/run/systemd/system.control/UNIT.d/50-AllowedCPUs.conf) goes when it lets go, one
# the administrator set at run time before is put back byte for byte, and then an edit
# of the unit file's AllowedCPUs= with daemon-reload takes effect.
check_hold_leaves_no_dropin() {
    local unit=vmwork-dr.service file=/etc/systemd/system/vmwork-dr.service dir=$WORK/vmwork-dr
    local ctl=/run/systemd/system.control/vmwork-dr.service.d admins pid
    no_partitions && return 77
    back() {
        rm -f "$RULES/83-vm-dropin.toml"
        systemctl stop "$unit" 2>/dev/null
        rm -rf "$file" "$ctl"
        systemctl daemon-reload
    }
    rm -rf "$dir" "$ctl"
    mkdir -p "$dir"
    ln -sf /usr/bin/python3 /usr/local/bin/vmwork-dr
    cat >"$file" <<EOF
[Service]
Environment=VMWORK_WAKE_MS=20
ExecStart=/usr/local/bin/vmwork-dr $LIB/workload.py $dir 2
EOF
    systemctl daemon-reload
    systemctl start "$unit" && wait_for 60 test -s "$dir/pid" || {
        echo "$unit did not start"
        back
        return 1
    }
    pid=$(cat "$dir/pid")
    # The administrator's own run-time value first.
    systemctl set-property --runtime "$unit" AllowedCPUs=0-7
    admins=$(cat "$ctl/50-AllowedCPUs.conf")
    iso_rule_for 83-vm-dropin.toml vm-dropin vmwork-dr 6-7
    wait_for 30 isolated_is 6-7 || {
        echo "precondition: not isolated 30 s after the rule: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        back
        return 1
    }
    grep -q 'AllowedCPUs=6-7' "$ctl/50-AllowedCPUs.conf" || {
        echo "while held, $ctl/50-AllowedCPUs.conf reads: $(cat "$ctl/50-AllowedCPUs.conf" 2>&1 | tr '\n' ' ')"
        back
        return 1
    }
    rm -f "$RULES/83-vm-dropin.toml"
    wait_for 20 bash -c 'isolated_is "" && [ "$(systemctl show -p AllowedCPUs --value "$1")" = 0-7 ]' _ "$unit" || {
        echo "20 s after the rule went: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', AllowedCPUs '$(systemctl show -p AllowedCPUs --value "$unit")', want the administrator's 0-7"
        back
        return 1
    }
    [ "$(cat "$ctl/50-AllowedCPUs.conf" 2>&1)" = "$admins" ] || {
        echo "the administrator's runtime drop-in not put back: $(cat "$ctl/50-AllowedCPUs.conf" 2>&1 | tr '\n' ' ') (was: $(tr '\n' ' ' <<<"$admins"))"
        back
        return 1
    }
    # The administrator takes it back; then a hold of a unit with no runtime value.
    rm -rf "$ctl"
    systemctl daemon-reload
    iso_rule_for 83-vm-dropin.toml vm-dropin vmwork-dr 6-7
    wait_for 30 isolated_is 6-7 || {
        echo "not isolated 30 s after the rule came back: '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)'"
        back
        return 1
    }
    rm -f "$RULES/83-vm-dropin.toml"
    wait_for 20 let_go_done "$unit" || {
        echo "20 s after the rule went again: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', AllowedCPUs '$(systemctl show -p AllowedCPUs --value "$unit")'"
        back
        return 1
    }
    [ ! -e "$ctl/50-AllowedCPUs.conf" ] || {
        echo "after let-go $ctl/50-AllowedCPUs.conf is left: $(tr '\n' ' ' <"$ctl/50-AllowedCPUs.conf")"
        back
        return 1
    }
    sed -i 's/^\[Service\]$/[Service]\nAllowedCPUs=2-3/' "$file"
    systemctl daemon-reload
    wait_for 10 bash -c '[ "$(systemctl show -p AllowedCPUs --value "$1")" = 2-3 ]' _ "$unit" || {
        echo "the unit file's AllowedCPUs=2-3 after daemon-reload: AllowedCPUs '$(systemctl show -p AllowedCPUs --value "$unit")', masks $(masks "$pid"); drop-ins: $(systemctl show -p DropInPaths --value "$unit")"
        back
        return 1
    }
    local eff masks_now
    eff=$(systemctl show -p EffectiveCPUs --value "$unit")
    masks_now=$(masks "$pid")
    back
    echo "the administrator's runtime AllowedCPUs=0-7 drop-in put back byte for byte after a hold; without one, no 50-AllowedCPUs.conf left after let-go, and the unit file's AllowedCPUs=2-3 took effect at daemon-reload (EffectiveCPUs '$eff', masks $masks_now)"
}

# A service in a slice of its own (Slice=trading.slice) under an isolate rule. As
# shipped, the units may write only below system.slice, user.slice and machine.slice:
# `check` and `plan --live` say the daemon's refusal in its own words, and the daemon
# changes nothing. With the drop-in docs/sharing.md gives ("A slice of its own") on both
# units, all three say it is isolated, and it is; removing the rule leaves nothing.
check_isolate_own_slice() {
    local pid dir=$WORK/own-slice why_check why_plan why_daemon plan2 ex cg state held
    local d1=/run/systemd/system/pinnerd.service.d d2=/run/systemd/system/pinnerd-partition@.service.d
    no_partitions && return 77
    isolated_is "" || {
        echo "precondition: CPUs $(cat /sys/fs/cgroup/cpuset.cpus.isolated) already isolated"
        return 1
    }
    explain() { bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$1" | jq -r '.data[0]'; }
    back() {
        rm -f "$RULES/80-vm-own-slice.toml" "$d1/90-vm-trading-slice.conf" "$d2/90-vm-trading-slice.conf"
        wait_for 20 isolated_is ""
        systemctl stop vmwork-slc.service 2>/dev/null
        systemctl daemon-reload
        systemctl restart pinnerd.service
        wait_for 60 prop_is State '"ready"'
    }
    rm -rf "$dir"
    mkdir -p "$dir/rules"
    ln -sf /usr/bin/python3 /usr/local/bin/vmwork-slc
    systemd-run --quiet --unit=vmwork-slc --slice=trading.slice --service-type=simple \
        /usr/local/bin/vmwork-slc "$LIB/workload.py" "$dir" 2 || {
        echo "vmwork-slc did not start"
        return 1
    }
    wait_for 60 test -s "$dir/pid" || {
        echo "vmwork-slc wrote no pid"
        back
        return 1
    }
    pid=$(cat "$dir/pid")
    cg=$(awk -F: '$1 == 0 { print $3 }' "/proc/$pid/cgroup")
    printf '%s\n' '[[rule]]' 'name = "vm-own-slice"' '[rule.match]' 'comm = "vmwork-slc"' \
        'unit = "vmwork-slc.service"' '[rule.place]' 'cpus = "6-7"' 'exclusive = true' \
        'isolate = true' >"$dir/rules/80-vm-own-slice.toml"
    # As shipped: the three say the same refusal.
    why_check=$(pinnerd check "$dir/rules" 2>&1 | grep -o 'not isolated: .*; the rule stays merely exclusive')
    why_plan=$(pinnerd plan --live --rules "$dir/rules" 2>&1 | grep -o 'not isolated: .*; the rule stays merely exclusive')
    put_rule 80-vm-own-slice.toml <"$dir/rules/80-vm-own-slice.toml"
    wait_for 30 sh -c "busctl --system --json=short call $BUS $OBJ $IFACE Explain u $pid | grep -q 'not isolated'"
    why_daemon=$(explain "$pid" | grep -o 'not isolated: .*; the rule stays merely exclusive')
    case $why_daemon in *"/sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive: read-only file system"*) ;; *)
        echo "$cg: Explain does not say trading.slice is read-only: $(explain "$pid" | tr '\n' ' ' | head -c 600)"
        back
        return 1
        ;;
    esac
    [ "$why_check" = "$why_daemon" ] && [ "$why_plan" = "$why_daemon" ] || {
        echo "the daemon: '$why_daemon'; check: '$why_check'; plan --live: '$why_plan'"
        back
        return 1
    }
    # Refused before anything changed: the unit never confined (systemd keeps a drop-in
    # of every property set on it at run time, even once reset: a transient unit's in
    # /run/systemd/transient), nothing granted.
    ex=$(cat /sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive 2>/dev/null)
    isolated_is "" && [ -z "$ex" ] && [ -z "$(systemctl show -p AllowedCPUs --value vmwork-slc.service)" ] &&
        [ ! -e /run/systemd/system.control/vmwork-slc.service.d ] &&
        [ ! -e /run/systemd/transient/vmwork-slc.service.d ] || {
        echo "refused, yet changed: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', trading.slice exclusive '$ex', AllowedCPUs '$(systemctl show -p AllowedCPUs --value vmwork-slc.service)', drop-ins: $(ls /run/systemd/system.control/vmwork-slc.service.d /run/systemd/transient/vmwork-slc.service.d 2>&1 | tr '\n' ' ')"
        back
        return 1
    }
    # The drop-in the docs give, on both units.
    rm -f "$RULES/80-vm-own-slice.toml"
    mkdir -p "$d1" "$d2"
    printf '[Service]\nReadWritePaths=-/sys/fs/cgroup/trading.slice\n' >"$d1/90-vm-trading-slice.conf"
    cp "$d1/90-vm-trading-slice.conf" "$d2/"
    systemctl daemon-reload
    systemctl restart pinnerd.service
    wait_for 60 prop_is State '"ready"'
    plan2=$(pinnerd plan --live --rules "$dir/rules" 2>&1 | grep -E "unit vmwork-slc.service" | head -1)
    [ -z "$(pinnerd check "$dir/rules" 2>&1 | grep 'not isolated')" ] && grep -q 'CPUs 6-7 would be isolated' <<<"$plan2" || {
        echo "with the drop-in: plan --live: '$plan2'; check: $(pinnerd check "$dir/rules" 2>&1 | tr '\n' ' ')"
        back
        return 1
    }
    put_rule 80-vm-own-slice.toml <"$dir/rules/80-vm-own-slice.toml"
    wait_for 30 isolated_is 6-7 || {
        echo "with the drop-in: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 30 s after the rule; Explain: $(explain "$pid" | tr '\n' ' ' | head -c 600)"
        back
        return 1
    }
    state=$(cat "/sys/fs/cgroup$cg/cpuset.cpus.partition")
    held=$(explain "$pid" | grep -o 'held: .*' | head -1)
    grep -q 'CPUs 6-7 isolated' <<<"$held" || {
        echo "isolated, yet Explain says: $held"
        back
        return 1
    }
    rm -f "$RULES/80-vm-own-slice.toml"
    wait_for 20 isolated_is "" && [ -z "$(cat /sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive 2>/dev/null)" ] || {
        echo "20 s after the rule went: isolated '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)', trading.slice exclusive '$(cat /sys/fs/cgroup/trading.slice/cpuset.cpus.exclusive 2>&1)'"
        back
        return 1
    }
    back
    echo "as shipped, check, plan --live and the daemon said: '$why_daemon' (nothing changed); with ReadWritePaths=-/sys/fs/cgroup/trading.slice on both units: plan --live '$plan2'; $cg $state, $held; rule removed: nothing isolated, trading.slice exclusive empty"
}

# exclusive_set: every cgroup whose cpuset.cpus.exclusive is not empty, "PATH=CPUS" a
# line, sorted.
exclusive_set() {
    python3 - <<'PY' | sort
import os
for d, _, files in os.walk("/sys/fs/cgroup"):
    if "cpuset.cpus.exclusive" in files:
        try:
            with open(os.path.join(d, "cpuset.cpus.exclusive")) as f:
                v = f.read().strip()
        except OSError:
            continue
        if v:
            print(f"{d}={v}")
PY
}
# kernel_trouble SINCE: the lines of dmesg after line SINCE that report a warning, a
# BUG, list corruption, an oops or a lockup.
kernel_trouble() {
    dmesg | tail -n +"$(($1 + 1))" |
        grep -E 'WARNING:|BUG:|kernel BUG|list_add corruption|list_del corruption|Oops|soft lockup|hard LOCKUP|general protection' || true
}
# churn_rule CPUS: every churn-N.service's main process, isolated on CPUS.
churn_rule() {
    put_rule 82-vm-churn.toml <<EOF
[[rule]]
name = "vm-churn"
[rule.match]
unit = "churn-*.service"
[rule.place]
cpus = "$1"
exclusive = true
isolate = true
EOF
}
# no_exclusive_beyond FILE: no cgroup has exclusive CPUs that FILE (an exclusive_set
# taken before) did not list.
no_exclusive_beyond() { [ -z "$(comm -13 "$1" <(exclusive_set))" ]; }
# churn_units: the churn services systemd still has.
churn_units() { systemctl list-units --all --no-legend --plain 'churn-*' | grep -c .; }
export -f exclusive_set kernel_trouble churn_rule no_exclusive_beyond churn_units

# 50 short-lived services held isolated, half of them killed, the rule removed, put back
# on other CPUs and moved again meanwhile: the kernel says nothing, and nothing stays
# isolated or granted afterwards (a removed partition once left 2-3 isolated for
# nobody, and the next partition write crashed the kernel).
check_isolate_churn_no_leak() {
    local kmsg excl=$WORK/churn-exclusive-before seen=$WORK/churn-seen i life trouble
    no_partitions && return 77
    isolated_is "" || {
        echo "precondition: CPUs $(cat /sys/fs/cgroup/cpuset.cpus.isolated) already isolated"
        return 1
    }
    exclusive_set >"$excl"
    kmsg=$(dmesg | wc -l)
    # What was isolated at any time during the churn: the check exercised partitions.
    touch "$WORK/churn-on"
    (
        while [ -e "$WORK/churn-on" ]; do
            cat /sys/fs/cgroup/cpuset.cpus.isolated
            sleep 0.1
        done | grep . | sort -u >"$seen"
    ) &
    churn_rule 2-3
    for i in $(seq 1 50); do
        # Lives 1 to 5 s; every other one is killed halfway.
        life=$((i % 5 + 1))
        systemd-run --quiet --unit="churn-$i" --collect sleep "$life" || {
            echo "systemd-run churn-$i failed"
            break
        }
        if [ $((i % 2)) -eq 0 ]; then
            (sleep "$(awk -v l="$life" 'BEGIN { print l / 2 }')" &&
                systemctl kill --signal=KILL "churn-$i.service" 2>/dev/null) &
        fi
        case $i in
        20) rm -f "$RULES/82-vm-churn.toml" ;;
        28) churn_rule 4-5 ;;
        40) churn_rule 2-3 ;;
        esac
        sleep 0.4
    done
    rm -f "$RULES/82-vm-churn.toml"
    wait_for 10 sh -c '[ "$(churn_units)" -eq 0 ]'
    rm -f "$WORK/churn-on"
    wait
    systemctl stop 'churn-*' 2>/dev/null
    systemctl reset-failed 'churn-*' 2>/dev/null
    wait_for 20 isolated_is "" || {
        echo "cpuset.cpus.isolated still '$(cat /sys/fs/cgroup/cpuset.cpus.isolated)' 20 s after the churn ended; the daemon said: $(journalctl -b -u pinnerd.service --no-pager -o cat | grep -E 'still isolated|being removed' | tail -3 | tr '\n' ' ')"
        return 1
    }
    wait_for 20 no_exclusive_beyond "$excl" || {
        echo "cpuset.cpus.exclusive left after the churn: $(comm -13 "$excl" <(exclusive_set) | tr '\n' ' ')"
        return 1
    }
    trouble=$(kernel_trouble "$kmsg")
    [ -z "$trouble" ] || {
        echo "the kernel reported during the churn: $(head -5 <<<"$trouble" | tr '\n' ' ')"
        return 1
    }
    [ -s "$seen" ] || {
        echo "no churn service was ever isolated, nothing was exercised: $(journalctl -b -u pinnerd.service --no-pager -o cat | grep -i churn | tail -3 | tr '\n' ' ')"
        return 1
    }
    echo "50 services (25 killed), the rule removed, put back on 4-5 and moved to 2-3: isolated at times $(tr '\n' ' ' <"$seen" | sed 's/ $//'); afterwards nothing isolated, no cpuset.cpus.exclusive beyond what was there before, no kernel warning"
}

# isolated_trace FLAG OUT: while FLAG exists, polls cpuset.cpus.isolated every 20 ms and
# appends every value it changes to to OUT ("-" for none), one line each.
isolated_trace() {
    python3 - "$1" >"$2" <<'PY'
import os, sys, time
flag, last = sys.argv[1], None
while os.path.exists(flag):
    with open("/sys/fs/cgroup/cpuset.cpus.isolated") as f:
        now = f.read().strip() or "-"
    if now != last:
        print(now, flush=True)
        last = now
    time.sleep(0.02)
PY
}
isolated_not_empty() { [ -n "$(cat /sys/fs/cgroup/cpuset.cpus.isolated 2>/dev/null)" ]; }
# cpu_list CPU...: the CPUs in the kernel's list format ("1-2,4").
cpu_list() {
    printf '%s\n' "$@" | sort -nu | awk '
        NR == 1 { a = b = $1; next }
        $1 == b + 1 { b = $1; next }
        { out = out (a == b ? a : a "-" b) ","; a = b = $1 }
        END { if (NR) print out (a == b ? a : a "-" b) }'
}
export -f isolated_trace isolated_not_empty cpu_list

# The market-data example's form (config/pinnerd.d/10-market-data.toml) with
# `isolate = true` and `memory = "follow"`: a count, smt = "avoid", exclusive. The
# process's memory is on node 1. Its hold makes the unit's cpuset the rule's own CPUs,
# whose siblings are outside it: planned in that cpuset the rule had no CPU left, let
# go and was held again every ~0.7 s, its memory moved to and fro. Wanted: isolated
# once, where its memory is, and unchanged for 10 s; the memory not moved.
check_isolate_count_smt_settles() {
    local pid trace=$WORK/iso-md-trace flag=$WORK/iso-md-on changes held why on moves
    no_partitions && return 77
    isolated_is "" || {
        echo "precondition: CPUs $(cat /sys/fs/cgroup/cpuset.cpus.isolated) already isolated"
        return 1
    }
    pid=$(start_memworker vmiso-md 128 taskset -c 4-7) || {
        echo "$pid"
        return 1
    }
    on=$(anon_on "$pid" 1)
    [ "$on" -ge 90 ] || {
        echo "precondition: only $on% of its anonymous memory is on node 1"
        systemctl stop vmiso-md 2>/dev/null
        return 1
    }
    touch "$flag"
    isolated_trace "$flag" "$trace" &
    put_rule 81-vm-iso-md.toml <<'EOF'
[[rule]]
name = "vm-iso-md"
priority = 50
[rule.match]
comm = "vmiso-md"
unit = "vmiso-md.service"
[rule.place]
count = 2
policy = "compact"
smt = "avoid"
exclusive = true
isolate = true
memory = "follow"
EOF
    wait_for 30 isolated_not_empty
    held=$(cat /sys/fs/cgroup/cpuset.cpus.isolated)
    sleep 10
    rm -f "$flag"
    wait
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    on=$(anon_on "$pid" 1)
    moves=$(journalctl -b --no-pager -o cat -u pinnerd.service | grep -c "pid $pid: memory follow: moving" || true)
    changes=$(grep -vc '^-$' "$trace" || true)
    rm -f "$RULES/81-vm-iso-md.toml"
    wait_for 20 isolated_is ""
    systemctl stop vmiso-md 2>/dev/null
    [ -n "$held" ] && [ "$changes" -eq 1 ] && [ "$(tail -1 "$trace")" = "$held" ] || {
        echo "cpuset.cpus.isolated went through: $(tr '\n' ' ' <"$trace")(want '-' then one list, kept 10 s); Explain: $why"
        return 1
    }
    [ "$held" = "4,6" ] || {
        echo "isolated $held, want 4,6: one CPU per core of node 1, where its memory is; Explain: $why"
        return 1
    }
    [ "$on" -ge 90 ] && [ "$moves" -le 1 ] || {
        echo "its memory moved: $on% on node 1 after 10 s, $moves memory-follow jobs; Explain: $why"
        return 1
    }
    grep -q "held: unit vmiso-md.service: AllowedCPUs=4,6, AllowedMemoryNodes=1 (set by pinnerd); CPUs 4,6 isolated" <<<"$why" || {
        echo "Explain does not say the unit is held and isolated on 4,6: $why"
        return 1
    }
    grep -q "planned as without the hold" <<<"$why" || {
        echo "Explain does not say the cpuset is the hold's: $why"
        return 1
    }
    echo "isolated $held once ($(tr '\n' ' ' <"$trace")) and unchanged for 10 s; $on% of its memory on node 1, $moves memory-follow jobs; Explain: $(grep -o 'held: .*' <<<"$why" | head -1) | $(grep -o 'cpuset .*' <<<"$why" | head -1)"
}

# The DPDK example's form (config/pinnerd.d/50-dpdk.toml) with `isolate = true` on its
# thread entry: the entry's slots join the process's partition with the [rule.place]
# CPU, once (it isolated 0,2,4, let go, then isolated the [rule.place] CPU alone and left
# the workers unplaced); CPU 0, the system's, stays out; the workers stay on their slots.
check_isolate_thread_entry() {
    local pid trace=$WORK/iso-dpdk-trace flag=$WORK/iso-dpdk-on changes held why w1 w2 m1 m2 main
    no_partitions && return 77
    isolated_is "" || {
        echo "precondition: CPUs $(cat /sys/fs/cgroup/cpuset.cpus.isolated) already isolated"
        return 1
    }
    pid=$(start_workload vmiso-dpdk 1 lcore-worker-) || {
        echo "$pid"
        return 1
    }
    open_tick
    new_thread vmiso-dpdk && w1=$NEW_TID && new_thread vmiso-dpdk && w2=$NEW_TID || {
        systemctl stop vmiso-dpdk 2>/dev/null
        return 1
    }
    touch "$flag"
    isolated_trace "$flag" "$trace" &
    put_rule 82-vm-iso-dpdk.toml <<'EOF'
[[rule]]
name = "vm-iso-dpdk"
priority = 100
[rule.match]
comm = "vmiso-dpdk"
unit = "vmiso-dpdk.service"
[rule.place]
cpus = "1"
exclusive = true
[[rule.threads]]
comm = "lcore-worker-*"
count = 1
within = "2-7"
smt = "avoid"
exclusive = true
isolate = true
EOF
    wait_for 30 isolated_not_empty
    held=$(cat /sys/fs/cgroup/cpuset.cpus.isolated)
    sleep 10
    rm -f "$flag"
    wait
    read_mask "$pid" "$w1" && m1=$MASK
    read_mask "$pid" "$w2" && m2=$MASK
    read_mask "$pid" "$pid" && main=$MASK
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    changes=$(grep -vc '^-$' "$trace" || true)
    rm -f "$RULES/82-vm-iso-dpdk.toml"
    wait_for 20 isolated_is ""
    systemctl stop vmiso-dpdk 2>/dev/null
    [ -n "$held" ] && [ "$changes" -eq 1 ] && [ "$(tail -1 "$trace")" = "$held" ] || {
        echo "cpuset.cpus.isolated went through: $(tr '\n' ' ' <"$trace")(want '-' then one list, kept 10 s); Explain: $why"
        return 1
    }
    # One CPU each, of 2-7, on cores of their own; the main thread on 1.
    case "$m1 $m2" in [2-7]\ [2-7]) ;; *) m1=bad ;; esac
    [ "$m1" != bad ] && [ "$m1" != "$m2" ] && ! expand "$(siblings "$m1")" | grep -qx "$m2" &&
        [ "$main" = 1 ] || {
        echo "workers on '$m1' and '$m2' (want one CPU each of 2-7, not siblings), main thread on '$main' (want 1): $(masks "$pid"); Explain: $why"
        return 1
    }
    [ "$held" = "$(cpu_list 1 "$m1" "$m2")" ] || {
        echo "isolated $held, want $(cpu_list 1 "$m1" "$m2"): the [rule.place] CPU 1 and the workers' slots $m1 and $m2 (CPU 0 never); Explain: $why"
        return 1
    }
    ! grep -q 'do not fit' <<<"$why" || {
        echo "Explain says a unit does not fit: $why"
        return 1
    }
    echo "isolated $held once ($(tr '\n' ' ' <"$trace")) and unchanged for 10 s, CPU 0 not; lcore-worker-1 on $m1, lcore-worker-2 on $m2, the main thread on $main; Explain: $(grep -o 'held: .*' <<<"$why" | head -1)"
}

check_unit_born_in_place() {
    local dir=$WORK/vmborn pid r cpus mems pct why before_cpus before_pct
    rm -rf "$dir"
    mkdir -p "$dir"
    ln -sf /usr/bin/python3 /usr/local/bin/vmborn
    # ExecReload= is a process the unit starts later, forked by systemd: it does not
    # inherit the mask pinnerd gave the main process. born-first.sh notes its CPUs in
    # shell builtins before anything else (a Python start takes long enough for pinnerd
    # to have pinned it first).
    systemd-run --quiet --unit=vmborn --service-type=simple \
        -p "ExecReload=/bin/sh $LIB/born-first.sh $dir" \
        /usr/local/bin/vmborn "$LIB/born.py" "$dir" || {
        echo "systemd-run vmborn failed"
        return 1
    }
    wait_for 60 test -s "$dir/pid" || {
        echo "vmborn did not start: $(systemctl status --no-pager --full vmborn.service 2>&1 | head -n 20)"
        systemctl stop vmborn.service 2>/dev/null
        return 1
    }
    pid=$(cat "$dir/pid")
    # born: reloads the unit (systemd starts a child) and prints what the child saw.
    born() {
        rm -f "$dir/reload.json" "$dir/first"
        systemctl reload vmborn.service || return 1
        wait_for 60 test -s "$dir/reload.json" || return 1
        cat "$dir/reload.json"
    }
    # What happens today first: the same rule without unit-cpuset.
    put_rule 81-vm-born.toml <<'EOF'
[[rule]]
name = "vm-born"
[rule.match]
unit = "vmborn.service"
[rule.place]
cpus = "4-5"
memory = "follow"
EOF
    wait_for 20 mask_is "$pid" 4-5 || {
        echo "precondition: vmborn not pinned to 4-5 but $(masks "$pid")"
        rm -f "$RULES/81-vm-born.toml"
        systemctl stop vmborn.service
        return 1
    }
    r=$(born) || {
        echo "the unit's reload child did not report"
        rm -f "$RULES/81-vm-born.toml"
        systemctl stop vmborn.service
        return 1
    }
    before_cpus=$(jq -r '.first.Cpus_allowed_list_at_start' <<<"$r")
    before_pct=$(jq '(.pages["1"] // 0) * 100 / ([.pages[]] | add) | floor' <<<"$r")
    put_rule 81-vm-born.toml <<'EOF'
[[rule]]
name = "vm-born"
[rule.match]
unit = "vmborn.service"
[rule.place]
cpus = "4-5"
memory = "follow"
unit-cpuset = true
EOF
    wait_for 20 sh -c '[ "$(systemctl show -p AllowedCPUs --value vmborn.service)" = 4-5 ]' || {
        echo "AllowedCPUs of vmborn.service is '$(systemctl show -p AllowedCPUs --value vmborn.service)' 20 s after unit-cpuset, want 4-5; Explain: $(bus call "$BUS" "$OBJ" "$IFACE" Explain u "$pid")"
        rm -f "$RULES/81-vm-born.toml"
        systemctl stop vmborn.service
        return 1
    }
    mems=$(systemctl show -p AllowedMemoryNodes --value vmborn.service)
    r=$(born) || {
        echo "the unit's reload child did not report"
        rm -f "$RULES/81-vm-born.toml"
        systemctl stop vmborn.service
        return 1
    }
    cpus=$(jq -r '.first.Cpus_allowed_list_at_start' <<<"$r")
    pct=$(jq '(.pages["1"] // 0) * 100 / ([.pages[]] | add) | floor' <<<"$r")
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    rm -f "$RULES/81-vm-born.toml"
    [ "$cpus" = 4-5 ] && [ "$pct" -ge 95 ] && [ "$mems" = 1 ] || {
        echo "with unit-cpuset (AllowedCPUs=4-5, AllowedMemoryNodes=$mems): the child's first Cpus_allowed_list $cpus, $pct% of its pages on node 1; Explain: $why"
        systemctl stop vmborn.service
        return 1
    }
    grep -qF 'held: unit vmborn.service: AllowedCPUs=4-5, AllowedMemoryNodes=1 (set by pinnerd)' <<<"$why" || {
        echo "Explain does not say the unit is held: $why"
        systemctl stop vmborn.service
        return 1
    }
    wait_for 20 sh -c '[ -z "$(systemctl show -p AllowedCPUs --value vmborn.service)" ]' || {
        echo "AllowedCPUs of vmborn.service still '$(systemctl show -p AllowedCPUs --value vmborn.service)' 20 s after the rule went"
        systemctl stop vmborn.service
        return 1
    }
    wait_for 20 mask_is "$pid" "$ALL_CPUS" || {
        echo "after the rule went vmborn is on $(masks "$pid"), want $ALL_CPUS"
        systemctl stop vmborn.service
        return 1
    }
    systemctl stop vmborn.service
    echo "unit-cpuset: a process the unit started read Cpus_allowed_list $cpus first thing and has $pct% of its pages on node 1 (AllowedCPUs=4-5, AllowedMemoryNodes=$mems); without unit-cpuset (pinned after the fact): $before_cpus first, $before_pct% on node 1; let go: AllowedCPUs reset, the main process back on $ALL_CPUS"
}

# ---------------------------------------------------------------- containers (NRI)
# Through containerd's CRI plugin (tests/vm/guest/cri.py), the path a kubelet takes: pods
# on the host's network, one image made on the host from busybox-static (run.sh).
export CRI="$LIB/cri.py" IMAGE=docker.io/pinnerd-vm/busybox:1
# The container's command: its first action reads its own Cpus_allowed_list with shell
# builtins (no process started before the read), then the uptime, and prints both
# ("first LIST UPTIME"); then it sleeps as the same pid.
export READ_MASK='while read -r k v; do [ "$k" = Cpus_allowed_list: ] && m=$v; done </proc/self/status'
export FIRST_READ="$READ_MASK"'; read -r up _ </proc/uptime; echo "first $m $up"; exec sleep 1000000'
# The same, then, if it read every CPU, it keeps reading its mask (builtins, busy) until
# that changes or 30 s pass, and prints "moved LIST UPTIME": how long after its first
# instruction it was placed, measured from inside.
export MOVED_READ="$READ_MASK"'; read -r up _ </proc/uptime; echo "first $m $up"; f=$m; t=$up; while [ "$m" = "$f" ] && [ "$f" = '"$ALL_CPUS"' ]; do '"$READ_MASK"'; read -r t _ </proc/uptime; [ "${t%.*}" -gt $((${up%.*} + 30)) ] && break; done; echo "moved $m $t"; exec sleep 1000000'
# A container with threads (python3, from the host's /usr mounted read-only: the image
# is busybox alone): after FIRST_READ's read it starts two threads that name themselves
# rx-0 and rx-1 and then read their own Cpus_allowed_list every millisecond until it is
# one CPU (30 s at most); it prints "threads UPTIME" once both are named, then "placed
# UPTIME LIST LIST", the uptime when the later of the two saw its one CPU, and sleeps.
# The program is the script's $1.
export THREADS_READ="$READ_MASK"'; read -r up _ </proc/uptime; echo "first $m $up"; exec /usr/bin/python3 -c "$1"'
export RX_PY='import threading, time
def up():
    return float(open("/proc/uptime").read().split()[0])
def mask():
    for line in open("/proc/thread-self/status"):
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[1]
def rx(i, named, placed):
    open("/proc/self/task/%d/comm" % threading.get_native_id(), "w").write("rx-%d" % i)
    named.set()
    t0 = up()
    m = mask()
    while ("-" in m or "," in m) and up() < t0 + 30:
        time.sleep(0.001)
        m = mask()
    placed.append((up(), m))
    time.sleep(1e6)
ev, placed = [threading.Event() for i in range(2)], []
for i, e in enumerate(ev):
    threading.Thread(target=rx, args=(i, e, placed), daemon=True).start()
for e in ev:
    e.wait()
print("threads", "%.2f" % up(), flush=True)
while len(placed) < 2:
    time.sleep(0.01)
print("placed", "%.2f" % max(p[0] for p in placed), " ".join(p[1] for p in placed), flush=True)
time.sleep(1e6)'
export HOST_USR="--mount /usr:/usr --mount /usr/lib:/lib --mount /usr/lib64:/lib64"
# ctr_run POD NAME [SCRIPT [ARG...]]: creates and starts container NAME in POD running
# SCRIPT (FIRST_READ) with ARGs, back to back as a kubelet does (CTR_OPTS: cri.py's
# options, e.g. HOST_USR); sets CID, CPID (its process), CLOG (its CRI log), FIRST (the
# list it read first) and FIRST_UP (the uptime then); fails saying why.
ctr_run() {
    local i line st
    # shellcheck disable=SC2086 # CTR_OPTS is words
    CID=$("$CRI" run "$1" "$2" "$IMAGE" ${CTR_OPTS:-} -- /bin/sh -c "${3:-$FIRST_READ}" sh "${@:4}" 2>&1) || {
        echo "CreateContainer/StartContainer $2: $CID"
        return 1
    }
    st=$("$CRI" status "$CID") || return 1
    CPID=$(jq -r '.pid // empty' <<<"$st")
    CLOG=$(jq -r '.log_path' <<<"$st")
    FIRST=
    for i in $(seq 1 600); do
        line=$(ctr_said first)
        if [ -n "$line" ]; then
            read -r _ FIRST FIRST_UP <<<"$line"
            return 0
        fi
        sleep 0.1
    done
    echo "container $2 printed no Cpus_allowed_list in 60 s: $st; its log: $(tail -c 300 "$CLOG" 2>&1)"
    return 1
}
# ctr_said WORD: the first line of the last container's output that starts with WORD
# (the CRI log's lines are "TIME STREAM TAG TEXT").
ctr_said() { cut -d ' ' -f 4- "$CLOG" 2>/dev/null | grep -m 1 "^$1 "; }
# ctr_cpuset PID: cpuset.cpus of the process's cgroup (what the runtime wrote for it).
ctr_cpuset() {
    local cg
    cg=$(sed -n 's/^0:://p' "/proc/$1/cgroup")
    cat "/sys/fs/cgroup$cg/cpuset.cpus" 2>/dev/null
}
# list_of: the kernel's list format ("4-5,7") of CPU numbers read one a line.
list_of() { sort -n | uniq | awk 'NR == 1 { s = p = $1; next } $1 == p + 1 { p = $1; next } { printf "%s%s,", s, (s == p ? "" : "-" p); s = p = $1 } END { if (NR) printf "%s%s\n", s, (s == p ? "" : "-" p) }'; }
# rx_on_slots PID CPUS: the threads rx-* of PID are two, each on one CPU of CPUS, no two
# on the same; RX = "tid (comm): list" for each.
rx_on_slots() {
    local t c l n=0 seen=" "
    RX=
    for t in /proc/"$1"/task/*; do
        read -r c <"$t/comm" 2>/dev/null || continue
        case $c in rx-*) ;; *) continue ;; esac
        l=$(awk '/^Cpus_allowed_list:/ { print $2 }' "$t/status" 2>/dev/null)
        RX="$RX${RX:+, }${t##*/} ($c): $l"
        n=$((n + 1))
        [ "$(expand "$l" | wc -l)" -eq 1 ] && expand "$2" | grep -qx "$l" &&
            [ "${seen#* "$l" }" = "$seen" ] || return 1
        seen="$seen$l "
    done
    [ "$n" -eq 2 ]
}
registrations() { journalctl -b --no-pager -o cat -u pinnerd.service | grep -c 'registered with the container runtime'; }
registered_more() { [ "$(registrations)" -gt "$1" ]; }
export -f ctr_run ctr_said ctr_cpuset list_of rx_on_slots registrations registered_more

check_container_born_in_place() {
    local regs pod cid pid first want cg status t0 nri out
    command -v containerd >/dev/null || {
        echo "containerd is not installed in this image (only Debian 13's has NRI: tests/vm/run.sh)"
        return 77
    }
    # cleanup: pods, the rule, containerd; the kubepods cgroups runc left (a kubelet's).
    cleanup() {
        "$CRI" clean >/dev/null 2>&1
        rm -f "$RULES/85-vm-containers.toml"
        systemctl start pinnerd.service
        systemctl stop containerd.service
        find /sys/fs/cgroup/kubepods -depth -type d -exec rmdir {} + 2>/dev/null
    }
    regs=$(registrations)
    # The rule first, so the daemon has it when the first container comes.
    put_rule 85-vm-containers.toml <<'EOF'
[[rule]]
name = "vm-md-feed"
[rule.match]
container = "md-feed"
pod-namespace = "trading"
pod-labels = { app = "md-feed" }
[rule.place]
count = 2
exclusive = true

[[rule]]
name = "vm-md-threads"
[rule.match]
container = "md-threads"
pod-namespace = "trading"
[rule.place]
count = 2
exclusive = true
[[rule.threads]]
comm = "rx-*"
count = 1
EOF
    systemctl start containerd.service || {
        echo "systemctl start containerd failed: $(journalctl -b -u containerd.service --no-pager -o cat | tail -n 5)"
        cleanup
        return 1
    }
    nri=$(containerd config dump 2>&1 | sed -n '/^  \[plugins."io.containerd.nri.v1.nri"\]/,/^  \[/p' | grep -E '^ +[a-z_]+ =' | tr -s ' \n' ' ')
    wait_for 60 "$CRI" version || {
        echo "CRI not answering on /run/containerd/containerd.sock: $("$CRI" version 2>&1); NRI config: $nri; containerd: $(journalctl -b -u containerd.service --no-pager -o cat | tail -n 8)"
        cleanup
        return 1
    }
    out=$(ctr -n k8s.io images import --snapshotter native "$LIB/busybox-oci.tar" 2>&1) || {
        echo "ctr images import failed: $out"
        cleanup
        return 1
    }
    # Unmatched first: a pod and container no rule names get no adjustment.
    pod=$("$CRI" runp web-0 --namespace default --label app=web 2>&1) || {
        echo "RunPodSandbox web-0: $pod; containerd: $(journalctl -b -u containerd.service --no-pager -o cat | tail -n 8)"
        cleanup
        return 1
    }
    ctr_run "$pod" web || {
        cleanup
        return 1
    }
    pid=$CPID
    cg=$(ctr_cpuset "$pid")
    [ "$FIRST" = "$ALL_CPUS" ] && [ -z "$cg" ] && mask_is "$pid" "$ALL_CPUS" || {
        echo "unmatched container web read $FIRST first (want $ALL_CPUS), its cgroup's cpuset.cpus '$cg' (want empty), now $(masks "$pid")"
        cleanup
        return 1
    }
    local unmatched="unmatched web (pod default/web-0): read $FIRST first, cgroup cpuset.cpus empty"
    # Registered once containerd's NRI socket appeared.
    wait_for 30 registered_more "$regs" || {
        echo "$unmatched; pinnerd did not log 'registered with the container runtime' within 30 s of containerd's start (NRI config: $nri); pinnerd: $(journalctl -b -u pinnerd.service --no-pager -o cat | grep -i -E 'nri|runtime|container' | tail -n 5)"
        cleanup
        return 1
    }
    status=$(pinnerd status 2>&1 | grep -i 'nri:')
    grep -q 'registered with' <<<"$status" || {
        echo "$unmatched; pinnerd status says '$status', want 'nri: registered with ...'"
        cleanup
        return 1
    }
    # placed POD POD_NAME NAME: a matching container NAME in POD reads first the CPUs
    # the daemon reports for it (`pinnerd status`: "container POD_NAME/NAME (pod …):
    # cpuset LIST set at creation by pinnerd …"), which its cgroup's cpuset.cpus is set to.
    placed() {
        local line
        ctr_run "$1" "$3" || return 1
        pid=$CPID
        line=$(pinnerd status 2>&1 | grep -m 1 "^container $2/$3 ")
        want=$(sed -n 's/.*: cpuset \([0-9,-]*\) set at creation by pinnerd.*/\1/p' <<<"$line")
        cg=$(ctr_cpuset "$pid")
        [ -n "$want" ] && [ "$FIRST" = "$want" ] && [ "$cg" = "$want" ] &&
            [ "$(expand "$want" | wc -l)" -eq 2 ] || {
            echo "matched container $3 read $FIRST first, its cgroup's cpuset.cpus '$cg', pinnerd status says '${line:-nothing of it}' (want 2 CPUs, all three equal); explain: $(pinnerd explain "$pid" 2>&1 | tr '\n' ' ')"
            return 1
        }
        PLACED="$3 read $FIRST first = its cgroup's cpuset.cpus = pinnerd status '$line'; explain: $(pinnerd explain "$pid" 2>&1 | grep -i -m 1 'container')"
    }
    pod=$("$CRI" runp api-0 --namespace trading --label app=md-feed 2>&1) || {
        echo "$unmatched; RunPodSandbox api-0: $pod"
        cleanup
        return 1
    }
    placed "$pod" api-0 md-feed || {
        echo "; $unmatched"
        cleanup
        return 1
    }
    local first_placed=$PLACED feed_cpus=$want
    # Threads: a container whose rule has a thread entry; once its threads run, each
    # reaches its slot (one CPU of the container's, its own), read from the host side in
    # /proc/PID/task/*/status. The issue asks for 1 s; the bound here is a hang guard,
    # and the figure is measured from each thread's start (its stat) and from the
    # container's first instruction.
    CTR_OPTS=$HOST_USR ctr_run "$pod" md-threads "$THREADS_READ" "$RX_PY" || {
        echo "; $first_placed"
        cleanup
        return 1
    }
    local tpid=$CPID tline tcpus tfirst=$FIRST_UP threads_up started last=0 tid
    wait_for 60 ctr_said threads || {
        echo "$first_placed; container md-threads started no threads within 60 s: $(tail -c 300 "$CLOG" 2>&1)"
        cleanup
        return 1
    }
    read -r _ threads_up <<<"$(ctr_said threads)"
    tline=$(pinnerd status 2>&1 | grep -m 1 "^container api-0/md-threads ")
    tcpus=$(sed -n 's/.*: cpuset \([0-9,-]*\) set at creation by pinnerd.*/\1/p' <<<"$tline")
    open_tick
    fast_wait 10 rx_on_slots "$tpid" "${tcpus:-none}" || {
        echo "$first_placed; md-threads (pinnerd status '${tline:-nothing of it}', cgroup cpuset.cpus '$(ctr_cpuset "$tpid")'): its rx threads 10 s after they named themselves: ${RX:-none} (want two, each on its own CPU of the container's); explain: $(pinnerd explain "$tpid" 2>&1 | tr '\n' ' ')"
        cleanup
        return 1
    }
    for tid in $(ls "/proc/$tpid/task"); do
        read -r started <"/proc/$tpid/task/$tid/comm"
        case $started in rx-*) ;; *) continue ;; esac
        thread_started_cs "$tpid" "$tid"
        [ "$STARTED_CS" -gt "$last" ] && last=$STARTED_CS
    done
    local threads_placed inside
    wait_for 40 ctr_said placed
    read -r _ inside _ <<<"$(ctr_said placed)"
    threads_placed="md-threads (cpuset $tcpus at creation): $RX; from inside, the later rx thread saw its one CPU $(elapsed "$threads_up" "${inside:-nan}") s after both were named ($(elapsed "$tfirst" "${inside:-nan}") s after the container's first instruction; python3 took $(elapsed "$tfirst" "$threads_up") s to start them); the host, looking after the steps above, saw both on their slots $(cs_fmt $((DONE_CS - last))) s after the later thread started"
    # The same, short, for the line that says the check passed (800 characters).
    local threads_short
    threads_short="md-threads on $tcpus: rx $(tr -d ' ' <<<"$RX" | sed 's/([^)]*)//g'), on their CPUs $(elapsed "$threads_up" "${inside:-nan}") s after being named (inside; python3 took $(elapsed "$tfirst" "$threads_up") s to start them), host saw it $(cs_fmt $((DONE_CS - last))) s after"
    # plan --live lists the three running containers (not the pods' sandboxes): the
    # cpuset each has, what it would get, who set it.
    local live lines
    live=$(pinnerd plan --live 2>&1)
    lines=$(sed -n '/^running containers/,/^$/p' <<<"$live")
    grep -qE "^  api-0/md-feed \(pod trading/api-0\), pid [0-9]+: cpuset $feed_cpus, would get $feed_cpus \(rule vm-md-feed, if its pod's labels match: they are known only over NRI\); set by pinnerd at creation\$" <<<"$lines" &&
        grep -qE "^  api-0/md-threads \(pod trading/api-0\), pid [0-9]+: cpuset $tcpus, would get $tcpus \(rule vm-md-threads\); set by pinnerd at creation\$" <<<"$lines" &&
        grep -qE "^  web-0/web \(pod default/web-0\), pid [0-9]+: cpuset none set, would get nothing: no rule names it; set by none " <<<"$lines" &&
        [ "$(grep -c '^  ' <<<"$lines")" -eq 3 ] || {
        echo "$first_placed; $threads_placed; pinnerd plan --live's containers (want md-feed on $feed_cpus and md-threads on $tcpus set by pinnerd at creation, web with none, nothing else): ${lines:-none listed: $(tail -n 5 <<<"$live")}"
        cleanup
        return 1
    }
    lines=$(tr '\n' ' ' <<<"$lines" | tr -s ' ')
    "$CRI" clean >/dev/null
    # containerd restarted: registered again, the next container placed.
    regs=$(registrations)
    systemctl restart containerd.service
    t0=$(now)
    wait_for 30 registered_more "$regs" || {
        echo "$first_placed; $unmatched; after systemctl restart containerd pinnerd did not register again within 30 s: $(journalctl -b -u pinnerd.service --no-pager -o cat | grep -i -E 'nri|runtime' | tail -n 5)"
        cleanup
        return 1
    }
    local again
    again=$(elapsed "$t0")
    wait_for 60 "$CRI" version
    pod=$("$CRI" runp api-1 --namespace trading --label app=md-feed 2>&1) || {
        echo "after the restart: RunPodSandbox api-1: $pod"
        cleanup
        return 1
    }
    placed "$pod" api-1 md-feed || {
        echo "(after containerd's restart)"
        cleanup
        return 1
    }
    local second_cpus=$want
    "$CRI" clean >/dev/null
    # pinnerd stopped: containers still start, as without it.
    systemctl stop pinnerd.service
    pod=$("$CRI" runp api-2 --namespace trading --label app=md-feed 2>&1) &&
        ctr_run "$pod" md-feed && [ "$FIRST" = "$ALL_CPUS" ] || {
        echo "with pinnerd stopped, the matching container did not start or read '$FIRST' first (want $ALL_CPUS): $pod"
        cleanup
        return 1
    }
    local stopped=$FIRST
    "$CRI" clean >/dev/null
    # Without NRI ([nri] enable = "off"): the watcher places the same container after the
    # fact; the container says how long after its first instruction. Pod labels are known
    # only over NRI, so the rule names the container and its namespace alone.
    put_rule 85-vm-containers.toml <<'EOF'
[[rule]]
name = "vm-md-feed"
[rule.match]
container = "md-feed"
pod-namespace = "trading"
[rule.place]
count = 2
exclusive = true
EOF
    cp /etc/pinnerd/pinnerd.toml "$WORK/pinnerd.toml.orig"
    printf '\n[nri]\nenable = "off"\n' >>/etc/pinnerd/pinnerd.toml
    systemctl start pinnerd.service
    wait_for 60 prop_is State '"ready"'
    local late line moved
    pod=$("$CRI" runp api-3 --namespace trading --label app=md-feed 2>&1) &&
        ctr_run "$pod" md-feed "$MOVED_READ" &&
        wait_for 40 ctr_said moved || true
    line=$(ctr_said moved)
    # Read before the daemon registers again (it would move the container at Synchronize).
    cg=$(ctr_cpuset "$CPID")
    local why
    why=$(pinnerd explain "$CPID" 2>&1 | tr '\n' ' ')
    cp "$WORK/pinnerd.toml.orig" /etc/pinnerd/pinnerd.toml
    systemctl restart pinnerd.service
    read -r _ moved late <<<"$line"
    [ -n "$moved" ] && [ "$(expand "$moved" | wc -l)" -eq 2 ] && [ -z "$cg" ] || {
        echo "with [nri] enable = \"off\", the matching container read '$FIRST' first, then ${line:-nothing more} (want 2 CPUs within 30 s), its cgroup's cpuset.cpus '$cg' (want empty: no runtime adjustment); explain: $why"
        cleanup
        return 1
    }
    late=$(awk -v a="$FIRST_UP" -v b="$late" 'BEGIN { printf "%.2f", b - a }')
    cleanup
    wait_for 60 prop_is State '"ready"' || true
    echo "md-feed read $feed_cpus first = cgroup = status; $threads_short; plan --live: the 3 as expected; web read $ALL_CPUS, no cpuset; containerd restarted: registered again after $again s, md-feed read $second_cpus first; pinnerd stopped: read $stopped; NRI off: read $FIRST first, on $moved $late s after, no cpuset; $status; NRI config: $nri"
}

# Over the whole boot: systemd never killed the daemon for a missed watchdog ping, and no
# step of its loop took half of WatchdogSec (the loop's warning names each step over a
# second, with PINNERD_STEP= and PINNERD_TOOK_MS=).
check_loop_never_stalled() {
    local kills steps slow longest
    kills=$(journalctl -b --no-pager -o cat -u pinnerd.service | grep -c 'Watchdog timeout')
    steps=$(journalctl -b --no-pager -o json -u pinnerd.service 2>/dev/null |
        jq -r 'select(.PINNERD_TOOK_MS != null and (.MESSAGE | tostring | test("still running") | not))
            | "\(.PINNERD_TOOK_MS) ms \(.PINNERD_STEP)"' |
        sort -n)
    # A step still running at 15 s is said while it runs, whether it ends or not.
    slow=$(journalctl -b --no-pager -o json -u pinnerd.service 2>/dev/null |
        jq -r 'select(.PINNERD_TOOK_MS != null and (.PINNERD_TOOK_MS | tonumber) >= 15000)
            | "\(.PINNERD_TOOK_MS) ms \(.PINNERD_STEP)"' | sort -u)
    longest=$(tail -n 1 <<<"$steps")
    [ "$kills" -eq 0 ] && [ -z "$slow" ] || {
        echo "watchdog kills: $kills; loop steps of 15 s or more: ${slow:-none}"
        return 1
    }
    echo "no watchdog kill; $(grep -c . <<<"$steps") loop steps over 1 s, the longest: ${longest:-none}"
}

# ---------------------------------------------------------------- runner

# irq_reported N: the daemon logged IRQ N as unable to leave (the kernel refused it).
irq_reported() {
    journalctl -b --no-pager -o json -u pinnerd.service 2>/dev/null |
        jq -e --arg n "$1" 'select((.MESSAGE | tostring | test("IRQ cannot leave")) and (.PINNERD_IRQ == $n))' >/dev/null
}
# irqs_on CPUS: the IRQs whose effective affinity touches CPUS (kernel list format)
# and that the daemon did not report as unmovable; prints "N=effective" for each.
irqs_on() {
    local d n eff c want
    want=" $(expand "$1" | tr '\n' ' ')"
    for d in /proc/irq/[0-9]*; do
        n=${d##*/}
        eff=$(cat "$d/effective_affinity_list" 2>/dev/null) || continue
        for c in $(expand "$eff"); do
            if [[ "$want" == *" $c "* ]]; then
                irq_reported "$n" || echo "$n=$eff"
                break
            fi
        done
    done
}
# irqbalance_banned: the CPU mask irqbalance bans now, from its socket's `setup` reply.
irqbalance_banned() {
    python3 -c '
import socket, sys, re
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("/run/irqbalance/irqbalance%s.sock" % sys.argv[1])
s.sendall(b"setup")
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
m = re.search(rb"BANNED ([0-9a-fA-F,]+)", data)
print(m.group(1).decode().replace(",", "").lstrip("0") or "0" if m else "?")
' "$(pgrep -xo irqbalance)"
}
irqbalance_bans_none() { [ "$(irqbalance_banned)" = 0 ]; }
irqbalance_bans() { [ "$(irqbalance_banned)" = "$1" ]; }
# irqs_moved_logged: how many IRQs the daemon's last "IRQs moved away" says it moved;
# fails when it has not said it.
irqs_moved_logged() {
    journalctl -b --no-pager -o json -u pinnerd.service |
        jq -r 'select(.MESSAGE | tostring | test("^IRQs moved away")) | .PINNERD_MOVED' | tail -1 | grep .
}
export -f irq_reported irqs_on irqbalance_banned irqbalance_bans_none irqbalance_bans irqs_moved_logged

check_irqs_away_with_irqbalance() {
    local pid after moved n banned
    systemctl start irqbalance.service 2>&1
    wait_for 30 pgrep -x irqbalance || {
        echo "irqbalance is not running: $(systemctl status --no-pager irqbalance.service 2>&1 | tail -3)"
        return 1
    }
    wait_for 30 test -S "/run/irqbalance/irqbalance$(pgrep -xo irqbalance).sock" || {
        echo "no irqbalance socket: $(ls /run/irqbalance 2>&1)"
        return 1
    }
    pid=$(start_workload vmwork-irq 2) || {
        echo "$pid"
        return 1
    }
    for n in /proc/irq/[0-9]*; do
        echo "${n##*/}=$(cat "$n/smp_affinity_list")"
    done >"$WORK/irqs-before"
    printf '%s\n' '[[rule]]' 'name = "vm-irqs"' '[rule.match]' 'comm = "vmwork-irq"' \
        '[rule.place]' 'cpus = "6-7"' 'exclusive = true' 'irqs = "away"' | put_rule 60-vm-irqs.toml
    wait_for 30 mask_is "$pid" 6-7 || {
        echo "workload not pinned to 6-7: $(masks "$pid")"
        return 1
    }
    wait_for 30 irqs_moved_logged || {
        echo "the daemon did not say it moved IRQs: $(journalctl -b --no-pager -o cat -u pinnerd.service | grep -i irq | tail -3)"
        return 1
    }
    [ "$(irqs_moved_logged)" -gt 0 ] && [ -s /run/pinnerd/irqs.json ] || {
        echo "no IRQ moved (the kernel refused every one?): $(journalctl -b --no-pager -o cat -u pinnerd.service | grep -i irq | tail -5)"
        return 1
    }
    moved=$(jq -r '.[].irq' /run/pinnerd/irqs.json | tr '\n' ' ')
    # irqbalance keeps running: after 30 s no movable IRQ is effective on 6-7.
    sleep 30
    after=$(irqs_on 6-7)
    [ -z "$after" ] || {
        echo "30 s after the rule, IRQs effective on 6-7 not reported as unmovable: $after"
        return 1
    }
    banned=$(irqbalance_banned)
    [ "$banned" = c0 ] || {
        echo "irqbalance bans mask '$banned', want c0 (CPUs 6-7)"
        return 1
    }
    rm -f "$RULES/60-vm-irqs.toml"
    wait_for 30 test ! -e /run/pinnerd/irqs.json || {
        echo "the IRQ journal stayed after the rule went: $(cat /run/pinnerd/irqs.json)"
        return 1
    }
    wait_for 30 irqbalance_bans_none || {
        echo "irqbalance still bans $(irqbalance_banned) after the rule went"
        return 1
    }
    # Back: every IRQ moved has its mask from before the rule again, or irqbalance
    # changed it meanwhile and the daemon said it left it alone (irqbalance places it
    # from here, 6-7 no longer banned).
    for n in $moved; do
        [ "$(cat "/proc/irq/$n/smp_affinity_list")" = "$(sed -n "s/^$n=//p" "$WORK/irqs-before")" ] ||
            journalctl -b --no-pager -o json -u pinnerd.service |
            jq -e --arg n "$n" 'select((.MESSAGE | tostring | test("IRQ mask not restored")) and (.PINNERD_IRQ == $n) and (.PINNERD_WHY | tostring | test("someone else")))' >/dev/null || {
            echo "IRQ $n neither back to $(sed -n "s/^$n=//p" "$WORK/irqs-before") nor left to irqbalance: $(cat "/proc/irq/$n/smp_affinity_list")"
            return 1
        }
    done
    systemctl stop vmwork-irq.service
    echo "IRQs moved: ${moved:-none}; none effective on 6-7 after 30 s with irqbalance running (it banned mask $banned), all back after"
}

# ---------------------------------------------------------------- memory (NUMA)

# anon_on PID NODE: the percentage (integer) of PID's anonymous memory on NODE, from
# /proc/PID/numa_maps (mappings with anon= and no file=; pages times their size).
anon_on() {
    awk -v node="N$2" '
        / anon=/ && !/ file=/ {
            kb = 4
            for (i = 3; i <= NF; i++) if ($i ~ /^kernelpagesize_kB=/) { split($i, p, "="); kb = p[2] }
            for (i = 3; i <= NF; i++) if ($i ~ /^N[0-9]+=/) {
                split($i, p, "="); all += p[2] * kb; if (p[1] == node) on += p[2] * kb
            }
        }
        END { if (all == 0) print 0; else printf "%d\n", 100 * on / all }' "/proc/$1/numa_maps"
}
# anon_mib PID: PID's anonymous memory in MiB.
anon_mib() {
    awk '/ anon=/ && !/ file=/ { kb = 4
            for (i = 3; i <= NF; i++) if ($i ~ /^kernelpagesize_kB=/) { split($i, p, "="); kb = p[2] }
            for (i = 3; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split($i, p, "="); all += p[2] * kb } }
        END { printf "%d\n", all / 1024 }' "/proc/$1/numa_maps"
}
# start_memworker NAME MIB [CMD PREFIX…]: memworker.py as its own service under comm
# NAME, after the prefix (e.g. taskset, pinnerd run); prints its pid.
start_memworker() {
    local name=$1 mib=$2 dir=$WORK/$1
    shift 2
    rm -rf "$dir"
    mkdir -p "$dir"
    ln -sf /usr/bin/python3 "/usr/local/bin/$name"
    systemd-run --quiet --unit="$name" --service-type=simple \
        "$@" "/usr/local/bin/$name" "$LIB/memworker.py" "$dir" "$mib" || return 1
    wait_for 120 test -s "$dir/pid" || {
        echo "memory worker $name did not start: $(systemctl status --no-pager "$name" 2>&1 | tail -5)"
        return 1
    }
    cat "$dir/pid"
}
# The checks run in `bash -c` (run_check): the helpers they call must be exported.
export -f anon_on anon_mib start_memworker

# `pinnerd run --count 2 --within 4-7 --memory bind -- WORKER`: every mapping of the
# worker has the policy bind:1 and its anonymous memory is on node 1 only.
check_run_memory_bind() {
    local pid pol on m
    pid=$(start_memworker vmmem-bind 64 pinnerd run --count 2 --within 4-7 --memory bind --) || {
        echo "$pid"
        return 1
    }
    pol=$(awk '{ print $2 }' "/proc/$pid/numa_maps" | sort -u | tr '\n' ' ')
    on=$(anon_on "$pid" 1)
    m=$(uniform_mask "$pid")
    systemctl stop vmmem-bind 2>/dev/null
    [ "$pol" = "bind:1 " ] || {
        echo "policies in numa_maps: $pol (want bind:1 only)"
        return 1
    }
    [ "$on" -ge 99 ] || {
        echo "only $on% of its anonymous memory is on node 1"
        return 1
    }
    echo "every mapping bind:1; $on% of its anonymous memory on node 1 (CPUs $m)"
}

# A worker whose 256 MiB sit on node 1 (allocated on CPUs 4-7), then allowed on every
# CPU, is matched by a count = 2, smt = "avoid" rule without `within`: it lands on node 1
# (best-fit alone takes node 0) and Explain gives the memory reason.
check_plan_where_memory_is() {
    local pid on why m
    pid=$(start_memworker vmmem-plan 256 taskset -c 4-7) || {
        echo "$pid"
        return 1
    }
    taskset -a -p -c "$ALL_CPUS" "$pid" >/dev/null || return 1
    on=$(anon_on "$pid" 1)
    [ "$on" -ge 90 ] || {
        echo "precondition: only $on% of its anonymous memory is on node 1"
        return 1
    }
    put_rule 70-vm-plan-memory.toml <<'EOF'
[[rule]]
name = "vm-plan-memory"
[rule.match]
comm = "vmmem-plan"
[rule.place]
count = 2
smt = "avoid"
EOF
    on_node1_apart() {
        local m cpus
        m=$(uniform_mask "$1") || return 1
        mapfile -t cpus < <(expand "$m")
        [ "${#cpus[@]}" -eq 2 ] && [ "${cpus[0]}" -ge 4 ] && [ "${cpus[1]}" -le 7 ] &&
            ! expand "$(siblings "${cpus[0]}")" | grep -qx "${cpus[1]}"
    }
    export -f on_node1_apart
    if ! wait_for 20 on_node1_apart "$pid"; then
        echo "threads on $(masks "$pid"), want two non-sibling CPUs of node 1 (4-7); Explain: $(bus call "$BUS" "$OBJ" "$IFACE" Explain u "$pid")"
        return 1
    fi
    m=$(uniform_mask "$pid")
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    rm -f "$RULES/70-vm-plan-memory.toml"
    systemctl stop vmmem-plan 2>/dev/null
    grep -q "node 1 chosen: holds [0-9]*% of its " <<<"$why" || {
        echo "Explain gives no memory reason: $why"
        return 1
    }
    echo "$on% of its memory on node 1; placed on $m; Explain: $(grep -o 'node 1 chosen: .*' <<<"$why" | head -1)"
}

# A worker allocates and touches 256 MiB while confined to CPUs 0-3 (node 0); a rule
# with memory = "follow" then places it on node 1: within 10 s at least 90% of its
# anonymous memory is on node 1 per numa_maps, and Explain says what moved.
check_memory_follows() {
    local pid on t0 why m
    pid=$(start_memworker vmmem-follow 256 taskset -c 0-3) || {
        echo "$pid"
        return 1
    }
    on=$(anon_on "$pid" 0)
    [ "$on" -ge 90 ] || {
        echo "precondition: only $on% of its anonymous memory is on node 0"
        return 1
    }
    t0=$(now)
    put_rule 71-vm-memory-follow.toml <<'EOF'
[[rule]]
name = "vm-memory-follow"
[rule.match]
comm = "vmmem-follow"
[rule.place]
count = 2
within = "4-7"
memory = "follow"
EOF
    mostly_on_node1() { [ "$(anon_on "$1" 1)" -ge 90 ]; }
    export -f mostly_on_node1 anon_on
    if ! wait_for 10 mostly_on_node1 "$pid"; then
        echo "after $(elapsed "$t0") s only $(anon_on "$pid" 1)% of its $(anon_mib "$pid") MiB is on node 1 (threads on $(masks "$pid")); Explain: $(bus call "$BUS" "$OBJ" "$IFACE" Explain u "$pid")"
        rm -f "$RULES/71-vm-memory-follow.toml"
        systemctl stop vmmem-follow 2>/dev/null
        return 1
    fi
    t1=$(elapsed "$t0")
    on=$(anon_on "$pid" 1)
    m=$(uniform_mask "$pid")
    # The job's outcome reaches Explain when it ends.
    has_moved() { bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$1" | jq -r '.data[0]' | grep -q 'memory follow: moved '; }
    export -f has_moved
    wait_for 10 has_moved "$pid"
    why=$(bus --json=short call "$BUS" "$OBJ" "$IFACE" Explain u "$pid" | jq -r '.data[0]')
    rm -f "$RULES/71-vm-memory-follow.toml"
    systemctl stop vmmem-follow 2>/dev/null
    grep -q 'memory follow: moved [0-9.]* [KMG]iB from node 0 to node 1' <<<"$why" || {
        echo "$on% on node 1 after $t1 s, but Explain does not say what moved: $why"
        return 1
    }
    echo "$on% of its anonymous memory on node 1 after $t1 s (CPUs $m); Explain: $(grep -o 'memory follow: .*' <<<"$why" | head -1)"
}

passed=0
failed=0
skipped=0
failed_names=()
# A check that cannot hold on this kernel or systemd (a feature the release lacks) exits
# 77 and says why: it is reported as SKIP with that reason, never passed silently.
# PINNERD_VM_CHECKS (tests/vm/run.sh) names the only checks to run; the others are SKIP
# "not selected", and tests/vm/run.sh fails the run for it unless told that is wanted.
# A boot after the emulator's int3 oops runs only what earlier boots did not finish
# (pinnerd_vm.done, resume.sh), and again as SETUP what those stand on.
selected=$(sed -n 's/.*pinnerd_vm\.checks=\([^ ]*\).*/\1/p' /proc/cmdline)
done_before=$(sed -n 's/.*pinnerd_vm\.done=\([^ ]*\).*/\1/p' /proc/cmdline)
slow_factor=$(sed -n 's/.*pinnerd_vm\.slow=\([0-9]*\).*/\1/p' /proc/cmdline)
slow_factor=${slow_factor:-3}
# shellcheck source=resume.sh
. "$LIB/resume.sh"
run_check() {
    local name=$1 fn=$2 limit=$3 out rc role tag=CHECK
    role=$(check_role "$name" "$done_before" "$selected")
    case $role in
    skip)
        skipped=$((skipped + 1))
        echo "PINNERD-VM CHECK $name SKIP not selected (pinnerd_vm.checks=$selected)"
        return
        ;;
    done) return ;;
    setup) tag=SETUP ;;
    esac
    # Names the check in flight, so that a boot the kernel ends says which one it cut off,
    # and when it started (seconds since boot).
    echo "PINNERD-VM BEGIN $name $(now)"
    export -f "$fn"
    # A check's limit is a guard against a hang, sized for an idle host; a loaded host
    # slows the emulated CPUs several-fold (pinnerd_vm.slow, default 3, multiplies it).
    limit=$((limit * slow_factor))
    out=$(timeout "$limit" bash -c "$fn" 2>&1)
    rc=$?
    # When it ended (seconds since boot): the host prints the slowest checks from it.
    echo "PINNERD-VM END $name $(now)"
    [ $rc -eq 124 ] && out="timed out after $limit s; $out"
    out=$(tr '\n' ' ' <<<"$out" | sed 's/  */ /g; s/ $//')
    if [ $rc -eq 0 ]; then
        [ $tag = CHECK ] && passed=$((passed + 1))
        echo "PINNERD-VM $tag $name PASS ${out:0:800}"
    elif [ $rc -eq 77 ] && [ -n "$out" ]; then
        [ $tag = CHECK ] && skipped=$((skipped + 1))
        echo "PINNERD-VM $tag $name SKIP ${out:0:800}"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "PINNERD-VM $tag $name FAIL ${out:0:1500}"
    fi
}

echo "PINNERD-VM START kernel $(uname -r), $(nproc) CPUs, systemd $(systemctl --version | awk 'NR == 1 { print $2 }'), checks start $(now) s after boot${done_before:+, resumed: $(tr ',' '\n' <<<"$done_before" | wc -l) checks finished in earlier boots}"
run_check package-installed-enabled check_package 30
run_check service-active check_active 150
run_check hardening check_hardening 30
run_check scheduling check_scheduling 30
run_check topology check_topology 60
run_check dbus-introspect check_dbus_introspect 60
run_check dbus-get-property-call check_dbus_properties 60
run_check state-ready check_state_ready 330
run_check remeasure check_remeasure 330
run_check sparse-then-complete check_sparse_then_complete 150
# With no rule yet and a stored matrix, as the README's reader has them.
run_check readme-walkthrough check_readme_walkthrough 420
# Before any other workload is pinned: systemd enabling (and later disabling) the cpuset
# controller in system.slice for AllowedCPUs= resets the masks of every task in it.
run_check cgroup-allowed-cpus check_cgroup_allowed_cpus 120
run_check rule-explicit-pins check_rule_explicit 120
run_check rule-explicit-new-thread check_rule_explicit_new_thread 60
run_check rule-compact-smt-avoid check_rule_compact 120
run_check threads-rule-smt-avoid check_threads_rule_smt_avoid 120
run_check rule-removal-reload check_rule_removal_reload 60
run_check bad-rule-keeps-old check_bad_rule 90
run_check irqs-away-with-irqbalance check_irqs_away_with_irqbalance 180
# Whatever it ended with, its rule and workload go, so later checks have CPUs 6-7.
rm -f "$RULES/60-vm-irqs.toml"
systemctl stop vmwork-irq.service 2>/dev/null
run_check nonroot-refused check_nonroot_refused 60
run_check interface-xml-installed check_interface_xml_installed 60
run_check structured-bus-calls check_structured_bus_calls 60
run_check polkit-own-process check_polkit_own_process 90
run_check restart-keeps-pinned check_restart 120
run_check kill9-keeps-pinned check_kill9 120
run_check restore-after-crash check_restore_after_crash 60
run_check sched-per-thread check_sched_per_thread 90
run_check boot-part-said check_boot_part_said 60
run_check idle-limit check_idle_limit 60
run_check kthreads-off-exclusive check_kthreads_off_exclusive 60
run_check run-memory-bind check_run_memory_bind 180
run_check plan-where-memory-is check_plan_where_memory_is 180
run_check memory-follows check_memory_follows 180
# Before the hotplug checks, whose rules hold CPU 6 and a compact pair to the end.
run_check isolate-keeps-others-off check_isolate_keeps_others_off 180
run_check isolate-survives-restart check_isolate_survives_restart 120
run_check irqbalance-knows-isolated check_irqbalance_knows_isolated 90
run_check isolate-crash-then-stop check_isolate_crash_then_stop 180
run_check isolate-restore-after-crash check_isolate_restore_after_crash 180
run_check isolate-two-rules-let-go check_isolate_two_rules_let_go 150
run_check hold-leaves-no-dropin check_hold_leaves_no_dropin 180
run_check hold-refuses-imitators check_hold_refuses_imitators 150
run_check isolate-churn-no-leak check_isolate_churn_no_leak 150
run_check isolate-count-smt-settles check_isolate_count_smt_settles 150
run_check isolate-thread-entry check_isolate_thread_entry 150
run_check isolate-own-slice check_isolate_own_slice 240
run_check unit-born-in-place check_unit_born_in_place 240
run_check container-born-in-place check_container_born_in_place 300
run_check hotplug-explicit check_hotplug_explicit 120
run_check hotplug-compact check_hotplug_compact 120
run_check package-purge-restores check_package_purge 60
# Last: it reads the journal of the whole run.
run_check loop-never-stalled check_loop_never_stalled 60

if [ "$failed" -gt 0 ] || grep -qw 'pinnerd_vm.journal=always' /proc/cmdline; then
    [ "$failed" -gt 0 ] && echo "PINNERD-VM FAILED ${failed_names[*]}"
    echo "PINNERD-VM JOURNAL BEGIN"
    # What placement had to go on: the stored matrix's rows and the domains made of it.
    echo "---- stored matrix (/var/lib/pinnerd/matrix.json: cpus, rows in ns)"
    jq -c '{cpus, rows: [.latency_ns[] | map(if . == null then null else (. * 10 | round / 10) end)]}' \
        /var/lib/pinnerd/matrix.json 2>&1 | head -c 4000
    echo
    echo "---- pinnerd topology (the domains placement uses)"
    pinnerd topology --matrix /var/lib/pinnerd/matrix.json 2>&1 | tail -n 40
    systemctl status --no-pager --full --lines=0 pinnerd.service 2>&1
    # One line per entry: uptime, pid, priority, message and the structured fields.
    journalctl -b --no-pager -o json -u pinnerd.service 2>&1 | jq -r '
        [ "[" + ((.__MONOTONIC_TIMESTAMP | tonumber) / 1e6 | tostring | .[0:10]) + "]",
          (.SYSLOG_IDENTIFIER // "?") + "[" + (._PID // "?") + "]",
          "<" + (.PRIORITY // "?") + ">",
          (.MESSAGE | if type == "array" then implode else . end) ]
        + [ to_entries[] | select(.key | test("^(_|__|MESSAGE$|PRIORITY$|SYSLOG_|CODE_|INVOCATION_ID$|SYSLOG_IDENTIFIER$)") | not)
            | "\(.key | ascii_downcase)=\(.value | if type == "string" then . else tojson end)" ]
        | join(" ")' 2>&1
    echo "PINNERD-VM JOURNAL END"
fi
echo "PINNERD-VM DONE passed=$passed failed=$failed skipped=$skipped"
exit 0
