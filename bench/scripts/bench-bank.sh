#!/usr/bin/env bash
# make bench-bank: the SmallBank grid, written to docs/benchmarks/smallbank.md (the
# "smallbank" section) and docs/img/bank-*.png.
#
# Servers, all on loopback: the bank's redis-server; three redis-servers for
# RedLock's locks; a memory node with six proxies joined to it, three of
# them with quorum routing; one proxy with an embedded memory node. Series:
# redlock-1 and redlock-3 (redsync v4 over 1 and 3 redis-servers), proxy
# (the same redsync code against one proxy), proxy-3 (against the three
# routing proxies: RedLock quorum on one memory node), proxy-3-unrouted
# (against the three others), proxy-embedded (against the proxy with its
# own memory node), native
# (the ShiftLock client on the memory node) and none. Skews: uniform,
# Zipf 0.99 and a hotspot; then FissLock's mobile mix on Zipf 0.99.
#
# Every round runs each configuration once, in an order that changes from
# round to round (order: a Williams design, whose full cycle is n rounds for
# n series, 2n for odd n), so that the
# load other users put on the machine spreads over all series; the report
# takes medians over rounds and ratios within a round. Every run measures
# the CPU of the bank process, the data redis-server and the series' lock
# servers over its window (bank run -cpu).
#
# Then two smaller grids (bank run -setup):
#   - paper: the ShiftLock paper's Fig. 11 as its artifact ran it: uniform
#     keys, PAPER_CLIENTS (240) clients, Balance without locks (a WATCH
#     read), RedLock through a redlock-rs-style client (a TCP connection per
#     command, 10 ms TTL, retried forever) with its keys in the data
#     redis-server. Series: redlock-rs, redlock-1 (redsync, keys in the data
#     redis-server), proxy, native, none.
#   - safety: the hotspot with a 10 ms lock TTL, where locks run out while
#     held: redlock-rs, the proxy through LOCK.ACQUIRE with fencing tokens
#     checked by the data redis-server (proxy-fenced), and native with the
#     same checks (native-fenced). redlock-rs's audit is expected to fail.
#
# Knobs: RUNS (3), ACCOUNTS (1000000), DURATION (10s), WARMUP (3s),
# CLIENTS (64), SKEWS, HOTSPOT, SERIES, MOBILE_SERIES, PAPER_CLIENTS (240),
# PAPER_SERIES, PAPER_LOOKUP (0; 1 adds the artifact's ZRANK lookup),
# SAFETY_SERIES, SAFETY_TTL (10ms), OUT (out/bench-bank),
# DOC (docs/benchmarks/smallbank.md), IMG (docs/img).
#
# A/B: BASE_PROXY=<a proxy binary> starts one more embedded proxy from it,
# the series base-embedded (add it to SERIES), so that a build is compared
# with another in the same rounds. A binary older than -state-dir can be
# wrapped in a script that drops that flag.
set -uo pipefail
cd "$(dirname "$0")/../.." # the repository root: bin/, docs/ and out/ live there

RUNS=${RUNS:-3}
ACCOUNTS=${ACCOUNTS:-1000000}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-3s}
CLIENTS=${CLIENTS:-64}
HOTSPOT=${HOTSPOT:-hotspot:0.01:90}
SKEWS=${SKEWS:-uniform zipf:0.99 $HOTSPOT}
SERIES=${SERIES:-redlock-1 redlock-3 proxy proxy-3 proxy-3-unrouted proxy-embedded native none null null-3}
MOBILE_SERIES=${MOBILE_SERIES:-redlock-1 proxy proxy-embedded native}
PAPER_CLIENTS=${PAPER_CLIENTS:-240}
PAPER_SERIES=${PAPER_SERIES:-redlock-rs redlock-1 proxy native none}
PAPER_LOOKUP=${PAPER_LOOKUP:-0}
SAFETY_SERIES=${SAFETY_SERIES:-redlock-rs proxy-fenced native-fenced}
SAFETY_TTL=${SAFETY_TTL:-10ms}
OUT=${OUT:-out/bench-bank}
DOC=${DOC:-docs/benchmarks/smallbank.md}
IMG=${IMG:-docs/img}
LOGS=$OUT/logs

