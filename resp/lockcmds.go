package resp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// HeldElsewhere is what GET (and the scripts' view of GET) returns for a key
// held through another proxy: this proxy cannot know the holder's token, and
// must not say the key is free. No client's token equals it, so
// compare-and-delete and compare-and-extend correctly refuse.
const HeldElsewhere = "shiftlock:held-through-another-proxy"

// errReply turns an error from the lock table into a Redis-style error.
func errReply(err error) string {
	switch {
	case errors.Is(err, lockmap.ErrDraining):
		return "TRYAGAIN shiftlock-proxy is shutting down; acquire through another proxy, or retry"
	case errors.Is(err, lockmap.ErrNoLease):
		return "TRYAGAIN shiftlock-proxy has lost its lease with the memory node; locks cannot be granted until it is back: " + err.Error()
	case errors.Is(err, rdma.ErrUnreachable), errors.Is(err, rdma.ErrUnavailable), errors.Is(err, rdma.ErrClosed):
		return "TRYAGAIN memory node unreachable: " + err.Error()
	case lockmap.MembershipGone(err):
		// The rest of what a rejoin cures: fenced, or the old membership's
		// lock client closed while the proxy replaces it.
		return "TRYAGAIN shiftlock-proxy is rejoining the memory node; retry: " + err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "TRYAGAIN request abandoned: " + err.Error()
	case errors.Is(err, lockmap.ErrTooManyHolders):
		return fmt.Sprintf("ERR shiftlock-proxy: %d shared holders of this key through this proxy already, its limit: release some, or take the key through another proxy", lockmap.MaxHoldersPerKey)
	case errors.Is(err, shiftlock.ErrTooManyReaders):
		return fmt.Sprintf("ERR shiftlock-proxy: %d shared holders already hold or wait for this lock (or for one that shares its lock entry), its limit: release some", shiftlock.MaxReaders)
	case errors.Is(err, rdma.ErrInboxFull):
		// Each lock this proxy holds or waits for keeps a waiter slot, and a
		// lock entry names slots in 16 bits.
		return fmt.Sprintf("ERR shiftlock-proxy already holds or waits for %d locks at once, its limit: release some, or spread the clients over more proxies", rdma.MaxTargets)
	}
	return "ERR " + err.Error()
}

// lockErr answers an error from the lock table. lockmap.ErrWouldBlock is
// not an answer but a request to run the command again where it may wait
// (the event loop does, loop.go, and discards this reply); the lock table
// has left nothing held.
func (st *connState) lockErr(err error) {
	if errors.Is(err, lockmap.ErrWouldBlock) {
		st.blocked = true
	}
	st.w.err(errReply(err))
}

// setArgs is SET's parsed options.
type setArgs struct {
	nx, xx, get, keepTTL bool
	ttl                  time.Duration
	hasTTL               bool
}

// parseSet reads SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]
// in any order and case, as redis-server 7 does, with its error messages:
// NX with XX, and two different expiry forms (or one with KEEPTTL), are a
// syntax error; the same form twice takes the last, and only the last
// value is read, after every option has been checked. now is only asked
// for by the absolute forms.
func parseSet(args [][]byte, now func() time.Time) (setArgs, string) {
	var a setArgs
	unit, value := "", []byte(nil)
	for i := 3; i < len(args); i++ {
		opt := setOption(args[i])
		switch opt {
		case "NX":
			if a.xx {
				return a, "ERR syntax error"
			}
			a.nx = true
		case "XX":
			if a.nx {
				return a, "ERR syntax error"
			}
			a.xx = true
		case "GET":
			a.get = true
		case "KEEPTTL":
			if unit != "" {
				return a, "ERR syntax error"
			}
			a.keepTTL = true
		case "EX", "PX", "EXAT", "PXAT":
			if (unit != "" && unit != opt) || a.keepTTL || i+1 >= len(args) {
				return a, "ERR syntax error"
			}
			i++
			unit, value = opt, args[i]
		default:
			return a, "ERR syntax error"
		}
	}
	if unit == "" {
		return a, ""
	}
	d, fault := parseTTL(unit, value, math.MaxInt64, now)
	switch fault {
	case ttlOK:
	case ttlNotInteger:
		return a, "ERR value is not an integer or out of range"
	default:
		return a, "ERR invalid expire time in 'set' command"
	}
	a.ttl, a.hasTTL = d, true
	return a, ""
}

