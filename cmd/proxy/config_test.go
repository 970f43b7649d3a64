package main

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestFrontendConfig: the RESP front end and its event loops come from the
// defaults, then the YAML file, then the flags; bad values are refused.
func TestFrontendConfig(t *testing.T) {
	cfg, err := parseConfig([]string{"-state-dir", t.TempDir()}, io.Discard)
	if err != nil || cfg.Frontend != "gnet" || cfg.EventLoops != 1 {
		t.Fatalf("defaults: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(file, []byte("frontend: redcon\nevent_loops: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err = parseConfig([]string{"-config", file, "-memnode", "127.0.0.1:7300"}, io.Discard)
	if err != nil || cfg.Frontend != "redcon" || cfg.EventLoops != 2 {
		t.Fatalf("from the file: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	cfg, err = parseConfig([]string{"-config", file, "-memnode", "127.0.0.1:7300", "-frontend", "gnet", "-event-loops", "3"}, io.Discard)
	if err != nil || cfg.Frontend != "gnet" || cfg.EventLoops != 3 {
		t.Fatalf("flags over the file: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	for _, bad := range [][]string{{"-frontend", "epoll"}, {"-event-loops", "0"}} {
		if _, err := parseConfig(bad, io.Discard); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}

// TestProcs: with gnet the proxy runs one CPU per event loop unless told
// otherwise; redcon keeps Go's default; a negative count is refused.
func TestProcs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 1},
		{[]string{"-event-loops", "2"}, min(2, runtime.NumCPU())},
		{[]string{"-procs", "3"}, 3},
		{[]string{"-frontend", "redcon"}, 0},
		{[]string{"-frontend", "redcon", "-procs", "2"}, 2},
	} {
		cfg, err := parseConfig(append([]string{"-state-dir", "/tmp/p"}, c.args...), io.Discard)
		if err != nil || cfg.procs() != c.want {
			t.Errorf("%v: procs %d, %v; want %d", c.args, cfg.procs(), err, c.want)
		}
	}
	if _, err := parseConfig([]string{"-procs", "-1"}, io.Discard); err == nil {
		t.Error("-procs -1 accepted")
	}
}

// TestExampleConfigLoads: configs/proxy.yaml names only keys the proxy knows.
func TestExampleConfigLoads(t *testing.T) {
	cfg, err := parseConfig([]string{"-config", filepath.Join("..", "..", "configs", "proxy.yaml")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Frontend != "gnet" || cfg.EventLoops != 1 {
		t.Fatalf("front end %q, %d loops", cfg.Frontend, cfg.EventLoops)
	}
}

// TestEmbeddedNeedsState: a proxy on its embedded memory node refuses to
// start without a state directory, and says how to fix it; one that joins a
// memory node needs none.
func TestEmbeddedNeedsState(t *testing.T) {
	_, err := parseConfig(nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "state_dir is not set") || !strings.Contains(err.Error(), "-state-dir DIR") {
		t.Fatalf("embedded without state_dir: %v", err)
	}
	if _, err := parseConfig([]string{"-memnode", "127.0.0.1:7300"}, io.Discard); err != nil {
		t.Fatalf("with a memory node: %v", err)
	}
}

// TestOpenFabricRefused: without a fabric secret, a peer port or a memory
// node across the network is refused, with the fix, unless fabric_insecure
// says so; the embedded memory node has no fabric to protect.
func TestOpenFabricRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{nil, true}, // embedded
		{[]string{"-peer-listen", "0.0.0.0:7400"}, true},                                                     // embedded: no peer port is opened
		{[]string{"-memnode", "127.0.0.1:7300"}, true},                                                       // all on loopback
		{[]string{"-memnode", "localhost:7300", "-peer-listen", "[::1]:0"}, true},                            // all on loopback
		{[]string{"-memnode", "127.0.0.1:7300", "-peer-listen", "0.0.0.0:7400"}, false},                      // open peer port
		{[]string{"-memnode", "127.0.0.1:7300", "-peer-listen", ":7400"}, false},                             // every interface
		{[]string{"-memnode", "10.0.0.5:7300"}, false},                                                       // memory node across the network
		{[]string{"-memnode", "lockserver:7300"}, false},                                                     // a name may resolve to anything
		{[]string{"-memnode", "10.0.0.5:7300", "-fabric-secret-file", "/etc/shiftlock/fabric.secret"}, true}, // secret
		{[]string{"-memnode", "10.0.0.5:7300", "-peer-listen", "0.0.0.0:7400", "-fabric-insecure"}, true},    // said so
		{[]string{"-etcd", "e1:2379", "-shard", "default", "-peer-listen", "0.0.0.0:7400"}, false},           // open peer port
		{[]string{"-etcd", "e1:2379", "-shard", "default"}, true},                                            // memory nodes checked at join
	} {
		_, err := parseConfig(append([]string{"-state-dir", t.TempDir()}, c.args...), io.Discard)
		if c.ok && err != nil {
			t.Errorf("%v refused: %v", c.args, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "fabric_secret_file") || !strings.Contains(err.Error(), "fabric_insecure")) {
			t.Errorf("%v: %v; want a refusal that says how to fix it", c.args, err)
		}
	}
}

// TestRangeWaitPerFabric: the range locks' T_wait is rangelock's default
// on tcp and on the embedded memory node, longer on verbs, whose only
// tested set-up (soft-RoCE under emulation) has round trips of
// milliseconds (issue 36); range_wait overrides both, and a negative one is
// refused.
func TestRangeWaitPerFabric(t *testing.T) {
	mn := []string{"-memnode", "127.0.0.1:7300"}
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"-state-dir", t.TempDir()}, 0},
		{mn, 0},
		{append([]string{"-fabric", "tcp"}, mn...), 0},
		{append([]string{"-fabric", "verbs"}, mn...), 50 * time.Millisecond},
		{append([]string{"-fabric", "verbs", "-range-wait", "5ms"}, mn...), 5 * time.Millisecond},
		{append([]string{"-range-wait", "20ms"}, mn...), 20 * time.Millisecond},
	} {
		cfg, err := parseConfig(c.args, io.Discard)
		if err != nil || cfg.rangeWait() != c.want {
			t.Errorf("%v: T_wait %v, %v; want %v", c.args, cfg.rangeWait(), err, c.want)
		}
	}
	if _, err := parseConfig(append([]string{"-range-wait", "-1ms"}, mn...), io.Discard); err == nil || !strings.Contains(err.Error(), "range_wait") {
		t.Errorf("a negative range_wait: %v", err)
	}
}
