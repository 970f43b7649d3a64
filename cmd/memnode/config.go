package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/flagfile"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// config is the memory node's configuration: built-in defaults, then the
// YAML file (-config), then flags given on the command line.
type config struct {
	Listen  string `yaml:"listen"`
	Entries uint64 `yaml:"entries"`
	Eras    uint64 `yaml:"eras"`
	// RangeTrees is the pool of range-lock trees (LOCK.RANGE.*): one per
	// range-lock name in use through any proxy, 1.4 MB each. 0: no range
	// locks on this memory node.
	RangeTrees        int           `yaml:"range_trees"`
	MaxNodes          int           `yaml:"max_nodes"`
	MaxNodesPerHost   int           `yaml:"max_nodes_per_host"` // memnode.Config.MaxNodesPerHost
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	DeadAfter         time.Duration `yaml:"dead_after"`
	MetricsListen     string        `yaml:"metrics_listen"`
	LogLevel          string        `yaml:"log_level"`
	// PaperRecovery selects memnode.Config.PaperRecovery: ShiftLock §3.6's
	// recovery as written, for microbenchmarks with microsecond critical
	// sections only (lockbench -fail-rate). Never for the proxy.
	PaperRecovery bool `yaml:"paper_recovery"`

	// StateDir and RestartGrace drive the restart logic (memnode.Open:
	// generations, the fencing high-water mark and the post-restart grace
	// period, docs/reliability.md); see main.go.
	StateDir     string        `yaml:"state_dir"`
	RestartGrace time.Duration `yaml:"restart_grace"`
	// MaxLease caps the TTLs proxies may grant (and so the restart grace).
	MaxLease time.Duration `yaml:"max_lease"`

	// FabricSecretFile holds the secret every connection must prove it
	// knows before any frame (tcpfab auth); the proxies need the same.
	FabricSecretFile string `yaml:"fabric_secret_file"`
	// FabricInsecure lets the node serve a listen address reachable from
	// the network with no FabricSecretFile, where anyone who reaches it
	// owns every lock. Without it, such a configuration is refused.
	FabricInsecure bool `yaml:"fabric_insecure"`
	// Fabric is how proxies reach the regions: "tcp" (tcpfab, the
	// default), or "verbs": RDMA queue pairs on VerbsDevice (rdma/verbs,
	// a binary built with -tags verbs), set up over the TCP listen
	// address. VerbsLockTable is "auto", "cpu" or "one-sided"
	// (verbs.LockTableMode).
	Fabric         string `yaml:"fabric"`
	VerbsDevice    string `yaml:"verbs_device"`
	VerbsPort      int    `yaml:"verbs_port"`
	VerbsGID       string `yaml:"verbs_gid"`
	VerbsLockTable string `yaml:"verbs_lock_table"`

	// Etcd, when set, keeps the shard's control state in etcd instead of
	// StateDir: the node campaigns for Shard and serves only while it is
	// the active node; otherwise it waits as a standby (package ha).
	Etcd []string `yaml:"etcd_endpoints"`
	// Shard names the lock table this node serves or stands by for.
	Shard string `yaml:"shard"`
	// Advertise is the address written to etcd for proxies to dial
	// (default: the listen address).
	Advertise string `yaml:"advertise"`
	// EtcdLease is the etcd lease behind the candidacy: a lost active node
	// is replaced about this long after it stopped renewing.
	EtcdLease time.Duration `yaml:"etcd_lease"`
	// EtcdPatience is how long past its lease's expiry an active node that
	// cannot reach etcd goes on serving; at most dead_after (0:
	// dead_after).
	EtcdPatience time.Duration `yaml:"etcd_patience"`

	// CPUProfile (flag only) writes a CPU profile until shutdown.
	CPUProfile string `yaml:"-"`
}

// DefaultRangeTrees is range_trees' default: 64 names in use at once, in
// 90 MB of address space. Only the trees in use take memory: a tree's
// pages are touched by the spans locked in it.
const DefaultRangeTrees = 64

