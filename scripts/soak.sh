#!/bin/bash
# Chaos soak of the real daemon on a UML kernel: scripts/soak.sh [minutes] [seed] [services]
# Defaults: 10 minutes, a time-based seed (printed; pass it again to replay), 300 churned Services.
# Prints figures per fault kind; the last line is machine-readable ("soak: minutes M seed S ...").
set -euo pipefail
cd "$(dirname "$0")/.."
exec nice -n 10 cargo bench --bench soak -- "${1:-10}" ${2:+"$2"} ${3:+"$3"}
