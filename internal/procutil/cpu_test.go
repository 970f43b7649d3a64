package procutil

import (
	"os"
	"testing"
	"time"
)

// TestCPUReaders: /proc and getrusage must agree on this process, within
// the 10 ms ticks /proc counts in (two fields, each truncated), once it has
// used a measurable amount of CPU.
func TestCPUReaders(t *testing.T) {
	x := 0
	for SelfCPU() < 100*time.Millisecond {
		for i := 0; i < 1e6; i++ {
			x += i
		}
	}
	_ = x
	self := SelfCPU()
	proc, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := self - proc; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("getrusage says %v, /proc says %v", self, proc)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
	if b := MachineBusy(); b < proc {
		t.Errorf("machine busy %v is less than this process's %v", b, proc)
	}
}
