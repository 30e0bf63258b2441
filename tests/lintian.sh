#!/usr/bin/env bash
# Debian's package checker on the package: no error and no warning may remain.
#
#   tests/lintian.sh [DEB]     (default: the newest target/debian/pinnerd_*.deb)
#
# Run by tests/vm/run.sh on the package it installs, so CI checks the .deb it tests.
# Tags that are wrong for this package are overridden, each with its reason, in
# debian/pinnerd.lintian-overrides (shipped as /usr/share/lintian/overrides/pinnerd);
# lintian reads the overrides from the package itself.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
deb=${1:-$(ls -t "$repo"/target/debian/pinnerd_*.deb 2>/dev/null | head -n 1)}
[ -n "$deb" ] && [ -f "$deb" ] || { echo "lintian.sh: no package (run cargo deb)" >&2; exit 2; }
command -v lintian >/dev/null || { echo "lintian.sh: lintian is not installed (apt-get install lintian)" >&2; exit 2; }
# --fail-on makes errors and warnings the exit status; info and pedantic tags only print.
# lintian warns when run as root, which CI is; that line is not a tag.
lintian --fail-on error,warning --display-info "$deb" 2> >(grep -v '^running with root privileges' >&2)
echo "lintian: $deb: no errors or warnings"
