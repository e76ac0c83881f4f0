#!/usr/bin/env bash
# Builds the kube-proxy-rs container image offline and reproducibly: one OCI image index holding a linux/amd64
# and a linux/arm64 image, as an OCI image archive that `docker load`, `podman load`, `ctr images import` and
# `skopeo copy --all oci-archive:...` accept. No registry and no Docker engine: each root file system comes
# from Debian packages of its architecture (mmdebstrap, the packages of scripts/image/packages.txt, the list
# the Dockerfile's runtime stage installs too), the binaries from scripts/build-release.sh (stripped, with
# cargo-auditable's crate list).
#
#   scripts/build-release.sh amd64 arm64 && scripts/build-image.sh [--rebuild] [--no-verify]
#
# Output ($CARGO_TARGET_DIR or target/, under image/):
#   kube-proxy-rs.oci.tar          the archive: the index named docker.io/library/kube-proxy-rs:<Cargo version>
#                                  (docker's manifest.json: <version> and <version>-amd64, <version>-arm64)
#   kube-proxy-rs.oci.tar.json     the index digest, per architecture: manifest digest, sizes, layer count
#   kube-proxy-rs.<arch>.spdx.json the SBOM of each image (SPDX 2.3: the crates in the binary, the Debian
#                                  packages as installed); the index carries each as an in-toto attestation
#                                  manifest (BuildKit's layout) that refers to its image's manifest
#   packages-<arch>.txt            the Debian package versions inside, "name version" lines
# Reproducible: every entry's time is the commit time (SOURCE_DATE_EPOCH), entries are sorted, owners are
# root, no build-host path is recorded. The script assembles the whole index twice and fails unless both
# digests, archives and SBOMs agree (--no-verify: once). Without --rebuild an archive built from the same
# inputs (binaries, package list, these scripts, Cargo.lock, name, commit) is reused. Needs root (or
# unprivileged user namespaces) for mmdebstrap; a foreign architecture needs no emulator (nothing runs in it).
# Environment: KPRS_IMAGE_NAME (kube-proxy-rs), KPRS_IMAGE_TAG (Cargo version), KPRS_IMAGE_ARCHS ("amd64 arm64"),
# KPRS_IMAGE_SOURCE (Cargo.toml's repository: the org.opencontainers.image.source label), KPRS_IMAGE_MIRROR
# (http://deb.debian.org/debian), KPRS_IMAGE_SECURITY_MIRROR (http://deb.debian.org/debian-security).
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

