package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// proc is a memnode process started for one run.
type proc struct {
	cmd   *exec.Cmd
	addr  string
	state string // its state directory, removed once it stops
}

// memnodeBinary finds cmd/memnode's binary: -memnode, else bin/memnode, else
// next to this executable.
func memnodeBinary(o options) (string, error) {
	if o.memnodeBin != "" {
		return o.memnodeBin, nil
	}
	cands := []string{filepath.Join("bin", "memnode")}
	if self, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(self), "memnode"))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("no memnode binary (tried %s); build it (make build) or pass -memnode", strings.Join(cands, ", "))
}

// paperRecoveryFlag is the memnode flag that selects
// memnode.Config.PaperRecovery. lockbench looks for it in the binary's usage,
// so that a memnode built before the flag existed fails with a clear error.
const paperRecoveryFlag = "paper-recovery"

func supportsFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	return bytes.Contains(out, []byte("-"+name+" ")) || bytes.Contains(out, []byte("-"+name+"\n"))
}

// startMemnode starts a memnode on a loopback port, pinned and sized as the
// options say, with heartbeats slow enough not to count in the verbs.
func startMemnode(o options, recovery bool) (*proc, error) {
	bin, err := memnodeBinary(o)
	if err != nil {
		return nil, err
	}
	// A memnode keeps its state in a directory; each benchmark run starts
	// a new one, removed when it stops.
	state, err := os.MkdirTemp("", "lockbench-memnode-")
	if err != nil {
		return nil, err
	}
	args := []string{"-listen", "127.0.0.1:0", "-metrics", "", "-log-level", "warn", "-state-dir", state,
		"-entries", strconv.FormatUint(o.entries, 10), "-heartbeat", "1s", "-dead-after", "30s"}
	if recovery {
		if !supportsFlag(bin, paperRecoveryFlag) {
			return nil, fmt.Errorf("%s has no -%s flag: ShiftLock cannot recover from -fail-rate on it (memnode.Config.PaperRecovery is only reachable in-process; use -fabric memfab)", bin, paperRecoveryFlag)
		}
		args = append(args, "-"+paperRecoveryFlag)
	}
	args = append(args, strings.Fields(o.memnodeFlags)...)
	name := bin
	if o.memnodeCPUs != "" {
		args = append([]string{"-c", o.memnodeCPUs, bin}, args...)
		name = "taskset"
	}
	cmd := exec.Command(name, args...)
	cmd.Env = os.Environ()
	if o.memnodeProcs > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", o.memnodeProcs))
	}
	cmd.Stderr = os.Stderr
	addr, err := procutil.StartReady(cmd, memnodeReady, 30*time.Second)
	if err != nil {
		_ = os.RemoveAll(state)
		return nil, err
	}
	return &proc{cmd: cmd, addr: addr, state: state}, nil
}

var memnodeReady = regexp.MustCompile(`memnode listening on (\S+)`)

// stop asks the memnode to exit and kills it if it does not.
func (p *proc) stop() {
	procutil.Stop(p.cmd, os.Interrupt, 5*time.Second)
	_ = os.RemoveAll(p.state)
}

// cpuTime is the CPU time the process has used so far, from /proc.
func (p *proc) cpuTime() (time.Duration, error) {
	return procutil.ProcCPU(p.cmd.Process.Pid)
}
