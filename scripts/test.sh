#!/usr/bin/env bash
# The test command: installs what the tests need (apt packages for the User-Mode Linux kernel tests and the
# image build included), builds the release binary and the image (reused when its inputs did not change), then
# runs formatting, lint and every test, UML ones and the image tests (tests/e2e_image.rs) included.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

# The release build the Dockerfile's build stage runs, then the image the image tests run (they fail without
# it; KPRS_SKIP_IMAGE_TESTS=1 opts out). Times are printed: they are what the image adds to CI.
start=$(date +%s)
./scripts/build-release.sh
"${CARGO_TARGET_DIR:-target}/release/dist/kube-proxy" --version
echo "release build: $(( $(date +%s) - start )) s"
if [ "${KPRS_SKIP_IMAGE_TESTS:-}" != 1 ]; then
  start=$(date +%s)
  ./scripts/build-image.sh
  echo "image build: $(( $(date +%s) - start )) s"
fi

cargo test --no-fail-fast -- --test-threads=2
