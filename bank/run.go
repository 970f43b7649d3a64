package bank

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
)

// RunConfig describes one run.
type RunConfig struct {
	Data     *redis.Client // the bank's redis-server
	Locker   Locker
	Servers  int // lock servers behind Locker, for the results
	Mix      Mix
	MixName  string
	Dist     keydist.Dist
	Skew     string // Dist's spec, for the results
	Accounts uint64
	Clients  int
	Warmup   time.Duration
	Duration time.Duration
	Writes   WriteMode
	// Fence, BalanceLockFree and Lookup are as in ExecOptions.
	Fence, BalanceLockFree, Lookup bool
	Seed                           uint64
	// Attempts bounds how often a transaction whose locks could not be had
	// is tried (default 4). Each failed attempt releases what it held and
	// counts as an abort; the transaction keeps its accounts and amount, as
	// a bank would not drop a customer's payment because of a lock, and its
	// latency runs from the first attempt. After the last attempt it is
	// dropped and the client moves on, so that a transaction that can never
	// get its locks does not take its client out of the run.
	Attempts int
	// Progress, if set, is called about once a second with the time since
	// the start and the transactions committed so far.
	Progress func(elapsed time.Duration, committed int64)
	// CPU are the servers whose CPU the run measures over its window,
	// next to the bank process itself.
	CPU []Process
}

// drainLimit bounds how long a run waits, after its window, for the
// transactions in flight (a redsync Lock can retry for several seconds).
const drainLimit = 30 * time.Second

// client is one client's tally, merged at the end.
type client struct {
	hist                [NumTxnTypes]*Hist
	stats               [NumTxnTypes]Stats
	dropped             int64
	deltas, unknown     int64
	overdrawn           int64
	releaseErrs, fenced int64
	errs                []string
	measureFrom, measTo time.Time
}

func (c *client) inWindow(t time.Time) bool { return !t.Before(c.measureFrom) && !t.After(c.measTo) }

func (c *client) noteErr(err error) {
	s := err.Error()
	for _, e := range c.errs {
		if e == s {
			return
		}
	}
	if len(c.errs) < 5 {
		c.errs = append(c.errs, s)
	}
}

// Run audits the bank, runs the workload (warm-up, then the measured
// window), waits for every transaction in flight, and audits again.
func Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.Clients <= 0 {
		return nil, errors.New("bank: run needs at least one client")
	}
	if cfg.Accounts < 2 {
		return nil, errors.New("bank: run needs at least two accounts (SendPayment and Amalgamate take two)")
	}
	res := &Result{Started: time.Now(), Locker: cfg.Locker.Name(), Servers: cfg.Servers, Mix: cfg.MixName,
		Fence: cfg.Fence, BalanceLockFree: cfg.BalanceLockFree, Lookup: cfg.Lookup, Cores: runtime.NumCPU(),
		Skew: cfg.Skew, SkewDesc: cfg.Dist.String(), Accounts: cfg.Accounts, Clients: cfg.Clients, Writes: cfg.Writes.String(),
		Warmup: cfg.Warmup, Duration: cfg.Duration, Types: map[string]*Stats{}}
	before, err := Scan(ctx, cfg.Data, cfg.Accounts)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	from := start.Add(cfg.Warmup)
	to := from.Add(cfg.Duration)
	// At the end of the window clients stop starting transactions, and
	// the ones in flight finish on their own: cutting a lock wait short
	// would leave redsync's failed attempt unreleased (it releases with the
	// caller's context) and so keep a lock held for its whole TTL, stalling
	// whatever runs next on the same lock servers. drainLimit bounds the
	// wait for stragglers.
	lockCtx, stopLocks := context.WithCancel(ctx)
	defer stopLocks()
	var stop atomic.Bool
	stopAt := time.AfterFunc(time.Until(to), func() { stop.Store(true) })
	defer stopAt.Stop()
	drain := time.AfterFunc(time.Until(to)+drainLimit, stopLocks)
	defer drain.Stop()
	cpu := startCPUMeter(ctx, cfg.CPU, from, to)
	var committed atomic.Int64
	clients := make([]*client, cfg.Clients)
	var wg sync.WaitGroup
	for i := range clients {
		c := &client{measureFrom: from, measTo: to}
		for t := range c.hist {
			c.hist[t] = newHist()
		}
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(lockCtx, &stop, cfg, NewGenerator(cfg.Mix, cfg.Dist, cfg.Accounts, cfg.Seed+uint64(i)*0x1000193), &committed)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if cfg.Progress != nil {
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-tick.C:
				cfg.Progress(time.Since(start), committed.Load())
			}
		}
		tick.Stop()
	}
	<-done

	all := newHist()
	var deltas, unknown, overdrawn, releaseErrs, fenced int64
	for t := range NumTxnTypes {
		h, s := newHist(), &Stats{}
		for _, c := range clients {
			h.Merge(c.hist[t])
			cs := c.stats[t]
			s.Committed += cs.Committed
			s.Declined += cs.Declined
			s.Aborts += cs.Aborts
			s.Errors += cs.Errors
		}
		if s.Committed+s.Aborts+s.Errors == 0 && cfg.Mix[t] == 0 {
			continue
		}
		s.fill(h)
		all.Merge(h)
		res.Types[t.String()] = s
		res.All.Committed += s.Committed
		res.All.Declined += s.Declined
		res.All.Aborts += s.Aborts
		res.All.Errors += s.Errors
	}
	for _, c := range clients {
		res.Dropped += c.dropped
		deltas += c.deltas
		unknown += c.unknown
		overdrawn += c.overdrawn
		releaseErrs += c.releaseErrs
		fenced += c.fenced
		for _, e := range c.errs {
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, e)
			}
		}
	}
	res.All.fill(all)
	res.All.Hist = all.Export()
	res.Goodput = float64(res.All.Committed) / cfg.Duration.Seconds()
	cpu.fill(res)

	after, err := Scan(context.WithoutCancel(ctx), cfg.Data, cfg.Accounts)
	if err != nil {
		return res, err
	}
	res.Audit = Audit{Before: before, After: after, Deltas: deltas, Unknown: unknown, Overdrawn: overdrawn}
	res.Audit.Check()
	res.Expired, res.Fenced = releaseErrs, fenced
	// Behind fences an expired lock is harmless (the data store refused
	// whatever it could have spoiled); without them it broke isolation.
	if releaseErrs > 0 && !cfg.Fence {
		res.Audit.Problems = append(res.Audit.Problems, fmt.Sprintf("%d transactions found a lock gone at release (expired while held)", releaseErrs))
		res.Audit.OK = false
	}
	return res, nil
}

