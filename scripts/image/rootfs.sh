# Sourced by scripts/build-image.sh: assembles and prunes the image's root file system from Debian packages.
# Functions only; the caller sets MIRROR, SECURITY_MIRROR, SUITE, PACKAGES_FILE, EPOCH and OUT and sources
# scripts/arch.sh.

# The packages of scripts/image/packages.txt (comments and blank lines dropped), comma-separated.
image_packages() {
  sed -e 's/#.*//' -e 's/[[:space:]]//g' "$PACKAGES_FILE" | grep -v '^$' | paste -sd, -
}

# Unpacks the packages of architecture $2 and their dependencies into $1 (no maintainer scripts run: nothing
# executes in the target, so nothing of the build host leaks in, and a foreign architecture needs no emulator).
# The .deb files stay in var/cache/apt/archives for record_packages. A source that cannot be reached fails
# with a message that says so.
fetch_rootfs() {
  local dir=$1 arch=$2 log=$1.mmdebstrap.log
  if ! SOURCE_DATE_EPOCH=$EPOCH mmdebstrap --variant=extract --architectures="$arch" --include="$(image_packages)" \
      --skip=cleanup/apt/cache --aptopt='Acquire::Retries "1"' --aptopt='Acquire::http::Timeout "20"' \
      "$SUITE" "$dir" \
      "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
      "deb $SECURITY_MIRROR $SUITE-security main" >"$log" 2>&1; then
    if grep -Eqi 'could not resolve|failed to fetch|unable to connect|connection (refused|timed out)|temporary failure|no release file|does not have a release file|404' "$log"; then
      echo "build-image: cannot reach the Debian package source ($MIRROR, $SECURITY_MIRROR):" >&2
    else
      echo "build-image: mmdebstrap failed:" >&2
    fi
    grep -E '^E:' "$log" | head -6 >&2 || tail -6 "$log" >&2
    cp "$log" "$OUT/mmdebstrap.log"
    echo "build-image: full log: $OUT/mmdebstrap.log" >&2
    return 1
  fi
}

# Records the installed packages the way distroless images do (var/lib/dpkg/status.d/<package>, the control
# fields of each .deb: image scanners read them) and as "name version" lines in $2; removes the .deb files.
record_packages() {
  local dir=$1 list=$2 deb pkg
  mkdir -p "$dir/var/lib/dpkg/status.d"
  : >"$list"
  for deb in "$dir"/var/cache/apt/archives/*.deb; do
    pkg=$(dpkg-deb -f "$deb" Package)
    { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } >"$dir/var/lib/dpkg/status.d/$pkg"
    echo "$pkg $(dpkg-deb -f "$deb" Version)" >>"$list"
  done
  LC_ALL=C sort -o "$list" "$list"
}

# What a dpkg configure step would have done, by hand: the iptables alternatives (Debian's default, nft, as
# debian:bookworm-slim has them; the daemon itself calls iptables-legacy*/iptables-nft* by name), the CA
# bundle update-ca-certificates would write, an empty /tmp.
configure_rootfs() {
  local dir=$1 t
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sfn "${t/tables/tables-nft}" "$dir/usr/sbin/$t"
  done
  mkdir -p "$dir/etc/ssl/certs"
  find "$dir/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat >"$dir/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$dir/tmp" && chmod 1777 "$dir/tmp"
}

# Removes what kube-proxy, iptables, ipset and modprobe never use: documentation (copyright files stay),
# package-manager state, debconf and openssl tools (pulled in by ca-certificates), iconv modules, device nodes;
# drops the records of the packages removed entirely from the list $2. $3: the architecture.
prune_rootfs() {
  local dir=$1 lib
  lib=usr/lib/$(gnu_triple "$3")
  find "$dir/usr/share/doc" -type f ! -name copyright -delete
  find "$dir/usr/share/doc" -type l -delete
  find "$dir/usr/share/doc" -type d -empty -delete
  rm -rf "$dir"/usr/share/{man,info,locale,lintian,bash-completion,perl5,debconf,pixmaps,initramfs-tools,ca-certificates} \
    "$dir"/usr/bin/{openssl,c_rehash,debconf*} "$dir"/usr/sbin/{dpkg-preconfigure,dpkg-reconfigure,update-ca-certificates} \
    "$dir"/usr/sbin/{iptables-apply,ip6tables-apply} \
    "$dir/$lib"/{gconv,engines-3,ossl-modules} "$dir/$lib"/libssl.so.* \
    "$dir"/var/cache/* "$dir"/var/lib/apt "$dir"/var/log/* "$dir"/etc/apt "$dir"/etc/ca-certificates.conf \
    "$dir"/var/lib/dpkg/{alternatives,arch,info,status,triggers,updates,available,cmethopt,diversions,statoverride} \
    "$dir"/etc/{hostname,hosts,resolv.conf,machine-id,debconf.conf} "$dir"/etc/ssl/{openssl.cnf,private} "$dir"/usr/lib/ssl
  # Packages none of whose files remain: no record either (a scanner would report what is not there).
  rm -f "$dir"/var/lib/dpkg/status.d/{debconf,openssl}
  sed -i -e '/^debconf /d' -e '/^openssl /d' "$2"
  find "$dir/dev" -mindepth 1 -delete
}
