#!/usr/bin/env bash
# The one release build command. The Dockerfile runs this script, so CI running it exercises the image's build.
# Cargo's release profile keeps line-table debug info (for profiling and the benches); what ships is split off:
#   target/release/dist/kube-proxy         stripped, with a .gnu_debuglink to the file below (the image's binary)
#   target/release/dist/kube-proxy.debug   its debug info (objcopy --only-keep-debug), a separate artifact
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin kube-proxy
release=${CARGO_TARGET_DIR:-target}/release
mkdir -p "$release/dist"
objcopy --only-keep-debug "$release/kube-proxy" "$release/dist/kube-proxy.debug"
# --add-gnu-debuglink records the file name only (no build path); run it from the output directory.
( cd "$release/dist" && objcopy --strip-all --add-gnu-debuglink=kube-proxy.debug ../kube-proxy kube-proxy )
