#!/bin/sh
# What a machine of 512 to 8,192 CPUs costs pinnerd: the generated machines of
# tests/it/big_machine.rs (sockets of 128 cores, one node each, LLCs of 8 cores, SMT),
# each through the commands the 4,096-CPU integration tests run (tests/it/big.rs).
#
#   benches/big-machines.sh [PROFILE] [SIZES]
#   benches/big-machines.sh release "512 1024 2048 4096 8192"
#
# Per size, one row: the generated tree's files; `measure --simulate` (the first map,
# sparse: pairs measured, the modelled time on real hardware, wall time and peak RSS
# here, the file); `measure --simulate --complete` (the modelled completion at the
# daemon's pace, wall, RSS, file); `plan --count 8` on the sparse map (wall, peak RSS:
# the matrix loaded with its domains, as the daemon holds it); `report` (wall, RSS, the
# page's size) and headless Chromium's time to draw the page (a 1200×4000 screenshot,
# its own start included; a blank page's time is printed first). A step that fails
# prints its error in its cell and the row goes on; one that runs past LIMIT seconds
# (default 1800) is stopped and says so; NOBUILD=1 uses the binaries already built;
# COMPLETE=0 leaves out `--complete`.
# Then the daemon: `pinnerd daemon --machine` (observe only) on a private bus with the
# machine's complete matrix stored, its seconds to `ready` and its peak RSS (VmHWM of
# /proc/PID/status, once every row was read), and every row read with `GetMatrixRows`
# (`big_machine rows`: the replies, their bytes in all and the largest, the seconds).
# Needs /usr/bin/time, chromium, bc, dbus-daemon, busctl; root (`--machine`).
set -u
PROFILE=${1:-release}
SIZES=${2:-512 1024 2048 4096 8192}
flag=""
[ "$PROFILE" = release ] && flag="--release"
[ -n "${NOBUILD:-}" ] || cargo build -q $flag --bin pinnerd --example big_machine || exit 1
BIN=target/$PROFILE
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# run NAME CMD...: wall seconds and peak RSS (MiB) in $dir/NAME.t, output in NAME.out/err.
run() {
    name=$1
    shift
    /usr/bin/time -o "$dir/$name.t" -f "%e %M" timeout "${LIMIT:-1800}" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
}
cell() { # "W s, R MiB" of a run, or its error; "-" when it did not run
    [ -e "$dir/$1.t" ] || { printf -; return; }
    if [ -s "$dir/$1.t" ] && ! grep -q "exited with non-zero" "$dir/$1.t"; then
        awk '{ printf "%.1f s, %.0f MiB", $1, $2 / 1024 }' "$dir/$1.t"
    else
        if grep -q "status 124" "$dir/$1.t"; then
            printf 'stopped after %s s' "${LIMIT:-1800}"
        else
            printf 'failed: %s' "$(grep -v '^Command' "$dir/$1.err" | tail -1 | cut -c1-90)"
        fi
    fi
}
size() { [ -f "$1" ] && numfmt --to=iec --suffix=B "$(stat -c %s "$1")" || echo "-"; }
shot() {
    start=$(date +%s.%N)
    timeout 600 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$dir/profile" --window-size=1200,4000 \
        --screenshot="$dir/shot.png" "file://$1" >/dev/null 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}
# daemon_cells: "ready in S s, VmHWM MiB | R replies, B MB (largest L), T s" for $m.
daemon_cells() {
    st="$dir/state"
    rm -rf "$st" "$dir/rt" "$dir/rules"
    mkdir -p "$st" "$dir/rt" "$dir/rules"
    "$BIN/examples/big_machine" store "$m" "$st" || { echo "failed: store | -"; return; }
    bus=$(dbus-daemon --session --fork --print-address=1 --print-pid=1) || { echo "failed: no bus | -"; return; }
    addr=$(echo "$bus" | sed -n 1p)
    bpid=$(echo "$bus" | sed -n 2p)
    start=$(date +%s.%N)
    "$BIN/pinnerd" daemon --bus="$addr" --machine "$m" --state-dir "$st" --runtime-dir "$dir/rt" \
        --rules "$dir/rules" --config "$dir/none.toml" 2>"$dir/daemon.err" &
    dpid=$!
    state=""
    while [ "$state" != 's "ready"' ] && kill -0 "$dpid" 2>/dev/null; do
        if [ "$(echo "$(date +%s.%N) - $start > ${LIMIT:-1800}" | bc)" = 1 ]; then break; fi
        sleep 0.5
        state=$(busctl --address="$addr" get-property org.pinnerd.Pinnerd1 /org/pinnerd/Pinnerd1 \
            org.pinnerd.Pinnerd1 State 2>/dev/null)
    done
    ready=$(echo "$(date +%s.%N) - $start" | bc)
    if [ "$state" = 's "ready"' ]; then
        rows=$("$BIN/examples/big_machine" rows "$addr" 2>&1)
        hwm=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$dpid/status")
        echo "$rows" | awk -v r="$ready" -v h="$hwm" '/^rows/ {
            printf "ready in %.1f s, %s MiB | %d replies, %.1f MB (largest %.2f MB), %.2f s", r, h, $4, $6 / 1e6, $8 / 1e6, $10; f = 1 }
            END { if (!f) printf "ready in %.1f s, %s MiB | failed", r, h }'
        echo
    else
        echo "not ready after $(printf '%.0f' "$ready") s: $(tail -1 "$dir/daemon.err" | cut -c1-90) | -"
    fi
    kill "$dpid" 2>/dev/null
    wait "$dpid" 2>/dev/null
    kill "$bpid" 2>/dev/null
}

