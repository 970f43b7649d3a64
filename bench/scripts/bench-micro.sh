#!/usr/bin/env bash
# The microbenchmark grid of ShiftLock §4.2 (Fig. 4-6) and §4.8 (Fig. 13),
# scaled to this machine: every lock (ShiftLock, ShiftLock without the
# handover bump, CAS-NB, CAS-B, DSLR, MCS) on workloads WI, RI and RO with
# uniform and Zipf-0.99 keys, 240 clients on 5 client nodes, 10M locks;
# on memfab, and on a real memnode process (tcpfab) pinned to its own core
# with its verb rate capped (docs/benchmarks/micro.md says why), plus the capless
# tcpfab run of the skewed WI/RI workloads, Zipf WI at other caps, and the
# failure series on memfab. First in every configuration, the model: memfab
# with the paper's timing (2 µs verbs, 3 µs Sends, 270 ns per atomic on one
# address, 32M verbs/s at the memory node) on testing/synctest's fake clock (bench/rdma/latfab, lockbench TestModel),
# where the hottest Zipf key's serial service binds as on the paper's
# testbed; its targets are judged first.
# Rounds are interleaved (every configuration once per round) so that load
# from other users of the machine spreads over all locks; the summary takes
# medians over the rounds.
#
# Writes out/bench-micro/micro.csv (appended), docs/img/micro-*.png and the
# "micro" section of docs/benchmarks/micro.md. Knobs: RUNS, DURATION, WARMUP, CAP,
# SWEEP_CAPS, MAX_OTHER, MODEL_VERB, MODEL_SEND, MODEL_IOPS, MODEL_DURATION,
# MODEL_WARMUP, MODEL_WARMUP_CASB, MODEL_ATOMIC. About 30 minutes with the
# defaults.
set -uo pipefail
cd "$(dirname "$0")/../.." # the repository root: bin/, docs/ and out/ live there

RUNS=${RUNS:-3}
DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-1s}
CAP=${CAP:-100000}
MODEL_VERB=${MODEL_VERB:-2us}
MODEL_SEND=${MODEL_SEND:-3us}
MODEL_IOPS=${MODEL_IOPS:-32000000}
MODEL_DURATION=${MODEL_DURATION:-10ms}
MODEL_WARMUP=${MODEL_WARMUP:-2ms}
# CAS-B's SMART backoff adapts its limit once per millisecond per client;
# on Zipf keys it takes 100-150 ms of the model's clock to settle (before
# that its atomics per cycle, p99 and goodput drift), so those runs warm up
# longer. On uniform keys it stays at its initial value.
MODEL_WARMUP_CASB=${MODEL_WARMUP_CASB:-150ms}
# How long an atomic occupies its address at the model's memory node: an
# RNIC executes atomics on one address one after another (ShiftLock §4.6
# names this queue as why CAS-NB's and DSLR's atomics are slow). 270 ns is
# calibrated on the paper's one measurement of it, §2.3: CAS-NB with 240
# clients on one lock reaches 15.5 Kops/s there, and 15.35 Kops/s on the
# model with 270 ns (docs/benchmarks/micro.md, "Reading the model").
MODEL_ATOMIC=${MODEL_ATOMIC:-270ns}
SWEEP_CAPS=${SWEEP_CAPS:-50000 200000}
# A run during which other processes used more CPU than this is repeated
# (up to 3 attempts; the CSV records how many).
MAX_OTHER=${MAX_OTHER:-0.25}
OUT=${OUT:-out/bench-micro}
CSV=$OUT/micro.csv
LB=bin/lockbench
LABEL=micro-$(date -u +%Y%m%dT%H%M%SZ)
LOCKS=(shiftlock cas-nb cas-b dslr mcs)
FAIL_RATES=(0 0.00001 0.0001 0.001 0.01)

mkdir -p "$OUT" docs/img
for b in lockbench memnode; do
	[ -x bin/$b ] || { echo "bin/$b missing: run make bench-micro" >&2; exit 1; }
done
# The model fabric runs on testing/synctest's fake clock, which only a test
# can start: TestModel, built once into a binary.
(cd bench && go test -c -o ../bin/lockbench-model ./cmd/lockbench) || exit 1

# The memnode gets CPU 0 and one P; lockbench the other CPU, so the two
# never compete for a core (on a 1-CPU machine both share it).
if [ "$(nproc)" -ge 2 ]; then
	CLIENT=(taskset -c 1)
	PIN=(-memnode-cpus 0 -memnode-procs 1)
else
	CLIENT=()
	PIN=(-memnode-procs 1)
fi

start=$(date +%s)
echo "bench-micro: label $LABEL, $RUNS rounds, $WARMUP + $DURATION per run, memnode cap $CAP verbs/s"

# One calibration per fabric: the baselines' published waits are scaled by
# the fabric's round trip (lockbench rtt), the same for every run.
# DSLR's ω is the artifact's (-artifact-omega), as the paper's runs had it.
MEMFAB_P=$($LB rtt -fabric memfab -entries 1000 -artifact-omega)
TCP_P=$("${CLIENT[@]}" $LB rtt -fabric tcp -entries 1000 "${PIN[@]}" -artifact-omega)
echo "bench-micro: memfab $MEMFAB_P; tcpfab $TCP_P"

