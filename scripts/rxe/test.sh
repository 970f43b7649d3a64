#!/usr/bin/env bash
# `make test-verbs`: the verbs fabric against the Linux kernel's soft-RoCE
# (rdma_rxe) in a qemu guest. Installs the host's tools (deps.sh), builds
# the guest image once (image.sh, cached), builds the proxy, the memnode
# and the tests with -tags verbs on the host, and runs the tests in one boot
# of the guest (vm.sh), where everything talks over rxe0.
#
# RXE_TESTS overrides what runs: space-separated NAME=PACKAGE:PATTERN, e.g.
#   RXE_TESTS='verbs=rdma/verbs:Conformance' make test-verbs
# and RXE_ARGS adds flags to every test binary, e.g.
#   RXE_TESTS='verbs=rdma/verbs:^$' RXE_ARGS='-test.bench=Verbs' make test-verbs
# RXE_SLOWDOWN (10) stretches the tests' deadlines on work in the guest
# (SHIFTLOCK_TEST_SLOWDOWN, see internal/testproc.Slow): under TCG on a
# loaded host the same work takes ten or more times as long as natively,
# and a deadline sized for a native fabric cut off the conformance suite's
# atomics at a host load of 14 (20 s for what took 0.6-9 s when quieter).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/rxe
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
t0=$(now)

"$here/deps.sh"
t=$(now)
img=$("$here/image.sh")
[ -e "$img/ready" ] || { echo "test-verbs: image.sh named no image ($img)" >&2; exit 1; }
echo "test-verbs: image $img ($(took "$t"))"

tests=${RXE_TESTS:-"verbs=rdma/verbs:Verbs shiftlock=shiftlock:Verbs baseline=bench/shiftlock/baseline:Verbs itest=itest:Verbs"}
job=$(mktemp -d "${TMPDIR:-/tmp}/shiftlock-rxe.XXXXXX")
trap 'rm -rf "$job"' EXIT
t=$(now)
cd "$root"
go build -tags verbs -o "$job/bin/" ./cmd/proxy ./cmd/memnode
mkdir -p "$job/t"
for spec in $tests; do
  name=${spec%%=*} rest=${spec#*=}
  pkg=${rest%%:*}
  # Packages of the evaluation module (bench/, its own go.mod) build there.
  case $pkg in
    bench/*) (cd bench && go test -c -tags verbs -o "$job/t/$name.test" "./${pkg#bench/}") ;;
    *) go test -c -tags verbs -o "$job/t/$name.test" "./$pkg" ;;
  esac
done
echo "test-verbs: host build ($(took "$t"))"

{
  echo "export SHIFTLOCK_VERBS_DEVICE=rxe0 SHIFTLOCK_TEST_BIN=/job/bin SHIFTLOCK_TEST_SLOWDOWN=${RXE_SLOWDOWN:-10} GOTRACEBACK=all"
  echo 'fail=0'
  echo 'echo "guest: $(uname -r), $(nproc) vCPUs"; rdma link show'
  for spec in $tests; do
    name=${spec%%=*} rest=${spec#*=}
    pkg=${rest%%:*} pat=${rest#*:}
    printf 'echo "=== %s (%s, -run %s)"\n' "$name" "$pkg" "$pat"
    printf 's=$(date +%%s); (cd /src/%s && /job/t/%s.test -test.run %q -test.v -test.count=1 -test.timeout 15m %s) || fail=1\n' "$pkg" "$name" "$pat" "${RXE_ARGS:-}"
    printf 'echo "=== %s: exit ok=$((1-fail)) in $(( $(date +%%s) - s )) s"\n' "$name"
  done
  echo 'exit $fail'
} >"$job/run.sh"

t=$(now)
rc=0
"$here/vm.sh" "$img" "$job" "$root" || rc=$?
echo "test-verbs: guest boot and tests ($(took "$t")), exit $rc"
echo "test-verbs: results"
grep -E '^(--- (PASS|FAIL|SKIP)|(ok|FAIL|PASS)\b|panic:)' "$job/out" 2>/dev/null | grep -v '^    ' | sed 's/^/  /' || true
if grep -q -- '--- SKIP' "$job/out" 2>/dev/null; then
  echo "test-verbs: a test skipped in the guest; every verbs test must run there" >&2
  rc=1
fi
echo "test-verbs: total $(took "$t0")"
exit $rc
