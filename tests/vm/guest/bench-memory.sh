#!/bin/bash
# The memory benchmark's entry point in the test VM (PINNERD_VM_BENCH=memory
# tests/vm/run.sh runs it instead of checks.sh): waits until pinnerd is ready, runs
# bench_memory.py, whose "PINNERD-VM BENCH ..." lines go to the second serial port, then
#   PINNERD-VM DONE
set -u
export LC_ALL=C SYSTEMD_COLORS=0 SYSTEMD_PAGER=
LIB=/usr/local/lib/pinnerd-vm
state() {
    busctl --system --timeout=20 get-property org.pinnerd.Pinnerd1 /org/pinnerd/Pinnerd1 \
        org.pinnerd.Pinnerd1 State 2>/dev/null
}
echo "PINNERD-VM START kernel $(uname -r), $(nproc) CPUs, memory benchmark"
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 420 ]; do
    [ "$(state)" = 's "ready"' ] && break
    sleep 0.5
done
echo "PINNERD-VM BENCH daemon-state $(state) after $((SECONDS - t0)) s"
if [ "$(state)" != 's "ready"' ]; then
    { systemctl status --no-pager --full pinnerd.service; journalctl -b --no-pager -n 80 -u pinnerd.service; } 2>&1 |
        sed 's/^/PINNERD-VM BENCH-LOG /'
    echo "PINNERD-VM DONE passed=0 failed=1"
    exit 0
fi
python3 "$LIB/bench_memory.py" "$(cat "$LIB/bench-reps" 2>/dev/null || echo 5)" 2>&1 | sed '/^PINNERD-VM /!s/^/PINNERD-VM BENCH-LOG /'
# The daemon's journal of the run (restarts, warnings), kept by run.sh as journal.log.
echo "PINNERD-VM JOURNAL BEGIN"
systemctl status --no-pager --full --lines=0 pinnerd.service 2>&1
journalctl -b --no-pager -o short-monotonic -u pinnerd.service 2>&1 | tail -n 400
echo "PINNERD-VM JOURNAL END"
echo "PINNERD-VM DONE passed=0 failed=0"
exit 0
