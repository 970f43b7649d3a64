// Package procutil holds what the project's commands share about diagnosing
// themselves and the processes they start: a CPU profile switch and a
// graceful stop of a child.
package procutil

import (
	"os"
	"os/exec"
	"runtime/pprof"
	"time"
)

// StartCPUProfile writes a CPU profile of this process to path until the
// returned stop is called. An empty path profiles nothing and returns a stop
// that does nothing, so callers can defer it unconditionally.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// Stop sends sig to a started child, so that it can shut down cleanly (and,
// say, flush its CPU profile), and kills it if it has not exited after
// grace. It returns once the child is gone.
func Stop(cmd *exec.Cmd, sig os.Signal, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}
