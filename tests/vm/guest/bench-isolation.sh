#!/bin/bash
# The isolation benchmark's entry point in the test VM (PINNERD_VM_BENCH=isolation
# tests/vm/run.sh runs it instead of checks.sh): waits until pinnerd is ready, runs
# benches/isolation.sh against the running daemon (its rule file in /etc/pinnerd.d),
# prints its table as "PINNERD-VM BENCH ..." lines on the second serial port, then
#   PINNERD-VM DONE
set -u
export LC_ALL=C SYSTEMD_COLORS=0 SYSTEMD_PAGER=
LIB=/usr/local/lib/pinnerd-vm
state() {
    busctl --system --timeout=20 get-property org.pinnerd.Pinnerd1 /org/pinnerd/Pinnerd1 \
        org.pinnerd.Pinnerd1 State 2>/dev/null
}
echo "PINNERD-VM START kernel $(uname -r), $(nproc) CPUs, isolation benchmark"
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 420 ]; do
    [ "$(state)" = 's "ready"' ] && break
    sleep 0.5
done
echo "PINNERD-VM BENCH daemon-state $(state) after $((SECONDS - t0)) s"
mkdir -p /run/isolation-bench
PINNERD=/usr/bin/pinnerd PINNERD_RULES_DIR=/etc/pinnerd.d CPU=7 \
    SECS="$(cat "$LIB/bench-secs" 2>/dev/null || echo 30)" NOISE=8 \
    "$LIB/isolation.sh" /run/isolation-bench 2>&1 | sed 's/^/PINNERD-VM BENCH /'
for f in /run/isolation-bench/*.info; do
    sed "s|^|PINNERD-VM BENCH $(basename "$f" .info): |" "$f"
done
echo "PINNERD-VM JOURNAL BEGIN"
journalctl -b --no-pager -o short-monotonic -u pinnerd.service 2>&1 | tail -n 200
echo "PINNERD-VM JOURNAL END"
echo "PINNERD-VM DONE passed=0 failed=0"
exit 0
