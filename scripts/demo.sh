#!/usr/bin/env bash
# The demo: installs what it needs (the same apt packages as scripts/test.sh: the User-Mode Linux kernel,
# ipvsadm, ipset, iptables, ...), builds kube-proxy and the demo, then boots a real Linux kernel in which
# kube-proxy serves the sample cluster of config/demo-cluster.yaml. Prints PASS or FAIL; exit status 0 or 1.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

echo "building kube-proxy and the demo ..."
cargo build --quiet --bin kube-proxy --example demo
exec cargo run --quiet --example demo
