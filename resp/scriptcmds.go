package resp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// scriptOps is the scripts.Ops of one connection: it runs a recognised
// script's calls against the lock table under the connection's current
// context.
//
// On the event loop they go to its lockmap.Loop: once a call
// answers ErrWouldBlock, the script is to run again from the start on a
// goroutine, so every later call refuses at once and the rest of the
// script changes nothing here.
type scriptOps struct {
	s  *Server
	st *connState
}

var _ scripts.Ops = (*scriptOps)(nil)

// note records ErrWouldBlock for the event loop, and gives any other
// error the text the same error gets as a command's reply (errReply), so
// that a script's client sees the same TRYAGAIN or limit as SET's.
func (o *scriptOps) note(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, lockmap.ErrWouldBlock) {
		o.st.blocked = true
		return err
	}
	return replyError{err}
}

// replyError is a lock-table error as a script returns it: its text is
// the command reply's, code included (scripts keep a code they are given).
type replyError struct{ err error }

func (e replyError) Error() string { return errReply(e.err) }
func (e replyError) Unwrap() error { return e.err }

func (o *scriptOps) Get(key string) (string, bool) {
	if o.st.blocked {
		return "", false
	}
	in, err := o.st.table().Lookup(o.st.base, key)
	if err != nil {
		_ = o.note(err)
		return "", false
	}
	switch in.State {
	case lockmap.HeldHere:
		return in.Holders[0].Token, true
	case lockmap.HeldElsewhere:
		return HeldElsewhere, true
	}
	return "", false
}

func (o *scriptOps) Acquire(keys []string, token string, ttl time.Duration, reentrant bool) (bool, error) {
	if o.st.blocked {
		return false, lockmap.ErrWouldBlock
	}
	if len(keys) == 0 {
		return true, nil
	}
	if o.st.queued.q != nil {
		if mine, ok, err := o.st.queued.wait(o.st, keys, token); mine {
			if !ok && err == nil {
				o.s.retries.Refused(keys[0], token)
			}
			return ok, o.note(err)
		}
	}
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: ttl, Reentrant: reentrant, Wait: o.s.cfg.Wait.BudgetFor(&o.s.retries, &o.st.habit, keys[0], token, ttl), Queue: o.st.queueHook}
	if o.st.inline && len(keys) == 1 {
		// On the loop over in-process memory nodes, a held key queues from
		// here, with the one atomic, and the script runs again off the loop
		// (ErrWouldBlock), where this Acquire waits for the handover.
		_, ok, q, err := o.st.loop.AcquireOrQueue(o.st.base, keys[0], token, opt)
		if q != nil {
			o.st.queued = queuedAcquire{q: q, key: keys[0], token: token}
			err = lockmap.ErrWouldBlock
		}
		if !ok && err == nil {
			o.s.retries.Refused(keys[0], token)
		}
		return ok, o.note(err)
	}
	_, ok, err := o.st.table().Acquire(o.st.base, keys, token, opt)
	if !ok && err == nil {
		o.s.retries.Refused(keys[0], token) // its next try is a retry
	}
	return ok, o.note(err)
}

func (o *scriptOps) Release(key, token string) (bool, error) {
	if o.st.blocked {
		return false, lockmap.ErrWouldBlock
	}
	return o.st.release(key, token), nil
}

func (o *scriptOps) Extend(key, token string, ttl time.Duration) (bool, error) {
	if o.st.blocked {
		return false, lockmap.ErrWouldBlock
	}
	ok, err := o.st.table().Extend(o.st.base, key, token, ttl)
	return ok, o.note(err)
}

func (o *scriptOps) Reassign(keys, from []string, token string, ttl time.Duration) (bool, error) {
	if o.st.blocked {
		return false, lockmap.ErrWouldBlock
	}
	ok, err := o.st.table().Reassign(o.st.base, keys, from, token, ttl)
	return ok, o.note(err)
}

func (o *scriptOps) PTTL(key string) (int64, error) {
	if o.st.blocked {
		return 0, lockmap.ErrWouldBlock
	}
	in, err := o.st.table().Lookup(o.st.base, key)
	if err != nil {
		return 0, o.note(err)
	}
	switch {
	case in.State == lockmap.Free:
		return -2, nil
	case in.State == lockmap.HeldElsewhere || in.Holders[0].TTL == 0:
		return -1, nil
	}
	return in.Holders[0].TTL.Milliseconds(), nil
}

// splitKeys reads "numkeys key... arg..." as EVAL and EVALSHA take them,
// appending to keys and argv (reused buffers).
func splitKeys(args [][]byte, keys, argv []string) ([]string, []string, string) {
	n, err := strconv.Atoi(string(args[0]))
	if err != nil {
		return keys, argv, "ERR value is not an integer or out of range"
	}
	if n < 0 {
		return keys, argv, "ERR Number of keys can't be negative"
	}
	if n > len(args)-1 {
		return keys, argv, "ERR Number of keys can't be greater than number of args"
	}
	for _, k := range args[1 : 1+n] {
		keys = append(keys, string(k))
	}
	for _, a := range args[1+n:] {
		argv = append(argv, string(a))
	}
	return keys, argv, ""
}