// parseInteger reads a signed 64-bit decimal as Redis's string2ll does, so
// that what Redis calls "not an integer" is not one here either: no sign
// but a leading minus, no leading zeros, no spaces, no "-0", at most 20
// bytes. strconv.ParseInt takes "+100" and "0100".
func parseInteger(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true // -(1<<63) wraps to itself, MinInt64
	}
	return 0, false
}

// setOptions are SET's option words, upper-case.
var setOptions = [...]string{"NX", "XX", "GET", "KEEPTTL", "EX", "PX", "EXAT", "PXAT"}

// setOption returns the option word b names, case-insensitively, or "".
// SET is on every lock's path, so it compares in place rather than
// upper-case a copy.
func setOption(b []byte) string {
	for _, o := range setOptions {
		if equalFold(b, o) {
			return o
		}
	}
	return ""
}

// equalFold reports whether b equals the upper-case ASCII word upper,
// ignoring ASCII case.
func equalFold(b []byte, upper string) bool {
	if len(b) != len(upper) {
		return false
	}
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		if ch != upper[i] {
			return false
		}
	}
	return true
}

// cmdSet acquires: SET key token NX [PX ms]. Only the NX form is a lock;
// other forms would overwrite one, so they are refused with a reason.
func (s *Server) cmdSet(st *connState, args [][]byte) {
	a, e := parseSet(args, time.Now)
	if e != "" {
		st.w.err(e)
		return
	}
	if !a.nx || a.get || a.keepTTL {
		st.w.err("ERR shiftlock-proxy supports SET only as a lock acquire: SET key token NX [PX ms|EX s]. " +
			"XX, GET, KEEPTTL and plain SET would overwrite a lock; use LOCK.EXTEND or PEXPIRE to extend one")
		return
	}
	key, token := keyToken(args[1], args[2])
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: a.ttl, Wait: s.cfg.Wait.BudgetFor(&s.retries, &st.habit, key, token, a.ttl), Queue: st.queueHook}
	st.acquire(key, token, opt, func(w *replyWriter, _ uint64, ok bool, err error) {
		switch {
		case err != nil:
			w.err(errReply(err))
		case ok:
			w.status("OK")
		default:
			w.null()
		}
	})
}

// keyToken copies a key and a token out of the input buffer with one
// allocation: the hold keeps both for as long as it lasts.
func keyToken(key, token []byte) (string, string) {
	var buf [128]byte
	kt := string(append(append(buf[:0], key...), token...))
	return kt[:len(key)], kt[len(key):]
}

// acquire takes key for token and has reply answer. Over in-process memory
// nodes, on the event loop or a redcon connection's goroutine, an
// exclusive acquire is answered here or, queued behind a holder, deferred
// (acquireInline). On the event loop with memory nodes across the network
// (where every verb is a round trip) it starts on the loop's doorbell
// (Map.AcquireAsync) and its reply is deferred: the loop rings the
// doorbell once for every command it read in one pass, and renders the
// reply when the acquire is done. Otherwise the acquire runs here, on the
// table the command has (on the loop, a wait then runs the command again
// on a goroutine).
func (st *connState) acquire(key, token string, opt lockmap.AcquireOptions, answer func(w *replyWriter, fence uint64, ok bool, err error)) {
	m := st.srv.cfg.Map
	if st.inline && opt.Mode == shiftlock.Exclusive {
		st.acquireInline(key, token, opt, answer)
		return
	}
	if st.bell != nil && opt.Mode == shiftlock.Exclusive {
		st.deferred = true
		done := st.done
		offLoop.Add(1)
		m.AcquireAsync(st.bell, st.base, key, token, opt, func(fence uint64, ok bool, err error) {
			offLoop.Add(-1)
			done(func(w *replyWriter) { st.acquired(w, key, token, answer, fence, ok, err) })
		})
		return
	}
	fence, ok, err := st.table().AcquireKey(st.base, key, token, opt)
	if errors.Is(err, lockmap.ErrWouldBlock) {
		st.lockErr(err)
		return
	}
	st.acquired(&st.w, key, token, answer, fence, ok, err)
}

