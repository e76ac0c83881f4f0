#!/usr/bin/env bash
# The one release build command. The Dockerfile runs this script, so CI running it exercises the image's build.
#
#   scripts/build-release.sh [ARCH ...]      ARCH: amd64, arm64 (default: the build host's own)
#
# Cargo's release profile keeps line-table debug info (for profiling and the benches); what ships is split off.
# The host's architecture builds natively, another one is cross-compiled (`--target`, Debian's cross gcc links):
#   target/release/dist/kube-proxy                 host build: stripped, with a .gnu_debuglink to the file below
#   target/release/dist/kube-proxy.debug           its debug info (objcopy --only-keep-debug), a separate artifact
#   target/<triple>/release/dist/kube-proxy[.debug]   the same for a cross-compiled architecture
# `cargo auditable` embeds the binary's crate list (name, version, source, dependency edges; no dev-dependencies)
# as a zlib-compressed JSON in the `.dep-v0` ELF section, which image scanners (syft, trivy, grype) read.
# scripts/install-deps.sh installs cargo-auditable into target/tools/bin; the Dockerfile installs it too.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/arch.sh
. scripts/arch.sh

TARGET_DIR=${CARGO_TARGET_DIR:-target}
PATH=$(realpath -m "$TARGET_DIR/tools/bin"):$PATH
command -v cargo-auditable >/dev/null || {
  echo "build-release: cargo-auditable missing: run scripts/install-deps.sh (or cargo install --locked cargo-auditable)" >&2
  exit 1
}

host=$(host_arch)
archs=("$@")
[ "${#archs[@]}" -gt 0 ] || archs=("$host")
for arch in "${archs[@]}"; do
  triple=$(rust_triple "$arch")
  release=$(release_dir "$arch")
  if [ "$arch" = "$host" ]; then
    cargo auditable build --release --locked --bin kube-proxy
    objcopy=objcopy
  else
    gnu=$(gnu_triple "$arch")
    command -v "$gnu-gcc" >/dev/null || {
      echo "build-release: $gnu-gcc missing: run scripts/install-deps.sh (gcc-$gnu)" >&2
      exit 1
    }
    rustup target list --installed 2>/dev/null | grep -qx "$triple" || {
      echo "build-release: Rust target $triple missing: rustup target add $triple" >&2
      exit 1
    }
    linker_var=CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_LINKER
    export "$linker_var=${!linker_var:-$gnu-gcc}"
    cargo auditable build --release --locked --bin kube-proxy --target "$triple"
    objcopy=$gnu-objcopy
  fi
  mkdir -p "$release/dist"
  "$objcopy" --only-keep-debug "$release/kube-proxy" "$release/dist/kube-proxy.debug"
  # --add-gnu-debuglink records the file name only (no build path); run it from the output directory.
  ( cd "$release/dist" && "$objcopy" --strip-all --add-gnu-debuglink=kube-proxy.debug ../kube-proxy kube-proxy )
  echo "build-release: $release/dist/kube-proxy ($arch, $(du -h "$release/dist/kube-proxy" | cut -f1))"
done
