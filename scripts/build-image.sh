#!/usr/bin/env bash
# Builds the kube-proxy-rs container image offline and reproducibly, as an OCI image archive that
# `docker load`, `podman load` and `ctr images import` accept. No registry and no Docker engine: the root file
# system comes from Debian packages (mmdebstrap, the packages of scripts/image/packages.txt, the list the
# Dockerfile's runtime stage installs too), the binary from scripts/build-release.sh (stripped).
#
#   scripts/build-release.sh && scripts/build-image.sh [--rebuild] [--no-verify]
#
# Output ($CARGO_TARGET_DIR or target/, under image/):
#   kube-proxy-rs.oci.tar        the image archive, named docker.io/library/kube-proxy-rs:<Cargo version>
#   kube-proxy-rs.oci.tar.json   digest, sizes and layer count;  packages.txt  the Debian package versions inside
# Reproducible: every entry's time is the commit time (SOURCE_DATE_EPOCH), entries are sorted, owners are
# root, no build-host path is recorded. The script assembles the image twice and fails unless both digests
# agree (--no-verify: once). Without --rebuild an archive built from the same inputs (binary, package list,
# these scripts, sources, name, commit) is reused. Needs root (or unprivileged user namespaces) for mmdebstrap.
# Environment: KPRS_IMAGE_NAME (kube-proxy-rs), KPRS_IMAGE_TAG (Cargo version), KPRS_IMAGE_BINARY
# (target/release/dist/kube-proxy), KPRS_IMAGE_MIRROR (http://deb.debian.org/debian), KPRS_IMAGE_SECURITY_MIRROR
# (http://deb.debian.org/debian-security).
set -euo pipefail
shopt -s inherit_errexit  # a failing step inside $(build_once ...) stops the build
cd "$(dirname "$0")/.."

rebuild=0 verify=1
for a in "$@"; do
  case $a in
    --rebuild) rebuild=1 ;;
    --no-verify) verify=0 ;;
    *) echo "usage: $0 [--rebuild] [--no-verify]" >&2; exit 2 ;;
  esac
done

TARGET=${CARGO_TARGET_DIR:-target}
BIN=${KPRS_IMAGE_BINARY:-$TARGET/release/dist/kube-proxy}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
NAME=docker.io/library/${KPRS_IMAGE_NAME:-kube-proxy-rs}:${KPRS_IMAGE_TAG:-$VERSION}
MIRROR=${KPRS_IMAGE_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${KPRS_IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm
PACKAGES_FILE=scripts/image/packages.txt
OUT=$TARGET/image
ARCHIVE=$OUT/kube-proxy-rs.oci.tar
ENTRYPOINT=/usr/local/bin/kube-proxy
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=scripts/image/rootfs.sh
. scripts/image/rootfs.sh

# The binary first: nothing is fetched or packed without a stripped release binary.
if [ ! -f "$BIN" ]; then
  echo "build-image: release binary $BIN not found: run scripts/build-release.sh first" >&2
  exit 1
fi
if ! file -b "$BIN" 2>/dev/null | grep -q 'ELF 64-bit.*x86-64'; then
  echo "build-image: $BIN is not an x86-64 ELF executable" >&2
  exit 1
fi
if readelf -S "$BIN" | grep -q '\.debug_info'; then
  echo "build-image: $BIN carries debug info: ship the stripped binary of scripts/build-release.sh" >&2
  exit 1
fi
for tool in mmdebstrap dpkg-deb python3; do
  command -v "$tool" >/dev/null || { echo "build-image: missing $tool (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
key=$( { sha256sum "$BIN" "$PACKAGES_FILE" "$0" scripts/image/rootfs.sh scripts/image/pack-oci.py | cut -d' ' -f1
         echo "$NAME $MIRROR $SECURITY_MIRROR $SUITE $EPOCH $REVISION"; } | sha256sum | cut -d' ' -f1)
if [ "$rebuild" = 0 ] && [ -f "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.key" 2>/dev/null)" = "$key" ]; then
  echo "build-image: $ARCHIVE is up to date for these inputs ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$ARCHIVE.json"))"
  exit 0
fi

mkdir -p "$OUT"
work=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One complete build into $work/$1: root file system layer, binary layer, archive. Prints the digest.
build_once() {
  local w=$work/$1
  mkdir -p "$w/app/usr/local/bin"
  fetch_rootfs "$w/debian"
  record_packages "$w/debian" "$w/packages.txt"
  configure_rootfs "$w/debian"
  prune_rootfs "$w/debian" "$w/packages.txt"
  install -m 0755 "$BIN" "$w/app$ENTRYPOINT"
  python3 scripts/image/pack-oci.py --out "$w/image.tar" --name "$NAME" --epoch "$EPOCH" \
    --entrypoint "$ENTRYPOINT" --env "$PATH_ENV" \
    --label "org.opencontainers.image.title=kube-proxy-rs" \
    --label "org.opencontainers.image.description=kube-proxy (IPVS mode) in Rust, a drop-in for the kube-proxy image" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$REVISION" \
    --label "org.opencontainers.image.base.name=debian:$SUITE ($(image_packages))" \
    "$w/debian" "$w/app"
}

start=$(date +%s)
digest=$(build_once a)
echo "build-image: built $NAME $digest in $(( $(date +%s) - start )) s"
if [ "$verify" = 1 ]; then
  second=$(build_once b)
  if [ "$digest" != "$second" ]; then
    echo "build-image: NOT reproducible: two builds gave $digest and $second" >&2
    diff <(tar -tvf "$work/a/image.tar") <(tar -tvf "$work/b/image.tar") >&2 || true
    exit 1
  fi
  cmp -s "$work/a/image.tar" "$work/b/image.tar" || { echo "build-image: archives differ byte-wise" >&2; exit 1; }
  echo "build-image: reproducible: a second build gave the same digest"
fi
mv "$work/a/image.tar" "$ARCHIVE"
mv "$work/a/image.tar.json" "$ARCHIVE.json"
mv "$work/a/packages.txt" "$OUT/packages.txt"
echo "$key" >"$ARCHIVE.key"
echo "build-image: $ARCHIVE ($NAME, $digest; $(du -h "$ARCHIVE" | cut -f1), $(( $(date +%s) - start )) s)"
cat "$ARCHIVE.json"
