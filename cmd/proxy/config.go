package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/flagfile"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp"
)

// config is the proxy's configuration: built-in defaults, then the YAML file
// (-config), then the flags actually given on the command line.
type config struct {
	Listen string `yaml:"listen"`
	// Memnodes are the memory nodes to join over TCP, in the order that
	// decides key placement (every proxy must list them in the same order).
	// Empty: embed one in-process (the single-host quickstart).
	Memnodes []string `yaml:"memnodes"`
	// Etcd and Shards replace Memnodes when memory nodes fail over: each
	// shard's active memory node is read from etcd and followed through a
	// watch (package ha). Shards are listed in the order that decides key
	// placement, as Memnodes are.
	Etcd   []string `yaml:"etcd_endpoints"`
	Shards []string `yaml:"shards"`
	// Entries sizes the embedded memory node's lock table.
	Entries uint64 `yaml:"entries"`
	// StateDir keeps the embedded memory node's state across restarts
	// (memnode.Open): its generation, the fencing high-water mark, and how
	// long the locks it granted may still be in force. A restarted proxy
	// serves no lock until then. Required with the embedded memory node.
	StateDir string `yaml:"state_dir"`
	// RangeTrees is how many range-lock trees (LOCK.RANGE.*) the embedded
	// memory node holds, 1.4 MB each: one per range-lock name in use.
	RangeTrees int `yaml:"range_trees"`
	// RangeWait is the range locks' T_wait (rangelock.Config.Wait): how
	// long a request may take from its look at a node's ancestors to its
	// notifications before it must start the node over. It has to exceed a
	// few of the fabric's round trips, so 0 picks one per fabric
	// (rangeWait).
	RangeWait time.Duration `yaml:"range_wait"`
	// PeerListen is where other proxies deliver handovers to this one. With
	// several memnodes, memnode i uses port+i (port 0: any free port).
	PeerListen string `yaml:"peer_listen"`
	Advertise  string `yaml:"advertise"`
	Name       string `yaml:"name"`

	Requirepass string `yaml:"requirepass"`
	// Users AUTH by name and may touch only keys matching their patterns
	// (Redis ACL users, in their simplest useful form; config file only).
	Users []userConfig `yaml:"users"`
	// TLS serves RESP over TLS on TLSListen too (Redis's tls-port), with
	// this certificate and key; with TLSCACertFile, clients must present a
	// certificate signed by one of its CAs (mutual TLS, Redis's
	// tls-auth-clients yes).
	TLSListen     string `yaml:"tls_listen"`
	TLSCertFile   string `yaml:"tls_cert_file"`
	TLSKeyFile    string `yaml:"tls_key_file"`
	TLSCACertFile string `yaml:"tls_ca_cert_file"`
	// FabricSecretFile holds the secret shared with the memory nodes and
	// the other proxies (tcpfab auth): every fabric connection proves it.
	FabricSecretFile string `yaml:"fabric_secret_file"`
	// FabricInsecure lets the proxy run its fabric across the network with
	// no FabricSecretFile (a peer_listen, or a memory node, that is not on
	// loopback), where anyone who reaches those ports owns every lock.
	// Without it, such a configuration is refused (openFabric).
	FabricInsecure bool `yaml:"fabric_insecure"`
	// Fabric carries the verbs to memory nodes: "tcp" (tcpfab, the
	// default) or "verbs" (rdma/verbs: RDMA queue pairs on VerbsDevice,
	// in a binary built with -tags verbs). Set-up and the control path go
	// over TCP either way, behind the fabric secret.
	Fabric      string `yaml:"fabric"`
	VerbsDevice string `yaml:"verbs_device"`
	VerbsPort   int    `yaml:"verbs_port"`
	VerbsGID    string `yaml:"verbs_gid"`
	// MaxOutputBytes caps the replies waiting for one client's socket.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// MaxClients caps connected clients, as Redis's maxclients.
	MaxClients int `yaml:"maxclients"`
	// IdleTimeout closes clients idle that long (Redis's timeout; 0: never).
	IdleTimeout time.Duration `yaml:"timeout"`
	// TCPKeepAlive is the keep-alive period of client connections (Redis's
	// tcp-keepalive; 0 disables).
	TCPKeepAlive time.Duration `yaml:"tcp_keepalive"`
	// DrainTimeout bounds the shutdown's wait for the locks clients still
	// hold through this proxy (docs/architecture.md, "Shutdown").
	DrainTimeout time.Duration `yaml:"drain_timeout"`

	AcquireWait  []waitRule    `yaml:"acquire_wait"`
	WaitFraction float64       `yaml:"acquire_wait_fraction"`
	WaitMax      time.Duration `yaml:"acquire_wait_max"`
	// WaitFirstTry has the auto budget apply to an acquire's first try
	// too; by default a first try is answered at once and only a retry of
	// the same key and token waits, no longer than the client waited before
	// retrying (lockmap.WaitPolicy.BudgetFor).
	WaitFirstTry bool `yaml:"acquire_wait_first_try"`

	// Threshold is ShiftLock's N: writer grants in a row before readers
	// get their turn.
	Threshold int `yaml:"writer_threshold"`

	// QuorumRouting sends each key's locks to one home proxy among those
	// on the same memory node that route too, so that a RedLock client
	// asking several of them for a key shares one lock instead of queueing
	// once per proxy (docs/compatibility.md, "RedLock over several
	// proxies"). It adds a message round trip to the acquires and releases
	// whose home is another proxy; turn it on on every proxy your RedLock
	// clients list. No effect with an embedded memory node.
	QuorumRouting bool `yaml:"quorum_routing"`
	// RedlockQuorum: RedLock clients use several of these proxies, on one
	// memory node, as their N instances. A key and token held through
	// another proxy then counts as the same owner here, as N independent
	// Redis instances would each grant it (docs/compatibility.md, "RedLock
	// over several proxies"). Off, two applications that use the same
	// value (`SET job 1 NX`) through two proxies are kept apart, as one
	// redis-server keeps them. Only tokens of at least
	// lockmap.MinOwnerToken bytes are ever recognised, and every client
	// must use a value of its own for every lock, as RedLock clients do
	// (random). quorum_routing implies it.
	RedlockQuorum bool `yaml:"redlock_quorum"`

	// Frontend serves RESP: "gnet" (event loops) or "redcon" (a goroutine
	// per connection).
	Frontend string `yaml:"frontend"`
	// EventLoops is the number of gnet event loops.
	EventLoops int `yaml:"event_loops"`
	// Procs caps the CPUs that run the proxy's Go code at once
	// (GOMAXPROCS). 0 picks: with gnet, one per event loop, since the
	// loops do all the work and a spare CPU only adds scheduler wake-ups
	// (measured: 15-20% less CPU per command, docs/benchmarks.md); with
	// redcon, whose goroutine per connection wants them, every CPU.
	Procs int `yaml:"procs"`

	MetricsListen string `yaml:"metrics_listen"`
	LogLevel      string `yaml:"log_level"`
	// CPUProfile (flag only) writes a CPU profile until shutdown.
	CPUProfile string `yaml:"-"`
}

