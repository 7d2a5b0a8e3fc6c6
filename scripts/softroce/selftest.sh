#!/usr/bin/env bash
# selftest.sh: checks that the lab reports what it must: the command's own exit code, a
# timeout as 124, and a device test that fails (not skips) when the guest has no devices.
# Each check boots a guest (about 10 s).
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
vm=$here/../softroce-vm
root=$(cd "$here/../.." && pwd)
fail=0
check() { # name, want, got
  if [ "$2" = "$3" ]; then echo "selftest: ok   $1"; else echo "selftest: FAIL $1: exit $3, want $2"; fail=1; fi
}
"$vm" bash -c 'exit 3' >/dev/null 2>&1; check "exit code passes through" 3 $?
RNET_VM_TIMEOUT=60 "$vm" sleep 100000 >/dev/null 2>&1; check "a command that runs too long is timed out" 124 $?
# A device test in a guest without devices must fail: RNET_REQUIRE_RDMA=1 turns the skip into a failure.
bin=$(mktemp -d)/rdmatest.test
(cd "$root" && go test -c -o "$bin" ./internal/rdmatest) || { echo "selftest: FAIL cannot build the rdmatest probe"; exit 1; }
out=$(RNET_VM_DEVICES=none "$vm" "$bin" -test.run '^TestRequireProbe$' 2>&1); rc=$?
check "no devices: a device test fails" 1 $rc
echo "$out" | grep -q 'RNET_REQUIRE_RDMA=1 makes this a failure' || { echo "selftest: FAIL the failure does not say why: $out"; fail=1; }
rm -rf "$(dirname "$bin")"
exit $fail
