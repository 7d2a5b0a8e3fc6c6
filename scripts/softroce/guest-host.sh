#!/bin/bash
# Sourced by guest-stage2.sh when this guest is one host of the two-host lab
# (internal/hostlab, scripts/softroce-hosts): one virtio NIC per wire, each with its
# addresses and its RDMA device, then the driver's commands over the rnet.ctl port until
# the guest is powered off. Never returns.
#
# $out/host is "a" or "b"; each line of $out/wires is
#   INDEX MAC DEVICE MTU ADDR4 ADDR6 PEER4 PEER6
# and $out/jobs/ID is the script of job ID. Over rnet.ctl the driver sends "run ID" and
# "signal ID SIG"; the guest answers "ready", "failed REASON", "out ID LINE" and
# "exit ID CODE".
name=$(cat $out/host)
hostname "rnet-$name"
ip link set lo up
ctl=
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = rnet.ctl ] && ctl=/dev/$(basename "$p")
done
[ -n "$ctl" ] || fail "no rnet.ctl port"
exec 3<>"$ctl"
hostfail() { echo "failed $*" >&3; fail "$*"; }

kinds=$(awk '{print $3}' $out/wires | sort -u | tr '\n' ' ')
mods="virtio_net ib_uverbs rdma_ucm"
case " $kinds " in *" rxe "*) mods="$mods rdma_rxe" ;; esac
case " $kinds " in *" siw "*) mods="$mods siw" ;; esac
# shellcheck disable=SC2086
modprobe -a $mods >> $out/guest.log 2>&1 || hostfail "loading $mods failed (siw needs scripts/softroce/build-siw.sh)"
devs=
while read -r idx mac dev mtu a4 a6 p4 p6; do
  nic=
  for _ in $(seq 100); do
    for n in /sys/class/net/*; do
      [ "$(cat "$n/address" 2>/dev/null)" = "$mac" ] && nic=$(basename "$n")
    done
    [ -n "$nic" ] && break
    sleep 0.1
  done
  [ -n "$nic" ] || hostfail "no NIC with MAC $mac for wire $idx"
  { ip link set "$nic" mtu "$mtu" && ip addr add "$a4/24" dev "$nic" &&
    ip -6 addr add "$a6/64" dev "$nic" nodad && ip link set "$nic" up; } >> $out/guest.log 2>&1 ||
    hostfail "setting up $nic (wire $idx, $a4, MTU $mtu) failed"
  rdma link add "$dev$idx" type "$dev" netdev "$nic" >> $out/guest.log 2>&1 ||
    hostfail "rdma link add $dev$idx type $dev netdev $nic failed"
  devs="$devs $dev$idx"
  export "RNET_HOST_ADDR$idx=$a4" "RNET_HOST_ADDR6_$idx=$a6" "RNET_PEER_ADDR$idx=$p4" "RNET_PEER_ADDR6_$idx=$p6" "RNET_HOST_DEVICE$idx=$dev$idx"
done < $out/wires
for d in $devs; do
  for _ in $(seq 600); do
    grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null && break
    sleep 0.1
  done
  grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null ||
    hostfail "RDMA device $d did not become ACTIVE (state: $(cat "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null || echo missing))"
done
{ rdma link; ip -br addr; } >> $out/guest.log 2>&1
log "host $name ready"

ulimit -n 1048576
export RNET_GUEST=1 RNET_HOST=$name
mkdir -p /run/jobs
echo ready >&3
# Each job runs in a session of its own (signals reach all its processes) without the
# control port. Its lines go out cut to 3000 bytes: one write each, so that the lines of
# jobs running at once never interleave within a line.
export LC_ALL=C
while IFS=' ' read -r op id arg <&3; do
  case "$op" in
  run)
    (
      setsid bash -c "echo \$\$ > /run/jobs/$id.pid; exec bash $out/jobs/$id" </dev/null 2>&1 3>&- |
        while IFS= read -r line || [ -n "$line" ]; do printf 'out %s %s\n' "$id" "${line:0:3000}"; done >&3
      echo "exit $id ${PIPESTATUS[0]}" >&3
    ) &
    ;;
  signal)
    # A signal may come before the job has written its pid.
    for _ in $(seq 50); do [ -s "/run/jobs/$id.pid" ] && break; sleep 0.1; done
    kill -s "$arg" -- "-$(cat "/run/jobs/$id.pid" 2>/dev/null)" 2>/dev/null
    ;;
  esac
done
log "control port closed"
sync
echo o > /proc/sysrq-trigger
sleep 5
