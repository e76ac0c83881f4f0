#!/usr/bin/env bash
# The one release build command. The Dockerfile runs this script, so CI running it exercises the image's build.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin kube-proxy
