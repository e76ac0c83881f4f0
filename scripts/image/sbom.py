#!/usr/bin/env python3
"""Writes the SPDX 2.3 JSON SBOM of one platform's image (used by scripts/build-image.sh).

    sbom.py --arch ARCH --rootfs DIR --binary BIN --metadata METADATA.json --lock Cargo.lock --name NAME \
        --version VERSION --source URL --revision REV --epoch SECONDS --out SBOM.spdx.json

What it lists, and where each fact comes from:
- the Rust crates the binary is built from: `cargo metadata --filter-platform <the image's target>`
  (METADATA.json), walked from the root package along normal dependency edges only (no dev-dependency, no
  build-dependency, no crate of another platform; proc-macro crates are normal dependencies whose generated
  code is in the binary, so they are listed), with each crate's license from the same metadata, its SHA-256
  from Cargo.lock and the dependency edges between them. Checked against the binary itself: every crate its
  `.dep-v0` section (cargo-auditable's zlib-compressed JSON, what image scanners read) records as a runtime
  dependency must be listed, or the SBOM is not written;
- the Debian packages of the root file system DIR, from the distroless-style records scripts/image/rootfs.sh
  writes (var/lib/dpkg/status.d/<package>: the control fields of each installed .deb), versions as installed.
The output is deterministic: sorted, the creation time is --epoch, the namespace is derived from the content.
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys
import time
import tomllib
import urllib.parse
import zlib

DEBIAN_RELEASE = "debian-12"


def elf_section(path, name):
    """The bytes of one section of a 64-bit little-endian ELF file (either architecture), or None."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"sbom: {path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)

    strtab_off, strtab_size = header(shstrndx)[4:6]
    names = data[strtab_off:strtab_off + strtab_size]
    for i in range(shnum):
        sh_name, _, _, _, off, size = header(i)
        if names[sh_name:names.index(b"\0", sh_name)].decode() == name:
            return data[off:off + size]
    return None


def audit_data(binary):
    """The crate list cargo-auditable embedded: {"packages": [{name, version, source, kind?, dependencies?,
    root?}]}."""
    raw = elf_section(binary, ".dep-v0")
    if raw is None:
        sys.exit(f"sbom: {binary} has no .dep-v0 section: build it with scripts/build-release.sh (cargo auditable)")
    return json.loads(zlib.decompress(raw))


def spdx_id(kind, name, version=""):
    """An SPDX identifier: letters, digits, '.' and '-' only."""
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", "-".join(p for p in (kind, name, version) if p))


def license_expression(text):
    """Cargo's license field as an SPDX expression ("MIT/Apache-2.0" is the old spelling of "MIT OR ...")."""
    if not text:
        return "NOASSERTION"
    return " OR ".join(p.strip() for p in text.split("/")) if "/" in text else text.strip()


def lock_checksums(lock_path):
    """(name, version) -> sha256, from Cargo.lock."""
    with open(lock_path, "rb") as f:
        lock = tomllib.load(f)
    return {(p["name"], p["version"]): p["checksum"] for p in lock.get("package", []) if "checksum" in p}


def normal_graph(metadata_path):
    """(root package, {package id: package} reached from the root along normal edges, edges among them)."""
    with open(metadata_path) as f:
        metadata = json.load(f)
    resolve = metadata["resolve"]
    nodes = {n["id"]: n for n in resolve["nodes"]}
    packages = {p["id"]: p for p in metadata["packages"]}
    root = resolve["root"]
    reached, todo, edges = {root}, [root], set()
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if not any(k["kind"] is None for k in dep["dep_kinds"]):
                continue  # dev- or build-dependency only
            edges.add((node["id"], dep["pkg"]))
            if dep["pkg"] not in reached:
                reached.add(dep["pkg"])
                todo.append(dep["pkg"])
    return packages[root], {i: packages[i] for i in reached if i != root}, edges


def check_against_binary(binary, crates):
    """Every runtime crate of the binary's .dep-v0 must be among the listed crates."""
    listed = {(p["name"], p["version"]) for p in crates.values()}
    audit = audit_data(binary)["packages"]
    missing = sorted((p["name"], p["version"]) for p in audit
                     if p.get("kind", "runtime") == "runtime" and not p.get("root")
                     and (p["name"], p["version"]) not in listed)
    if missing:
        sys.exit(f"sbom: {binary} records crates the metadata walk does not list: {missing}")


