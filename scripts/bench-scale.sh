#!/usr/bin/env bash
# Scale benchmark of the real daemon in one User-Mode Linux boot (issue "Scale", items 2 and 3).
#
#   scripts/bench-scale.sh [N...]      # default: 1000 10000 50000 services, 10 endpoints each
#   scripts/bench-scale.sh iptables-cost   # the iptables step under a failing module autoload and a CPU
#                                          # hog (benches/scale/iptcost.rs; KPRS_BENCH_IPT_BASELINE=binary
#                                          # runs another daemon alternately in the same boot)
#
# Runs `cargo bench --bench scale`, which builds the daemon with the bench profile (= the release profile's
# settings: opt-level 3, debug = 1; target/release/deps/kube_proxy-<hash>), copies this checkout's build to a
# private path (other checkouts sharing the target dir overwrite target/release/kube-proxy), boots one UML
# guest (mem=3G; 7G when an N is above 20k) running the test API server and the daemon, and prints a table (also written to
# scale-results.txt in the run directory under $CARGO_TARGET_DIR/tmp/uml-runs/). KPRS_BENCH_DAEMON=path
# benchmarks another kube-proxy binary. Needs /usr/bin/linux (package user-mode-linux), ipvsadm, ipset and
# iptables on the host file system.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in /usr/bin/linux ipvsadm ipset iptables-legacy-restore; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install user-mode-linux ipvsadm ipset iptables)"; exit 1; }
done
exec cargo bench --bench scale -- "$@"
