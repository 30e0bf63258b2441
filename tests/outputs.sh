#!/bin/sh
# Saves what `pinnerd report`, `topology`, `plan`, `diff` and `fleet` print and write on
# the repository's fixtures into OUTDIR, the output directory's and the repository's
# own paths replaced by OUT/ and REPO/, so that two builds can be compared with
# `diff -r`: a change meant to leave the output alone shows no difference.
#
#   tests/outputs.sh [PINNERD] OUTDIR      (PINNERD defaults to target/debug/pinnerd)
set -u
if [ $# -eq 2 ]; then bin=$1; shift; else bin=target/debug/pinnerd; fi
[ $# -eq 1 ] || { echo "usage: $0 [PINNERD] OUTDIR" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
mkdir -p "$1" && out=$(cd "$1" && pwd)
cd "$repo" || exit 1
sys=tests/fixtures/sysfs
c2c=tests/fixtures/c2c-data/nviennot

# run NAME ARGS...: stdout and stderr of `pinnerd ARGS` and its exit status into NAME.
run() {
    name=$1; shift
    "$bin" "$@" >"$out/$name" 2>&1
    echo "exit $?" >>"$out/$name"
}

for dir in "$sys"/*/; do
    s=$(basename "$dir")
    run "topology-$s.txt" topology --sysfs "$sys/$s"
    run "topology-$s.json" topology --sysfs "$sys/$s" --json
done
# The captured trees that have a published matrix of their part.
for pair in ryzen-2700x:AMD_Ryzen_7_2700X_Eight-Core_Processor.csv i9-12900k:Intel_Core_i9-12900K.csv; do
    s=${pair%%:*}; m=$c2c/${pair#*:}
    run "topology-matrix-$s.txt" topology --sysfs "$sys/$s" --matrix "$m" \
        --svg "$out/domains-$s.svg" --heatmap "$out/heatmap-$s.svg"
    run "topology-matrix-$s.json" topology --sysfs "$sys/$s" --matrix "$m" --json
    run "report-$s.txt" report --sysfs "$sys/$s" --matrix "$m" --out "$out/report-$s"
    for k in 2 4; do
        for policy in compact spread; do
            run "plan-$s-$k-$policy.txt" plan --sysfs "$sys/$s" --matrix "$m" -k $k --policy $policy
            run "plan-$s-$k-$policy.json" plan --sysfs "$sys/$s" --matrix "$m" -k $k --policy $policy --json
        done
    done
done
# Every published matrix alone (another machine's: drawn from its own domains).
for m in "$c2c"/*; do
    n=$(basename "$m")
    run "report-$n.txt" report --matrix "$m" --out "$out/report-$n"
done
# diff and fleet, as the documents show them, and a pair of different layouts.
cd "$c2c" || exit 1
run diff-5800u-5900hx.txt diff AMD_Ryzen_7_5800U.csv AMD_Ryzen_9_5900HX_at_3.3_GHz.csv
run diff-5800u-5900hx.json diff --json AMD_Ryzen_7_5800U.csv AMD_Ryzen_9_5900HX_at_3.3_GHz.csv
run diff-5700x-5800u.txt diff AMD_Ryzen_7_5700X.csv AMD_Ryzen_7_5800U.csv
run diff-same.json diff --json AMD_Ryzen_9_7950X.csv AMD_Ryzen_9_7950X.csv
run diff-layouts.txt diff AMD_Ryzen_9_5950X_at_3.40_GHz.csv AMD_Ryzen_9_5900X.csv
set -- AMD_Ryzen_7_5800U.csv AMD_Ryzen_9_5900HX_at_3.3_GHz.csv \
    Intel_Core_i9-9900K_CPU_at_3.60_GHz.csv AMD_Ryzen_7_2700X_Eight-Core_Processor.csv
run fleet-4.txt fleet "$@"
run fleet-4.json fleet --json "$@"
run fleet-same.txt fleet AMD_Ryzen_9_7950X.csv AMD_Ryzen_9_7950X.csv AMD_Ryzen_9_7950X.csv

# Paths of this run and of this checkout are not output.
find "$out" -type f \( -name '*.txt' -o -name '*.json' \) -exec \
    sed -i -e "s#$out/#OUT/#g" -e "s#$repo/#REPO/#g" {} +
