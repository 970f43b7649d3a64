package main

import (
	"flag"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/flagfile"
)

// config is the bank's configuration: defaults, then the YAML file
// (-config), then the flags actually given.
type config struct {
	Redis    string `yaml:"redis"`
	Accounts uint64 `yaml:"accounts"`
	Seed     uint64 `yaml:"seed"`

	Locker     string        `yaml:"locker"`
	LockRedis  []string      `yaml:"lock_redis"`
	Proxies    []string      `yaml:"proxies"`
	Memnodes   []string      `yaml:"memnodes"`
	NativeWait time.Duration `yaml:"native_wait"`
	LockTTL    time.Duration `yaml:"lock_ttl"`
	Fence      bool          `yaml:"fence"`

	Mix      string        `yaml:"mix"`
	Skew     string        `yaml:"skew"`
	Clients  int           `yaml:"clients"`
	Duration time.Duration `yaml:"duration"`
	Warmup   time.Duration `yaml:"warmup"`
	Writes   string        `yaml:"writes"`
	Attempts int           `yaml:"attempts"`
	// BalanceLockFree and Lookup are the ShiftLock artifact's ways.
	BalanceLockFree bool `yaml:"balance_lock_free"`
	Lookup          bool `yaml:"lookup"`
}

func defaultConfig() config {
	return config{
		Redis:      "127.0.0.1:6379",
		Seed:       1,
		Locker:     "proxy",
		LockRedis:  []string{"127.0.0.1:6379"},
		Proxies:    []string{"127.0.0.1:6380"},
		Memnodes:   []string{"127.0.0.1:7300"},
		NativeWait: 5 * time.Second,
		Mix:        "smallbank",
		Skew:       "zipf:0.99",
		Clients:    64,
		Duration:   30 * time.Second,
		Warmup:     5 * time.Second,
		Writes:     "set",
		Attempts:   4,
	}
}

// configFlags registers the config flags on fs; call the returned function
// after fs.Parse to get the merged config.
func configFlags(fs *flag.FlagSet) func() (config, error) {
	d := defaultConfig()
	cfg := d
	l := flagfile.New(fs, "YAML config file, e.g. configs/bank.yaml (flags override it)")
	l.String(&cfg.Redis, "redis", d.Redis, "the bank's redis-server (data)")
	l.Uint64(&cfg.Accounts, "accounts", d.Accounts, "accounts (load: how many to create, 0 = 1,000,000; run: how many to use, 0 = all that were loaded)")
	l.Uint64(&cfg.Seed, "seed", d.Seed, "seed of the opening balances and of the transaction generators")
	l.String(&cfg.Locker, "locker", d.Locker, "redlock (redsync), redlock-rs (the ShiftLock paper's RedLock client), proxy, native or none")
	l.List(&cfg.LockRedis, "lock-redis", "redis-server(s) for the redlock locker (repeat or comma-separate; default: "+strings.Join(d.LockRedis, ",")+")")
	l.List(&cfg.Proxies, "proxy", "shiftlock-proxy address(es) for the proxy locker (default: "+strings.Join(d.Proxies, ",")+")")
	l.List(&cfg.Memnodes, "memnode", "memory node address(es) for the native locker, in the proxies' order (default: "+strings.Join(d.Memnodes, ",")+")")
	l.Duration(&cfg.NativeWait, "native-wait", d.NativeWait, "native and fenced proxy lockers: longest wait for a lock before the transaction aborts")
	l.Duration(&cfg.LockTTL, "lock-ttl", d.LockTTL, "lock TTL for redlock-rs (0 = its 10ms) and the fenced proxy locker (0 = 8s)")
	l.Bool(&cfg.Fence, "fence", d.Fence, "check fencing tokens on every read and write (proxy: through LOCK.ACQUIRE; native)")
	l.Bool(&cfg.BalanceLockFree, "balance-lock-free", d.BalanceLockFree, "Balance takes no lock: a WATCH read, as in the ShiftLock artifact")
	l.Bool(&cfg.Lookup, "lookup", d.Lookup, "resolve account names with ZRANK inside WATCH first, as the ShiftLock artifact does")
	l.String(&cfg.Mix, "mix", d.Mix, "smallbank (the classic mix) or mobile (90% Balance, 10% SendPayment)")
	l.String(&cfg.Skew, "skew", d.Skew, "account distribution: uniform, zipf:θ, or hotspot:K:O (K% of the accounts get O% of the draws)")
	l.Int(&cfg.Clients, "clients", d.Clients, "concurrent clients, each running one transaction at a time")
	l.Duration(&cfg.Duration, "duration", d.Duration, "measured time")
	l.Duration(&cfg.Warmup, "warmup", d.Warmup, "unmeasured time before it")
	l.String(&cfg.Writes, "writes", d.Writes, "set (absolute MSET: lost updates without locks) or incr (INCRBY deltas: negative balances without locks)")
	l.Int(&cfg.Attempts, "attempts", d.Attempts, "attempts per transaction whose locks could not be had, before it is dropped")
	return func() (config, error) {
		if err := l.Apply(&cfg); err != nil {
			return config{}, err
		}
		return cfg, nil
	}
}
