#!/usr/bin/env bash
# Installs the Debian packages the demo and the kernel tests need (User-Mode Linux kernel, ipvsadm, ipset,
# iptables, kmod, curl, iproute2, conntrack for the conntrack test's independent check), skipping those
# already installed. Used by scripts/test.sh and scripts/demo.sh.
set -euo pipefail

need=(user-mode-linux ipvsadm ipset iptables kmod curl iproute2 conntrack)
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
