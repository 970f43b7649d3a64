#!/usr/bin/env bash
# make bench-bank: the SmallBank grid, written to docs/benchmarks.md (the
# "smallbank" section) and docs/img/bank-*.png.
#
# Servers, all on loopback: the bank's redis-server; three redis-servers for
# RedLock's locks; a memory node with three proxies joined to it; one proxy
# with an embedded memory node. Series: redlock-1 and redlock-3 (redsync v4
# over 1 and 3 redis-servers), proxy (the same redsync code against one
# proxy), proxy-3 (against the three proxies: RedLock quorum on one memory
# node), proxy-embedded (against the proxy with its own memory node), native
# (the ShiftLock client on the memory node) and none. Skews: uniform,
# Zipf 0.99 and a hotspot; then FissLock's mobile mix on Zipf 0.99.
#
# Every round runs each configuration once, in a rotated order, so that the
# load other users put on the machine spreads over all series; the report
# takes medians over rounds and ratios within a round. Every run measures
# the CPU of the bank process, the data redis-server and the series' lock
# servers over its window (bank run -cpu).
#
# Knobs: RUNS (3), ACCOUNTS (1000000), DURATION (10s), WARMUP (3s),
# CLIENTS (64), SKEWS, HOTSPOT, SERIES, MOBILE_SERIES, OUT (out/bench-bank),
# DOC (docs/benchmarks.md), IMG (docs/img).
set -uo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
ACCOUNTS=${ACCOUNTS:-1000000}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-3s}
CLIENTS=${CLIENTS:-64}
HOTSPOT=${HOTSPOT:-hotspot:0.01:90}
SKEWS=${SKEWS:-uniform zipf:0.99 $HOTSPOT}
SERIES=${SERIES:-redlock-1 redlock-3 proxy proxy-3 proxy-embedded native none}
MOBILE_SERIES=${MOBILE_SERIES:-redlock-1 proxy proxy-embedded native}
OUT=${OUT:-out/bench-bank}
DOC=${DOC:-docs/benchmarks.md}
IMG=${IMG:-docs/img}
LOGS=$OUT/logs

command -v redis-server >/dev/null || { echo "redis-server not found: run make deps" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$LOGS" "$IMG"

. scripts/procs.sh

t0=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
go build -o bin/ ./cmd/proxy ./cmd/memnode ./cmd/bank || exit 1

start_redis || exit 1; DATA=$ADDR; DATA_PID=$PID
LOCKS=(); LOCK_PIDS=()
for _ in 1 2 3; do start_redis || exit 1; LOCKS+=("$ADDR"); LOCK_PIDS+=("$PID"); done
start_listener memnode bin/memnode -listen 127.0.0.1:0 -metrics "" || exit 1; MEMNODE=$ADDR; MEMNODE_PID=$PID
PROXIES=(); PROXY_PIDS=()
for i in 1 2 3; do
	start_listener "proxy$i" bin/proxy -listen 127.0.0.1:0 -memnode "$MEMNODE" -metrics "" -log-level warn || exit 1
	PROXIES+=("$ADDR"); PROXY_PIDS+=("$PID")
done
start_listener proxy-embedded bin/proxy -listen 127.0.0.1:0 -metrics "" -log-level warn || exit 1; EMBEDDED=$ADDR; EMBEDDED_PID=$PID
echo "bench-bank: data $DATA, lock redis ${LOCKS[*]}, memnode $MEMNODE, proxies ${PROXIES[*]}, embedded $EMBEDDED"

load_t0=$(date +%s)
bin/bank load -redis "$DATA" -accounts "$ACCOUNTS" -quiet || exit 1
load_s=$(($(date +%s) - load_t0))

series_args() { # series -> bank run flags
	case $1 in
	redlock-1) echo "-locker redlock -lock-redis ${LOCKS[0]}" ;;
	redlock-3) echo "-locker redlock -lock-redis ${LOCKS[0]},${LOCKS[1]},${LOCKS[2]}" ;;
	proxy) echo "-locker proxy -proxy ${PROXIES[0]}" ;;
	proxy-3) echo "-locker proxy -proxy ${PROXIES[0]},${PROXIES[1]},${PROXIES[2]}" ;;
	proxy-embedded) echo "-locker proxy -proxy $EMBEDDED -as proxy-embedded" ;;
	native) echo "-locker native -memnode $MEMNODE" ;;
	none) echo "-locker none" ;;
	*) echo "unknown series $1" >&2; exit 1 ;;
	esac
}

