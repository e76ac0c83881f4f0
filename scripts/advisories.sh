#!/usr/bin/env bash
# The supply-chain gate's advisory check: `cargo deny check advisories` (deny.toml's [advisories] policy)
# against a snapshot of the RustSec advisory database (rustsec/advisory-db, a git clone) kept outside the
# build, offline: the network of CI and of the developers' machines reaches crates.io, not the database.
#
#   scripts/advisories.sh [cargo-deny options]    e.g. --manifest-path DIR/Cargo.toml
#
# KPRS_ADVISORY_DB names the snapshot (default ../shared/rustsec-advisory-db, beside the checkout as CI has
# it). Without one this fails, naming what is missing; KPRS_SKIP_ADVISORIES=1 skips the check explicitly.
# Refreshing the snapshot: replace that clone with a newer one and state its date in README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${KPRS_SKIP_ADVISORIES:-}" = 1 ]; then
  echo "SKIP the RustSec advisory check: KPRS_SKIP_ADVISORIES=1" >&2
  exit 0
fi
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
DB=${KPRS_ADVISORY_DB:-../shared/rustsec-advisory-db}
if [ ! -d "$DB/crates" ] || ! git -C "$DB" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  echo "error: no RustSec advisory database snapshot at $DB: it must be a git clone of rustsec/advisory-db" \
    "(set KPRS_ADVISORY_DB to one, or KPRS_SKIP_ADVISORIES=1 to skip this check)" >&2
  exit 1
fi
# cargo-deny opens the default database at <db-path>/advisory-db-3157b0e258782691 (its directory name for
# https://github.com/RustSec/advisory-db, cargo-deny 0.20) and reads the snapshot's date from its HEAD.
root=$TARGET/advisory-dbs
mkdir -p "$root"
ln -sfn "$(realpath "$DB")" "$root/advisory-db-3157b0e258782691"
config=$root/deny.toml
sed "s|^\[advisories\]\$|[advisories]\ndb-path = \"$root\"|" deny.toml >"$config"
grep -q '^db-path' "$config" || { echo "error: deny.toml has no [advisories] table" >&2; exit 1; }
echo "RustSec advisory database: $(git -C "$DB" log -1 --format='%cs, commit %h')"
"$TARGET/tools/bin/cargo-deny" --locked --offline --config "$config" "$@" \
  check --hide-inclusion-graph advisories
