#!/usr/bin/env bash
# The demo: installs what it needs (the same apt packages as scripts/test.sh: the User-Mode Linux kernel,
# ipvsadm, ipset, iptables, ...), builds kube-proxy and the demo, then boots a real Linux kernel in which
# kube-proxy serves the sample cluster of config/demo-cluster.yaml. Prints PASS or FAIL; exit status 0 or 1.
set -euo pipefail
cd "$(dirname "$0")/.."

need=(user-mode-linux ipvsadm ipset iptables kmod curl iproute2)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

echo "building kube-proxy and the demo ..."
cargo build --quiet --bin kube-proxy --example demo
exec cargo run --quiet --example demo
