#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: etcd (etcd-server,
# the coordination service memory nodes fail over through), redis-server and
# redis-cli (real servers and a real CLI client), and python3-redis (redis-py's
# Lock, driven as a subprocess). Runs apt only when something is missing and
# only as root; otherwise it says what to install.
set -euo pipefail

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client) # make demo-ha reads the shard's record with it
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
if ! /usr/bin/python3 -c 'import redis.lock' >/dev/null 2>&1; then
  need+=(python3-redis)
fi
if ! command -v node >/dev/null 2>&1; then
  need+=(nodejs npm)
fi

[ ${#need[@]} -eq 0 ] && exit 0
exec "$(dirname "$0")/apt-install.sh" "${need[@]}"
