package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// startProc starts a server process and waits for the line on its stdout
// that names its address ("... listening on ADDR").
func startProc(marker string, name string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), marker); ok {
				found <- strings.TrimSpace(addr)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-found:
		return cmd, addr, nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("%s did not print %q", name, marker)
	}
}

func stopProc(cmd *exec.Cmd) { procutil.Stop(cmd, os.Interrupt, 5*time.Second) }
