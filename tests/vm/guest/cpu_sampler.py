"""Samples which CPU every task is on, for the isolation checks.

    cpu_sampler.py SECONDS INTERVAL_MS CPUS MANAGED_CGROUP

Every INTERVAL_MS for SECONDS, reads /proc/*/task/*/stat and counts the samples on
CPUS (a kernel list): of the rule's tasks (those in MANAGED_CGROUP, a cgroup v2 path)
whose last CPU (field 39) is there, in any state; and, of tasks running or runnable
(state R: a sleeping task's field 39 is where it ran long ago, not where it is), those
of kernel threads (PF_KTHREAD) and of every other user-space task, by comm. Prints one
JSON object.
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


PF_KTHREAD = 0x00200000


def expand(text):
    cpus = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def cgroup_of(pid):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def main():
    seconds, interval = float(sys.argv[1]), float(sys.argv[2]) / 1000
    cpus, managed = expand(sys.argv[3]), sys.argv[4]
    me = os.getpid()
    rounds = managed_on = kernel_on = others_on = 0
    others = {}
    cgroups = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rounds += 1
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                # fields[0] is field 3 (state); field N is fields[N - 3].
                if int(fields[39 - 3]) not in cpus:
                    continue
                if pid not in cgroups:
                    cgroups[pid] = cgroup_of(pid)
                if cgroups[pid] == managed:
                    # The rule's own tasks count wherever they last ran, asleep or not.
                    managed_on += 1
                    continue
                if fields[0] != "R":
                    continue
                if int(fields[9 - 3]) & PF_KTHREAD:
                    kernel_on += 1
                    continue
                others_on += 1
                others[comm] = others.get(comm, 0) + 1
        time.sleep(interval)
    print(to_json({
        "rounds": rounds, "managed_on": managed_on, "kernel_on": kernel_on,
        "others_on": others_on, "others": others,
    }))


if __name__ == "__main__":
    main()
