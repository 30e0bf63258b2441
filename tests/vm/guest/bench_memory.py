"""The memory benchmark inside the test VM (PINNERD_VM_BENCH=memory tests/vm/run.sh).

    bench_memory.py [REPS]          both parts (REPS 0: event-to-pin alone); results as
                                    "PINNERD-VM BENCH ..." lines
    bench_memory.py drive PID LOG   (internal) moves PID's memory between the nodes
                                    with `pinnerd pin --memory follow` until LOG.stop exists
    bench_memory.py watch TID OUT   (internal) samples thread TID every 10 ms until
                                    OUT.stop exists; writes what it saw to OUT

1. Migration throughput: a 512 MiB worker (memworker.py) touched on node 0 (CPUs 0-3)
   is moved to node 1 by numactl's `migratepages PID 0 1`, by pinnerd through the bus
   (`PinProcessWith` with `cpus` 4-7 and `memory` follow: the daemon's follow job) and
   by `pinnerd pin PID --cpus 4-7 --memory follow` (the same, plus the command's own
   start), and, as a control, by migratepages after `taskset -a -p -c 4-7` (the
   worker's threads on node 1 first, as pinnerd has them); a fresh worker each time,
   the order rotating. Timed from the request (the
   command's start) to 99% of the worker's anonymous memory being on node 1, watched in
   the worker's own cgroup's memory.numa_stat every 10 ms (no page-table walk, the same
   watcher for every tool); the daemon's own duration of its migrate_pages calls is
   read from Explain.
2. Event-to-pin: a process is spawned (posix_spawn of a `sleep` named vmbench-e2p) 10
   times a second and timed from just before the spawn to its mask being the rule's
   CPU 6 (sched_getaffinity polled every millisecond), first with nothing else running,
   then while a second process moves a 512 MiB worker back and forth between the nodes
   through pinnerd (PinProcessWith, memory follow); spawns made while a move ran (request to 99%
   on the target) are "during". In each phase the daemon's loop thread (its main thread)
   is watched: its scheduler statistics (time on a CPU, time waiting for one) per pin,
   and every 10 ms its state and, when it sleeps, where (wchan): whether a slower pin is
   the loop working longer, waiting for a CPU, or blocked in the kernel.

python3-minimal only: no json, no statistics module.
"""

import os
import re
import subprocess
import sys
import time

LIB = os.path.dirname(os.path.abspath(__file__))
WORK = "/run/pinnerd-vm-bench"
MIB = 1 << 20


def out(*words):
    print("PINNERD-VM BENCH", *words, flush=True)


def numa_stat_file(pid):
    """The memory.numa_stat of pid's own cgroup when it holds pid alone, else None."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                d = "/sys/fs/cgroup" + line[3:].strip()
                try:
                    with open(d + "/cgroup.procs") as p:
                        procs = p.read().split()
                except OSError:
                    return None
                stat = d + "/memory.numa_stat"
                if procs == [str(pid)] and os.path.exists(stat):
                    return stat
    return None


def anon_nodes(pid, stat):
    """Anonymous bytes per node of pid: its cgroup's numa_stat, else numa_maps."""
    nodes = {}
    if stat:
        with open(stat) as f:
            for line in f:
                if line.startswith("anon "):
                    for w in line.split()[1:]:
                        n, v = w[1:].split("=")
                        nodes[int(n)] = int(v)
                    return nodes
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            w = line.split()
            if not any(x.startswith("anon=") for x in w) or any(x.startswith("file=") for x in w):
                continue
            kb = 4
            for x in w:
                if x.startswith("kernelpagesize_kB="):
                    kb = int(x.split("=")[1])
            for x in w[2:]:
                if x[:1] == "N" and "=" in x:
                    n, v = x[1:].split("=")
                    if n.isdigit():
                        nodes[int(n)] = nodes.get(int(n), 0) + int(v) * kb * 1024
    return nodes


def share(nodes, node):
    total = sum(nodes.values())
    return nodes.get(node, 0) / total if total else 0.0


