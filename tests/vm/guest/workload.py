"""A workload for the VM checks: a process with a few idle threads that starts one more
thread each time it receives SIGUSR1.

Run through a symlink to python3 named after the rule's comm (e.g. vmwork-exp), so the
process and all its threads carry that comm. Writes its pid to OUT/pid and the tid of
every thread it starts later to OUT/tids, one per line.
"""

import os
import signal
import sys
import threading
import time


def idle():
    while True:
        time.sleep(3600)


def start_thread():
    t = threading.Thread(target=idle, daemon=True)
    t.start()
    return t.native_id


def main():
    out = sys.argv[1]
    initial = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    # Block SIGUSR1 before any thread exists so that only sigwait below receives it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    for _ in range(initial):
        start_thread()
    tmp = os.path.join(out, "pid.tmp")
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(tmp, os.path.join(out, "pid"))
    with open(os.path.join(out, "tids"), "a", buffering=1) as tids:
        while True:
            signal.sigwait({signal.SIGUSR1})
            tids.write(f"{start_thread()}\n")


if __name__ == "__main__":
    main()
