package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/freeport"
)

// EtcdReady matches the line an etcd member prints once it serves clients.
var EtcdReady = regexp.MustCompile(`serving client traffic|ready to serve client requests`)

// EtcdCluster is a real etcd cluster of local member processes, with fast
// elections (50 ms heartbeats, 500 ms election timeout) so that leases as
// short as a second are granted and a lost member is noticed quickly.
type EtcdCluster struct {
	bin     string
	dir     string
	names   []string
	client  []int // client port per member
	peer    []int
	initial string

	mu    sync.Mutex
	procs []*Proc
}

// EtcdBin finds the etcd binary; `make test` installs Debian's etcd-server.
func EtcdBin() (string, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd not found (make test installs it: scripts/install-deps.sh): %w", err)
	}
	return bin, nil
}

// NewEtcdCluster starts n members with data under dir and waits until every
// one serves. The caller stops it with Close.
func NewEtcdCluster(bin, dir string, n int) (*EtcdCluster, error) {
	c := &EtcdCluster{bin: bin, dir: dir}
	var init []string
	for i := 0; i < n; i++ {
		cp, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		pp, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		name := "etcd" + strconv.Itoa(i)
		c.names, c.client, c.peer = append(c.names, name), append(c.client, cp), append(c.peer, pp)
		init = append(init, fmt.Sprintf("%s=http://127.0.0.1:%d", name, pp))
	}
	c.initial = strings.Join(init, ",")
	c.procs = make([]*Proc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	// Members wait for a quorum before they serve: start them together.
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = c.Start(i) }(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Etcd starts an n-member cluster for a test and stops it when the test ends.
func Etcd(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	bin, err := EtcdBin()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewEtcdCluster(bin, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start (re)starts member i; a restarted member keeps its data directory
// and rejoins the cluster.
func (c *EtcdCluster) Start(i int) error {
	cu := fmt.Sprintf("http://127.0.0.1:%d", c.client[i])
	pu := fmt.Sprintf("http://127.0.0.1:%d", c.peer[i])
	args := []string{"--name", c.names[i], "--data-dir", filepath.Join(c.dir, c.names[i]),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new",
		"--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap", "--log-level", "info"}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	p, err := Launch(c.names[i], c.bin, args, EtcdReady, 60*time.Second)
	if err != nil {
		return err
	}
	p.Addr = fmt.Sprintf("127.0.0.1:%d", c.client[i])
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return nil
}

// Kill is kill -9 of member i.
func (c *EtcdCluster) Kill(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Freeze stops member i (SIGSTOP): its connections stay open and every
// request to it hangs, as on a machine that stalls, where a kill would be
// refused at once.
func (c *EtcdCluster) Freeze(i int) error {
	c.mu.Lock()
	p := c.procs[i]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("etcd member %d is not running", i)
	}
	return p.Freeze()
}

// Endpoints are the members' client addresses.
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.client))
	for i, p := range c.client {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return out
}

// Size is the number of members.
func (c *EtcdCluster) Size() int { return len(c.names) }

// Close kills every member.
func (c *EtcdCluster) Close() {
	for i := range c.names {
		c.Kill(i)
	}
}
