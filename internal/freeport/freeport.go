// Package freeport picks loopback ports for child processes that must be
// told their address before they start. It imports nothing outside the
// standard library, so test helpers in nested modules can use it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Pick returns a loopback TCP port that is free now, for a child that
// must be told its port before it starts (a port-0 listener cannot be
// handed to another process, and some topologies need every address up
// front). Between this call and the child's bind anyone may take the port;
// choosing it below the kernel's ephemeral range closes the common case, a
// connect() or a port-0 listen in some other process being given the same
// number, since the kernel only picks ports from that range. Only someone
// else choosing the same way, and the same number, remains. Pick never
// returns a port twice in one process: a topology picks a score of ports
// before any child binds them, and a repeat among those would be a
// collision no bind check can see.
func Pick() (int, error) {
	lo := ephemeralLow()
	const floor = 10000
	if lo-floor < 1000 {
		return anyPort()
	}
	for range 200 {
		p := floor + rand.IntN(lo-floor)
		if given.has(p) {
			continue
		}
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			ln.Close()
			given.add(p)
			return p, nil
		}
	}
	return anyPort()
}

// given holds the ports this process has handed out.
var given portSet

type portSet struct {
	mu sync.Mutex
	m  map[int]bool
}

func (s *portSet) has(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[p]
}

func (s *portSet) add(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[int]bool{}
	}
	s.m[p] = true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default if it cannot be read).
func ephemeralLow() int {
	lo := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	return lo
}

func anyPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
