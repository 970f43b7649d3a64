#!/usr/bin/env bash
# Installs the Debian packages named as its arguments, for the scripts that
# work out what a machine is missing (install-deps.sh, rxe/deps.sh): with
# apt as root; otherwise it says what to install and fails. No arguments,
# nothing missing: nothing to do.
set -euo pipefail
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: $* (run as root, or: sudo apt-get install -y $*)" >&2
  exit 1
fi
echo "installing: $*"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
