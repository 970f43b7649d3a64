package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// constClient locks key "const:k" through proxy i with the constant value
// "1", as a cron job's `SET job 1 NX` does, through SET NX PX and through
// LOCK.ACQUIRE in turn. Its fellow clients of the key use the same value
// through the other proxies, so the proxies must keep them apart by the
// client, not the value. One client per key and proxy: through one proxy,
// a constant value's release is anyone's, here as on Redis.
func (c *campaign) constClient(ctx context.Context, k, proxy int, rc *redis.Client) {
	r := rand.New(rand.NewPCG(c.cfg.Seed, uint64(20000+k*64+proxy)))
	key := "const:" + strconv.Itoa(k)
	name := fmt.Sprintf("const%d@p%d", k, proxy)
	ttl := c.cfg.TTL
	for seq := 0; ctx.Err() == nil; seq++ {
		sent := time.Now()
		c.ops.Add(1)
		var fence uint64 // 0: SET NX answers no fencing token
		var err error
		if seq%2 == 0 {
			var ok bool
			ok, err = rc.SetNX(context.Background(), key, "1", ttl).Result()
			if err == nil && !ok {
				err = redis.Nil
			}
		} else {
			fence, err = rc.Do(context.Background(), "LOCK.ACQUIRE", key, "1", "PX", ttl.Milliseconds(), "WAIT", c.cfg.Wait.Milliseconds()).Uint64()
		}
		if !c.answered(ctx, proxy, name, key, sent, err) {
			sleep(ctx, time.Duration(r.IntN(20))*time.Millisecond)
			continue
		}
		granted := time.Now()
		sleep(ctx, time.Duration(r.Int64N(int64(c.cfg.Hold)+1)))
		released := time.Now()
		c.record(Op{Client: name, Key: key, Fence: fence, Sent: sent, Granted: granted, Released: released, TTL: ttl})
		// Only well inside the TTL: a late release of a constant value
		// may take the next holder's lock through this proxy, on Redis too.
		if time.Since(sent) < ttl/2 {
			rctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestBound())
			rc.Do(rctx, "LOCK.RELEASE", key, "1")
			cancel()
		}
	}
}

// lapseTTL is the TTL a lapser takes its locks with: short, so that it
// lapses often.
const lapseTTL = 300 * time.Millisecond

// touchScript is redsync v4's extend script (go-redsync/redsync
// scripts.go), which the proxy recognises.
const touchScript = `
	if redis.call("GET", KEYS[1]) == ARGV[1] then
		return redis.call("PEXPIRE", KEYS[1], ARGV[2])
	else
		return 0
	end
`

// lapser takes a lock on one of the campaign's keys, holds it past its TTL,
// and then asks to extend it (LOCK.EXTEND, or redsync's extend script) and
// to release it, with its own token. A lock past its TTL is gone for every
// command, so both must answer 0; each 1 counts in Result.Lapsed, and an
// extension that was granted is recorded as a hold, so that the history
// shows whom it overlapped.
func (c *campaign) lapser(ctx context.Context, id int, rc *redis.Client, proxy int) {
	r := rand.New(rand.NewPCG(c.cfg.Seed, uint64(30000+id)))
	name := fmt.Sprintf("lapser%d@p%d", id, proxy)
	for seq := 0; ctx.Err() == nil; seq++ {
		key := "chaos:" + strconv.Itoa(r.IntN(c.cfg.Keys))
		token := fmt.Sprintf("%s-%d", name, seq)
		sent := time.Now()
		c.ops.Add(1)
		fence, err := rc.Do(context.Background(), "LOCK.ACQUIRE", key, token, "PX", lapseTTL.Milliseconds(), "WAIT", c.cfg.Wait.Milliseconds()).Uint64()
		if !c.answered(ctx, proxy, name, key, sent, err) {
			continue
		}
		granted := time.Now()
		// Past the TTL as the proxy counts it too: it started no later
		// than the grant's reply.
		sleep(ctx, lapseTTL+100*time.Millisecond)
		c.record(Op{Client: name, Key: key, Fence: fence, Sent: sent, Granted: granted, Released: time.Now(), TTL: lapseTTL})
		if ctx.Err() != nil {
			// The campaign ended during the wait: the lock has not lapsed.
			rc.Do(context.Background(), "LOCK.RELEASE", key, token)
			return
		}

		xsent := time.Now()
		var n int64
		if seq%2 == 0 {
			n, err = rc.Do(context.Background(), "LOCK.EXTEND", key, token, "PX", 1000).Int64()
		} else {
			n, err = rc.Eval(context.Background(), touchScript, []string{key}, token, 1000).Int64()
		}
		if err == nil && n == 1 {
			c.lapsed.Add(1)
			fmt.Fprintf(c.cfg.Log, "lapsed: %s extended %s (fence %d) %v after its TTL ran out\n", name, key, fence, xsent.Sub(granted)-lapseTTL)
		}
		if n, err := rc.Do(context.Background(), "LOCK.RELEASE", key, token).Int64(); err == nil && n == 1 {
			c.lapsed.Add(1)
			fmt.Fprintf(c.cfg.Log, "lapsed: %s released %s after its TTL ran out\n", name, key)
		}
	}
}
