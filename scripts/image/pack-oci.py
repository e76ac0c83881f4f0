#!/usr/bin/env python3
"""Packs directories into a reproducible OCI image archive (used by scripts/build-image.sh).

    pack-oci.py --out IMAGE.tar --name docker.io/library/kube-proxy-rs:0.1.0 --epoch SECONDS \
        --entrypoint /usr/local/bin/kube-proxy --env PATH=... --label k=v ... LAYER_DIR [LAYER_DIR ...]

Each LAYER_DIR becomes one gzip layer (in order). Every tar (layers and the archive itself) has sorted entries,
mtime = --epoch, uid/gid 0 with no owner names, and gzip headers without names or times, so the same inputs
give the same bytes. The archive holds oci-layout, index.json and blobs/sha256/ (OCI image layout, for
`podman load` and `ctr images import`) and a manifest.json (for `docker load`). Prints the image digest (the
manifest's sha256) and writes a JSON summary next to the archive (IMAGE.tar.json).
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time


def tar_info(name, st, epoch):
    """A TarInfo for a file system entry, normalised: owner root, fixed mtime, permission bits kept."""
    ti = tarfile.TarInfo(name)
    ti.mode = stat.S_IMODE(st.st_mode)
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mtime = epoch
    return ti


def walk_sorted(root):
    """Relative paths under root (directories before their contents), sorted byte-wise."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for n in dirnames + filenames:
            out.append(os.path.normpath(os.path.join(rel, n)))
    return sorted(out, key=lambda p: p.encode())


def layer_tar(root, epoch):
    """The uncompressed tar of one layer directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel in walk_sorted(root):
            path = os.path.join(root, rel)
            st = os.lstat(path)
            ti = tar_info(rel, st, epoch)
            if stat.S_ISLNK(st.st_mode):
                ti.type = tarfile.SYMTYPE
                ti.linkname = os.readlink(path)
                tar.addfile(ti)
            elif stat.S_ISDIR(st.st_mode):
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
            elif stat.S_ISREG(st.st_mode):
                ti.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(ti, f)
            else:
                sys.exit(f"pack-oci: {path}: not a file, directory or symlink (devices do not belong in a layer)")
    return buf.getvalue()


def gz(data):
    """gzip without file name or time in the header (mtime=0): reproducible."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as f:
        f.write(data)
    return buf.getvalue()


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build(args):
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.epoch))
    blobs, layers, diff_ids, history = {}, [], [], []
    uncompressed = 0
    for d in args.layers:
        if not os.path.isdir(d):
            sys.exit(f"pack-oci: layer directory {d} does not exist")
        raw = layer_tar(d, args.epoch)
        comp = gz(raw)
        uncompressed += len(raw)
        diff_ids.append(sha(raw))
        blobs[sha(comp)] = comp
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": sha(comp), "size": len(comp)})
        history.append({"created": created, "created_by": f"scripts/build-image.sh: {os.path.basename(d)}"})
    labels = dict(kv.split("=", 1) for kv in args.label)
    config = {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"Entrypoint": [args.entrypoint], "Env": args.env, "Labels": labels, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_b = canonical(config)
    blobs[sha(config_b)] = config_b
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(config_b), "size": len(config_b)},
        "layers": layers, "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_b = canonical(manifest)
    blobs[sha(manifest_b)] = manifest_b
    return config_b, manifest_b, blobs, uncompressed


def archive(args, config_b, manifest_b, blobs):
    """The outer (uncompressed) archive: OCI layout plus docker's manifest.json."""
    repo_tag = args.name.removeprefix("docker.io/library/")
    tag = args.name.rsplit(":", 1)[1]
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "digest": sha(manifest_b), "size": len(manifest_b),
                            "annotations": {"io.containerd.image.name": args.name,
                                            "org.opencontainers.image.ref.name": tag}}]}
    layer_paths = ["blobs/sha256/" + l["digest"][7:] for l in json.loads(manifest_b)["layers"]]
    docker = [{"Config": "blobs/sha256/" + sha(config_b)[7:], "RepoTags": [repo_tag], "Layers": layer_paths}]
    files = {"oci-layout": canonical({"imageLayoutVersion": "1.0.0"}), "index.json": canonical(index),
             "manifest.json": canonical(docker)}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest[7:]] = data
    entries = sorted(set(files) | {"blobs", "blobs/sha256"})
    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in entries:
            ti = tarfile.TarInfo(name)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mtime = args.epoch
            if name in files:
                ti.mode, ti.size = 0o644, len(files[name])
                tar.addfile(ti, io.BytesIO(files[name]))
            else:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(ti)
    os.replace(tmp, args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--name", required=True, help="fully qualified name:tag (docker.io/library/NAME:TAG)")
    p.add_argument("--epoch", type=int, required=True, help="mtime of every entry and the 'created' time")
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    p.add_argument("layers", nargs="+")
    args = p.parse_args()
    if ":" not in args.name.rsplit("/", 1)[-1]:
        sys.exit(f"pack-oci: --name {args.name}: expected NAME:TAG")
    config_b, manifest_b, blobs, uncompressed = build(args)
    archive(args, config_b, manifest_b, blobs)
    manifest = json.loads(manifest_b)
    summary = {"name": args.name, "digest": sha(manifest_b), "config": sha(config_b),
               "layers": len(manifest["layers"]),
               "compressed_bytes": sum(l["size"] for l in manifest["layers"]),
               "uncompressed_bytes": uncompressed, "archive_bytes": os.path.getsize(args.out)}
    with open(args.out + ".json", "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
        f.write("\n")
    print(summary["digest"])


if __name__ == "__main__":
    main()
