package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "memnode.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFileAndFlags(t *testing.T) {
	p := writeConfig(t, `
listen: 0.0.0.0:7400
entries: 1024
eras: 8
range_trees: 3
max_nodes: 100
heartbeat_interval: 50ms
dead_after: 2s
metrics_listen: ""
log_level: warn
paper_recovery: true
state_dir: /var/lib/memnode
restart_grace: 30s
fabric_secret_file: /etc/shiftlock/fabric.secret
`)
	cfg, err := parseConfig([]string{"-config", p, "-entries", "2048", "-dead-after", "3s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		Listen: "0.0.0.0:7400", Entries: 2048, Eras: 8, RangeTrees: 3, MaxNodes: 100,
		HeartbeatInterval: 50 * time.Millisecond, DeadAfter: 3 * time.Second,
		MetricsListen: "", LogLevel: "warn", PaperRecovery: true, StateDir: "/var/lib/memnode", RestartGrace: 30 * time.Second, MaxLease: 10 * time.Minute,
		Shard: "default", EtcdLease: time.Second, FabricSecretFile: "/etc/shiftlock/fabric.secret", MaxNodesPerHost: 64,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
	// Flags left at their defaults do not override the file.
	cfg, err = parseConfig([]string{"-config", p}, &bytes.Buffer{})
	if err != nil || cfg.Entries != 1024 || cfg.DeadAfter != 2*time.Second {
		t.Fatalf("file values: %+v %v", cfg, err)
	}
	// No file: the documented defaults, and the state directory every
	// memory node without etcd needs.
	cfg, err = parseConfig([]string{"-state-dir", "/var/lib/shiftlock"}, &bytes.Buffer{})
	want = defaultConfig()
	want.StateDir = "/var/lib/shiftlock"
	if err != nil || !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	if d := defaultConfig(); d.Listen != "127.0.0.1:7300" || d.Entries != 1<<20 || d.Eras != 64 ||
		d.HeartbeatInterval != 100*time.Millisecond || d.DeadAfter != time.Second || d.MetricsListen != "127.0.0.1:9300" {
		t.Fatalf("defaults drifted from the documented ones: %+v", d)
	}
}

func TestShippedConfigParses(t *testing.T) {
	cfg, err := parseConfig([]string{"-config", "../../configs/memnode.yaml", "-state-dir", "/var/lib/shiftlock"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Etcd) == 0 {
		cfg.Etcd = nil // "etcd_endpoints: []" reads as an empty list
	}
	cfg.StateDir = ""
	if !reflect.DeepEqual(cfg, defaultConfig()) {
		t.Fatalf("configs/memnode.yaml differs from the built-in defaults:\n file %+v\n code %+v", cfg, defaultConfig())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		args []string
		want string
	}{
		{"unknown key", "entires: 5\n", nil, "entires"},
		{"bad duration", "dead_after: soon\n", nil, "time.Duration"},
		{"zero entries", "", []string{"-entries", "0"}, "entries"},
		{"dead before heartbeat", "", []string{"-heartbeat", "1s", "-dead-after", "500ms"}, "dead_after"},
		{"too many nodes", "max_nodes: 70000\n", nil, "max_nodes"},
		{"no nodes per host", "max_nodes_per_host: 0\n", nil, "max_nodes_per_host"},
		{"stray argument", "", []string{"extra"}, "unexpected"},
		{"negative grace", "restart_grace: -1s\n", nil, "restart_grace"},
		{"no state", "", []string{"-listen", "127.0.0.1:7300"}, "state_dir is not set"},
		{"state and etcd", "", []string{"-state-dir", "/tmp/x", "-etcd", "127.0.0.1:2379"}, "exclude each other"},
		{"open fabric", "", []string{"-listen", "0.0.0.0:7300"}, "fabric_insecure"},
		{"open fabric, every interface", "listen: :7300\n", nil, "fabric_secret_file"},
		{"open fabric by name", "", []string{"-listen", "lockserver:7300"}, "fabric_secret_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name != "no state" && tc.name != "state and etcd" {
				args = append([]string{"-state-dir", t.TempDir()}, args...)
			}
			if tc.file != "" {
				args = append([]string{"-config", writeConfig(t, tc.file)}, args...)
			}
			_, err := parseConfig(args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	// Reachable from the network, with a secret or on purpose without one.
	for _, args := range [][]string{
		{"-listen", "0.0.0.0:7300", "-fabric-secret-file", "/etc/shiftlock/fabric.secret"},
		{"-listen", "0.0.0.0:7300", "-fabric-insecure"},
	} {
		if _, err := parseConfig(append(args, "-state-dir", t.TempDir()), &bytes.Buffer{}); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	if _, err := parseConfig([]string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRun serves a node in-process and shuts down when ctx ends, exiting 0.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics", "", "-entries", "64", "-state-dir", t.TempDir()}, &stdout, &stderr)
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, l := range strings.Split(stdout.String(), "\n") {
			if a, ok := strings.CutPrefix(l, "memnode listening on "); ok {
				addr = a
			}
		}
	}
	if addr == "" {
		t.Fatalf("no address printed; stderr:\n%s", stderr.String())
	}
	ep, err := tcpfab.Dial(ctx, addr, tcpfab.Config{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Layout().LockEntries != 64 {
		t.Fatalf("layout %+v", ep.Layout())
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", c, stderr.String())
	}
	ep.Close()
	if strings.Contains(stdout.String(), "metrics on") {
		t.Fatal(`-metrics "" still served metrics`)
	}
}

func TestRunBadConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if c := run(context.Background(), []string{"-entries", "0", "-state-dir", t.TempDir()}, &out, &errOut); c != 2 {
		t.Fatalf("exit code %d for a bad config", c)
	}
	if c := run(context.Background(), []string{"-log-level", "loud"}, &out, &errOut); c != 2 {
		t.Fatalf("exit code %d for a bad log level", c)
	}
}
