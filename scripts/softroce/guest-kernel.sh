#!/usr/bin/env bash
# guest-kernel.sh CACHE: prepares Debian's kernel for the guest in CACHE and prints its
# directory. Steps, each done once and cached: download and extract the linux-image
# package (never installed on the host), build siw.ko (Debian builds no SoftiWARP),
# depmod, and an initramfs that can mount the host's root over 9p.
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
cache=$1
mkdir -p "$cache"
say() { echo "softroce-vm: $*" >&2; }

pkg=${RNET_VM_KERNEL:-}
if [ -z "$pkg" ] && [ -f "$cache/kernel.pkg" ]; then pkg=$(cat "$cache/kernel.pkg"); fi
if [ -z "$pkg" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$pkg" ]; then
    apt-get update -qq >&2 || true
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$pkg" ] || { say "cannot resolve the guest kernel: 'apt-cache depends linux-image-amd64' names no linux-image package (is Debian's archive reachable? set RNET_VM_KERNEL to a package name)"; exit 1; }
  echo "$pkg" > "$cache/kernel.pkg"
fi
kdir=$cache/$pkg

if [ ! -f "$kdir/.extracted" ]; then
  say "downloading the guest kernel $pkg (once; cached in $kdir)"
  rm -rf "$kdir"; mkdir -p "$kdir/root"
  if ! (cd "$kdir" && { apt-get download "$pkg" >/dev/null 2>&1 || { apt-get update -qq && apt-get download "$pkg"; }; } >&2); then
    say "the kernel package $pkg cannot be had from Debian's archive (apt-get download failed)"
    exit 1
  fi
  dpkg-deb -x "$kdir"/*.deb "$kdir/root"
  dpkg-deb -f "$kdir"/*.deb Version > "$kdir/version"
  rm -f "$kdir"/*.deb
  ls "$kdir/root/lib/modules" | head -1 > "$kdir/kver"
  touch "$kdir/.extracted"
fi
kver=$(cat "$kdir/kver")
mods=$kdir/root/lib/modules/$kver

# A failed build is not tried again until the build script changes: the marker holds the
# script's hash.
siw_script=$(sha256sum "$here/build-siw.sh" | cut -d' ' -f1)
if [ "${RNET_VM_SIW:-1}" = 1 ] && [ ! -f "$mods/updates/siw.ko" ] &&
   [ "$(cat "$kdir/.siw-failed" 2>/dev/null)" != "$siw_script" ]; then
  say "building siw.ko for $kver (once; downloads linux-source, ~1 min)"
  if ! "$here/build-siw.sh" "$kdir" "$kver" "$(cat "$kdir/version")" >"$kdir/siw-build.log" 2>&1; then
    echo "$siw_script" >"$kdir/.siw-failed"
    say "siw did not build (log: $kdir/siw-build.log); the lab runs with rxe only"
  fi
fi

if [ ! -f "$mods/modules.dep" ] || [ -n "$(find "$mods/updates" -newer "$mods/modules.dep" 2>/dev/null | head -1)" ]; then
  depmod -b "$kdir/root" "$kver"
fi

initrd=$kdir/initrd.img
if [ ! -f "$initrd" ] || [ "$here/guest-init" -nt "$initrd" ]; then
  t=$(mktemp -d); mkdir -p "$t"/{bin,proc,sys,dev,mods}
  cp "$(command -v busybox)" "$t/bin/busybox"
  cp "$here/guest-init" "$t/init"; chmod +x "$t/init"
  # Only what mounting the 9p root needs; everything else loads from the host's tree later.
  for m in virtio_pci 9pnet_virtio 9p overlay virtio_console; do
    modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done | awk '!seen[$0]++' | while read -r p; do
    b=$(basename "$p")
    case "$b" in
      *.xz) xz -dc "$p" > "$t/mods/${b%.xz}"; b=${b%.xz} ;;
      *) cp "$p" "$t/mods/" ;;
    esac
    echo "$b" >> "$t/modules.list"
  done
  (cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$t"
fi
echo "$kdir"