n=0
failed=0
# model runs one measurement on the model fabric (bench/cmd/lockbench TestModel):
# the paper's timing (MODEL_VERB round trip, MODEL_SEND per message,
# MODEL_IOPS at the memory node), every client its own node so that every
# handover crosses the fabric, and ShiftLock polling about once per round
# trip as the authors' artifact does. Durations are of the fake clock.
model() {
	local out row warm=$MODEL_WARMUP
	n=$((n + 1))
	[[ " $* " == *" -lock cas-b "* && " $* " == *" -keys zipf"* ]] && warm=$MODEL_WARMUP_CASB
	out=$(LOCKBENCH_MODEL="$* -nodes 240 -model-verb $MODEL_VERB -model-send $MODEL_SEND -model-atomic $MODEL_ATOMIC -iops-cap $MODEL_IOPS -reader-poll rtt -artifact-omega \
		-label $LABEL -csv $CSV -duration $MODEL_DURATION -warmup $warm -progress=false" \
		bin/lockbench-model -test.run '^TestModel$' 2>"$OUT/last.err")
	row=$(grep -m1 ' model ' <<<"$out")
	if [ -n "$row" ]; then
		printf '[%3d %5ss] %-11s %s\n' "$n" "$(($(date +%s) - start))" model "$(awk '{printf "%s %s %s %s/s", $1, $3, $4, $5}' <<<"$row")"
	else
		failed=$((failed + 1))
		echo "   run $n (model $*) failed: $(tail -1 "$OUT/last.err")" >&2
	fi
}

run() { # setup name, then the lockbench command
	local name=$1 out row
	shift
	n=$((n + 1))
	out=$("$@" -label "$LABEL" -csv "$CSV" -duration "$DURATION" -warmup "$WARMUP" -progress=false \
		-max-other-cpu "$MAX_OTHER" -attempts 3 2>"$OUT/last.err")
	row=$(sed -n 2p <<<"$out")
	if [ -n "$row" ]; then
		printf '[%3d %5ss] %-11s %s\n' "$n" "$(($(date +%s) - start))" "$name" "$(awk '{printf "%s %s %s %s/s", $1, $3, $4, $5}' <<<"$row")"
	else
		failed=$((failed + 1))
		echo "   run $n ($name $*) failed: $(tail -1 "$OUT/last.err")" >&2
	fi
}

for r in $(seq 1 "$RUNS"); do
	for keys in uniform zipf:0.99; do
		for wl in WI RI RO; do
			locks=("${LOCKS[@]}")
			[ "$keys" = uniform ] || locks=(shiftlock shiftlock-nobump cas-nb cas-b dslr mcs)
			for l in "${locks[@]}"; do
				model -run "$r" -lock "$l" -keys "$keys" -workload "$wl"
				run memfab $LB -run "$r" -lock "$l" -keys "$keys" -workload "$wl" -fabric memfab $MEMFAB_P
				run tcpfab-cap "${CLIENT[@]}" $LB -run "$r" -lock "$l" -keys "$keys" -workload "$wl" -fabric tcp "${PIN[@]}" -iops-cap "$CAP" $TCP_P
				if [ "$keys" != uniform ] && [ "$wl" != RO ]; then
					run tcpfab "${CLIENT[@]}" $LB -run "$r" -lock "$l" -keys "$keys" -workload "$wl" -fabric tcp "${PIN[@]}" $TCP_P
				fi
			done
			# ShiftLock with its RelCnt bump off the handover's path
			# (shiftlock.Config.PipelineBump), on the model only.
			model -run "$r" -lock shiftlock-pipelined -keys "$keys" -workload "$wl"
			# ... and both bump-free variants with writer runs of N = 64
			# instead of the paper's 16 (docs/benchmarks/micro.md, Reading the
			# model), on Zipf keys: on uniform ones every lock runs at the
			# budget, and the grid must stay under 30 minutes.
			if [ "$keys" != uniform ]; then
				model -run "$r" -lock shiftlock-pipelined -writer-run 64 -keys "$keys" -workload "$wl"
				model -run "$r" -lock shiftlock-nobump -writer-run 64 -keys "$keys" -workload "$wl"
			fi
		done
	done
	# The cap sweep: Zipf WI at other budgets, to show where the memory
	# node's budget binds and where the clients do.
	for c in $SWEEP_CAPS; do
		for l in shiftlock shiftlock-nobump cas-b dslr mcs; do
			run "tcpfab-cap$((c / 1000))k" "${CLIENT[@]}" $LB -run "$r" -lock "$l" -keys zipf:0.99 -workload WI -fabric tcp "${PIN[@]}" -iops-cap "$c" $TCP_P
		done
	done
	# Fig. 13: ShiftLock needs the memnode's paper recovery policy, which
	# only the in-process memnode offers (cmd/memnode has no flag for it).
	for l in shiftlock dslr; do
		for p in "${FAIL_RATES[@]}"; do
			run memfab-fail $LB -run "$r" -lock "$l" -keys zipf:0.99 -workload WI -fabric memfab -recovery -fail-rate "$p" $MEMFAB_P
		done
	done
done

elapsed=$(($(date +%s) - start))
echo "bench-micro: $n runs ($failed failed) in $((elapsed / 60))m$((elapsed % 60))s"
$LB plot -csv "$CSV" -label "$LABEL" -out docs/img -prefix micro-
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs (shared with other users; see the 'other processes' CPU per setup)"
$LB summary -csv "$CSV" -label "$LABEL" -doc docs/benchmarks/micro.md -img ../img -target-setup "model,tcpfab-cap$((CAP / 1000))k" \
	-machine "$machine" -date "$(date -u +%Y-%m-%d)" -elapsed "$((elapsed / 60))m$((elapsed % 60))s" -command "make bench-micro"
echo "bench-micro: wrote docs/benchmarks/micro.md and docs/img/micro-*.png"