series_cpu() { # series -> bank run -cpu flags: the data redis-server and the series' lock servers
	echo "-cpu data:redis=$DATA_PID"
	case $1 in
	redlock-1) echo "-cpu lock:redis=${LOCK_PIDS[0]}" ;;
	redlock-3) echo "-cpu lock:redis1=${LOCK_PIDS[0]} -cpu lock:redis2=${LOCK_PIDS[1]} -cpu lock:redis3=${LOCK_PIDS[2]}" ;;
	proxy) echo "-cpu lock:proxy=${PROXY_PIDS[0]} -cpu lock:memnode=$MEMNODE_PID" ;;
	proxy-3) echo "-cpu lock:proxy1=${PROXY_PIDS[0]} -cpu lock:proxy2=${PROXY_PIDS[1]} -cpu lock:proxy3=${PROXY_PIDS[2]} -cpu lock:memnode=$MEMNODE_PID" ;;
	proxy-embedded) echo "-cpu lock:proxy=$EMBEDDED_PID" ;;
	native) echo "-cpu lock:memnode=$MEMNODE_PID" ;;
	esac
}

failed=0
n=0
one() { # mix skew series run
	local mix=$1 skew=$2 s=$3 r=$4 file
	file=$OUT/$mix-${skew//:/-}-$s-$r.json
	n=$((n + 1))
	# shellcheck disable=SC2046
	if bin/bank run -redis "$DATA" -mix "$mix" -skew "$skew" -clients "$CLIENTS" -warmup "$WARMUP" -duration "$DURATION" \
		-run "$r" -quiet -out "$file" -csv "$OUT/runs.csv" $(series_args "$s") $(series_cpu "$s") >"$LOGS/last.out" 2>&1; then
		:
	elif [ "$s" != none ]; then
		failed=$((failed + 1))
		echo "bench-bank: FAILED: $mix $skew $s run $r" >&2
		cat "$LOGS/last.out" >&2
	fi
	sed -n 's/^goodput/  &/p' "$LOGS/last.out" | head -1 | sed "s|^|$(printf '%-9s %-16s %-14s run %d:' "$mix" "$skew" "$s" "$r")|"
}

rotate() { # k items... -> items rotated left by k
	local k=$1
	shift
	local a=("$@")
	local len=${#a[@]}
	for ((i = 0; i < len; i++)); do echo "${a[$(((i + k) % len))]}"; done
}

read -r -a series <<<"$SERIES"
read -r -a mseries <<<"$MOBILE_SERIES"
for r in $(seq "$RUNS"); do
	for skew in $SKEWS; do
		for s in $(rotate $((r - 1)) "${series[@]}"); do one smallbank "$skew" "$s" "$r"; done
	done
	for s in $(rotate $((r - 1)) "${mseries[@]}"); do one mobile zipf:0.99 "$s" "$r"; done
done

elapsed=$(($(date +%s) - t0))
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p')
cat >"$OUT/header.md" <<HDR
Generated by \`make bench-bank\` (scripts/bench-bank.sh) on $(date -u +%Y-%m-%d), ${cpu:-unknown CPU}, $(nproc) cores, shared
with other jobs (load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end). $(redis-server --version | sed 's/ sha=.*//').
The whole grid took **$((elapsed / 60)) min $((elapsed % 60)) s** ($n runs; loading the accounts took ${load_s}s).

Setup, all processes on loopback: the bank's data in one \`redis-server\` ($ACCOUNTS accounts, \`savings:<id>\` and
\`checking:<id>\` in cents); RedLock's locks in three more \`redis-server\`s (redlock-1 uses the first); one \`memnode\` with three
\`proxy\` processes joined to it (proxy uses the first, proxy-3 all three: RedLock quorum on one memory node); one \`proxy\`
with its embedded memory node (proxy-embedded, the \`make run\` setup). Every series but native and none is the *same*
redsync v4.18.1 code with its defaults, only pointed elsewhere. $CLIENTS clients, $WARMUP warm-up, $DURATION measured,
$RUNS rounds; each round runs every series once, in an order rotated from round to round. Figures are medians over
rounds; ratios are taken within a round (same machine state) and their median is shown with the per-round values.
Transactions whose locks could not be had are retried (up to 4 attempts, latency from the first); "dropped" counts those
that gave up. Hotspot: \`$HOTSPOT\` (0.01% of the accounts, i.e. 100, get 90% of the draws). Hot accounts are scattered
over the account numbers (bank.Generator), so the ascending lock order takes a transaction's hot lock first or second
with even odds.

CPU per committed transaction is user + system time over the measured window (\`/proc/PID/stat\` for the servers,
\`getrusage\` for the bank process), divided by the transactions committed in it (\`bank run -cpu\`). The lock side sums
the series' lock server processes: the redis-server(s) for redlock, the proxy or proxies and the \`memnode\` for proxy and
proxy-3, the one process for proxy-embedded, the \`memnode\` for native (whose lock client runs in the bank process). On
a shared machine this figure holds up under other users' load where goodput does not; "machine busy" is how many of
the $(nproc) cores all processes on the machine, other users' included, kept busy meanwhile.
HDR
bin/bank report -in "$OUT" -img "$IMG" -doc "$DOC" -header "$OUT/header.md" -notes cmd/bank/bench-notes.md -targets || exit 1
echo "bench-bank: $n runs in $((elapsed / 60))m$((elapsed % 60))s; $failed failed audits; see $DOC (## SmallBank) and $IMG/bank-*.png"
[ "$failed" -eq 0 ]
