#!/usr/bin/env python3
"""Builds an OCI image archive of one static busybox, for the test VM's containerd.

    tests/vm/oci-image.py BUSYBOX NAME OUT.tar

The VM has no network, so its containers' images are made here, on the host, from
Debian's busybox-static (tests/vm/run.sh downloads it from the release's archive) and
imported in the VM with `ctr -n k8s.io images import OUT.tar`, where the CRI plugin finds
them under NAME. One uncompressed layer: /bin/busybox, the applets the checks use as
links to it, and the directories runc mounts over. Its default command sleeps for a long
time, so that the same image serves as the pod sandbox ("pause") image.

Only the standard library; the archive is the OCI image layout (oci-layout, index.json,
blobs/sha256/...) in a tar, which `ctr images import` reads, the name given by the
`io.containerd.image.name` annotation of the manifest in index.json. Deterministic: the
same busybox gives the same digests.
"""

import hashlib
import io
import json
import sys
import tarfile

APPLETS = ["sh", "cat", "grep", "sleep", "echo", "true", "ls", "nproc", "taskset"]
DIRS = ["bin", "dev", "etc", "proc", "sys", "tmp", "run"]


def tar_bytes(add):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add(tar)
    return buf.getvalue()


def layer(busybox):
    def add(tar):
        for d in DIRS:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        data = open(busybox, "rb").read()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            info = tarfile.TarInfo("bin/" + applet)
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)

    return tar_bytes(add)


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: oci-image.py BUSYBOX NAME OUT.tar")
    busybox, name, out = sys.argv[1:]
    blobs = {}

    def blob(data, media_type):
        d = digest(data)
        blobs[d] = data
        return {"mediaType": media_type, "digest": d, "size": len(data)}

    rootfs = layer(busybox)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/bin"],
                "Cmd": ["/bin/sleep", "1000000000"],
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [digest(rootfs)]},
            "history": [{"created_by": "tests/vm/oci-image.py (busybox-static)"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": blob(config, "application/vnd.oci.image.config.v1+json"),
            "layers": [blob(rootfs, "application/vnd.oci.image.layer.v1.tar")],
        },
        sort_keys=True,
    ).encode()
    desc = blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
    }
    desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2, "manifests": [desc]}, sort_keys=True).encode()

    def add(tar):
        def file(path, data):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        file("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        file("index.json", index)
        for d, data in sorted(blobs.items()):
            file("blobs/sha256/" + d.split(":", 1)[1], data)

    with open(out, "wb") as f:
        f.write(tar_bytes(add))


if __name__ == "__main__":
    main()
