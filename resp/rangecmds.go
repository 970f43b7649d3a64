package resp

import (
	"strconv"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rangelock"
)

const rangeAcquireSyntax = "LOCK.RANGE.ACQUIRE key start end token [SHARED] [PX ms] [WAIT ms]"

// parseSpan reads start and end of a span [start, end).
func parseSpan(a, b []byte) (l, r uint64, ok bool) {
	l, err1 := strconv.ParseUint(string(a), 10, 64)
	r, err2 := strconv.ParseUint(string(b), 10, 64)
	return l, r, err1 == nil && err2 == nil && l < r
}

// cmdLockRangeAcquire is LOCK.RANGE.ACQUIRE key start end token [SHARED]
// [PX ms] [WAIT ms]: it locks [start, end) of key's range lock, exclusive
// unless SHARED, and answers the grant's fencing token, or nil if the span
// stayed taken for the whole wait. Without WAIT the key's wait policy
// applies.
func (s *Server) cmdLockRangeAcquire(st *connState, args [][]byte) {
	key, token := string(args[1]), string(args[4])
	l, r, ok := parseSpan(args[2], args[3])
	if !ok {
		st.w.err("ERR start and end must be integers with start < end (" + rangeAcquireSyntax + ")")
		return
	}
	o, e := parseLockOpts(args[5:], "lock.range.acquire", rangeAcquireSyntax)
	if e != "" {
		st.w.err(e)
		return
	}
	mode := rangelock.Exclusive
	if o.shared {
		mode = rangelock.Shared
	}
	fence, ok, err := st.table().RangeAcquire(st.base, key, token, l, r, mode, o.ttl, s.rangeWait(key, o))
	switch {
	case err != nil:
		st.lockErr(err)
	case !ok:
		st.w.null()
	default:
		st.w.int(int64(fence))
	}
}

// cmdLockRangeRelease is LOCK.RANGE.RELEASE key start end token: 1 if token
// held exactly that span of key here, else 0.
func (s *Server) cmdLockRangeRelease(st *connState, args [][]byte) {
	l, r, ok := parseSpan(args[2], args[3])
	if !ok {
		st.w.err("ERR start and end must be integers with start < end (LOCK.RANGE.RELEASE key start end token)")
		return
	}
	st.w.int(b2i(s.cfg.Map.RangeRelease(string(args[1]), string(args[4]), l, r)))
}

// cmdLockRangeInfo describes key's range lock: its tree, the space spans
// must lie in, and the spans held through this proxy.
func (s *Server) cmdLockRangeInfo(st *connState, args [][]byte) {
	in, err := s.cfg.Map.RangeLookup(string(args[1]))
	if err != nil {
		st.lockErr(err)
		return
	}
	w := &st.w
	w.mapHeader(5)
	w.bulkField("key", clientKey(in.Key))
	w.bulkField("memnode", in.Domain)
	w.intField("tree", in.Tree) // -1: the name has no tree while nobody here uses it
	w.intField("units", int64(in.Units))
	w.bulk("holders")
	w.array(len(in.Holders))
	for _, h := range in.Holders {
		w.mapHeader(6)
		w.bulkField("token", h.Token)
		w.intField("start", int64(h.L))
		w.intField("end", int64(h.R))
		w.bulkField("mode", h.Mode.String())
		w.intField("fence", int64(h.Fence))
		w.intField("ttl_ms", h.TTLms)
	}
}

// rangeWait is a range acquire's wait budget: WAIT if given, else the key's
// wait policy, first tries included (a range lock's queue is not a point
// lock's: a try of a span waits for its conflicting holders to go).
func (s *Server) rangeWait(key string, o lockOpts) time.Duration {
	if o.hasWait {
		return o.wait
	}
	return s.cfg.Wait.Budget(key, o.ttl)
}