def wait_on(pid, stat, node, limit, proc=None):
    """Polls every 10 ms until 99% of pid's anonymous memory is on node; the
    monotonic time it was first seen, or None after limit seconds. With proc (a
    Popen), also the time it was first seen to have exited: (done, exited)."""
    deadline = time.monotonic() + limit
    exited = None
    while time.monotonic() < deadline:
        if proc is not None and exited is None and proc.poll() is not None:
            exited = time.monotonic()
        if share(anon_nodes(pid, stat), node) >= 0.99:
            done = time.monotonic()
            if proc is None:
                return done
            proc.wait()
            return done, exited if exited is not None else time.monotonic()
        time.sleep(0.01)
    return None if proc is None else (None, exited)


def start_worker(name, mib, cpus):
    d = os.path.join(WORK, name)
    subprocess.run(["rm", "-rf", d], check=True)
    os.makedirs(d)
    link = "/usr/local/bin/" + name
    if not os.path.lexists(link):
        os.symlink("/usr/bin/python3", link)
    subprocess.run(
        ["systemd-run", "--quiet", "--unit=" + name, "--service-type=simple",
         "taskset", "-c", cpus, link, os.path.join(LIB, "memworker.py"), d, str(mib)],
        check=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(d, "pid")) as f:
                return int(f.read())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise RuntimeError(f"worker {name} did not start")


def stop_worker(name):
    subprocess.run(["systemctl", "stop", name], stderr=subprocess.DEVNULL)


def pct(values, p):
    """The p-th percentile (nearest rank) of values."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = max(0, min(len(v) - 1, -(-p * len(v) // 100) - 1))
    return v[k]


def summary(values, unit=""):
    v = sorted(values)
    if not v:
        return "n=0"
    return (f"n={len(v)} p50={pct(v, 50):.2f}{unit} p90={pct(v, 90):.2f}{unit} "
            f"p99={pct(v, 99):.2f}{unit} max={v[-1]:.2f}{unit}")


def median_range(values, digits=1):
    v = sorted(values)
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return f"median {m:.{digits}f} (range {v[0]:.{digits}f}-{v[-1]:.{digits}f})"


BUS = ["busctl", "--system", "call", "org.pinnerd.Pinnerd1", "/org/pinnerd/Pinnerd1",
       "org.pinnerd.Pinnerd1"]


def pin_cmd(pid, cpus):
    return ["pinnerd", "pin", str(pid), "--cpus", cpus, "--memory", "follow"]


def pin_bus_cmd(pid, cpus):
    """PinProcessWith with the memory key, as `pinnerd pin --memory follow` sends it."""
    return BUS + ["PinProcessWith", "ua{sv}", str(pid), "2", "cpus", "s", cpus,
                  "memory", "s", "follow"]


def daemon_took(pid):
    """The daemon's own figure for the move (Explain: "memory follow: moved … in N s"),
    waiting up to 30 s for the job's outcome."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = subprocess.run(BUS + ["Explain", "u", str(pid)], capture_output=True, text=True)
        m = re.search(r"memory follow: moved .* in ([0-9.]+) s", r.stdout)
        if m:
            return float(m.group(1))
        time.sleep(0.2)
    return None


# ------------------------------------------------------------------ 1. throughput

