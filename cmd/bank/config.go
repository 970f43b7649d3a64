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

// stringList is a repeatable, comma-separated flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// configFlags registers the config flags on fs; call the returned function
// after fs.Parse to get the merged config.
func configFlags(fs *flag.FlagSet) func() (config, error) {
	d := defaultConfig()
	file := fs.String("config", "", "YAML config file, e.g. configs/bank.yaml (flags override it)")
	var f config
	var lockRedis, proxies, memnodes stringList
	fs.StringVar(&f.Redis, "redis", d.Redis, "the bank's redis-server (data)")
	fs.Uint64Var(&f.Accounts, "accounts", d.Accounts, "accounts (load: how many to create, 0 = 1,000,000; run: how many to use, 0 = all that were loaded)")
	fs.Uint64Var(&f.Seed, "seed", d.Seed, "seed of the opening balances and of the transaction generators")
	fs.StringVar(&f.Locker, "locker", d.Locker, "redlock (redsync), redlock-rs (the ShiftLock paper's RedLock client), proxy, native or none")
	fs.Var(&lockRedis, "lock-redis", "redis-server(s) for the redlock locker (repeat or comma-separate; default: "+strings.Join(d.LockRedis, ",")+")")
	fs.Var(&proxies, "proxy", "shiftlock-proxy address(es) for the proxy locker (default: "+strings.Join(d.Proxies, ",")+")")
	fs.Var(&memnodes, "memnode", "memory node address(es) for the native locker, in the proxies' order (default: "+strings.Join(d.Memnodes, ",")+")")
	fs.DurationVar(&f.NativeWait, "native-wait", d.NativeWait, "native and fenced proxy lockers: longest wait for a lock before the transaction aborts")
	fs.DurationVar(&f.LockTTL, "lock-ttl", d.LockTTL, "lock TTL for redlock-rs (0 = its 10ms) and the fenced proxy locker (0 = 8s)")
	fs.BoolVar(&f.Fence, "fence", d.Fence, "check fencing tokens on every read and write (proxy: through LOCK.ACQUIRE; native)")
	fs.BoolVar(&f.BalanceLockFree, "balance-lock-free", d.BalanceLockFree, "Balance takes no lock: a WATCH read, as in the ShiftLock artifact")
	fs.BoolVar(&f.Lookup, "lookup", d.Lookup, "resolve account names with ZRANK inside WATCH first, as the ShiftLock artifact does")
	fs.StringVar(&f.Mix, "mix", d.Mix, "smallbank (the classic mix) or mobile (90% Balance, 10% SendPayment)")
	fs.StringVar(&f.Skew, "skew", d.Skew, "account distribution: uniform, zipf:θ, or hotspot:K:O (K% of the accounts get O% of the draws)")
	fs.IntVar(&f.Clients, "clients", d.Clients, "concurrent clients, each running one transaction at a time")
	fs.DurationVar(&f.Duration, "duration", d.Duration, "measured time")
	fs.DurationVar(&f.Warmup, "warmup", d.Warmup, "unmeasured time before it")
	fs.StringVar(&f.Writes, "writes", d.Writes, "set (absolute MSET: lost updates without locks) or incr (INCRBY deltas: negative balances without locks)")
	fs.IntVar(&f.Attempts, "attempts", d.Attempts, "attempts per transaction whose locks could not be had, before it is dropped")
	return func() (config, error) {
		cfg := d
		if *file != "" {
			if err := flagfile.Load(*file, &cfg); err != nil {
				return config{}, err
			}
		}
		set := flagfile.Given(fs)
		over := func(name string, apply func()) {
			if set[name] {
				apply()
			}
		}
		over("redis", func() { cfg.Redis = f.Redis })
		over("accounts", func() { cfg.Accounts = f.Accounts })
		over("seed", func() { cfg.Seed = f.Seed })
		over("locker", func() { cfg.Locker = f.Locker })
		over("lock-redis", func() { cfg.LockRedis = lockRedis })
		over("proxy", func() { cfg.Proxies = proxies })
		over("memnode", func() { cfg.Memnodes = memnodes })
		over("native-wait", func() { cfg.NativeWait = f.NativeWait })
		over("lock-ttl", func() { cfg.LockTTL = f.LockTTL })
		over("fence", func() { cfg.Fence = f.Fence })
		over("balance-lock-free", func() { cfg.BalanceLockFree = f.BalanceLockFree })
		over("lookup", func() { cfg.Lookup = f.Lookup })
		over("mix", func() { cfg.Mix = f.Mix })
		over("skew", func() { cfg.Skew = f.Skew })
		over("clients", func() { cfg.Clients = f.Clients })
		over("duration", func() { cfg.Duration = f.Duration })
		over("warmup", func() { cfg.Warmup = f.Warmup })
		over("writes", func() { cfg.Writes = f.Writes })
		over("attempts", func() { cfg.Attempts = f.Attempts })
		return cfg, nil
	}
}
