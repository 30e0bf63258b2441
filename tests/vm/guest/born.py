"""A unit's processes for the born-in-place check.

    born.py OUT          the unit's main process: writes OUT/pid, then sleeps
    born.py OUT child NAME
                         a process the unit starts later (its ExecReload=, started by
                         systemd, not forked from the main process pinnerd pinned, and
                         exec'd by born-first.sh, which noted its CPUs at start in
                         OUT/first): reads /proc/self/status (Cpus_allowed_list,
                         Mems_allowed_list), then it touches 64 MiB and writes
                         OUT/NAME.json with those and where the pages are (numa_maps,
                         pages per node)

python3-minimal has no mmap module: a bytearray this large is its own anonymous
mapping, and touching one byte per page allocates it where the policy says.
"""

import os
import sys
import time

def to_json(value):
    """JSON of nested dicts of str and int (Debian 12's python3-minimal lacks the json
    module)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{to_json(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(int(value))



def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Cpus_allowed_list", "Mems_allowed_list"):
                out[key] = value.strip()
    return out


def pages_by_node():
    nodes = {}
    with open("/proc/self/numa_maps") as f:
        for line in f:
            if " anon=" not in line or " file=" in line:
                continue
            for field in line.split()[2:]:
                if field.startswith("N") and "=" in field:
                    n, count = field[1:].split("=")
                    nodes[n] = nodes.get(n, 0) + int(count)
    return nodes


def child(out, name):
    first = status()
    # What born-first.sh read before this interpreter even started, if it ran first.
    try:
        with open(os.path.join(out, "first")) as f:
            first["Cpus_allowed_list_at_start"] = f.read().strip()
    except OSError:
        pass
    size = 64 << 20
    buf = bytearray(size)
    for off in range(0, size, os.sysconf("SC_PAGE_SIZE")):
        buf[off] = 1
    result = {"first": first, "pages": pages_by_node()}
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(to_json(result))
    os.rename(tmp, os.path.join(out, name + ".json"))


def main():
    out = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "child":
        child(out, sys.argv[3])
        return
    with open(os.path.join(out, "pid.tmp"), "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(os.path.join(out, "pid.tmp"), os.path.join(out, "pid"))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
