#!/usr/bin/env bash
# The model fabric's sensitivity to the two parameters the ShiftLock paper
# does not state (issue 15): the one-way latency of a Send, and a client's
# own time per operation (lockbench -think). bench-micro's model takes 3 µs
# and none; the paper says Sends "perform similarly to WRITE" (§3.1), whose
# round trip is the model's 2 µs. For each point, issue 15's Zipf targets
# with the paper's N = 16: every lock on Zipf-0.99 WI, and ShiftLock (three
# variants) against MCS on RI and RO; bench-micro's model otherwise (240
# clients, each its own node, 10M locks, 2 µs verbs, 270 ns per atomic on
# one address, 32M verbs/s, polls once per round trip). 3 rounds, about 22 minutes.
#
# Writes out/bench-model-sens/sens.csv (appended) and the "model-sens"
# section of docs/benchmarks/model-sens.md (intro: docs/bench/model-sens.md). Knobs:
# RUNS, DURATION, WARMUP, CASB_WARMUP, SENDS, THINKS, ATOMIC.
set -uo pipefail
cd "$(dirname "$0")/../.." # the repository root: bin/, docs/ and out/ live there

RUNS=${RUNS:-3}
DURATION=${DURATION:-10ms}
WARMUP=${WARMUP:-2ms}
# CAS-B's SMART backoff adapts its limit once per millisecond per client;
# on Zipf keys it takes 100-150 ms of the fake clock to settle (before
# that its retries, p99 and goodput drift), so its runs warm up longer.
CASB_WARMUP=${CASB_WARMUP:-150ms}
SENDS=${SENDS:-3us 2.5us 2us}
THINKS=${THINKS:-0s 5us 10us}
# The per-address atomic time, as bench-micro's model (see there).
ATOMIC=${ATOMIC:-270ns}
OUT=${OUT:-out/bench-model-sens}
CSV=$OUT/sens.csv
LABEL=sens-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
MODEL_FLAGS="-nodes 240 -iops-cap 32000000 -reader-poll rtt -keys zipf:0.99 -model-atomic $ATOMIC -artifact-omega"
. bench/scripts/model-run.sh

VARIANTS=(shiftlock shiftlock-pipelined shiftlock-nobump)
for r in $(seq 1 "$RUNS"); do
	for s in $SENDS; do
		for t in $THINKS; do
			for l in "${VARIANTS[@]}" cas-nb dslr mcs; do
				model -run "$r" -lock "$l" -workload WI -model-send "$s" -think "$t"
			done
			model -run "$r" -lock cas-b -workload WI -model-send "$s" -think "$t" -warmup "$CASB_WARMUP"
			for wl in RI RO; do
				for l in "${VARIANTS[@]}" mcs; do
					model -run "$r" -lock "$l" -workload "$wl" -model-send "$s" -think "$t"
				done
			done
		done
	done
done

# Table 3: ShiftLock's latency breakdown by client count (5 to 240, each
# client its own node), as the artifact runs it, at bench-micro's point.
for r in $(seq 1 "$RUNS"); do
	for wl in WI RI; do
		for c in 5 20 40 80 120 160 200 240; do
			model -run "$r" -lock shiftlock-artifact -workload "$wl" -clients "$c" -nodes "$c" -model-send 3us -think 0s
		done
	done
done

elapsed=$(($(date +%s) - start))
echo "bench-model-sens: $n runs ($failed failed) in $((elapsed / 60))m$((elapsed % 60))s"
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs (the model's time is a fake clock: client CPU costs no time)"
bin/lockbench sensitivity -csv "$CSV" -label "$LABEL" -doc docs/benchmarks/model-sens.md -intro docs/bench/model-sens.md -notes docs/bench/model-sens-notes.md \
	-command "make bench-model-sens" -machine "$machine" -date "$(date -u +%Y-%m-%d)"
echo "bench-model-sens: wrote docs/benchmarks/model-sens.md"
