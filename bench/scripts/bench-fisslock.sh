#!/usr/bin/env bash
# FissLock's lock-granting microbenchmark (OSDI '24 §7.3, Fig. 13/14) on
# the model fabric (bench/rdma/latfab on testing/synctest's fake clock, the
# paper testbed's 2 µs verbs and 32M verbs/s at the memory node, as make
# bench-micro's model): 160 clients on 8 machines, 1M locks, update-heavy
# (50% shared), read-mostly (90%) and read-only, uniform and Zipf 0.99.
# Locks: the emulated FissLock (bench/shiftlock/baseline/fisslock: switch decider
# with 1 ns per packet and 1.68M slots, 1 µs of server CPU per packet),
# ParLock (its fallback alone: FissLock's headline baseline), and on the
# same workloads ShiftLock, DSLR and MCS. Then FissLock §7.6: uniform
# read-mostly over 10M locks, where 8.4M of them fall back to ParLock.
# 3 rounds, about 3 minutes.
#
# Writes out/bench-fisslock/fisslock.csv (appended) and docs/img/fisslock-*.png, and the "fisslock"
# section of docs/benchmarks/fisslock.md (intro: docs/bench/fisslock.md). Knobs:
# RUNS, DURATION, WARMUP, SERVER_PACKET.
set -uo pipefail
cd "$(dirname "$0")/../.." # the repository root: bin/, docs/ and out/ live there

RUNS=${RUNS:-3}
DURATION=${DURATION:-10ms}
WARMUP=${WARMUP:-2ms}
SERVER_PACKET=${SERVER_PACKET:-1us}
OUT=${OUT:-out/bench-fisslock}
CSV=$OUT/fisslock.csv
LABEL=fisslock-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
MODEL_FLAGS="-clients 160 -nodes 8 -server-packet $SERVER_PACKET -reader-poll rtt -iops-cap 32000000"
. bench/scripts/model-run.sh

for r in $(seq 1 "$RUNS"); do
	for keys in uniform zipf:0.99; do
		for readers in 0.5 0.9 1; do
			for l in fisslock parlock shiftlock dslr mcs; do
				model -run "$r" -lock "$l" -entries 1000000 -keys "$keys" -readers "$readers"
			done
		done
	done
	for l in fisslock parlock; do
		model -run "$r" -lock "$l" -entries 10000000 -keys uniform -readers 0.9
	done
done

table fisslock parlock