// acquired has answer reply to an acquire of key for token. A refusal makes
// the token's next try a retry (Retries), which the wait policy reads.
func (st *connState) acquired(w *replyWriter, key, token string, answer func(*replyWriter, uint64, bool, error), fence uint64, ok bool, err error) {
	if !ok && err == nil {
		st.srv.retries.Refused(key, token)
	}
	answer(w, fence, ok, err)
}

// acquireInline is acquire on the loop over in-process memory nodes
// (Loop.AcquireOrQueue): an acquire that found the entry free, or that
// tried once, is answered here, as a command that ran on the loop. One
// that queued behind a holder has its atomic in the queue already: it
// waits for the handover on a goroutine, and its reply is deferred. It is
// not run again; a held key costs the one atomic that enqueues.
func (st *connState) acquireInline(key, token string, opt lockmap.AcquireOptions, answer func(*replyWriter, uint64, bool, error)) {
	fence, ok, q, err := st.loop.AcquireOrQueue(st.base, key, token, opt)
	if q == nil {
		if errors.Is(err, lockmap.ErrWouldBlock) {
			st.lockErr(err)
			return
		}
		st.acquired(&st.w, key, token, answer, fence, ok, err)
		return
	}
	// Only a queued acquire needs the reply as a closure; building it up
	// front cost every acquire an allocation.
	reply := func(w *replyWriter, fence uint64, ok bool, err error) {
		st.acquired(w, key, token, answer, fence, ok, err)
	}
	st.deferred = true
	if st.loopWaits != nil && st.waitOnLoop(q, st.pend, opt.Queue, reply) {
		return
	}
	done, ctx := st.done, st.base
	queuedInline.Add(1)
	st.srv.waiters.run(func() {
		fence, ok, err := q.Wait(ctx, nil)
		queuedInline.Add(-1)
		done(func(w *replyWriter) { reply(w, fence, ok, err) })
	})
}

// release releases key for token: through the loop's doorbell when there is
// one (the reply does not wait for the atomic, which is posted before any
// later operation of this proxy), else here.
func (st *connState) release(key, token string) bool {
	if st.bell != nil {
		return st.srv.cfg.Map.ReleaseAsync(st.bell, key, token)
	}
	return st.srv.cfg.Map.Release(key, token)
}

// delete is release for every token (DEL).
func (st *connState) delete(key string) int {
	if st.bell != nil {
		return st.srv.cfg.Map.DeleteAsync(st.bell, key)
	}
	return st.srv.cfg.Map.Delete(key)
}

// lookup wraps Map.Lookup and answers the caller with an error when the key
// is held here under a lease that is gone.
func (s *Server) lookup(st *connState, key string) (lockmap.Info, bool) {
	in, err := st.table().Lookup(st.base, key)
	if err != nil {
		st.lockErr(err)
		return in, false
	}
	if in.State == lockmap.HeldHere && in.Lost != nil {
		st.w.err("LOCKLOST the lease covering this lock has lapsed; it may have been granted to someone else: " + in.Lost.Error())
		return in, false
	}
	return in, true
}

func (s *Server) cmdGet(st *connState, args [][]byte) {
	in, ok := s.lookup(st, string(args[1]))
	if !ok {
		return
	}
	switch in.State {
	case lockmap.HeldHere:
		st.w.bulk(in.Holders[0].Token)
	case lockmap.HeldElsewhere:
		st.w.bulk(HeldElsewhere)
	default:
		st.w.null()
	}
}

// cmdDel releases keys whoever holds them here. A key held through another
// proxy cannot be released from here; rather than answer 0 ("no such key"),
// the whole command fails with a reason, before anything is released.
func (s *Server) cmdDel(st *connState, args [][]byte) {
	for _, k := range args[1:] {
		in, err := st.table().Lookup(st.base, string(k))
		if err != nil {
			st.lockErr(err)
			return
		}
		if in.State == lockmap.HeldElsewhere {
			st.w.err(fmt.Sprintf("ERR key '%s' is held through another proxy; release it through the proxy that granted it", wire.OneLine(string(k))))
			return
		}
	}
	var n int64
	for _, k := range args[1:] {
		if st.delete(string(k)) > 0 {
			n++
		}
	}
	st.w.int(n)
}

