# Sourced by the model-fabric benchmark scripts (bench-range.sh,
# bench-fisslock.sh, bench-model-sens.sh). model runs one lockbench
# measurement on the model fabric (bench/cmd/lockbench TestModel, built into
# bin/lockbench-model): the paper's timing (2 µs verbs, 3 µs Sends), the
# script's MODEL_FLAGS and the arguments, each overriding what comes before
# it; the row goes to $CSV under $LABEL, and a line of progress to stdout. The sourcing script sets CSV, LABEL, OUT, DURATION, WARMUP and
# MODEL_FLAGS; n and failed count runs and failures. table renders the
# grid into its section of docs/benchmarks/<section>.md at the end.

(cd bench && go build -o ../bin/lockbench ./cmd/lockbench) || exit 1
(cd bench && go test -c -o ../bin/lockbench-model ./cmd/lockbench) || exit 1

start=$(date +%s)
n=0
failed=0
model() {
	local out row
	n=$((n + 1))
	out=$(LOCKBENCH_MODEL="-model-verb 2us -model-send 3us -duration $DURATION -warmup $WARMUP $MODEL_FLAGS $* \
		-label $LABEL -csv $CSV -progress=false" \
		bin/lockbench-model -test.run '^TestModel$' 2>"$OUT/last.err")
	row=$(grep -m1 ' model ' <<<"$out")
	if [ -n "$row" ]; then
		# lock, keys, workload (one or two words), goodput
		printf '[%3d %5ss] %s\n' "$n" "$(($(date +%s) - start))" \
			"$(awk '{s = $1 " " $3; for (i = 4; i <= NF; i++) { s = s " " $i; if ($i ~ /^[0-9]+$/) break } print s "/s"}' <<<"$row")"
	else
		failed=$((failed + 1))
		echo "   run $n ($*) failed: $(tail -1 "$OUT/last.err")" >&2
	fi
}

table() { # section ref-lock: docs/benchmarks/<section>.md's section from the grid, ratios against ref-lock
	local elapsed machine
	elapsed=$(($(date +%s) - start))
	echo "bench-$1: $n runs ($failed failed) in $((elapsed / 60))m$((elapsed % 60))s"
	machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs (the model's time is a fake clock: client CPU costs no time)"
	bin/lockbench table -csv "$CSV" -label "$LABEL" -doc "docs/benchmarks/$1.md" -section "$1" -ref "$2" -intro "docs/bench/$1.md" -img docs/img -img-rel ../img \
		-command "make bench-$1" -machine "$machine" -date "$(date -u +%Y-%m-%d)"
	echo "bench-$1: wrote docs/benchmarks/$1.md (section $1)"
}
