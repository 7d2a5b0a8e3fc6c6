#!/usr/bin/env bash
# build-siw.sh KDIR KVER VERSION: builds SoftiWARP (siw.ko), which Debian's kernels leave
# out (CONFIG_RDMA_SIW is not set), as an external module from linux-source of exactly
# the guest kernel's version, against its linux-headers; all only extracted under KDIR.
set -euo pipefail
kdir=$1 kver=$2 ver=$3
work=$kdir/siw-build
rm -rf "$work"; mkdir -p "$work/root"; cd "$work"
hdr=linux-headers-$kver
deps=$(apt-cache depends "$hdr")
common=$(awk '/Depends: linux-headers-.*-common/{print $2; exit}' <<<"$deps")
kbuild=$(awk '/Depends: linux-kbuild/{print $2; exit}' <<<"$deps")
src=linux-source-$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' <<<"$kver")
[ -n "$common" ] && [ -n "$kbuild" ] || { echo "build-siw: cannot resolve the header packages of $hdr" >&2; exit 1; }
# The archive can drop a shared package's revision while the kernel's stays (the security
# suite served linux-kbuild 6.1.192-3 beside headers 6.1.192-2): take the exact version when
# it is there, else the newest of the same upstream release, whose tools are the same.
same_release() {
  local pkg=$1 want=$2 have
  have=$(apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}')
  if grep -qxF "$want" <<<"$have"; then echo "$want"; return; fi
  grep -E "^${want%-*}-" <<<"$have" | sort -V | tail -n 1 | grep . ||
    { echo "build-siw: no $pkg of release ${want%-*} (have: $(echo $have))" >&2; return 1; }
}
apt-get download "$hdr=$ver" "$common=$(same_release "$common" "$ver")" \
  "$kbuild=$(same_release "$kbuild" "$ver")" "$src=$(same_release "$src" "$ver")"
for d in linux-headers-*.deb linux-kbuild-*.deb; do dpkg-deb -x "$d" root; done
dpkg-deb --fsys-tarfile "$src"_*.deb | tar -xO "./usr/src/$src.tar.xz" | xz -dc | tar -x --wildcards "$src/drivers/infiniband/sw/siw/*"
rm -f ./*.deb
# The arch headers' Makefile includes the common one by absolute path.
sed -i "s|include /usr/src/|include $work/root/usr/src/|" "root/usr/src/$hdr/Makefile"
make -s -C "root/usr/src/$hdr" M="$work/$src/drivers/infiniband/sw/siw" CC=gcc-12 CONFIG_RDMA_SIW=m CONFIG_DEBUG_INFO_BTF_MODULES= modules
install -D -m 644 "$work/$src/drivers/infiniband/sw/siw/siw.ko" "$kdir/root/lib/modules/$kver/updates/siw.ko"
cd "$kdir"; rm -rf "$work"
