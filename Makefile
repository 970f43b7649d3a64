# shiftlock-proxy. `make run` and `make test` are the two commands that matter.
GO      ?= go
BIN     := bin
PKGS    := ./...
# The evaluation wing (benchmarks, baselines, the chaos harness) is a Go
# module of its own under bench/, so that the product's go.mod carries none
# of its dependencies; targets that build or test it run there.
BENCH   := cd bench &&
# Fuzz budgets are execution counts, not durations: with a duration, Go 1.26's
# fuzz coordinator can fail a clean run with "context deadline exceeded" when
# the deadline races its own worker cancellation (go.dev/issue/75804, fixed in
# Go 1.27), which a loaded CI machine hit. A count has no deadline to race.
# FUZZTIME=30s still works for a manual run.
FUZZTIME ?= 30000x
FUZZMINTIME ?= 5s

.PHONY: all build run test test-clients deps vet lint fuzz bench-fabric bench-proxy chaos clean static test-verbs build-verbs

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...
	$(BENCH) $(GO) build -o ../$(BIN)/ ./cmd/...

# Start the proxy on 127.0.0.1:6380 with an embedded memory node.
run: build
	$(BIN)/proxy -config configs/proxy.yaml

deps:
	./scripts/install-deps.sh

# The proxy and the memnode as static binaries (what packaging/Dockerfile
# builds), checked to be statically linked, and the systemd units checked
# with systemd-analyze where it exists. No container is built here.
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/static/ ./cmd/proxy ./cmd/memnode
	@for b in proxy memnode; do \
		if ldd $(BIN)/static/$$b >/dev/null 2>&1; then echo "$(BIN)/static/$$b is dynamically linked" >&2; exit 1; fi; \
	done
	@if command -v systemd-analyze >/dev/null; then \
		d=$$(mktemp -d); for u in packaging/*.service; do \
			sed -e "s|/usr/local/bin/shiftlock-proxy|$$PWD/$(BIN)/static/proxy|" -e "s|/usr/local/bin/shiftlock-memnode|$$PWD/$(BIN)/static/memnode|" $$u >$$d/$$(basename $$u); \
		done; systemd-analyze verify $$d/*.service || exit 1; rm -rf $$d; \
	fi
	@echo "static binaries in $(BIN)/static; systemd units verified"

vet:
	$(GO) vet $(PKGS)
	$(BENCH) $(GO) vet $(PKGS)

# Unit, property, integration and short fuzz runs. Installs redis-server and
# friends when missing (as root, via apt).
test: deps vet build
	$(MAKE) -j2 -Otarget test-product test-bench
	cd itest/redislock010 && $(GO) test -race -timeout 5m ./...
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME)

# The two modules' tests run side by side, as their packages did in one
# module: the evaluation module's fault campaigns (bench/chaos) spend their
# minutes waiting on processes, which the product's tests fill. It runs one
# package at a time, so the split adds at most one test binary to those
# sharing the cores (-Otarget keeps each module's output together).
.PHONY: test-product test-bench
test-product:
	$(GO) test -race -timeout 12m $(PKGS)
test-bench:
	$(BENCH) $(GO) test -race -p 1 -timeout 12m $(PKGS)

# The recognised Go clients' own test suites (go-redsync/redsync v4.18.1,
# bsm/redislock v0.9.4 and v0.10.0), from the module cache, against
# redis-server and the proxy: only their harness is patched (address,
# database; redsync's tempredis servers become proxies). The tests that
# differ on the proxy are listed, with the reason, in itest/upstream and
# docs/compatibility.md. About 3-5 minutes; .ci/run runs it after `test`.
test-clients: deps build
	$(GO) vet -tags clientsuites ./itest/upstream/
	cd itest/upstream/tempredis && $(GO) vet .
	$(GO) test -tags clientsuites -count=1 -timeout 20m -v ./itest/upstream/

# The verbs fabric (rdma/verbs) against the Linux kernel's soft-RoCE in a
# qemu guest: the conformance suite, ShiftLock's checker, the CAS/DSLR/MCS
# baselines, the device-counter accounting and a memnode with two proxies
# and redsync clients, all over rxe0. Installs qemu, debootstrap and
# libibverbs-dev when missing (as root, via apt), builds the guest image
# once into ~/.cache/shiftlock/rxe (about 2.5 min), and boots it once per
# run under TCG (scripts/rxe/test.sh). .ci/run runs it after test-clients.
test-verbs:
	./scripts/rxe/test.sh

# The proxy and the memnode with RDMA support (-fabric verbs); needs
# libibverbs-dev.
build-verbs:
	$(GO) build -tags verbs -o $(BIN)/ ./cmd/proxy ./cmd/memnode

# Each fuzz target runs FUZZTIME (default 30000 executions, 3-10 s each here);
# minimizing one new input is capped at FUZZMINTIME so a slow minimization of
# a long input cannot stretch the run.
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./itest/'); do \
	  d=$$(dirname $$f); m=.; \
	  case $$d in ./bench/*) m=bench; d=./$${d#./bench/};; esac; \
	  for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/^func //'); do \
	    echo "fuzz $$m $$d $$t ($(FUZZTIME))"; \
	    (cd $$m && $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$d); \
	  done; \
	done

# The standalone memory node alone (`build` builds it too).
.PHONY: memnode
memnode:
	$(GO) build -o $(BIN)/memnode ./cmd/memnode

# Fabric microbenchmarks: memfab in-process and tcpfab against a real memnode
# process, next to a bare TCP echo; every cell is the median of 3 runs.
# Results go to docs/benchmarks/fabric.md (pasted by hand).
bench-fabric: memnode
	$(BENCH) $(GO) build -o ../$(BIN)/fabricbench ./cmd/fabricbench
	$(BIN)/fabricbench -memnode $(BIN)/memnode -runs 3

# Fault campaigns with real processes, three proxies and 48 clients, every
# fault kind in rotation. First one memnode with a state directory (kill -9,
# memnode restart, SIGSTOP, toxiproxy link faults); then the failover
# topology (a 3-member etcd, two memnodes: the active one killed -9 and not
# restarted, or partitioned from proxies and etcd; an etcd member killed).
# CHAOS_TIME=10m each by default; the results go to docs/reliability.md.
# One-minute variants run in `make test` (package bench/chaos).
CHAOS_TIME ?= 10m
chaos: deps
	$(GO) build -o $(BIN)/ ./cmd/proxy ./cmd/memnode
	$(BENCH) $(GO) build -o ../$(BIN)/ ./cmd/chaos
	$(BIN)/chaos -duration $(CHAOS_TIME) -doc docs/reliability.md
	$(BIN)/chaos -ha -duration $(CHAOS_TIME) -doc docs/reliability.md

# The proxy (embedded memory node) against a real redis-server, same run,
# with CPU per operation of every process. More proxy targets:
# PROXYBENCH_ARGS="-variant 'proxy-redcon=-frontend redcon'".
PROXYBENCH_ARGS ?=
bench-proxy: deps
	$(GO) build -o $(BIN)/ ./cmd/proxy
	$(BENCH) $(GO) build -o ../$(BIN)/ ./cmd/proxybench
	$(BIN)/proxybench -proxy-bin $(BIN)/proxy -runs 6 -doc docs/benchmarks/proxy.md $(PROXYBENCH_ARGS)

# The lock microbenchmark tool alone (`build` builds it too).
.PHONY: lockbench bench-micro
lockbench:
	$(BENCH) $(GO) build -o ../$(BIN)/lockbench ./cmd/lockbench

# Lock microbenchmarks (ShiftLock Fig. 4-6 and 13): ShiftLock and the
# baselines on the model fabric (the paper's timing on a fake clock), on
# memfab and on a real memnode process, 3 rounds, about 28 min.
# Results go to docs/benchmarks/micro.md and docs/img/micro-*.png.
bench-micro: lockbench memnode
	./bench/scripts/bench-micro.sh

# Range locks, CITRON FAST '23 §4.2: CITRON (package rangelock) against
# static segmentation over DSLR, range sizes 1/16/256 and mixed, on the
# model fabric with and without a memory-node verb budget, 3 rounds,
# about 5 minutes; then the same workloads through real proxy processes
# (LOCK.RANGE.* over RESP) on a memnode process and on the embedded memory
# node (cmd/rangebench), 3 rounds, about 3 minutes. Results go to
# docs/benchmarks/range.md.
# The model's sensitivity to the two parameters the ShiftLock paper does
# not state, a Send's latency and a client's own time per operation:
# issue 15's Zipf targets at each point (ShiftLock's three variants against
# the baselines), and Table 3 by client count, 3 rounds, about 22 minutes. Results go to
# docs/benchmarks/model-sens.md.
.PHONY: bench-model-sens
bench-model-sens:
	./bench/scripts/bench-model-sens.sh

.PHONY: bench-range bench-fisslock
bench-range:
	./bench/scripts/bench-range.sh

# FissLock OSDI '24 §7.3/§7.6: the emulated in-network lock and its ParLock
# fallback against ShiftLock, DSLR and MCS on FissLock's microbenchmark,
# on the model fabric, 3 rounds, about 5 minutes. Results go to
# docs/benchmarks/fisslock.md.
bench-fisslock:
	./bench/scripts/bench-fisslock.sh

# SmallBank on Redis, two stories with their audits, about 1.5 minutes: the
# paper's experiment (redlock-rs-style RedLock against native ShiftLock,
# uniform, 240 clients) and the drop-in (the same redsync code against
# redis-server and the embedded proxy, at a hotspot).
.PHONY: demo bench-bank
demo: deps
	./scripts/demo.sh

# The memory node fails over: etcd x3, two memory nodes, one proxy; the
# active node is killed and a fenced client carries on (about 30 s).
.PHONY: demo-ha
demo-ha: deps
	./scripts/demo-ha.sh

# Every demo the README lists, small and quick, so that one that no longer
# runs on a fresh machine fails CI (.ci/run): make demo on 20,000 accounts
# for 3 s per series, and make demo-ha as it is (about 30 s).
.PHONY: test-demos
test-demos: deps
	ACCOUNTS=20000 DURATION=3s WARMUP=1s PAPER_CLIENTS=32 CLIENTS=16 OUT=out/demo-smoke ./scripts/demo.sh
	./scripts/demo-ha.sh

# The SmallBank grid (redlock x1/x3, proxy, native, none; uniform, Zipf,
# hotspot), the paper setup (redlock-rs, 240 clients) and the safety setup
# (10 ms TTL, fencing), 3 rounds, with CPU per committed transaction of
# every process, about 27 min. Results go to docs/benchmarks/smallbank.md
# and docs/img/bank-*.png.
bench-bank: deps
	./bench/scripts/bench-bank.sh

# The cgo half of rdma/verbs and the verbs tests build only with -tags
# verbs, so they are vetted and checked again with it (needs
# libibverbs-dev: scripts/rxe/deps.sh installs it).
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 $(PKGS)
	$(BENCH) $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 $(PKGS)
	@if [ ! -e /usr/include/infiniband/verbs.h ]; then echo "lint: no libibverbs-dev, so -tags verbs is not checked (scripts/rxe/deps.sh installs it)" >&2; exit 1; fi
	$(GO) vet -tags verbs $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 -tags verbs $(PKGS)

clean:
	rm -rf $(BIN) out
