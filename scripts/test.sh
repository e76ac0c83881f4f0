#!/usr/bin/env bash
# The test command: installs what the tests need (apt packages for the User-Mode Linux kernel tests included),
# then runs formatting, lint and every test, UML ones included.
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

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets -- --test-threads=2
