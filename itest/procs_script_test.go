package itest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStartListenerWaitsForItsOutputFile: scripts/procs.sh's start_listener
// polls the daemon's output for its "listening on" line. The output file is
// opened by the child, so the first look may find none; under `set -euo
// pipefail` that failed sed ended the whole script. It did in a clean-clone
// CI run (`make test-demos`: "sed: can't read .../proxy.out: No such file
// or directory", and demo-ha.sh stopped at its third step). Here the child
// removes its output file and writes the line later: the script must wait
// for it, not die.
func TestStartListenerWaitsForItsOutputFile(t *testing.T) {
	script := `set -euo pipefail
LOGS=$1
. scripts/procs.sh
start_listener x sh -c 'rm -f "$0"; sleep 0.3; echo "x listening on 127.0.0.1:1" >"$0"; sleep 5' "$LOGS/x.out"
echo "ADDR=$ADDR"`
	cmd := exec.Command("bash", "-c", script, "bash", t.TempDir())
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ADDR=127.0.0.1:1") {
		t.Fatalf("start_listener: %v\n%s", err, out)
	}
}
