#!/bin/bash
# Stage 2: PID 1 in the guest, running from the host's root (9p + tmpfs overlay). Loads
# the RDMA modules, builds the veth pairs with rxe (and siw) on them, waits for the ports
# to become ACTIVE, runs the command, reports its exit code and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm; chmod 1777 /dev/shm
mount -t tmpfs tmpfs /run
ln -sf /proc/self/fd /dev/fd 2>/dev/null
mount -t debugfs none /sys/kernel/debug 2>/dev/null
mount -t configfs none /sys/kernel/config 2>/dev/null
# /tmp stays on the overlay: the host's /tmp is the read-only lower layer, so the test
# binaries `go test -exec` built in /tmp/go-build* are visible here.

for a in $(cat /proc/cmdline); do
  case "$a" in rnet.moddir=*) moddir=${a#rnet.moddir=} ;; esac
done
mkdir -p /run/rnet
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=none rnetrun /run/rnet
out=/run/rnet
log() { echo "[$(cut -d' ' -f1 /proc/uptime)] $*" >> $out/guest.log; }
fail() { log "setup failed: $*"; echo "$*" > $out/setup-failed; sync; umount $out; echo o > /proc/sysrq-trigger; sleep 5; }
con=/dev/console
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = rnet.out ] && con=/dev/$(basename "$p")
done
log "stage2 started"

kver=$(uname -r)
if [ -n "$moddir" ] && [ -d "$moddir/$kver" ]; then
  mkdir -p /lib/modules && mount -t tmpfs tmpfs /lib/modules && mkdir -p "/lib/modules/$kver" && mount --bind "$moddir/$kver" "/lib/modules/$kver"
fi
cwd=$(cat $out/cwd)
if [ -n "$cwd" ] && [ "$cwd" != / ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=mmap rnetcwd "$cwd" || log "mounting the working directory failed"
fi
# One host of the two-host lab: its own network and a command loop instead of one command.
[ -f $out/host ] && . "$(dirname "$0")/guest-host.sh"
wire=$(cat $out/wire); mtu=$(cat $out/mtu); want=$(cat $out/devices)
hostname rnet-guest
ip link set lo up
modprobe -a veth ib_uverbs rdma_ucm rdma_rxe >> $out/guest.log 2>&1 || fail "loading the RDMA modules (ib_uverbs rdma_ucm rdma_rxe) failed"
have_siw= have_rxe=
case " $want " in *" siw "*) modprobe siw >> $out/guest.log 2>&1 && have_siw=1 ;; esac
case " $want " in *" rxe "*) have_rxe=1 ;; esac

