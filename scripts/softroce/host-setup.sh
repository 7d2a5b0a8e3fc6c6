#!/usr/bin/env bash
# Installs the Debian packages the lab and the cgo build need, once: each check is a
# command or header, so a machine that has them pays nothing.
#
#   host-setup.sh           everything: the cgo build, the lab and the interop tests
#   host-setup.sh --build   only what building the cgo packages on the host needs (make
#                           test-host, fuzz, demo and bench run this first, so a fresh
#                           machine gets a clear message or the packages, not a missing
#                           header from the C compiler)
set -euo pipefail
missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_file() { [ -e "$1" ] || missing+=("$2"); }
if [ "${1:-}" = --build ]; then
  need_cmd gcc gcc
  need_file /usr/include/infiniband/verbs.h libibverbs-dev
  need_file /usr/include/rdma/rdma_cma.h librdmacm-dev
else
need_cmd qemu-system-x86_64 qemu-system-x86
need_cmd rdma iproute2
need_cmd busybox busybox-static
need_cmd cpio cpio
need_cmd depmod kmod
need_cmd xz xz-utils
need_cmd rping rdmacm-utils
need_cmd rstream rdmacm-utils
need_cmd ib_write_bw perftest
need_cmd ibv_devinfo ibverbs-utils
# make bench's applications count every system call with perf stat (appbench's device test too)
need_cmd perf linux-perf
# interop tests: libc programs run under librspreload against rnet
need_cmd socat socat
need_cmd curl curl
need_cmd gcc-12 gcc-12
need_cmd make make
need_file /usr/include/infiniband/verbs.h libibverbs-dev
need_file /usr/include/rdma/rdma_cma.h librdmacm-dev
need_file /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ibverbs-providers
need_file /usr/sbin/rdma-ndd rdma-core
need_file /usr/lib/x86_64-linux-gnu/libelf.so.1 libelf1
fi
[ ${#missing[@]} -eq 0 ] && exit 0
pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
[ "$(id -u)" = 0 ] || { echo "host-setup: missing packages: $pkgs; run as root or install them: apt-get install $pkgs" >&2; exit 1; }
echo "host-setup: installing $pkgs" >&2
apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