func (s *Server) cmdExists(st *connState, args [][]byte) {
	var n int64
	for _, k := range args[1:] {
		in, err := st.table().Lookup(st.base, string(k))
		if err != nil {
			st.lockErr(err)
			return
		}
		if in.State != lockmap.Free {
			n++
		}
	}
	st.w.int(n)
}

func (s *Server) cmdPExpire(st *connState, args [][]byte) { s.expire(st, args, time.Millisecond) }
func (s *Server) cmdExpire(st *connState, args [][]byte)  { s.expire(st, args, time.Second) }

// expire is PEXPIRE/EXPIRE key n [NX|XX|GT|LT] on a key held here.
func (s *Server) expire(st *connState, args [][]byte, unit time.Duration) {
	n, ok := parseInteger(args[2])
	if !ok {
		st.w.err("ERR value is not an integer or out of range")
		return
	}
	if n > math.MaxInt64/int64(unit) {
		st.w.err(fmt.Sprintf("ERR invalid expire time in '%s' command", strings.ToLower(string(args[0]))))
		return
	}
	cond := ""
	if len(args) == 4 {
		cond = strings.ToUpper(string(args[3]))
		if cond != "NX" && cond != "XX" && cond != "GT" && cond != "LT" {
			st.w.err(fmt.Sprintf("ERR Unsupported option %s", wire.OneLine(string(args[3]))))
			return
		}
	}
	key := string(args[1])
	in, ok := s.lookup(st, key)
	if !ok {
		return
	}
	switch in.State {
	case lockmap.Free:
		st.w.int(0)
		return
	case lockmap.HeldElsewhere:
		st.w.err(fmt.Sprintf("ERR key '%s' is held through another proxy; extend it through the proxy that granted it", wire.OneLine(key)))
		return
	}
	ttl := time.Duration(n) * unit
	cur := in.Holders[0].TTL // 0 = persistent, which Redis treats as infinite
	switch cond {
	case "NX":
		if cur != 0 {
			st.w.int(0)
			return
		}
	case "XX":
		if cur == 0 {
			st.w.int(0)
			return
		}
	case "GT":
		if cur == 0 || ttl <= cur {
			st.w.int(0)
			return
		}
	case "LT":
		if cur != 0 && ttl >= cur {
			st.w.int(0)
			return
		}
	}
	done, err := st.table().ExtendAny(st.base, key, ttl)
	if err != nil {
		st.lockErr(err)
		return
	}
	st.w.int(b2i(done))
}

func (s *Server) cmdPTTL(st *connState, args [][]byte) { s.ttl(st, args, time.Millisecond) }
func (s *Server) cmdTTL(st *connState, args [][]byte)  { s.ttl(st, args, time.Second) }

// ttl answers -2 for a free key and -1 for one held without a TTL. A key
// held through another proxy answers -1: it exists, and its TTL is known
// only to the proxy that granted it.
func (s *Server) ttl(st *connState, args [][]byte, unit time.Duration) {
	in, ok := s.lookup(st, string(args[1]))
	if !ok {
		return
	}
	switch {
	case in.State == lockmap.Free:
		st.w.int(-2)
	case in.State == lockmap.HeldElsewhere || in.Holders[0].TTL == 0:
		st.w.int(-1)
	default:
		// As Redis: PTTL truncates to the millisecond, and TTL rounds
		// that to the nearest second. A hold in force may answer 0.
		ms := int64(in.Holders[0].TTL / time.Millisecond)
		if unit == time.Second {
			ms = (ms + 500) / 1000
		}
		st.w.int(ms)
	}
}

func (s *Server) cmdPersist(st *connState, args [][]byte) {
	st.w.int(b2i(s.cfg.Map.Persist(string(args[1]))))
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
