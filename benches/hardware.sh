#!/usr/bin/env bash
# The hardware run: pinnerd on a real machine, in one command, one directory.
#
#   PINNERD=path/to/pinnerd benches/hardware.sh OUTDIR
#
# Needs only bash, coreutils and python3 (no Rust toolchain, no network): PINNERD is a
# prebuilt binary (default: pinnerd on PATH). Run it as root on an otherwise idle
# machine; about 3–5 minutes on 16 CPUs: steps 1–3 at most 8 (the budgets below add up
# to less), step 4 about 3 x (SECS + 5) s.
#
# 1. `pinnerd measure`, every pair (serial) → full.json
# 2. `pinnerd measure --mode sparse` on the same machine → sparse.json; the cells of
#    the two compared (share within 10%) and their latency domains (`pinnerd topology
#    --matrix … --json`) compared group by group
# 3. `pinnerd report --compare --matrix full.json` → report.html, report.json: the page,
#    the measured effect of placement (ping-pong ring, interleaved runs) and the
#    engine's 0↔1 figure against a plain c2clat-style minimum, interleaved five times
# 4. `benches/isolation.sh OUTDIR/isolation`: a busy-polling thread's gaps over SECS
#    (default 30) seconds per mode while noisy neighbours run, unpinned, with an
#    `exclusive` rule, with an `isolate` rule, with that rule's thread SCHED_FIFO 50 and
#    with that and `idle-limit-us = 0`, of a private `pinnerd daemon` (its bus from
#    `dbus-daemon` where there is one; without, those four rows say skipped; a key the
#    daemon does not take is said in its row)
# 5. one summary table → summary.txt (and summary.json), also printed; the isolation
#    table follows it in summary.txt
#
# Everything lands in OUTDIR, flat: the files above, *-domains.json, *.log, timings;
# the isolation step's own files in OUTDIR/isolation/.
# IDLE_THRESHOLD (default 75) is passed to both measurements: the load guard refuses to
# measure CPUs busier than that; 0 measures whatever the load (a shared machine).
# SECS (default 30), NOISE, CPU and MODES go to the isolation step (see benches/isolation.sh).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: PINNERD=path/to/pinnerd $0 OUTDIR" >&2
    exit 2
fi
out=$1
pinnerd=${PINNERD:-pinnerd}
idle=${IDLE_THRESHOLD:-75}
if ! command -v "$pinnerd" >/dev/null 2>&1; then
    echo "$0: no pinnerd binary at '$pinnerd' (set PINNERD=path/to/pinnerd)" >&2
    exit 2
