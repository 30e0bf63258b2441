#!/bin/sh
# `pinnerd report`'s page for large machines: its size and the time headless Chromium
# takes to load and draw it (a screenshot of the top 1200×4000 pixels, as
# tests/it/report.rs takes one), for synthetic matrices of 64, 512 and 1,024 CPUs.
#
#   benches/report-page.sh [PINNERD] [RUNS]
#
# The matrices: two sockets of LLCs of eight cores, SMT siblings i and i+N/2 (Linux's
# numbering on large machines), 8/30/90/160 ns with ±3% of deterministic noise, as a
# measured matrix has. A blank page's time is printed first: Chromium's own start.
# Needs python3 and chromium.
set -eu
PINNERD=${1:-target/release/pinnerd}
RUNS=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

matrix() {
    python3 - "$1" > "$dir/m$1.json" <<'EOF'
import json, sys
n = int(sys.argv[1]); half = n // 2
def core(c): return c % half
def cell(a, b):
    if core(a) == core(b): base = 8.0
    elif core(a) // 8 == core(b) // 8: base = 30.0
    elif core(a) * 2 // half == core(b) * 2 // half: base = 90.0
    else: base = 160.0
    lo, hi = min(a, b), max(a, b)
    h = (lo * 2654435761 + hi * 40503) % 1000 / 1000.0
    return round(base * (0.97 + 0.06 * h), 2)
rows = [[None if a == b else cell(a, b) for b in range(n)] for a in range(n)]
json.dump({"cpus": list(range(n)), "latency_ns": rows}, sys.stdout)
EOF
}

shot() {
    start=$(date +%s.%N)
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$dir/profile" --window-size=1200,4000 \
        --screenshot="$dir/shot.png" "file://$1" >/dev/null 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

printf '<!DOCTYPE html><html><body>blank</body></html>' > "$dir/blank.html"
times=""
for r in $(seq "$RUNS"); do times="$times $(shot "$dir/blank.html")"; done
echo "blank page: s:$times"
echo "| CPUs | report.html | Chromium, s (each run) |"
echo "|---|---|---|"
for n in 64 512 1024; do
    matrix "$n"
    "$PINNERD" report --matrix "$dir/m$n.json" --out "$dir/r$n" >/dev/null
    size=$(stat -c %s "$dir/r$n/report.html")
    times=""
    for r in $(seq "$RUNS"); do times="$times $(shot "$dir/r$n/report.html")"; done
    echo "| $n | $size bytes | $times |"
done
