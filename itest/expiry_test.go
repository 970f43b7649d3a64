package itest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// redsync v4's touch (extend) and delete (release) scripts, byte for byte
// (go-redsync/redsync scripts.go), which the proxy recognises.
const (
	redsyncExtend = `
	if redis.call("GET", KEYS[1]) == ARGV[1] then
		return redis.call("PEXPIRE", KEYS[1], ARGV[2])
	else
		return 0
	end
`
	redsyncRelease = `
	local val = redis.call("GET", KEYS[1])
	if val == ARGV[1] then
		return redis.call("DEL", KEYS[1])
	elseif val == false then
		return -1
	else
		return 0
	end
`
)

// TestLapsedLockCannotBeExtendedOrReleased: a lock whose TTL has run out is
// gone for every command, whatever the proxy's timers are doing. A client
// that let its 5 ms lock lapse and then asks to extend or release it is told
// the key is gone, as Redis tells it, while 60 clients queue on another key
// (which delays the proxy's timers). Before, PEXPIRE answered 1 in up to all
// of 100 tries, depending on load, and PTTL answered 1 for a lock past its
// deadline.
func TestLapsedLockCannotBeExtendedOrReleased(t *testing.T) {
	redisSrv := testproc.Redis(t)
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe)
		// Redis keeps time in whole milliseconds and expires a key once
		// its clock is past the deadline: 6 ms after a 5 ms lock. The
		// proxy ends a lock at the instant of its deadline: 100 µs
		// after it, which a late timer easily misses.
		for _, target := range []struct {
			name, addr string
			past       time.Duration
		}{{"redis-server", redisSrv.Addr, 6 * time.Millisecond}, {"proxy", p.Addr, 5*time.Millisecond + 100*time.Microsecond}} {
			past := target.past
			t.Run(target.name, func(t *testing.T) {
				ctx := ctxT(t, 2*time.Minute)
				loadCtx, stopLoad := context.WithCancel(ctx)
				var wg sync.WaitGroup
				defer func() { stopLoad(); wg.Wait() }()
				loadQueue(loadCtx, t, &wg, target.addr, 60)

				c := redis.NewClient(&redis.Options{Addr: target.addr, PoolSize: 4})
				defer c.Close()
				const tries = 100
				revived := map[string]int{}
				for i := 0; i < tries; i++ {
					key := fmt.Sprintf("lapse:%s:%d", fe, i)
					if ok, err := c.SetNX(ctx, key, "tok", 5*time.Millisecond).Result(); err != nil || !ok {
						t.Fatalf("SET NX PX 5: %v %v", ok, err)
					}
					time.Sleep(past)
					var n int64
					var err error
					switch i % 4 {
					case 0:
						var ok bool
						ok, err = c.PExpire(ctx, key, time.Second).Result()
						if ok {
							revived["PEXPIRE"]++
						}
					case 1:
						n, err = c.Eval(ctx, redsyncExtend, []string{key}, "tok", 1000).Int64()
						if n == 1 {
							revived["extend script"]++
						}
					case 2:
						n, err = c.Eval(ctx, redsyncRelease, []string{key}, "tok").Int64()
						if n == 1 {
							revived["release script"]++
						}
					case 3:
						n, err = c.Do(ctx, "PTTL", key).Int64()
						if n != -2 && n != 0 {
							revived["PTTL"]++
						}
					}
					if err != nil {
						t.Fatalf("try %d: %v", i, err)
					}
					if _, err := c.Get(ctx, key).Result(); err != redis.Nil {
						revived["GET"]++
					}
				}
				if len(revived) > 0 {
					t.Fatalf("%s: lapsed locks answered as live: %v (GET after each of %d tries; each other command in a quarter)", target.name, revived, tries)
				}
			})
		}
	})
}

// loadQueue keeps n clients queued for one key, as a busy application does:
// one holds "busy", the others ask for it with a wait budget, again and
// again, until ctx ends.
func loadQueue(ctx context.Context, t *testing.T, wg *sync.WaitGroup, addr string, n int) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: n + 2})
	if err := c.Set(ctx, "busy", "holder", time.Minute).Err(); err != nil {
		// Redis answers OK; the proxy only takes SET NX.
		if err := c.SetNX(ctx, "busy", "holder", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = c.SetNX(ctx, "busy", fmt.Sprintf("w%d", i), time.Minute).Err()
			}
		}(i)
	}
	go func() { wg.Wait(); c.Close() }()
}
