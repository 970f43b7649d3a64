package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Range-lock clients (LOCK.RANGE.*): each locks spans of a few names,
// shared and exclusive, small and large, waiting or trying (WAIT 0), and
// records what it believed it held. A range keeper holds exclusive spans
// for most of twice the TTL, as the point keepers do: a repair of a dead
// proxy's tree that came before the proxy's horizon would hand its span to
// the next asker while the keeper still believes it.

// rangeShared is the share of shared spans, whatever Config.Shared says:
// shared spans take paths of their own in the tree (SplitShared).
const rangeShared = 0.3

// rangeGrid is the granularity of the spans' ends: a span's ends are
// multiples of it within rangeSpace (and a few spans cover the whole
// tree), which keeps the checker's unit-by-unit fence check small.
const (
	rangeGrid  = 16
	rangeSpace = 8192
	rangeTree  = 64 << 16 // 4194304 units: a whole tree (lockmap.RangeUnits)
)

// pickSpan draws a span: within about a leaf (64 units), across a few
// leaves, across the nodes above them, or, rarely, the whole tree.
func pickSpan(r *rand.Rand) (l, hi uint64) {
	var n uint64
	switch k := r.IntN(100); {
	case k < 40:
		n = 1 + r.Uint64N(4) // 16..64 units
	case k < 80:
		n = 4 + r.Uint64N(61) // 64..1024
	case k < 97:
		n = 64 + r.Uint64N(rangeSpace/rangeGrid-64+1) // 1024..8192
	default:
		return 0, rangeTree
	}
	cells := uint64(rangeSpace / rangeGrid)
	start := r.Uint64N(cells - n + 1)
	return start * rangeGrid, (start + n) * rangeGrid
}

// rangeClient loops: acquire a span, hold it, release it.
func (c *campaign) rangeClient(ctx context.Context, id int, l lane, names int) {
	r := rand.New(rand.NewPCG(c.cfg.Seed, uint64(40000+id)))
	rc, proxy, keeper := l.rc, l.proxy, l.keeper
	name := fmt.Sprintf("range%d@p%d", id, proxy)
	ttl := c.cfg.TTL
	if keeper {
		name, ttl = "rangekeeper"+name[5:], c.cfg.keeperTTL()
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		key := l.prefix + strconv.Itoa(r.IntN(names))
		lo, hi := pickSpan(r)
		shared := !keeper && r.Float64() < rangeShared
		wait := c.cfg.Wait
		if !keeper && r.IntN(4) == 0 {
			wait = 0 // a try
		}
		token := fmt.Sprintf("%s-%d", name, seq)
		args := []any{"LOCK.RANGE.ACQUIRE", key, lo, hi, token}
		if shared {
			args = append(args, "SHARED")
		}
		args = append(args, "PX", ttl.Milliseconds(), "WAIT", wait.Milliseconds())
		sent := time.Now()
		c.ops.Add(1)
		c.rangeOps.Add(1)
		fence, err := rc.Do(context.Background(), args...).Uint64()
		took := time.Since(sent)
		switch {
		case errors.Is(err, redis.Nil):
			c.busy.Add(1)
			c.noteAnswer(proxy, sent, took)
			continue
		case err != nil:
			c.errs.Add(1)
			c.noteError(err)
			if took > c.cfg.requestBound() && !c.faulted(proxy, sent, time.Now()) {
				c.stuck.Add(1)
				fmt.Fprintf(c.cfg.Log, "stuck: %s %s [%d,%d) took %v: %v\n", name, key, lo, hi, took, err)
			}
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		c.granted.Add(1)
		c.rangeGranted.Add(1)
		c.noteAnswer(proxy, sent, took)
		granted := time.Now()
		hold := time.Duration(r.Int64N(int64(c.cfg.Hold) + 1))
		if keeper {
			hold = c.cfg.TTL + time.Duration(r.Int64N(int64(c.cfg.TTL*4/5)+1))
		}
		sleep(ctx, hold)
		c.record(Op{Client: name, Key: key, Span: true, L: lo, R: hi, Shared: shared, Fence: fence,
			Sent: sent, Granted: granted, Released: time.Now(), TTL: ttl})
		rctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestBound())
		rc.Do(rctx, "LOCK.RANGE.RELEASE", key, lo, hi, token)
		cancel()
	}
}