// MaxRangeTrees bounds range_trees (5.7 GB of trees).
const MaxRangeTrees = 4096

func defaultConfig() config {
	return config{
		Listen:            "127.0.0.1:7300",
		Entries:           1 << 20,
		Eras:              64,
		RangeTrees:        DefaultRangeTrees,
		MaxNodes:          4096,
		MaxNodesPerHost:   memnode.DefaultMaxNodesPerHost,
		HeartbeatInterval: 100 * time.Millisecond,
		DeadAfter:         time.Second,
		MetricsListen:     "127.0.0.1:9300",
		LogLevel:          "info",
		MaxLease:          10 * time.Minute,
		Shard:             "default",
		EtcdLease:         time.Second,
	}
}

// parseConfig reads args (without the program name). Flags override the
// file, and only the flags actually given do.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("memnode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	l := flagfile.New(fs, "YAML config file (flags override it)")
	l.String(&cfg.Listen, "listen", cfg.Listen, "address to serve verbs on (port 0 picks one; the actual address is printed)")
	l.Uint64(&cfg.Entries, "entries", cfg.Entries, "lock-table entries (16 bytes each)")
	l.Uint64(&cfg.Eras, "eras", cfg.Eras, "recovery era counters")
	l.Int(&cfg.RangeTrees, "range-trees", cfg.RangeTrees, "range-lock trees, one per range-lock name in use (1.4 MB each; 0: no range locks)")
	l.Int(&cfg.MaxNodes, "max-nodes", cfg.MaxNodes, "largest NodeID (at most 65535)")
	l.Int(&cfg.MaxNodesPerHost, "max-nodes-per-host", cfg.MaxNodesPerHost, "node IDs members from one host may hold at once, counting those of recently ended memberships")
	l.Duration(&cfg.HeartbeatInterval, "heartbeat", cfg.HeartbeatInterval, "how often members heartbeat")
	l.Duration(&cfg.DeadAfter, "dead-after", cfg.DeadAfter, "silence after which a member is declared dead and fenced")
	l.String(&cfg.MetricsListen, "metrics", cfg.MetricsListen, `address serving /metrics ("" disables)`)
	l.String(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	l.Bool(&cfg.PaperRecovery, "paper-recovery", false, "recover entries as ShiftLock §3.6 does, without probing members (microbenchmarks only)")
	l.String(&cfg.StateDir, "state-dir", "", "keep the generation, fencing high-water mark and lease horizons here across restarts (required without -etcd)")
	l.Duration(&cfg.RestartGrace, "restart-grace", 0, "no joins for at least this long after a restart (the saved horizons may demand longer)")
	l.Duration(&cfg.MaxLease, "max-lease", cfg.MaxLease, "longest TTL proxies may grant; bounds the restart grace")
	l.String(&cfg.FabricSecretFile, "fabric-secret-file", "", "file with the shared secret proxies must prove they know (none: any connection is served, so listen must be loopback)")
	l.Bool(&cfg.FabricInsecure, "fabric-insecure", false, "serve a listen address reachable from the network with no fabric secret: anyone who reaches it owns every lock")
	l.String(&cfg.Fabric, "fabric", "tcp", `how proxies reach the regions: "tcp" or "verbs" (RDMA; a binary built with -tags verbs)`)
	l.String(&cfg.VerbsDevice, "verbs-device", "", `RDMA device for -fabric verbs (ibv_devices; "" for the first)`)
	l.Int(&cfg.VerbsPort, "verbs-port", 0, "port of the RDMA device (0 for 1)")
	l.String(&cfg.VerbsGID, "verbs-gid", "", `GID index on the RDMA port ("" picks an IPv4 RoCE v2 GID)`)
	l.String(&cfg.VerbsLockTable, "verbs-lock-table", "auto", `with -fabric verbs: "cpu" (the lock table through this node's CPU, for devices without extended atomics), "one-sided" (standard 8-byte verbs only: CAS and DSLR locks, no recovery) or "auto" (cpu)`)
	l.Func("etcd", "comma-separated etcd endpoints: keep the shard's state there and fail over between memory nodes", func(etcd string) {
		cfg.Etcd = flagfile.Split(etcd)
	})
	l.String(&cfg.Shard, "shard", cfg.Shard, "the shard this node serves or stands by for (with -etcd)")
	l.String(&cfg.Advertise, "advertise", "", "address proxies dial, written to etcd (default: the listen address)")
	l.Duration(&cfg.EtcdLease, "etcd-lease", cfg.EtcdLease, "etcd lease TTL of the candidacy (whole seconds)")
	l.Duration(&cfg.EtcdPatience, "etcd-patience", 0, "serve this long past the lease's expiry while etcd is unreachable (default and most: dead_after)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile here until shutdown (diagnostics)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := l.Apply(&cfg); err != nil {
		return config{}, err
	}
	return cfg, cfg.validate()
}

