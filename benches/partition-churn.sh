#!/usr/bin/env bash
# Remote cpuset partitions made and ended the way a held unit's come and go, straight on
# the kernel (no systemd, no daemon), to see what the kernel does with them:
#
#   sudo benches/partition-churn.sh [ROUNDS] [CPUS]      (default 50 rounds, CPUs 2-3)
#
# Each round makes a cgroup below a slice of its own (bench-churn.slice), grants CPUS
# down through the slice's cpuset.cpus.exclusive, puts a sleeping process in, writes
# `isolated` and reads it back; then ends it one of two ways, alternately:
#   member-first  `member` written, the grant taken back, the process killed, rmdir
#                 (what pinnerd does when it lets go in time);
#   rmdir-first   the process killed and the cgroup removed while still a partition,
#                 then the grant taken back (what happens when systemd removes a unit's
#                 cgroup before pinnerd has let go).
# After each end it polls the root's cpuset.cpus.isolated every 10 ms (at most 5 s)
# until CPUS leave it, and counts the milliseconds. At the end: rounds per way, the
# longest wait, rounds whose CPUs stayed isolated, and the kernel's warnings
# (dmesg lines with WARNING, BUG, list_add or cpuset since the start). Needs cgroup v2
# with remote partitions (Linux 6.7+) and root; changes nothing it does not undo.
set -euo pipefail
rounds=${1:-50}
cpus=${2:-2-3}
cg=/sys/fs/cgroup
[ -f "$cg/cpuset.cpus.isolated" ] || {
    echo "no $cg/cpuset.cpus.isolated: needs cgroup v2 with remote partitions (Linux 6.7+)" >&2
    exit 2
}
[ -z "$(cat "$cg/cpuset.cpus.isolated")" ] || {
    echo "CPUs $(cat "$cg/cpuset.cpus.isolated") are isolated already: run on a machine without partitions" >&2
    exit 2
}
slice=$cg/bench-churn.slice
mark="partition-churn $(date +%s%N)"
echo "$mark" >/dev/kmsg 2>/dev/null || true
grep -qw cpuset "$cg/cgroup.subtree_control" || echo +cpuset >"$cg/cgroup.subtree_control"
mkdir -p "$slice"
echo +cpuset >"$slice/cgroup.subtree_control"
cleanup() {
    for d in "$slice"/r*; do
        [ -d "$d" ] || continue
        echo member >"$d/cpuset.cpus.partition" 2>/dev/null || true
        for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        sleep 0.1
        rmdir "$d" 2>/dev/null || true
    done
    echo "" >"$slice/cpuset.cpus.exclusive" 2>/dev/null || true
    rmdir "$slice" 2>/dev/null || true
}
trap cleanup EXIT

# gone_ms: milliseconds until CPUS leave the root's cpuset.cpus.isolated (5001: never).
gone_ms() {
    local t=0
    while [ $t -le 5000 ]; do
        case ",$(cat "$cg/cpuset.cpus.isolated")," in
            *",$cpus,"* | *"$cpus"*) ;;
            *) echo $t; return ;;
        esac
        sleep 0.01
        t=$((t + 10))
    done
    echo 5001
}

declare -A worst=([member-first]=0 [rmdir-first]=0) kept=([member-first]=0 [rmdir-first]=0) n=([member-first]=0 [rmdir-first]=0)
refused=0
for i in $(seq 1 "$rounds"); do
    d=$slice/r$i
    mkdir "$d"
    echo "$cpus" >"$d/cpuset.cpus"
    echo "$cpus" >"$slice/cpuset.cpus.exclusive"
    echo "$cpus" >"$d/cpuset.cpus.exclusive"
    sleep 600 &
    pid=$!
    echo "$pid" >"$d/cgroup.procs"
    echo isolated >"$d/cpuset.cpus.partition"
    state=$(cat "$d/cpuset.cpus.partition")
    if [ "$state" != isolated ]; then
        refused=$((refused + 1))
        echo "round $i: partition reads '$state'"
    fi
    if [ $((i % 2)) -eq 0 ]; then
        way=member-first
        echo member >"$d/cpuset.cpus.partition"
        echo "" >"$slice/cpuset.cpus.exclusive"
        kill -9 "$pid"; wait "$pid" 2>/dev/null || true
        rmdir "$d"
    else
        way=rmdir-first
        kill -9 "$pid"; wait "$pid" 2>/dev/null || true
        rmdir "$d"
        echo "" >"$slice/cpuset.cpus.exclusive"
    fi
    ms=$(gone_ms)
    n[$way]=$((n[$way] + 1))
    [ "$ms" -gt "${worst[$way]}" ] && worst[$way]=$ms
    [ "$ms" -gt 5000 ] && kept[$way]=$((kept[$way] + 1))
done
echo "kernel $(uname -r), CPUs $cpus, $rounds rounds ($refused partitions refused)"
for way in member-first rmdir-first; do
    echo "$way: ${n[$way]} rounds, the CPUs left cpuset.cpus.isolated within ${worst[$way]} ms at worst, ${kept[$way]} rounds kept them over 5 s"
done
echo "isolated now: '$(cat "$cg/cpuset.cpus.isolated")'"
warn=$(dmesg 2>/dev/null | sed -n "/$mark/,\$p" | grep -E 'WARNING|BUG|list_add|cpuset' || true)
echo "kernel warnings since the start: ${warn:-none}"
