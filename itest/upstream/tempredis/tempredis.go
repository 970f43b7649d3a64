// Package tempredis stands in for github.com/stvp/tempredis when the test
// harness of shiftlock-proxy (itest/upstream) runs go-redsync/redsync's own
// test suite: it keeps tempredis's API (Start, Config, Socket, Term), and
// starts the server that SHIFTLOCK_TEMPREDIS_SERVER names on the TCP port
// the suite asks for, instead of a redis-server on a Unix socket. Socket
// returns the TCP address; the harness turns the suite's "unix" dials into
// "tcp" ones. Nothing else of the suite changes.
//
//	SHIFTLOCK_TEMPREDIS_SERVER  redis (redis-server from PATH) or proxy
//	SHIFTLOCK_PROXY_BIN         the proxy binary
//	SHIFTLOCK_MEMNODE_BIN       the memnode binary; with it, the proxies of
//	                            each block of SHIFTLOCK_TEMPREDIS_BLOCK ports
//	                            from SHIFTLOCK_TEMPREDIS_BASE join one memnode
//	                            of their own, as a RedLock client's instances
//	                            on one host would
//	SHIFTLOCK_MEMNODE_ARGS      more memnode flags, space-separated
//	SHIFTLOCK_PROXY_ARGS        more proxy flags, space-separated
package tempredis

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is a key-value map of Redis config settings; only "port" is read.
type Config map[string]string

// Server is one running server process (and, for a proxy on a memory
// node, nothing more: the memory node is shared by its block).
type Server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

var (
	mu       sync.Mutex
	memnodes = map[int]string{} // block → memnode address
)

// Start starts a server on config["port"] (a free port if absent or 0) and
// returns once it accepts connections.
func Start(config Config) (*Server, error) {
	port := config["port"]
	if port == "" || port == "0" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	dir, err := os.MkdirTemp("", "tempredis-shim-")
	if err != nil {
		return nil, err
	}
	s := &Server{addr: "127.0.0.1:" + port, dir: dir}
	switch kind := os.Getenv("SHIFTLOCK_TEMPREDIS_SERVER"); kind {
	case "redis":
		s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		err = s.run(regexp.MustCompile(`Ready to accept connections`))
	case "proxy":
		args := []string{"-listen", s.addr, "-metrics", "", "-range-trees", "0", "-drain-timeout", "0s"}
		mn, merr := memnodeFor(port)
		if merr != nil {
			return nil, merr
		}
		if mn != "" {
			args = append(args, "-memnode", mn)
		} else {
			args = append(args, "-entries", "65536", "-state-dir", dir)
		}
		args = append(args, strings.Fields(os.Getenv("SHIFTLOCK_PROXY_ARGS"))...)
		s.cmd = exec.Command(os.Getenv("SHIFTLOCK_PROXY_BIN"), args...)
		err = s.run(regexp.MustCompile(`proxy listening on`))
	default:
		return nil, fmt.Errorf("tempredis shim: SHIFTLOCK_TEMPREDIS_SERVER=%q, want redis or proxy", kind)
	}
	if err != nil {
		s.Term()
		return nil, err
	}
	return s, nil
}

// memnodeFor is the memory node of port's block, started on first use, or
// "" for proxies on an embedded memory node.
func memnodeFor(port string) (string, error) {
	bin := os.Getenv("SHIFTLOCK_MEMNODE_BIN")
	if bin == "" {
		return "", nil
	}
	p, _ := strconv.Atoi(port)
	base, _ := strconv.Atoi(os.Getenv("SHIFTLOCK_TEMPREDIS_BASE"))
	size, _ := strconv.Atoi(os.Getenv("SHIFTLOCK_TEMPREDIS_BLOCK"))
	block := -1 // a port outside the blocks gets a memory node of its own
	if size > 0 && p >= base {
		block = (p - base) / size
	}
	mu.Lock()
	defer mu.Unlock()
	if addr, ok := memnodes[block]; ok && block >= 0 {
		return addr, nil
	}
	dir, err := os.MkdirTemp("", "tempredis-shim-memnode-")
	if err != nil {
		return "", err
	}
	args := append([]string{"-listen", "127.0.0.1:0", "-metrics", "", "-entries", "65536", "-state-dir", dir},
		strings.Fields(os.Getenv("SHIFTLOCK_MEMNODE_ARGS"))...)
	m := &Server{dir: dir, cmd: exec.Command(bin, args...)}
	if err := m.run(regexp.MustCompile(`memnode listening on (\S+)`)); err != nil {
		m.Term()
		return "", err
	}
	memnodes[block] = m.addr
	return m.addr, nil
}

// run starts s.cmd and waits for ready on its output; a submatch becomes
// s.addr. The process's output goes on to this process's stderr only if
// it fails to start.
func (s *Server) run(ready *regexp.Regexp) error {
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		return err
	}
	found := make(chan string, 1)
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if log.Len() < 1<<16 {
				log.WriteString(line + "\n")
			}
			logMu.Unlock()
			if m := ready.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[len(m)-1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case a := <-found:
		if len(ready.SubexpNames()) > 1 {
			s.addr = a
		}
		return nil
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		return fmt.Errorf("tempredis shim: %s not ready after 30 s:\n%s", s.cmd.Path, log.String())
	}
}

// Socket is the server's address, host:port (a TCP address, not a Unix
// socket's path).
func (s *Server) Socket() string { return s.addr }

// Term kills the server.
func (s *Server) Term() error {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	return os.RemoveAll(s.dir)
}
