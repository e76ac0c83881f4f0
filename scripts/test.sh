#!/usr/bin/env bash
# The test command: installs what the tests need (apt packages for the User-Mode Linux kernel tests included),
# then runs formatting, lint and every test, UML ones included.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --no-fail-fast -- --test-threads=2

# The release build the Dockerfile's build stage runs, so the image's build command is exercised here too.
./scripts/build-release.sh
"${CARGO_TARGET_DIR:-target}/release/kube-proxy" --version
