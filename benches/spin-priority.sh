#!/bin/sh
# What the spinners' scheduling priority does to a measurement: each of
# `--spin-priority normal|nice-19|idle`, RUNS runs each, first with nothing of ours
# competing, then with one nice-0 busy loop pinned to the last online CPU (a workload
# sharing a measured CPU). Prints one line per run: the 0↔last figure, pass estimates,
# batches kept and discarded, measuring time and the warnings besides the VM one.
#
#   benches/spin-priority.sh [PINNERD] [RUNS]
#
# Needs jq. The load guard is off (--idle-threshold 0): the point is what happens
# when something else runs.
set -eu
PINNERD=${1:-target/release/pinnerd}
RUNS=${2:-3}
last=$(sed 's/.*[-,]//' /sys/devices/system/cpu/online)
first=$(sed 's/[-,].*//' /sys/devices/system/cpu/online)
cpus="$first,$last"

run() {
    out=$("$PINNERD" measure --cpus "$cpus" --budget 10 --idle-threshold 0 \
        --spin-priority "$1" --json 2>/dev/null) || { echo "| $2 | $1 | failed | | | | |"; return; }
    echo "$out" | jq -r --arg load "$2" --arg p "$1" '
        (.stats[0] // {}) as $s
        | "| \($load) | \($p) | \(.latency_ns[0][1] // "—" | if type == "number" then (. * 10 | round / 10) else . end) | \($s.p10_ns // "—" | if type == "number" then (. * 10 | round / 10) else . end)–\($s.p90_ns // "—" | if type == "number" then (. * 10 | round / 10) else . end) | \($s.samples // 0) / \($s.discarded // 0) | \(.measure_seconds * 1000 | round) ms | \([.warnings[] | select(test("virtual machine") | not)] | length) |"'
}

echo "| competing | priority | 0↔$last ns | p10–p90 ns | batches kept / discarded | measuring | other warnings |"
echo "|---|---|---|---|---|---|---|"
for p in normal nice-19 idle; do
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        run "$p" none
        i=$((i + 1))
    done
done
taskset -c "$last" sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
sleep 0.5
for p in normal nice-19 idle; do
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        run "$p" "busy loop on CPU $last"
        i=$((i + 1))
    done
done