command -v redis-server >/dev/null || { echo "redis-server not found: run make deps" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$LOGS" "$IMG"

. scripts/procs.sh

t0=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
go build -o bin/ ./cmd/proxy ./cmd/memnode ./cmd/bank || exit 1
(cd bench && go build -o ../bin/ ./cmd/proxybench ./cmd/bankreport) || exit 1

start_redis || exit 1; DATA=$ADDR; DATA_PID=$PID
LOCKS=(); LOCK_PIDS=()
for _ in 1 2 3; do start_redis || exit 1; LOCKS+=("$ADDR"); LOCK_PIDS+=("$PID"); done
start_listener memnode bin/memnode -listen 127.0.0.1:0 -metrics "" -state-dir "$(state_dir memnode)" || exit 1; MEMNODE=$ADDR; MEMNODE_PID=$PID
PROXIES=(); PROXY_PIDS=()
for i in 1 2 3; do
	start_listener "proxy$i" bin/proxy -listen 127.0.0.1:0 -memnode "$MEMNODE" -metrics "" -log-level warn -redlock-quorum || exit 1
	PROXIES+=("$ADDR"); PROXY_PIDS+=("$PID")
done
# RedLock over three proxies, as we advise running it: with quorum routing,
# on the same memory node (proxy-3); the three above, which do not route,
# run the same client as proxy-3-unrouted.
ROUTED=(); ROUTED_PIDS=()
for i in 1 2 3; do
	start_listener "routed$i" bin/proxy -listen 127.0.0.1:0 -memnode "$MEMNODE" -metrics "" -log-level warn -quorum-routing || exit 1
	ROUTED+=("$ADDR"); ROUTED_PIDS+=("$PID")
done
start_listener proxy-embedded bin/proxy -listen 127.0.0.1:0 -metrics "" -log-level warn -state-dir "$(state_dir proxy)" || exit 1; EMBEDDED=$ADDR; EMBEDDED_PID=$PID
BASE=; BASE_PID=
if [ -n "${BASE_PROXY:-}" ]; then
	start_listener base-embedded "$BASE_PROXY" -listen 127.0.0.1:0 -metrics "" -log-level warn -state-dir "$(state_dir base)" || exit 1; BASE=$ADDR; BASE_PID=$PID
fi
# Null lock servers (null, null-3): the proxy's RESP front end (gnet, one
# event loop, redcon's parser) answering SET with +OK and the release script
# with 1, locking nothing. What redsync reaches against them is the most any
# RESP lock server could give it on this machine, measured in the same round.
NULLS=(); NULL_PIDS=()
for i in 1 2 3; do
	start_listener "null$i" bin/proxybench -serve-null 127.0.0.1:0 -null-kind gnet || exit 1
	NULLS+=("$ADDR"); NULL_PIDS+=("$PID")
done
echo "bench-bank: data $DATA, lock redis ${LOCKS[*]}, memnode $MEMNODE, proxies ${PROXIES[*]}, routed proxies ${ROUTED[*]}, embedded $EMBEDDED, null servers ${NULLS[*]}"

load_t0=$(date +%s)
bin/bank load -redis "$DATA" -accounts "$ACCOUNTS" -quiet || exit 1
load_s=$(($(date +%s) - load_t0))

series_args() { # setup series -> bank run flags
	case $1 in
	paper)
		echo "-setup paper -clients $PAPER_CLIENTS -balance-lock-free"
		[ "$PAPER_LOOKUP" = 1 ] && echo "-lookup"
		[ "$2" = redlock-1 ] && echo "-lock-redis $DATA" # the artifact's RedLock keeps its keys with the data
		;;
	safety) echo "-setup safety -clients $CLIENTS -lock-ttl $SAFETY_TTL" ;;
	*) echo "-clients $CLIENTS" ;;
	esac
	case $2 in
	redlock-rs) echo "-locker redlock-rs -lock-redis $DATA" ;; # as the artifact: locks with the data
	redlock-1) [ "$1" = paper ] && echo "-locker redlock" || echo "-locker redlock -lock-redis ${LOCKS[0]}" ;;
	redlock-3) echo "-locker redlock -lock-redis ${LOCKS[0]},${LOCKS[1]},${LOCKS[2]}" ;;
	proxy) echo "-locker proxy -proxy ${PROXIES[0]}" ;;
	proxy-3) echo "-locker proxy -proxy ${ROUTED[0]},${ROUTED[1]},${ROUTED[2]} -as proxy-3" ;;
	proxy-3-unrouted) echo "-locker proxy -proxy ${PROXIES[0]},${PROXIES[1]},${PROXIES[2]} -as proxy-3-unrouted" ;;
	proxy-embedded) echo "-locker proxy -proxy $EMBEDDED -as proxy-embedded" ;;
	base-embedded) echo "-locker proxy -proxy ${BASE:?BASE_PROXY is not set} -as base-embedded" ;;
	proxy-fenced) echo "-locker proxy -proxy ${PROXIES[0]} -fence" ;;
	native) echo "-locker native -memnode $MEMNODE" ;;
	native-fenced) echo "-locker native -memnode $MEMNODE -fence -as native-fenced" ;;
	none) echo "-locker none" ;;
	null) echo "-locker proxy -proxy ${NULLS[0]} -as null" ;;
	null-3) echo "-locker proxy -proxy ${NULLS[0]},${NULLS[1]},${NULLS[2]} -as null-3" ;;
	*) echo "unknown series $2" >&2; exit 1 ;;
	esac
}

