#!/usr/bin/env bash
# make demo-ha: the memory node fails over (docs/reliability.md, "Losing a
# memory node"). On loopback: a three-member etcd, two memory nodes
# campaigning for shard "default", and one proxy that follows whichever is
# active. A client takes a fenced lock (LOCK.ACQUIRE ... PX 2000) every
# 100 ms. The demo kills the active memory node with -9 and does not restart
# it: the standby takes over, and the client's next grant carries a larger
# fencing token. Then it kills an etcd member: nothing notices. About 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=${LOGS:-$(mktemp -d /tmp/demo-ha.XXXXXX)}
. scripts/procs.sh

command -v etcd >/dev/null || { echo "etcd is missing: make deps installs it (Debian's etcd-server)" >&2; exit 1; }
make -s build

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "1. A three-member etcd on loopback"
ETCD=() CLUSTER=""
declare -A PEER CLIENT
for i in 0 1 2; do CLIENT[$i]=$(free_port); PEER[$i]=$(free_port); done
for i in 0 1 2; do CLUSTER+="e$i=http://127.0.0.1:${PEER[$i]},"; done
for i in 0 1 2; do
	etcd --name "e$i" --data-dir "$LOGS/e$i" \
		--listen-client-urls "http://127.0.0.1:${CLIENT[$i]}" --advertise-client-urls "http://127.0.0.1:${CLIENT[$i]}" \
		--listen-peer-urls "http://127.0.0.1:${PEER[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${PEER[$i]}" \
		--initial-cluster "${CLUSTER%,}" --heartbeat-interval 50 --election-timeout 500 >"$LOGS/etcd$i.log" 2>&1 &
	ETCD+=("$!")
	PIDS+=("$!")
done
ENDPOINTS="127.0.0.1:${CLIENT[0]},127.0.0.1:${CLIENT[1]},127.0.0.1:${CLIENT[2]}"
for i in 0 1 2; do wait_port "${CLIENT[$i]}"; done
echo "etcd endpoints: $ENDPOINTS"

say "2. Two memory nodes campaign for shard \"default\": the first leads, the second stands by"
MEM=()
for i in 0 1; do
	port=$(free_port)
	bin/memnode -listen "127.0.0.1:$port" -metrics "" -etcd "$ENDPOINTS" -shard default \
		>"$LOGS/memnode$i.out" 2>"$LOGS/memnode$i.err" &
	MEM+=("$!")
	PIDS+=("$!")
	[ "$i" = 0 ] && { until grep -q "memnode listening" "$LOGS/memnode0.out"; do sleep 0.05; done; }
done
until grep -q "standby" "$LOGS/memnode1.out"; do sleep 0.05; done
cat "$LOGS/memnode0.out" "$LOGS/memnode1.out"

say "3. A proxy that follows the shard's active memory node through etcd"
start_listener proxy bin/proxy -listen 127.0.0.1:0 -metrics "" -peer-listen 127.0.0.1:0 -etcd "$ENDPOINTS" -shard default
PROXY=$ADDR
echo "proxy listening on $PROXY"
echo "record in etcd:"
etcdctl --endpoints "$ENDPOINTS" get /shiftlock/shards/default/record --print-value-only 2>/dev/null | head -c 300
echo

host=${PROXY%:*} port=${PROXY##*:}
acquire() { # prints the fencing token, or the error
	local tok
	tok=$(redis-cli -h "$host" -p "$port" LOCK.ACQUIRE demo:account c1 PX 2000 WAIT 100 2>&1)
	[[ "$tok" =~ ^[0-9]+$ ]] && redis-cli -h "$host" -p "$port" LOCK.RELEASE demo:account c1 >/dev/null
	echo "$tok"
}
say "4. A client takes a fenced lock on demo:account"
for _ in 1 2 3; do echo "granted, fencing token $(acquire)"; sleep 0.1; done

say "5. kill -9 the active memory node, and do not restart it"
{ kill -9 "${MEM[0]}"; wait "${MEM[0]}"; } 2>/dev/null || true
t0=$(date +%s.%N)
last=""
while :; do
	r=$(acquire)
	if [[ "$r" =~ ^[0-9]+$ ]]; then
		printf 'granted again %.2f s after the kill, fencing token %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$r"
		break
	fi
	r=$(echo "$r" | cut -c1-100)
	[ "$r" != "$last" ] && echo "meanwhile the client hears: $r"
	last=$r
	sleep 0.1
done
grep -h "memnode active" "$LOGS/memnode1.out"
echo "The successor waited out the longest lease the old node had confirmed (2 s TTL + dead_after/4),"
echo "plus dead_after, after etcd expired the old node's 1 s lease. Its table starts a recovery leap"
echo "(2^40) above the old high-water mark, so every token it hands out is larger."

say "6. kill -9 one etcd member: a majority remains, and locks go on"
{ kill -9 "${ETCD[0]}"; wait "${ETCD[0]}"; } 2>/dev/null || true
for _ in 1 2 3; do echo "granted, fencing token $(acquire)"; sleep 0.3; done
echo "record in etcd (read from the two members left):"
etcdctl --endpoints "127.0.0.1:${CLIENT[1]},127.0.0.1:${CLIENT[2]}" get /shiftlock/shards/default/record --print-value-only 2>/dev/null | head -c 300
echo
say "Logs are in $LOGS"
