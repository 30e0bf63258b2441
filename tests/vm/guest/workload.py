"""A workload for the VM checks: a process with a few idle threads that starts one more
thread each time it receives SIGUSR1.

    workload.py OUT [THREADS [LATE_PREFIX]]

Run through a symlink to python3 named after the rule's comm (e.g. vmwork-exp), so the
process and its first THREADS threads carry that comm. A thread started later renames
itself LATE_PREFIX<n> when LATE_PREFIX is given: it inherits its creator's (pinned) mask,
so only a per-thread rule for that name can prove the daemon handled it. Writes the pid to
OUT/pid and the tid of every later thread, once named, to OUT/tids, one per line.

With VMWORK_WAKE_MS set, the idle threads wake up that often instead of sleeping for an
hour: a sleeping thread keeps a mask naming only offline CPUs until it next wakes, so
the hotplug checks need threads that wake for the kernel to widen their masks.
"""

import os
import signal
import sys
import threading
import time


WAKE_S = int(os.environ.get("VMWORK_WAKE_MS", "0")) / 1000 or 3600


def idle(name, named):
    if name:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
    named.set()
    while True:
        time.sleep(WAKE_S)


def start_thread(name=None):
    named = threading.Event()
    t = threading.Thread(target=idle, args=(name, named), daemon=True)
    t.start()
    named.wait()
    return t.native_id


def main():
    out = sys.argv[1]
    initial = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    late = sys.argv[3] if len(sys.argv) > 3 else None
    # Block SIGUSR1 before any thread exists so that only sigwait below receives it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    for _ in range(initial):
        start_thread()
    tmp = os.path.join(out, "pid.tmp")
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(tmp, os.path.join(out, "pid"))
    with open(os.path.join(out, "tids"), "a", buffering=1) as tids:
        n = 0
        while True:
            signal.sigwait({signal.SIGUSR1})
            n += 1
            tids.write(f"{start_thread(f'{late}{n}' if late else None)}\n")


if __name__ == "__main__":
    main()
