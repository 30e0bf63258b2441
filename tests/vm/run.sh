#!/usr/bin/env bash
# End-to-end test: the Debian package under real systemd in a 2-socket, SMT, 2-node VM.
#
#   tests/vm/run.sh                              (as root; CONTRIBUTING.md "The end-to-end VM test")
#   PINNERD_VM_SUITE=bookworm tests/vm/run.sh    (Debian 12 instead of Debian 13)
#
# 1. builds the package (cargo deb), unless PINNERD_DEB names a .deb, and runs lintian
#    on it (tests/lintian.sh: no errors or warnings);
# 2. builds a rootfs of the chosen Debian release with systemd and dbus (mmdebstrap),
#    cached under tests/vm/cache/ keyed by its release and package list;
# 3. installs the package into a copy of it with dpkg, adds the checks
#    (tests/vm/guest/), packs it as an initramfs whose /init is systemd;
# 4. boots it with qemu: 8 vCPUs as 2 sockets x 2 cores x 2 threads, one NUMA node per
#    socket, a Skylake-Server CPU model (so SMT siblings appear), and that release's own
#    cloud kernel, fetched from Debian's archive whatever release the host runs;
# 5. reads the checks' results from the VM's second serial port, prints them and exits
#    non-zero naming every failed check, with the daemon's journal attached; a boot the
#    emulated kernel ends with its int3 oops is followed by one that runs the checks not
#    finished (at most PINNERD_VM_REBOOTS), any other kernel failure fails the run
#    (tests/vm/boots.sh).
#
# Environment:
#   PINNERD_VM_SUITE=trixie|bookworm  the Debian release booted: its rootfs and its kernel
#                             (default trixie, Debian 13, the current stable release)
#   PINNERD_DEB=FILE          install this .deb instead of building one
#   PINNERD_VM_PREPARE_ONLY=1 fetch the kernel and build the rootfs into the cache, then
#                             stop (no package, no boot): .ci/run prepares both releases so
#                             while the tests build
#   PINNERD_VM_ACCEL=auto|tcg|tcg-single|kvm   (auto: KVM when a probe boot works, else
#                             TCG, one host thread per vCPU; tcg-single: one host thread
#                             for all eight, slower: CONTRIBUTING.md)
#   PINNERD_VM_TIMEOUT=SECS   limit for one boot of the VM (default 2700; the checks
#                             themselves stop at 2400 s, guest/pinnerd-vm-checks.service)
#   PINNERD_VM_NICE=N         run qemu at this niceness (default 0; 10 leaves the host to
#                             other work, at the price of a slower VM beside it)
#   PINNERD_VM_SLOW=N         each check's own limit (a guard against a hang, sized for an
#                             idle host) is multiplied by N (default 3: a loaded host slows
#                             the emulated CPUs several-fold)
#   PINNERD_VM_REBOOTS=N      boots after the emulated kernel's int3 oops, each running the
#                             checks not finished yet (default 3; tests/vm/boots.sh)
#   PINNERD_VM_CACHE=DIR      cache and work directory (default tests/vm/cache)
#   PINNERD_VM_JOURNAL=always attach the daemon's journal even when every check passed
#   PINNERD_VM_CHECKS=a,b,c   run only these checks (while working on them): the others
#                             are reported SKIP "not selected" and the run still fails
#                             unless PINNERD_VM_ALLOW_SKIP=1
#   PINNERD_VM_DONE=a,b,c     boot as a resumed boot does, with these checks finished
#                             (tests/vm/guest/resume.sh: what a later check stands on runs
#                             again as SETUP); fails the run unless PINNERD_VM_ALLOW_SKIP=1
#   PINNERD_VM_MIRROR=URL     Debian mirror for the rootfs and the kernel
#                             (default http://deb.debian.org/debian)
#   PINNERD_VM_BENCH=memory   run the memory benchmark (tests/vm/guest/bench_memory.py)
#   PINNERD_VM_BENCH=isolation  run benches/isolation.sh against the running daemon
#                             (PINNERD_VM_BENCH_SECS seconds per mode, default 30)
#                             instead of the checks: numactl is added to this run's image
#                             (not to the cached rootfs), each node gets 2 GiB, and the
#                             figures are printed and kept in $PINNERD_VM_CACHE/run/bench.txt
#   PINNERD_VM_BENCH_REPS=N   the benchmark's throughput repetitions per tool (default 5;
#                             0 runs the event-to-pin part alone)
# Outputs, kept after the run: $PINNERD_VM_CACHE/run-SUITE/: console-N.log and results-N.txt
# for each boot N, results.txt (all boots), boots.txt (why a boot ended early), journal.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${PINNERD_VM_CACHE:-$here/cache}
vm_timeout=${PINNERD_VM_TIMEOUT:-2700}
vm_slow=${PINNERD_VM_SLOW:-3}
vm_nice=${PINNERD_VM_NICE:-0}
case $vm_nice in '' | *[!0-9]*) echo "PINNERD_VM_NICE must be a whole number from 0 to 19" >&2; exit 2 ;; esac
case $vm_slow in '' | *[!0-9]* | 0) echo "PINNERD_VM_SLOW must be a whole number from 1" >&2; exit 2 ;; esac
accel=${PINNERD_VM_ACCEL:-auto}
bench=${PINNERD_VM_BENCH:-}
case $bench in '' | memory | isolation) ;; *) echo "PINNERD_VM_BENCH must be memory, isolation or unset" >&2; exit 2 ;; esac
bench_reps=${PINNERD_VM_BENCH_REPS:-5}
case $bench_reps in '' | *[!0-9]*) echo "PINNERD_VM_BENCH_REPS must be a whole number" >&2; exit 2 ;; esac
# Memory per NUMA node: the benchmark moves 512 MiB workers between the nodes.
node_mib=1024
[ "$bench" = memory ] && node_mib=2048
suite=${PINNERD_VM_SUITE:-trixie}
case $suite in
bookworm) release="Debian 12" other_suite=trixie ;;
trixie) release="Debian 13" other_suite=bookworm ;;
*) echo "PINNERD_VM_SUITE must be trixie or bookworm" >&2; exit 2 ;;
esac
mirror=${PINNERD_VM_MIRROR:-http://deb.debian.org/debian}
# What the checks need besides the package: systemd as PID 1, the system bus, busctl
# (systemd), setpriv and taskset (util-linux), jq for JSON, python3 for the workload,
# irqbalance for irqs-away-with-irqbalance, polkitd for polkit-own-process.
packages=systemd,systemd-sysv,dbus,util-linux,procps,python3-minimal,jq,irqbalance,polkitd
# Debian 13 only: containerd (1.7, with runc) for container-born-in-place, and
# python3-grpcio for its CRI client (tests/vm/guest/cri.py). Debian 12's containerd 1.6
# has no NRI at all, so its image stays as it was and the check skips there by name.
[ "$suite" = trixie ] && packages+=,containerd,python3-grpcio
# Keep the image small; the package's own docs stay (the checks look at them).
dpkgopts=(
    'path-exclude=/usr/share/man/*'
    'path-exclude=/usr/share/locale/*'
    'path-exclude=/usr/share/doc/*'
    'path-include=/usr/share/doc/pinnerd/*'
)

t_start=$SECONDS
log() { printf '[vm %3ds] %s\n' $((SECONDS - t_start)) "$*" >&2; }
die() {
    log "error: $*"
    exit 2
}

[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap, dpkg in a chroot and cpio need it)"
missing=()
for tool in qemu-system-x86_64 mmdebstrap cpio zstd apt-get dpkg-deb lintian python3; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
[ -n "${PINNERD_DEB:-}" ] || [ "${PINNERD_VM_PREPARE_ONLY:-}" = 1 ] || cargo deb --version >/dev/null 2>&1 || missing+=(cargo-deb)
[ "${PINNERD_VM_PREPARE_ONLY:-}" = 1 ] || command -v cargo >/dev/null || missing+=(cargo)
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} (apt-get install qemu-system-x86 mmdebstrap cpio zstd lintian python3-minimal; cargo install --locked cargo-deb)"