# Each pair: devA:v4A:v6A:devB:v4B:v6B. Every address belongs to exactly one RDMA device,
# so rdma_cm's choice of device is unambiguous. rxe on 6.1 works only in the root netns,
# so both ends stay there; in wire mode policy routing sends traffic for the far end out
# of the near veth (the kernel would otherwise short-cut local addresses through lo),
# and accept_local/rp_filter let it be received.
pairs="rvm0:10.77.0.1:fd77::1:rvm1:10.77.0.2:fd77::2"
[ -n "$have_siw" ] && pairs="$pairs rvm2:10.78.0.1:fd78::1:rvm3:10.78.0.2:fd78::2"
# ip -batch cannot switch family per line, so IPv6 goes through its own batch file.
# IPv6 gets no wire routing. With it, rdma_cm on 6.1 rejects the connect (REJECTED,
# status 28) although the same rules work for IPv4; without it, a client bound to fd77::1
# connecting to fd77::2 hangs in rxe loopback. What works is a client on fd77::2 itself,
# so RNET_TEST_CLIENT6 is fd77::2: IPv6 tests prove the IPv6 addressing paths (rdma_cm,
# RoCE v2 GIDs) over rxe1's loopback, not the wire.
: > /run/net4.batch; : > /run/net6.batch
tbl=100
for p in $pairs; do
  IFS=: read -r da a4 a6 db b4 b6 <<<"$(echo "$p" | sed 's/::/@@/g')"
  a6=${a6//@@/::}; b6=${b6//@@/::}
  {
    echo "link add $da mtu $mtu type veth peer name $db mtu $mtu"
    echo "addr add $a4/24 dev $da"; echo "addr add $b4/24 dev $db"
    echo "link set $da up"; echo "link set $db up"
  } >> /run/net4.batch
  { echo "addr add $a6/64 dev $da nodad"; echo "addr add $b6/64 dev $db nodad"; } >> /run/net6.batch
  if [ "$wire" = 1 ]; then
    echo "rule add pref $((tbl-90)) iif lo to $b4 lookup $tbl" >> /run/net4.batch; echo "route add $b4 dev $da src $a4 table $tbl" >> /run/net4.batch
    tbl=$((tbl+1))
    echo "rule add pref $((tbl-90)) iif lo to $a4 lookup $tbl" >> /run/net4.batch; echo "route add $a4 dev $db src $b4 table $tbl" >> /run/net4.batch
    tbl=$((tbl+1))
  fi
done
if [ "$wire" = 1 ]; then
  echo "rule add pref 100 lookup local" >> /run/net4.batch; echo "rule del pref 0" >> /run/net4.batch
fi
if [ "$wire" = 1 ]; then
  for i in all default; do echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local; echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter; done
fi
ip -batch /run/net4.batch >> $out/guest.log 2>&1 || fail "IPv4 network setup (ip -batch) failed"
ip -6 -batch /run/net6.batch >> $out/guest.log 2>&1 || fail "IPv6 network setup (ip -6 -batch) failed"
if [ "$wire" = 1 ]; then
  for i in rvm0 rvm1 rvm2 rvm3; do
    [ -d /proc/sys/net/ipv4/conf/$i ] || continue
    echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local; echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
  done
fi
devs=
[ -n "$have_rxe" ] && devs="rxe0:rxe:rvm0 rxe1:rxe:rvm1"
[ -n "$have_siw" ] && devs="$devs siw0:siw:rvm2 siw1:siw:rvm3"
for d in $devs; do
  IFS=: read -r name type netdev <<<"$d"
  rdma link add "$name" type "$type" netdev "$netdev" >> $out/guest.log 2>&1 || fail "rdma link add $name type $type netdev $netdev failed"
done
# Ports become ACTIVE a few seconds after the link is added; wait up to 60 s.
for d in $devs; do
  name=${d%%:*}
  for _ in $(seq 600); do
    grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" 2>/dev/null && break
    sleep 0.1
  done
  grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" 2>/dev/null || fail "RDMA device $name did not become ACTIVE (state: $(cat /sys/class/infiniband/$name/ports/1/state 2>/dev/null || echo missing))"
done
{ rdma link; ip -br addr; ip rule; ip -6 rule; } >> $out/guest.log 2>&1
log "lab ready"

# A process opening thousands of RDMA connections can hold thousands of fds at once
# (each handshake has an event channel of its own until the connection joins its
# device's shared ones), as a busy TCP server would; raise the limit as such a server would.
ulimit -n 1048576
cd "${cwd:-/}" 2>/dev/null || cd /
export RNET_GUEST=1 RNET_REQUIRE_RDMA=1
[ -n "$have_rxe" ] && export RNET_TEST_SERVER=10.77.0.2 RNET_TEST_CLIENT=10.77.0.1 RNET_TEST_SERVER6=fd77::2 RNET_TEST_CLIENT6=fd77::2
[ -n "$have_siw" ] && export RNET_TEST_IWARP_SERVER=10.78.0.2 RNET_TEST_IWARP_CLIENT=10.78.0.1
bash $out/cmd </dev/null >"$con" 2>&1
rc=$?
log "command exited $rc"
echo $rc > $out/rc
sync
umount $out 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 5
