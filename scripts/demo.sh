#!/usr/bin/env bash
# make demo: SmallBank on Redis, RedLock against shiftlock-proxy, side by
# side. Starts two redis-servers (the bank's data; RedLock's locks), a
# memory node and a proxy joined to it, all on loopback; loads the accounts;
# runs the same redsync code against redis-server and against the proxy at
# high contention; prints the table and where the figure is; stops what it
# started (also on Ctrl-C).
#
# Knobs: ACCOUNTS (1000000), SKEW (hotspot:0.01:90: 100 of the accounts get
# 90% of the draws), DURATION (30s), WARMUP (5s), CLIENTS (64), OUT (out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."

ACCOUNTS=${ACCOUNTS:-1000000}
SKEW=${SKEW:-hotspot:0.01:90}
DURATION=${DURATION:-30s}
WARMUP=${WARMUP:-5s}
CLIENTS=${CLIENTS:-64}
OUT=${OUT:-out/demo}
LOGS=$OUT/logs

command -v redis-server >/dev/null || { echo "redis-server not found: run make deps" >&2; exit 1; }
mkdir -p "$LOGS"
rm -f "$OUT"/*.json

. scripts/procs.sh

t0=$(date +%s)
echo "== building"
go build -o bin/ ./cmd/proxy ./cmd/memnode ./cmd/bank

echo "== starting redis-server (data), redis-server (RedLock's locks), memnode, proxy"
start_redis; DATA=$ADDR
start_redis; LOCKS=$ADDR
start_listener memnode bin/memnode -listen 127.0.0.1:0 -metrics ""; MEMNODE=$ADDR
start_listener proxy bin/proxy -listen 127.0.0.1:0 -memnode "$MEMNODE" -metrics "" -log-level warn; PROXY=$ADDR
echo "   data $DATA, locks $LOCKS, memnode $MEMNODE, proxy $PROXY"

echo "== loading $ACCOUNTS accounts"
bin/bank load -redis "$DATA" -accounts "$ACCOUNTS"

common=(-redis "$DATA" -skew "$SKEW" -clients "$CLIENTS" -warmup "$WARMUP" -duration "$DURATION" -run 1 -quiet)
echo "== redlock: redsync v4 (defaults) over redis-server, $WARMUP + $DURATION"
bin/bank run "${common[@]}" -locker redlock -lock-redis "$LOCKS" -out "$OUT/redlock.json"
echo "== proxy: the same redsync code pointed at shiftlock-proxy, $WARMUP + $DURATION"
bin/bank run "${common[@]}" -locker proxy -proxy "$PROXY" -out "$OUT/proxy.json"

echo
echo "== side by side"
bin/bank report -in "$OUT" -img "$OUT"
echo
echo "demo took $(($(date +%s) - t0))s; figure and results in $OUT/"
