"""A workload for the memory checks: allocates and touches SIZE_MB MiB of anonymous
memory, writes its pid to OUT/pid once every page is touched, then sleeps.

    memworker.py OUT SIZE_MB

Where the pages land is decided by the CPU that touches them (the kernel's local
policy), or by the memory policy it was started with (`pinnerd run --memory bind`).
The guest has python3-minimal, which lacks the mmap module: a bytearray this large is
its own anonymous mapping (glibc's malloc maps anything over its threshold).
"""

import os
import sys
import time


def main():
    out = sys.argv[1]
    size = int(sys.argv[2]) << 20
    buf = bytearray(size)
    for off in range(0, size, os.sysconf("SC_PAGE_SIZE")):
        buf[off] = 1
    tmp = os.path.join(out, "pid.tmp")
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(tmp, os.path.join(out, "pid"))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
