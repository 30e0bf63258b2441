#!/usr/bin/python3
"""A small CRI v1 client for the test VM: pods and containers through containerd's CRI
plugin, the path a kubelet takes (RunPodSandbox, CreateContainer, StartContainer), which
is the only one that reaches NRI plugins (`ctr run` never does).

    cri.py version
    cri.py runp NAME --namespace NS [--uid UID] [--label K=V ...]    prints the pod's id
    cri.py create POD NAME IMAGE [--label K=V ...] [--mount HOST:PATH ...] -- COMMAND ...
                              prints the container's id (mounts are read-only binds)
    cri.py start ID
    cri.py run POD NAME IMAGE [--label K=V ...] [--mount HOST:PATH ...] -- COMMAND ...
                              create and start at once, as a kubelet does; prints the id
    cri.py status ID          JSON: state, exit_code, pid (while it runs), log_path, ...
    cri.py wait ID [SECONDS]  until the container exited; prints its exit code
    cri.py logs ID            what the container wrote (the CRI log's text, one line each)
    cri.py stop ID | rm ID | stopp POD | rmp POD
    cri.py clean              stops and removes every pod and container

Why this and not crictl: Debian packages no CRI client (crictl is not in Debian), and
PyPI's `container-runtime-interface-api` stubs need grpcio 1.73 and protobuf 6.31, where
Debian 13 has 1.51 and 3.21. So: Debian's python3-grpcio for the gRPC transport, called
with raw bytes, and the few CRI v1 messages used here encoded and decoded below by hand.
Field numbers are those of k8s.io/cri-api's pkg/apis/runtime/v1/api.proto (package
runtime.v1), which, a v1 API, never changes them. Pods run on the host's network
(NamespaceOption network = NODE), so no CNI plugin is needed. A pod's config is kept in
/run/pinnerd-vm/cri/POD.pb: CreateContainer wants it again, as a kubelet sends it.
"""

import json
import os
import sys
import time
import uuid

import grpc

SOCKET = "unix:///run/containerd/containerd.sock"
STATE = "/run/pinnerd-vm/cri"
LOGS = "/var/log/pods"
TIMEOUT = 60

# CRI v1 enums
NODE = 2  # NamespaceMode
STATES = {0: "created", 1: "running", 2: "exited", 3: "unknown"}  # ContainerState

# ---------------------------------------------------------------- protobuf, by hand


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_varint(num, n):
    return varint(num << 3) + varint(n) if n else b""


def f_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def f_str(num, s):
    return f_bytes(num, s) if s else b""


def f_map(num, d):
    """A map<string,string> field: repeated entries of key = 1, value = 2."""
    return b"".join(f_bytes(num, f_str(1, k) + f_str(2, v)) for k, v in sorted(d.items()))


def decode(data):
    """{field number: [values]}: ints for varints, bytes for length-delimited fields."""
    out = {}
    i = 0

    def read_varint():
        nonlocal i
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while i < len(data):
        key = read_varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            v = read_varint()
        elif wire == 2:
            n = read_varint()
            v = data[i : i + n]
            i += n
        elif wire == 1:
            v = int.from_bytes(data[i : i + 8], "little")
            i += 8
        elif wire == 5:
            v = int.from_bytes(data[i : i + 4], "little")
            i += 4
        else:
            raise ValueError(f"wire type {wire} of field {num}")
        out.setdefault(num, []).append(v)
    return out


def one(msg, num, default=None):
    return msg.get(num, [default])[0]


def text(msg, num):
    return one(msg, num, b"").decode()


def signed32(n):
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def strmap(msg, num):
    out = {}
    for entry in msg.get(num, []):
        e = decode(entry)
        out[text(e, 1)] = text(e, 2)
    return out


# ---------------------------------------------------------------- calls


def call(method, request):
    with grpc.insecure_channel(SOCKET) as channel:
        fn = channel.unary_unary("/runtime.v1.RuntimeService/" + method)
        try:
            return decode(fn(request, timeout=TIMEOUT))
        except grpc.RpcError as e:
            sys.exit(f"cri.py: {method}: {e.code().name}: {e.details()}")