def crate_package(pkg, checksums):
    """The SPDX package of one crate (a `cargo metadata` package)."""
    name, version = pkg["name"], pkg["version"]
    out = {"SPDXID": spdx_id("Package-cargo", name, version), "name": name, "versionInfo": version,
           "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "primaryPackagePurpose": "LIBRARY",
           "licenseConcluded": "NOASSERTION", "licenseDeclared": license_expression(pkg.get("license")),
           "copyrightText": "NOASSERTION",
           "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                             "referenceLocator": f"pkg:cargo/{name}@{version}"}]}
    if (pkg.get("source") or "").startswith("registry+https://github.com/rust-lang/crates.io-index"):
        out["downloadLocation"] = f"https://crates.io/api/v1/crates/{name}/{version}/download"
        out["supplier"] = "Organization: crates.io"
    if (name, version) in checksums:
        out["checksums"] = [{"algorithm": "SHA256", "checksumValue": checksums[(name, version)]}]
    return out


def control_fields(path):
    """The fields of one Debian control record (continuation lines folded)."""
    fields, key = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
    return fields


def deb_package(fields, arch):
    """The SPDX package of one installed Debian package."""
    name, version = fields["Package"], fields["Version"]
    pkg_arch = fields.get("Architecture", arch)
    quoted = urllib.parse.quote(version, safe="~.-_")
    source = fields.get("Source", name).split(" ")[0]
    purl = f"pkg:deb/debian/{name}@{quoted}?arch={pkg_arch}&distro={DEBIAN_RELEASE}"
    if source != name:
        purl += f"&upstream={urllib.parse.quote(source, safe='.-_')}"
    maintainer = re.match(r"\s*(.*?)\s*<(.*)>", fields.get("Maintainer", ""))
    out = {"SPDXID": spdx_id("Package-deb", name), "name": name, "versionInfo": version,
           "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "licenseConcluded": "NOASSERTION",
           "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
           "sourceInfo": f"built from the Debian source package {fields.get('Source', name)}",
           "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                             "referenceLocator": purl}]}
    if maintainer:
        out["supplier"] = f"Organization: {maintainer.group(1)} ({maintainer.group(2)})"
    return out


def debian_packages(rootfs, arch):
    status = os.path.join(rootfs, "var/lib/dpkg/status.d")
    return [deb_package(control_fields(os.path.join(status, n)), arch) for n in sorted(os.listdir(status))]


def application(root, args):
    """The SPDX package of kube-proxy-rs itself."""
    return {"SPDXID": "SPDXRef-Package-kube-proxy", "name": root["name"], "versionInfo": root["version"],
            "downloadLocation": f"git+{args.source}@{args.revision}" if args.source else "NOASSERTION",
            "filesAnalyzed": False, "primaryPackagePurpose": "APPLICATION", "licenseConcluded": "NOASSERTION",
            "licenseDeclared": license_expression(root.get("license")), "copyrightText": "NOASSERTION",
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:cargo/{root['name']}@{root['version']}"}]}


def relationship(a, kind, b):
    return {"spdxElementId": a, "relationshipType": kind, "relatedSpdxElement": b}


def document(args):
    """The SPDX document (without its namespace)."""
    root, crates, edges = normal_graph(args.metadata)
    check_against_binary(args.binary, crates)
    checksums = lock_checksums(args.lock)
    ids = {i: spdx_id("Package-cargo", p["name"], p["version"]) for i, p in crates.items()}
    ids[root["id"]] = "SPDXRef-Package-kube-proxy"
    app = application(root, args)
    image = {"SPDXID": "SPDXRef-Image", "name": args.name, "versionInfo": args.version,
             "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "primaryPackagePurpose": "CONTAINER",
             "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
             "comment": f"the linux/{args.arch} image of {args.name} {args.version}"}
    debs = debian_packages(args.rootfs, args.arch)
    relationships = [relationship("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image")]
    relationships += [relationship("SPDXRef-Image", "CONTAINS", p["SPDXID"]) for p in [app] + debs]
    relationships += [relationship(ids[a], "DEPENDS_ON", ids[b]) for a, b in edges]
    packages = [image, app] + sorted([crate_package(p, checksums) for p in crates.values()] + debs,
                                     key=lambda p: p["SPDXID"])
    if len({p["SPDXID"] for p in packages}) != len(packages):
        sys.exit("sbom: two packages map to the same SPDX identifier")
    return {"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
            "name": f"{args.name}-{args.version}-linux-{args.arch}",
            "creationInfo": {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.epoch)),
                             "creators": ["Tool: kube-proxy-rs-scripts-image-sbom.py"]},
            "packages": packages,
            "relationships": sorted(relationships, key=lambda r: (r["spdxElementId"], r["relationshipType"],
                                                                  r["relatedSpdxElement"]))}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("arch", "rootfs", "binary", "metadata", "lock", "name", "version", "revision", "out"):
        p.add_argument("--" + flag, required=True)
    p.add_argument("--source", default="", help="the source repository's URL (the image's source label)")
    p.add_argument("--epoch", type=int, required=True)
    args = p.parse_args()
    doc = document(args)
    content = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    base = args.source or "https://spdx.org/spdxdocs"
    doc["documentNamespace"] = f"{base.rstrip('/')}/sbom/{doc['name']}-{content}"
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    crates = sum(1 for p in doc["packages"] if p["SPDXID"].startswith("SPDXRef-Package-cargo"))
    debs = sum(1 for p in doc["packages"] if p["SPDXID"].startswith("SPDXRef-Package-deb"))
    print(f"{crates} crates, {debs} Debian packages")


if __name__ == "__main__":
    main()
