#!/bin/sh
# Long fuzz run of every parser/decoder target: scripts/fuzz.sh [CASES-PER-TARGET] [SEED] [TARGET,...]
# FUZZ_SECONDS=S caps each target at S seconds (the line then shows the cases reached).
# Prints `fuzz: TARGET cases N panics P seconds T` per target; exit status 1 if any case failed.
set -eu
cd "$(dirname "$0")/.."
exec nice -n 10 cargo bench --bench fuzz -- "${1:-1000000}" ${2:+"$2"} ${3:+"$3"}
