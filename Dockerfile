# kube-proxy-rs image: a drop-in for the upstream kube-proxy image (binary at /usr/local/bin/kube-proxy).
#
#   docker build -t kube-proxy-rs:0.1.0 .
#
# Without a Docker engine or registry access, scripts/build-image.sh builds the same image (same packages, same
# binary, entrypoint, labels and environment) from Debian packages, reproducibly, as an OCI archive.
#
# Build stage: the official Rust image (Debian bookworm). It runs scripts/build-release.sh, the same script CI
# runs, so the release build command lives in one place; it leaves the stripped binary, with its crate list
# embedded by cargo-auditable, in release/dist/. Built natively for the platform being built:
# `docker buildx build --platform linux/amd64,linux/arm64 .` gives the same two platforms scripts/build-image.sh
# packs (under emulation for the foreign one: slow; build-image.sh cross-compiles instead).
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS build
RUN cargo install --locked cargo-auditable@0.7.7
WORKDIR /src
ENV CARGO_TARGET_DIR=/src/target
COPY . .
RUN ./scripts/build-release.sh

# Runtime stage: what kube-proxy needs on the node side, the Debian packages listed (and explained) in
# scripts/image/packages.txt, the one list scripts/build-image.sh installs too: iptables (legacy and nft
# variants), ipset, kmod (modprobe), ca-certificates. No conntrack binary: conntrack entries go over netlink.
FROM debian:bookworm-slim
COPY scripts/image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      $(sed -e 's/#.*//' /tmp/packages.txt) \
 && rm -rf /var/lib/apt/lists/* /tmp/packages.txt
COPY --from=build /src/target/release/dist/kube-proxy /usr/local/bin/kube-proxy
COPY LICENSE /usr/share/doc/kube-proxy-rs/LICENSE
LABEL org.opencontainers.image.title="kube-proxy-rs" \
      org.opencontainers.image.description="kube-proxy (IPVS mode) in Rust, a drop-in for the kube-proxy image" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube-proxy-rs/kube-proxy-rs"
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
