#!/usr/bin/env bash
# grpc-tls-cost.sh: what TLS costs examples/grpc, over rnet and over TCP: plaintext and
# -tls runs interleaved, ROUNDS rounds, then the median of each figure and the TLS/plain
# ratio. Run it where demo.sh runs (natively, or in the guest via scripts/softroce-vm),
# with BINDIR holding the grpc binary (go build -o BINDIR/grpc ./examples/grpc).
#
#   scripts/grpc-tls-cost.sh BINDIR [ROUNDS]
#
# Addresses as demo.sh: RNET_TEST_SERVER, RNET_TEST_CLIENT. GRPC_N (default 2000) unary calls
# of 64 B and GRPC_STREAM_MIB (16) MiB each way per run.
set -euo pipefail

bin=${1:?usage: grpc-tls-cost.sh BINDIR [ROUNDS]}
rounds=${2:-5}
server=${RNET_TEST_SERVER:?set RNET_TEST_SERVER}
client=${RNET_TEST_CLIENT:-}
n=${GRPC_N:-2000}
mib=${GRPC_STREAM_MIB:-16}
work=$(mktemp -d "${TMPDIR:-/tmp}/rnet-tlscost.XXXXXX")
trap 'rm -rf "$work"' EXIT
from=()
[ -n "$client" ] && from=(-from "$client")

# once NAME PORT ARGS...: one server and one client run with ARGS on both; the client's
# RESULT line is appended to $work/NAME.
once() {
  local name=$1 port=$2; shift 2
  "$bin/grpc" -s -once -addr "$server:$port" "$@" >"$work/server.log" 2>&1 &
  local spid=$! i
  for i in $(seq 300); do
    grep -q serving "$work/server.log" && break
    kill -0 "$spid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  "$bin/grpc" -c -addr "$server:$port" "${from[@]}" "$@" -size 64 -n "$n" -stream-mib "$mib" >"$work/client.log" 2>&1 ||
    { cat "$work/client.log" >&2; kill "$spid"; exit 1; }
  wait "$spid"
  grep '^RESULT' "$work/client.log" >>"$work/$name"
}

port=52000
for r in $(seq "$rounds"); do
  for net in rdma tcp; do
    t=(); [ $net = tcp ] && t=(-tcp)
    once $net-plain $((port++)) "${t[@]}"
    once $net-tls $((port++)) "${t[@]}" -tls -cert "$work/cert-$port.pem"
  done
  echo "round $r of $rounds done" >&2
done

# median NAME KEY
median() {
  tr ' ' '\n' <"$work/$1" | sed -n "s/^$2=//p" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
for net in rdma tcp; do
  echo "== $net, medians of $rounds interleaved runs"
  printf '%-22s %10s %10s %10s\n' "" plain TLS TLS/plain
  for key in p50_us mean_us download_MBps upload_MBps; do
    p=$(median $net-plain $key); s=$(median $net-tls $key)
    awk -v k=$key -v p="$p" -v s="$s" 'BEGIN { printf "%-22s %10s %10s %10.2f\n", k, p, s, (p > 0 ? s / p : 0) }'
  done
done
echo "== every RESULT line"
cat "$work"/rdma-plain "$work"/rdma-tls "$work"/tcp-plain "$work"/tcp-tls
