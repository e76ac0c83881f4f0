# kube-proxy-rs image: a drop-in for the upstream kube-proxy image (binary at /usr/local/bin/kube-proxy).
#
#   docker build -t kube-proxy-rs:0.1.0 .
#
# Build stage: the official Rust image (Debian bookworm). It runs scripts/build-release.sh, the same script CI
# runs, so the release build command lives in one place.
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
ENV CARGO_TARGET_DIR=/src/target
COPY . .
RUN ./scripts/build-release.sh

# Runtime stage: what kube-proxy needs on the node side.
#   iptables  - iptables/ip6tables, both the legacy and the nft variants (the backend is picked at run time
#               from what the node already uses; KUBE_PROXY_IPTABLES_BACKEND=legacy|nft overrides)
#   ipset     - the ipset tool (sets are programmed with `ipset restore` in batch mode)
#   kmod      - modprobe, for loading ip_vs* and nf_conntrack from the host's /lib/modules
# No conntrack binary: stale UDP conntrack entries are removed over netlink.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      iptables ipset kmod ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kube-proxy /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