def pod_config(name, namespace, uid, labels):
    # PodSandboxMetadata: name 1, uid 2, namespace 3, attempt 4
    metadata = f_str(1, name) + f_str(2, uid) + f_str(3, namespace)
    # NamespaceOption: network 1 (NODE: the host's network, no CNI), pid 2, ipc 3
    ns = f_varint(1, NODE)
    # LinuxSandboxSecurityContext: namespace_options 1
    security = f_bytes(1, ns)
    # LinuxPodSandboxConfig: cgroup_parent 1, security_context 2. The parent a kubelet
    # with the cgroupfs driver gives a best-effort pod.
    linux = f_str(1, f"/kubepods/besteffort/pod{uid}") + f_bytes(2, security)
    # PodSandboxConfig: metadata 1, log_directory 3, labels 6, linux 8. No hostname 2:
    # the pod shares the host's UTS namespace with its network, as a kubelet leaves it
    # unset for a host-network pod.
    return (
        f_bytes(1, metadata)
        + f_str(3, f"{LOGS}/{namespace}_{name}_{uid}")
        + f_map(6, labels)
        + f_bytes(8, linux)
    )


def labels_of(pairs):
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k:
            sys.exit(f"cri.py: label '{p}' is not KEY=VALUE")
        out[k] = v
    return out


def mount_of(spec):
    """HOST:PATH as a read-only bind (Mount: container_path 1, host_path 2, readonly 3)."""
    host, sep, path = spec.partition(":")
    if not sep or not host.startswith("/") or not path.startswith("/"):
        sys.exit(f"cri.py: mount '{spec}' is not HOST:PATH (both absolute)")
    return f_str(1, path) + f_str(2, host) + f_varint(3, 1)


def parse(args, flags):
    """Positional arguments, and the values of --FLAG options (repeatable ones as lists)."""
    pos, opts = [], {f: [] for f in flags}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pos.append(args[i + 1 :])
            break
        if a.startswith("--") and a[2:] in flags:
            if i + 1 >= len(args):
                sys.exit(f"cri.py: {a} needs a value")
            opts[a[2:]].append(args[i + 1])
            i += 2
            continue
        if a.startswith("--"):
            sys.exit(f"cri.py: unknown option {a}")
        pos.append(a)
        i += 1
    return pos, opts


def status(cid):
    # ContainerStatusRequest: container_id 1, verbose 2
    r = call("ContainerStatus", f_str(1, cid) + f_varint(2, 1))
    # ContainerStatusResponse: status 1, info 2
    st = decode(one(r, 1, b""))
    info = strmap(r, 2)
    pid = None
    if "info" in info:
        try:
            pid = json.loads(info["info"]).get("pid") or None
        except ValueError:
            pass
    meta = decode(one(st, 2, b""))
    # ContainerStatus: id 1, metadata 2, state 3, created_at 4, started_at 5,
    # finished_at 6, exit_code 7, reason 10, message 11, labels 12, log_path 15
    return {
        "id": text(st, 1),
        "name": text(meta, 1),
        "state": STATES.get(one(st, 3, 0), "unknown"),
        "created_at": one(st, 4, 0),
        "started_at": one(st, 5, 0),
        "finished_at": one(st, 6, 0),
        "exit_code": signed32(one(st, 7, 0)),
        "reason": text(st, 10),
        "message": text(st, 11),
        "labels": strmap(st, 12),
        "log_path": text(st, 15),
        "pid": pid,
    }


def ids(method, field):
    # List{PodSandbox,Containers}Response: items / containers 1; each id 1
    r = call(method, b"")
    return [text(decode(item), 1) for item in r.get(field, [])]