series_cpu() { # setup series -> bank run -cpu flags: the data redis-server and the series' lock servers
	echo "-cpu data:redis=$DATA_PID"
	case $2 in
	redlock-rs) ;; # its locks live in the data redis-server
	redlock-1) [ "$1" = paper ] || echo "-cpu lock:redis=${LOCK_PIDS[0]}" ;;
	redlock-3) echo "-cpu lock:redis1=${LOCK_PIDS[0]} -cpu lock:redis2=${LOCK_PIDS[1]} -cpu lock:redis3=${LOCK_PIDS[2]}" ;;
	proxy | proxy-fenced) echo "-cpu lock:proxy=${PROXY_PIDS[0]} -cpu lock:memnode=$MEMNODE_PID" ;;
	proxy-3) echo "-cpu lock:proxy1=${ROUTED_PIDS[0]} -cpu lock:proxy2=${ROUTED_PIDS[1]} -cpu lock:proxy3=${ROUTED_PIDS[2]} -cpu lock:memnode=$MEMNODE_PID" ;;
	proxy-3-unrouted) echo "-cpu lock:proxy1=${PROXY_PIDS[0]} -cpu lock:proxy2=${PROXY_PIDS[1]} -cpu lock:proxy3=${PROXY_PIDS[2]} -cpu lock:memnode=$MEMNODE_PID" ;;
	proxy-embedded) echo "-cpu lock:proxy=$EMBEDDED_PID" ;;
	base-embedded) echo "-cpu lock:proxy=$BASE_PID" ;;
	native | native-fenced) echo "-cpu lock:memnode=$MEMNODE_PID" ;;
	null) echo "-cpu lock:null=${NULL_PIDS[0]}" ;;
	null-3) echo "-cpu lock:null1=${NULL_PIDS[0]} -cpu lock:null2=${NULL_PIDS[1]} -cpu lock:null3=${NULL_PIDS[2]}" ;;
	esac
}

unlocked() { # series -> whether its audit is meant to fail: no lock, or locks that run out
	case $1 in none | redlock-rs | null | null-3) return 0 ;; esac
	return 1
}

