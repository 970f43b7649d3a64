package bank

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// RedlockRSLocker is RedLock as the ShiftLock paper's artifact ran it: the
// Rust crate redlock 2.0 (redlock-rs) with its defaults, called the way the
// artifact's SmallBank client calls it. Its behaviour, as the crate's source
// has it:
//
//   - every SET NX PX and every unlock opens a new TCP connection to the
//     lock server (redis::Client::get_connection) and drops it afterwards;
//   - a lock try sets the key on every server; with a quorum and a positive
//     validity (TTL − drift − elapsed, in usize arithmetic that a release
//     build wraps, so a try slower than the TTL still succeeds) it has the
//     lock; otherwise it unlocks every server and sleeps a random 0–200 ms;
//   - lock() makes 3 such tries and returns None; the artifact's caller
//     calls it again, forever;
//   - unlock is best effort: the compare-and-delete script on every server,
//     its answer ignored.
//
// The TTL is the artifact's 10 ms unless configured. A lock that expires
// before its holder is done is not noticed by redlock-rs; the bank notices
// (the unlock script finds the key gone or someone else's, and Release
// reports it), and its audit shows what the lost isolation cost.
//
// RedLock has no shared mode: reads lock exclusively, as in the artifact.
type RedlockRSLocker struct {
	addrs []string
	ttl   time.Duration
	// Tries and Delay are redlock-rs's retry_count and retry_delay.
	tries int
	delay time.Duration
	// dial is how a connection is opened (a test can count them).
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// conns counts the connections opened.
	conns atomic.Int64
}

// RedlockRSDefaultTTL is the TTL the artifact passes to every lock() call.
const RedlockRSDefaultTTL = 10 * time.Millisecond

// redlockRSUnlock is the crate's UNLOCK_SCRIPT, byte for byte, so that it
// has the crate's SHA1. redis-rs's Script sends EVALSHA first and loads the
// script on NOSCRIPT; here EVAL does the loading, once per server.
const (
	redlockRSUnlock = `if redis.call('get',KEYS[1]) == ARGV[1] then
                                return redis.call('del',KEYS[1])
                              else
                                return 0
                              end`
)

// NewRedlockRSLocker returns a locker over the redis-servers in addrs with
// the given TTL (0: the artifact's 10 ms).
func NewRedlockRSLocker(addrs []string, ttl time.Duration) (*RedlockRSLocker, error) {
	if len(addrs) == 0 {
		return nil, errors.New("bank: redlock-rs locker needs at least one redis-server")
	}
	if ttl <= 0 {
		ttl = RedlockRSDefaultTTL
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("bank: redlock-rs TTL %v is under the 1 ms that PX can express", ttl)
	}
	var d net.Dialer
	return &RedlockRSLocker{addrs: addrs, ttl: ttl, tries: 3, delay: 200 * time.Millisecond,
		dial: func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }}, nil
}

func (l *RedlockRSLocker) Name() string { return "redlock-rs" }

// Connections is how many TCP connections the locker has opened so far.
func (l *RedlockRSLocker) Connections() int64 { return l.conns.Load() }

// Ping checks every server answers, on a connection of its own as always.
func (l *RedlockRSLocker) Ping(ctx context.Context) error {
	for _, a := range l.addrs {
		r, err := l.do(ctx, a, "PING")
		if err == nil && r.str != "PONG" {
			err = fmt.Errorf("PING answered %q", r.str)
		}
		if err != nil {
			return fmt.Errorf("bank: redlock-rs locker: %s: %w", a, err)
		}
	}
	return nil
}

type redlockRSLock struct {
	key, val string
}

type redlockRSHeld struct {
	l     *RedlockRSLocker
	locks []redlockRSLock
}

// Acquire takes each lock in turn, calling lock() until it succeeds: the
// artifact's RedLock::new loops forever. Only ctx ends the loop.
func (l *RedlockRSLocker) Acquire(ctx context.Context, reqs []LockReq) (Held, error) {
	h := &redlockRSHeld{l: l}
	for _, r := range reqs {
		for {
			val, ok, err := l.lock(ctx, r.Key)
			if ok {
				h.locks = append(h.locks, redlockRSLock{r.Key, val})
				break
			}
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				_ = h.Release(context.WithoutCancel(ctx))
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %v", ErrNotAcquired, err)
				}
				return nil, err
			}
		}
	}
	return h, nil
}