// userConfig is one users entry.
type userConfig struct {
	Name     string   `yaml:"name"`
	Password string   `yaml:"password"`
	Keys     []string `yaml:"keys"`
}

// respUsers checks the users and converts them for resp.
func (c config) respUsers() ([]resp.User, error) {
	var out []resp.User
	seen := map[string]bool{}
	for _, u := range c.Users {
		switch {
		case u.Name == "" || u.Name == "default":
			return nil, fmt.Errorf("users: a user needs a name other than \"default\" (requirepass is the default user's password)")
		case seen[u.Name]:
			return nil, fmt.Errorf("users: %q is listed twice", u.Name)
		case u.Password == "":
			return nil, fmt.Errorf("users: %q has no password", u.Name)
		case len(u.Keys) == 0:
			return nil, fmt.Errorf("users: %q has no key patterns (use \"*\" for every key)", u.Name)
		}
		seen[u.Name] = true
		out = append(out, resp.User{Name: u.Name, Password: u.Password, Keys: u.Keys})
	}
	return out, nil
}

// waitRule is one acquire_wait entry: keys matching pattern wait "auto"
// (a fraction of their TTL) or a fixed duration ("0s" = exact try-lock).
type waitRule struct {
	Pattern string `yaml:"pattern"`
	Wait    string `yaml:"wait"`
}

