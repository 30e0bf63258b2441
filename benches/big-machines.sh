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
# (default 1800) is stopped and says so; NOBUILD=1 uses the binaries already built.
# Needs /usr/bin/time, chromium, bc.
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
cell() { # "W s, R MiB" of a run, or its error
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
num() { grep -o "\"$1\":[0-9.e+]*" "$2" | head -1 | cut -d: -f2; }

printf '<!DOCTYPE html><html><body>blank</body></html>' >"$dir/blank.html"
echo "blank page: $(shot "$dir/blank.html") s"
echo "| CPUs | tree | first map: pairs measured, modelled | measure --simulate | sparse file | completion modelled | --complete | complete file | plan | report | page | Chromium |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $SIZES; do
    m="$dir/m$n"
    rm -rf "$dir"/m*
    "$BIN/examples/big_machine" "$n" "$m" || exit 1
    files=$(find "$m/sys" -type f | wc -l)
    run sparse "$BIN/pinnerd" measure --simulate "$m/truth.json" --out "$m/sparse.json"
    if [ -f "$m/sparse.json" ]; then
        first="$(num pairs_measured "$m/sparse.json") of $(num pairs_total "$m/sparse.json"), $(num modelled_seconds "$m/sparse.json" | xargs printf '%.0f') s"
    else
        first="-"
    fi
    run complete "$BIN/pinnerd" measure --simulate "$m/truth.json" --complete --out "$m/full.json"
    modelled=$(grep -o "modelled time on real hardware [0-9.]* s at the daemon's pace" "$dir/complete.out" | grep -o "[0-9.]* s" | head -1)
    full=$(size "$m/full.json")
    rm -f "$m/full.json"
    run plan "$BIN/pinnerd" plan --count 8 --smt avoid --json --sysfs "$m" --matrix "$m/sparse.json"
    run report "$BIN/pinnerd" report --sysfs "$m" --matrix "$m/sparse.json" --out "$m/r"
    page=$(size "$m/r/report.html")
    draw="-"
    [ -f "$m/r/report.html" ] && draw="$(shot "$m/r/report.html") s"
    echo "| $n | $files files | $first | $(cell sparse) | $(size "$m/sparse.json") | ${modelled:--} | $(cell complete) | $full | $(cell plan) | $(cell report) | $page | $draw |"
done
