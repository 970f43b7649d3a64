package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestFrontendConfig: the RESP front end and its event loops come from the
// defaults, then the YAML file, then the flags; bad values are refused.
func TestFrontendConfig(t *testing.T) {
	cfg, err := parseConfig(nil, io.Discard)
	if err != nil || cfg.Frontend != "gnet" || cfg.EventLoops != 1 {
		t.Fatalf("defaults: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(file, []byte("frontend: redcon\nevent_loops: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err = parseConfig([]string{"-config", file}, io.Discard)
	if err != nil || cfg.Frontend != "redcon" || cfg.EventLoops != 2 {
		t.Fatalf("from the file: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	cfg, err = parseConfig([]string{"-config", file, "-frontend", "gnet", "-event-loops", "3"}, io.Discard)
	if err != nil || cfg.Frontend != "gnet" || cfg.EventLoops != 3 {
		t.Fatalf("flags over the file: %q %d %v", cfg.Frontend, cfg.EventLoops, err)
	}
	for _, bad := range [][]string{{"-frontend", "epoll"}, {"-event-loops", "0"}} {
		if _, err := parseConfig(bad, io.Discard); err == nil {
			t.Fatalf("%v accepted", bad)
		}
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
