#!/usr/bin/env bash
# device-tier.sh: make test-device in the Soft-RoCE lab. Compiles each device package's
# tests on the host (go test -c -race), then runs them all in one guest (run-tests.sh), so
# the tier pays for one boot instead of one per package. The tests that count what the race
# detector would distort run once more, compiled without it, in the same guest.
#
#   device-tier.sh [-smoke] [-short] [-v] [-timeout D] [-list FILE] [-last PKG] [-norace PKG=REGEXP]... MODULE:PKG...
#
# -last PKG: PKG runs after every other run in the guest, since it changes the lab for good
# (faults/removal deletes a device); its tests are in the list like any others.
# -v: every package's output, as go test -v.
# -smoke: the guest first runs smoke.sh (make lab-smoke), and no test if it fails,
# so a broken lab fails fast with the step named and costs no boot of its own.
# -list FILE: the tests that asked for a device in the host tier (RNET_DEVICE_TESTS,
# internal/rdmatest): only those run in the guest, since the others passed on the host
# already; a package with none is left out. A FILE older than any test file is ignored
# (every test runs), so a stale list never leaves a new device test out. A FILE that
# names a directory none of the packages has (the host tier ran in another checkout, or
# a package is missing from the arguments) fails the tier before any guest boots: those
# device tests would otherwise run nowhere. In the guest, a run whose -test.run matches
# no test fails (run-tests.sh).
#
# Output is go test's: one "ok" or "FAIL" line per package, a failing package's output above
# its line. Environment: GO (default go), RNET_VM_TIMEOUT (seconds for the guest, default
# 5400).
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
vm=$here/../softroce-vm
go=${GO:-go}
short= timeout=20m list= smoke= verbose= last=
norace=() pkgs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -short) short=-test.short ;;
    -smoke) smoke=1 ;;
    -v) verbose=-test.v ;;
    -timeout) timeout=$2; shift ;;
    -list) list=$2; shift ;;
    -last) [ -z "$last" ] || { echo "device-tier.sh: one -last package at most" >&2; exit 2; }; last=$2; shift ;;
    -norace) norace+=("$2"); shift ;;
    -*) echo "device-tier.sh: unknown flag $1" >&2; exit 2 ;;
    *) pkgs+=("$1") ;;
  esac
  shift
done
[ ${#pkgs[@]} -gt 0 ] || { echo "device-tier.sh: no packages" >&2; exit 2; }

root=$(cd "$here/../.." && pwd)
if [ -n "$list" ]; then
  if [ ! -s "$list" ]; then
    echo "device-tier: no list of device tests in $list (make test-host writes it): every test runs in the lab"
    list=
  elif [ -n "$(find "$root" -path "$root/.git" -prune -o \( -name '*_test.go' -o -path '*/internal/rdmatest/*.go' \) -newer "$list" -print -quit)" ]; then
    echo "device-tier: $list is older than the tests (make test-host writes it): every test runs in the lab"
    list=
  fi
fi

dirs=()
for mp in "${pkgs[@]}"; do
  dirs+=("$("$go" -C "${mp%%:*}" list -f '{{.Dir}}' "${mp#*:}")")
done
# Every directory the list names must be one of the packages', or its device tests
# would run nowhere while the tier passes.
if [ -n "$list" ]; then
  unclaimed=$(awk -F'\t' 'NR == FNR { dir[$0] = 1; next } !($1 in dir) && !seen[$1]++ { print $1 }' \
    <(printf '%s\n' "${dirs[@]}") "$list")
  if [ -n "$unclaimed" ]; then
    echo "device-tier: $list lists device tests in directories that none of the packages given has:" >&2
    printf '%s\n' "$unclaimed" | sed 's/^/  /' >&2
    echo "device-tier: they would run nowhere; run make test-host in this checkout (it rewrites the list), or name their packages" >&2
    echo "FAIL	device-tier: device tests in the list match no package"
    exit 1
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rnet-device-tier.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$work/shared.plan"
flags="-test.count=1 -test.timeout=$timeout${short:+ $short}${verbose:+ $verbose}"
i=0
for mp in "${pkgs[@]}"; do
  mod=${mp%%:*} pkg=${mp#*:}
  dir=${dirs[$i]}
  i=$((i + 1))
  bin=$work/$i-$(basename "$pkg").test
  plan=$work/shared.plan
  if [ "$pkg" = "$last" ]; then plan=$work/last.plan; fi
  run=
  if [ -n "$list" ]; then
    run=$(awk -F'\t' -v d="$dir" '$1 == d && !seen[$2]++ {printf "%s%s", n++ ? "|" : "", $2}' "$list")
    if [ -z "$run" ]; then
      printf '?   \t%s\t[no device tests]\n' "$pkg"
    else
      run=" -test.run=^($run)\$"
    fi
  fi
  if [ -z "$list" ] || [ -n "$run" ]; then
    "$go" -C "$mod" test -c -race -o "$bin" "$pkg"
    printf '%s\t%s\t%s\t%s\n' "$pkg" "$dir" "$bin" "$flags$run" >>"$plan"
  fi
  for nr in "${norace[@]}"; do
    [ "${nr%%=*}" = "$pkg" ] || continue
    nbin=$work/$i-$(basename "$pkg")-norace.test
    "$go" -C "$mod" test -c -o "$nbin" "$pkg"
    printf '%s\t%s\t%s\t%s\n' "$pkg (without -race)" "$dir" "$nbin" "$flags -test.run=${nr#*=}" >>"$work/norace.plan"
  done
done
# The runs without the race detector come after the others: they are the few tests the
# race detector would distort, and a failure among the others is the likelier one to read
# first. The -last package comes last of all (run-tests.sh checks the lab after every run
# but the last).
[ -f "$work/norace.plan" ] && cat "$work/norace.plan" >>"$work/shared.plan"
[ -f "$work/last.plan" ] && cat "$work/last.plan" >>"$work/shared.plan"

rc=0
if [ -n "$smoke" ]; then
  # shellcheck disable=SC2016 # expanded by the guest's shell
  RNET_VM_TIMEOUT=${RNET_VM_TIMEOUT:-5400} "$vm" bash -c '"$1" && "$2" "$3"' _ "$here/smoke.sh" "$here/run-tests.sh" "$work/shared.plan" || rc=1
elif [ -s "$work/shared.plan" ]; then
  RNET_VM_TIMEOUT=${RNET_VM_TIMEOUT:-5400} "$vm" "$here/run-tests.sh" "$work/shared.plan" || rc=1
fi
exit $rc
