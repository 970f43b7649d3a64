package resp

import (
	"fmt"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

func parseMillis(b []byte) (time.Duration, bool) {
	n, ok := parseInteger(b)
	if !ok || n < 0 || n > 1<<40 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// lockOpts are the options LOCK.ACQUIRE and LOCK.RANGE.ACQUIRE share:
// [SHARED] [PX ms|EX s] [WAIT ms], in any order and case.
type lockOpts struct {
	shared  bool
	ttl     time.Duration
	wait    time.Duration
	hasWait bool
}

// parseLockOpts reads the options from args; on a bad one it returns the
// error reply, naming the command and its syntax. These are the project's
// own commands, with no Redis precedent for a repeated option, so an option
// given twice, or PX with EX, is a syntax error rather than a guess at what
// the client meant.
func parseLockOpts(args [][]byte, cmd, syntax string) (lockOpts, string) {
	var o lockOpts
	var seen struct{ shared, ttl, wait bool }
	twice := func(opt string) (lockOpts, string) {
		return o, fmt.Sprintf("ERR syntax error: %s given twice (%s)", opt, syntax)
	}
	for i := 0; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch opt {
		case "SHARED":
			if seen.shared {
				return twice(opt)
			}
			seen.shared, o.shared = true, true
		case "PX", "EX", "WAIT":
			if i+1 >= len(args) {
				return o, "ERR syntax error"
			}
			if opt == "WAIT" && seen.wait {
				return twice(opt)
			}
			if opt != "WAIT" && seen.ttl {
				return o, fmt.Sprintf("ERR syntax error: one TTL at most, PX or EX (%s)", syntax)
			}
			if opt == "WAIT" {
				d, ok := parseMillis(args[i+1])
				if !ok {
					return o, "ERR value is not an integer or out of range"
				}
				o.wait, o.hasWait, seen.wait = d, true, true
				i++
				continue
			}
			d, fault := parseTTL(opt, args[i+1], maxLockTTLArg, nil)
			switch fault {
			case ttlOK:
			case ttlZero, ttlTooLong:
				return o, "ERR invalid expire time in '" + cmd + "' command"
			default:
				return o, "ERR value is not an integer or out of range"
			}
			o.ttl, seen.ttl = d, true
			i++
		default:
			return o, fmt.Sprintf("ERR syntax error near '%s' (%s)", wire.OneLine(string(args[i])), syntax)
		}
	}
	return o, ""
}

// waitFor is the wait budget: WAIT if given, else key's wait policy for
// token's try on st's connection.
func (s *Server) waitFor(st *connState, key, token string, o lockOpts) time.Duration {
	if o.hasWait {
		return o.wait
	}
	return s.cfg.Wait.BudgetFor(&s.retries, &st.habit, key, token, o.ttl)
}

// cmdLockAcquire is LOCK.ACQUIRE key token [SHARED] [PX ms|EX s] [WAIT ms].
// It answers the grant's fencing token, or nil if the key stayed held for the
// whole wait. Without WAIT the key's wait policy applies.
func (s *Server) cmdLockAcquire(st *connState, args [][]byte) {
	key, token := keyToken(args[1], args[2])
	o, e := parseLockOpts(args[3:], "lock.acquire", "LOCK.ACQUIRE key token [SHARED] [PX ms] [WAIT ms]")
	if e != "" {
		st.w.err(e)
		return
	}
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: o.ttl, Wait: s.waitFor(st, key, token, o), Queue: st.queueHook}
	if o.shared {
		opt.Mode = shiftlock.Shared
	}
	st.acquire(key, token, opt, func(w *replyWriter, fence uint64, ok bool, err error) {
		switch {
		case err != nil:
			w.err(errReply(err))
		case !ok:
			w.null()
		default:
			w.int(int64(fence))
		}
	})
}

func (s *Server) cmdLockRelease(st *connState, args [][]byte) {
	st.w.int(b2i(st.release(string(args[1]), string(args[2]))))
}

// cmdLockExtend is LOCK.EXTEND key token PX ms.
func (s *Server) cmdLockExtend(st *connState, args [][]byte) {
	unit := strings.ToUpper(string(args[3]))
	d, fault := time.Duration(0), ttlNotInteger
	if unit == "PX" || unit == "EX" {
		d, fault = parseTTL(unit, args[4], maxLockTTLArg, nil)
	}
	switch fault {
	case ttlOK, ttlZero: // 0 goes to the lock table, which answers it
	case ttlTooLong:
		st.w.err("ERR invalid expire time in 'lock.extend' command")
		return
	default:
		st.w.err("ERR syntax error (LOCK.EXTEND key token PX ms)")
		return
	}
	done, err := st.table().Extend(st.base, string(args[1]), string(args[2]), d)
	if err != nil {
		st.lockErr(err)
		return
	}
	st.w.int(b2i(done))
}

// cmdLockInfo describes a key: where its lock lives, who holds it here, and
// the lock entry itself when it is not held here.
func (s *Server) cmdLockInfo(st *connState, args [][]byte) {
	in, err := st.table().Lookup(st.base, string(args[1]))
	if err != nil {
		st.lockErr(err)
		return
	}
	lease := "ok"
	if in.Lost != nil {
		lease = "lost: " + in.Lost.Error()
	}
	w := &st.w
	w.mapHeader(8)
	w.bulkField("key", clientKey(in.Key))
	w.bulkField("state", in.State.String())
	w.bulkField("memnode", in.Domain)
	w.intField("entry", int64(in.Entry))
	w.bulkField("lease", lease)
	w.bulk("holders")
	w.array(len(in.Holders))
	for _, h := range in.Holders {
		w.mapHeader(4)
		w.bulkField("token", h.Token)
		w.bulkField("mode", h.Mode.String())
		w.intField("fence", int64(h.Fence))
		ttl := int64(-1) // none
		if h.TTL != 0 {
			ttl = h.TTL.Milliseconds()
		}
		w.intField("ttl_ms", ttl)
	}
	w.bulk("queue_tail")
	if in.State == lockmap.HeldHere {
		w.null() // not read: the holders above say what matters
	} else {
		w.bulk(in.Lock.Tail().String())
	}
	w.intField("readers", int64(in.Lock.Readers()))
}
