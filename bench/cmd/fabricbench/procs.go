package main

import (
	"os"
	"os/exec"
	"regexp"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// startProc starts a server process and waits for the line on its stdout
// that names its address ("<marker>ADDR").
func startProc(marker string, name string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	addr, err := procutil.StartReady(cmd, regexp.MustCompile(regexp.QuoteMeta(marker)+`(\S+)`), 10*time.Second)
	if err != nil {
		return nil, "", err
	}
	return cmd, addr, nil
}

func stopProc(cmd *exec.Cmd) { procutil.Stop(cmd, os.Interrupt, 5*time.Second) }