failed=0
n=0
one() { # setup mix skew series run
	local setup=$1 mix=$2 skew=$3 s=$4 r=$5 file
	file=$OUT/${setup:+$setup-}$mix-${skew//:/-}-$s-$r.json
	n=$((n + 1))
	# shellcheck disable=SC2046
	if bin/bank run -redis "$DATA" -mix "$mix" -skew "$skew" -warmup "$WARMUP" -duration "$DURATION" \
		-run "$r" -quiet -out "$file" -csv "$OUT/runs.csv" $(series_args "$setup" "$s") $(series_cpu "$setup" "$s") >"$LOGS/last.out" 2>&1; then
		:
	elif [ ! -s "$file" ] || ! unlocked "$s"; then
		failed=$((failed + 1))
		echo "bench-bank: FAILED: $mix $skew $s run $r" >&2
		cat "$LOGS/last.out" >&2
	fi
	sed -n 's/^goodput/  &/p' "$LOGS/last.out" | head -1 | sed "s|^|$(printf '%-6s %-9s %-16s %-14s run %d:' "$setup" "$mix" "$skew" "$s" "$r")|"
}

# order k items... -> the items in row k of a Williams design: over a
# cycle of rows (n for n items, 2n for odd n) every series runs in every
# place, and right after every other series, equally often. A run pays for
# the one before it (a lock-free series leaves the data redis-server and
# the bank process busiest), which plain rotation would pin on one series
# (docs/notes/2026-11-28-limits.md, section 13).
order() {
	local k=$1
	shift
	local a=("$@")
	local n=${#a[@]}
	((n == 0)) && return
	local rows=$n
	((n % 2 == 1 && n > 1)) && rows=$((2 * n))
	k=$((k % rows))
	local first=(0) lo=1 hi=$((n - 1)) i
	for ((i = 1; i < n; i++)); do
		if ((i % 2 == 1)); then
			first+=("$lo"); lo=$((lo + 1))
		else
			first+=("$hi"); hi=$((hi - 1))
		fi
	done
	local shift_by=$((k % n)) row=()
	for ((i = 0; i < n; i++)); do row+=($(((first[i] + shift_by) % n))); done
	if ((k >= n)); then # the reversed rows of an odd design
		for ((i = n - 1; i >= 0; i--)); do echo "${a[${row[i]}]}"; done
	else
		for ((i = 0; i < n; i++)); do echo "${a[${row[i]}]}"; done
	fi
}

read -r -a series <<<"$SERIES"
read -r -a mseries <<<"$MOBILE_SERIES"
read -r -a pseries <<<"$PAPER_SERIES"
read -r -a sseries <<<"$SAFETY_SERIES"
for r in $(seq "$RUNS"); do
	for skew in $SKEWS; do
		for s in $(order $((r - 1)) "${series[@]}"); do one "" smallbank "$skew" "$s" "$r"; done
	done
	for s in $(order $((r - 1)) "${mseries[@]}"); do one "" mobile zipf:0.99 "$s" "$r"; done
	for s in $(order $((r - 1)) "${pseries[@]}"); do one paper smallbank uniform "$s" "$r"; done
	for s in $(order $((r - 1)) "${sseries[@]}"); do one safety smallbank "$HOTSPOT" "$s" "$r"; done
done

elapsed=$(($(date +%s) - t0))
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p')
cat >"$OUT/header.md" <<HDR
Generated by \`make bench-bank\` (bench/scripts/bench-bank.sh) on $(date -u +%Y-%m-%d), ${cpu:-unknown CPU}, $(nproc) cores, shared
with other jobs (load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end). $(redis-server --version | sed 's/ sha=.*//').
The whole grid took **$((elapsed / 60)) min $((elapsed % 60)) s** ($n runs; loading the accounts took ${load_s}s).

Setup, all processes on loopback: the bank's data in one \`redis-server\` ($ACCOUNTS accounts, \`savings:<id>\` and
\`checking:<id>\` in cents); RedLock's locks in three more \`redis-server\`s (redlock-1 uses the first); one \`memnode\` with six
\`proxy\` processes joined to it: three plain ones (proxy uses the first, proxy-3-unrouted all three) and three with
\`quorum_routing\` (proxy-3: RedLock quorum on one memory node, as docs/compatibility.md advises running it); one \`proxy\`
with its embedded memory node (proxy-embedded, the \`make run\` setup). Every series but native and none is the *same*
redsync v4.18.1 code with its defaults, only pointed elsewhere. null and null-3 point it at one and at three *null lock
servers*: the proxy's RESP front end (gnet, one event loop, redcon's parser) answering \`SET\` with +OK and the release
script with 1, locking nothing (\`proxybench -serve-null\`). Their audits may fail, as none's do; their goodput and CPU are the
most a lock server on the proxy's front end could give this client on this machine, in the same round. $CLIENTS clients, $WARMUP warm-up, $DURATION measured,
$RUNS rounds; each round runs every series once, in an order that changes from round to round so that, over a full cycle of rounds, each series runs in each place and right after each other series equally often (a Williams design). Figures are medians over
rounds; ratios are taken within a round (same machine state) and their median is shown with the per-round values.
Transactions whose locks could not be had are retried (up to 4 attempts, latency from the first); "dropped" counts those
that gave up. Hotspot: \`$HOTSPOT\` (0.01% of the accounts, i.e. 100, get 90% of the draws). Hot accounts are scattered
over the account numbers (bank.Generator), so the ascending lock order takes a transaction's hot lock first or second
with even odds.

**The paper setup** (\`-setup paper\`) is the ShiftLock paper's Fig. 11 as its artifact (thustorage/shiftlock,
\`src/bin/client_redis.rs\`) ran it: uniform keys, $PAPER_CLIENTS clients, Balance without locks (a read inside WATCH and UNWATCH),
RedLock through a client that behaves as the Rust crate redlock 2.0 (redlock-rs) does: a new TCP connection for every SET NX
PX and every unlock, a TTL of 10 ms, 3 tries with a random 0-200 ms sleep after each failed one, and the caller
retrying forever; its lock keys are in the bank's data redis-server, as are redlock-1's in this setup (redsync v4, default
8 s TTL). The ZRANK account lookup is $([ "$PAPER_LOOKUP" = 1 ] && echo on || echo off). **The safety setup**
(\`-setup safety\`) runs the hotspot with a $SAFETY_TTL lock TTL, so that locks run out while their transactions work:
redlock-rs, the proxy through \`LOCK.ACQUIRE ... PX\` with every read and write checked against its fencing
tokens by the data redis-server (proxy-fenced), and the native client with the same checks (native-fenced; its locks
have no TTL). redlock-rs's audit is expected to fail in both setups: its locks run out.

CPU per committed transaction is user + system time over the measured window (\`/proc/PID/stat\` for the servers,
\`getrusage\` for the bank process), divided by the transactions committed in it (\`bank run -cpu\`). The lock side sums
the series' lock server processes: the redis-server(s) for redlock, the proxy or proxies and the \`memnode\` for proxy and
proxy-3, the one process for proxy-embedded, the \`memnode\` for native (whose lock client runs in the bank process). On
a shared machine this figure holds up under other users' load where goodput does not; "machine busy" is how many of
the $(nproc) cores all processes on the machine, other users' included, kept busy meanwhile.
HDR
bin/bankreport -in "$OUT" -img "$IMG" -doc "$DOC" -header "$OUT/header.md" -notes bench/cmd/bankreport/bench-notes.md -targets || exit 1
echo "bench-bank: $n runs in $((elapsed / 60))m$((elapsed % 60))s; $failed failed audits; see $DOC (## SmallBank) and $IMG/bank-*.png"
[ "$failed" -eq 0 ]
