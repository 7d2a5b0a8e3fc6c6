#!/usr/bin/env bash
# selftest.sh: checks that the lab reports what it must: the command's own exit code, a
# timeout as 124, and a device test that fails (not skips) when the guest has no devices.
# Each check boots a guest. The first one alone (it may prepare the guest kernel's cache),
# then the other two at once: neither measures time, and the timeout check takes a minute.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
vm=$here/../softroce-vm
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # name, want, got
  if [ "$2" = "$3" ]; then echo "selftest: ok   $1"; else echo "selftest: FAIL $1: exit $3, want $2"; fail=1; fi
}
bin=$tmp/rdmatest.test
(cd "$root" && go test -c -o "$bin" ./internal/rdmatest) || { echo "selftest: FAIL cannot build the rdmatest probe"; exit 1; }
"$vm" bash -c 'exit 3' >/dev/null 2>&1; check "exit code passes through" 3 $?
RNET_VM_TIMEOUT=60 "$vm" sleep 100000 >/dev/null 2>&1 & timeout=$!
# A device test in a guest without devices must fail: RNET_REQUIRE_RDMA=1 turns the skip into a failure.
RNET_VM_DEVICES=none "$vm" "$bin" -test.run '^TestRequireProbe$' >"$tmp/nodevices.out" 2>&1 & nodevices=$!
wait $timeout; check "a command that runs too long is timed out" 124 $?
wait $nodevices; check "no devices: a device test fails" 1 $?
grep -q 'RNET_REQUIRE_RDMA=1 makes this a failure' "$tmp/nodevices.out" || { echo "selftest: FAIL the failure does not say why: $(cat "$tmp/nodevices.out")"; fail=1; }
exit $fail
