#!/usr/bin/env bash
# Regenerates the screenshots of `pinnerd report` in docs/report/ (README, "pinnerd
# report"): two published dual-socket matrices and the machine this runs on.
#
#   docs/report/regenerate.sh [PINNERD]
#
# PINNERD is the binary (default: target/release/pinnerd). Needs `chromium` (Debian
# package) and python3. IDLE_THRESHOLD (default 75) is passed to the measurement of
# this machine: a shared or busy machine needs 0 to be measured at all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
pinnerd=${1:-$repo/target/release/pinnerd}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shoot() { # NAME: $work/NAME/report.html → $here/NAME.png
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$work/profile" --window-size=1200,12000 \
        --screenshot="$work/$1.png" "file://$work/$1/report.html" 2>/dev/null
    python3 "$here/trim.py" "$work/$1.png" "$here/$1.png"
    echo "$here/$1.png"
}

"$pinnerd" report --out "$work/epyc-7r13" \
    --matrix "$repo/tests/fixtures/c2c-data/nviennot/AMD_EPYC_7R13_48-Core_Processor.csv" >/dev/null
shoot epyc-7r13
"$pinnerd" report --out "$work/xeon-gold-6242" \
    --matrix "$repo/tests/fixtures/c2c-data/nviennot/Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv" >/dev/null
shoot xeon-gold-6242
# This machine: every pair measured first, then the report with the measured effect.
"$pinnerd" measure --idle-threshold "${IDLE_THRESHOLD:-75}" --out "$work/this-machine.json" >/dev/null
"$pinnerd" report --compare --matrix "$work/this-machine.json" --out "$work/this-machine" >/dev/null
shoot this-machine
