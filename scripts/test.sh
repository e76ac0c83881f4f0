#!/usr/bin/env bash
# The test command: installs what the tests need (apt packages for the User-Mode Linux kernel tests and the
# image build, the arm64 cross toolchain, qemu-user and the supply-chain tools), checks the dependency policy
# (cargo-deny), builds the release binaries and the multi-architecture image (reused when its inputs did not
# change), then runs formatting, lint and every test, UML ones and the image tests included. Every cargo
# invocation is --locked (Cargo.lock is the one dependency list; `cargo fmt` resolves nothing and has no such
# flag). Times are printed for the steps the image and the supply chain add to CI.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$(realpath -m "${CARGO_TARGET_DIR:-target}/tools")

./scripts/install-deps.sh --tools

# Licenses, bans and sources of every crate (deny.toml), then the RustSec advisories against the database
# snapshot beside the checkout (../shared/rustsec-advisory-db, or KPRS_ADVISORY_DB; scripts/advisories.sh).
# The snapshot is another repository's data and may not be committed here: where none is beside the checkout
# (CI's ../shared holds none today), the advisory check and its test are skipped, saying so loudly.
start=$(date +%s)
"$TOOLS/bin/cargo-deny" --locked check --hide-inclusion-graph licenses bans sources
advisory_db=${KPRS_ADVISORY_DB:-../shared/rustsec-advisory-db}
if [ "${KPRS_SKIP_ADVISORIES:-}" != 1 ] && [ ! -d "$advisory_db/crates" ]; then
  bar=$(printf '!%.0s' {1..100})
  printf '%s\n!!! NOT CHECKED: RustSec advisories (no database snapshot at %s).\n' "$bar" "$advisory_db" >&2
  printf '!!! Put a git clone of rustsec/advisory-db there (or set KPRS_ADVISORY_DB) to check them.\n%s\n' "$bar" >&2
  export KPRS_SKIP_ADVISORIES=1
fi
./scripts/advisories.sh
echo "cargo deny: $(( $(date +%s) - start )) s"

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings

# The release builds (the host's, as the Dockerfile's build stage runs it, and arm64 cross-compiled), then the
# image index the image tests run (they fail without it; KPRS_SKIP_IMAGE_TESTS=1 opts out).
start=$(date +%s)
./scripts/build-release.sh amd64
"${CARGO_TARGET_DIR:-target}/release/dist/kube-proxy" --version
echo "release build (amd64): $(( $(date +%s) - start )) s"
if [ "${KPRS_SKIP_IMAGE_TESTS:-}" != 1 ]; then
  start=$(date +%s)
  ./scripts/build-release.sh arm64
  echo "release build (arm64, cross-compiled): $(( $(date +%s) - start )) s"
  start=$(date +%s)
  ./scripts/build-image.sh
  echo "image build (amd64 + arm64, twice): $(( $(date +%s) - start )) s"
fi

cargo test --locked --no-fail-fast -- --test-threads=2
