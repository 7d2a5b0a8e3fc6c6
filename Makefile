# make test: the whole suite. Host tier (vet, -race unit tests, short fuzz runs), then the
# device tier on the real kernel RDMA stack: natively when RNET_NATIVE=1 (real hardware,
# addresses from RNET_TEST_*), otherwise inside the Soft-RoCE guest (scripts/softroce-vm).
GO        ?= go
VM        := $(CURDIR)/scripts/softroce-vm
FUZZTIME  ?= 300000x
# Device tests run once more without -race, as PACKAGE=REGEXP: those whose checks hold only
# without it (allocations per call), and the volume tests of faults and interop, whose worth
# at full length is volume and checksums (under -race, which slows each access several
# times over, they run as with -short: a 64 MiB soak, 50 busy connections, 8 MiB each way
# through socat under librspreload), and the interop suite again with Config.Resume on every
# rnet end (TestInteropWithResume).
NORACE_TESTS = github.com/rnet-dev/rnet/internal/cm=^TestConnectWriteImmDisconnect$$ \
               github.com/rnet-dev/rnet/faults=^(TestSoak|TestManyConnections)$$ \
               github.com/rnet-dev/rnet/interop=^(TestPreloadBulkCShutdownFirst|TestPreloadBulkRnetCloseWriteFirst|TestInteropWithResume)$$
# The device package that runs last in the lab's guest: removal deletes an RDMA device.
DEVICE_LAST = github.com/rnet-dev/rnet/faults/removal
# The device tier runs at full length only with RNET_SOAK=1, which CI sets; otherwise
# -short: 64 MiB soaks instead of 1 GiB, 100 churn cycles instead of 1000, 100 idle
# connections instead of 1000, 20 release cycles instead of 200, 50 busy connections instead
# of 200, 8 MiB each way through socat instead of 64 (faults' soak and busy connections and
# interop's socat bulk tests keep the -short length under -race and run at full length in
# NORACE_TESTS).
SHORT = $(if $(filter 1,$(RNET_SOAK)),,-short)
# Every Go module in the repository: the core at the root and the nested ones (a directory
# with its own go.mod) that keep gRPC and the benchmark tools' requirements out of the
# core's. Found rather than listed, so a new module is tested as soon as it exists. Each
# runs on its own go.mod and replace directives: a developer's go.work changes nothing.
MODULES := . $(filter-out .,$(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort)))
export GOWORK := off
define newline


