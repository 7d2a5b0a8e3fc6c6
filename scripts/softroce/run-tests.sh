#!/usr/bin/env bash
# run-tests.sh PLAN: runs compiled test binaries one after another in one guest, as `go
# test` runs packages, so that one boot serves many packages (device-tier.sh writes PLAN
# and boots the guest). Each line of PLAN is tab-separated: a label (the import path), the
# package directory (the binary runs there, as under go test), the binary, and its flags
# (space-separated). Each run prints its output only when it fails (or has -test.v), then
# a line as go test's: "ok  <label>  <seconds>s" or "FAIL  <label>  <seconds>s", and after an
# ok line its tests that took RNET_SLOW_TEST seconds or more (default 10), slowest first,
# so that a CI log shows where the tier's time goes. The exit code is 1 if any run failed.
#
# Between runs, what a package may leave behind that would change the next one's lab is
# removed: processes still in its session, and traffic-control qdiscs on the lab's
# interfaces; and the kernel's count of RDMA objects must settle back. A device that is no
# longer ACTIVE fails the run that left it so, unless no run follows.
set -uo pipefail
plan=${1:?usage: run-tests.sh PLAN}
[ "${RNET_GUEST:-}" = 1 ] || { echo "run-tests.sh: runs in the lab's guest (scripts/softroce-vm), where it may reset traffic control" >&2; exit 2; }
logs=$(mktemp -d)
fail=0
devices() {
  for d in /sys/class/infiniband/*; do
    [ -e "$d" ] || continue
    echo "$(basename "$d"):$(cut -d: -f2 "$d/ports/1/state" 2>/dev/null | tr -d ' ')"
  done | sort | tr '\n' ' '
}
clean_lab() {
  local i
  for i in $(ls /sys/class/net); do
    tc qdisc del dev "$i" root 2>/dev/null
    tc qdisc del dev "$i" ingress 2>/dev/null
    tc qdisc del dev "$i" clsact 2>/dev/null
  done
  true
}
# The tests count the kernel's RDMA objects machine-wide, and rxe frees a process's QPs
# from a work queue after it exits: before the next package, wait for the counts to be
# back where they were before the first (say so if they are not after 30 s).
objects() { rdma resource show 2>/dev/null; }
settle() {
  local i
  for i in $(seq 300); do
    [ "$(objects)" = "$objects_before" ] && return 0
    sleep 0.1
  done
  echo "run-tests: after $1 the kernel still holds RDMA objects: $(objects | tr '\n' ' ') (before: $(echo "$objects_before" | tr '\n' ' '))"
}
# slow_tests LOG prints the top-level tests of LOG that took RNET_SLOW_TEST seconds or more.
slow_tests() {
  sed -n 's/^--- \(PASS\|SKIP\): \([^ ]*\) (\([0-9.]*\)s)$/\3 \2/p' "$1" |
    awk -v min="${RNET_SLOW_TEST:-10}" '$1 >= min' | sort -rn |
    awk '{ printf "    %-50s %8.1fs\n", $2, $1 }'
}
lab_before=$(devices)
objects_before=$(objects)
mapfile -t runs < <(grep -v '^[[:space:]]*$' "$plan")
n=0
for run in "${runs[@]}"; do
  IFS=$'\t' read -r label dir bin flags <<<"$run"
  n=$((n + 1))
  log=$logs/$n.log
  start=$(date +%s%N)
  # Its own session, so that whatever it leaves running can be found and stopped.
  # -test.v for the tests' times (see slow_tests); the output shows only on failure, or
  # when the plan asked for -test.v.
  # shellcheck disable=SC2086 # flags are words by design (no spaces inside one)
  (cd "$dir" && exec setsid "$bin" -test.paniconexit0 $flags -test.v) >"$log" 2>&1 </dev/null &
  sid=$!
  wait "$sid"
  rc=$?
  pkill -KILL -s "$sid" 2>/dev/null
  secs=$(( ($(date +%s%N) - start) / 1000000 ))
  secs=$(printf '%d.%03d' $((secs / 1000)) $((secs % 1000)))
  # The lab must be as it was for the next run (the last one may change it: removal does).
  if [ "$n" -lt ${#runs[@]} ]; then
    clean_lab
    settle "$label"
    lab_after=$(devices)
    if [ "$lab_after" != "$lab_before" ]; then
      echo "run-tests: $label left the lab changed: devices were [$lab_before], are [$lab_after]" >>"$log"
      rc=1
    fi
  fi
  note=
  if [ "$rc" = 0 ]; then
    if grep -q '^testing: warning: no tests to run' "$log"; then
      note=' [no tests to run]'
      # Tests asked for by name that do not exist here (renamed, or the plan's
      # directory is another checkout's) would pass without running.
      case " $flags " in *" -test.run="*)
        echo "run-tests: $label: its -test.run matched no test" >>"$log"
        rc=1 ;;
      esac
    fi
  fi
  if [ "$rc" = 0 ]; then
    case " $flags " in *" -test.v "* | *" -test.v=true "*) cat "$log" ;; esac # as go test -v
    printf 'ok  \t%s\t%ss%s\n' "$label" "$secs" "$note"
    slow_tests "$log"
  else
    cat "$log"
    printf 'FAIL\t%s\t%ss\n' "$label" "$secs"
    fail=1
  fi
done
[ "$n" -gt 0 ] || { echo "run-tests: $plan lists no test binaries"; exit 1; }
rm -rf "$logs"
exit $fail
