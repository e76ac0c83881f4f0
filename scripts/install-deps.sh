#!/usr/bin/env bash
# Installs the Debian packages the demo, the kernel tests and the image build need, skipping those already
# installed: the User-Mode Linux kernel, ipvsadm, ipset, iptables, kmod, curl, iproute2, conntrack (kernel
# tests; conntrack is the conntrack test's independent check); nftables (the nft tool: the host-kernel tests of
# other modes' leftovers build the nftables mode's tables with it); mmdebstrap, binutils (objcopy, readelf), file,
# python3 (scripts/build-image.sh, scripts/build-release.sh); containerd and runc (the image tests run the
# image inside the UML guest). Used by scripts/test.sh and scripts/demo.sh.
set -euo pipefail

need=(user-mode-linux ipvsadm ipset iptables kmod curl iproute2 conntrack nftables
      mmdebstrap binutils file python3 containerd runc)
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