num() { grep -ao "\"$1\":[0-9.e+]*" "$2" | head -1 | cut -d: -f2; } # -a: past 1,024 CPUs the file is binary, its header JSON

printf '<!DOCTYPE html><html><body>blank</body></html>' >"$dir/blank.html"
echo "blank page: $(shot "$dir/blank.html") s"
echo "| CPUs | tree | first map: pairs measured, modelled | measure --simulate | sparse file | completion modelled | --complete | complete file | plan | report | page | Chromium | daemon --machine: ready, peak RSS | GetMatrixRows: every row |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $SIZES; do
    m="$dir/m$n"
    rm -rf "$dir"/m* "$dir"/*.t "$dir"/*.out "$dir"/*.err
    "$BIN/examples/big_machine" "$n" "$m" || exit 1
    files=$(find "$m/sys" -type f | wc -l)
    run sparse "$BIN/pinnerd" measure --simulate "$m/truth.json" --out "$m/sparse.json"
    if [ -f "$m/sparse.json" ]; then
        first="$(num pairs_measured "$m/sparse.json") of $(num pairs_total "$m/sparse.json"), $(num modelled_seconds "$m/sparse.json" | xargs printf '%.0f') s"
    else
        first="-"
    fi
    [ "${COMPLETE:-1}" = 0 ] || run complete "$BIN/pinnerd" measure --simulate "$m/truth.json" --complete --out "$m/full.json"
    modelled=$(grep -o "modelled time on real hardware [0-9.]* s at the daemon's pace" "$dir/complete.out" 2>/dev/null | grep -o "[0-9.]* s" | head -1)
    full=$(size "$m/full.json")
    rm -f "$m/full.json"
    run plan "$BIN/pinnerd" plan --count 8 --smt avoid --json --sysfs "$m" --matrix "$m/sparse.json"
    run report "$BIN/pinnerd" report --sysfs "$m" --matrix "$m/sparse.json" --out "$m/r"
    page=$(size "$m/r/report.html")
    draw="-"
    [ -f "$m/r/report.html" ] && draw="$(shot "$m/r/report.html") s"
    echo "| $n | $files files | $first | $(cell sparse) | $(size "$m/sparse.json") | ${modelled:--} | $(cell complete) | $full | $(cell plan) | $(cell report) | $page | $draw | $(daemon_cells) |"
done
