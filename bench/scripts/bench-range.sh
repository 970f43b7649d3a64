#!/usr/bin/env bash
# CITRON's microbenchmarks (FAST '23 §4.2, Fig. 6 and 7) on the model
# fabric (bench/rdma/latfab on testing/synctest's fake clock: 2 µs verbs, a
# memory node of 32M verbs/s, as make bench-micro's model): CITRON
# (package rangelock, no fencing tokens, as the paper) against static
# segmentation over DSLR (CITRON Table 1's SS) with segments of exactly
# the range size, 8x over it and 8x under it; range sizes 1, 16 and 256 and
# the three mixed; left borders Zipf 0.9 over [0, N-L], exclusive, as the
# paper; then two variations the paper does not run: uniform borders (less
# overlap) and half the requests shared. 96 clients (CITRON §4.4), a tree
# of depth 8 (N = 4,194,304 units), 3 rounds, each on a memory node with the model's verb budget and on one without, about 5 minutes.
#
# Then the same workloads the way a user takes range locks (bench/cmd/rangebench):
# LOCK.RANGE.* over RESP through real proxy processes, on a memnode process
# (one proxy, and two) and on the embedded memory node, RUNS rounds of
# PROXY_DURATION each, about 3 minutes more.
#
# Writes out/bench-range/range.csv (appended) and docs/img/range-*.png, and the "range" and
# "range-proxy" sections of docs/benchmarks/range.md (intro: docs/bench/range.md). Knobs: RUNS, DURATION,
# WARMUP, CLIENTS, WAIT (CITRON's T_wait; see the intro for why not 15 µs),
# PROXY_CLIENTS, PROXY_DURATION.
set -uo pipefail
cd "$(dirname "$0")/../.." # the repository root: bin/, docs/ and out/ live there

RUNS=${RUNS:-3}
DURATION=${DURATION:-10ms}
WARMUP=${WARMUP:-2ms}
CLIENTS=${CLIENTS:-96}
WAIT=${WAIT:-50us}
OUT=${OUT:-out/bench-range}
CSV=$OUT/range.csv
LABEL=range-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
MODEL_FLAGS="-clients $CLIENTS -nodes 3 -entries 4194304 -range-depth 8"
. bench/scripts/model-run.sh

# Two memory nodes: the model's 32M verbs/s (ShiftLock's testbed), where
# CITRON's T_wait must be WAIT; and one without a verb budget, with the
# paper's T_wait of 15 µs, as on CITRON's testbed where the RNIC was not
# the bottleneck at these loads.
SETUPS=("-iops-cap 32000000 -range-wait $WAIT" "-iops-cap 0 -range-wait 15us")
for r in $(seq 1 "$RUNS"); do
	for SETUP in "${SETUPS[@]}"; do
		for L in 1 16 256; do
			model $SETUP -run "$r" -lock citron -range-sizes "$L" -readers 0 -keys zipf:0.9
			# CITRON without its fast path (§3.8, Fig. 9), where it applies
			[ "$L" -ge 64 ] && model $SETUP -run "$r" -lock citron -range-fastpath=false -range-sizes "$L" -readers 0 -keys zipf:0.9
			segs=("$L" $((L * 8)))
			[ "$L" -ge 8 ] && segs+=($((L / 8))) # no segment is an eighth of one unit
			for seg in "${segs[@]}"; do
				model $SETUP -run "$r" -lock ss -ss-segment "$seg" -range-sizes "$L" -readers 0 -keys zipf:0.9
			done
		done
		model $SETUP -run "$r" -lock citron -range-sizes 1,16,256 -readers 0 -keys zipf:0.9
		for seg in 1 16 256; do
			model $SETUP -run "$r" -lock ss -ss-segment "$seg" -range-sizes 1,16,256 -readers 0 -keys zipf:0.9
		done
		for v in "-readers 0 -keys uniform" "-readers 0.5 -keys zipf:0.9"; do
			model $SETUP -run "$r" -lock citron -range-sizes 16 $v
			model $SETUP -run "$r" -lock ss -ss-segment 16 -range-sizes 16 $v
		done
	done
done

table range citron

# The range-lock path a user takes, through the proxy.
go build -o bin/ ./cmd/proxy ./cmd/memnode || exit 1
(cd bench && go build -o ../bin/ ./cmd/rangebench) || exit 1
bin/rangebench -proxy-bin bin/proxy -memnode-bin bin/memnode -runs "$RUNS" -clients "${PROXY_CLIENTS:-32}" \
	-duration "${PROXY_DURATION:-4s}" -doc docs/benchmarks/range.md || exit 1
echo "bench-range: wrote docs/benchmarks/range.md (section range-proxy)"
