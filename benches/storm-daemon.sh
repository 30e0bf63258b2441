#!/bin/bash
# The pin_storm load against the real daemon: `pinnerd daemon` on a private bus, in the
# scheduling class the unit gives it (SCHED_FIFO 1, reset on fork; CLASS=other for the
# normal class), with the harness's rules. Prints what the tasks saw (late and missed
# pins), the daemon's CPU (summed over its threads' schedstat) and its peak RSS.
#
#   cargo build --release --bin pinnerd --example pin_storm
#   sudo benches/storm-daemon.sh [SECS] [EXECS_PER_S] [THREADS_PER_S]
#   sudo benches/storm-daemon.sh idle [SECS]    # no load: the daemon's idle cost
set -euo pipefail
mode=storm
if [ "${1:-}" = idle ]; then
    mode=idle
    shift
fi
secs=${1:-120} execs=${2:-100} threads=${3:-10000}
class=${CLASS:-fifo}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/pinnerd
storm=$root/target/release/examples/pin_storm
[ -x "$bin" ] && [ -x "$storm" ] || {
    echo "build first: cargo build --release --bin pinnerd --example pin_storm" >&2
    exit 2
}
# The runtime directory on tmpfs, as /run is under systemd.
work=$(mktemp -d -p /dev/shm)
bus_pid=
daemon_pid=
cleanup() {
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/rules" "$work/state" "$work/runtime"
chmod 755 "$work" "$work/rules"
"$storm" rules >"$work/rules/storm.toml"
chmod 644 "$work/rules/storm.toml"
# Short measurement, nothing periodic but the default rescan.
printf '[measure]\nbudget = "1s"\nidle-threshold = 1.0\ndrift-probe = "off"\ninterval = "off"\n' >"$work/settings.toml"
read -r address bus_pid < <(dbus-daemon --session --fork --print-address=1 --print-pid=1 | paste -sd ' ')
case $class in
fifo) sched=(chrt --reset-on-fork --fifo 1) ;;
other) sched=() ;;
*)
    echo "CLASS must be fifo or other" >&2
    exit 2
    ;;
esac
"${sched[@]}" "$bin" daemon --bus="$address" --rules "$work/rules" --state-dir "$work/state" \
    --runtime-dir "$work/runtime" --config "$work/settings.toml" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do
    grep -q "proc connector subscribed" "$work/daemon.log" && break
    sleep 0.2
done
grep -q "proc connector subscribed" "$work/daemon.log" || {
    echo "the daemon did not subscribe to the proc connector:" >&2
    cat "$work/daemon.log" >&2
    exit 1
}
cpu_ns() { cat /proc/"$daemon_pid"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
# Idle: from 10 s after the start, when the start-up measurement's threads are gone.
[ "$mode" = idle ] && sleep 10
before=$(cpu_ns)
t0=$(date +%s.%N)
[ -n "${PERF_OUT:-}" ] && perf record -g -o "$PERF_OUT" -p "$daemon_pid" -- sleep "$secs" >/dev/null 2>&1 &
if [ "$mode" = idle ]; then
    echo "idle $secs s: the daemon with the harness's rules, nothing started"
    sleep "$secs"
else
    "$storm" storm-external "$secs" "$execs" "$threads"
fi
t1=$(date +%s.%N)
after=$(cpu_ns)
hwm=$(awk '/^VmHWM:/ { print $2 }' /proc/"$daemon_pid"/status)
awk -v b="$before" -v a="$after" -v t0="$t0" -v t1="$t1" -v h="$hwm" -v cl="$class" 'BEGIN {
    c = a - b
    printf "  daemon (%s): CPU %.3f s over %.0f s (%.3f%% of a core), peak RSS %.1f MiB\n",
        cl, c / 1e9, t1 - t0, 100 * c / 1e9 / (t1 - t0), h / 1024 }'
echo "  connector overruns logged: $(grep -c 'proc connector overrun' "$work/daemon.log" || true)"