def throughput(reps, mib):
    tools = ["migratepages", "pinnerd-bus", "pinnerd-pin", "taskset+migratepages"]
    rates = {t: [] for t in tools}
    by_rep = {t: {} for t in tools}
    secs = {t: [] for t in tools}
    took = {t: [] for t in tools}
    for rep in range(reps):
        order = tools[rep % len(tools):] + tools[:rep % len(tools)]
        for tool in order:
            name = f"vmbench-m{rep}{tools.index(tool)}"
            pid = start_worker(name, mib, "0-3")
            stat = numa_stat_file(pid)
            before = anon_nodes(pid, stat)
            if share(before, 0) < 0.9:
                out(f"migrate tool={tool} rep={rep} skipped: only {share(before, 0):.0%} "
                    f"of its {sum(before.values()) // MIB} MiB on node 0")
                stop_worker(name)
                continue
            if tool == "taskset+migratepages":
                # The worker's threads moved to node 1's CPUs first, as pinnerd does.
                subprocess.run(["taskset", "-a", "-p", "-c", "4-7", str(pid)],
                               stdout=subprocess.DEVNULL, check=True)
            cmd = {"migratepages": ["migratepages", str(pid), "0", "1"],
                   "taskset+migratepages": ["migratepages", str(pid), "0", "1"],
                   "pinnerd-bus": pin_bus_cmd(pid, "4-7"),
                   "pinnerd-pin": pin_cmd(pid, "4-7")}[tool]
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            done, exited = wait_on(pid, stat, 1, 120, p)
            t_exit = (exited or time.monotonic()) - t0
            after = anon_nodes(pid, stat)
            own = daemon_took(pid) if tool.startswith("pinnerd") else None
            stop_worker(name)
            if done is None:
                out(f"migrate tool={tool} rep={rep} not done in 120 s: "
                    f"{share(after, 1):.1%} on node 1")
                continue
            moved = before.get(0, 0) - after.get(0, 0)
            t = done - t0
            rate = moved / MIB / t
            rates[tool].append(rate)
            by_rep[tool][rep] = rate
            secs[tool].append(t)
            if own is not None:
                took[tool].append(own)
            out(f"migrate tool={tool} rep={rep} moved_mib={moved / MIB:.0f} seconds={t:.3f} "
                f"command_exit={t_exit:.3f} mib_per_s={rate:.1f} on_node1={share(after, 1):.1%} "
                f"daemon_took={own} source={'numa_stat' if stat else 'numa_maps'}")
    for tool in tools:
        if rates[tool]:
            out(f"migrate-summary tool={tool} n={len(rates[tool])} "
                f"MiB/s {median_range(rates[tool])}; seconds {median_range(secs[tool])}"
                + (f"; daemon's own migrate_pages seconds {median_range(took[tool])}"
                   if took[tool] else ""))
    med = lambda v: sorted(v)[len(v) // 2]
    for tool in tools[1:3]:
        if rates["migratepages"] and rates[tool]:
            out(f"migrate-ratio {tool}/migratepages median MiB/s "
                f"{med(rates[tool]) / med(rates['migratepages']):.2f}")
        # The same ratio within each repetition (the two moves minutes apart at most),
        # which the machine's slow drifts in speed touch less than the medians above.
        paired = [by_rep[tool][r] / by_rep["migratepages"][r]
                  for r in by_rep[tool] if r in by_rep["migratepages"]]
        if paired:
            out(f"migrate-ratio-paired {tool}/migratepages n={len(paired)} "
                f"{median_range(paired, 2)}")


# ------------------------------------------------------------------ 2. event-to-pin

TARGET = {6}
# Spawns per second: the sampler sleeps 1 ms between polls, so that it does not take
# the emulated machine's CPU time from the daemon and the migration.
RATE = 10


def sample(seconds, rate, link):
    """Spawns link (sleep) rate times a second for seconds; returns [(t0, latency_ms)]
    and the count of those never pinned within 1.5 s."""
    samples, missed, pending = [], 0, []
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= end and not pending:
            break
        if now < end and now >= nxt:
            t0 = time.monotonic()
            pid = os.posix_spawn(link, [link, "2"], os.environ)
            pending.append((t0, pid))
            nxt += 1.0 / rate
        keep = []
        for t0, pid in pending:
            try:
                aff = os.sched_getaffinity(pid)
            except OSError:
                missed += 1
                continue
            now = time.monotonic()
            if aff == TARGET:
                samples.append((t0, (now - t0) * 1000))
            elif now - t0 > 1.5:
                missed += 1
            else:
                keep.append((t0, pid))
        pending = keep
        time.sleep(0.001)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
    return samples, missed


def delay_buckets():
    """The daemon's own event-to-pin histogram (`Metrics`: from reading a batch of proc
    connector events to each pin it made): {upper bound in s: cumulative count}."""
    r = subprocess.run(BUS + ["Metrics"], capture_output=True, text=True)
    return {float(le): int(n) for le, n in re.findall(
        r'pinnerd_event_to_pin_delay_seconds_bucket\{le=\\?"([0-9.e+-]+)\\?"\} ([0-9]+)',
        r.stdout)}


def delay_summary(before, after):
    """p50, p99 and the largest bucket of the pins between two delay_buckets()."""
    bounds = sorted(after)
    n = after[bounds[-1]] - before.get(bounds[-1], 0) if bounds else 0
    if n <= 0:
        return "n=0"

    def upto(q):
        for b in bounds:
            if after[b] - before.get(b, 0) >= q * n:
                return f"<={b * 1000:g} ms"
        return f">{bounds[-1] * 1000:g} ms"
    return f"n={n} p50{upto(0.5)} p99{upto(0.99)} max{upto(1.0)}"


def drive(pid, log):
    """Moves pid's memory to node 1, then 0, then 1 … through pinnerd (PinProcessWith
    with the memory key: the move alone, no Explain) until log.stop exists; one line
    per move: request time, time 99% was on the target (monotonic)."""
    stat = numa_stat_file(pid)
    node = 1
    with open(log, "w") as f:
        while not os.path.exists(log + ".stop"):
            t0 = time.monotonic()
            r = subprocess.run(pin_bus_cmd(pid, "4-7" if node == 1 else "0-3"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                out(f"e2p-move-request-failed after {time.monotonic() - t0:.1f} s: "
                    f"{r.stderr.strip()}")
                time.sleep(1.5)
                continue
            done = wait_on(pid, stat, node, 120)
            f.write(f"{t0} {done if done else time.monotonic()} {node}\n")
            f.flush()
            node = 1 - node
            # The daemon's memory.follow-interval (1 s in the VM) counts from a job's end.
            time.sleep(1.5)


def schedstat(tid):
    """(ns on a CPU, ns runnable but waiting for one) of thread tid."""
    with open(f"/proc/{tid}/task/{tid}/schedstat") as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def kernel_stack(base, frames):
    """The first frames of a thread's kernel stack, comma-separated."""
    try:
        with open(base + "/stack") as f:
            return ",".join(l.split()[1].split("+")[0] for l in f.readlines()[:frames])
    except (OSError, IndexError):
        return "unreadable"


def watch(tid, out_path):
    """Samples thread tid every 10 ms until out_path.stop exists. Writes one line: the
    sample count, its states, where it slept (wchan), the first kernel frames of blocked
    (D) samples, and its longest stall: the longest run of samples in which it was not
    waiting in its poll, with the stacks seen then."""
    states, chans, stacks, n = {}, {}, {}, 0
    base = f"/proc/{tid}/task/{tid}"
    stall, stall_stacks, longest = None, {}, (0.0, {})
    ended = ""
    t_start = time.monotonic()
    while not os.path.exists(out_path + ".stop"):
        try:
            with open(base + "/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            with open(base + "/wchan") as f:
                wchan = f.read().strip() or "-"
        except (OSError, IndexError):
            ended = f" ended_after_s={time.monotonic() - t_start:.1f}"
            break
        now = time.monotonic()
        n += 1
        states[st] = states.get(st, 0) + 1
        if st != "R":
            chans[wchan] = chans.get(wchan, 0) + 1
        if st == "D":
            top = kernel_stack(base, 4)
            stacks[top] = stacks.get(top, 0) + 1
        if st == "S" and wchan == "do_sys_poll":
            stall = None
        else:
            if stall is None:
                stall, stall_stacks = now, {}
            if st != "R":
                top = kernel_stack(base, 6)
                stall_stacks[top] = stall_stacks.get(top, 0) + 1
            if now - stall > longest[0]:
                longest = (now - stall, dict(stall_stacks))
        time.sleep(0.01)
    top = lambda d: ",".join(f"{k}:{v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:6])
    with open(out_path, "w") as f:
        f.write(f"samples={n}{ended} states={top(states)} wchan={top(chans) or '-'} "
                f"blocked_stacks={top(stacks) or '-'} longest_stall_ms={longest[0] * 1000:.0f} "
                f"stall_stacks={top(longest[1]) or '-'}\n")


class LoopWatch:
    """The daemon's loop thread over one phase: schedstat deltas and a watch sampler."""

    def __init__(self, tag):
        self.tag = tag
        self.pid = int(subprocess.run(["systemctl", "show", "-P", "MainPID", "pinnerd"],
                                      capture_output=True, text=True).stdout.strip() or 0)
        self.out = os.path.join(WORK, f"watch-{tag}")
        for f in (self.out, self.out + ".stop"):
            if os.path.exists(f):
                os.unlink(f)
        self.t0 = schedstat(self.pid)
        self.proc = subprocess.Popen(["taskset", "-c", "3", sys.executable, __file__,
                                      "watch", str(self.pid), self.out])

    def end(self, pins):
        try:
            t1 = schedstat(self.pid)
        except OSError:
            t1 = None
        open(self.out + ".stop", "w").close()
        self.proc.wait()
        with open(self.out) as f:
            seen = f.read().strip()
        if t1 is None:
            out(f"loop-{self.tag} the daemon (pid {self.pid}) ended during the phase: {seen}")
            return
        per = lambda ns: f"{ns / 1e6 / pins:.2f}" if pins > 0 else "-"
        out(f"loop-{self.tag} pins={pins} on_cpu_ms_per_pin={per(t1[0] - self.t0[0])} "
            f"wait_for_cpu_ms_per_pin={per(t1[1] - self.t0[1])} {seen}")


def pins_between(before, after):
    bounds = sorted(after)
    return after[bounds[-1]] - before.get(bounds[-1], 0) if bounds else 0


def event_to_pin(seconds, mib):
    link = "/usr/local/bin/vmbench-e2p"
    if not os.path.lexists(link):
        os.symlink("/bin/sleep", link)
    with open("/etc/pinnerd.d/80-vmbench-e2p.toml", "w") as f:
        f.write('[[rule]]\nname = "vmbench-e2p"\n[rule.match]\ncomm = "vmbench-e2p"\n'
                '[rule.place]\ncpus = "6"\n')
    os.sched_setaffinity(0, {1})
    # The rule is in force once a probe is pinned by it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = os.posix_spawn(link, [link, "1"], os.environ)
        time.sleep(0.5)
        pinned = os.sched_getaffinity(probe) == TARGET
        os.waitpid(probe, 0)
        if pinned:
            break
    h0 = delay_buckets()
    w = LoopWatch("quiet")
    base, base_missed = sample(seconds, RATE, link)
    h1 = delay_buckets()
    w.end(pins_between(h0, h1))
    out(f"e2p-quiet {summary([s[1] for s in base], ' ms')} missed={base_missed}")
    out(f"daemon-delay-quiet {delay_summary(h0, h1)}")

    pid = start_worker("vmbench-e2pmem", mib, "0-3")
    log = os.path.join(WORK, "drive.log")
    for f in (log, log + ".stop"):
        if os.path.exists(f):
            os.unlink(f)
    driver = subprocess.Popen(["taskset", "-c", "2", sys.executable, __file__, "drive",
                               str(pid), log])
    time.sleep(0.5)
    h2 = delay_buckets()
    w = LoopWatch("with-migrations")
    busy, busy_missed = sample(seconds * 2, RATE, link)
    h3 = delay_buckets()
    w.end(pins_between(h2, h3))
    open(log + ".stop", "w").close()
    driver.wait()
    stop_worker("vmbench-e2pmem")
    moves = []
    with open(log) as f:
        for line in f:
            a, b, _ = line.split()
            moves.append((float(a), float(b)))
    during = [s[1] for s in busy if any(a <= s[0] <= b for a, b in moves)]
    between = [s[1] for s in busy if not any(a <= s[0] <= b for a, b in moves)]
    move_s = [b - a for a, b in moves]
    out(f"e2p-moves n={len(moves)} seconds {median_range(move_s) if moves else '-'} "
        f"of {seconds * 2} s")
    out(f"e2p-during-migration {summary(during, ' ms')} missed={busy_missed}")
    out(f"e2p-between-migrations {summary(between, ' ms')}")
    out(f"daemon-delay-with-migrations {delay_summary(h2, h3)}")
    os.unlink("/etc/pinnerd.d/80-vmbench-e2p.toml")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "drive":
        drive(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "watch":
        watch(int(sys.argv[2]), sys.argv[3])
        return
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    os.makedirs(WORK, exist_ok=True)
    out(f"machine kernel={os.uname().release} cpus={os.cpu_count()} "
        f"nodes={len([d for d in os.listdir('/sys/devices/system/node') if d.startswith('node')])}")
    with open("/proc/sys/kernel/numa_balancing") as f:
        out(f"numa_balancing={f.read().strip()}")
    if reps > 0:
        throughput(reps, 512)
    event_to_pin(30, 512)


if __name__ == "__main__":
    main()