// lock is redlock-rs's RedLock::lock: up to tries rounds over every server.
// Server errors count as "not set", as in the crate; only ctx ending is an
// error here.
func (l *RedlockRSLocker) lock(ctx context.Context, key string) (val string, ok bool, err error) {
	var id [20]byte
	_, _ = rand.Read(id[:])
	val = string(id[:])
	quorum := len(l.addrs)/2 + 1
	ttlMs := uint64(l.ttl.Milliseconds())
	ttl := strconv.FormatUint(ttlMs, 10)
	drift := uint64(float32(ttlMs)*0.01) + 2
	for range l.tries {
		n := 0
		start := time.Now()
		for _, a := range l.addrs {
			if r, err := l.do(ctx, a, "SET", key, val, "nx", "px", ttl); err == nil && r.str == "OK" {
				n++
			}
		}
		// usize arithmetic as in the crate: a try slower than the TTL
		// wraps around to a huge validity instead of failing.
		validity := ttlMs - drift - uint64(time.Since(start).Milliseconds())
		if n >= quorum && validity > 0 {
			return val, true, nil
		}
		for _, a := range l.addrs {
			_, _ = l.unlockInstance(ctx, a, key, val)
		}
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		if l.delay > 0 {
			t := time.NewTimer(time.Duration(mrand.Int64N(int64(l.delay/time.Millisecond))) * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "", false, ctx.Err()
			}
		}
	}
	return "", false, nil
}

var redlockRSUnlockSHA = scriptSHA(redlockRSUnlock)

// scriptSHA is the name EVALSHA knows a script by.
func scriptSHA(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// unlockInstance runs the compare-and-delete script on one server over a
// new connection: 1 if it deleted our key.
func (l *RedlockRSLocker) unlockInstance(ctx context.Context, addr, key, val string) (bool, error) {
	r, err := l.do(ctx, addr, "EVALSHA", redlockRSUnlockSHA, "1", key, val)
	if err == nil && r.err != "" && len(r.err) >= 8 && r.err[:8] == "NOSCRIPT" {
		r, err = l.do(ctx, addr, "EVAL", redlockRSUnlock, "1", key, val)
	}
	if err != nil {
		return false, err
	}
	if r.err != "" {
		return false, errors.New(r.err)
	}
	return r.int == 1, nil
}

// Release unlocks every lock on every server. redlock-rs ignores the
// answers; the bank needs them, because a lock that was no longer ours at
// release means the transaction ran without isolation.
func (h *redlockRSHeld) Release(ctx context.Context) error {
	return releaseEach(len(h.locks), func(i int) error {
		lk := h.locks[i]
		deleted := 0
		var errs []error
		for _, a := range h.l.addrs {
			ok, err := h.l.unlockInstance(ctx, a, lk.key, lk.val)
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				deleted++
			}
		}
		if deleted < len(h.l.addrs)/2+1 {
			err := fmt.Errorf("bank: unlock %s: held on %d of %d servers at release (TTL %v ran out)", lk.key, deleted, len(h.l.addrs), h.l.ttl)
			return errors.Join(append([]error{err}, errs...)...)
		}
		return nil
	})
}

func (l *RedlockRSLocker) Close() error { return nil }

// reply is one RESP reply, as far as the locker reads them.
type reply struct {
	str, err string
	int      int64
	null     bool
}

// do opens a connection, sends one command, reads its reply and closes the
// connection, as redlock-rs does for every command.
func (l *RedlockRSLocker) do(ctx context.Context, addr string, args ...string) (reply, error) {
	l.conns.Add(1)
	c, err := l.dial(ctx, addr)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	buf := make([]byte, 0, 128)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	if _, err := c.Write(buf); err != nil {
		return reply{}, err
	}
	return readReply(bufio.NewReaderSize(c, 256))
}

// maxBulk bounds the bulk strings readReply accepts.
const maxBulk = 64 << 10

// readReply reads one simple reply: a status, an error, an integer or a
// bulk string (nil included). The locker sends nothing that answers with an
// array.
func readReply(r *bufio.Reader) (reply, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return reply{}, fmt.Errorf("bank: malformed reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return reply{str: body}, nil
	case '-':
		return reply{err: body}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return reply{int: n}, err
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return reply{}, err
		}
		if n < 0 {
			return reply{null: true}, nil
		}
		// The locker's replies are a lock value or a short status; a
		// larger length is a broken stream, not a reason to allocate it.
		if n > maxBulk {
			return reply{}, fmt.Errorf("bank: bulk reply of %d bytes (at most %d expected)", n, maxBulk)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return reply{}, err
		}
		return reply{str: string(b[:n])}, nil
	}
	return reply{}, fmt.Errorf("bank: unexpected reply %q", line)
}