fi
command -v python3 >/dev/null || { echo "$0: python3 is needed" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
started=$(date +%s.%N)

# Runs a step, its output into NAME.log, its wall time into NAME.seconds.
step() {
    local name=$1
    shift
    echo "== $name: $*" >&2
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "$@" >"$out/$name.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$t1" \
        >"$out/$name.seconds"
    echo "$rc" >"$out/$name.rc"
    if [ "$rc" -ne 0 ]; then
        echo "   failed (exit $rc), see $out/$name.log:" >&2
        tail -n 5 "$out/$name.log" >&2
    fi
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pinnerd: $("$pinnerd" --version 2>&1)"
    echo "kernel: $(uname -srm)"
    echo "nproc: $(nproc)"
} >"$out/machine.txt"

step full "$pinnerd" measure --mode serial --budget 240 --idle-threshold "$idle" \
    --out "$out/full.json"
step sparse "$pinnerd" measure --mode sparse --budget 120 --idle-threshold "$idle" \
    --out "$out/sparse.json"
for m in full sparse; do
    if [ -s "$out/$m.json" ]; then
        step "$m-domains" sh -c '"$1" topology --json --matrix "$2" >"$3"' _ \
            "$pinnerd" "$out/$m.json" "$out/$m-domains.json"
    fi
done
if [ -s "$out/full.json" ]; then
    step report "$pinnerd" report --compare --matrix "$out/full.json" --out "$out"
else
    # No matrix of this machine: the report measures (or says why it could not).
    step report "$pinnerd" report --compare --budget 120 --out "$out"
fi
steps_done=$(date +%s.%N)
step isolation env SECS="${SECS:-30}" PINNERD="$pinnerd" \
    "$(dirname "$0")/isolation.sh" "$out/isolation"
finished=$(date +%s.%N)

python3 - "$out" "$started" "$steps_done" "$finished" <<'PY'
import json
import os
import sys

out, started, steps_done, finished = sys.argv[1], *map(float, sys.argv[2:5])


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read().strip()
    except OSError:
        return "?"


def cells(m):
    c = {}
    for i, a in enumerate(m["cpus"]):
        for j, b in enumerate(m["cpus"]):
            v = m["latency_ns"][i][j]
            if a < b and v is not None:
                c[(a, b)] = v
    return c


def domains(d):
    if not d or "domains" not in d:
        return None
    return [(l["name"], sorted(sorted(g) for g in l["groups"])) for l in d["domains"]]


rows = []


def add(item, figure, target="", verdict=""):
    rows.append((item, figure, target, verdict))


machine = dict(l.split(": ", 1) for l in text("machine.txt").splitlines() if ": " in l)
report = load("report.json")
model = (report or {}).get("machine", {}).get("model") or "?"
add("machine", f"{model}, {machine.get('nproc', '?')} CPUs, {machine.get('kernel', '?')}")
add("pinnerd", machine.get("pinnerd", "?"))

full, sparse = load("full.json"), load("sparse.json")
for name, m in (("full", full), ("sparse", sparse)):
    secs = text(f"{name}.seconds")
    if m is None:
        add(f"{name} measurement", f"none (exit {text(name + '.rc')}, see {name}.log)", "", "FAIL")
        continue
    n = len(m["cpus"])
    total = n * (n - 1) // 2
    measured = m.get("pairs_measured", total)
    warn = len(m.get("warnings", []))
    add(
        f"{name} measurement",
        f"{n} CPUs, {measured} of {total} pairs measured, {secs} s wall, {warn} warning(s)",
    )

if full and sparse:
    fc, sc = cells(full), cells(sparse)
    common = [k for k in fc if k in sc and fc[k] > 0]
    dev = sorted(abs(sc[k] / fc[k] - 1) for k in common)
    within = sum(1 for d in dev if d <= 0.10)
    share = within / len(common) if common else 0.0
    worst = dev[-1] if dev else float("nan")
    add(
        "sparse vs full: cells within 10%",
        f"{within} of {len(common)} ({100 * share:.1f}%), worst {100 * worst:.1f}%",
        "all cells (sparse's own target: >= 95%)",
        "ok" if share == 1.0 else ("ok >= 95%" if share >= 0.95 else "FAIL"),
    )
    fd, sd = domains(load("full-domains.json")), domains(load("sparse-domains.json"))
    if fd is None or sd is None:
        add("sparse vs full: domains", "not compared (topology --matrix failed)", "equal", "FAIL")
    else:
        def levels(d):
            return " / ".join(f"{n}: {len(g)}" for n, g in d)

        if fd == sd:
            figure, verdict = f"equal (full: {levels(fd)})", "ok"
        elif [g for _, g in fd] == [g for _, g in sd]:
            # One matrix trusted, the other not (its levels then named from sysfs).
            figure = f"same groups, named differently (full: {levels(fd)}; sparse: {levels(sd)})"
            verdict = "ok"
        else:
            figure, verdict = f"DIFFERENT (full: {levels(fd)}; sparse: {levels(sd)})", "FAIL"
        add("sparse vs full: domains", figure, "equal groups", verdict)

if report is None:
    add("report", f"none (exit {text('report.rc')}, see report.log)", "", "FAIL")
else:
    drawn = os.path.exists(os.path.join(out, "report.html"))
    add(
        "report",
        f"report.html {'written' if drawn else 'MISSING'}, {text('report.seconds')} s wall; from the {report['source']}",
    )
    for p in report.get("plans", []):
        if p.get("error"):
            add(f"plan K={p['k']} {p['policy']}", p["error"])
            continue
        fmt = lambda v: "?" if v is None else f"{v:.1f}"
        ratio = "?" if p.get("ratio") is None else f"{p['ratio']:.2f}x"
        add(
            f"plan K={p['k']} {p['policy']}",
            f"CPUs {','.join(map(str, p['cpus']))}: worst {fmt(p['worst_latency_ns'])} ns; "
            f"autopilot worst {fmt(p['autopilot_worst_ns'])} ns ({ratio})",
        )
    e = report.get("effect")
    if e:
        for v in e["variants"]:
            add(
                f"effect: {v['name']}",
                f"median {v['median']:.3e} op/s, spread {100 * v['spread']:.0f}% ({len(v['ops_per_s'])} runs)",
            )
        r = e.get("ratios")
        if r is None:
            # An unstable matrix: placement came from the topology, no gain claimed.
            add("effect: ratios of medians", "none claimed: the matrix did not hold (latency placement off)")
        else:
            add(
                "effect: ratios of medians",
                f"planned/autopilot {r['planned_vs_autopilot']:.2f}x, planned/worst {r['planned_vs_worst']:.2f}x, "
                f"planned/unpinned {r['planned_vs_unpinned']:.2f}x",
            )
    q = report.get("quality", {})
    a = q.get("agreement")
    if a:
        ratio = a["ratio"]
        add(
            f"{a['a']}<->{a['b']}: engine vs c2clat-style minimum",
            f"{a['engine_min_ns']:.1f} vs {a['plain_min_ns']:.1f} ns, ratio {ratio:.3f} ({len(a['rounds'])} interleaved rounds)",
            "within 15%",
            "ok" if abs(ratio - 1) <= 0.15 else "FAIL",
        )
    elif q.get("agreement_error"):
        add("engine vs c2clat-style minimum", q["agreement_error"], "within 15%", "FAIL")

iso = load("isolation/isolation.json")
if iso is None:
    add("isolation", f"none (exit {text('isolation.rc')}, see isolation.log)", "", "FAIL")
else:
    for r in iso["table"]:
        if r["longest gap µs"] == "-":
            figure = r["note"]
        else:
            figure = (
                f"longest gap {r['longest gap µs']} µs, {r['gaps>1ms']} gaps > 1 ms "
                f"({r['ms lost in gaps>1ms']} ms), {r['gaps>100µs']} > 100 µs; others running "
                f"on CPU {iso['cpu']}: {r['others running on its CPU (samples)']} samples"
                + (f"; {r['note']}" if r["note"] else "")
            )
        cannot = r["note"].startswith(("cannot isolate", "NOT isolated"))
        add(f"isolation: {r['mode']}", figure, "", "not isolated" if cannot else "")

steps = steps_done - started
add("wall time, steps 1-3", f"{steps:.0f} s", "<= 480 s on 16 CPUs", "ok" if steps <= 480 else "over")
add(
    "wall time, isolation",
    f"{finished - steps_done:.0f} s ({iso['secs'] if iso else '?'} s per mode)",
)
add("total wall time", f"{finished - started:.0f} s")

w = [max(len(r[i]) for r in rows + [("item", "figure", "target", "verdict")]) for i in range(4)]
w[1] = min(w[1], 110)
lines = []
for r in [("item", "figure", "target", "verdict"), tuple("-" * x for x in w)] + rows:
    lines.append("  ".join(r[i].ljust(w[i]) for i in range(4)).rstrip())
table = "\n".join(lines) + "\n"
iso_table = text("isolation/isolation.txt")
if iso_table != "?":
    table += "\n" + iso_table + "\n"
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write(table)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump([dict(zip(("item", "figure", "target", "verdict"), r)) for r in rows], f, indent=1)
print(table, end="")
PY
