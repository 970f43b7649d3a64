# Sourced by scripts that start servers on loopback (demo.sh,
# bench-bank.sh): start redis-servers and the project's daemons, remember
# their PIDs, and stop them all when the script exits. The caller sets LOGS
# (a directory for their output) before starting anything. Functions return
# non-zero on failure; callers decide whether that ends the script. Each
# start sets ADDR (where it listens) and PID (its process, e.g. for
# bank run -cpu).

PIDS=()
# Memory nodes and embedded proxies keep their state in a directory; these
# runs start from nothing and leave nothing behind.
STATE_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/shiftlock-state.XXXXXX")
stop_all() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$STATE_ROOT"
}
trap stop_all EXIT

# state_dir prints a new state directory for one daemon.
state_dir() { mktemp -d "$STATE_ROOT/$1.XXXXXX"; }

# free_port picks a port below the kernel's ephemeral range: a port in it
# may be some outgoing connection's local port at any moment (redlock-rs
# opens one per command), and bind would then fail.
free_port() {
	local p lo=32768
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	[ "$lo" -gt 12000 ] || lo=32768
	while :; do
		p=$((10000 + RANDOM % (lo - 10000)))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

wait_port() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	echo "nothing listens on port $1" >&2
	return 1
}

start_redis() { # sets ADDR and PID
	local port
	port=$(free_port)
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$LOGS/redis-$port.log" 2>&1 &
	PID=$!
	PIDS+=("$PID")
	wait_port "$port" || return 1
	ADDR=127.0.0.1:$port
}

start_listener() { # name, command...; sets ADDR from its "listening on ADDR" line, and PID
	local name=$1
	shift
	"$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" &
	PID=$!
	PIDS+=("$PID")
	for _ in $(seq 300); do
		# The output file may not exist yet (the child opens it), and a
		# failed sed must not end a script that runs with set -e.
		ADDR=$(sed -n 's/.* listening on \([^ ]*\)$/\1/p' "$LOGS/$name.out" 2>/dev/null | head -1 || true)
		[ -n "$ADDR" ] && return 0
		sleep 0.05
	done
	echo "$name did not start; see $LOGS/$name.err" >&2
	return 1
}
