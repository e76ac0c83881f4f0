#!/usr/bin/env bash
# Instructions per sync of each kind on the host (the daemon's sync loop over the in-memory backends,
# benches/sync_loop.rs), counted by valgrind's callgrind: repeatable to a fraction of a percent, where
# timings on a shared machine are not. This host's `perf` has no instruction counter (`perf stat -e
# instructions true` says <not supported>); callgrind counts the instructions it executes itself.
#
#   scripts/bench-counts.sh [N] [kind...]     # default: 10000 noop 1 10 100
#
# Per kind it runs the bench once under callgrind, which dumps its counters whenever the bench marks the
# start and the end of that kind's syncs (`dump_mark`, `--dump-before`): the second dump holds exactly
# those syncs, every thread's instructions (loading the Services and the cold sync are in the first). It
# prints
# `counts: n=N kind=K syncs=S instructions_per_sync=I`. KPRS_SYNC_LOOP_SYNCS (default 5) syncs per kind.
# KPRS_BENCH_BIN=path counts another build of the bench (e.g. the base's).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "missing valgrind (apt-get install valgrind)"; exit 1; }
n=${1:-10000}
shift || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(noop 1 10 100)
bin=${KPRS_BENCH_BIN:-}
if [ -z "$bin" ]; then
  bin=$(cargo bench --bench sync_loop --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="sync_loop" and m.get("executable"):
        print(m["executable"])' | tail -1)
fi
[ -x "$bin" ] || { echo "no sync_loop bench binary ($bin)"; exit 1; }
syncs=${KPRS_SYNC_LOOP_SYNCS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for kind in "${kinds[@]}"; do
  KPRS_SYNC_LOOP_SYNCS=$syncs valgrind --tool=callgrind --callgrind-out-file="$out/cg.$kind" \
    --dump-before='*sync_loop::dump_mark*' "$bin" "$n" "$kind" >"$out/log.$kind" 2>&1 ||
    { cat "$out/log.$kind"; exit 1; }
  [ -f "$out/cg.$kind.2" ] || { echo "no second callgrind dump for $kind"; ls "$out"; exit 1; }
  ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$out/cg.$kind.2")
  echo "counts: n=$n kind=$kind syncs=$syncs instructions_per_sync=$((ir / syncs))"
done
