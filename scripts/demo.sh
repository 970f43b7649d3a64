#!/usr/bin/env bash
# make demo: two stories about SmallBank on Redis, each with its audit, in
# about two minutes.
#
#  1. The paper's experiment (ShiftLock, FAST '25, Fig. 11), as its artifact
#     ran it: uniform keys, 240 clients, Balance without locks; RedLock
#     through a redlock-rs-style client (a TCP connection per command, a 10 ms
#     TTL, retried forever) with its keys in the data redis-server, against
#     the native ShiftLock client on a memory node.
#  2. The drop-in: the same redsync code against redis-server and against
#     shiftlock-proxy with its embedded memory node (what `make run` starts),
#     at a hotspot where 100 accounts get 90% of the draws.
#
# Starts what it needs on loopback (the bank's redis-server, a second one for
# story 2's RedLock, a memnode, the proxy), loads the accounts, runs the four
# series, prints the tables and the figures' paths, and stops everything
# (also on Ctrl-C).
#
# Knobs: ACCOUNTS (1000000), DURATION (15s), WARMUP (3s), PAPER_CLIENTS (240),
# CLIENTS (64), SKEW (hotspot:0.01:90), OUT (out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."

ACCOUNTS=${ACCOUNTS:-1000000}
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
PAPER_CLIENTS=${PAPER_CLIENTS:-240}
CLIENTS=${CLIENTS:-64}
SKEW=${SKEW:-hotspot:0.01:90}
OUT=${OUT:-out/demo}
LOGS=$OUT/logs

command -v redis-server >/dev/null || { echo "redis-server not found: run make deps" >&2; exit 1; }
mkdir -p "$LOGS"
rm -f "$OUT"/*.json "$OUT"/*.png

. scripts/procs.sh

t0=$(date +%s)
echo "== building"
go build -o bin/ ./cmd/proxy ./cmd/memnode ./cmd/bank
(cd bench && go build -o ../bin/ ./cmd/bankreport)

echo "== starting redis-server (data), redis-server (story 2's RedLock), memnode, proxy (embedded memory node)"
start_redis; DATA=$ADDR; DATA_PID=$PID
start_redis; LOCKS=$ADDR; LOCKS_PID=$PID
start_listener memnode bin/memnode -listen 127.0.0.1:0 -metrics "" -state-dir "$(state_dir memnode)"; MEMNODE=$ADDR; MEMNODE_PID=$PID
start_listener proxy bin/proxy -listen 127.0.0.1:0 -metrics "" -log-level warn -state-dir "$(state_dir proxy)"; PROXY=$ADDR; PROXY_PID=$PID
echo "   data $DATA, locks $LOCKS, memnode $MEMNODE, proxy $PROXY"

echo "== loading $ACCOUNTS accounts"
bin/bank load -redis "$DATA" -accounts "$ACCOUNTS"

run() { # title, bank run flags...
	local title=$1
	shift
	echo
	echo "== $title, $WARMUP + $DURATION"
	# The safety lines list every lock that ran out; the first few say enough.
	bin/bank run -redis "$DATA" -warmup "$WARMUP" -duration "$DURATION" -run 1 -quiet -cpu "data:redis=$DATA_PID" "$@" 2>&1 |
		grep -v '^csv:' | awk '/^(error|bank): / { if (++e > 3) next } { print }' || true
}

paper=(-setup paper -skew uniform -clients "$PAPER_CLIENTS" -balance-lock-free)
run "story 1, the paper's experiment: redlock-rs-style RedLock (keys in the data redis-server, 10 ms TTL)" \
	"${paper[@]}" -locker redlock-rs -lock-redis "$DATA" -out "$OUT/paper-redlock-rs.json"
run "story 1: the native ShiftLock client on the memory node" \
	"${paper[@]}" -locker native -memnode "$MEMNODE" -cpu "lock:memnode=$MEMNODE_PID" -out "$OUT/paper-native.json"
dropin=(-skew "$SKEW" -clients "$CLIENTS")
run "story 2, the drop-in: redsync v4 (defaults) over redis-server" \
	"${dropin[@]}" -locker redlock -lock-redis "$LOCKS" -cpu "lock:redis=$LOCKS_PID" -out "$OUT/dropin-redlock.json"
run "story 2: the same redsync code pointed at shiftlock-proxy (embedded memory node)" \
	"${dropin[@]}" -locker proxy -proxy "$PROXY" -as proxy-embedded -cpu "lock:proxy=$PROXY_PID" -out "$OUT/dropin-proxy.json"

echo
echo "== side by side"
bin/bankreport -in "$OUT" -img "$OUT" -prefix demo-
echo
echo "demo took $(($(date +%s) - t0))s on $(nproc) cores; results and figures in $OUT/"