func (s *Server) runScript(st *connState, sc *scripts.Script, rest [][]byte) {
	keys, argv, e := splitKeys(rest, st.keys[:0], st.argv[:0])
	st.keys, st.argv = keys, argv
	if e != "" {
		st.w.err(e)
		return
	}
	if sc.Patient {
		st.habit.Patient()
	}
	st.w.reply(sc.Exec(&st.ops, keys, argv))
	// Drop the strings, keep the space.
	clear(keys)
	clear(argv)
}

func (s *Server) remember(sha string, sc *scripts.Script) {
	s.scriptsMu.Lock()
	s.loaded[sha] = sc
	s.scriptsMu.Unlock()
}

func (s *Server) findSHA(sha string) (*scripts.Script, bool) {
	sha = strings.ToLower(sha)
	s.scriptsMu.RLock()
	sc, ok := s.loaded[sha]
	s.scriptsMu.RUnlock()
	if ok {
		return sc, true
	}
	// A catalogued script's exact SHA works without a prior load: clients
	// that try EVALSHA first skip the NOSCRIPT round trip.
	return scripts.LookupSHA(sha)
}

// findSHABytes is findSHA for EVALSHA's argument, without making a string
// of it: a SHA1 is 40 hex digits, lower-cased here into the connection's
// scratch buffer, and map lookups by string(bytes) do not copy.
func (s *Server) findSHABytes(st *connState, sha []byte) (*scripts.Script, bool) {
	if len(sha) != len(st.lsha) {
		return nil, false // every name in both tables is a 40-digit SHA1
	}
	b := st.lsha[:]
	for i, ch := range sha {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b[i] = ch
	}
	s.scriptsMu.RLock()
	sc, ok := s.loaded[string(b)]
	s.scriptsMu.RUnlock()
	if ok {
		return sc, true
	}
	return scripts.LookupLowerSHA(b)
}

// load resolves a script body, by its SHA or else by recognising it, and
// remembers it for EVALSHA. An unsupported body is answered here.
func (s *Server) load(st *connState, body string) (string, *scripts.Script, bool) {
	sha := scripts.SHA1Hex(body)
	sc, ok := s.findSHA(sha)
	if !ok {
		if sc, ok = scripts.Recognize(body); !ok {
			st.w.reply(scripts.UnsupportedScriptError(sha))
			return "", nil, false
		}
	}
	s.remember(sha, sc)
	return sha, sc, true
}

func (s *Server) cmdEval(st *connState, args [][]byte) {
	if _, sc, ok := s.load(st, string(args[1])); ok {
		s.runScript(st, sc, args[2:])
	}
}

func (s *Server) cmdEvalSHA(st *connState, args [][]byte) {
	sc, ok := s.findSHABytes(st, args[1])
	if !ok {
		st.w.err("NOSCRIPT No matching script. Please use EVAL.")
		return
	}
	s.runScript(st, sc, args[2:])
}

// cmdScript is SCRIPT LOAD|EXISTS|FLUSH. LOAD of a script the proxy does not
// know fails at once, naming what is supported, rather than at the first
// EVALSHA.
func (s *Server) cmdScript(st *connState, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "load":
		if len(args) != 3 {
			st.w.err("ERR wrong number of arguments for 'script|load' command")
			return
		}
		if sha, _, ok := s.load(st, string(args[2])); ok {
			st.w.bulk(sha)
		}
	case "exists":
		st.w.array(len(args) - 2)
		for _, a := range args[2:] {
			_, ok := s.findSHA(string(a))
			st.w.int(b2i(ok))
		}
	case "flush":
		s.scriptsMu.Lock()
		s.loaded = map[string]*scripts.Script{}
		s.scriptsMu.Unlock()
		st.w.status("OK")
	default:
		st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try SCRIPT HELP.", wire.OneLine(string(args[1]))))
	}
}

// queuedAcquire is a script's acquire queued on the loop, for the same
// script's run off the loop to wait on (connState.queued).
type queuedAcquire struct {
	q          *lockmap.Queued
	key, token string
}

// wait finishes the queued acquire if keys and token are what it queued
// for (mine); a script that asks for something else abandons it first.
func (qa *queuedAcquire) wait(st *connState, keys []string, token string) (mine, ok bool, err error) {
	q := qa.q
	if len(keys) != 1 || keys[0] != qa.key || token != qa.token {
		qa.drop(st)
		return false, false, nil
	}
	*qa = queuedAcquire{}
	_, ok, err = q.Wait(st.base, st.queueHook)
	return true, ok, err
}

// drop abandons a queued acquire that its script's run off the loop did not
// ask for again: the lock, when it comes, is released in the background.
// Its wait reports to no reply-queue entry: the one it was queued with is
// the loop's entry for a later command.
func (qa *queuedAcquire) drop(st *connState) {
	if qa.q == nil {
		return
	}
	q := qa.q
	*qa = queuedAcquire{}
	ctx, cancel := context.WithCancel(st.base)
	cancel()
	_, _, _ = q.Wait(ctx, unwatched)
}

// unwatched is a lockmap Queue hook that watches nothing.
func unwatched(ctx context.Context) (context.Context, func()) { return ctx, func() {} }