mkdir -p "$cache"

# ------------------------------------------------------------------ the kernel
# The release's own cloud kernel: everything the VM needs is built in (serial console,
# NUMA, CPU hotplug, proc connector, initramfs), so no modules are needed. It is resolved
# and downloaded through an apt configuration of its own (the release's archive, lists
# cached beside the rootfs), never the host's sources, which may be another release.
aptdir=$cache/apt-$suite
mkdir -p "$aptdir/lists/partial" "$aptdir/archives/partial"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' "$mirror" "$suite" \
    >"$aptdir/sources.list"
: >"$aptdir/status"
apt_private=(
    -o "Dir::Etc::SourceList=$aptdir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o "Dir::State::Lists=$aptdir/lists" -o "Dir::State::status=$aptdir/status"
    -o "Dir::Cache=$aptdir" -o "Dir::Cache::archives=$aptdir/archives"
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64
    -o APT::Architectures::=amd64 -o Debug::NoLocking=1
)
resolve_kernel() {
    apt-cache "${apt_private[@]}" depends linux-image-cloud-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
kernel_pkg=$(resolve_kernel) || true
if [ -z "$kernel_pkg" ]; then
    apt-get "${apt_private[@]}" update -qq >"$aptdir/update.log" 2>&1 ||
        { tail -n 20 "$aptdir/update.log" >&2; die "apt-get update for $suite failed (log: $aptdir/update.log)"; }
    kernel_pkg=$(resolve_kernel) || true
fi
[ -n "$kernel_pkg" ] || die "cannot resolve linux-image-cloud-amd64 in $suite"
kernel=$cache/kernel/$kernel_pkg/vmlinuz
if [ ! -f "$kernel" ]; then
    log "downloading $kernel_pkg ($suite)"
    kdir=$(mktemp -d "$cache/kernel.XXXXXX")
    (cd "$kdir" && apt-get "${apt_private[@]}" download "$kernel_pkg" >/dev/null 2>&1) ||
        { apt-get "${apt_private[@]}" update -qq && cd "$kdir" && apt-get "${apt_private[@]}" download "$kernel_pkg" >/dev/null; } ||
        die "cannot download $kernel_pkg"
    dpkg-deb --fsys-tarfile "$kdir"/*.deb | tar -x -C "$kdir" ./boot
    mkdir -p "$(dirname "$kernel")"
    mv "$kdir"/boot/vmlinuz-* "$kernel"
    rm -rf "$kdir"
fi
log "kernel: $kernel_pkg ($release)"

# ------------------------------------------------------------------ the rootfs (cached)
key=$(printf '%s\n' "$suite" "$packages" "${dpkgopts[@]}" "${PINNERD_VM_MIRROR:-}" | sha256sum | cut -c1-16)
rootfs_tar=$cache/rootfs-$suite-$key.tar
if [ ! -f "$rootfs_tar" ]; then
    log "building the $suite ($release) rootfs with mmdebstrap ($packages)"
    mm_args=(--variant=minbase --include="$packages")
    for o in "${dpkgopts[@]}"; do mm_args+=(--dpkgopt="$o"); done
    nice -n 10 mmdebstrap "${mm_args[@]}" "$suite" "$cache/rootfs-$suite-$key.tmp.tar" "$mirror" \
        >"$cache/mmdebstrap.log" 2>&1 ||
        { tail -n 30 "$cache/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $cache/mmdebstrap.log)"; }
    mv "$cache/rootfs-$suite-$key.tmp.tar" "$rootfs_tar"
    # Older images of this release (another package list, or the naming before releases
    # were told apart) are of no further use; the other release's stays.
    find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$suite-$key.tar" \
        ! -name "rootfs-$other_suite-*.tar" -delete
fi
log "rootfs: $rootfs_tar ($release, cached, key $key)"

if [ "${PINNERD_VM_PREPARE_ONLY:-}" = 1 ]; then
    log "kernel and rootfs of $suite ready; PINNERD_VM_PREPARE_ONLY=1: no package, no boot"
    exit 0
fi

# ------------------------------------------------------------------ the package
if [ -n "${PINNERD_DEB:-}" ]; then
    deb=$(realpath "$PINNERD_DEB")
else
    log "building the package (cargo deb)"
    deb=$(cd "$repo" && nice -n 10 cargo deb --locked 2>"$cache/cargo-deb.log" | grep "\.deb$" | tail -n 1) ||
        { tail -n 30 "$cache/cargo-deb.log" >&2; die "cargo deb failed (log: $cache/cargo-deb.log)"; }
fi
[ -f "$deb" ] || die "no package at '$deb'"
log "package: $deb"
# The README walk-through's check (readme-walkthrough) matches outputs with the README's
# samples as the documents' trycmd tests do: examples/doc_sample.rs, built here, run there.
log "building the sample matcher (cargo build --example doc_sample)"
matcher=$(cd "$repo" && nice -n 10 cargo build --locked --example doc_sample --message-format=json 2>"$cache/doc-sample.log" |
    sed -n 's/.*"executable":"\([^"]*\/doc_sample\)".*/\1/p' | tail -n 1) || true
[ -n "$matcher" ] && [ -x "$matcher" ] ||
    { tail -n 30 "$cache/doc-sample.log" >&2; die "cargo build --example doc_sample failed (log: $cache/doc-sample.log)"; }
log "lintian on the package (tests/lintian.sh)"
"$repo/tests/lintian.sh" "$deb" >&2 || die "lintian reports errors or warnings on $deb"

# ------------------------------------------------------------------ this run's image
run=$cache/run-$suite
rm -rf "$run"
mkdir -p "$run/root"
root=$run/root
tar -x -p --numeric-owner -f "$rootfs_tar" -C "$root"

log "installing $(basename "$deb") with dpkg"
cp "$deb" "$root/tmp/pinnerd.deb"
# The rootfs leaves out every man page; the package's own are kept, so the checks see
# them where man looks (given here, not in dpkgopts, so the cached rootfs stays valid).
if ! chroot "$root" dpkg --path-include='/usr/share/man/man[58]/pinnerd*' -i /tmp/pinnerd.deb \
    >"$run/dpkg.log" 2>&1; then
    cat "$run/dpkg.log" >&2
    die "dpkg -i failed in the rootfs"
fi
rm -f "$root/tmp/pinnerd.deb"

install -d "$root/usr/local/lib/pinnerd-vm"
install -m 0755 "$here/guest/checks.sh" "$root/usr/local/lib/pinnerd-vm/checks.sh"
install -m 0644 "$here/guest/resume.sh" "$root/usr/local/lib/pinnerd-vm/resume.sh"
install -m 0644 "$here/guest/workload.py" "$root/usr/local/lib/pinnerd-vm/workload.py"
install -m 0644 "$here/guest/memworker.py" "$root/usr/local/lib/pinnerd-vm/memworker.py"
install -m 0644 "$here/guest/cpu_sampler.py" "$root/usr/local/lib/pinnerd-vm/cpu_sampler.py"
install -m 0644 "$here/guest/born.py" "$root/usr/local/lib/pinnerd-vm/born.py"
install -m 0755 "$here/guest/born-first.sh" "$root/usr/local/lib/pinnerd-vm/born-first.sh"
install -m 0755 "$matcher" "$root/usr/local/lib/pinnerd-vm/doc_sample"
if [ -x "$root/usr/bin/containerd" ]; then
    # containerd for container-born-in-place (docs/containers.md): NRI on, by the stanza
    # Debian 13's containerd 1.7 needs; a sandbox ("pause") image and the containers'
    # image made here from the release's busybox-static (the VM has no network), imported
    # by the check; no CNI (its pods use the host's network). The VM's root is the
    # initramfs, where runc cannot pivot_root, and the cloud kernel's overlayfs is a
    # module the VM does not have: hence NoPivotRoot and the native snapshotter, which a
    # machine booted from a disk needs neither of.
    busybox_deb=$(ls "$cache"/oci/busybox-static_*.deb 2>/dev/null | tail -n 1) || true
    if [ -z "$busybox_deb" ]; then
        mkdir -p "$cache/oci"
        (cd "$cache/oci" && apt-get "${apt_private[@]}" download busybox-static >/dev/null 2>&1) ||
            die "cannot download busybox-static ($suite)"
        busybox_deb=$(ls "$cache"/oci/busybox-static_*.deb | tail -n 1)
    fi
    bdir=$(mktemp -d "$cache/oci/busybox.XXXXXX")
    dpkg-deb --fsys-tarfile "$busybox_deb" | tar -x -C "$bdir" ./usr/bin/busybox
    python3 "$here/oci-image.py" "$bdir/usr/bin/busybox" docker.io/pinnerd-vm/busybox:1 \
        "$root/usr/local/lib/pinnerd-vm/busybox-oci.tar" || die "oci-image.py failed"
    rm -rf "$bdir"
    install -m 0755 "$here/guest/cri.py" "$root/usr/local/lib/pinnerd-vm/cri.py"
    conf=$root/etc/containerd/config.toml
    grep -q '^  \[plugins."io.containerd.grpc.v1.cri"\]$' "$conf" ||
        die "no [plugins.\"io.containerd.grpc.v1.cri\"] table in $conf to add sandbox_image to"
    sed -i 's|^  \[plugins."io.containerd.grpc.v1.cri"\]$|&\n    sandbox_image = "docker.io/pinnerd-vm/busybox:1"|' "$conf"
    cat >>"$conf" <<'EOF'

# NRI (docs/containers.md), off by default in containerd 1.7.
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "/var/run/nri/nri.sock"

# The test VM's own: its root is the initramfs, its kernel has no overlayfs module.
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  NoPivotRoot = true
EOF
    # The check starts containerd itself (pinnerd finds its socket when it appears), so
    # that the checks before it run beside no containerd.
    rm -f "$root/etc/systemd/system/multi-user.target.wants/containerd.service"
    # The shims of containerd's old v1 runtimes, which CRI does not use: 21 MB of image.
    rm -f "$root/usr/bin/containerd-shim" "$root/usr/bin/containerd-shim-runc-v1"
fi
if [ "$bench" = memory ]; then
    # numactl (migratepages, for comparison) only in this run's image: the cached rootfs,
    # and so CI's image, stays as it is. Its packages are cached beside the rootfs.
    debs=$cache/bench-debs
    if ! ls "$debs"/numactl_*.deb "$debs"/libnuma1_*.deb >/dev/null 2>&1; then
        mkdir -p "$debs"
        (cd "$debs" && apt-get download numactl libnuma1 >/dev/null 2>&1) ||
            (apt-get update -qq && cd "$debs" && apt-get download numactl libnuma1 >/dev/null) ||
            die "cannot download numactl"
    fi
    cp "$debs"/numactl_*.deb "$debs"/libnuma1_*.deb "$root/tmp/"
    chroot "$root" sh -c 'dpkg -i /tmp/libnuma1_*.deb /tmp/numactl_*.deb' >>"$run/dpkg.log" 2>&1 ||
        { cat "$run/dpkg.log" >&2; die "dpkg -i numactl failed in the rootfs"; }
    rm -f "$root"/tmp/*.deb
    install -m 0755 "$here/guest/bench-memory.sh" "$root/usr/local/lib/pinnerd-vm/bench-memory.sh"
    install -m 0644 "$here/guest/bench_memory.py" "$root/usr/local/lib/pinnerd-vm/bench_memory.py"
    echo "$bench_reps" >"$root/usr/local/lib/pinnerd-vm/bench-reps"
    sed -e 's|^ExecStart=.*|ExecStart=/usr/local/lib/pinnerd-vm/bench-memory.sh|' \
        -e 's|^TimeoutStartSec=.*|TimeoutStartSec=infinity|' \
        "$here/guest/pinnerd-vm-checks.service" >"$root/etc/systemd/system/pinnerd-vm-checks.service"
elif [ "$bench" = isolation ]; then
    install -m 0755 "$here/guest/bench-isolation.sh" "$root/usr/local/lib/pinnerd-vm/bench-isolation.sh"
    install -m 0755 "$repo/benches/isolation.sh" "$root/usr/local/lib/pinnerd-vm/isolation.sh"
    echo "${PINNERD_VM_BENCH_SECS:-30}" >"$root/usr/local/lib/pinnerd-vm/bench-secs"
    sed -e 's|^ExecStart=.*|ExecStart=/usr/local/lib/pinnerd-vm/bench-isolation.sh|' \
        -e 's|^TimeoutStartSec=.*|TimeoutStartSec=infinity|' \
        "$here/guest/pinnerd-vm-checks.service" >"$root/etc/systemd/system/pinnerd-vm-checks.service"
else
    install -m 0644 "$here/guest/pinnerd-vm-checks.service" "$root/etc/systemd/system/"
fi
ln -s ../pinnerd-vm-checks.service "$root/etc/systemd/system/multi-user.target.wants/"
if [ -f "$here/guest/pinnerd.toml" ]; then
    install -d "$root/etc/pinnerd"
    install -m 0644 "$here/guest/pinnerd.toml" "$root/etc/pinnerd/pinnerd.toml"
fi
# Nothing logs in; the periodic maintenance jobs only cost emulated CPU time.
for unit in getty@tty1.service serial-getty@ttyS0.service serial-getty@ttyS1.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
    fstrim.timer systemd-tmpfiles-clean.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
echo pinnerd-vm >"$root/etc/hostname"
ln -sf /lib/systemd/systemd "$root/init"

log "packing the initramfs"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | zstd -q -1 -T0 -o "$run/initramfs.zst"
rm -rf "$root"

# ------------------------------------------------------------------ boot
if [ "$accel" = auto ]; then
    accel=tcg
    if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
        # A nested or broken KVM may hang; it counts only if this kernel reaches its panic
        # (it has no root) within 20 s.
        timeout 20 qemu-system-x86_64 -accel kvm -cpu Skylake-Server -smp 2 -m 256 \
            -kernel "$kernel" -append "console=ttyS0 panic=-1" -nodefaults -display none \
            -no-reboot -serial "file:$run/kvm-probe.log" >/dev/null 2>&1 || true
        grep -q 'Kernel panic' "$run/kvm-probe.log" 2>/dev/null && accel=kvm
    fi
fi
case $accel in
kvm) accel_opt=kvm ;;
tcg) accel_opt=tcg,thread=multi ;;
tcg-single) accel_opt=tcg,thread=single ;;
*) die "PINNERD_VM_ACCEL must be auto, tcg, tcg-single or kvm" ;;
esac

# oops=panic: any oops ends the boot at once, so that no check runs on a kernel that
# oopsed; loglevel=5: the kernel's warnings reach the console too (a WARNING is printed
# at warning level, an oops whatever the level). boots.sh reads the console: the
# emulator's int3 oops from every real kernel failure.
cmdline="console=ttyS0,115200 panic=-1 oops=panic loglevel=5 mitigations=off systemd.show_status=auto systemd.log_color=0"
[ "${PINNERD_VM_JOURNAL:-}" = always ] && cmdline+=" pinnerd_vm.journal=always"
cmdline+=" pinnerd_vm.slow=$vm_slow"
if [ -n "${PINNERD_VM_CHECKS:-}" ]; then
    [[ "$PINNERD_VM_CHECKS" =~ ^[a-z0-9,-]+$ ]] || die "PINNERD_VM_CHECKS is a comma-separated list of check names"
    cmdline+=" pinnerd_vm.checks=$PINNERD_VM_CHECKS"
fi
VM_MAX_REBOOTS=${PINNERD_VM_REBOOTS:-3}
VM_DONE=${PINNERD_VM_DONE:-}
[[ "$VM_DONE" =~ ^[a-z0-9,-]*$ ]] || die "PINNERD_VM_DONE is a comma-separated list of check names"
case $VM_MAX_REBOOTS in '' | *[!0-9]*) die "PINNERD_VM_REBOOTS must be a whole number" ;; esac
log "booting $release ($accel, 8 vCPUs: 2 sockets x 2 cores x 2 threads, 2 NUMA nodes of $node_mib MiB; limit ${vm_timeout}s a boot)"
# vm_boot [EXTRA]: one boot of the image, EXTRA added to the kernel's command line
# (a resumed boot's pinnerd_vm.done=…); called by vm_boots (boots.sh).
vm_boot() {
    local t0=$SECONDS rc=0
    # At the host's usual priority: nice 10 weighs about a tenth of nice 0, so beside
    # other builds a niced qemu gets a small share of the CPUs (a CI run with other builds
    # beside it once ran the Debian 13 checks out of their time).
    nice -n "$vm_nice" timeout "$vm_timeout" qemu-system-x86_64 \
        -name pinnerd-vm -machine pc -accel "$accel_opt" \
        -cpu Skylake-Server -smp 8,sockets=2,cores=2,threads=2 -m $((2 * node_mib))M \
        -object memory-backend-ram,id=mem0,size=${node_mib}M -object memory-backend-ram,id=mem1,size=${node_mib}M \
        -numa node,nodeid=0,cpus=0-3,memdev=mem0 -numa node,nodeid=1,cpus=4-7,memdev=mem1 \
        -kernel "$kernel" -initrd "$run/initramfs.zst" -append "$cmdline${1:+ $1}" \
        -nodefaults -display none -no-reboot \
        -serial "file:$run/console.log" -serial "file:$run/results.log" \
        >"$run/qemu.log" 2>&1 || rc=$?
    log "VM exited (status $rc) after $((SECONDS - t0))s${1:+ (resumed: $(tr ',' '\n' <<<"${1#*=}" | wc -l) checks finished before)}"
    return "$rc"
}
# The emulated kernel can oops on an int3 while it patches its own code under
# multi-threaded TCG: such a boot is followed by one that runs the checks not finished
# yet, at most PINNERD_VM_REBOOTS times; any other kernel failure fails the run
# (tests/vm/boots.sh, CONTRIBUTING.md "The end-to-end VM test").
# shellcheck source=boots.sh
. "$here/boots.sh"
vm_boots
qemu_rc=$VM_RC

# ------------------------------------------------------------------ results
sed -n '/^PINNERD-VM JOURNAL BEGIN$/,/^PINNERD-VM JOURNAL END$/p' "$run/results-$VM_BOOTS.txt" |
    sed '1d;$d' >"$run/journal.log"
grep '^PINNERD-VM START ' "$run/results.txt" | sed 's/^PINNERD-VM START /guest: /' || true
if [ -n "$bench" ]; then
    grep '^PINNERD-VM BENCH' "$run/results.txt" | sed 's/^PINNERD-VM //' | tee "$run/bench.txt"
fi
vm_summary
# Where the time went (and the check a boot's end cut off): a run that ran out of time
# says which checks took it.
vm_timing "$run/results.txt" | tee "$run/timing.txt"
pass=$VM_PASS fail=$VM_FAIL skip=$VM_SKIP failed=("${VM_FAILED[@]}") skipped=("${VM_SKIPPED[@]}")

status=0
if [ -n "$VM_KERNEL" ] || [ -n "$VM_EMULATOR" ] || ! grep -q '^PINNERD-VM DONE ' "$run/results-$VM_BOOTS.txt"; then
    status=1
    if [ -n "$VM_KERNEL" ]; then
        echo "the guest kernel failed in boot $VM_BOOTS${VM_IN_FLIGHT:+, during $VM_IN_FLIGHT}: $VM_KERNEL"
    elif [ -n "$VM_EMULATOR" ]; then
        echo "the emulated kernel oopsed on an int3 in each of $VM_BOOTS boots: the checks never finished"
    elif [ "$qemu_rc" = 124 ]; then
        echo "the VM did not finish within ${vm_timeout}s"
    elif grep -q 'Failed to start pinnerd-vm-checks.service' "$run/console-$VM_BOOTS.log"; then
        echo "the checks ran out of their time in the VM ($(sed -n 's/^TimeoutStartSec=//p' "$here/guest/pinnerd-vm-checks.service") s, guest/pinnerd-vm-checks.service); $(grep '^cut off: ' "$run/timing.txt" | tail -n 1)"
    else
        echo "the VM stopped before the checks finished (qemu status $qemu_rc)"
    fi
    echo "---- last lines of the serial console ($run/console-$VM_BOOTS.log)"
    tr -d '\r' <"$run/console-$VM_BOOTS.log" | tail -n 60
    [ -s "$run/qemu.log" ] && { echo "---- qemu"; grep -v 'support requested feature' "$run/qemu.log" | tail -n 20; }
fi
if [ "$fail" -gt 0 ]; then
    status=1
    echo "FAILED: ${failed[*]}"
fi
if [ "$skip" -gt 0 ]; then
    # A check skipped for a feature this release lacks says so in its line above. Checks
    # left out by PINNERD_VM_CHECKS fail the run unless that was asked for.
    echo "skipped on $release: ${skipped[*]}"
    if [ -n "${PINNERD_VM_CHECKS:-}" ] && [ "${PINNERD_VM_ALLOW_SKIP:-}" != 1 ]; then
        status=1
        echo "PINNERD_VM_CHECKS left checks out (PINNERD_VM_ALLOW_SKIP=1 accepts that)"
    fi
fi
if [ -n "$VM_DONE" ] && [ "${PINNERD_VM_ALLOW_SKIP:-}" != 1 ]; then
    status=1
    echo "PINNERD_VM_DONE left checks out (PINNERD_VM_ALLOW_SKIP=1 accepts that)"
fi
if [ -s "$run/journal.log" ] && { [ "$status" != 0 ] || [ "${PINNERD_VM_JOURNAL:-}" = always ]; }; then
    echo "---- pinnerd's status and journal in the VM (last 200 lines; all of it: $run/journal.log)"
    tail -n 200 "$run/journal.log"
    echo "---- end of journal"
fi
log "total ${SECONDS}s ($release)"
echo "vm: $pass passed, $fail failed, $skip skipped"
exit "$status"
