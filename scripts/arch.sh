# Sourced by scripts/build-release.sh and scripts/build-image.sh: the architectures the image is built for and
# their names in each tool (OCI/Debian, Rust, GNU). Functions only; TARGET_DIR is the cargo target directory.

# The architectures of the image index, in index order.
IMAGE_ARCHS=(amd64 arm64)

# The build host's architecture in OCI/Debian terms.
host_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) echo "unsupported build host architecture $(uname -m)" >&2; return 1 ;;
  esac
}

# Rust's target triple of an architecture.
rust_triple() {
  case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) echo "unknown architecture $1 (amd64, arm64)" >&2; return 1 ;;
  esac
}

# The GNU triple: cross tool prefix and Debian multiarch directory (usr/lib/<triple>).
gnu_triple() {
  case $1 in
    amd64) echo x86_64-linux-gnu ;;
    arm64) echo aarch64-linux-gnu ;;
    *) echo "unknown architecture $1 (amd64, arm64)" >&2; return 1 ;;
  esac
}

# What `file` says of an executable built for the architecture.
elf_machine() {
  case $1 in
    amd64) echo x86-64 ;;
    arm64) echo 'ARM aarch64' ;;
    *) echo "unknown architecture $1 (amd64, arm64)" >&2; return 1 ;;
  esac
}

# Cargo's release directory for the architecture: target/release for the host's, target/<triple>/release else.
release_dir() {
  if [ "$1" = "$(host_arch)" ]; then
    echo "$TARGET_DIR/release"
  else
    echo "$TARGET_DIR/$(rust_triple "$1")/release"
  fi
}