def main(argv):
    if not argv:
        sys.exit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "version":
        # VersionResponse: version 1, runtime_name 2, runtime_version 3, runtime_api_version 4
        r = call("Version", f_str(1, "v1"))
        print(f"{text(r, 2)} {text(r, 3)} (CRI {text(r, 4)})")
    elif cmd == "runp":
        pos, opts = parse(args, ["namespace", "uid", "label"])
        if len(pos) != 1 or not opts["namespace"]:
            sys.exit("usage: cri.py runp NAME --namespace NS [--uid UID] [--label K=V ...]")
        uid = (opts["uid"] or [uuid.uuid4().hex])[-1]
        config = pod_config(pos[0], opts["namespace"][-1], uid, labels_of(opts["label"]))
        # RunPodSandboxRequest: config 1
        r = call("RunPodSandbox", f_bytes(1, config))
        pod = text(r, 1)
        os.makedirs(STATE, exist_ok=True)
        with open(f"{STATE}/{pod}.pb", "wb") as f:
            f.write(config)
        print(pod)
    elif cmd in ("create", "run"):
        pos, opts = parse(args, ["label", "mount"])
        if len(pos) != 4 or not isinstance(pos[3], list) or not pos[3]:
            sys.exit(
                f"usage: cri.py {cmd} POD NAME IMAGE [--label K=V ...] [--mount HOST:PATH ...] -- COMMAND ..."
            )
        pod, name, image, command = pos
        try:
            sandbox = open(f"{STATE}/{pod}.pb", "rb").read()
        except OSError:
            sys.exit(f"cri.py: no pod {pod} made by cri.py runp")
        log_dir = text(decode(sandbox), 3)
        os.makedirs(log_dir, exist_ok=True)
        # ContainerConfig: metadata 1 (ContainerMetadata: name 1, attempt 2), image 2
        # (ImageSpec: image 1), command 3, mounts 7, labels 9, log_path 11 (relative to
        # the pod's log_directory)
        config = (
            f_bytes(1, f_str(1, name))
            + f_bytes(2, f_str(1, image))
            + b"".join(f_bytes(3, c) for c in command)
            + b"".join(f_bytes(7, mount_of(m)) for m in opts["mount"])
            + f_map(9, labels_of(opts["label"]))
            + f_str(11, f"{name}/0.log")
        )
        # CreateContainerRequest: pod_sandbox_id 1, config 2, sandbox_config 3
        r = call("CreateContainer", f_str(1, pod) + f_bytes(2, config) + f_bytes(3, sandbox))
        if cmd == "run":
            call("StartContainer", f_str(1, text(r, 1)))
        print(text(r, 1))
    elif cmd == "start" and len(args) == 1:
        call("StartContainer", f_str(1, args[0]))  # StartContainerRequest: container_id 1
    elif cmd == "status" and len(args) == 1:
        print(json.dumps(status(args[0]), sort_keys=True))
    elif cmd == "wait" and len(args) in (1, 2):
        deadline = time.monotonic() + float(args[1] if len(args) == 2 else TIMEOUT)
        while True:
            st = status(args[0])
            if st["state"] == "exited":
                print(st["exit_code"])
                break
            if time.monotonic() > deadline:
                sys.exit(f"cri.py: container {args[0]} still {st['state']}")
            time.sleep(0.1)
    elif cmd == "logs" and len(args) == 1:
        path = status(args[0])["log_path"]
        # The CRI log format: "TIMESTAMP STREAM TAG TEXT" a line, TAG P for a partial line.
        try:
            lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        except OSError as e:
            sys.exit(f"cri.py: {path}: {e.strerror}")
        partial = ""
        for line in lines:
            parts = line.split(" ", 3)
            if len(parts) < 3:
                continue
            partial += parts[3] if len(parts) == 4 else ""
            if parts[2] != "P":
                print(partial)
                partial = ""
    elif cmd == "stop" and len(args) == 1:
        call("StopContainer", f_str(1, args[0]) + f_varint(2, 10))  # container_id 1, timeout 2
    elif cmd == "rm" and len(args) == 1:
        call("RemoveContainer", f_str(1, args[0]))
    elif cmd == "stopp" and len(args) == 1:
        call("StopPodSandbox", f_str(1, args[0]))  # pod_sandbox_id 1
    elif cmd == "rmp" and len(args) == 1:
        call("RemovePodSandbox", f_str(1, args[0]))
        try:
            os.unlink(f"{STATE}/{args[0]}.pb")
        except OSError:
            pass
    elif cmd == "clean" and not args:
        for pod in ids("ListPodSandbox", 1):
            call("StopPodSandbox", f_str(1, pod))
            call("RemovePodSandbox", f_str(1, pod))
        for cid in ids("ListContainers", 1):
            call("RemoveContainer", f_str(1, cid))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
