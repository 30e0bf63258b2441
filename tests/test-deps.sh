#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the test suite drives, when they are missing.
#
#   tests/test-deps.sh          # what `make check` runs first
#   tests/test-deps.sh --vm     # the tools of the end-to-end VM test (tests/vm/run.sh)
#   tests/test-deps.sh --list   # print the missing packages, install nothing
#
# As root it runs `apt-get update` and `apt-get install`; as anyone else it prints the
# exact command to run and exits 1, changing nothing. Exits 0 when nothing is missing.
set -euo pipefail

mode=tests
case "${1:-}" in
    "") ;;
    --vm) mode=vm ;;
    --list) mode=list ;;
    *) echo "usage: $0 [--vm|--list]" >&2; exit 2 ;;
esac

need=()
# need COMMAND-OR-PATH PACKAGE: PACKAGE provides it.
need() {
    case "$1" in
        /*) [ -e "$1" ] && return 0 ;;
        *) command -v "$1" >/dev/null 2>&1 && return 0 ;;
    esac
    case " ${need[*]-} " in *" $2 "*) ;; *) need+=("$2") ;; esac
}

if [ "$mode" = vm ]; then
    need qemu-system-x86_64 qemu-system-x86
    need mmdebstrap mmdebstrap
    need cpio cpio
    need zstd zstd
    need lintian lintian          # tests/lintian.sh on the package
    need python3 python3-minimal  # tests/vm/oci-image.py: the containers' image
else
    need cc gcc                   # the linker rustc calls, and the C library it links
    need /usr/include/stdio.h libc6-dev
    need make make
    # A private bus and its clients (tests/it/helper.rs, bus_api.rs, run_pin.rs).
    need dbus-daemon dbus-daemon
    need busctl systemd
    need systemd-analyze systemd
    need /bin/kill procps         # the unit's ExecReload=, which systemd-analyze verify checks
    need setpriv util-linux       # running the binary as another user
    # Real engines pinnerd feeds (tests/it/export.rs, tests/it/metrics.rs).
    need lstopo-no-graphics hwloc-nox
    need hwloc-annotate hwloc-nox
    need prometheus-node-exporter prometheus-node-exporter
    need promtool prometheus
    need /usr/bin/time time       # GNU time: peak RSS (tests/it/bad_input.rs)
    need man man-db               # man --warnings on man/* (tests/it/manpages.rs)
    need groff groff-base
    # Headless Chromium renders `pinnerd report`'s page (tests/it/report.rs).
    need chromium chromium
fi

if [ ${#need[@]} -gt 0 ] && [ "$mode" != list ]; then
    # Older releases ship dbus-daemon inside the `dbus` package.
    if [[ " ${need[*]} " == *" dbus-daemon "* ]] && command -v apt-cache >/dev/null \
        && ! apt-cache show dbus-daemon >/dev/null 2>&1 && apt-cache show dbus >/dev/null 2>&1; then
        need=("${need[@]/#dbus-daemon/dbus}")
    fi
fi

if [ "$mode" = list ]; then
    [ ${#need[@]} -eq 0 ] || printf '%s\n' "${need[@]}"
    exit 0
fi
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi

# The VM tools without their recommends (as the VM test has always had them).
opts="-y"
[ "$mode" = vm ] && opts="-y --no-install-recommends"
line="apt-get install $opts ${need[*]}"
if [ "$(id -u)" != 0 ]; then
    {
        echo "pinnerd: the tests need packages that are not installed: ${need[*]}"
        echo "pinnerd: install them as root, then run this again:"
        echo "    sudo apt-get update && sudo $line"
    } >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "pinnerd: missing ${need[*]}, and this is not a Debian/Ubuntu system (no apt-get): install the same tools with the system's package manager" >&2
    exit 1
fi
echo "== installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -qq $opts "${need[@]}"
