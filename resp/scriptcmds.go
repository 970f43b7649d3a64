package resp

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// scriptOps runs a recognised script's calls against the lock table, on
// behalf of one connection.
type scriptOps struct {
	s   *Server
	st  *connState
	ctx context.Context
}

func (o scriptOps) Get(key string) (string, bool) {
	in, err := o.s.cfg.Map.Lookup(o.ctx, key)
	if err != nil {
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

func (o scriptOps) Acquire(keys []string, token string, ttl time.Duration, reentrant bool) (bool, error) {
	if len(keys) == 0 {
		return true, nil
	}
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: ttl, Reentrant: reentrant, Wait: o.s.cfg.Wait.Budget(keys[0], ttl), Queue: o.st.queue}
	_, ok, err := o.s.cfg.Map.Acquire(o.ctx, keys, token, opt)
	return ok, err
}

func (o scriptOps) Release(key, token string) (bool, error) {
	return o.s.cfg.Map.Release(key, token), nil
}

func (o scriptOps) Extend(key, token string, ttl time.Duration) (bool, error) {
	return o.s.cfg.Map.Extend(o.ctx, key, token, ttl)
}

func (o scriptOps) PTTL(key string) (int64, error) {
	in, err := o.s.cfg.Map.Lookup(o.ctx, key)
	if err != nil {
		return 0, err
	}
	switch {
	case in.State == lockmap.Free:
		return -2, nil
	case in.State == lockmap.HeldElsewhere || in.Holders[0].TTL == 0:
		return -1, nil
	}
	return in.Holders[0].TTL.Milliseconds(), nil
}

// splitKeys reads "numkeys key... arg..." as EVAL and EVALSHA take them.
func splitKeys(args [][]byte) (keys, argv []string, e string) {
	n, err := strconv.Atoi(string(args[0]))
	if err != nil {
		return nil, nil, "ERR value is not an integer or out of range"
	}
	if n < 0 {
		return nil, nil, "ERR Number of keys can't be negative"
	}
	if n > len(args)-1 {
		return nil, nil, "ERR Number of keys can't be greater than number of args"
	}
	for _, k := range args[1 : 1+n] {
		keys = append(keys, string(k))
	}
	for _, a := range args[1+n:] {
		argv = append(argv, string(a))
	}
	return keys, argv, ""
}

func (s *Server) runScript(st *connState, sc *Script, rest [][]byte) {
	keys, argv, e := splitKeys(rest)
	if e != "" {
		st.w.err(e)
		return
	}
	st.w.reply(sc.Exec(scriptOps{s, st, st.ctx}, keys, argv))
}

func (s *Server) remember(sha string, sc *Script) {
	s.scriptsMu.Lock()
	s.loaded[sha] = sc
	s.scriptsMu.Unlock()
}

func (s *Server) findSHA(sha string) (*Script, bool) {
	sha = strings.ToLower(sha)
	s.scriptsMu.RLock()
	sc, ok := s.loaded[sha]
	s.scriptsMu.RUnlock()
	if ok {
		return sc, true
	}
	// A catalogued script's exact SHA works without a prior load: clients
	// that try EVALSHA first skip the NOSCRIPT round trip.
	return LookupSHA(sha)
}

// load resolves a script body, by its SHA or else by recognising it, and
// remembers it for EVALSHA. An unsupported body is answered here.
func (s *Server) load(st *connState, body string) (string, *Script, bool) {
	sha := SHA1Hex(body)
	sc, ok := s.findSHA(sha)
	if !ok {
		if sc, ok = Recognize(body); !ok {
			st.w.reply(UnsupportedScriptError(sha))
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
	sc, ok := s.findSHA(string(args[1]))
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
		s.loaded = map[string]*Script{}
		s.scriptsMu.Unlock()
		st.w.status("OK")
	default:
		st.w.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try SCRIPT HELP.", oneLine(string(args[1]))))
	}
}