func defaultConfig() config {
	return config{
		Listen:         "127.0.0.1:6380",
		Entries:        1 << 20,
		RangeTrees:     64,
		PeerListen:     "127.0.0.1:0",
		WaitFraction:   0.04,
		WaitMax:        2 * time.Second,
		Threshold:      16,
		MaxClients:     10000,
		MaxOutputBytes: 32 << 20,
		DrainTimeout:   30 * time.Second,
		TCPKeepAlive:   300 * time.Second,
		Frontend:       "gnet",
		EventLoops:     1,
		MetricsListen:  "127.0.0.1:9380",
		LogLevel:       "info",
	}
}

// procs is the GOMAXPROCS to run with, 0 for Go's default.
func (c config) procs() int {
	if c.Procs > 0 || c.Frontend != "gnet" {
		return c.Procs
	}
	return min(c.EventLoops, runtime.NumCPU())
}

func (c config) waitPolicy() (lockmap.WaitPolicy, error) {
	p := lockmap.WaitPolicy{Fraction: c.WaitFraction, Max: c.WaitMax, WaitFirstTry: c.WaitFirstTry}
	for _, r := range c.AcquireWait {
		if r.Pattern == "" {
			return p, errors.New("acquire_wait: a rule needs a pattern")
		}
		if r.Wait == "auto" {
			p.Rules = append(p.Rules, lockmap.WaitRule{Pattern: r.Pattern, Auto: true})
			continue
		}
		d, err := time.ParseDuration(r.Wait)
		if err != nil || d < 0 {
			return p, fmt.Errorf("acquire_wait %q: wait must be \"auto\" or a duration, got %q", r.Pattern, r.Wait)
		}
		p.Rules = append(p.Rules, lockmap.WaitRule{Pattern: r.Pattern, Wait: d})
	}
	return p, nil
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	l := flagfile.New(fs, "YAML config file (flags override it)")
	l.String(&cfg.Listen, "listen", cfg.Listen, "RESP address (port 0 picks one; the actual address is printed)")
	l.List(&cfg.Memnodes, "memnode", "memory node address to join (repeat or comma-separate; none: embed one)")
	l.List(&cfg.Etcd, "etcd", "etcd endpoints holding the shards' active memory nodes (repeat or comma-separate)")
	l.List(&cfg.Shards, "shard", "shard to join through etcd, in placement order (repeat or comma-separate)")
	l.Uint64(&cfg.Entries, "entries", cfg.Entries, "lock-table entries of the embedded memory node")
	l.String(&cfg.StateDir, "state-dir", "", "directory kept across restarts for the embedded memory node's state (required with it)")
	l.Int(&cfg.RangeTrees, "range-trees", cfg.RangeTrees, "range-lock trees of the embedded memory node, one per range-lock name in use (1.4 MB each; 0: no range locks)")
	l.Duration(&cfg.RangeWait, "range-wait", cfg.RangeWait, "T_wait of range locks (0: per fabric, 2ms on tcp and the embedded memory node, 50ms on verbs)")
	l.String(&cfg.PeerListen, "peer-listen", cfg.PeerListen, "address for handovers from other proxies")
	l.String(&cfg.Advertise, "advertise", "", "address other proxies dial for handovers (default: derived)")
	l.String(&cfg.Name, "name", "", "node name in memnode logs (default: hostname:pid)")
	l.String(&cfg.Requirepass, "requirepass", "", "password clients must AUTH with")
	l.String(&cfg.TLSListen, "tls-listen", "", "also serve RESP over TLS here (needs -tls-cert-file and -tls-key-file)")
	l.String(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) of the TLS port")
	l.String(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of the TLS port")
	l.String(&cfg.TLSCACertFile, "tls-ca-cert-file", "", "PEM CAs whose client certificates the TLS port requires (mutual TLS)")
	l.String(&cfg.Fabric, "fabric", "tcp", `how verbs reach memory nodes: "tcp" or "verbs" (RDMA; a binary built with -tags verbs)`)
	l.String(&cfg.VerbsDevice, "verbs-device", "", `RDMA device for -fabric verbs (ibv_devices; "" for the first)`)
	l.Int(&cfg.VerbsPort, "verbs-port", 0, "port of the RDMA device (0 for 1)")
	l.String(&cfg.VerbsGID, "verbs-gid", "", `GID index on the RDMA port ("" picks an IPv4 RoCE v2 GID)`)
	l.String(&cfg.FabricSecretFile, "fabric-secret-file", "", "file with the secret shared with the memory nodes and other proxies (none: the fabric must stay on loopback)")
	l.Bool(&cfg.FabricInsecure, "fabric-insecure", false, "run the fabric (peer port, memory nodes) across the network with no secret: anyone who reaches it owns every lock")
	l.Int(&cfg.MaxOutputBytes, "max-output-bytes", cfg.MaxOutputBytes, "replies waiting for one client's socket at most; past it the client is disconnected")
	l.Int(&cfg.MaxClients, "maxclients", cfg.MaxClients, "connected clients at most; one more is told -ERR max number of clients reached")
	l.Duration(&cfg.IdleTimeout, "timeout", cfg.IdleTimeout, "close clients idle this long (0: never), as Redis's timeout")
	l.Duration(&cfg.TCPKeepAlive, "tcp-keepalive", cfg.TCPKeepAlive, "TCP keep-alive period of client connections (0: off)")
	l.Duration(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "on SIGTERM, how long to wait for held locks to be released or expire (0: leave at once)")
	l.Func("acquire-wait", `wait budget for every key: "auto" or a duration (0s = exact try-lock)`, func(wait string) {
		cfg.AcquireWait = []waitRule{{Pattern: "*", Wait: wait}}
	})
	l.Float64(&cfg.WaitFraction, "acquire-wait-fraction", cfg.WaitFraction, "auto wait budget as a fraction of the requested TTL")
	l.Duration(&cfg.WaitMax, "acquire-wait-max", cfg.WaitMax, "cap of the auto wait budget")
	l.Bool(&cfg.WaitFirstTry, "acquire-wait-first-try", cfg.WaitFirstTry, "let an acquire's first try wait too (default: only a retry of the same key and token waits, no longer than the client waited before it)")
	l.Int(&cfg.Threshold, "writer-threshold", cfg.Threshold, "ShiftLock N: consecutive writer grants before readers get the lock")
	l.Bool(&cfg.QuorumRouting, "quorum-routing", cfg.QuorumRouting, "take each key's locks at one home proxy of the memory node, so that RedLock clients asking several proxies share one lock")
	l.Bool(&cfg.RedlockQuorum, "redlock-quorum", cfg.RedlockQuorum, "RedLock clients use several of these proxies as their instances: the same key and token (at least 16 bytes) held through another proxy counts as the same owner")
	l.String(&cfg.Frontend, "frontend", cfg.Frontend, `RESP front end: "gnet" (event loops) or "redcon" (a goroutine per connection)`)
	l.Int(&cfg.EventLoops, "event-loops", cfg.EventLoops, "gnet event loops")
	l.Int(&cfg.Procs, "procs", cfg.Procs, "CPUs running Go code at once (GOMAXPROCS; 0: one per gnet event loop, or all with redcon)")
	l.String(&cfg.MetricsListen, "metrics", cfg.MetricsListen, `address serving /metrics ("" disables)`)
	l.String(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
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
	if cfg.Frontend != "gnet" && cfg.Frontend != "redcon" {
		return config{}, fmt.Errorf("frontend must be \"gnet\" or \"redcon\", got %q", cfg.Frontend)
	}
	if cfg.EventLoops < 1 {
		return config{}, errors.New("event_loops must be at least 1")
	}
	if cfg.MaxOutputBytes < 1 {
		return config{}, errors.New("max_output_bytes must be at least 1")
	}
	if cfg.MaxClients < 1 {
		return config{}, errors.New("maxclients must be at least 1")
	}
	if cfg.TLSListen != "" && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == "") {
		return config{}, errors.New("tls_listen needs tls_cert_file and tls_key_file")
	}
	if cfg.IdleTimeout < 0 || cfg.TCPKeepAlive < 0 {
		return config{}, errors.New("timeout and tcp_keepalive must not be negative")
	}
	if cfg.DrainTimeout < 0 {
		return config{}, errors.New("drain_timeout must not be negative")
	}
	if cfg.Procs < 0 {
		return config{}, errors.New("procs must be 0 (pick) or more")
	}
	if cfg.Entries == 0 {
		return config{}, errors.New("entries must be positive")
	}
	if cfg.RangeTrees < 0 || cfg.RangeTrees > 4096 {
		return config{}, errors.New("range_trees must be within 0..4096")
	}
	if cfg.RangeWait < 0 {
		return config{}, errors.New("range_wait must not be negative (0 picks one per fabric)")
	}
	if (len(cfg.Etcd) == 0) != (len(cfg.Shards) == 0) {
		return config{}, errors.New("etcd_endpoints and shards go together")
	}
	if len(cfg.Etcd) > 0 && len(cfg.Memnodes) > 0 {
		return config{}, errors.New("memnodes and shards exclude each other: with etcd, the memory nodes' addresses are read from it")
	}
	if cfg.embedded() && cfg.StateDir == "" {
		return config{}, errEmbeddedNeedsState
	}
	switch cfg.Fabric {
	case "", "tcp":
	case "verbs":
		if cfg.embedded() {
			return config{}, errors.New("fabric verbs needs memory nodes to reach (memnodes or shards): the embedded memory node is in-process")
		}
	default:
		return config{}, fmt.Errorf("fabric must be \"tcp\" or \"verbs\", got %q", cfg.Fabric)
	}
	for _, sh := range cfg.Shards {
		if err := ha.ValidShard(sh); err != nil {
			return config{}, err
		}
	}
	if open := cfg.openFabric(); len(open) > 0 && !cfg.FabricInsecure {
		return config{}, fmt.Errorf("%s, and fabric_secret_file is not set: anyone who reaches the fabric could read, free and forge every lock. %s",
			strings.Join(open, "; "), procutil.FabricFix)
	}
	if _, err := cfg.waitPolicy(); err != nil {
		return config{}, err
	}
	if _, err := cfg.respUsers(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// openFabric says which parts of the fabric this configuration runs across
// the network with no fabric secret: a peer_listen or a memory node that is
// not on loopback. A peer port hands this proxy's waiters locks, and a
// memory node that admits a proxy without a secret admits anyone. Shards'
// memory nodes are read from etcd, and checked when joined (shardMembers).
// The embedded memory node has no fabric.
func (c config) openFabric() []string {
	if c.FabricSecretFile != "" || (len(c.Memnodes) == 0 && len(c.Shards) == 0) {
		return nil
	}
	var open []string
	if !procutil.Loopback(c.PeerListen) {
		open = append(open, fmt.Sprintf("peer_listen %s is reachable from the network", c.PeerListen))
	}
	for _, m := range c.Memnodes {
		if !procutil.Loopback(m) {
			open = append(open, fmt.Sprintf("memory node %s is across the network", m))
		}
	}
	return open
}

// tlsConfig is the TLS port's configuration, nil without tls_listen.
func (c config) tlsConfig() (*tls.Config, error) {
	if c.TLSListen == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file/tls_key_file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSCACertFile != "" {
		pem, err := os.ReadFile(c.TLSCACertFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca_cert_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_cert_file %s: no PEM certificate in it", c.TLSCACertFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// embedded reports whether the proxy runs its own memory node in-process.
func (c config) embedded() bool { return len(c.Memnodes) == 0 && len(c.Shards) == 0 }

// verbsRangeWait is T_wait on -fabric verbs. The only verbs set-up this
// project runs is soft-RoCE in a guest under TCG, where a round trip takes
// milliseconds: with rangelock's 2 ms every attempt below an occupied node
// took longer than T_wait, and an acquire on an idle name was never
// granted within its 2 s WAIT; 50 ms let TestVerbsRangeLocks pass
// (docs/rangelock.md). On an RDMA NIC, round trips of microseconds would
// do with range_wait: 2ms.
const verbsRangeWait = 50 * time.Millisecond

// rangeWait is the T_wait the range locks run with: range_wait if set,
// else one for the fabric; 0 leaves rangelock's default (2 ms), which is
// many round trips of tcpfab and of the embedded memory node.
func (c config) rangeWait() time.Duration {
	if c.RangeWait > 0 || c.Fabric != "verbs" {
		return c.RangeWait
	}
	return verbsRangeWait
}

// errEmbeddedNeedsState says why a proxy on its embedded memory node will
// not start without a state directory, and what to do.
var errEmbeddedNeedsState = errors.New(`state_dir is not set. With the embedded memory node the lock table lives in this process: ` +
	`a proxy restarted without its state would grant at once the locks its previous run granted, while their holders ` +
	`still believe they hold them, and hand out fencing tokens that go back. Give -state-dir DIR (a directory kept across ` +
	`restarts, one per proxy; make run uses var/proxy), or join a memory node with -memnode`)

// recognisesOwners reports whether the proxy recognises a RedLock client's
// key and token held through another proxy (redlock_quorum, or
// quorum_routing, which shares such holds at a key's home).
func (c config) recognisesOwners() bool { return c.RedlockQuorum || c.QuorumRouting }
