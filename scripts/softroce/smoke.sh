#!/usr/bin/env bash
# smoke.sh: a fast check, run in the guest before any Go test, that the lab really moves
# RDMA traffic: it lists the devices, then runs rping (IPv4 and IPv6) and a short rstream
# between the two rxe devices across the veth. A broken lab fails here, with the step named.
set -uo pipefail
server=${RNET_TEST_SERVER:?run this inside scripts/softroce-vm}
client=${RNET_TEST_CLIENT:?}
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }

echo "smoke: RDMA devices"
rdma link show || fail "rdma link show"
for d in /sys/class/infiniband/*; do
  n=$(basename "$d")
  printf '  %-6s %-8s %s\n' "$n" "$(cat "$d/ports/1/link_layer")" "$(cat "$d/ports/1/state")"
done
[ -d /sys/class/infiniband/rxe0 ] && [ -d /sys/class/infiniband/rxe1 ] || fail "rxe0 and rxe1 are missing"

# A server started in the background may not listen yet when the client starts, so the
# client is retried a few times; each try is bounded by timeout(1).
retry() { for i in 1 2 3 4 5; do timeout 30 "$@" && return 0; sleep 0.5; done; return 1; }

run_pair() { # name, server command, client command
  local name=$1 srv=$2 cli=$3 spid
  $srv >/tmp/smoke-server.log 2>&1 & spid=$!
  if ! retry $cli >/tmp/smoke-client.log 2>&1; then
    kill $spid 2>/dev/null; cat /tmp/smoke-client.log /tmp/smoke-server.log >&2
    fail "$name"
  fi
  timeout 30 tail --pid=$spid -f /dev/null || { kill $spid; fail "$name: the server did not exit"; }
  wait $spid || { cat /tmp/smoke-server.log >&2; fail "$name: the server failed"; }
  echo "smoke: ok   $name"
}
run_pair "rping $client -> $server" "rping -s -a $server -C 10" "rping -c -a $server -I $client -C 10 -V -S 64"
if [ -n "${RNET_TEST_SERVER6:-}" ]; then # IPv6 runs over rxe loopback in the lab (see guest-stage2.sh)
  run_pair "rping ${RNET_TEST_CLIENT6} -> ${RNET_TEST_SERVER6}" "rping -s -a ${RNET_TEST_SERVER6} -C 10" "rping -c -a ${RNET_TEST_SERVER6} -I ${RNET_TEST_CLIENT6} -C 10 -V -S 64"
fi
run_pair "rstream $client -> $server (4 KiB x 200)" "rstream -b $server -S 4096 -C 200 -T v" "rstream -s $server -b $client -S 4096 -C 200 -T v"
sed -n '1,3p' /tmp/smoke-client.log | sed 's/^/smoke:      /'
