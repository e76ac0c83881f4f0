#!/usr/bin/env python3
"""Packs a reproducible multi-architecture OCI image archive (used by scripts/build-image.sh).

    pack-oci.py image --layout DIR --arch ARCH --epoch SECONDS --entrypoint PATH [--env K=V] [--label K=V] \
        --desc OUT.json LAYER_DIR [LAYER_DIR ...]
    pack-oci.py attest --layout DIR --subject IMAGE.json --sbom SBOM.spdx.json --purl PURL --desc OUT.json
    pack-oci.py archive --layout DIR --out IMAGE.tar --name REGISTRY/NAME:TAG --epoch SECONDS \
        [--annotation K=V] --image AMD64.json --image ARM64.json [--attestation ATT.json ...]

`image` writes one platform's image into the blob directory of the layout DIR: each LAYER_DIR becomes one gzip
layer (in order), then the config (architecture ARCH, linux) and the manifest; its descriptor (with platform,
sizes) goes to --desc. `attest` wraps an SPDX document into an in-toto statement whose subject is that image
manifest and stores it as an attestation manifest the way BuildKit does (docs.docker.com, "Image attestation
storage"): an index entry of platform unknown/unknown, annotated vnd.docker.reference.type=attestation-manifest
and vnd.docker.reference.digest=<image manifest>; runtimes skip it, registries and `skopeo copy --all` carry it.
`archive` writes the image index (the images in order, then the attestations), the layout's index.json naming
it, docker's manifest.json (one entry per platform) and the archive.

Every tar (layers and the archive) has sorted entries, mtime = --epoch, uid/gid 0 with no owner names; gzip
headers carry no name or time; JSON is canonical (sorted keys, no spaces). The same inputs give the same bytes.
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

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
IN_TOTO = "application/vnd.in-toto+json"
SPDX_PREDICATE = "https://spdx.dev/Document"


def tar_info(name, mode, epoch):
    """A TarInfo normalised: owner root without names, fixed mtime, the given permission bits."""
    ti = tarfile.TarInfo(name)
    ti.mode = mode
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
            ti = tar_info(rel, stat.S_IMODE(st.st_mode), epoch)
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


def key_values(pairs):
    """K=V arguments as a dict."""
    return dict(kv.split("=", 1) for kv in pairs)


def created(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def put_blob(layout, data, media_type):
    """Stores data under layout/blobs/sha256/ and returns its descriptor."""
    d = os.path.join(layout, "blobs", "sha256")
    os.makedirs(d, exist_ok=True)
    digest = sha(data)
    with open(os.path.join(d, digest[7:]), "wb") as f:
        f.write(data)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def read_blob(layout, descriptor):
    with open(os.path.join(layout, "blobs", "sha256", descriptor["digest"][7:]), "rb") as f:
        return f.read()


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def cmd_image(args):
    """One platform's layers, config and manifest into the layout; its descriptor (plus sizes) to --desc."""
    when = created(args.epoch)
    layers, diff_ids, history, uncompressed = [], [], [], 0
    for d in args.layers:
        if not os.path.isdir(d):
            sys.exit(f"pack-oci: layer directory {d} does not exist")
        raw = layer_tar(d, args.epoch)
        uncompressed += len(raw)
        diff_ids.append(sha(raw))
        layers.append(put_blob(args.layout, gz(raw), LAYER))
        history.append({"created": when, "created_by": f"scripts/build-image.sh: {os.path.basename(d)}"})
    config = {
        "architecture": args.arch, "os": "linux", "created": when,
        "config": {"Entrypoint": [args.entrypoint], "Env": args.env, "Labels": key_values(args.label),
                   "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_desc = put_blob(args.layout, canonical(config), CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config_desc, "layers": layers,
                "annotations": {"org.opencontainers.image.created": when}}
    desc = put_blob(args.layout, canonical(manifest), MANIFEST)
    desc["platform"] = {"architecture": args.arch, "os": "linux"}
    write_json(args.desc, {"descriptor": desc, "config": config_desc["digest"], "layers": len(layers),
                           "compressed_bytes": sum(l["size"] for l in layers),
                           "uncompressed_bytes": uncompressed})


def cmd_attest(args):
    """The SBOM as an in-toto statement about the image manifest, stored as an attestation manifest."""
    image = read_json(args.subject)["descriptor"]
    with open(args.sbom, "rb") as f:
        sbom = json.load(f)
    statement = {"_type": "https://in-toto.io/Statement/v0.1", "predicateType": SPDX_PREDICATE,
                 "subject": [{"name": args.purl, "digest": {"sha256": image["digest"][7:]}}],
                 "predicate": sbom}
    layer = put_blob(args.layout, canonical(statement), IN_TOTO)
    layer["annotations"] = {"in-toto.io/predicate-type": SPDX_PREDICATE}
    # BuildKit's attestation config: valid, not meant to be run, its only layer the statement.
    config = {"architecture": "unknown", "os": "unknown", "config": {},
              "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": put_blob(args.layout, canonical(config), CONFIG), "layers": [layer]}
    desc = put_blob(args.layout, canonical(manifest), MANIFEST)
    desc["annotations"] = {"vnd.docker.reference.digest": image["digest"],
                           "vnd.docker.reference.type": "attestation-manifest"}
    desc["platform"] = {"architecture": "unknown", "os": "unknown"}
    write_json(args.desc, {"descriptor": desc, "statement": layer["digest"]})


def docker_manifest(layout, images, repo_tag):
    """docker's manifest.json: one entry per platform, tagged <name>:<tag>-<arch>; the first image (amd64)
    also gets the plain tag, so `docker load` on the classic store keeps naming the amd64 image as before."""
    out = []
    for i, image in enumerate(images):
        manifest = json.loads(read_blob(layout, image["descriptor"]))
        arch = image["descriptor"]["platform"]["architecture"]
        tags = ([repo_tag] if i == 0 else []) + [f"{repo_tag}-{arch}"]
        out.append({"Config": "blobs/sha256/" + manifest["config"]["digest"][7:], "RepoTags": tags,
                    "Layers": ["blobs/sha256/" + l["digest"][7:] for l in manifest["layers"]]})
    return out


def write_archive(path, layout, files, epoch):
    """The outer (uncompressed) tar: the given top-level files plus every blob of the layout."""
    blobs = os.path.join(layout, "blobs", "sha256")
    names = sorted(os.listdir(blobs))
    entries = sorted(set(files) | {"blobs", "blobs/sha256"} | {"blobs/sha256/" + n for n in names})
    tmp = path + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in entries:
            if name in ("blobs", "blobs/sha256"):
                ti = tar_info(name, 0o755, epoch)
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
                continue
            data = files.get(name)
            if data is None:
                with open(os.path.join(layout, name), "rb") as f:
                    data = f.read()
            ti = tar_info(name, 0o644, epoch)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    os.replace(tmp, path)


def cmd_archive(args):
    """The image index, the layout's index.json naming it, docker's manifest.json, the archive, a summary."""
    if ":" not in args.name.rsplit("/", 1)[-1]:
        sys.exit(f"pack-oci: --name {args.name}: expected NAME:TAG")
    images = [read_json(p) for p in args.image]
    attestations = [read_json(p) for p in args.attestation]
    annotations = key_values(args.annotation)
    annotations["org.opencontainers.image.created"] = created(args.epoch)
    index = {"schemaVersion": 2, "mediaType": INDEX, "annotations": annotations,
             "manifests": [i["descriptor"] for i in images] + [a["descriptor"] for a in attestations]}
    index_desc = put_blob(args.layout, canonical(index), INDEX)
    tag = args.name.rsplit(":", 1)[1]
    top = {"schemaVersion": 2, "mediaType": INDEX,
           "manifests": [dict(index_desc, annotations={"io.containerd.image.name": args.name,
                                                        "org.opencontainers.image.ref.name": tag})]}
    repo_tag = args.name.removeprefix("docker.io/library/")
    files = {"oci-layout": canonical({"imageLayoutVersion": "1.0.0"}), "index.json": canonical(top),
             "manifest.json": canonical(docker_manifest(args.layout, images, repo_tag))}
    write_archive(args.out, args.layout, files, args.epoch)
    summary = {"name": args.name, "digest": index_desc["digest"], "archive_bytes": os.path.getsize(args.out),
               "images": {i["descriptor"]["platform"]["architecture"]: {
                   "digest": i["descriptor"]["digest"], "config": i["config"], "layers": i["layers"],
                   "compressed_bytes": i["compressed_bytes"], "uncompressed_bytes": i["uncompressed_bytes"],
                   "sbom_attestation": next((a["descriptor"]["digest"] for a in attestations
                                             if a["descriptor"]["annotations"]["vnd.docker.reference.digest"]
                                             == i["descriptor"]["digest"]), None)}
                   for i in images}}
    write_json(args.out + ".json", summary)
    print(summary["digest"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    image = sub.add_parser("image", help="one platform's image into the layout")
    image.add_argument("--layout", required=True)
    image.add_argument("--arch", required=True, choices=["amd64", "arm64"])
    image.add_argument("--epoch", type=int, required=True, help="mtime of every entry and the 'created' time")
    image.add_argument("--entrypoint", required=True)
    image.add_argument("--env", action="append", default=[])
    image.add_argument("--label", action="append", default=[])
    image.add_argument("--desc", required=True, help="where the manifest's descriptor is written")
    image.add_argument("layers", nargs="+")
    attest = sub.add_parser("attest", help="an SPDX SBOM as the attestation of an image")
    attest.add_argument("--layout", required=True)
    attest.add_argument("--subject", required=True, help="the image's descriptor file (from `image`)")
    attest.add_argument("--sbom", required=True)
    attest.add_argument("--purl", required=True, help="the subject's name in the statement")
    attest.add_argument("--desc", required=True)
    archive = sub.add_parser("archive", help="the index and the archive")
    archive.add_argument("--layout", required=True)
    archive.add_argument("--out", required=True)
    archive.add_argument("--name", required=True, help="fully qualified name:tag (docker.io/library/NAME:TAG)")
    archive.add_argument("--epoch", type=int, required=True)
    archive.add_argument("--annotation", action="append", default=[])
    archive.add_argument("--image", action="append", required=True, help="an image's descriptor file")
    archive.add_argument("--attestation", action="append", default=[])
    args = p.parse_args()
    {"image": cmd_image, "attest": cmd_attest, "archive": cmd_archive}[args.cmd](args)


if __name__ == "__main__":
    main()
