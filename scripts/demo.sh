#!/usr/bin/env bash
# demo.sh: run examples/echo and examples/grpc over rnet and over TCP between two
# endpoints on this machine, and print an rnet-against-TCP table. `make demo` builds
# the examples and runs this natively (RNET_NATIVE=1 with an ACTIVE RDMA device) or
# inside the Soft-RoCE guest (scripts/softroce-vm).
#
#   scripts/demo.sh BINDIR [SERVER_IP [CLIENT_IP]]
#
# SERVER_IP and CLIENT_IP default to RNET_TEST_SERVER and RNET_TEST_CLIENT (the lab
# sets 10.77.0.2 on rxe1 and 10.77.0.1 on rxe0). Both must be IP addresses of RDMA
# devices on this machine; the servers listen on SERVER_IP and the clients connect
# from CLIENT_IP. Tune with DEMO_ECHO_N (default 5000), DEMO_GRPC_N (2000) and
# DEMO_STREAM_MIB (16).
set -euo pipefail

bin=${1:?usage: demo.sh BINDIR [SERVER_IP [CLIENT_IP]]}
server=${2:-${RNET_TEST_SERVER:?no server address: pass SERVER_IP or set RNET_TEST_SERVER}}
client=${3:-${RNET_TEST_CLIENT:-}}
echo_n=${DEMO_ECHO_N:-5000}
grpc_n=${DEMO_GRPC_N:-2000}
stream_mib=${DEMO_STREAM_MIB:-16}
work=$(mktemp -d "${TMPDIR:-/tmp}/rnet-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
from=()
[ -n "$client" ] && from=(-from "$client")

# pair NAME PORT SERVER_ARGS -- CLIENT_ARGS: start the server, wait until it
# listens, run the client, wait for the server to exit, and keep the client's
# RESULT line in $work/NAME.
pair() {
  local name=$1 port=$2 prog=$3; shift 3
  local sargs=() cargs=()
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done; shift
  cargs=("$@")
  "$bin/$prog" -s -once -addr "$server:$port" "${sargs[@]}" >"$work/$name.server" 2>&1 &
  local spid=$!
  local i
  for i in $(seq 300); do
    grep -q -e 'listening on' -e 'serving' "$work/$name.server" && break
    kill -0 "$spid" 2>/dev/null || { cat "$work/$name.server" >&2; echo "demo: $prog server ($name) failed" >&2; exit 1; }
    sleep 0.1
  done
  if ! "$bin/$prog" -c -addr "$server:$port" "${from[@]}" "${cargs[@]}" >"$work/$name.client" 2>&1; then
    cat "$work/$name.client" >&2; kill "$spid" 2>/dev/null; echo "demo: $prog client ($name) failed" >&2; exit 1
  fi
  wait "$spid" || { cat "$work/$name.server" >&2; echo "demo: $prog server ($name) exited with an error" >&2; exit 1; }
  grep '^RESULT' "$work/$name.client" > "$work/$name"
  sed 's/^/  /' "$work/$name.client" | grep -v '^  RESULT'
}

# field NAME KEY: a value from a RESULT line.
field() { tr ' ' '\n' < "$work/$1" | sed -n "s/^$2=//p"; }

for net in rdma tcp; do
  t=(); [ $net = tcp ] && t=(-tcp)
  port_off=0; [ $net = tcp ] && port_off=1
  echo "== echo, 64 B messages, over $net"
  pair echo-lat-$net $((17471 + port_off)) echo "${t[@]}" -- "${t[@]}" -size 64 -n "$echo_n"
  echo "== echo, 64 KiB messages, over $net"
  pair echo-bw-$net $((17473 + port_off)) echo "${t[@]}" -- "${t[@]}" -size 65536 -n $((stream_mib * 16))
  echo "== gRPC, over $net"
  pair grpc-$net $((50051 + port_off)) grpc "${t[@]}" -- "${t[@]}" -size 64 -n "$grpc_n" -stream-mib "$stream_mib"
done

row() { # LABEL NAME-PREFIX KEY
  local r t
  r=$(field "$2-rdma" "$3"); t=$(field "$2-tcp" "$3")
  awk -v l="$1" -v r="$r" -v t="$t" 'BEGIN { printf "%-34s %10s %10s %10.2f\n", l, r, t, (t > 0 ? r / t : 0) }'
}
echo
echo "rnet against TCP, server $server, client ${client:-(routing table)}"
printf '%-34s %10s %10s %10s\n' "" rnet TCP rnet/TCP
row "echo 64 B round trip p50 (µs)" echo-lat p50_us
row "echo 64 B round trip p99 (µs)" echo-lat p99_us
row "echo 64 KiB stream (MB/s)" echo-bw MBps
row "gRPC unary 64 B p50 (µs)" grpc p50_us
row "gRPC server streaming (MB/s)" grpc download_MBps
row "gRPC client streaming (MB/s)" grpc upload_MBps
echo "(latency: lower is better; MB/s: higher is better)"