TARGET_DIR=${CARGO_TARGET_DIR:-target}
# shellcheck source=scripts/arch.sh
. scripts/arch.sh
read -r -a ARCHS <<<"${KPRS_IMAGE_ARCHS:-${IMAGE_ARCHS[*]}}"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
LICENSE=$(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml | head -1)
SOURCE=${KPRS_IMAGE_SOURCE:-$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -1)}
NAME=docker.io/library/${KPRS_IMAGE_NAME:-kube-proxy-rs}:${KPRS_IMAGE_TAG:-$VERSION}
MIRROR=${KPRS_IMAGE_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${KPRS_IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm
PACKAGES_FILE=scripts/image/packages.txt
OUT=$TARGET_DIR/image
ARCHIVE=$OUT/kube-proxy-rs.oci.tar
ENTRYPOINT=/usr/local/bin/kube-proxy
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=scripts/image/rootfs.sh
. scripts/image/rootfs.sh

for v in VERSION LICENSE SOURCE; do
  [ -n "${!v}" ] || { echo "build-image: no $v (Cargo.toml; KPRS_IMAGE_SOURCE for the source URL)" >&2; exit 1; }
done

# The binaries first: nothing is fetched or packed without a stripped release binary per architecture that
# carries its crate list.
binary() { echo "$(release_dir "$1")/dist/kube-proxy"; }
for arch in "${ARCHS[@]}"; do
  bin=$(binary "$arch")
  if [ ! -f "$bin" ]; then
    echo "build-image: $arch release binary $bin not found: run scripts/build-release.sh $arch first" >&2
    exit 1
  fi
  if ! file -b "$bin" 2>/dev/null | grep -q "ELF 64-bit.*$(elf_machine "$arch")"; then
    echo "build-image: $bin is not an $(elf_machine "$arch") ELF executable (the $arch image's binary)" >&2
    exit 1
  fi
  if readelf -S "$bin" | grep -q '\.debug_info'; then
    echo "build-image: $bin carries debug info: ship the stripped binary of scripts/build-release.sh" >&2
    exit 1
  fi
  if ! readelf -S "$bin" | grep -q '\.dep-v0'; then
    echo "build-image: $bin carries no crate list (.dep-v0): build it with scripts/build-release.sh (cargo auditable)" >&2
    exit 1
  fi
done
for tool in mmdebstrap dpkg-deb python3; do
  command -v "$tool" >/dev/null || { echo "build-image: missing $tool (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
key=$( { for arch in "${ARCHS[@]}"; do sha256sum "$(binary "$arch")" | cut -d' ' -f1; done
         sha256sum "$PACKAGES_FILE" "$0" Cargo.lock LICENSE scripts/arch.sh scripts/image/*.sh scripts/image/*.py |
           cut -d' ' -f1
         echo "$NAME ${ARCHS[*]} $MIRROR $SECURITY_MIRROR $SUITE $EPOCH $REVISION $SOURCE $LICENSE"; } |
       sha256sum | cut -d' ' -f1)
if [ "$rebuild" = 0 ] && [ -f "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.key" 2>/dev/null)" = "$key" ]; then
  echo "build-image: $ARCHIVE is up to date for these inputs ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$ARCHIVE.json"))"
  exit 0
fi

mkdir -p "$OUT"
work=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The crates of each platform's binary, with their licenses, for the SBOMs.
for arch in "${ARCHS[@]}"; do
  cargo metadata --locked --format-version 1 --filter-platform "$(rust_triple "$arch")" >"$work/metadata-$arch.json"
done

LABELS=(org.opencontainers.image.title=kube-proxy-rs
        "org.opencontainers.image.description=kube-proxy (IPVS mode) in Rust, a drop-in for the kube-proxy image"
        "org.opencontainers.image.version=$VERSION" "org.opencontainers.image.revision=$REVISION"
        "org.opencontainers.image.source=$SOURCE" "org.opencontainers.image.licenses=$LICENSE")

# One platform's image into $w: root file system layer, binary layer, SBOM, attestation. $1: dir, $2: arch.
build_arch() {
  local w=$1 arch=$2 start label_args=()
  start=$(date +%s)
  mkdir -p "$w/$arch/app/usr/local/bin"
  fetch_rootfs "$w/$arch/debian" "$arch"
  record_packages "$w/$arch/debian" "$w/packages-$arch.txt"
  configure_rootfs "$w/$arch/debian"
  prune_rootfs "$w/$arch/debian" "$w/packages-$arch.txt" "$arch"
  install -m 0755 "$(binary "$arch")" "$w/$arch/app$ENTRYPOINT"
  install -D -m 0644 LICENSE "$w/$arch/app/usr/share/doc/kube-proxy-rs/LICENSE"
  for l in "${LABELS[@]}" "org.opencontainers.image.base.name=debian:$SUITE ($(image_packages))"; do
    label_args+=(--label "$l")
  done
  python3 scripts/image/pack-oci.py image --layout "$w/layout" --arch "$arch" --epoch "$EPOCH" \
    --entrypoint "$ENTRYPOINT" --env "$PATH_ENV" "${label_args[@]}" --desc "$w/$arch.image.json" \
    "$w/$arch/debian" "$w/$arch/app"
  python3 scripts/image/sbom.py --arch "$arch" --rootfs "$w/$arch/debian" --binary "$(binary "$arch")" \
    --metadata "$work/metadata-$arch.json" --lock Cargo.lock --name "${NAME%:*}" --version "$VERSION" \
    --source "$SOURCE" --revision "$REVISION" --epoch "$EPOCH" --out "$w/kube-proxy-rs.$arch.spdx.json" >&2
  python3 scripts/image/pack-oci.py attest --layout "$w/layout" --subject "$w/$arch.image.json" \
    --sbom "$w/kube-proxy-rs.$arch.spdx.json" --desc "$w/$arch.attest.json" \
    --purl "pkg:docker/${NAME#docker.io/library/}?platform=linux%2F$arch"
  echo "build-image: linux/$arch image in $(( $(date +%s) - start )) s" >&2
}

# One complete build into $work/$1: every platform, then the index and the archive. Prints the index digest.
build_once() {
  local w=$work/$1 arch args=()
  mkdir -p "$w"
  for arch in "${ARCHS[@]}"; do
    build_arch "$w" "$arch"
    args+=(--image "$w/$arch.image.json" --attestation "$w/$arch.attest.json")
  done
  python3 scripts/image/pack-oci.py archive --layout "$w/layout" --out "$w/image.tar" --name "$NAME" \
    --epoch "$EPOCH" "${args[@]}" \
    --annotation "org.opencontainers.image.version=$VERSION" --annotation "org.opencontainers.image.revision=$REVISION" \
    --annotation "org.opencontainers.image.source=$SOURCE" --annotation "org.opencontainers.image.licenses=$LICENSE"
}

start=$(date +%s)
digest=$(build_once a)
echo "build-image: built $NAME $digest (${ARCHS[*]}) in $(( $(date +%s) - start )) s"
if [ "$verify" = 1 ]; then
  second=$(build_once b)
  if [ "$digest" != "$second" ]; then
    echo "build-image: NOT reproducible: two builds gave $digest and $second" >&2
    diff <(tar -tvf "$work/a/image.tar") <(tar -tvf "$work/b/image.tar") >&2 || true
    exit 1
  fi
  cmp -s "$work/a/image.tar" "$work/b/image.tar" || { echo "build-image: archives differ byte-wise" >&2; exit 1; }
  for arch in "${ARCHS[@]}"; do
    cmp -s "$work/a/kube-proxy-rs.$arch.spdx.json" "$work/b/kube-proxy-rs.$arch.spdx.json" ||
      { echo "build-image: the $arch SBOMs differ" >&2; exit 1; }
  done
  echo "build-image: reproducible: a second build gave the same digest"
fi
rm -f "$OUT"/packages*.txt "$OUT"/kube-proxy-rs.*.spdx.json
mv "$work/a/image.tar" "$ARCHIVE"
mv "$work/a/image.tar.json" "$ARCHIVE.json"
for arch in "${ARCHS[@]}"; do
  mv "$work/a/packages-$arch.txt" "$work/a/kube-proxy-rs.$arch.spdx.json" "$OUT/"
done
echo "$key" >"$ARCHIVE.key"
echo "build-image: $ARCHIVE ($NAME, $digest; $(du -h "$ARCHIVE" | cut -f1), $(( $(date +%s) - start )) s)"
cat "$ARCHIVE.json"
