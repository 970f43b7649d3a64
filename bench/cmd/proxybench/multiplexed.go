package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/nodemods"
)

// The multiplexed-connection workload (issue 33): one ioredis connection
// carries the calls of 16 node-redlock v4 workers, which take turns on one
// key, holding it 2 ms each, 240 times in all. It is the real client, run
// as a Node.js process by itest/node/clients.js (scenario "hotkey", the
// one itest TestNodeMultiplexedHotKey checks), with the packages pinned
// there and installed by internal/nodemods. No Go client multiplexes
// callers over one connection as ioredis does: go-redis gives each caller
// a pooled connection, and a server that makes a connection wait behind
// itself only shows with the real thing.

// muxResult is one run of the workload.
type muxResult struct {
	wall     time.Duration // first acquire to last release, as the client measured it
	maxWait  time.Duration // longest acquire, the client's retries included
	meanHold time.Duration // mean time from a grant to its release returning
	sections int           // critical sections done
	failure  string        // what went wrong, if anything did
	cpu      cpuCost       // per critical section
}

// muxSections is how many critical sections a run takes (clients.js's
// default, as the issue measured it).
const muxSections = 240

// nodeWorkload runs clients.js's hotkey scenario with node-redlock v4
// against server.
func nodeWorkload(ctx context.Context, server *proc, nodeDir, modules string) (muxResult, error) {
	_, port, err := net.SplitHostPort(server.addr)
	if err != nil {
		return muxResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(nodeDir, "clients.js"), "hotkey", port,
		fmt.Sprintf(`{"lib":"redlock4","workers":16,"sections":%d,"hold":2}`, muxSections))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stderr = os.Stderr
	start := markCPU(server)
	out, err := cmd.Output()
	if err != nil {
		return muxResult{}, fmt.Errorf("node clients.js hotkey on %s: %v\n%s", server.addr, err, out)
	}
	var got struct {
		WallMs, MaxWaitMs, MeanHoldMs float64
		Done                          int
		Error, Fatal                  *string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return muxResult{}, fmt.Errorf("node clients.js hotkey printed %q: %v", out, err)
	}
	if got.Fatal != nil {
		return muxResult{}, fmt.Errorf("node clients.js hotkey on %s: %s", server.addr, *got.Fatal)
	}
	msf := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	r := muxResult{wall: msf(got.WallMs), maxWait: msf(got.MaxWaitMs), meanHold: msf(got.MeanHoldMs), sections: got.Done,
		cpu: markCPU(server).costSince(start, int64(got.Done))}
	if got.Error != nil {
		r.failure = *got.Error
	}
	return r, nil
}

// nodeModules installs the workload's packages, or says why it cannot run.
func nodeModules(nodeDir string) (string, error) {
	if _, err := os.Stat(filepath.Join(nodeDir, "clients.js")); err != nil {
		return "", fmt.Errorf("no clients.js in %s (-node-dir): %w", nodeDir, err)
	}
	return nodemods.Install(nodeDir)
}