endef
# $(call in_modules,ENV,ARGS): `ENV go ARGS` in every module, one recipe line each.
in_modules = $(foreach m,$(MODULES),$(1) $(GO) -C $(m) $(2)$(newline))
# Packages whose tests ask for a device (they import internal/rdmatest): only these are
# worth a guest boot each. $(call device_pkgs,MODULE) lists one module's; DEVICE_PKGS all.
device_pkgs = $(shell $(GO) -C $(1) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/internal\/rdmatest/ && $$1 !~ /internal\/rdmatest$$/ {print $$1}')
DEVICE_PKGS = $(foreach m,$(MODULES),$(call device_pkgs,$(m)))
# $(call device_test,ARGS): `go test ARGS PKGS` in every module that has device packages.
device_test = $(foreach m,$(MODULES),$(if $(call device_pkgs,$(m)),$(GO) -C $(m) test $(1) $(call device_pkgs,$(m))$(newline)))
# The host tier's list of the tests that asked for a device (internal/rdmatest's
# RNET_DEVICE_TESTS): the lab runs only those, the others having passed on the host. Written
# whole at the end of the host tier's tests; the device tier ignores it when a test file is
# newer, and then runs every test.
DEVICE_TESTS := $(CURDIR)/.device-tests
# Every device package as MODULE:PACKAGE, for scripts/softroce/device-tier.sh.
DEVICE_MODPKGS = $(foreach m,$(MODULES),$(addprefix $(m):,$(call device_pkgs,$(m))))
# $(call norace_test,ENV): NORACE_TESTS' tests on this host, one `go test` each.
norace_test = $(foreach t,$(NORACE_TESTS),$(1) $(GO) test -count=1 $(SHORT) -run '$(lastword $(subst =, ,$(t)))' $(firstword $(subst =, ,$(t)))$(newline))

.PHONY: test test-host fuzz lab-selftest fuzz-and-selftest lab-smoke test-device test-hosts test-native lab-shell build-deps
# In the lab the smoke check runs first in the device tier's guest (one boot fewer), and the
# self-test runs beside fuzzing (fuzz-and-selftest).
ifeq ($(RNET_NATIVE),1)
TEST_STAGES = test-host fuzz lab-selftest lab-smoke test-device test-hosts
else
TEST_STAGES = test-host fuzz-and-selftest test-device test-hosts
endif
# $(call stages,TARGETS,$(MAKE)): make each target in turn, with a line when it starts and
# one with its duration when it ends, so that a log shows where the time went. ($(MAKE) is
# passed so that make sees it in the recipe and runs it under -n too.)
stages = for s in $(1); do \
	  t0=$$(date +%s); echo "== stage $$s: started $$(date -u +%H:%M:%S)"; \
	  $(2) --no-print-directory $$s || { echo "== stage $$s: FAILED after $$(( $$(date +%s) - t0 )) s"; exit 1; }; \
	  echo "== stage $$s: done in $$(( $$(date +%s) - t0 )) s"; \
	done
test:
	@$(call stages,$(TEST_STAGES),$(MAKE))

# The cgo packages need libibverbs-dev and librdmacm-dev on the host: install them (as
# root) or say which are missing, before the C compiler fails on a missing header.
build-deps:
	@scripts/softroce/host-setup.sh --build

# Every module's go.mod must be tidy: the core's must not grow requirements that only a
# nested module needs.
test-host: build-deps
	@$(call stages,host-tidy host-vet host-build-nocgo host-vet-darwin host-unit,$(MAKE))
.PHONY: host-tidy host-vet host-build-nocgo host-vet-darwin host-unit
host-tidy:
	$(call in_modules,,mod tidy -diff)
host-vet:
	$(call in_modules,,vet ./...)
host-build-nocgo:
	$(call in_modules,CGO_ENABLED=0,build ./...)
host-vet-darwin:
	$(call in_modules,GOOS=darwin,vet ./...)
host-unit:
	@rm -f $(DEVICE_TESTS) $(DEVICE_TESTS).new
	$(call in_modules,RNET_DEVICE_TESTS=$(DEVICE_TESTS).new,test -race -count=1 ./...)
	@touch $(DEVICE_TESTS).new && mv $(DEVICE_TESTS).new $(DEVICE_TESTS)
	# internal/lockcount's counting build too (the rnet_lockcount tag of make bench-roundtrip),
	# and rnet ping's locks per round trip in it (make bench's rnet-lockcount).
	$(GO) test -race -count=1 -tags rnet_lockcount ./internal/lockcount
	$(GO) test -race -count=1 -tags rnet_lockcount -run '^(TestPingReportsLocksWhenCounted|TestLoopbackTCP|TestJSONMatchesSharedSchema)$$' ./cmd/rnet

# Each fuzz target for a short run: enough to catch a regression in a decoder, not a search.
# A count, not a duration: with a duration, go1.26's fuzz coordinator can fail a run at its
# deadline with a bare "context deadline exceeded" on a busy machine (golang/go#75804).
# go test -list builds and runs a package's tests, so it is asked only of the packages whose
# test files declare a func Fuzz: go list names their files without building anything.
fuzz_pkgs = $(GO) -C $(1) list -f '{{$$d := .Dir}}{{.ImportPath}}{{range .TestGoFiles}} {{$$d}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$$d}}/{{.}}{{end}}' ./... | \
	  while read -r pkg files; do [ -n "$$files" ] && grep -q '^func Fuzz' $$files && echo "$$pkg"; done
fuzz: build-deps
	@for mod in $(MODULES); do \
	  for pkg in $$($(call fuzz_pkgs,$$mod)); do \
	    for f in $$($(GO) -C $$mod test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	      echo "fuzz $$pkg $$f ($(FUZZTIME))"; t0=$$(date +%s); \
	      $(GO) -C $$mod test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/rnet-fuzz.log 2>&1 || { cat /tmp/rnet-fuzz.log; exit 1; }; \
	      echo "fuzz $$pkg $$f: done in $$(( $$(date +%s) - t0 )) s"; \
	    done; \
	  done; \
	done

# fuzz and lab-selftest at once: the self-test's guests mostly wait (its timeout check
# idles a minute) and time nothing, and each fuzz run counts inputs rather than time, so
# neither can fail for the other's load. The self-test's output follows fuzzing's, with its
# own duration.
fuzz-and-selftest: build-deps
	@out=$$(mktemp); t0=$$(date +%s); \
	{ $(MAKE) --no-print-directory lab-selftest >$$out 2>&1; echo "$$? $$(( $$(date +%s) - t0 ))" >$$out.rc; } & \
	$(MAKE) --no-print-directory fuzz; fuzz=$$?; \
	wait; read -r self secs <$$out.rc; cat $$out; rm -f $$out $$out.rc; \
	echo "== lab-selftest (beside fuzz): $$( [ $$self = 0 ] && echo passed || echo FAILED) in $$secs s"; \
	[ $$fuzz = 0 ] && [ $$self = 0 ]

ifeq ($(RNET_NATIVE),1)
lab-selftest:
	@echo "RNET_NATIVE=1: no lab to check"
lab-smoke:
	@echo "RNET_NATIVE=1: using this host's RDMA devices"; rdma link show
test-device: export RNET_REQUIRE_RDMA := 1
test-device:
	$(call device_test,-race -count=1 $(SHORT))
	$(call norace_test,RNET_REQUIRE_RDMA=1)
else
# The harness reports exit codes, timeouts and missing devices as it must.
lab-selftest:
	scripts/softroce/selftest.sh
lab-smoke:
	$(VM) scripts/softroce/smoke.sh
# Every device package compiled on the host, then run one after another in one guest (a
# boot costs about 30 s) after the smoke check, NORACE_TESTS after the others and
# DEVICE_LAST last of all; a line per package as go test's.
test-device: build-deps
	@[ -n "$(DEVICE_MODPKGS)" ] || { echo "no device-tier packages found"; exit 1; }
	GO=$(GO) scripts/softroce/device-tier.sh -smoke $(SHORT) -timeout 20m -list $(DEVICE_TESTS) \
	  $(addprefix -last ,$(DEVICE_LAST)) $(foreach t,$(NORACE_TESTS),-norace '$(t)') \
	  $(DEVICE_MODPKGS)
endif

# The two-host resume tests of a hundred streams, which skip themselves under -race: the
# race detector's cost in the hosts' roles overloads the two emulated CPUs of each
# (internal/twohosts/resume_test.go, needNoRace).
CROWDED_RESUME_TESTS = ^TestRXEResume(AfterWireCut|AfterDeviceRemoval|OverTCP|GivesUp)$$

# make test-hosts: the two-host tier (docs/lab.md, "Two hosts"). Its tests boot host A and
# host B (internal/hostlab), two guests of one CPU each joined by a virtual wire, and run
# rnet between them under power-off, freeze, wire cuts and reboots. They run on this
# machine, not in a guest, one package at a time; with RNET_NATIVE=1 there is no lab to boot.
ifeq ($(RNET_NATIVE),1)
test-hosts:
	@echo "RNET_NATIVE=1: the two-host tier needs the lab's guests; skipped"
else
test-hosts: build-deps
	RNET_HOSTS=1 $(GO) test -race -count=1 -timeout 10m ./internal/hostlab
	RNET_HOSTS=1 $(GO) -C internal/twohosts test -race -count=1 -timeout 40m .
	RNET_HOSTS=1 $(GO) -C internal/twohosts test -count=1 -timeout 20m -run '$(CROWDED_RESUME_TESTS)' .
endif

# An interactive-less shell command in the lab, e.g. make lab-shell CMD='ibv_devinfo -v'
lab-shell:
	$(VM) bash -c '$(CMD)'

# make demo: the echo and gRPC examples over rnet and over TCP, with a comparison table.
# Built on the host; run natively when RNET_NATIVE=1 and `rdma link show` lists an ACTIVE
# device (addresses from RNET_TEST_SERVER and RNET_TEST_CLIENT), otherwise in the
# Soft-RoCE guest (server on 10.77.0.2/rxe1, client from 10.77.0.1/rxe0).
DEMO_BIN ?= $(or $(TMPDIR),/tmp)/rnet-demo-$(shell id -u)
.PHONY: demo
demo: build-deps
	@mkdir -p $(DEMO_BIN)
	$(GO) -C examples build -o $(abspath $(DEMO_BIN))/echo ./echo
	$(GO) -C examples build -o $(abspath $(DEMO_BIN))/grpc ./grpc
	@if [ "$(RNET_NATIVE)" = 1 ] && rdma link show 2>/dev/null | grep -q ACTIVE; then \
	  echo "demo: running natively on this host's RDMA devices"; \
	  scripts/demo.sh $(DEMO_BIN); \
	else \
	  echo "demo: no native RDMA (set RNET_NATIVE=1 on a host with an ACTIVE device); running in the Soft-RoCE guest"; \
	  $(VM) scripts/demo.sh $(DEMO_BIN); \
	fi

# make bench: rnet against C rstream (rsocket), ib_write_bw/ib_write_lat (the device's own
# limit) and TCP, side by side; rnet and rstream each twice, polling (rnet-poll, rstream's
# default loop) and sleeping when idle (rnet's default, rstream -T b) on the lab's rxe pair (client rxe0 10.77.0.1, server rxe1
# 10.77.0.2), each measurement repeated BENCH_RUNS times; prints a table of medians and
# ratios and writes $(BENCH_OUT)/bench.json, bench.txt and bench.svg. Each run also measures
# the Go runtime's floor without RDMA (benchmarks/gofloor, see bench-floor below), and then
# rnet-poll's latency tests once more with rnet-lockcount (cmd/rnet built with the rnet_lockcount
# tag) as the client, for its crossings into C and locks per round trip, and the applications
# (benchmarks/appbench: gRPC and HTTP over rnet and TCP, with each process's work per call;
# BENCH_ARGS=-appbench-run REGEXP picks workloads, -appbench none skips them). BENCH_SCALE scales the
# bytes and iterations of every test. Natively with RNET_NATIVE=1 (pass addresses and
# devices through BENCH_ARGS, e.g. -server 192.168.1.10 -client 192.168.1.11 -sdev mlx5_0
# -cdev mlx5_1 -gid 3). `make bench-go` runs the go test benchmarks in the guest.
# In the guest only the current directory is shared with the host: keep BENCH_OUT inside it
# (a /tmp path is the guest's own and vanishes with it).
# BENCH_VM_APPEND boots the bench guest with the TSC as its clock, as real machines run:
# without it the emulated HPET makes every clock read a system call (2.2 µs against 0.24 µs
# measured in the guest), which Go's scheduler pays several times per wakeup and rstream
# almost never. The tests keep the lab's default. BENCH_VM_APPEND= measures on the HPET.
BENCH_VM_APPEND ?= tsc=reliable clocksource=tsc
BENCH_RUNS  ?= 3
BENCH_SCALE ?= 1
BENCH_OUT   ?= bench-results
BENCH_ARGS  ?=
BENCH_BIN   ?= $(or $(TMPDIR),/tmp)/rnet-bench-$(shell id -u)
.PHONY: bench bench-go
bench: build-deps
	@mkdir -p $(BENCH_BIN) $(BENCH_OUT)
	$(GO) build -o $(BENCH_BIN)/rnet ./cmd/rnet
	# The same command counting the mutexes it takes, for the locks per round trip only:
	# the counting slows it, so no time comes from it.
	$(GO) build -tags rnet_lockcount -o $(BENCH_BIN)/rnet-lockcount ./cmd/rnet
	# A module of its own (its plots need gonum/plot, which the core module does not require).
	$(GO) -C cmd/rnet-benchreport build -o $(abspath $(BENCH_BIN))/rnet-benchreport .
	$(GO) -C benchmarks build -o $(abspath $(BENCH_BIN))/gofloor ./gofloor
	$(GO) -C benchmarks build -o $(abspath $(BENCH_BIN))/appbench ./appbench
	$(CC) -O2 -Wall -o $(BENCH_BIN)/gofloor-c benchmarks/gofloor/c/floor.c
	@if [ "$(RNET_NATIVE)" = 1 ]; then \
	  $(BENCH_BIN)/rnet-benchreport -rnet $(BENCH_BIN)/rnet -rnet-counting $(BENCH_BIN)/rnet-lockcount -runs $(BENCH_RUNS) -scale $(BENCH_SCALE) -out $(BENCH_OUT) $(BENCH_ARGS); \
	else \
	  RNET_VM_APPEND="$(BENCH_VM_APPEND)" $(VM) $(BENCH_BIN)/rnet-benchreport -rnet $(BENCH_BIN)/rnet -rnet-counting $(BENCH_BIN)/rnet-lockcount -runs $(BENCH_RUNS) -scale $(BENCH_SCALE) -out $(BENCH_OUT) $(BENCH_ARGS); \
	fi

# make bench-hosts: make bench's measurements across the two-host lab (issue 41; docs/lab.md,
# "Two hosts"): every client on host A (rxe0 10.80.0.1), every server on host B (rxe0
# 10.80.0.2), two guests of one CPU each whose qemus send to each other directly (no relay),
# booted once with BENCH_VM_APPEND. rnet-benchreport -hosts boots them from this machine,
# starts an exec server on B and runs itself on A, which starts each server on B through it
# (-server-exec); the same bench.json, bench.txt and bench.svg, into bench-results/hosts unless
# BENCH_OUT is given on the command line (it must be inside the current directory). BENCH_RUNS,
# BENCH_SCALE and BENCH_ARGS as for bench; no Go floor (each host has one CPU).
.PHONY: bench-hosts
bench-hosts: BENCH_OUT = bench-results/hosts
ifeq ($(RNET_NATIVE),1)
bench-hosts:
	@echo "RNET_NATIVE=1: bench-hosts needs the lab's guests; on two real hosts run rnet-benchreport with -server-exec (docs/benchmarks.md)"
else
bench-hosts: build-deps
	@mkdir -p $(BENCH_BIN) $(BENCH_OUT)
	$(GO) build -o $(BENCH_BIN)/rnet ./cmd/rnet
	$(GO) build -tags rnet_lockcount -o $(BENCH_BIN)/rnet-lockcount ./cmd/rnet
	$(GO) -C cmd/rnet-benchreport build -o $(abspath $(BENCH_BIN))/rnet-benchreport .
	$(GO) -C benchmarks build -o $(abspath $(BENCH_BIN))/appbench ./appbench
	$(BENCH_BIN)/rnet-benchreport -hosts -hosts-append "$(BENCH_VM_APPEND)" -rnet $(BENCH_BIN)/rnet -rnet-counting $(BENCH_BIN)/rnet-lockcount -runs $(BENCH_RUNS) -scale $(BENCH_SCALE) -out $(BENCH_OUT) $(BENCH_ARGS)
endif

# make bench-scale: issue 28's many-connections benchmark (scripts/bench-scale.sh). A
# server (`rnet scale -s`, rxe1 10.77.0.2) and a client (`rnet scale -c`, from rxe0
# 10.77.0.1) in one guest: the client opens BENCH_SCALE_CONNS connections (16 dials in
# flight), echoes a checksummed message on each, holds them idle while the server measures
# itself, streams 4 MiB on 100 of them, and prints the SCALE and SCALE-MEM lines.
# Each connection costs its guest about 1.7 MiB (both ends: rings, rxe's queues, heaps),
# so the guest gets 2 GiB plus that, never less than the lab's 4 GiB (19 GiB for 10000:
# the host needs that much free). Opening runs at 40-57 connections a second under TCG:
# 10000 take about 4 minutes, the whole guest run about 11.
# BENCH_SCALE_ACK_TIMEOUT: with the default 33.5 ms on rxe, 100 streams in the emulated
# guest make the transport resend, and rxe then fails connections (docs/benchmarks.md);
# empty measures the default.
BENCH_SCALE_CONNS       ?= 10000
BENCH_SCALE_ARGS        ?=
BENCH_SCALE_ACK_TIMEOUT ?= 2s
BENCH_SCALE_VM_MEM      ?= $(shell c=$(BENCH_SCALE_CONNS); m=$$((2048 + c * 17 / 10)); [ $$m -lt 4096 ] && m=4096; echo $$m)
BENCH_SCALE_VM_TIMEOUT  ?= 3000
.PHONY: bench-scale
bench-scale: build-deps
	@mkdir -p $(BENCH_BIN)
	$(GO) build -o $(BENCH_BIN)/rnet ./cmd/rnet
	@if [ "$(RNET_NATIVE)" = 1 ]; then \
	  RNET_ACK_TIMEOUT=$(BENCH_SCALE_ACK_TIMEOUT) scripts/bench-scale.sh $(BENCH_BIN)/rnet -conns $(BENCH_SCALE_CONNS) $(BENCH_SCALE_ARGS); \
	else \
	  echo "bench-scale: $(BENCH_SCALE_CONNS) connections in a guest of $(BENCH_SCALE_VM_MEM) MiB"; \
	  RNET_ACK_TIMEOUT=$(BENCH_SCALE_ACK_TIMEOUT) RNET_VM_MEM=$(BENCH_SCALE_VM_MEM) RNET_VM_TIMEOUT=$(BENCH_SCALE_VM_TIMEOUT) \
	    RNET_VM_APPEND="$(BENCH_VM_APPEND)" $(VM) scripts/bench-scale.sh $(BENCH_BIN)/rnet -conns $(BENCH_SCALE_CONNS) $(BENCH_SCALE_ARGS); \
	fi

BENCHTIME ?= 300x
bench-go: build-deps
	$(GO) -C benchmarks test -run '^$$' -bench . -benchtime $(BENCHTIME) -exec $(VM) .

# make bench-roundtrip: the 64 B round trip with both ends polling (make bench's rnet-poll,
# BenchmarkPingPongPoll) in the bench guest, with cgo/op and locks/op per round trip: the
# crossings into C and the mutexes both ends take (internal/lockcount, counted only in a
# build with the rnet_lockcount tag; ns/op then includes the counting, so take time from
# BENCH_ROUNDTRIP_TAGS= runs).
BENCH_ROUNDTRIP_TAGS  ?= rnet_lockcount
BENCH_ROUNDTRIP_COUNT ?= 5
BENCH_ROUNDTRIP_TIME  ?= 3000x
.PHONY: bench-roundtrip
bench-roundtrip: build-deps
	RNET_VM_APPEND="$(BENCH_VM_APPEND)" $(GO) -C benchmarks test -tags '$(BENCH_ROUNDTRIP_TAGS)' -run '^$$' \
	  -bench '^BenchmarkPingPongPoll$$' -benchtime $(BENCH_ROUNDTRIP_TIME) -count $(BENCH_ROUNDTRIP_COUNT) -timeout 30m -exec '$(VM)' .

# make bench-floor: what the Go runtime alone adds to a busy-polling ping-pong, against a C
# twin, in the bench guest (no RDMA): the floor under rnet's latency ratio to rstream.
FLOOR_ARGS ?= -runs 5 -n 5000 -work 20
.PHONY: bench-floor
bench-floor: build-deps
	@mkdir -p $(BENCH_BIN)
	$(GO) -C benchmarks build -o $(abspath $(BENCH_BIN))/gofloor ./gofloor
	$(CC) -O2 -Wall -o $(BENCH_BIN)/gofloor-c benchmarks/gofloor/c/floor.c
	@if [ "$(RNET_NATIVE)" = 1 ]; then \
	  $(BENCH_BIN)/gofloor -c $(BENCH_BIN)/gofloor-c $(FLOOR_ARGS); \
	else \
	  RNET_VM_APPEND="$(BENCH_VM_APPEND)" $(VM) $(BENCH_BIN)/gofloor -c $(BENCH_BIN)/gofloor-c $(FLOOR_ARGS); \
	fi
