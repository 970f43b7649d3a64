package bank

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// Roles of the processes a run measures. The bank process itself is always
// measured, as RoleClient: it runs the clients and the lock client library
// (redsync, or the native ShiftLock client).
const (
	RoleClient = "client"
	RoleData   = "data" // the bank's redis-server
	RoleLock   = "lock" // lock servers: redis-servers, proxies, memory nodes
)

// Process is a server whose CPU a run measures.
type Process struct {
	Role string // RoleData or RoleLock
	Name string // e.g. redis, proxy1, memnode
	PID  int
}

// ProcessCPU is what one process spent over a run's measured window.
type ProcessCPU struct {
	Role string        `json:"role"`
	Name string        `json:"name"`
	PID  int           `json:"pid"`
	CPU  time.Duration `json:"cpu_ns"` // user + system
	// PerTxn is CPU in core-µs per committed transaction.
	PerTxn float64 `json:"us_per_txn"`
}

// cpuMeter samples CPU times at the start and at the end of the measured
// window, from /proc for the servers and getrusage for the bank itself, so
// that warm-up and the drain after the window are left out, as they are
// from the committed count.
type cpuMeter struct {
	procs       []Process
	window      time.Duration
	done        chan struct{}
	first, last cpuSample
	ok          bool
}

type cpuSample struct {
	self, busy time.Duration
	procs      []time.Duration
	errs       []error
}

func sampleCPU(procs []Process) cpuSample {
	s := cpuSample{self: procutil.SelfCPU(), busy: procutil.MachineBusy()}
	for _, p := range procs {
		c, err := procutil.ProcCPU(p.PID)
		s.procs, s.errs = append(s.procs, c), append(s.errs, err)
	}
	return s
}

func startCPUMeter(ctx context.Context, procs []Process, from, to time.Time) *cpuMeter {
	m := &cpuMeter{procs: procs, window: to.Sub(from), done: make(chan struct{})}
	at := func(t time.Time) bool {
		timer := time.NewTimer(time.Until(t))
		defer timer.Stop()
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(m.done)
		if !at(from) {
			return
		}
		m.first = sampleCPU(procs)
		if !at(to) {
			return
		}
		m.last = sampleCPU(procs)
		m.ok = true
	}()
	return m
}

// fill waits for the window's end and records what each process spent per
// committed transaction. A run cut short records nothing; a process that
// could not be read is left out and named in res.Errors.
func (m *cpuMeter) fill(res *Result) {
	<-m.done
	if !m.ok || res.All.Committed == 0 {
		return
	}
	res.CPUPerTxn = map[string]float64{}
	add := func(role, name string, pid int, used time.Duration) {
		per := float64(used) / float64(time.Microsecond) / float64(res.All.Committed)
		res.CPU = append(res.CPU, ProcessCPU{Role: role, Name: name, PID: pid, CPU: used, PerTxn: per})
		res.CPUPerTxn[role] += per
	}
	add(RoleClient, "bank", os.Getpid(), m.last.self-m.first.self)
	for i, p := range m.procs {
		if err := errors.Join(m.first.errs[i], m.last.errs[i]); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("CPU of %s %s (pid %d): %v", p.Role, p.Name, p.PID, err))
			continue
		}
		add(p.Role, p.Name, p.PID, m.last.procs[i]-m.first.procs[i])
	}
	if m.first.busy >= 0 && m.last.busy >= 0 {
		res.MachineBusy = float64(m.last.busy-m.first.busy) / float64(m.window)
	}
}