func (c config) validate() error {
	switch {
	case c.Listen == "":
		return errors.New("listen address is required")
	case c.FabricSecretFile == "" && !c.FabricInsecure && !procutil.Loopback(c.Listen):
		return fmt.Errorf("listen %s is reachable from the network and fabric_secret_file is not set: anyone who reaches it could read, free and forge every lock. %s", c.Listen, procutil.FabricFix)
	case c.Fabric != "" && c.Fabric != "tcp" && c.Fabric != "verbs":
		return fmt.Errorf("fabric must be \"tcp\" or \"verbs\", got %q", c.Fabric)
	case c.Fabric == "verbs" && len(c.Etcd) > 0:
		return errors.New("fabric verbs with etcd (failover) is not supported yet: use a state directory")
	case c.Entries == 0:
		return errors.New("entries must be positive")
	case c.Eras == 0:
		return errors.New("eras must be positive")
	case c.RangeTrees < 0 || c.RangeTrees > MaxRangeTrees:
		return fmt.Errorf("range_trees %d is outside 0..%d", c.RangeTrees, MaxRangeTrees)
	case c.MaxNodes <= 0 || c.MaxNodes > 65535:
		return fmt.Errorf("max_nodes %d is outside 1..65535", c.MaxNodes)
	case c.MaxNodesPerHost <= 0:
		return fmt.Errorf("max_nodes_per_host must be positive, got %d", c.MaxNodesPerHost)
	case c.HeartbeatInterval <= 0:
		return errors.New("heartbeat_interval must be positive")
	case c.DeadAfter <= c.HeartbeatInterval:
		return fmt.Errorf("dead_after (%v) must exceed heartbeat_interval (%v)", c.DeadAfter, c.HeartbeatInterval)
	case c.RestartGrace < 0:
		return errors.New("restart_grace must not be negative")
	case len(c.Etcd) > 0 && c.StateDir != "":
		return errors.New("state_dir and etcd_endpoints exclude each other: with etcd the state lives there")
	case len(c.Etcd) == 0 && c.StateDir == "":
		return errors.New(`state_dir is not set. A memory node restarted without its state would grant at once the locks ` +
			`its previous run granted, while their holders still believe they hold them, and hand out fencing tokens that go ` +
			`back. Give -state-dir DIR (a directory kept across restarts, one per memory node, e.g. /var/lib/shiftlock), ` +
			`or -etcd to keep the state in etcd and fail over to a standby`)
	case len(c.Etcd) > 0 && ha.ValidShard(c.Shard) != nil:
		return ha.ValidShard(c.Shard)
	case len(c.Etcd) > 0 && c.EtcdPatience > c.DeadAfter:
		return fmt.Errorf("etcd_patience (%v) must not exceed dead_after (%v): a successor's grace only covers that much", c.EtcdPatience, c.DeadAfter)
	case len(c.Etcd) > 0 && c.EtcdLease < time.Second:
		return errors.New("etcd_lease must be at least 1s (etcd leases are whole seconds)")
	}
	return nil
}
