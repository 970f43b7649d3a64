package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func bankCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainArgs(context.Background(), args, &out, &errb)
	if testing.Verbose() {
		t.Logf("bank %s -> %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String() + errb.String(), code
}

// TestLoadRun drives the command as make demo does, on a small bank: load,
// then run a locking and a non-locking locker with their results saved for
// bankreport (bench/cmd/bankreport, which has its own test of the report).
func TestLoadRun(t *testing.T) {
	redis := testproc.Redis(t)
	mn := testproc.Memnode(t)
	dir := t.TempDir()
	if out, code := bankCmd(t, "run", "-redis", redis.Addr, "-locker", "none"); code == 0 || !strings.Contains(out, "bank load") {
		t.Fatalf("run before load: exit %d, %q", code, out)
	}
	if out, code := bankCmd(t, "load", "-redis", redis.Addr, "-accounts", "2000", "-quiet"); code != 0 || !strings.Contains(out, "loaded 2000 accounts") {
		t.Fatalf("load: exit %d\n%s", code, out)
	}
	for _, bad := range []string{"lock=1", "cache:x=1", "lock:x=0", "lock:x=1073741824", "data:redis"} {
		if out, code := bankCmd(t, "run", "-redis", redis.Addr, "-locker", "none", "-cpu", bad); code == 0 || !strings.Contains(out, "-cpu") {
			t.Errorf("-cpu %s: exit %d, %q", bad, code, out)
		}
	}
	dataCPU := fmt.Sprintf("data:redis=%d", redis.Cmd.Process.Pid)
	for i, l := range []string{"native", "none"} {
		args := []string{"run", "-config", "../../configs/bank.yaml", "-redis", redis.Addr, "-locker", l, "-memnode", mn.Addr,
			"-skew", "hotspot:1:90", "-clients", "8", "-warmup", "200ms", "-duration", "1s", "-quiet", "-run", "1",
			"-out", filepath.Join(dir, l+".json"), "-csv", filepath.Join(dir, "runs.csv"), "-cpu", dataCPU}
		if l == "native" {
			args = append(args, "-cpu", fmt.Sprintf("lock:memnode=%d", mn.Cmd.Process.Pid))
		}
		out, code := bankCmd(t, args...)
		if code != 0 || !strings.Contains(out, "goodput") {
			t.Fatalf("run %s: exit %d\n%s", l, code, out)
		}
		if i == 0 && (!strings.Contains(out, "audit OK") || !regexp.MustCompile(`CPU per committed transaction \(core-µs\): client [0-9.]+ \(bank [0-9.]+\), data [0-9.]+ \(redis [0-9.]+\), lock [0-9.]+ \(memnode [0-9.]+\)`).MatchString(out)) {
			t.Fatalf("native audit or CPU:\n%s", out)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	if err != nil || strings.Count(string(csv), "\n") != 3 {
		t.Fatalf("CSV: %v\n%s", err, csv)
	}
	for _, l := range []string{"native", "none"} {
		r, err := bank.LoadResult(filepath.Join(dir, l+".json"))
		if err != nil || r.Locker != l || r.All.Committed == 0 || r.All.Hist == nil {
			t.Errorf("%s result: %v %+v", l, err, r)
		}
	}
	if out, code := bankCmd(t, "report", "-in", dir); code != 2 || !strings.Contains(out, "bankreport") {
		t.Errorf("report: exit %d, %q; want a pointer to bankreport", code, out)
	}
}