func (c *client) loop(ctx context.Context, stop *atomic.Bool, cfg RunConfig, gen *Generator, committed *atomic.Int64) {
	for !stop.Load() && ctx.Err() == nil {
		t := gen.Next()
		begin := time.Now()
		for attempt := 1; ; attempt++ {
			o, err := Exec(ctx, cfg.Data, cfg.Locker, t, ExecOptions{Writes: cfg.Writes,
				Fence: cfg.Fence, BalanceLockFree: cfg.BalanceLockFree, Lookup: cfg.Lookup})
			now := time.Now()
			st := &c.stats[t.Type]
			expired := errors.Is(err, ErrRelease)
			if expired {
				c.releaseErrs++
			}
			switch {
			case errors.Is(err, ErrFenced):
				// Refused before it wrote: an abort, tried again.
				c.fenced++
				if c.inWindow(now) {
					st.Aborts++
				}
				if attempt < cfg.Attempts && !stop.Load() {
					continue
				}
				if c.inWindow(now) {
					c.dropped++
				}
			case err == nil || expired:
				// Committed: its write happened, whatever the release said.
				c.deltas += o.Delta
				if o.Overdrawn {
					c.overdrawn++
				}
				committed.Add(1)
				if err != nil && !cfg.Fence {
					c.noteErr(err) // behind fences, counted in Expired and harmless
				}
				if c.inWindow(now) {
					st.Committed++
					if o.Declined {
						st.Declined++
					}
					_ = c.hist[t.Type].Record(max(1, now.Sub(begin).Microseconds()))
				}
			case errors.Is(err, ErrWrite):
				c.unknown++
				c.noteErr(err)
				if c.inWindow(now) {
					st.Errors++
				}
			default:
				if ctx.Err() != nil {
					return // cut short by the drain limit: not an abort
				}
				if c.inWindow(now) {
					if errors.Is(err, ErrNotAcquired) {
						st.Aborts++
					} else {
						st.Errors++
					}
				}
				if !errors.Is(err, ErrNotAcquired) {
					c.noteErr(err)
					// Something is broken (a server gone?): do not spin.
					time.Sleep(10 * time.Millisecond)
				}
				if attempt < cfg.Attempts && !stop.Load() {
					continue
				}
				if c.inWindow(now) {
					c.dropped++
				}
			}
			break
		}
	}
}
