#!/usr/bin/env bash
# bench-scale.sh RNET [CLIENT FLAGS...]: issue 28's many-connections benchmark. Starts
# `RNET scale -s` on RNET_TEST_SERVER (default 10.77.0.2, the lab's rxe1), then
# `RNET scale -c` from RNET_TEST_CLIENT (default 10.77.0.1, rxe0) with the given flags, and
# waits for both. Both processes get as many fds as the hard limit allows and, where
# permitted, unlimited locked memory: every connection end holds fds and pinned rings.
# Run it in the lab (make bench-scale) or natively on two addresses of one machine.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/bench-scale.sh RNET [CLIENT FLAGS...]" >&2; exit 2; }
rnet=$1; shift
server=${RNET_TEST_SERVER:-10.77.0.2}
client=${RNET_TEST_CLIENT:-10.77.0.1}
ulimit -n "$(ulimit -Hn)" || echo "bench-scale: could not raise RLIMIT_NOFILE; it stays $(ulimit -n)" >&2
ulimit -l unlimited 2>/dev/null || echo "bench-scale: RLIMIT_MEMLOCK stays $(ulimit -l) KiB (not root, no CAP_IPC_LOCK); each connection end pins its rings" >&2
echo "bench-scale: RLIMIT_NOFILE $(ulimit -n), RLIMIT_MEMLOCK $(ulimit -l), $(grep MemTotal /proc/meminfo | tr -s ' '), $(nproc) CPUs" >&2
"$rnet" scale -s "$server" &
srv=$!
"$rnet" scale -c "$server" -from "$client" "$@"
rc=$?
# The server ends when the client says it is done or goes away.
wait "$srv"
src=$?
[ "$rc" = 0 ] || exit "$rc"
[ "$src" = 0 ] || { echo "bench-scale: the server exited with status $src" >&2; exit "$src"; }
