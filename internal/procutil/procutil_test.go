package procutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestStopSignalsThenKills(t *testing.T) {
	polite := exec.Command("sleep", "30")
	if err := polite.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	start := time.Now()
	Stop(polite, syscall.SIGTERM, 10*time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a child that obeys SIGTERM took %v to stop", took)
	}
	if ws := polite.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended with %v, want SIGTERM", polite.ProcessState)
	}

	stubborn := exec.Command("sh", "-c", `trap "" TERM; sleep 30`)
	if err := stubborn.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the trap be set
	Stop(stubborn, syscall.SIGTERM, 300*time.Millisecond)
	if ws := stubborn.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("stubborn child ended with %v, want SIGKILL after the grace", stubborn.ProcessState)
	}
	Stop(nil, syscall.SIGTERM, time.Second) // no child: nothing to do
}

func TestCPUProfile(t *testing.T) {
	stop, err := StartCPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	path := filepath.Join(t.TempDir(), "cpu.out")
	if stop, err = StartCPUProfile(path); err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile not written: %v", err)
	}
}
